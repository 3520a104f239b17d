#!/usr/bin/env bash
# single-copy.sh [REPS] [OUT] - 2 ranks on this host: the allreduce of
# hora_comm_mem_alloc's buffers in place (the stage's single-copy path)
# against the same call on malloc'd buffers (the copying stage) and Open
# MPI over shared memory (the anchor openmpi_sm, ../shared/anchors/run.sh,
# out of place on its own buffers), interleaved REPS times (default 3):
# f32 sum at 1-64 MiB with memcpy's bandwidth beside it, and f32 avg at
# 407080 bytes (the MNIST MLP's gradient). Raw tables to OUT (default
# bench/results/single-copy.txt); bench/RESULTS.md "Session 16" reads them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS="${1:-3}" OUT="${2:-$ROOT/bench/results/single-copy.txt}"
ANCH="${ANCHORS:-$ROOT/../shared/anchors}"
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
[[ -x $ANCH/build/mpi_bench ]] || { echo "build the anchors first ($ANCH/install.sh && $ANCH/build.sh)" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
: >"$OUT"
for rep in $(seq "$REPS"); do
  echo "## rep $rep anchor openmpi_sm" >>"$OUT"
  (cd "$ANCH" && bash run.sh --setup lo --ranks 2 --only openmpi_sm --out "$TMP/anchor-$rep.json") |
    grep -E "KiB|MiB|B \|" >>"$OUT"
  for m in malloc shared; do
    echo "## rep $rep hora mem $m" >>"$OUT"
    "$HORA" bench allreduce --ranks 2 --sizes 1M:64M --op sum --in-place --mem "$m" --with-memcpy |
      grep -v "^# path" >>"$OUT"
    "$HORA" bench allreduce --ranks 2 --sizes 407080:407080 --op avg --in-place --mem "$m" | grep -v "^#" >>"$OUT"
  done
done
echo "wrote $OUT"
