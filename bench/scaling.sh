#!/usr/bin/env bash
# scaling.sh [--batch 32] [--epochs 6] [--reps 3] [--data data/mnist] [--skip-lo]
#            [--skip-netns] [--set K=V]... [--shm auto|off] [--hier auto|on|off]
#            [--compare-shm] [--lo-off] [--compare-single-copy] [--each-cpu] [--also K=V]
#            [--netns-layout HxW] [--compare-hier] - training
# throughput of the distributed job (hora launch, the MNIST MLP on --data):
#   lo:    1 worker vs 2 workers on one host, each bound to its own core
#          (cluster.bind: core), the same per-worker batch:
#          efficiency = samples/s(2) / (2 x samples/s(1));
#          --compare-shm: the 2 workers with transport.shm auto and off,
#          interleaved, an efficiency each (issue 15, point 4);
#          --lo-off: the 2 workers with train.communication: false as well
#          (each trains alone on its shard): samples/s(2, off) / (2 x
#          samples/s(1)) is what two workers side by side reach with no
#          averaging at all, the ceiling of any averaging on this host, and
#          samples/s(2) / samples/s(2, off) what the averaging costs;
#          --compare-single-copy: the 2 workers with train.fusion.single_copy
#          false as well (the gradients in ordinary memory: the copying
#          stage instead of the single-copy one);
#          --also K=V: the 2 workers with --set K=V as well (e.g.
#          train.balance=true), interleaved, an efficiency of their own;
#          --each-cpu: 1 worker on the second allowed CPU as well (taskset):
#          2 synchronous workers step at the slower CPU's pace
#   netns: H namespace hosts with W workers each (--netns-layout HxW,
#          default 4x1; 2x2 for issue 15) shaped to 1 Gbit/s
#          (deploy/netns-cluster.sh), gradient averaging on vs off
#          (train.communication: false), the same workers otherwise:
#          efficiency = samples/s(on) / samples/s(off);
#          --compare-hier: averaging with collectives.hierarchical on and
#          off (the flat ring), interleaved with no communication
# --shm / --hier are --set transport.shm=V / collectives.hierarchical=V for
# every run (as any --set, they reach every worker; a key the build does not
# know fails the launch, which prints why); each result line names them.
# samples/s per run = median over epochs 2..E of the job's samples_per_s (all
# workers); each figure is the median of --reps runs, interleaved; lo also
# prints the efficiency of each repetition's own pair and their median
# (robust to the machine drifting between repetitions), and the two CPUs'
# cache-line round trip (`hora bench xcpu`: ~120 ns with the vCPUs on one
# L3, 430-510 across) before and after the runs and before each
# repetition's 2 workers. Needs
# the data (deploy/get-data.sh) and root for netns. data/mnist has 8,000
# training images: at batch 1024 an epoch is 4 steps of 2 workers, so per
# epoch costs weigh in; data/fashion-mnist (60,000) measures the steady state.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATCH=32 EPOCHS=6 REPS=3 NETNS=1 LO=1 DATA=data/mnist SETS=() CMP_SHM=0 CMP_HIER=0 LAYOUT=4x1 LO_OFF=0
CMP_SC=0 EACH_CPU=0 PREFIX=() ALSO=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batch) BATCH="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --skip-lo) LO=0; shift ;;
    --skip-netns) NETNS=0; shift ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --shm) SETS+=(--set "transport.shm=$2"); shift 2 ;;
    --hier) SETS+=(--set "collectives.hierarchical=$2"); shift 2 ;;
    --compare-shm) CMP_SHM=1; shift ;;
    --lo-off) LO_OFF=1; shift ;;
    --compare-hier) CMP_HIER=1; shift ;;
    --compare-single-copy) CMP_SC=1; shift ;;
    --each-cpu) EACH_CPU=1; shift ;;
    --also) ALSO="$2"; shift 2 ;;
    --netns-layout) LAYOUT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $LAYOUT =~ ^([0-9]+)x([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[2] >= 1 )) ||
  { echo "--netns-layout wants HOSTSxWORKERS, e.g. 2x2 (got '$LAYOUT')" >&2; exit 2; }
NH=${BASH_REMATCH[1]} NW=${BASH_REMATCH[2]}
HORA="$ROOT/build/hora"
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -d $ROOT/$DATA ]] || { echo "no $DATA (deploy/get-data.sh)" >&2; exit 1; }
TMP="$(mktemp -d)" TAG="hsc$$"
export HORA_SECRET="scaling-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
cleanup() {
  [[ $NETNS == 1 ]] && bash "$ROOT/deploy/netns-cluster.sh" down --tag "$TAG" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
cd "$ROOT"

train_section() {
  cat <<EOF
train:
  model: mnist_mlp
  data: $DATA
  epochs: $EPOCHS
  batch_size: $BATCH
  optimizer: {name: sgd, lr: 0.1, warmup_epochs: 1}
EOF
}
local_file() { # $1 workers
  cat >"$TMP/lo$1.yaml" <<EOF
cluster:
  name: scaling-lo-$1
  launcher: local
  bind: core
  port_base: $((30500 + 10 * $1))
  seeds: ["127.0.0.1:$((30500 + 10 * $1 + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: $1}
$(train_section)
EOF
}
netns_file() {
  {
    cat <<EOF
cluster:
  name: scaling-netns
  launcher: netns
  port_base: 30600
  seeds: ["10.213.8.1:30601"]
  nodes:
EOF
    for i in $(seq 1 "$NH"); do echo "    - {host: 10.213.8.$i, netns: $TAG-$i, workers: $NW}"; done
    train_section
  } >"$TMP/ns.yaml"
}
# samples/s of one launch: median over epochs 2..E
run() { # file extra-args...
  local f="$1"; shift
  "${PREFIX[@]}" "$HORA" launch "$f" --set "train.metrics=$TMP/m.jsonl" "${SETS[@]}" "$@" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out" >&2; return 1; }
  python3 -c "
import json, statistics as st
r = [json.loads(l) for l in open('$TMP/m.jsonl')]
print(st.median(x['samples_per_s'] for x in r[1:] or r))"
}
med() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
# the same efficiency from each repetition's own pair (1 worker, then the 2
# right after it): robust to the machine drifting between repetitions
paired() { # label "ones" "twos"
  python3 -c "
import statistics, sys
o, t = [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
r = [b / (2 * a) for a, b in zip(o, t)]
print(f'efficiency {sys.argv[1]}, per repetition: ' + ' '.join(f'{x:.3f}' for x in r) + f'; median {statistics.median(r):.3f}')" "$@"
}

if [[ $LO == 1 ]]; then
  local_file 1; local_file 2
  # the two CPUs' cache-line round trip, before and after the runs and
  # before each repetition's 2 workers: what every cross-core transfer of
  # the shared-memory average pays (the host places a VM's vCPUs; it moves
  # between runs)
  XCPU_BEFORE="$("$HORA" bench xcpu 2>&1 | sed "s/ (median.*//" || true)"
  one=() two=() twooff=() nocomm=() twocopy=() onecpu1=() twoalso=()
  CPU_LAST=$(python3 -c "import os; a = sorted(os.sched_getaffinity(0)); print(a[1] if len(a) > 1 else a[0])")
  two_sets=() two_label="" # --compare-shm: the 2 workers' runs name the setting they compare
  (( CMP_SHM )) && two_sets=(--set transport.shm=auto) two_label=", transport.shm=auto"
  xc=() # the round trip right before each repetition's 2 workers
  for r in $(seq "$REPS"); do
    one+=("$(run "$TMP/lo1.yaml")")
    xc+=("$("$HORA" bench xcpu 2>&1 | sed -n 's/.*round trip \([0-9]*\) ns.*/\1/p' | head -n 1)")
    two+=("$(run "$TMP/lo2.yaml" "${two_sets[@]}")")
    (( CMP_SHM )) && twooff+=("$(run "$TMP/lo2.yaml" --set transport.shm=off)")
    (( LO_OFF )) && nocomm+=("$(run "$TMP/lo2.yaml" --set train.communication=false)")
    [[ -n $ALSO ]] && twoalso+=("$(run "$TMP/lo2.yaml" "${two_sets[@]}" --set "$ALSO")")
    (( CMP_SC )) && twocopy+=("$(run "$TMP/lo2.yaml" "${two_sets[@]}" --set train.fusion.single_copy=false)")
    if (( EACH_CPU )); then PREFIX=(taskset -c "$CPU_LAST"); onecpu1+=("$(run "$TMP/lo1.yaml")"); PREFIX=(); fi
  done
  m1=$(med "${one[@]}") m2=$(med "${two[@]}")
  echo "# lo, $DATA, batch $BATCH per worker, $EPOCHS epochs, $REPS interleaved reps, median samples/s ${SETS[*]}"
  echo "# BLAS kernels: $(bash "$ROOT/bench/blas-core.sh")"
  echo "# before: $XCPU_BEFORE; after: $("$HORA" bench xcpu 2>&1 | sed "s/ (median.*//" || true)"
  echo "1 worker (CPU 0): $m1   runs: ${one[*]}"
  echo "2 workers (CPU 0, 1)$two_label: $m2   runs: ${two[*]}"
  python3 -c "print(f'efficiency 2 workers$two_label: {$m2 / (2 * $m1):.3f}')"
  paired "2 workers$two_label" "${one[*]}" "${two[*]}"
  echo "cache-line round trip CPU 0 <-> CPU 1 before each repetition's 2 workers (ns): ${xc[*]}"
  # a variant of the 2 workers: its median, efficiency, paired efficiency
  # and (with a label for it) its ratio to the 2 workers' median
  variant() { # label ratio-label runs...
    local label="$1" ratio="$2"; shift 2
    local m; m=$(med "$@")
    echo "2 workers (CPU 0, 1)$label: $m   runs: $*"
    python3 -c "print(f'efficiency 2 workers$label: {$m / (2 * $m1):.3f}')"
    paired "2 workers$label" "${one[*]}" "$*"
    [[ -z $ratio ]] || python3 -c "print(f'$ratio: {$m2 / $m:.3f}')"
  }
  (( CMP_SHM )) && variant ", transport.shm=off" "" "${twooff[@]}"
  if (( LO_OFF )); then
    m2n=$(med "${nocomm[@]}")
    echo "2 workers (CPU 0, 1), train.communication=false: $m2n   runs: ${nocomm[*]}"
    python3 -c "print(f'efficiency 2 workers with no averaging (the ceiling on this host): {$m2n / (2 * $m1):.3f}')"
    paired "2 workers with no averaging" "${one[*]}" "${nocomm[*]}"
    python3 -c "print(f'2 workers averaging / not averaging$two_label: {$m2 / $m2n:.3f}')"
  fi
  (( CMP_SC )) && variant "$two_label, train.fusion.single_copy=false" "single copy / copying" "${twocopy[@]}"
  [[ -n $ALSO ]] && variant "$two_label, $ALSO" "without / $ALSO" "${twoalso[@]}"
  if (( EACH_CPU )); then
    m1c=$(med "${onecpu1[@]}")
    echo "1 worker (CPU $CPU_LAST): $m1c   runs: ${onecpu1[*]}"
    python3 -c "print(f'CPU $CPU_LAST / CPU 0, 1 worker: {$m1c / $m1:.3f} (2 synchronous workers step at the slower one\'s pace: efficiency at most {min($m1c, $m1) / $m1:.3f} with no averaging cost)')"
  fi
fi

if [[ $NETNS == 1 ]]; then
  bash deploy/netns-cluster.sh up "$NH" --rate 1gbit --tag "$TAG" >/dev/null
  netns_file
  NWK=$((NH * NW))
  on=() off=() flat=()
  on_sets=() on_label="" # --compare-hier: averaging with collectives.hierarchical on, and off (flat)
  (( CMP_HIER )) && on_sets=(--set collectives.hierarchical=on) on_label=", collectives.hierarchical=on"
  for r in $(seq "$REPS"); do
    on+=("$(run "$TMP/ns.yaml" "${on_sets[@]}")"); off+=("$(run "$TMP/ns.yaml" --set train.communication=false)")
    (( CMP_HIER )) && flat+=("$(run "$TMP/ns.yaml" --set collectives.hierarchical=off)")
  done
  mo=$(med "${on[@]}") mf=$(med "${off[@]}")
  echo "# netns, $NH hosts x $NW workers, tbf 1gbit, $DATA, batch $BATCH per worker, $EPOCHS epochs, $REPS reps ${SETS[*]}"
  echo "# BLAS kernels: $(bash "$ROOT/bench/blas-core.sh")"
  echo "$NWK workers, gradients averaged$on_label: $mo   runs: ${on[*]}"
  echo "$NWK workers, no communication:   $mf   runs: ${off[*]}"
  python3 -c "print(f'efficiency $NWK workers vs no communication$on_label: {$mo / $mf:.3f}')"
  if (( CMP_HIER )); then
    mfl=$(med "${flat[@]}")
    echo "$NWK workers, gradients averaged, collectives.hierarchical=off (flat ring): $mfl   runs: ${flat[*]}"
    python3 -c "print(f'efficiency $NWK workers vs no communication, collectives.hierarchical=off: {$mfl / $mf:.3f}')"
    python3 -c "print(f'hierarchical / flat: {$mo / $mfl:.3f}')"
  fi
fi
