#!/usr/bin/env bash
# hora's test command: installs what it needs, fetches the data, then
#   1. fuzzes the IDX and YAML parsers (clang + libFuzzer, bounded time),
#   2. builds with ASan+UBSan and runs every test,
#   3. builds with ThreadSanitizer and runs the tests/tsan drivers (ranks as
#      threads through allreduces and training; Criterion cannot run under TSan),
#   4. builds the Release tree (warnings as errors) and runs every test (the
#      Python package's pytest suite, tests/python, among them: test_python).
# Exits non-zero on any failure. Env: HORA_FUZZ_SECONDS (default 30 per target),
# HORA_SKIP_SANITIZE=1 / HORA_SKIP_TSAN=1 / HORA_SKIP_FUZZ=1 to shorten a local run,
# HORA_TEST_KEEP=1 (tests that keep their temp dir), JOBS (build jobs, default 2).
# The tests run with the variables that change what they see cleared (the
# line "cleared ..." names those that were set): Python's (PYTHONUNBUFFERED
# hides a worker that does not flush before os._exit), hora's own (an
# exported HORA_SECRET, HORA_LOG, HORA_PROC ...) and the worker index a
# launcher sets (SLURM_*, OMPI_COMM_WORLD_RANK, PMI_RANK,
# JOB_COMPLETION_INDEX, TORCHELASTIC_*), so that a CI machine, a Slurm
# allocation or a shell that trained a job gets what a fresh one gets.
# OPENBLAS_* are kept: they pick the machine's BLAS kernels (no test depends
# on which, tests/README.md), and some VMs need them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${JOBS:-2}"

cleared=()
while read -r v; do
  case $v in
    HORA_FUZZ_SECONDS | HORA_SKIP_* | HORA_TEST_KEEP) ;; # the knobs above
    PYTHON* | HORA_* | SLURM_* | OMPI_COMM_WORLD_RANK | PMI_RANK | JOB_COMPLETION_INDEX | TORCHELASTIC_*)
      unset "$v" && cleared+=("$v") ;;
  esac
done < <(compgen -e)
((${#cleared[@]} == 0)) || echo "test.sh: cleared ${cleared[*]}"

bash deploy/install-deps.sh
bash deploy/get-data.sh

step() { printf '\n=== %s\n' "$*"; }

if [[ ${HORA_SKIP_FUZZ:-0} != 1 ]]; then
  step "fuzz: IDX loader, YAML config, frame decoder + handshake, membership datagrams (${HORA_FUZZ_SECONDS:-30} s each)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHORA_FUZZ=ON \
    -DHORA_CUDA=OFF -DHORA_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$JOBS" --target fuzz_idx fuzz_config fuzz_net fuzz_swim
  bash tests/fuzz/run.sh build-fuzz "${HORA_FUZZ_SECONDS:-30}"
fi

if [[ ${HORA_SKIP_SANITIZE:-0} != 1 ]]; then
  step "ASan + UBSan build and tests"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHORA_SANITIZE=ON -DHORA_CUDA=OFF \
    -DHORA_WERROR=ON >/dev/null
  cmake --build build-asan -j"$JOBS"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp" \
     ctest --output-on-failure)
fi

if [[ ${HORA_SKIP_TSAN:-0} != 1 ]]; then
  step "ThreadSanitizer: ranks as threads through allreduces and training (tests/tsan)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHORA_TSAN=ON -DHORA_CUDA=OFF \
    -DHORA_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j"$JOBS" --target tsan_coll tsan_train tsan_lost tsan_elastic tsan_apair tsan_link_shm
  export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
  build-tsan/tests/tsan_coll
  build-tsan/tests/tsan_train 3 0 1024
  build-tsan/tests/tsan_train 2 1 4096
  build-tsan/tests/tsan_train 4 0 100000
  build-tsan/tests/tsan_train 4 0 1024 2
  build-tsan/tests/tsan_apair
  build-tsan/tests/tsan_link_shm
  build-tsan/tests/tsan_lost
  timeout 900 build-tsan/tests/tsan_elastic # a deadlock fails the run, not hangs it
  timeout 900 build-tsan/tests/tsan_elastic 0 quit
  unset TSAN_OPTIONS
fi

step "Release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHORA_WERROR=ON >/dev/null
cmake --build build -j"$JOBS"
(cd build && ctest --output-on-failure)
