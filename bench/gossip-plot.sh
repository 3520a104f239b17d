#!/usr/bin/env bash
# gossip-plot.sh [--straggler DIR] [--out DIR] - the plots of issue 14
# (acceptance point 5), with gnuplot:
# - DIR_OUT/val_acc-vs-time.png: val_acc (x̄ for gossip) against wall time
#   for allreduce, gossip sync (exponential) and gossip async, each without
#   and with the throttled worker, from bench/gossip.sh's metrics (its
#   first rep; the epochs' wall times summed);
# - DIR_OUT/consensus-vs-step.png: the consensus distance ||x_i - x̄|| / ||x̄||
#   (mean over the 4 workers) against the step, for gossip sync ring,
#   exponential and one_peer_exponential: a 4-worker job each (hora launch,
#   data/fashion-mnist, batch 32, seed 7, 10 epochs, SGD lr 0.1 x 4 with one
#   warm-up epoch: the straggler bench's job, train.gossip.consensus_every:
#   20) run here, its "step N consensus MEAN/MAX" lines read; and gossip async, whose consensus is
#   measured at the epochs' ends only (no barrier), from the straggler
#   bench's metrics, at its epochs' ends in steps of rank 0.
# Writes the data files beside the PNGs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STRAG="$ROOT/bench/results/issue14/straggler" OUT="$ROOT/bench/results/issue14"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --straggler) STRAG="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora" PY=/usr/bin/python3
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "no gnuplot (deploy/install-deps.sh installs gnuplot-nox)" >&2; exit 1; }
[[ -d $ROOT/data/fashion-mnist ]] || { echo "no data/fashion-mnist (deploy/get-data.sh)" >&2; exit 1; }
ls "$STRAG"/allreduce-even-1.jsonl >/dev/null || { echo "no straggler metrics in $STRAG (bench/gossip.sh)" >&2; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-gplot.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT INT TERM
export HORA_SECRET="gossip-plot-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
mkdir -p "$OUT"
cd "$ROOT"
# shellcheck source=gossip_job.sh
. "$ROOT/bench/gossip_job.sh"

# val_acc against time: one file per (mode, condition): seconds val_acc
for m in allreduce exponential async; do
  for c in even slow; do
    "$PY" -c "
import json, sys
t = 0.0
for line in open(sys.argv[1]):
    r = json.loads(line)
    t += r['seconds']
    print(f\"{t:.3f} {r['val_acc']}\")" "$STRAG/$m-$c-1.jsonl" >"$OUT/plot-valacc-$m-$c.dat"
  done
done
gnuplot -e "set terminal pngcairo size 900,540 font ',10' noenhanced; set output '$OUT/val_acc-vs-time.png';
set title 'Fashion-MNIST MLP, 4 workers, batch 32: val_acc (x̄) against wall time; slow = worker throttled to 1/4 core';
set xlabel 'seconds'; set ylabel 'val_acc'; set key bottom right; set grid; set yrange [0.75:0.9];
plot '$OUT/plot-valacc-allreduce-even.dat' w lp lc 1 t 'allreduce', '$OUT/plot-valacc-allreduce-slow.dat' w lp lc 1 dt 2 t 'allreduce, slow',
'$OUT/plot-valacc-exponential-even.dat' w lp lc 2 t 'gossip sync (exponential)', '$OUT/plot-valacc-exponential-slow.dat' w lp lc 2 dt 2 t 'gossip sync, slow',
'$OUT/plot-valacc-async-even.dat' w lp lc 3 t 'gossip async', '$OUT/plot-valacc-async-slow.dat' w lp lc 3 dt 2 t 'gossip async, slow'"

# consensus against step: sync topologies, every 10 steps
for topo in ring exponential one_peer_exponential; do
  gossip_job_yaml "$TMP/c.yaml" gossip-plot data/fashion-mnist 10 "  sync: gossip
  gossip: {topology: $topo, consensus_every: 20}"
  "$HORA" launch "$TMP/c.yaml" >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; exit 1; }
  grep -o 'step [0-9]* consensus [0-9.e+-]*' "$TMP/out" | awk '{print $2, $4}' >"$OUT/plot-consensus-$topo.dat"
  [[ -s $OUT/plot-consensus-$topo.dat ]] || { echo "$topo: no consensus lines" >&2; cat "$TMP/out" >&2; exit 1; }
done
"$PY" -c "
import json, re, sys
steps = [int(m.group(1)) for m in re.finditer(r'gossip async rank 0 \(active\): (\d+) steps', open(sys.argv[2]).read())]
if not steps:
    sys.exit(f'{sys.argv[2]}: no report line of rank 0')
rows = [json.loads(l) for l in open(sys.argv[1])]
for i, r in enumerate(rows):  # rank 0's steps at each epoch's end, evenly (its steps per epoch vary little)
    print(round(steps[0] * (i + 1) / len(rows)), r['consensus']['mean'])" \
  "$STRAG/async-even-1.jsonl" "$STRAG/async-even-1.out" >"$OUT/plot-consensus-async.dat"
gnuplot -e "set terminal pngcairo size 900,540 font ',10' noenhanced; set output '$OUT/consensus-vs-step.png';
set title 'Fashion-MNIST MLP, 4 workers: consensus distance ||x_i - x̄|| / ||x̄|| (mean) against the step';
set xlabel 'step (of rank 0)'; set ylabel 'consensus distance'; set logscale y; set grid; set key bottom left;
plot '$OUT/plot-consensus-ring.dat' w l t 'sync ring, every 20 steps', '$OUT/plot-consensus-exponential.dat' w l t 'sync exponential',
'$OUT/plot-consensus-one_peer_exponential.dat' w l t 'sync one_peer_exponential',
'$OUT/plot-consensus-async.dat' w lp t 'async (exponential), at the epochs ends (no barrier between)'"
echo "# plots: $OUT/val_acc-vs-time.png $OUT/consensus-vs-step.png"
