#!/usr/bin/env bash
# test_stall.sh STALL_RANK_BINARY - the stall inspector with real processes:
# three workers of a local cluster file, rank 2 sleeps before an allreduce.
#  1. warning: ranks 0 and 1 log, after stall_warning_s, that rank 2 has not
#     reached allreduce #1; everyone finishes once it arrives (value 3).
#  2. abort: with stall_abort_s (2 s, below a 30 s stall_warning_s), ranks 0
#     and 1 stop (exit 3) naming rank 2, and rank 2's late allreduce fails
#     instead of hanging. The abort is an error the allreduce returns
#     (HORA_ERR_STALL, -10005, with the report as its text), not an exit
#     from a library thread: the program goes on to print it.
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
exit $fail
