#!/usr/bin/env bash
# test_worker_flags.sh HORA_BIN - `hora worker` flags are applied or refused,
# never ignored: on the training path (--config with a train section)
# --seed, --secret-file, --probe-interval-ms, --suspect-timeout-ms and
# --expect act as their keys in the file and --listen / --run-ms are refused
# naming the flag; --set needs --config; a joiner that never joined exits 1
# saying so, also when --run-ms ends first; cluster.bind: core pins every
# thread of the worker. Workers start on random ports
# and are stopped by PID. No training data needed: each training case
# fails or is refused before the data is read (train.data does not exist).
set -uo pipefail
HORA="$1"
T="$(mktemp -d)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
export HORA_SECRET="worker-flags-test-secret-0123456789"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -8; fi; }
expect() { # name, want_rc, want_text, cmd...
  local name=$1 want=$2 text=$3; shift 3
  timeout 30 "$@" >"$T/out" 2>&1; local rc=$?
  [[ $rc == "$want" ]] && grep -qF -- "$text" "$T/out"; check "$name (rc=$rc)" $?
}
P=$((12000 + RANDOM % 15000))
# one worker that is its own seed; a short join timeout so a worker that
# cannot form its view says so within a second
printf 'cluster:\n  port_base: %d\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\nmembership:\n  join_timeout_ms: 300\n  ping_timeout_ms: 150\ntrain:\n  data: %s/nodata\n  epochs: 1\n' \
  "$P" "$T" >"$T/one.yaml"
W=("$HORA" worker --config "$T/one.yaml" --proc 0)

expect "the file as it is: trains, and stops at the missing data" 2 "nodata/train-images-idx3-ubyte: missing" "${W[@]}"
expect "--listen on a training job is refused, naming the flag" 2 "--listen: a training job listens where the cluster file says" \
  "${W[@]}" --listen 127.0.0.1:$((P + 7))
expect "--run-ms on a training job is refused, naming the flag" 2 "--run-ms: a training job runs until its epochs are done" \
  "${W[@]}" --run-ms 1000
expect "--secret-file is applied (a missing one is refused)" 2 "/nonexistent/secret" \
  "${W[@]}" --secret-file /nonexistent/secret
expect "--seed is applied (nobody there: no member answered)" 1 "no member of the job answered" \
  "${W[@]}" --seed 127.0.0.1:$((P + 60))
expect "--expect is applied (5 members never come: no view)" 1 "no view" "${W[@]}" --expect 5
expect "--probe-interval-ms is applied (below the file's ping_timeout_ms)" 2 \
  "membership.probe_interval_ms (100)" \
  "${W[@]}" --probe-interval-ms 100
expect "--suspect-timeout-ms is applied (below probe_interval_ms)" 2 \
  "membership.suspect_timeout_ms (150)" \
  "${W[@]}" --suspect-timeout-ms 150
expect "--set membership key is applied by the worker" 1 "no view" \
  "${W[@]}" --set membership.min_members=3
expect "a bad flag value names the flag" 2 "--expect 0: membership.min_members" \
  "${W[@]}" --expect 0
expect "--metrics on a membership-only run is refused" 2 "--metrics: it applies to a training job only" \
  "${W[@]}" --until-full-view --metrics "$T/m.jsonl"
expect "a worker flag given to a seed is named" 2 "--expect is a worker flag" "$HORA" seed --expect 3
expect "--set without --config is refused" 2 "--set 'membership.min_members=2' needs --config" \
  "$HORA" worker --set membership.min_members=2

# A joiner with the wrong secret: a seed with the right one, the joiner's
# --run-ms (1500) shorter than its join timeout (10 s): exit 1, never joined.
S=$((P + 200))
"$HORA" seed --listen 127.0.0.1:$S >"$T/seed.log" 2>&1 & SEED=$!; PIDS+=("$SEED")
for _ in $(seq 50); do grep -q "up (membership" "$T/seed.log" && break; sleep 0.1; done
HORA_SECRET="not-the-cluster-secret-0123456789" expect "wrong secret, --run-ms < join timeout: exit 1, never joined" 1 \
  "never joined: no authenticated answer from 1 seed(s)" \
  "$HORA" worker --listen 127.0.0.1:$((S + 1)) --seed 127.0.0.1:$S --run-ms 1500
expect "right secret, --run-ms: joins and exits 0" 0 "joined" \
  "$HORA" worker --listen 127.0.0.1:$((S + 2)) --seed 127.0.0.1:$S --run-ms 1500
kill "$SEED"; wait "$SEED" 2>/dev/null

# cluster.bind: core pins every thread of the worker, OpenBLAS's (started
# before main) too, not just the one that called sched_setaffinity
B=$((P + 300))
printf 'cluster:\n  port_base: %d\n  bind: core\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' "$B" >"$T/bind.yaml"
"$HORA" worker --config "$T/bind.yaml" --proc 0 --run-ms 3000 >"$T/out" 2>&1 & WB=$!; PIDS+=("$WB")
for _ in $(seq 50); do grep -q "view" "$T/out" && break; sleep 0.1; done
first=$(grep -P '^Cpus_allowed_list:' /proc/self/status | cut -f2) && first=${first%%[,-]*}
nt=$(ls /proc/$WB/task 2>/dev/null | wc -l)
lists=$(cat /proc/$WB/task/*/status 2>/dev/null | grep '^Cpus_allowed_list:' | cut -f2 | sort -u | tr '\n' ' ')
kill "$WB" 2>/dev/null; wait "$WB" 2>/dev/null
(( nt >= 2 )) && [[ $lists == "$first " ]]
check "cluster.bind: core pins all $nt threads of the worker to CPU $first (threads on: $lists)" $?

echo "worker-flags: $pass passed, $fail failed"
[[ $fail == 0 ]]
