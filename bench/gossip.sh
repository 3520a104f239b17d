#!/usr/bin/env bash
# gossip.sh [--reps 3] [--epochs 10] [--slow W] [--modes "allreduce exponential async async-fixed"]
# [--out DIR] - the straggler bench of
# gossip training (issue 14, acceptance point 3): 4 workers on 127.0.0.1
# (hora launch), the MNIST MLP on data/fashion-mnist, batch 32, seed 7,
# SGD lr 0.1 x 4 with one warm-up epoch, E epochs; train.sync allreduce vs
# gossip sync (exponential) vs gossip async (exponential, adaptive; and
# with adaptive: false, the effect of the adaptive peer choice),
# each unthrottled and with worker 2 throttled to a quarter of a core by a
# real CPU quota (--slow W: worker W instead; async's even ranks ask, odd
# ones answer, so W = 1 shows what the adaptive peer choice does) (cgroup
# v1 cpu controller at /sys/fs/cgroup/cpu: a child
# group with cpu.cfs_quota_us 25000 of cpu.cfs_period_us 100000, the
# worker's process written to cgroup.procs as soon as it runs; cgroup v2:
# cpu.max "25000 100000"). Per run: seconds to val_acc 0.87 (evaluated on
# x̄ for gossip; the epochs' wall times summed up to the first epoch at or
# above it), the final val_acc, samples/s (median over epochs 2..E, all
# workers), and for async each worker's own samples/s (its report line:
# the unthrottled workers' rate when one is slow over their rate when none
# is). Runs interleaved (mode x condition per rep); median of the reps.
# Removes the groups it made. Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=3 EPOCHS=10 OUT="$ROOT/bench/results/issue14/straggler" SLOW=2 MODES="allreduce exponential async async-fixed"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --slow) SLOW="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -d $ROOT/data/fashion-mnist ]] || { echo "no data/fashion-mnist (deploy/get-data.sh)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "needs root (a cgroup for the throttled worker)" >&2; exit 1; }
CG="" L=""
PY=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-gossip.XXXXXX")"
cleanup() {
  if [[ -n $L ]] && kill -0 "$L" 2>/dev/null; then # the launcher ends its workers
    kill -TERM "$L"; wait "$L" 2>/dev/null || :
  fi
  if [[ -n $CG && -d $CG ]]; then
    for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do echo "$p" >"$(dirname "$CG")/cgroup.procs" 2>/dev/null || :; done
    rmdir "$CG" 2>/dev/null || echo "could not remove $CG" >&2
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -w /sys/fs/cgroup/cpu ]]; then
  CG="/sys/fs/cgroup/cpu/hora-straggler-$$"
  mkdir "$CG"; echo 100000 >"$CG/cpu.cfs_period_us"; echo 25000 >"$CG/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
  CG="/sys/fs/cgroup/hora-straggler-$$"
  mkdir "$CG"
  [[ -e $CG/cpu.max ]] || { echo "cgroup v2: no cpu.max in $CG (cpu controller not delegated)" >&2; exit 1; }
  echo "25000 100000" >"$CG/cpu.max"
else
  echo "no cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max)" >&2; exit 1
fi
export HORA_SECRET="gossip-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
mkdir -p "$OUT"
cd "$ROOT"
# shellcheck source=gossip_job.sh
. "$ROOT/bench/gossip_job.sh"
run() { # mode throttled(0/1) rep
  local name="$1-$([[ $2 == 1 ]] && echo slow || echo even)-$3"
  gossip_job_yaml "$TMP/c.yaml" gossip-straggler data/fashion-mnist "$EPOCHS" "$(gossip_mode_lines "$1")"
  "$HORA" launch "$TMP/c.yaml" --set "train.metrics=$OUT/$name.jsonl" >"$TMP/out" 2>&1 &
  L=$!
  local w=""
  if [[ $2 == 1 ]]; then # worker 2 into the group as soon as it runs
    for _ in $(seq 2000); do
      for p in $(ps -o pid= --ppid $L 2>/dev/null); do
        tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | grep -qE -- "--proc $SLOW( |$)" && w=$p
      done
      [[ -n $w ]] && break
      sleep 0.005
    done
    if [[ -n $w ]]; then echo "$w" >"$CG/cgroup.procs" || w=""; fi
  fi
  wait $L || { cat "$TMP/out" >&2; return 1; }
  L=""
  cp "$TMP/out" "$OUT/$name.out"
  [[ $2 == 0 || -n $w ]] || { echo "worker $SLOW not found to throttle" >&2; return 1; }
}
for r in $(seq "$REPS"); do
  for m in $MODES; do
    for t in 0 1; do run "$m" "$t" "$r"; done
  done
done
HORA_BENCH_DIR="$ROOT/bench" "$PY" - "$OUT" "$REPS" "$EPOCHS" "$SLOW" "$MODES" <<'PY' | tee "$OUT/summary.txt"
import os, statistics as st, sys
out, reps, epochs, slow, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), tuple(sys.argv[5].split())
print(f"# bench/gossip.sh: 4 workers, fashion-mnist, batch 32, seed 7, {epochs} epochs, {reps} reps interleaved; "
      f"slow = worker {slow} at cpu.cfs_quota_us 25000 / 100000; load average {os.getloadavg()[0]:.2f}")
sys.path.insert(0, os.environ["HORA_BENCH_DIR"])  # bench/metrics_run.py
from metrics_run import run
one = lambda path: run(path, 0.87)
res = {}
import re
def rates(path):  # async: each worker's own samples/s, from its report line
    got = {}
    for line in open(path[:-6] + ".out"):
        m = re.search(r"gossip async rank (\d+) .*\(([0-9.]+) samples/s\)", line)
        if m:
            got[int(m.group(1))] = float(m.group(2))
    return got
for m in modes:
    for c in ("even", "slow"):
        v = [one(f"{out}/{m}-{c}-{r}.jsonl") for r in range(1, reps + 1)]
        tt = [x[0] for x in v if x[0] is not None]
        res[m, c] = st.median(tt) if len(tt) == len(v) else None
        print(f"{m} {c}: time to 0.87 median {res[m, c] if res[m, c] is None else round(res[m, c], 2)} s "
              f"(runs {[None if x[0] is None else round(x[0], 2) for x in v]}), final val_acc "
              f"{[x[1] for x in v]}, samples/s median {st.median(x[2] for x in v):.0f}")
ratio_of = lambda a, b: f"{a / b:.2f}" if a and b else "n/a (a mode did not reach 0.87)"
for m in modes:
    if m != "allreduce" and ("allreduce", "slow") in res:
        print(f"{m} slow / allreduce slow: {ratio_of(res[m, 'slow'], res['allreduce', 'slow'])} (target <= 0.5); "
              f"/ allreduce even: {ratio_of(res[m, 'slow'], res.get(('allreduce', 'even')))} (goal <= 1.5)")
for m in [m for m in modes if m.startswith("async")]:
    for w in [w for w in range(4) if w != slow]:
        pairs = [(rates(f"{out}/{m}-slow-{r}.jsonl").get(w), rates(f"{out}/{m}-even-{r}.jsonl").get(w))
                 for r in range(1, reps + 1)]
        if any(a is None or not b for a, b in pairs):
            print(f"{m}: worker {w}: a report line is missing in {out}/{m}-*.out")
            continue
        ratio = [a / b for a, b in pairs]
        print(f"{m}: worker {w}'s samples/s with worker {slow} slow / without: median {st.median(ratio):.2f} "
              f"(runs {[round(x, 2) for x in ratio]}; target >= 0.8)")
if res.get(("allreduce", "slow")) and res.get(("allreduce", "even")):
    print(f"allreduce slow / even: {res['allreduce', 'slow'] / res['allreduce', 'even']:.2f}")
PY
