#!/usr/bin/env bash
# test_membership.sh HORA_BIN - membership with real processes on loopback:
#  1. 8 workers join through one seed and all install the same 8-member view;
#  2. kill -9 of one: every other worker installs a 7-member view within
#     suspect_timeout (1 s) + 1 s of the kill, by its own clock;
#  3. the seed killed after bootstrap changes no view; restarted, it rejoins;
#  4. a late joiner (through a worker, the seed being gone) gets a view with it;
#  5. SIGTERM: graceful leave, a new view well before the failure detector;
#  6. a worker with the wrong secret is refused (exit 1, says why) and
#     changes no view.
# Only processes started here are signalled, by PID.
set -uo pipefail
HORA="$1"
T="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
export HORA_SECRET="membership-integration-$$-secret"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
last_view() { grep -o 'view [0-9]*: [0-9]* members, rank [-0-9]*[^[]*\[[^]]*\]' "$1" | tail -1; }
# wait_views N MS FILES...: every file's last view has N members, not paused, same id+members
wait_views() {
  local want=$1 ms=$2; shift 2
  local t0; t0=$(now_ms)
  while (( $(now_ms) - t0 < ms )); do
    local ok=1 first=""
    for f in "$@"; do
      local v; v=$(last_view "$f")
      [[ $v =~ ^view\ ([0-9]+):\ $want\ members,\ rank\ [0-9]+\ \[(.*)\]$ ]] || { ok=0; break; }
      local key="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
      if [[ -z $first ]]; then first=$key; elif [[ $key != "$first" ]]; then ok=0; break; fi
    done
    if (( ok )); then echo $(( $(now_ms) - t0 )); return 0; fi
    sleep 0.05
  done
  return 1
}

# latest_install T0 FILES...: ms from T0 (epoch ms) to the latest at_ms of
# the files' last view lines; empty if a file has none.
latest_install() {
  local t0=$1 max=-1; shift
  for f in "$@"; do
    local a; a=$(grep -o 'members, rank .*\] at_ms=[0-9]*' "$f" | tail -1 | sed 's/.*at_ms=//')
    [[ -n $a ]] || return 1
    (( a - t0 > max )) && max=$(( a - t0 ))
  done
  echo "$max"
}

SEED_PORT=$((11000 + RANDOM % 20000))
"$HORA" seed --listen 127.0.0.1:$SEED_PORT >"$T/seed.log" 2>&1 & SEED=$!; PIDS+=("$SEED")
W=(); F=()
for i in 0 1 2 3 4 5 6 7; do
  "$HORA" worker --listen 127.0.0.1:$((SEED_PORT + 1 + i)) --seed 127.0.0.1:$SEED_PORT --expect 8 >"$T/w$i.log" 2>&1 &
  W+=($!); PIDS+=($!); F+=("$T/w$i.log")
done
ms=$(wait_views 8 20000 "${F[@]}"); check "8 workers agree on one 8-member view (${ms:-timeout} ms)" $?

# 2. kill -9. Timed from the kill to the latest worker's own install time
#    (at_ms on its view line), not to when this loop gets round to reading the
#    logs: on a loaded 2-core machine under ASan that lag alone is 100+ ms.
victim=${W[5]}
rest=("${F[@]:0:5}" "${F[@]:6:2}")
t_kill=$(now_ms)
kill -9 "$victim"
ms=$(wait_views 7 5000 "${rest[@]}"); rc=$?
check "kill -9 detected, 7-member view agreed (seen by this script after ${ms:-timeout} ms)" $rc
det=$(latest_install "$t_kill" "${rest[@]}")
[[ $rc == 0 && -n $det && $det -le 2000 ]]
check "every survivor installed it within suspect_timeout + 1 s of the kill (${det:-?} <= 2000 ms)" $?

# 3. the seed dies: nothing changes
before=$(for f in "${rest[@]}"; do last_view "$f"; done | md5sum)
kill -9 "$SEED"
sleep 2.5
after=$(for f in "${rest[@]}"; do last_view "$f"; done | md5sum)
[[ $before == "$after" ]]; check "seed killed after bootstrap: no view change" $?

# 3b. the seed restarted on its address learns the cluster again (members
#     send JOIN to configured seeds nobody alive occupies, every 10 periods)
"$HORA" seed --listen 127.0.0.1:$SEED_PORT >"$T/seed2.log" 2>&1 & PIDS+=($!)
ok=1; for i in $(seq 1 100); do grep -q "8 members alive" "$T/seed2.log" && { ok=0; break; }; sleep 0.1; done
check "restarted seed rejoins: it sees the 7 workers (+ itself) alive" $ok
after=$(for f in "${rest[@]}"; do last_view "$f"; done | md5sum)
[[ $before == "$after" ]]; check "restarted seed changes no view" $?

# 4. a late joiner, through a worker
"$HORA" worker --listen 127.0.0.1:$((SEED_PORT + 20)) --seed 127.0.0.1:$((SEED_PORT + 1)) >"$T/late.log" 2>&1 &
PIDS+=($!)
ms=$(wait_views 8 10000 "${rest[@]}" "$T/late.log"); check "late joiner included in an 8-member view (${ms:-timeout} ms)" $?

# 5. graceful leave
rest2=("${F[@]:0:2}" "${F[@]:3:2}" "${F[@]:6:2}" "$T/late.log")
t_term=$(now_ms)
kill -TERM "${W[2]}"
ms=$(wait_views 7 5000 "${rest2[@]}"); rc=$?
check "SIGTERM: graceful leave, 7-member view agreed (seen after ${ms:-timeout} ms)" $rc
lv=$(latest_install "$t_term" "${rest2[@]}")
[[ $rc == 0 && -n $lv && $lv -lt 900 ]]
check "leave is faster than failure detection (${lv:-?} < 900 ms, latest install)" $?
grep -q "leaving (signal 15)" "$T/w2.log"; check "leaver says so" $?

# 6. wrong secret
before=$(for f in "${rest2[@]}"; do last_view "$f"; done | md5sum)
HORA_SECRET="not-the-cluster-secret-at-all" "$HORA" worker --listen 127.0.0.1:$((SEED_PORT + 30)) \
  --seed 127.0.0.1:$((SEED_PORT + 1)) --run-ms 20000 >"$T/bad.log" 2>&1
rc=$?
[[ $rc == 1 ]] && grep -q "no authenticated answer" "$T/bad.log"; check "wrong secret: refused, exit 1, says why (rc=$rc)" $?
after=$(for f in "${rest2[@]}"; do last_view "$f"; done | md5sum)
[[ $before == "$after" ]]; check "wrong secret changed no view" $?

echo "membership: $pass passed, $fail failed"
if (( fail )); then for f in "$T"/*.log; do echo "== $f"; tail -5 "$f"; done; fi
[[ $fail == 0 ]]
