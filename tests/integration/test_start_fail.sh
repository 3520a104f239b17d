#!/usr/bin/env bash
# test_start_fail.sh HORA DATA_DIR - what no wait can mend ends the job at
# once, with real processes (random ports; an MNIST subset written here):
#   busy-elastic  a 4-worker elastic job (min_workers 2) whose worker 2's TCP
#                 port (port_base + 3) another process listens on: worker 2
#                 names the address and the busy port, the three others name
#                 worker 2 and its address, every worker exits non-zero and
#                 so does `hora launch`, within 20 s. Before: nothing printed,
#                 the launch still running after 40 s (the form tried again
#                 every 3 s for train.elastic.wait_s, 600 s).
#   busy-plain    the same without train.elastic: worker 2's message names
#                 the address (before: "listen: Address already in use").
#   alone         a 2-worker elastic job (min_workers 2, `hora worker` each):
#                 once it trains worker 0 gets SIGTERM (it leaves): worker 1,
#                 alone below min_workers with nobody to come back, exits 4
#                 within 15 s saying so, and its UDP port is free. Before: it
#                 waited train.elastic.wait_s (600 s) holding its ports.
#   alone-restart the same with train.elastic.restart: worker 1 waits (the
#                 launcher would start worker 0 again; here the test does)
#                 and both finish the job, exit 0.
# Asserts exit codes and messages, and that nothing waits for a timeout
# (the limits are several times the expected seconds). Kills only PIDs it
# started. Exit 77 (skip) without MNIST or python3.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=mnist_job.sh
. "$HERE/mnist_job.sh"
export HORA_SECRET="start-fail-test-secret-$RANDOM$RANDOM-0123456789"
mnist_subset 2000 500

# cluster FILE WORKERS PORT_BASE EPOCHS [train.elastic lines]
cluster() {
  cat >"$1" <<YAML
cluster:
  name: start-fail
  launcher: local
  port_base: $3
  seeds: ["127.0.0.1:$(($3 + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: $2}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
train:
  model: mnist_mlp
  data: $T/data
  epochs: $4
  batch_size: 32
${5:-}
YAML
}

cat >"$T/squat.py" <<'PYEOF'
# squat.py PORT HOLD_S: listen on 127.0.0.1:PORT (accept nothing) HOLD_S s
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(float(sys.argv[2]))
PYEOF

# busy NAME ELASTIC_LINES: a 4-worker launch with worker 2's TCP port held
busy() {
  local name=$1 P=$((12000 + RANDOM % 15000))
  cluster "$T/$name.yaml" 4 "$P" 1 "${2:-}"
  "$PY" "$T/squat.py" $((P + 3)) 60 >"$T/$name.squat" 2>&1 &
  local sq=$!
  PIDS+=("$sq")
  for _ in $(seq 100); do grep -q listening "$T/$name.squat" && break; sleep 0.05; done
  timeout 40 "$HORA" launch "$T/$name.yaml" >"$T/$name.out" 2>&1
  local rc=$?
  kill -KILL "$sq" 2>/dev/null; wait "$sq" 2>/dev/null
  check "$name: hora launch exits non-zero, not by the 40 s timeout (exit $rc)" \
    "$([[ $rc != 0 && $rc != 124 ]]; echo $?)"
  check "$name: worker 2 names its address and the busy port" \
    "$(grep -q "^\[2 127.0.0.1\] .*worker 2: .*cannot listen on TCP 127.0.0.1:$((P + 3)): Address already in use" \
      "$T/$name.out"; echo $?)"
}

# ---- busy-elastic -------------------------------------------------------------
busy busy-elastic "  elastic:
    min_workers: 2"
for g in 0 1 3; do
  check "busy-elastic: worker $g names worker 2 and its address" \
    "$(grep -q "^\[$g 127.0.0.1\] .*worker 2 (127.0.0.1:[0-9]*) left the job while it started" \
      "$T/busy-elastic.out"; echo $?)"
done
check "busy-elastic: no worker succeeded" \
  "$(grep -q "training did not complete" "$T/busy-elastic.out"; echo $?)"

# ---- busy-plain ---------------------------------------------------------------
busy busy-plain ""

# ---- alone --------------------------------------------------------------------
P=$((12000 + RANDOM % 15000))
cluster "$T/alone.yaml" 2 "$P" 200 "  elastic:
    min_workers: 2"
for g in 0 1; do
  "$HORA" worker --config "$T/alone.yaml" --proc $g >"$T/alone.$g" 2>&1 &
  PIDS+=($!)
  eval "w$g=\$!"
done
for _ in $(seq 600); do grep -q 'epoch 1/' "$T/alone.0" && break; sleep 0.1; done
check "alone: the job trains" "$(grep -q 'epoch 1/' "$T/alone.0"; echo $?)"
kill -TERM "$w0"
wait "$w0" 2>/dev/null
end=$((SECONDS + 15))
while kill -0 "$w1" 2>/dev/null && [[ $SECONDS -lt $end ]]; do sleep 0.1; done
if kill -0 "$w1" 2>/dev/null; then
  check "alone: worker 1 ends within 15 s of worker 0's leave (still running)" 1
else
  wait "$w1"
  rc=$?
  check "alone: worker 1 exits 4 (exit $rc)" "$([[ $rc == 4 ]]; echo $?)"
fi
check "alone: worker 1 says it is alone and names worker 0" \
  "$(grep -q "worker 1 is alone: every other worker of the job left it (worker 0 (127.0.0.1:$((P + 1)))" \
    "$T/alone.1"; echo $?)"
check "alone: worker 1's UDP port $((P + 2)) is free" \
  "$(! ss -Hlun "sport = :$((P + 2))" 2>/dev/null | grep -q .; echo $?)"

# ---- alone-restart ------------------------------------------------------------
# with train.elastic.restart the launcher starts a stopped worker again: the
# one left alone waits for it (here started again by hand) and the job ends
P=$((12000 + RANDOM % 15000))
cluster "$T/alone-r.yaml" 2 "$P" 200 "  elastic:
    min_workers: 2
    restart: true"
for g in 0 1; do
  "$HORA" worker --config "$T/alone-r.yaml" --proc $g >"$T/alone-r.$g" 2>&1 &
  PIDS+=($!)
  eval "w$g=\$!"
done
for _ in $(seq 600); do grep -q 'epoch 1/' "$T/alone-r.0" && break; sleep 0.1; done
kill -TERM "$w0"
wait "$w0" 2>/dev/null
sleep 3
check "alone-restart: worker 1 waits for worker 0 to come back" "$(kill -0 "$w1" 2>/dev/null; echo $?)"
"$HORA" worker --config "$T/alone-r.yaml" --proc 0 >"$T/alone-r.0b" 2>&1 &
PIDS+=($!)
w0=$!
rc0=124 rc1=124
end=$((SECONDS + 120))
while { kill -0 "$w0" || kill -0 "$w1"; } 2>/dev/null && [[ $SECONDS -lt $end ]]; do sleep 0.1; done
kill -0 "$w0" 2>/dev/null || { wait "$w0"; rc0=$?; }
kill -0 "$w1" 2>/dev/null || { wait "$w1"; rc1=$?; }
check "alone-restart: worker 0, started again, and worker 1 finish the job (exit $rc0 $rc1)" \
  "$([[ $rc0 == 0 && $rc1 == 0 ]]; echo $?)"

if [[ $fail != 0 || -n ${VERBOSE:-} ]]; then
  for f in busy-elastic.out busy-plain.out alone.0 alone.1 alone-r.0 alone-r.1 alone-r.0b; do
    echo "---- $f"; tail -n 15 "$T/$f" 2>/dev/null
  done
fi
exit $fail
