#!/usr/bin/env bash
# test_stall.sh STALL_RANK_BINARY [HORA DATA_DIR] - the stall inspector with real processes:
# three workers of a local cluster file, rank 2 sleeps before an allreduce.
#  1. warning: ranks 0 and 1 log, after stall_warning_s, that rank 2 has not
#     reached allreduce #1; everyone finishes once it arrives (value 3).
#  2. abort: with stall_abort_s (2 s, below a 30 s stall_warning_s), ranks 0
#     and 1 stop (exit 3) naming rank 2, and rank 2's late allreduce fails
#     instead of hanging. The abort is an error the allreduce returns
#     (HORA_ERR_STALL, -10005, with the report as its text), not an exit
#     from a library thread: the program goes on to print it.
#  3. with HORA and DATA_DIR (MNIST): `hora worker` training a job of three,
#     worker 2 stopped (SIGSTOP) mid-training: workers 0 and 1 exit 3 with
#     the report, which hora_train_run_comm returned to the CLI. The failure
#     detector is slowed down here (suspect_timeout_ms 20 s) so that the stall
#     inspector acts first; with the defaults it declares the stopped worker
#     dead first (exit 4: test_frozen.sh).
set -uo pipefail
BIN="$1"
T="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
export HORA_SECRET="stall-test-secret-$RANDOM$RANDOM"
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
PORT=$((12000 + RANDOM % 15000))
cat >"$T/c.yaml" <<YAML
cluster:
  name: stall
  port_base: $PORT
  seeds: ["127.0.0.1:$((PORT + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 3}
membership:
  probe_interval_ms: 100
  suspect_timeout_ms: 1000
YAML
run() { # sleep_s warn_s abort_s
  PIDS=()
  for g in 0 1 2; do
    HORA_CONFIG="$T/c.yaml" HORA_PROC=$g timeout 60 "$BIN" 2 "$1" "$2" "$3" >"$T/out$g" 2>&1 &
    PIDS+=($!)
  done
  for g in 0 1 2; do wait "${PIDS[$g]}"; echo $? >"$T/rc$g"; done
}

run 3 1 0
for g in 0 1; do
  grep -q "stall: rank $g has waited [0-9]* s in allreduce #1; ranks that have not reached it: rank 2 (no collective yet)" "$T/out$g"
  check "warning on rank $g names rank 2 and allreduce #1" $?
  grep -q "rank $g: allreduce rc 0 value 3" "$T/out$g"; check "rank $g finishes once rank 2 arrives" $?
done
! grep -q "stall:" "$T/out2"; check "the late rank itself does not warn" $?
[[ $(cat "$T/rc2") == 0 ]]; check "rank 2 exits 0" $?

run 8 30 2 # the abort comes before the (later) warning would
for g in 0 1; do
  [[ $(cat "$T/rc$g") == 3 ]] && grep -q "stall: rank $g waited [0-9]* s in allreduce #1 (stall_abort_s 2); ranks that have not reached it: rank 2 (no collective yet). Stopping this worker." "$T/out$g"
  check "abort on rank $g: exit 3, rank 2 named" $?
  grep -q "rank $g: allreduce rc -10005 value 1: stall: rank $g waited" "$T/out$g"
  check "rank $g's allreduce returns the stall error" $?
done
[[ $(cat "$T/rc2") == 1 ]] && grep -q "rank 2: allreduce rc -" "$T/out2"
check "the late rank's allreduce fails (no hang)" $?
if [[ $fail != 0 || -n ${VERBOSE:-} ]]; then
  for g in 0 1 2; do echo "--- worker $g"; cat "$T/out$g"; done
fi

HORA="${2:-}"
DATA="${3:-}"
if [[ -z $HORA || ! -f $DATA/train-images-idx3-ubyte ]]; then
  echo "skip the hora worker part (no hora binary or no MNIST in '${DATA}')"
  exit $fail
fi
sed -i 's/suspect_timeout_ms: 1000/suspect_timeout_ms: 20000/' "$T/c.yaml"
cat >>"$T/c.yaml" <<YAML
train:
  model: mnist_mlp
  data: $DATA
  epochs: 1000
  batch_size: 32
  stall_warning_s: 30
  stall_abort_s: 2
YAML
PIDS=()
for g in 0 1 2; do # no `timeout` in between: PIDS are the workers themselves
  "$HORA" worker --config "$T/c.yaml" --proc $g >"$T/w$g" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 300); do grep -q "^epoch 1/" "$T/w0" && break; sleep 0.1; done # training runs
kill -STOP "${PIDS[2]}"
for _ in $(seq 300); do # 30 s at most for workers 0 and 1 to stop
  kill -0 "${PIDS[0]}" 2>/dev/null || kill -0 "${PIDS[1]}" 2>/dev/null || break
  sleep 0.1
done
for g in 0 1; do
  kill -KILL "${PIDS[$g]}" 2>/dev/null # still running: fails below
  wait "${PIDS[$g]}"; echo $? >"$T/wrc$g"
done
kill -KILL "${PIDS[2]}"
wait "${PIDS[2]}" 2>/dev/null
for g in 0 1; do
  [[ $(cat "$T/wrc$g") == 3 ]] && grep -q "rank $g: .*stall: rank $g waited [0-9]* s in .* (stall_abort_s 2); ranks that have not reached it: .*rank 2" "$T/w$g"
  check "hora worker $g: exit 3 with the stall report" $?
done
if [[ $fail != 0 || -n ${VERBOSE:-} ]]; then
  for g in 0 1 2; do echo "--- hora worker $g"; tail -5 "$T/w$g"; done
fi
exit $fail
