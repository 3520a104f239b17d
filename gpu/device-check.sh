#!/usr/bin/env bash
# gpu/device-check.sh - everything issue 16 measures on the lent GPU machine,
# in one run of under 10 minutes: build, GPU tests, CUDA training, the
# training bench and the PyTorch comparison. Every result lands in one
# folder; each step has its own timeout, a failed step is recorded and the
# script goes on.
#
#   gpu/device-check.sh              the device run; results in $OUT (or
#                                    device-out/), summary in summary.txt
#   gpu/device-check.sh --dry-run    its build part on a CPU machine: build
#                                    from .devdeps unpacked into a temporary
#                                    prefix with every file those packages
#                                    installed under /usr hidden (a user+mount
#                                    namespace binds /dev/null over them), then
#                                    the CPU-side GPU tests (they must skip)
#
# Before it: `gpu/devdeps.sh` on a machine with apt (it fills .devdeps/ with
# the .debs and the data sets); the device session carries `.devdeps`
# (about 52 MiB of the 64 MiB a run may carry). Nothing here downloads.
#
# Steps (name: timeout; what it measures, issue 16 acceptance point 2):
#   env        20 s  nvidia-smi, nvcc, torch, glibc versions
#   deps       60 s  gpu/devprefix.sh: .devdeps -> $TMPDIR prefix
#   build     240 s  cmake -DHORA_CUDA=ON, Release, build-gpu/ (-Werror in the dry run)
#   version    20 s  hora --version, hora gpu-info (the plugin loads, 1 device)
#   gputests  120 s  ctest -L gpu: saxpy, CUDA MLP gradients vs the CPU MLP
#                    (relative difference < 1e-4), determinism; ABI v3: device
#                    memory, copies, a size-1 NCCL communicator (every
#                    collective, dtype and op; test_gpu)
#   mnist      90 s  hora train, train.device: cuda, 20 epochs MNIST
#                    (val_acc >= 0.95), metrics in mnist.jsonl
#   fashion   120 s  the same on Fashion-MNIST (val_acc >= 0.87)
#   launch2   120 s  hora launch, 2 workers on the GPU, TCP ring, 20 epochs MNIST
#                    (val_acc >= 0.95, the workers' final crc32 equal)
#   devcoll    60 s  devcoll_prog on the real library: every dtype x op x count
#                    of the collectives on device buffers equal to the host's
#                    (2 processes on the GPU: NCCL takes one rank per GPU, so
#                    staged; and 1 process)
#   devbench   90 s  hora bench allreduce --device cuda, 2 processes, 1K..256M,
#                    and gpu/torch_allreduce.py (torch.distributed Gloo on
#                    CUDA tensors), same run
#   torchcuda  60 s  tests/python/cuda_check.py under hora run -np 2: hora.torch
#                    on CUDA tensors as device buffers, replicas bitwise equal
#   bench     120 s  hora bench train --device cuda at batch 32, 256, 1024
#                    (step/gemm <= 1.3 at 1024), bench-<B>.json
#   torch     180 s  gpu/torch_mlp.py: the same MLP in PyTorch, SGD, batch
#                    32/256/1024, torch.compile off and on, torch.json
#   sanitize   90 s  compute-sanitizer memcheck over test_gpu_mlp
#   summary          gpu/device-summary.py: the acceptance table
#   ctest     120 s  the rest of the suite (-E netns) against this prefix
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
for a in "$@"; do
	case $a in
	--dry-run | --build-only) DRY=1 ;;
	--masked) ;; # internal: re-run inside the namespace
	-h | --help) sed -n '2,40p' "$0"; exit 0 ;;
	*) echo "device-check: unknown argument $a" >&2; exit 2 ;;
	esac
done
DEBS=$ROOT/.devdeps
if [ ! -d "$DEBS" ] || ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
	echo "device-check: no .devdeps/*.deb: run gpu/devdeps.sh on a machine with apt first" >&2
	exit 2
fi

# ---- the dry run: hide the packages' files, then run the build part ------
if [ $DRY = 1 ] && [[ " $* " != *" --masked "* ]]; then
	exec unshare -rm bash "$0" --dry-run --masked
fi
if [[ " $* " == *" --masked "* ]]; then
	# keep what the build tools themselves load (cmake, gcc, nvcc, grep...)
	keep=" "
	for t in cmake ctest ninja make gcc cc cc1 as ld ld.bfd collect2 g++ cc1plus \
		/usr/local/cuda/bin/nvcc /usr/local/cuda/bin/ptxas /usr/local/cuda/bin/cudafe++ \
		/usr/local/cuda/bin/fatbinary /usr/local/cuda/bin/nvlink /usr/local/cuda/nvvm/bin/cicc \
		bash sh grep sed find awk sort readelf dpkg python3 /usr/bin/python3 timeout ldconfig; do
		p=$(command -v "$t" 2>/dev/null || gcc -print-prog-name="$t" 2>/dev/null)
		[ -n "$p" ] && [ -e "$p" ] || continue
		for l in $(ldd "$p" 2>/dev/null | awk '/=>/ {print $3}'); do
			r=$(readlink -f "$l")
			for q in $(dpkg -S "$l" "$r" "${r#/usr}" "/usr${r#/usr}" 2>/dev/null | cut -d: -f1 | tr ',' ' '); do
				keep="$keep$q "
			done
		done
	done
	n=0
	for pkg in $(cat "$DEBS/PACKAGES"); do
		[[ $keep == *" $pkg "* ]] && continue
		dpkg -s "$pkg" >/dev/null 2>&1 || continue
		while read -r f; do
			if [ -f "$f" ] && [ ! -L "$f" ]; then
				mount --bind /dev/null "$f" && n=$((n + 1))
			fi
		done < <(dpkg -L "$pkg")
	done
	echo "device-check --dry-run: $n files of the .devdeps packages hidden under /usr and /lib;" \
		"left visible for the build tools:" $(printf '%s\n' $keep | sort -u | grep -xF -f "$DEBS/PACKAGES")
	[ -s /usr/include/liburing.h ] && { echo "device-check: masking failed" >&2; exit 1; }
fi

OUT=${OUT:-$ROOT/device-out}
[ $DRY = 1 ] && OUT=$ROOT/build-gpu-dry.out
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUM=$OUT/summary.txt
: >"$SUM"
BUILD=$ROOT/build-gpu
if [ $DRY = 1 ]; then
	BUILD=$ROOT/build-gpu-dry
	rm -rf "$BUILD" # the proof is a clean build from the prefix
fi
# a fixed path: a rerun reuses the build, whose cache names it
PREFIX=${TMPDIR:-/tmp}/hora-devprefix
T0=$(date +%s)
HORA=$BUILD/hora
# the tests read data/mnist: the data sets came in .devdeps (data/ is ignored)
[ -e "$ROOT/data" ] || ln -s .devdeps/data "$ROOT/data"

# step NAME TIMEOUT CMD...: output in $OUT/NAME.log, one line in summary.txt
# BUDGET: seconds for the whole run (the device run's command limit is 600):
# a step gets at most what is left, and none starts with under 15 s left
BUDGET=${BUDGET:-570}
[ $DRY = 1 ] && BUDGET=3600
step() {
	local name=$1 limit=$2
	shift 2
	local t=$(date +%s)
	local left=$((BUDGET - (t - T0)))
	if [ $left -lt 15 ]; then
		printf '%-10s %-22s (total %ss)\n' "$name" "not run: no time left" $((t - T0)) | tee -a "$SUM"
		return 1
	fi
	[ $limit -gt $left ] && limit=$left
	echo "== $name (timeout ${limit}s): $*" >>"$OUT/steps.log"
	timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
	local rc=$?
	local what=ok
	[ $rc = 0 ] || what="FAILED rc=$rc"
	[ $rc = 124 ] && what="TIMEOUT after ${limit}s"
	[ $rc = 77 ] && what="skipped"
	printf '%-10s %-22s %4ss  (total %ss)\n' "$name" "$what" $(($(date +%s) - t)) \
		$(($(date +%s) - T0)) | tee -a "$SUM"
	tail -5 "$OUT/$name.log" | sed 's/^/    /'
	return $rc
}

env_info() {
	date -u
	uname -a
	ldd --version | head -1
	nvidia-smi || echo "nvidia-smi: not available"
	/usr/local/cuda/bin/nvcc --version || nvcc --version
	cmake --version | head -1
	command -v ninja && ninja --version
	python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' ||
		echo "python3: no torch"
}

configure_build() {
	# shellcheck disable=SC1091
	. "$PREFIX/env.sh"
	local gen=() nccl=()
	command -v ninja >/dev/null && gen=(-G Ninja)
	# NCCL: the toolkit's, else the one PyTorch ships (pip nvidia-nccl)
	if [ ! -e /usr/local/cuda/include/nccl.h ] && [ ! -e /usr/include/nccl.h ]; then
		local d
		d=$(env -u LD_LIBRARY_PATH python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
		if [ -n "$d" ] && [ -e "$d/include/nccl.h" ]; then
			local lib
			lib=$(ls "$d"/lib/libnccl.so* 2>/dev/null | head -1)
			echo "NCCL from PyTorch's wheel: $d ($lib)"
			nccl=(-DNCCL_INCLUDE_DIR="$d/include" -DNCCL_LIBRARY="$lib")
		else
			echo "no nccl.h under /usr/local/cuda, /usr or PyTorch's nvidia.nccl"
		fi
	fi
	cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DHORA_CUDA=ON \
		-DHORA_WERROR="$WERROR" -DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG" "${nccl[@]}" &&
		grep -E '^(PKG_CONFIG_EXECUTABLE|[A-Z]+_LIBDIR|NCCL_LIBRARY|CMAKE_CUDA_COMPILER):' "$BUILD/CMakeCache.txt" &&
		cmake --build "$BUILD" -j"$(nproc)"
}

# where the build took each dependency from: none may be under /usr
check_from_prefix() {
	local bad=0
	for v in URING YAML ZLIB OPENBLAS SODIUM CRITERION; do
		local l
		l=$(grep -E "^${v}_INCLUDEDIR:" "$BUILD/CMakeCache.txt" | cut -d= -f2)
		echo "$v headers: $l"
		case $l in "$PREFIX"/*) ;; *) echo "  ^ not from $PREFIX"; bad=1 ;; esac
	done
	ldd "$BUILD/hora" "$BUILD/tests/test_gpu" | grep -E 'uring|yaml|sodium|openblas|libz|criterion|git2|not found'
	return $bad
}

train() { # train NAME DATADIR
	local d=$DEBS/data/$2
	[ -d "$d" ] || { echo "no $d (gpu/devdeps.sh copies it)"; return 77; }
	"$HORA" train --data "$d" --epochs 20 --batch-size 32 --lr 0.1 --seed 42 \
		--set train.device=cuda --metrics "$OUT/$1.jsonl" --progress lines
}

# two workers on the one GPU, joined by hora's TCP ring (gradients averaged
# on the host: the NCCL communicator is not built yet); elastic on so that
# every worker prints the crc32 of its final parameters
launch2() {
	HORA_SECRET=device-check-secret-0123456789abcdef "$HORA" launch "$ROOT/deploy/clusters/local.yaml" \
		--set 'cluster.nodes[0].workers=2' --set cluster.port_base=29700 \
		--set cluster.seeds=127.0.0.1:29701 --set train.data="$DEBS/data/mnist" \
		--set train.epochs=20 --set train.device=cuda --set train.elastic.enabled=true
}

# collectives on device buffers: 2 processes on the one GPU (NCCL takes one
# rank per GPU: staged through host memory), every dtype x op x count equal
# to the host collective's result; and 1 process (alone)
devcoll() {
	local lib="$BUILD/gpu/libhora_gpu.so" rc=0
	[ -e "$lib" ] || lib=$(find "$BUILD" -name libhora_gpu.so | head -1)
	"$HORA" run -np 2 "$BUILD/tests/devcoll_prog" "$lib" check || rc=1
	"$HORA" run -np 1 "$BUILD/tests/devcoll_prog" "$lib" check || rc=1
	return $rc
}

bench() {
	local rc=0
	for b in 32 256 1024; do
		"$HORA" bench train --device cuda --data "$DEBS/data/mnist" --batch-size $b \
			--json "$OUT/bench-$b.json" || rc=1
	done
	return $rc
}

# -Werror here (the CPU machine's compiler is the one the code is kept clean
# for), not there: another compiler's new warning must not cost the run
WERROR=OFF
[ $DRY = 1 ] && WERROR=ON
export PREFIX ROOT BUILD HORA DEBS OUT WERROR DRY
export -f env_info configure_build check_from_prefix train bench launch2 devcoll
BUILD_LIMIT=240
[ $DRY = 1 ] && BUILD_LIMIT=1800 # two shared cores here, sixteen there
step env 20 bash -c env_info
step deps 60 "$ROOT/gpu/devprefix.sh" "$DEBS" "$PREFIX"
step build $BUILD_LIMIT bash -c configure_build
# shellcheck disable=SC1091
[ -f "$PREFIX/env.sh" ] && . "$PREFIX/env.sh"
step fromprefix 20 bash -c check_from_prefix
# gpu-info exits 1 without a device: expected in the dry run, not there
step version 20 bash -c '"$HORA" --version && { "$HORA" gpu-info || [ "$DRY" = 1 ]; }'
step gputests 120 ctest --test-dir "$BUILD" -L gpu -V
if [ $DRY = 1 ]; then
	echo "device-check --dry-run: build part done; results in $OUT" | tee -a "$SUM"
	exit 0
fi
step mnist 90 bash -c 'train mnist mnist'
step fashion 120 bash -c 'train fashion fashion-mnist'
step launch2 120 bash -c launch2
step devcoll 60 bash -c devcoll
# device-buffer allreduce busbw between 2 processes on the GPU, and
# torch.distributed Gloo on CUDA tensors, same run
devbench() {
	"$HORA" bench allreduce --ranks 2 --device cuda --sizes 1K:256M --json "$OUT/devbench.json" || return 1
	env -u LD_LIBRARY_PATH python3 "$ROOT/gpu/torch_allreduce.py" --sizes 1K:256M \
		--json "$OUT/torch-gloo-cuda.json"
	local rc=$?
	[ $rc = 77 ] && echo "(no torch with CUDA: the anchor is missing)"
	[ $rc = 0 ] || [ $rc = 77 ]
}
export -f devbench
step devbench 90 bash -c devbench
# hora.torch on CUDA tensors (device buffers): allreduce, broadcast,
# DistributedOptimizer with replicas bitwise equal, 2 processes
step torchcuda 60 bash -c 'PYTHONPATH="$BUILD/python" "$HORA" run -np 2 -- python3 "$ROOT/tests/python/cuda_check.py"' 
step bench 120 bash -c bench
# torch: the system python3 with its own libraries (not our loader path)
step torch 180 env -u LD_LIBRARY_PATH python3 "$ROOT/gpu/torch_mlp.py" --data "$DEBS/data/mnist" \
	--batch 32,256,1024 --json "$OUT/torch.json"
# the CUDA code under compute-sanitizer's memcheck (out-of-bounds, leaks of
# device memory, API errors); test_gpu_mlp's own checks still apply
sanitize() {
	local cs
	cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
	[ -n "$cs" ] || { echo "no compute-sanitizer"; return 77; }
	"$cs" --tool memcheck --leak-check full --error-exitcode 9 "$BUILD/tests/test_gpu_mlp"
}
export -f sanitize
step sanitize 90 bash -c sanitize
# the acceptance table first: the rest of the suite is last, and optional
env -u LD_LIBRARY_PATH python3 "$ROOT/gpu/device-summary.py" "$OUT" | tee -a "$SUM"
step ctest 120 ctest --test-dir "$BUILD" -E 'netns' -LE gpu --timeout 100 -j8 --output-on-failure
echo "device-check: done in $(($(date +%s) - T0)) s; everything is in $OUT"
