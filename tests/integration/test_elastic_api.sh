#!/usr/bin/env bash
# test_elastic_api.sh ELASTIC_PROG - hora.h's "elastic jobs" with real
# processes: three copies of elastic_prog (hora_init from HORA_CONFIG /
# HORA_PROC, a cluster file whose train section turns train.elastic on).
#  1. worker 2 is killed (SIGKILL) mid-run: workers 0 and 1 re-form as 2,
#     take one commit, and finish with exit 0 and the exact value (no step
#     lost or applied twice across the roll-back);
#  2. worker 2 is killed and started again: it joins the running job (its
#     hora_init returns once the others re-formed with it), receives the
#     state, and all three finish with the exact value; again with the
#     restarted worker loading for 3 s (ELASTIC_PROG_JOIN_LOAD_MS) before
#     its first call, above transport.io_timeout_ms 1000;
#  3. without train.elastic the same program is refused (not elastic), and
#     a re-form is refused on a communicator that is not elastic.
set -uo pipefail
PROG="$1"
T="$(mktemp -d)"
PIDS=()
cleanup() { # the programs (children of their timeout), then the timeouts
  for p in "${PIDS[@]}"; do pkill -KILL -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null; rm -rf "$T"
}
trap cleanup EXIT
export HORA_SECRET="elastic-api-test-$RANDOM$RANDOM"
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
STEPS=300 COMMIT=10 SLEEP_US=10000
WANT=$(( STEPS * (STEPS + 1) / 2 ))
file() { # elastic(0/1)
  local port=$((12000 + RANDOM % 15000))
  cat >"$T/c.yaml" <<YAML
cluster:
  name: elastic-api
  port_base: $port
  seeds: ["127.0.0.1:$((port + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 3}
membership:
  probe_interval_ms: 100
  suspect_timeout_ms: 500
YAML
  [[ $1 == 1 ]] && printf 'train:\n  elastic: {min_workers: 2}\n' >>"$T/c.yaml"
  [[ -n ${2:-} ]] && printf '%s\n' "$2" >>"$T/c.yaml"
}
start() { # worker
  HORA_CONFIG="$T/c.yaml" HORA_PROC=$1 timeout 60 "$PROG" "$STEPS" "$COMMIT" "$SLEEP_US" \
    >>"$T/out$1" 2>&1 &
  W[$1]=$!
  PIDS+=($!)
}
kill_worker() { # worker: SIGKILL to the program itself (the child of its timeout)
  pkill -KILL -P "${W[$1]}" || echo "  (worker $1: no program under its timeout, PID ${W[$1]}, to kill)"
  wait "${W[$1]}" 2>/dev/null
}
started() { # worker: its first line is out
  for _ in $(seq 100); do grep -q "started\|joined" "$T/out$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
done_ok() { # worker size
  grep -q "rank [0-9] of $2: done: step $STEPS value $WANT.0$" "$T/out$1"
}

# 1. a worker killed: the two others finish
file 1; rm -f "$T"/out*
for g in 0 1 2; do start $g; done
started 2; sleep 1
kill_worker 2
for g in 0 1; do
  wait "${W[$g]}"; rc=$?
  [[ $rc == 0 ]] && done_ok $g 2 && grep -q "of 2: view .*: took the commit at step" "$T/out$g"
  check "killed worker 2: worker $g re-forms as one of 2 and finishes with $WANT" $?
  [[ $rc == 0 ]] || { echo "  rc=$rc"; tail -5 "$T/out$g" | sed 's/^/  | /'; }
done

# 2. killed and started again: it joins. rejoin LABEL LOAD_MS [YAML]: the
# restarted worker sleeps LOAD_MS before its first call (a program
# loading its data; ELASTIC_PROG_JOIN_LOAD_MS), YAML goes in the file
rejoin() {
  file 1 "${3:-}"; rm -f "$T"/out*
  for g in 0 1 2; do start $g; done
  started 2; sleep 1
  kill_worker 2
  : >"$T/out2"
  ELASTIC_PROG_JOIN_LOAD_MS=$2 start 2
  for g in 0 1 2; do
    wait "${W[$g]}"; rc=$?
    [[ $rc == 0 ]] && done_ok $g 3
    check "worker 2 $1: worker $g finishes as one of 3 with $WANT" $?
    [[ $rc == 0 ]] || { echo "  rc=$rc"; tail -5 "$T/out$g" | sed 's/^/  | /'; }
  done
  grep -q "joined" "$T/out2" && grep -q "took the commit at step [1-9]" "$T/out2"
  check "worker 2 $1: it joined the running job and took a commit after step 0" $?
}
rejoin restarted 0
# the same, the restarted worker loading for 3 s before its first call,
# above transport.io_timeout_ms 1000: the others wait in
# hora_elastic_reform's readiness rounds (its keeper answers them)
rejoin "restarted, 3 s to load" 3000 "transport: {io_timeout_ms: 1000}"
grep -q "waited [2-9].[0-9] s for every worker of it to be ready" "$T/out0"
check "worker 0 waited for the slow one in the readiness rounds ($(grep -o 'waited [0-9.]* s' "$T/out0"))" $?

# 3. not elastic
file 0; rm -f "$T"/out*
for g in 0 1 2; do start $g; done
for g in 0 1 2; do
  wait "${W[$g]}"; rc=$?
  [[ $rc == 1 ]] && grep -q "not elastic" "$T/out$g"
  check "without train.elastic worker $g says it is not elastic (exit 1)" $?
done
exit $fail
