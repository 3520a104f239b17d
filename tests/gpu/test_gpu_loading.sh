#!/usr/bin/env bash
# test_gpu_loading.sh HORA LIBHORA TESTBIN GPU_SO NEEDS_ABSENT DATA_DIR
#
# The same build runs with and without CUDA (gpu/README.md):
#   1. libhora.so, hora and a test binary have no NEEDED entry for a CUDA
#      library (libcudart, libcublas, libnccl, libcuda); in a CUDA build they
#      are all in libhora_gpu.so (GPU_SO; "-" when not compiled);
#   2. `hora --version` runs and prints the version and the feature line;
#   3. the machine without CUDA, played twice: the dynamic loader told to
#      ignore ld.so.cache, so that libcudart.so.13 is not found; and a copy of
#      hora next to a libhora_gpu.so that cannot load (NEEDS_ABSENT: it needs
#      a library that is nowhere): --version and gpu-info name the file and
#      the reason, `hora train` still trains on the CPU, and
#      `--set train.device=cuda` is refused (exit 2) with that reason.
set -uo pipefail
HORA="$1" LIBHORA="$2" TESTBIN="$3" GPU_SO="$4" ABSENT="$5" DATA="$6"
command -v readelf >/dev/null || { echo "SKIP: readelf missing (binutils)"; exit 77; }
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() { # name, condition-result
  if [[ $2 == 0 ]]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
has() { grep -qF -- "$2" "$1"; } # file, text
CUDA_LIBS='\[lib(cudart|cublas|cublasLt|nccl|cuda)\.so'

# 1. no CUDA library is needed to start
for f in "$LIBHORA" "$HORA" "$TESTBIN"; do
  name=$(basename "$f")
  all=$(readelf -d "$f" | grep NEEDED)
  needed=$(grep -E "$CUDA_LIBS" <<<"$all")
  [[ -n $all && -z $needed ]]; check "$name needs no CUDA library" $?
  [[ -z $needed ]] || echo "$needed" | sed 's/^/  | /'
done
if [[ $GPU_SO != - ]]; then
  [[ $(readelf -d "$GPU_SO" | grep NEEDED) == *libcudart.so* ]]
  check "libhora_gpu.so is the one that needs libcudart" $?
fi

# 2. hora --version: what was compiled and what this machine has
"$HORA" --version >"$T/v" 2>&1; rc=$?
sed 's/^/  | /' "$T/v"
[[ $rc == 0 ]]; check "hora --version exits 0" $?
grep -qE '^hora [0-9]+\.[0-9]+\.[0-9]+$' "$T/v"; check "first line is the version" $?
grep -qE '^features: io_uring \(liburing [0-9.]+\) (yes|no: .+); cuda: ' "$T/v"
check "feature line lists io_uring and cuda" $?
if [[ $GPU_SO == - ]]; then
  has "$T/v" "; cuda: not compiled"; check "cuda: not compiled" $?
else
  grep -qE '; cuda: compiled \(CUDA [0-9.]+, NCCL [0-9.]+\), ' "$T/v"
  check "cuda: compiled, with the versions" $?
  # on this build machine the CUDA libraries are installed: it loads
  if has "$T/v" "not available: "; then
    echo "  (libhora_gpu.so does not load here; checking the reason is given)"
    has "$T/v" "cannot load: "; check "not available, with dlerror's reason" $?
  else
    has "$T/v" "libhora_gpu.so loaded from $(cd "$(dirname "$GPU_SO")" && pwd)"
    check "libhora_gpu.so loaded from the build directory" $?
    grep -qE ', [0-9]+ devices?' "$T/v"; check "device count" $?
  fi
fi

# 3. the real libhora_gpu.so where libcudart.so cannot be found: the dynamic
# loader run with --inhibit-cache ignores ld.so.cache, which is how the CUDA
# libraries are found on a usual install (/usr/local/cuda/lib64 is not a
# default directory). The old build, linked against libcudart, does not start.
LDSO=$(readelf -l "$HORA" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
if [[ $GPU_SO != - && -x $LDSO ]]; then
  "$LDSO" --inhibit-cache "$HORA" --version >"$T/ic" 2>&1; rc=$?
  sed 's/^/  | /' "$T/ic"
  if grep -q "libhora_gpu.so loaded from" "$T/ic"; then
    echo "  (the CUDA libraries are in a default directory here: nothing to hide)"
  else
    [[ $rc == 0 ]]; check "no libcudart: hora --version exits 0" $?
    has "$T/ic" "not available: $GPU_SO: cannot load: libcudart.so"
    check "no libcudart: names libhora_gpu.so and the missing libcudart" $?
  fi
fi

# 4. the machine without CUDA, with a library that cannot load next to hora
if [[ $GPU_SO != - ]]; then
  mkdir "$T/nocuda"
  cp "$HORA" "$T/nocuda/hora"
  cp "$ABSENT" "$T/nocuda/libhora_gpu.so"
  why="$T/nocuda/libhora_gpu.so: cannot load: libhora_test_absent.so.1: cannot open shared object file"
  "$T/nocuda/hora" --version >"$T/nv" 2>&1; rc=$?
  sed 's/^/  | /' "$T/nv"
  [[ $rc == 0 ]]; check "without CUDA: hora --version exits 0" $?
  has "$T/nv" "; cuda: compiled (CUDA"; check "without CUDA: still says compiled" $?
  has "$T/nv" "not available: $why"; check "without CUDA: names the file and the missing library" $?
  "$T/nocuda/hora" gpu-info >"$T/gi" 2>&1; rc=$?
  [[ $rc == 1 ]] && has "$T/gi" "$why"; check "without CUDA: gpu-info exits 1 with the reason" $?
  [[ $rc == 1 ]] || sed 's/^/  | /' "$T/gi"
  # CPU training: the real digits when deploy/get-data.sh has run, else a
  # small IDX set of two classes (0: dark images, 1: bright ones)
  if [[ ! -f $DATA/train-images-idx3-ubyte ]]; then
    DATA="$T/idx"; mkdir "$DATA"
    for s in train:200:'\xc8' t10k:50:'\x32'; do # name:count:count as a byte
      IFS=: read -r name n nb <<<"$s"
      { printf '\x00\x00\x08\x03\x00\x00\x00'"$nb"'\x00\x00\x00\x08\x00\x00\x00\x08'
        for ((i = 0; i < n / 2; i++)); do head -c 64 /dev/zero | tr '\0' '\024'
          head -c 64 /dev/zero | tr '\0' '\334'; done; } >"$DATA/$name-images-idx3-ubyte"
      { printf '\x00\x00\x08\x01\x00\x00\x00'"$nb"
        for ((i = 0; i < n / 2; i++)); do printf '\x00\x01'; done; } >"$DATA/$name-labels-idx1-ubyte"
    done
  fi
  "$T/nocuda/hora" train --data "$DATA" --epochs 1 --hidden 16 --progress lines >"$T/tr" 2>&1; rc=$?
  [[ $rc == 0 ]] && has "$T/tr" "final: val_acc"; check "without CUDA: hora train trains on the CPU" $?
  [[ $rc == 0 ]] || tail -5 "$T/tr" | sed 's/^/  | /'
  # asking for the GPU there is refused up front, with the same reason
  "$T/nocuda/hora" train --data "$DATA" --epochs 1 --set train.device=cuda >"$T/td" 2>&1; rc=$?
  [[ $rc == 2 ]] && has "$T/td" "train.device: cuda is not available here: $why"
  check "without CUDA: train.device=cuda exits 2 with the loader's reason" $?
  [[ $rc == 2 ]] || sed 's/^/  | /' "$T/td"
fi

echo "gpu loading: $pass passed, $fail failed"
[[ $fail == 0 ]]
