#!/usr/bin/env bash
# test_crash_exit.sh HORA DATA_DIR - a worker killed (kill -9) in a plain
# job (elastic training off) with real processes: 4 workers of one `hora
# launch` train the MNIST MLP on a subset of DATA_DIR, and one is killed
# mid-training, several times over for each way of averaging: gradient
# allreduce, gossip (sync) and gossip async. Each time:
#  - every survivor exits 4 (HORA_ERR_LOST), its error naming the killed
#    worker (rank, worker, address) as declared dead by the failure
#    detector;
#  - the launcher exits 1 within 15 s of the kill (the failure detector's
#    time and the launcher's grace are 1.4 s and 5 s; the 30 s I/O timeout
#    would be past it), naming the killed worker as killed by signal 9.
# Before: the kill was often first seen by the shared-memory stage or a
# socket ("stage shm: local rank 2 ... died", "the peer's socket hung up")
# and a survivor's call returned that error, exit 1, before the loss
# watcher's verdict (2 of 3 kills). Kills only PIDs it started. Exit 77
# (skip) without MNIST or a python3.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=mnist_job.sh
. "$HERE/mnist_job.sh"
export HORA_SECRET="crash-exit-test-secret-$RANDOM$RANDOM-0123456789"
mnist_subset 4000 1000

# trial NAME VICTIM [train lines]: launch, kill -9 worker VICTIM in epoch 2, check
trial() {
  local name=$1 v=$2 P=$((12000 + RANDOM % 15000)) out="$T/$1.out"
  cat >"$T/$name.yaml" <<YAML
cluster:
  name: crash-exit
  launcher: local
  port_base: $P
  seeds: ["127.0.0.1:$((P + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 4}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
train:
  model: mnist_mlp
  data: $T/data
  epochs: 1000
  batch_size: 32
${3:-}
YAML
  "$HORA" launch "$T/$name.yaml" >"$out" 2>&1 &
  local L=$! w="" p
  PIDS+=($L)
  for _ in $(seq 600); do grep -q '^\[0 127.0.0.1\] epoch 1/' "$out" && break; sleep 0.1; done
  for p in $(ps -o pid= --ppid "$L"); do
    PIDS+=("$p")
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--proc $v " && w=$p
  done
  if [[ -z $w ]]; then
    check "$name: worker $v runs (epoch 1 reached)" 1
    tail -20 "$out"
    return
  fi
  local t0 t1 rc secs
  t0=$(date +%s.%N)
  kill -KILL "$w"
  for _ in $(seq 300); do kill -0 "$L" 2>/dev/null || break; sleep 0.05; done # 15 s at most
  t1=$(date +%s.%N)
  if kill -0 "$L" 2>/dev/null; then rc=timeout; else wait "$L"; rc=$?; fi
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  [[ $rc == 1 ]] && grep -q "worker $v on 127.0.0.1 was killed by signal 9" "$out"
  check "$name: the launcher exits 1 within 15 s of the kill, naming worker $v killed ($secs s, rc $rc)" $?
  local bad=0 g
  for g in 0 1 2 3; do
    [[ $g == "$v" ]] && continue
    if ! grep -q "worker $g on 127.0.0.1 exited with status 4" "$out" ||
      ! grep -q "^\[$g 127.0.0.1\] hora worker: rank [0-9]*: .*(worker $v, 127.0.0.1:$((P + 1 + v))) was declared dead by the failure detector" "$out"; then
      bad=1
      echo "  worker $g: $(grep -o "worker $g on 127.0.0.1 exited with status [0-9]*" "$out"): $(grep "^\[$g 127.0.0.1\] hora worker:" "$out" | cut -c1-300)"
    fi
  done
  check "$name: every survivor exits 4 naming worker $v as declared dead" $bad
  if [[ $bad != 0 || -n ${VERBOSE:-} ]]; then
    grep -v '^\[[0-3] 127.0.0.1\] epoch' "$out" | tail -30
  fi
}

for i in 1 2 3; do trial "allreduce-$i" 2; done
trial allreduce-w0 0
for i in 1 2 3; do trial "gossip-$i" 2 "  sync: gossip"; done
trial async 2 "  sync: gossip
  gossip: {mode: async, topology: exponential}"
exit $fail
