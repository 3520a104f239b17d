#!/usr/bin/env bash
# elastic-cost.sh [--reps 5] [--epochs 3] [--data data/fashion-mnist]
#                 [--batches "32 1024"] [--commit-steps "20"] - the steady-state
# cost of elastic training (issue 13, acceptance point 3): samples/s of 4
# workers on loopback (hora launch, MNIST MLP, default membership timings)
# with train.elastic off vs on (one run per commit_steps value), the same
# job otherwise. samples/s per run = median over epochs 2..E of the job's
# samples_per_s (all workers, as bench/scaling.sh); per batch and mode the
# median of --reps runs, interleaved (off, on... then the next rep in the
# reverse order); ratio = on / off (target >= 0.97): of the medians, and the
# median of each rep's on / off (adjacent runs: less of a loaded machine's drift),
# and the share of the training loop the commits took, as rank 0 measures it
# (its "elastic: N commits took T s, P %" line: noise-free where the ratio is not). data/fashion-mnist
# (60,000 images) is the steady state; data/mnist has 8,000 (2 steps an
# epoch at batch 1024 x 4 workers).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=5 EPOCHS=3 DATA=data/fashion-mnist BATCHES="32 1024" CS="20"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --commit-steps) CS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -d $ROOT/$DATA ]] || { echo "no $DATA (deploy/get-data.sh)" >&2; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-elastic.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT INT TERM
export HORA_SECRET="cost-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
cd "$ROOT"
file() { # $1 batch, $2 commit_steps (0: elastic off)
  local port=$((20000 + 10 * (RANDOM % 1200)))
  cat >"$TMP/c.yaml" <<YAML
cluster:
  name: elastic-cost
  launcher: local
  port_base: $port
  seeds: ["127.0.0.1:$((port + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 4}
train:
  model: mnist_mlp
  data: $DATA
  epochs: $EPOCHS
  batch_size: $1
  optimizer: {name: sgd, lr: 0.1, warmup_epochs: 1}
YAML
  [[ $2 == 0 ]] || echo "  elastic: {enabled: true, commit_steps: $2}" >>"$TMP/c.yaml"
}
run() { # batch commit_steps -> samples/s (a failed start, e.g. a port in use by someone else: 2 more tries on other ports)
  local try
  for try in 1 2 3; do
    file "$1" "$2"
    rm -f "$TMP/m.jsonl"
    "$HORA" launch "$TMP/c.yaml" --set "train.metrics=$TMP/m.jsonl" >"$TMP/out" 2>&1 && break
    cat "$TMP/out" >&2
    [[ $try == 3 ]] && return 1
  done
  # elastic on: rank 0's own account of what the commits took (share of the training loop)
  grep -oE 'commits took [0-9.]+ s, [0-9.]+ %' "$TMP/out" | awk '{print $5}' >"$TMP/share" || :
  python3 -c "
import json, statistics as st
r = [json.loads(l) for l in open('$TMP/m.jsonl')]
print(round(st.median(x['samples_per_s'] for x in r[1:] or r), 1))"
}
med() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
MODES="0 $CS"
declare -A S SH
for r in $(seq "$REPS"); do
  order=$MODES
  ((r % 2)) || order=$(echo "$MODES" | tr ' ' '\n' | tac | tr '\n' ' ')
  for b in $BATCHES; do
    for m in $order; do
      S[$b,$m]+="$(run "$b" "$m") "
      [[ $m == 0 ]] || SH[$b,$m]+="$(cat "$TMP/share") "
    done
  done
done
echo "# 4 workers on 127.0.0.1, $DATA, $EPOCHS epochs, $REPS interleaved reps, median samples/s (epochs 2..$EPOCHS); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for b in $BATCHES; do
  off=$(med ${S[$b,0]})
  echo "batch $b, elastic off: $off   runs: ${S[$b,0]}"
  for m in $CS; do
    on=$(med ${S[$b,$m]})
    paired=$(python3 -c "
import statistics, sys
on, off = (list(map(float, x.split())) for x in sys.argv[1:])
print(f'{statistics.median(a / b for a, b in zip(on, off)):.3f}')" "${S[$b,$m]}" "${S[$b,0]}")
    echo "batch $b, elastic on, commit_steps $m: $on   runs: ${S[$b,$m]}  ratio of medians $(python3 -c "print(f'{$on / $off:.3f}')"), median of the reps' on/off $paired"
    echo "batch $b, commit_steps $m: the commits' share of the training loop (rank 0's 'elastic: N commits took' line), median $(med ${SH[$b,$m]}) %   runs: ${SH[$b,$m]}"
  done
done
