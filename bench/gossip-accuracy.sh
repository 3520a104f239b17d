#!/usr/bin/env bash
# gossip-accuracy.sh [--epochs 20] [--out DIR] - accuracy of gossip training
# (issue 14, acceptance point 2): 4 workers on
# 127.0.0.1 (hora launch), the MNIST MLP, batch 32, seed 7, SGD lr 0.1 x 4
# workers with one warm-up epoch and the cosine schedule, on data/mnist
# (8,000 / 2,000) and data/fashion-mnist (60,000 / 10,000): train.sync
# allreduce vs gossip sync and async, each with the exponential and the
# ring graph (async-exponential, async-ring: adaptive). Per run:
# the final val_acc (of x̄ for gossip), the best, the consensus distance at
# the end, samples/s (median over epochs 2..E). Writes DIR/<data>-<mode>.jsonl
# (the metrics) and DIR/summary.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EPOCHS=20 OUT="$ROOT/bench/results/issue14/accuracy"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --epochs) EPOCHS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
for d in mnist fashion-mnist; do
  [[ -d $ROOT/data/$d ]] || { echo "no data/$d (deploy/get-data.sh)" >&2; exit 1; }
done
PY=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-gossip.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT INT TERM
export HORA_SECRET="gossip-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
mkdir -p "$OUT"
cd "$ROOT"
# shellcheck source=gossip_job.sh
. "$ROOT/bench/gossip_job.sh"
run() { # data mode
  gossip_job_yaml "$TMP/c.yaml" gossip-accuracy "data/$1" "$EPOCHS" "$(gossip_mode_lines "$2")"
  "$HORA" launch "$TMP/c.yaml" --set "train.metrics=$OUT/$1-$2.jsonl" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
}
for d in mnist fashion-mnist; do
  for m in allreduce exponential ring async-exponential async-ring; do run "$d" "$m"; done
done
"$PY" - "$OUT" "$EPOCHS" <<'PY' | tee "$OUT/summary.txt"
import json, os, statistics, sys
out, epochs = sys.argv[1], sys.argv[2]
print(f"# bench/gossip-accuracy.sh: 4 workers, batch 32, seed 7, {epochs} epochs, SGD lr 0.1 x 4, "
      f"load average {os.getloadavg()[0]:.2f}")
for d in ("mnist", "fashion-mnist"):
    base = None
    for m in ("allreduce", "exponential", "ring", "async-exponential", "async-ring"):
        rows = [json.loads(l) for l in open(f"{out}/{d}-{m}.jsonl")]
        last = rows[-1]
        base = last["val_acc"] if m == "allreduce" else base
        c = last.get("consensus")
        sps = statistics.median(r["samples_per_s"] for r in rows[1:] or rows)
        c0 = rows[0].get("consensus")
        print(f"{d} {m}: final val_acc {last['val_acc']:.4f} (best {max(r['val_acc'] for r in rows):.4f})"
              + (f", {100 * (last['val_acc'] - base):+.2f} points vs allreduce" if m != "allreduce" else "")
              + (f", consensus at the end {c['mean']:.3g}/{c['max']:.3g}" if c else "")
              + (f", after epoch 1 {c0['mean']:.3g}" if c0 else "")
              + f", samples/s median {sps:.0f}")
PY
