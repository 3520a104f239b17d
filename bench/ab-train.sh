#!/usr/bin/env bash
# ab-train.sh BASE_HORA NEW_HORA [--batch 32] [--reps 5] [--epochs 4]
#             [--data data/fashion-mnist] [--set K=V]... - two builds of hora
# (e.g. the main build and a worktree of an older commit) training the
# MNIST MLP, interleaved: each repetition runs 2 workers then 1 worker with
# the base build, then the same with the new one (bind: core). Prints one
# line per run ("base|new 1|2 samples/s", the median over epochs 2..E),
# then per build the median samples/s and the efficiency samples/s(2) /
# (2 x samples/s(1)). A change to the 2-worker path shows as its ratio;
# one to both as both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ $# -ge 2 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
BASE="$1" NEW="$2"; shift 2
BATCH=32 REPS=5 EPOCHS=4 DATA=data/fashion-mnist SETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batch) BATCH="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for h in "$BASE" "$NEW"; do [[ -x $h ]] || { echo "no hora binary at $h" >&2; exit 1; }; done
[[ -d $ROOT/$DATA ]] || { echo "no $DATA (deploy/get-data.sh)" >&2; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT INT TERM
export HORA_SECRET="ab-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
cd "$ROOT"
for n in 1 2; do
  cat >"$TMP/lo$n.yaml" <<YAML
cluster:
  name: ab-lo-$n
  launcher: local
  bind: core
  port_base: $((30700 + 10 * n))
  seeds: ["127.0.0.1:$((30700 + 10 * n + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: $n}
train:
  model: mnist_mlp
  data: $DATA
  epochs: $EPOCHS
  batch_size: $BATCH
  optimizer: {name: sgd, lr: 0.1, warmup_epochs: 1}
YAML
done
run() { # hora workers
  "$1" launch "$TMP/lo$2.yaml" --set "train.metrics=$TMP/m.jsonl" "${SETS[@]}" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
  python3 -c "
import json, statistics as st
r = [json.loads(l) for l in open('$TMP/m.jsonl')]
print(round(st.median(x['samples_per_s'] for x in r[1:] or r)))"
}
echo "# ab-train: base $BASE, new $NEW; $DATA, batch $BATCH per worker, $EPOCHS epochs, $REPS interleaved reps ${SETS[*]}"
echo "# BLAS kernels: $(bash "$ROOT/bench/blas-core.sh")"
for r in $(seq "$REPS"); do
  for v in base new; do
    h=$BASE; [[ $v == new ]] && h=$NEW
    echo "$v 2 $(run "$h" 2)"
    echo "$v 1 $(run "$h" 1)"
  done
done | tee "$TMP/rows"
python3 - "$TMP/rows" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    v, n, x = l.split()
    d[(v, n)].append(float(x))
for v in ("base", "new"):
    one, two = st.median(d[(v, "1")]), st.median(d[(v, "2")])
    print(f"{v}: 1 worker {one:.0f}, 2 workers {two:.0f}, efficiency {two / (2 * one):.3f}")
print(f"new / base: 1 worker {st.median(d[('new', '1')]) / st.median(d[('base', '1')]):.3f}, "
      f"2 workers {st.median(d[('new', '2')]) / st.median(d[('base', '2')]):.3f}")
PY
