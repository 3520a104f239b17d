#!/usr/bin/env bash
# gossip-link.sh [--reps 2] [--epochs 20] [--rates "1gbit 100mbit 1gbit+slow3"] [--modes M] [--out DIR]
# - gossip vs allreduce where the link limits (issue 14, acceptance point
# 4): 4 network-namespace hosts
# (deploy/netns-cluster.sh, every host's egress shaped by tbf to RATE), one
# worker each (launcher: netns; RATE+slowH: host H's link at a tenth of
# RATE, the slow-link straggler of acceptance point 3), the MNIST MLP on data/mnist (8,000 / 2,000),
# batch 32, seed 7, SGD lr 0.1 x 4, one warm-up epoch. Modes: allreduce
# (ring: 1.5 models sent per rank and step at 4 ranks), gossip sync
# one_peer_exponential (1 model a step), exponential (2 models a step), and
# one_peer_exponential with period 4 (a quarter model a step), gossip
# async exponential (adaptive; an active rank sends and receives one model
# an exchange, as often as exchanges finish) and async with period 4. Per run:
# samples/s (median over epochs 2..E) and seconds to val_acc 0.95 (the
# epochs' wall times summed up to the first epoch at or above it; x̄ for
# gossip). Runs interleaved, median of the reps; the hosts are made and
# removed here (their own tag). --modes runs only those (e.g.
# "async:exponential async:exponential/4"); the summary reads every mode
# whose files DIR holds. Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS=2 EPOCHS=20 RATES="1gbit 100mbit 1gbit+slow3" OUT="$ROOT/bench/results/issue14/link"
MODES="allreduce one_peer_exponential exponential one_peer_exponential/4 async:exponential async:exponential/4"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --rates) RATES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
HORA="$ROOT/build/hora"
NET="$ROOT/deploy/netns-cluster.sh"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -d $ROOT/data/mnist ]] || { echo "no data/mnist (deploy/get-data.sh)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces)" >&2; exit 1; }
TAG="gl$$" PY=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-gossip.XXXXXX")"
cleanup() { bash "$NET" down --tag "$TAG" >/dev/null 2>&1 || :; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
export HORA_SECRET="gossip-link-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
mkdir -p "$OUT"
cd "$ROOT"
run() { # rate mode rep; mode: allreduce or [async:]topology[/period]
  local spec=${2#async:} mode=sync period=1 extra="" name topo
  [[ $2 == async:* ]] && mode=async
  topo=${spec%/*}
  [[ $spec == */* ]] && period=${spec#*/}
  name="$1-${topo}-p$period-$3"
  [[ $mode == async ]] && name="$1-async-${topo}-p$period-$3"
  [[ $2 == allreduce ]] && name="$1-allreduce-$3"
  [[ $2 == allreduce ]] || extra="  sync: gossip
  gossip: {mode: $mode, topology: $topo, period: $period}"
  sed -e "s/netns: hn-/netns: $TAG-/" -e "s/epochs: 20/epochs: $EPOCHS/" \
      -e "s/warmup_epochs: 2/warmup_epochs: 1/" -e "s/port_base: 29500/port_base: $((20000 + 10 * (RANDOM % 1200)))/" \
      "$ROOT/deploy/clusters/netns.yaml" >"$TMP/c.yaml"
  local port; port=$(awk '/port_base:/ {print $2}' "$TMP/c.yaml")
  sed -i "s/10.213.8.1:29501/10.213.8.1:$((port + 1))/" "$TMP/c.yaml"
  printf '  seed: 7\n%s\n' "$extra" >>"$TMP/c.yaml"
  timeout 900 "$HORA" launch "$TMP/c.yaml" --set "train.metrics=$OUT/$name.jsonl" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
}
kbit() { # 1gbit / 100mbit / 500kbit -> kbit
  local n=${1%%[a-z]*} u=${1##*[0-9]}
  case $u in gbit) echo $((n * 1000000)) ;; mbit) echo $((n * 1000)) ;; kbit) echo "$n" ;;
    *) echo "unknown rate $1" >&2; return 1 ;; esac
}
for rate in $RATES; do
  bash "$NET" down --tag "$TAG" >/dev/null 2>&1 || :
  bash "$NET" up 4 --rate "${rate%%+*}" --tag "$TAG" >/dev/null
  if [[ $rate == *+slow* ]]; then # host H's egress at a tenth (tbf as netns-cluster.sh sets it)
    h=${rate##*+slow} k=$(( $(kbit "${rate%%+*}") / 10 ))
    b=$(( k * 1000 / 8 / 500 )); (( b < 65536 )) && b=65536
    ip netns exec "$TAG-$h" tc qdisc change dev "h$h" root tbf rate "${k}kbit" burst "$b" latency 100ms
  fi
  for r in $(seq "$REPS"); do
    for m in $MODES; do run "$rate" "$m" "$r"; done
  done
done
HORA_BENCH_DIR="$ROOT/bench" "$PY" - "$OUT" "$REPS" "$EPOCHS" "$RATES" <<'PY' | tee "$OUT/summary.txt"
import os, statistics as st, sys
out, reps, epochs, rates = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split()
print(f"# bench/gossip-link.sh: 4 netns hosts, 1 worker each, data/mnist, batch 32, seed 7, {epochs} epochs, "
      f"{reps} reps interleaved; load average {os.getloadavg()[0]:.2f}")
sys.path.insert(0, os.environ["HORA_BENCH_DIR"])  # bench/metrics_run.py
from metrics_run import run
one = lambda path: run(path, 0.95)
for rate in rates:
    base = None
    for label, stem in (("allreduce", "allreduce"), ("one_peer_exponential", "one_peer_exponential-p1"),
                        ("exponential", "exponential-p1"), ("one_peer_exponential, period 4", "one_peer_exponential-p4"),
                        ("async exponential", "async-exponential-p1"),
                        ("async exponential, period 4", "async-exponential-p4")):
        if not os.path.exists(f"{out}/{rate}-{stem}-1.jsonl"):
            continue
        v = [one(f"{out}/{rate}-{stem}-{r}.jsonl") for r in range(1, reps + 1)]
        sps = st.median(x[2] for x in v)
        base = sps if label == "allreduce" else base
        tt = [x[0] for x in v]
        print(f"{rate} {label}: samples/s median {sps:.0f} ({sps / base:.2f} x allreduce), time to 0.95 "
              f"{[None if x is None else round(x, 2) for x in tt]} s, final val_acc {[x[1] for x in v]}")
PY
