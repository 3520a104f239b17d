#!/usr/bin/env bash
# python.sh [--reps 3] [--steps 2000] [--np "2 4"] [--data data/mnist] [--overhead]
# - issue 17, point 2: the PyTorch example's training loop (core/examples/pytorch_mnist.py
# --steps K under `hora run -np N`) against PyTorch DistributedDataParallel
# over Gloo (../shared/anchors/src/ddp_mlp.py --world N --steps K) and hora's
# C trainer (`hora run -np N build/hora-example-mnist`'s job is not timed per
# step, so the C figure is `hora launch` of a local cluster file with the
# same model, data, batch and lr: median samples/s over epochs 2..E), the
# MNIST MLP 784-128-10, batch 32 per worker, one thread per process. hora's
# copies are bound round robin to the CPUs (hora run's default, N = 4: two
# to a CPU; the C trainer's file says the same), DDP's are not (torch's
# own launch does not bind). Each repetition runs the three for
# every N, the order reversed every other repetition; medians per N.
# Prints per N: samples/s of each, hora.torch / DDP (need >= 3) and
# hora.torch / C trainer, and the step time each spends (us per step per
# worker), so the Python layer's cost per step is the difference.
# --overhead (point 3) instead: the binding's cost per allreduce call, 2
# ranks on this host: bench/py_allreduce.py (NumPy float32 in place, the
# default background-thread mode, set_interruptible(False), and that out of
# place as the C bench calls it) under
# `hora run -np 2` against `hora bench allreduce --ranks 2 --bind none` (C)
# at 8 B and 16 MiB, interleaved, medians; prints us per call and the
# difference.
# Needs /usr/bin/python3 with torch (Debian's python3-torch), build/python
# (the hora package) and build/hora; the data (deploy/get-data.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3 STEPS=2000 NPS="2 4" DATA=data/mnist EPOCHS=6 OVERHEAD=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --np) NPS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --overhead) OVERHEAD=1; shift ;;
    *) echo "python.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
HORA="$ROOT/build/hora"
ANCH="$ROOT/../shared/anchors/src/ddp_mlp.py"
"$PY" -c 'import torch' 2>/dev/null || { echo "python.sh: $PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
[[ -x $HORA ]] || { echo "python.sh: build hora first (cmake -B build && cmake --build build)" >&2; exit 1; }
[[ -d $ROOT/build/python/hora ]] || { echo "python.sh: no build/python/hora (the Python package is built with hora)" >&2; exit 1; }
[[ -f $ANCH ]] || { echo "python.sh: no anchor $ANCH" >&2; exit 1; }
[[ -d $ROOT/$DATA ]] || { echo "python.sh: no $DATA (deploy/get-data.sh)" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT INT TERM
cd "$ROOT"
export PYTHONPATH="$ROOT/build/python${PYTHONPATH:+:$PYTHONPATH}"
export HORA_SECRET="python-bench-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"

jget() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['samples_per_s'])" "$1"; }
hora_torch() { # N
  "$HORA" run -np "$1" -- "$PY" core/examples/pytorch_mnist.py --data "$DATA" --steps "$STEPS" \
    --json "$TMP/ht.json" >"$TMP/out" 2>&1 || { cat "$TMP/out" >&2; return 1; }
  jget "$TMP/ht.json"
}
ddp() { # N
  "$PY" "$ANCH" --data "$DATA" --world "$1" --steps "$STEPS" --json "$TMP/ddp.json" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
  jget "$TMP/ddp.json"
}
c_trainer() { # N
  local port=$((12000 + RANDOM % 1500 * 10)) # below the ephemeral range
  local bind=core # as hora run binds the Python copies
  cat >"$TMP/c$1.yaml" <<EOF
cluster:
  name: python-bench-c$1
  launcher: local
  bind: $bind
  port_base: $port
  seeds: ["127.0.0.1:$((port + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: $1}
train:
  model: mnist_mlp
  data: $DATA
  epochs: $EPOCHS
  batch_size: 32
  optimizer: {name: sgd, lr: 0.1, schedule: constant}
EOF
  rm -f "$TMP/m.jsonl"
  "$HORA" launch "$TMP/c$1.yaml" --set "train.metrics=$TMP/m.jsonl" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
  "$PY" -c "
import json, statistics as st
r = [json.loads(l) for l in open('$TMP/m.jsonl')]
print(st.median(x['samples_per_s'] for x in r[1:] or r))"
}
med() { "$PY" -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

if (( OVERHEAD )); then
  declare -A OV
  for r in $(seq "$REPS"); do
    "$HORA" run -np 2 -- "$PY" bench/py_allreduce.py --sizes 8,16M --json "$TMP/py.json" >"$TMP/out" 2>&1 ||
      { cat "$TMP/out" >&2; exit 1; }
    "$HORA" bench allreduce --ranks 2 --setup lo --bind none --sizes 8:8 --json "$TMP/c8.json" >/dev/null
    "$HORA" bench allreduce --ranks 2 --setup lo --bind none --sizes 16M:16M --json "$TMP/c16.json" >/dev/null
    OV[py]+=" $TMP/py.$r.json" OV[c8]+=" $TMP/c8.$r.json" OV[c16]+=" $TMP/c16.$r.json"
    mv "$TMP/py.json" "$TMP/py.$r.json"; mv "$TMP/c8.json" "$TMP/c8.$r.json"; mv "$TMP/c16.json" "$TMP/c16.$r.json"
  done
  "$PY" - "$REPS" "$TMP" <<'PYEOF'
import json, statistics as st, sys
reps, tmp = int(sys.argv[1]), sys.argv[2]
py = [json.load(open("%s/py.%d.json" % (tmp, r))) for r in range(1, reps + 1)]
c = {8: [json.load(open("%s/c8.%d.json" % (tmp, r)))[0]["time_us"] for r in range(1, reps + 1)],
     16 << 20: [json.load(open("%s/c16.%d.json" % (tmp, r)))[0]["time_us"] for r in range(1, reps + 1)]}
print("# allreduce of float32 on 2 ranks of this host (shared memory), %d interleaved reps, medians" % reps)
for size in (8, 16 << 20):
    cm = st.median(c[size])
    for mode in ("background", "inline", "inline-out"):
        m = st.median(x["us"] for run in py for x in run if x["bytes"] == size and x["mode"] == mode)
        print("%9d B  python %-10s %10.2f us   C %10.2f us   binding overhead %+9.2f us per call"
              % (size, mode, m, cm, m - cm))
PYEOF
  exit 0
fi

declare -A RUNS
for r in $(seq "$REPS"); do
  order="hora_torch ddp c_trainer"
  (( r % 2 == 0 )) && order="c_trainer ddp hora_torch"
  for n in $NPS; do
    for what in $order; do
      RUNS[$what.$n]+=" $($what "$n")"
    done
  done
done
echo "# MNIST MLP 784-128-10, $DATA, batch 32 per worker, $STEPS timed steps (Python), $EPOCHS epochs (C), $REPS interleaved reps, median samples/s"
echo "# BLAS kernels (hora, torch, DDP alike): $(bash "$ROOT/bench/blas-core.sh")"
for n in $NPS; do
  ht=$(med ${RUNS[hora_torch.$n]}) dd=$(med ${RUNS[ddp.$n]}) ct=$(med ${RUNS[c_trainer.$n]})
  echo "np $n: hora.torch $ht (runs:${RUNS[hora_torch.$n]})"
  echo "np $n: DDP/Gloo   $dd (runs:${RUNS[ddp.$n]})"
  echo "np $n: C trainer  $ct (runs:${RUNS[c_trainer.$n]})"
  "$PY" -c "
n, ht, dd, ct = $n, $ht, $dd, $ct
us = lambda s: 32 * n / s * 1e6
print(f'np {n}: hora.torch / DDP = {ht / dd:.2f} (need >= 3); hora.torch / C trainer = {ht / ct:.2f}')
print(f'np {n}: us per step per worker: hora.torch {us(ht):.0f}, DDP {us(dd):.0f}, C trainer {us(ct):.0f}; '
      f'the Python layer costs {us(ht) - us(ct):.0f} us per step over the C trainer')"
done
