#!/usr/bin/env bash
# test_job_stops.sh HORA DATA_DIR - a job that cannot go on stops on every
# worker with the cause, and an elastic job takes none of these for a lost
# worker (it re-formed, paused or trained on before). Real processes, a
# 4-worker MNIST job (a 2000/1000 sample subset of DATA_DIR) each:
#   full-disk      checkpoints every epoch on a 600 KiB tmpfs (a private
#                  mount namespace: skipped without one), elastic and not:
#                  every worker names checkpoint.hora.tmp and "No space left
#                  on device", no view change (elastic re-formed or paused)
#   metrics-full   train.metrics: /dev/full, elastic: the same for the metrics
#   metrics-open   a metrics file in a folder that does not exist, elastic:
#                  every worker exits 2 naming it (the workers that became
#                  rank 0 failed one after the other)
#   mixed-elastic  three workers with train.elastic and one without, and the
#                  reverse: every worker exits 2 naming train.elastic (the
#                  three trained as a job of 3, or waited 600 s)
#   resume-none    train.resume with no checkpoint: every worker exits 2 (1)
#   sync-key       train.sync: gossip after train.elastic: the refusal names
#                  the key once ("train.sync: train.sync: gossip")
# Kills only PIDs it started. Exit 77 (skip) without MNIST or a python3.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=mnist_job.sh
. "$HERE/mnist_job.sh"
export HORA_SECRET="stops-test-secret-$RANDOM$RANDOM-0123456789"
mnist_subset 2000 1000
EL="--set train.elastic.min_workers=2"

# cluster FILE: 4 workers on a random port base
cluster() {
  cat >"$1" <<YAML
cluster:
  name: stops
  launcher: local
  port_base: $((12000 + RANDOM % 15000))
  seeds: ["127.0.0.1:PORT1"]
  nodes:
    - {host: 127.0.0.1, workers: 4}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
train:
  model: mnist_mlp
  data: $T/data
  epochs: 4
  batch_size: 32
YAML
  local pb
  pb="$(awk '/port_base/ {print $2}' "$1")"
  sed -i "s/PORT1/$((pb + 1))/" "$1"
}

# every_worker NAME OUT REGEX: each of the 4 workers' lines (the launcher
# prefixes them "[g host]") has a "hora worker" error matching REGEX
every_worker() {
  local g ok=0
  for g in 0 1 2 3; do
    grep -qE "^\[$g [^]]*\] hora worker: .*$3" "$2" || { ok=1; echo "  worker $g: no line matching '$3'"; }
  done
  check "$1: every worker names it ($3)" $ok
}

# no_recovery NAME OUT: no view change, no pause
no_recovery() {
  check "$1: no worker re-formed or paused" "$(! grep -qE 'view [0-9]+: |training paused' "$2"; echo $?)"
}

# stops NAME REGEX HORA-LAUNCH-ARGS...: a launch that must fail on every
# worker (run under "${WRAP[@]}" when set)
WRAP=()
stops() {
  local name=$1 re=$2
  shift 2
  cluster "$T/$name.yaml"
  "${WRAP[@]}" timeout 120 "$HORA" launch "$T/$name.yaml" "$@" >"$T/$name.out" 2>&1
  local rc=$?
  check "$name: hora launch fails (exit $rc)" "$([[ $rc != 0 && $rc != 124 ]]; echo $?)"
  every_worker "$name" "$T/$name.out" "$re"
  no_recovery "$name" "$T/$name.out"
  [[ $fail == 0 ]] || { echo "--- $name output:"; grep -v '^\[.\{1,20\}\] epoch' "$T/$name.out" | tail -30; }
}

# full disk: the checkpoint (407 KB) fits once, the second write fails
mkdir -p "$T/full"
if unshare -m sh -c "mount -t tmpfs -o size=600k tmpfs '$T/full'" 2>/dev/null; then
  WRAP=(unshare -m sh -c 'mount -t tmpfs -o size=600k tmpfs "$1" && shift && exec "$@"' sh "$T/full")
  stops full-disk-elastic 'checkpoint: writing [^ ]*/checkpoint.hora.tmp: No space left on device' \
    --set "train.checkpoint.dir=$T/full" --set train.checkpoint.every_epochs=1 $EL
  stops full-disk-plain 'checkpoint: writing [^ ]*/checkpoint.hora.tmp: No space left on device' \
    --set "train.checkpoint.dir=$T/full" --set train.checkpoint.every_epochs=1
  WRAP=()
else
  echo "skip full-disk: no private mount namespace with a tmpfs (needs root)"
fi

stops metrics-full 'metrics: cannot write /dev/full: No space left on device' --set train.metrics=/dev/full $EL
stops metrics-open "metrics: cannot open $T/none/m.jsonl: No such file or directory" \
  --set "train.metrics=$T/none/m.jsonl" $EL
grep -q 'exited with status 2' "$T/metrics-open.out" &&
  ! grep -qE 'exited with status [^2]' "$T/metrics-open.out"
check "metrics-open: every worker exits 2" $?

# mixed NAME ELASTIC-WORKERS: 4 workers by hand, the listed ones elastic
mixed() {
  local name=$1 g pids=() rcs=""
  cluster "$T/$name.yaml"
  for g in 0 1 2 3; do
    local e=""
    [[ " $2 " == *" $g "* ]] && e=$EL
    timeout 120 "$HORA" worker --config "$T/$name.yaml" --proc $g $e >"$T/$name.$g" 2>&1 &
    pids+=($!)
  done
  PIDS+=("${pids[@]}")
  for g in 0 1 2 3; do
    wait "${pids[$g]}"
    rcs+="$? "
  done
  check "$name: every worker exits 2 ($rcs)" "$([[ $rcs == '2 2 2 2 ' ]]; echo $?)"
  local ok=0
  for g in 0 1 2 3; do grep -q 'train.elastic' "$T/$name.$g" || ok=1; done
  check "$name: every worker names train.elastic" $ok
  [[ $fail == 0 ]] || tail -n 3 "$T/$name".?
}
mixed mixed-elastic "0 1 2"
mixed mixed-plain "3"

# resume with no checkpoint: bad input, exit 2 on every worker (it was 1)
mkdir -p "$T/empty"
cluster "$T/rn.yaml"
timeout 120 "$HORA" launch "$T/rn.yaml" --set "train.checkpoint.dir=$T/empty" --set train.resume=true \
  >"$T/rn.out" 2>&1
check "resume-none: every worker exits 2, naming the missing file" \
  "$([[ $(grep -c 'exited with status 2' "$T/rn.out") == 4 ]] &&
    grep -q "$T/empty/checkpoint.hora: No such file or directory" "$T/rn.out"; echo $?)"

# a refusal names the key once
cluster "$T/sk.yaml"
"$HORA" worker --config "$T/sk.yaml" --proc 0 $EL --set train.sync=gossip >"$T/sk.out" 2>&1
rc=$?
check "sync-key: exit $rc, the key once ($(head -c 160 "$T/sk.out"))" \
  "$([[ $rc == 2 ]] && grep -q 'train.sync: gossip is not available with train.elastic' "$T/sk.out" &&
    ! grep -q 'train.sync: train.sync' "$T/sk.out"; echo $?)"
exit $fail
