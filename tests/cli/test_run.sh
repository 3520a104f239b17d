#!/usr/bin/env bash
# test_run.sh HORA RUN_ALLREDUCE - `hora run` (horovodrun's interface) and
# `hora launch FILE -- CMD`, with real processes:
#  - every copy gets HORA_CONFIG (absolute, a private 0600 file in a 0700
#    directory that is gone after the run), HORA_PROC, HORA_RANK, HORA_SIZE,
#    HORA_LOCAL_RANK, HORA_LOCAL_SIZE and a fresh HORA_SECRET (none on any
#    command line; the user's own when set); its lines come back "[G host]";
#  - a program calling hora_init(NULL, ...) (run_allreduce.c) joins the job
#    from that alone: the allreduce sums over -np 2 and 4, over -H with two
#    loopback "hosts" through a stand-in for ssh (fake_ssh.sh: the secret and
#    the file travel on its stdin, not its command line), over a CLUSTER.yaml
#    and over `hora launch FILE -- CMD` (with --set: an edited copy);
#  - a copy that exits 3 fails the job (exit 1, named with its last lines),
#    the others are killed after the grace period (membership.suspect_timeout_ms
#    set by --set: 2 x 0.2 + 3 s); SIGTERM to hora run reaches every copy;
#  - bad arguments exit 2 naming the thing (-np 0, no -np, -H malformed, a
#    hostfile's bad line as file:line, -np against the file, no command).
# Ports: a random base per run (generated files find free ports themselves).
# Kills only the PIDs it started.
set -uo pipefail
HORA="$1"
AR="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="$(mktemp -d)"
BG=""
trap '[[ -n $BG ]] && kill -KILL $BG 2>/dev/null; rm -rf "$T"' EXIT
unset HORA_SECRET HORA_CONFIG HORA_PROC
export TMPDIR="$T/tmp"  # the launchers' private directories go here: checked empty after each run
mkdir -p "$TMPDIR"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -25; fi; }
no_tmp_left() { [[ -z $(ls -A "$TMPDIR") ]]; }
sums() { # sums N: every rank 0..N-1 of N printed the sum N(N+1)/2, each with its prefix
  local n=$1 s=$(( $1 * ($1 + 1) / 2 )) g
  for ((g = 0; g < n; g++)); do
    grep -qE "^\[$g [0-9.]+\] rank $g of $n: sum $s $s$" "$T/out" || return 1
  done
}

# 1. the environment and the prefixes; the secret on no command line
"$HORA" run -np 3 -- sh -c 'echo "proc=$HORA_PROC rank=$HORA_RANK size=$HORA_SIZE lr=$HORA_LOCAL_RANK ls=$HORA_LOCAL_SIZE"
  echo "cfg=$HORA_CONFIG mode=$(stat -c %a "$HORA_CONFIG") dir=$(stat -c %a "$(dirname "$HORA_CONFIG")")"
  echo "secret=$HORA_SECRET"; echo "args=$(tr "\0" " " </proc/$$/cmdline) $(tr "\0" " " </proc/$PPID/cmdline)"' \
  >"$T/out" 2>&1; rc=$?
ok=$([[ $rc == 0 ]] && echo 0 || echo 1)
for g in 0 1 2; do
  grep -q "^\[$g 127.0.0.1\] proc=$g rank=$g size=3 lr=$g ls=3$" "$T/out" || ok=1
  grep -qE "^\[$g 127.0.0.1\] cfg=$TMPDIR/hora-run\.[A-Za-z0-9]+/cluster\.yaml mode=600 dir=700$" "$T/out" || ok=1
done
sec=$(sed -n 's/^\[0 127.0.0.1\] secret=//p' "$T/out")
[[ ${#sec} == 64 && $(grep -c "secret=$sec\$" "$T/out") == 3 ]] || ok=1  # one fresh secret for the job
[[ -n $sec && $(grep "args=" "$T/out") == *"$sec"* ]] && ok=1
grep -q "^hora run: hora-run: 3 workers on 1 node(s), launcher local$" "$T/out" || ok=1
grep -q "^hora run: 3 of 3 workers succeeded$" "$T/out" || ok=1
no_tmp_left || ok=1
check "-np 3: HORA_CONFIG/PROC/RANK/SIZE/LOCAL_*, one fresh 64-char secret on no argv, [G host] prefixes, tmp dir gone (rc=$rc)" $ok

# the user's HORA_SECRET is the job's (no fresh one)
HORA_SECRET=user-secret-0123456789abcdef "$HORA" run -np 2 sh -c 'echo "s=$HORA_SECRET"' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 && $(grep -c '\] s=user-secret-0123456789abcdef$' "$T/out") == 2 ]]
check "HORA_SECRET set: the copies get the user's secret (rc=$rc)" $?

# 2. hora_init(NULL, ...) from the environment alone: the allreduce's sum
for n in 2 4; do
  timeout 60 "$HORA" run -np $n "$AR" >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && sums $n && grep -q "$n of $n workers succeeded" "$T/out" && no_tmp_left
  check "-np $n $(basename "$AR"): hora_init(NULL) joins, sum $(( n * (n + 1) / 2 )) on every rank (rc=$rc)" $?
done

# hora worker as the command: without --config it takes HORA_CONFIG
timeout 60 "$HORA" run -np 3 -- "$HORA" worker --until-full-view >"$T/out" 2>&1; rc=$?
[[ $rc == 0 && $(grep -cE '^\[[0-2] 127\.0\.0\.1\] worker .*: rank [0-2] of 3 in view' "$T/out") == 3 ]] && no_tmp_left
check "hora run -np 3 hora worker --until-full-view: the file from HORA_CONFIG, a view of 3 (rc=$rc)" $?

# a Python interpreter is just another command (the Python package is not needed)
if [[ -x /usr/bin/python3 ]]; then
  "$HORA" run -np 2 /usr/bin/python3 -c 'import os; print("py", os.environ["HORA_PROC"], os.environ["HORA_SIZE"])' \
    >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -q '^\[0 127.0.0.1\] py 0 2$' "$T/out" && grep -q '^\[1 127.0.0.1\] py 1 2$' "$T/out"
  check "/usr/bin/python3 -c ... reads HORA_PROC (rc=$rc)" $?
fi

# 3. one copy exits 3: exit 1, named with its last lines; the others killed
# after the grace (2 x suspect_timeout_ms + 3 s, the --set acting)
timeout 60 "$HORA" run -np 3 --set membership.suspect_timeout_ms=200 -- \
  sh -c 'if [ "$HORA_PROC" = 1 ]; then echo "copy 1 gives up"; exit 3; fi; exec sleep 50' >"$T/out" 2>&1; rc=$?
[[ $rc == 1 ]] && grep -q "^hora run: worker 1 on 127.0.0.1 exited with status 3; last lines:" "$T/out" \
  && grep -q "^    copy 1 gives up$" "$T/out" \
  && [[ $(grep -c "^hora run: worker [02] on 127.0.0.1 is still running 3.4 s after worker 1 failed (stopped or hung?): killing it (SIGKILL)$" "$T/out") == 2 ]] \
  && grep -q "^hora run: 0 of 3 workers succeeded$" "$T/out" && no_tmp_left
check "a copy exits 3: exit 1 naming it, the others SIGKILLed 3.4 s later (--set suspect_timeout_ms), tmp gone (rc=$rc)" $?

# 4. SIGTERM to hora run reaches every copy, once; the job was stopped, not
# completed: exit 1 even when the copies exit 0
"$HORA" run -np 2 -- sh -c 'trap "echo got TERM; exit 0" TERM; echo ready; while :; do sleep 0.1; done' \
  >"$T/out" 2>&1 &
BG=$!
for _ in $(seq 100); do [[ $(grep -c "ready" "$T/out") == 2 ]] && break; sleep 0.1; done
kill -TERM $BG
timeout 20 tail --pid=$BG -f /dev/null; wait $BG; rc=$?
BG=""
[[ $rc == 1 ]] && grep -q "^hora run: forwarding signal 15 to 2 worker(s)$" "$T/out" \
  && [[ $(grep -c "^\[0 127.0.0.1\] got TERM$" "$T/out") == 1 && $(grep -c "^\[1 127.0.0.1\] got TERM$" "$T/out") == 1 ]] \
  && grep -q "^hora run: stopped by signal 15 (forwarded to the workers)$" "$T/out" && no_tmp_left
check "SIGTERM to hora run: forwarded to both copies once, exit 1 though they exit 0, tmp gone (rc=$rc)" $?

# Ctrl-C on a terminal signals the whole foreground process group: the
# launcher's, not the copies' (each leads its own), so each copy gets SIGINT
# once, from the launcher (before, the terminal's and the forwarded one)
setsid "$HORA" run -np 2 -- sh -c 'trap "echo got INT" INT; echo ready; i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done' \
  >"$T/out" 2>&1 &
BG=$!
for _ in $(seq 100); do [[ $(grep -c "ready" "$T/out") == 2 ]] && break; sleep 0.1; done
kill -INT -- "-$BG"
timeout 20 tail --pid=$BG -f /dev/null; wait $BG; rc=$?
BG=""
[[ $rc == 1 ]] && [[ $(grep -c "^\[0 127.0.0.1\] got INT$" "$T/out") == 1 && $(grep -c "^\[1 127.0.0.1\] got INT$" "$T/out") == 1 ]] \
  && no_tmp_left
check "SIGINT to the launcher's process group (Ctrl-C): each copy gets it once (rc=$rc)" $?

# the reader of hora run's output goes away (| head): the job is stopped as
# by a SIGTERM, at once, and the temporary directory removed (before: the
# launcher died of SIGPIPE and left it; ignoring SIGPIPE alone would run
# the job to its end for nobody)
t0=$(date +%s%N)
"$HORA" run -np 2 -- sh -c 'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done' \
  2>"$T/out" | head -n 3 >/dev/null
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
(( dt < 8000 )) && grep -q "^hora run: forwarding signal 15 to 2 worker(s)$" "$T/out" && no_tmp_left
check "hora run ... | head: the job stopped once its reader left, tmp gone (${dt} ms)" $?

# a copy that ignores the forwarded signal: SIGKILLed (with what it
# started) the grace period after it, named; exit 1
"$HORA" run -np 1 --set membership.suspect_timeout_ms=200 -- sh -c 'trap "" TERM; echo ready; sleep 40; echo woke' \
  >"$T/out" 2>&1 &
BG=$!
for _ in $(seq 100); do grep -q "ready" "$T/out" && break; sleep 0.1; done
t0=$(date +%s%N)
kill -TERM $BG
timeout 20 tail --pid=$BG -f /dev/null; wait $BG; rc=$?
BG=""
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
[[ $rc == 1 ]] && (( dt < 10000 )) \
  && grep -q "^hora run: worker 0 on 127.0.0.1 is still running 3.4 s after the launcher forwarded signal 15 (stopped or hung?): killing it (SIGKILL)$" "$T/out" \
  && ! grep -q woke "$T/out" && no_tmp_left
check "a copy that ignores a forwarded SIGTERM is SIGKILLed 3.4 s later, named; exit 1 (rc=$rc, ${dt} ms)" $?

# what a copy starts is in its process group: a copy that fails has the
# rest of the job ended with what they started (sleep 20 under sh), and a
# process left behind holding the output pipe does not hold the launcher
t0=$(date +%s%N)
timeout 60 "$HORA" run -np 2 --set membership.suspect_timeout_ms=200 -- \
  sh -c '[ "$HORA_PROC" = 0 ] && exit 3; sleep 20; echo woke' >"$T/out" 2>&1; rc=$?
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
[[ $rc == 1 ]] && (( dt < 12000 )) && ! grep -q woke "$T/out" && no_tmp_left
check "a copy fails: the other's sh and its sleep 20 are ended after the grace, not waited for (rc=$rc, ${dt} ms)" $?
t0=$(date +%s%N)
timeout 60 "$HORA" run -np 1 -- sh -c 'sleep 15 & echo "left $!"' >"$T/out" 2>&1; rc=$?
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
left=$(sed -n 's/^\[0 127.0.0.1\] left \([0-9]*\)$/\1/p' "$T/out")
[[ $rc == 0 ]] && (( dt < 10000 )) && [[ -n $left ]]
check "a copy exits 0 leaving a process that holds its output pipe: hora run returns (rc=$rc, ${dt} ms)" $?
[[ -n $left ]] && kill "$left" 2>/dev/null


# 5. -H with two loopback hosts through a stand-in for ssh (cluster.launcher
# template: the generated file edited by --set): the secret and the file on
# its stdin, not its command line; the remote copy's directory removed
log="$T/ssh.log"
timeout 60 "$HORA" run -np 4 -H 127.0.0.1:2,127.0.0.2:2 --set "cluster.launcher=$ROOT/tests/cli/fake_ssh.sh $log {host} {cmd}" \
  -- sh -c 'echo "at $HORA_CONFIG $HORA_LOCAL_RANK/$HORA_LOCAL_SIZE s=$HORA_SECRET"; exec "$0"' "$AR" >"$T/out" 2>&1; rc=$?
sec=$(sed -n 's/^\[0 127.0.0.1\] at .* s=//p' "$T/out")
ok=$([[ $rc == 0 && ${#sec} == 64 ]] && sums 4 && echo 0 || echo 1)
grep -q '^\[2 127.0.0.2\] at .* 0/2 s=' "$T/out" && grep -q '^\[1 127.0.0.1\] at .* 1/2 s=' "$T/out" || ok=1
[[ $(wc -l <"$log") == 4 ]] && grep -q "^127.0.0.2 " "$log" && ! grep -q -- "$sec" "$log" || ok=1
for d in $(sed -n 's/^\[[0-9] [0-9.]*\] at \(.*\)\/cluster.yaml .*/\1/p' "$T/out"); do [[ -e $d ]] && ok=1; done
no_tmp_left || ok=1
check "-H 127.0.0.1:2,127.0.0.2:2 over a template: sum 10, local ranks per host, no secret on the remote command line (rc=$rc)" $ok

# -H of hosts that are not this one: launcher ssh, cluster.ssh_command used
rm -f "$log"
timeout 30 "$HORA" run -np 2 -H 192.0.2.10:1,192.0.2.11 --set "cluster.ssh_command=$ROOT/tests/cli/fake_ssh.sh $log {host} {cmd}" \
  -- sh -c 'echo "p=$HORA_PROC"' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q "^hora run: hora-run: 2 workers on 2 node(s), launcher ssh$" "$T/out" \
  && grep -q '^\[1 192.0.2.11\] p=1$' "$T/out" && grep -q "^192.0.2.10 " "$log" && grep -q "^192.0.2.11 " "$log"
check "-H remote hosts: launcher ssh through cluster.ssh_command, one call per copy (rc=$rc)" $?

# --hostfile, filled in order up to -np (horovodrun's rule)
printf '# two hosts\n127.0.0.1 slots=2   # this one\n\n127.0.0.2 slots=2\n' >"$T/hosts"
timeout 30 "$HORA" run -np 3 --hostfile "$T/hosts" -- sh -c 'echo "p=$HORA_PROC n=$HORA_LOCAL_SIZE"' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q '^\[1 127.0.0.1\] p=1 n=2$' "$T/out" && grep -q '^\[2 127.0.0.2\] p=2 n=1$' "$T/out" \
  && grep -q "3 workers on 2 node(s), launcher local" "$T/out"
check "--hostfile, -np 3 of 4 slots: filled in order (rc=$rc)" $?

# 6. a CLUSTER.yaml: its workers; --set edits a copy for the commands
P=$((12000 + RANDOM % 15000))
sed -e "s/29500/$P/; s/29501/$((P + 1))/" "$ROOT/deploy/clusters/local.yaml" >"$T/local.yaml"
timeout 60 "$HORA" run -np 4 "$T/local.yaml" "$AR" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && sums 4 && grep -q "local-demo: 4 workers on 1 node(s)" "$T/out" && no_tmp_left
check "hora run -np 4 CLUSTER.yaml CMD: the file's workers, sum 10 (rc=$rc)" $?
timeout 60 "$HORA" run "$T/local.yaml" --set 'cluster.nodes[0].workers=2' -- "$AR" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && sums 2 && grep -q "local-demo: 2 workers" "$T/out" && no_tmp_left
check "hora run CLUSTER.yaml --set cluster.nodes[0].workers=2: the copy has 2 workers, sum 3 (rc=$rc)" $?
timeout 60 "$HORA" run -np 5 "$T/local.yaml" --set 'cluster.nodes[1].host=127.0.0.2' --set 'cluster.nodes[1].workers=1' \
  -- "$AR" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && sums 5 && grep -q '^\[4 127.0.0.2\] rank 4 of 5' "$T/out" && grep -q "5 workers on 2 node(s)" "$T/out"
check "--set cluster.nodes[1].host/workers: a node added to the copy, sum 15 (rc=$rc)" $?

# 7. hora launch FILE -- CMD: the command in place of hora worker
export HORA_SECRET="launch-cmd-test-secret-0123456789"
timeout 60 "$HORA" launch "$T/local.yaml" -- "$AR" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && sums 4 && grep -q "^hora launch: 4 of 4 workers succeeded$" "$T/out"
check "hora launch FILE -- CMD: 4 copies of CMD, sum 10 (rc=$rc)" $?
timeout 60 "$HORA" launch "$T/local.yaml" --set 'cluster.nodes[0].workers=3' -- sh -c \
  'echo "cfg=$HORA_CONFIG"; exec "$0"' "$AR" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && sums 3 && grep -qE "^\[0 127.0.0.1\] cfg=$TMPDIR/hora-run\.[A-Za-z0-9]+/cluster.yaml$" "$T/out" && no_tmp_left
check "hora launch FILE --set cluster.nodes[0].workers=3 -- CMD: an edited copy, 3 copies, sum 6 (rc=$rc)" $?
timeout 60 "$HORA" launch "$T/local.yaml" -- sh -c 'echo "cfg=$HORA_CONFIG"' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q "^\[3 127.0.0.1\] cfg=$T/local.yaml$" "$T/out"
check "hora launch FILE -- CMD without --set: HORA_CONFIG is the file's absolute path (rc=$rc)" $?
unset HORA_SECRET

# cluster.bind: core acts on a command too (pinned as hora worker pins itself)
ncpu=$(nproc)
"$HORA" run -np 2 --set cluster.bind=core -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -qP "^\[0 127.0.0.1\] Cpus_allowed_list:\t0$" "$T/out" \
  && grep -qP "^\[1 127.0.0.1\] Cpus_allowed_list:\t$((1 % ncpu))$" "$T/out"
check "--set cluster.bind=core: copy g pinned to CPU g mod $ncpu (rc=$rc)" $?
# by default, on this host with no more copies than CPUs: bound, as mpirun binds
all=$(grep -P '^Cpus_allowed_list:' /proc/self/status | cut -f2)
"$HORA" run -np 1 -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -qP "^\[0 127.0.0.1\] Cpus_allowed_list:\t0$" "$T/out"
check "by default -np 1 is bound to CPU 0 (rc=$rc)" $?
"$HORA" run -np 1 --set cluster.bind=none -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -qP "^\[0 127.0.0.1\] Cpus_allowed_list:\t$all$" "$T/out"
check "--set cluster.bind=none: unbound ($all) (rc=$rc)" $?
# more copies than CPUs: bound too, round robin (copy ncpu shares the
# first allowed CPU with copy 0)
first=${all%%[-,]*}
"$HORA" run -np $((ncpu + 1)) -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -qP "^\[$ncpu 127.0.0.1\] Cpus_allowed_list:\t$first$" "$T/out" \
  && grep -qP "^\[0 127.0.0.1\] Cpus_allowed_list:\t$first$" "$T/out" \
  && [[ $(grep -cP "\] Cpus_allowed_list:\t$all$" "$T/out") == 0 || $all == "$first" ]]
check "more copies than CPUs: bound by default, copy $ncpu on CPU $first (rc=$rc)" $?
# two loopback "hosts" are one machine: their copies on CPUs of their own
# (each node counted from CPU 0 put both on CPU 0)
if (( ncpu >= 2 )); then
  "$HORA" run -np 2 -H 127.0.0.1:1,127.0.0.2:1 -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
  c0=$(sed -n 's/^\[0 127.0.0.1\] Cpus_allowed_list:\t//p' "$T/out") c1=$(sed -n 's/^\[1 127.0.0.2\] Cpus_allowed_list:\t//p' "$T/out")
  [[ $rc == 0 && $c0 =~ ^[0-9]+$ && $c1 =~ ^[0-9]+$ && $c0 != "$c1" ]]
  check "-H 127.0.0.1:1,127.0.0.2:1: the copies bound to CPUs $c0 and $c1, not one (rc=$rc)" $?
fi
# the CPUs counted and bound to are those hora run may use (a cpuset, a
# taskset), not the host's: under taskset -c LAST, -np 1 is bound to LAST
# (not to CPU 0), and -np 2, more copies than CPUs, both on LAST, by default
# as with --set cluster.bind=core
if (( ncpu >= 2 )) && command -v taskset >/dev/null; then
  last=${all##*,} && last=${last##*-} # the highest CPU we may use ($all: e.g. 0-3 or 0,2-5)
  taskset -c "$last" "$HORA" run -np 1 -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -qP "^\[0 127.0.0.1\] Cpus_allowed_list:\t$last$" "$T/out"
  check "under taskset -c $last: -np 1 bound to CPU $last, the one allowed (rc=$rc)" $?
  for set in "" "--set cluster.bind=core"; do
    # shellcheck disable=SC2086
    taskset -c "$last" "$HORA" run -np 2 $set -- sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/out" 2>&1; rc=$?
    [[ $rc == 0 ]] && [[ $(grep -cP "\] Cpus_allowed_list:\t$last$" "$T/out") == 2 ]] && ! grep -q "cluster.bind" "$T/out"
    check "under taskset -c $last: -np 2 ${set:-by default}: both copies on CPU $last (rc=$rc)" $?
  done
fi

# 8. bad arguments: exit 2, the thing named, nothing started
bad() { # bad NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  timeout 20 "$HORA" run "$@" >"$T/out" 2>&1; local rc=$?
  [[ $rc == 2 ]] && grep -q -- "$pat" "$T/out" && ! grep -q "workers on" "$T/out" && no_tmp_left \
    && ! grep -q "$TMPDIR" "$T/out"  # a generated file is named as such, not by a path that is gone
  check "$name: exit 2 naming it (rc=$rc)" $?
}
bad "-np 0" "hora run: -np must be an integer in 1..128 (got '0')" -np 0 true
bad "-np past a job's most workers" "hora run: -np must be an integer in 1..128 (got '129')" -np 129 true
bad "-np x" "hora run: -np must be an integer in 1..128 (got 'x')" -np x true
bad "no -np" "hora run: -np N is missing" true
bad "no command" "hora run: no command to run" -np 2
bad "-np without a value" "hora run: -np must be an integer in 1..128 (got 'nothing')" -np
bad "an unknown option" "hora run: unknown option '--frobnicate'" -np 2 --frobnicate true
bad "-H host:x" "hora run: -H '127.0.0.1:x': '127.0.0.1:x' is not host\[:slots\]" -np 2 -H 127.0.0.1:x true
bad "-H with an empty entry" "is not host\[:slots\]" -np 2 -H 127.0.0.1:1,,127.0.0.2:1 true
bad "-H host:0" "is not host\[:slots\] with slots a positive integer" -np 1 -H 127.0.0.1:0 true
bad "-H unresolvable" "cannot resolve host 'no-such-host.invalid'" -np 1 -H no-such-host.invalid:1 true
bad "-H a host twice" "host '127.0.0.1' (127.0.0.1) is named twice" -np 2 -H 127.0.0.1:1,127.0.0.1:1 true
bad "-np over the slots" "hora run: -np 5 is more than the 4 slot(s) of -H" -np 5 -H 127.0.0.1:2,127.0.0.2:2 true
printf '127.0.0.1 slots=2\n127.0.0.2 slots=two\n' >"$T/badhosts"
bad "a hostfile's bad line" "hora run: $T/badhosts:2: expected 'HOST slots=N'" -np 2 --hostfile "$T/badhosts" true
printf '127.0.0.1 slots=2 extra\n' >"$T/badhosts"
bad "a hostfile line with a third word" "hora run: $T/badhosts:1: expected 'HOST slots=N'" -np 2 --hostfile "$T/badhosts" true
{ printf '127.0.0.1 slots=1 #'; head -c 2000 /dev/zero | tr '\0' x; printf '\n127.0.0.2 slots=1\n'; } >"$T/badhosts"
bad "a hostfile line of 2000 bytes (not split into lines)" "hora run: $T/badhosts:1: a line longer than 1022 bytes" -np 2 --hostfile "$T/badhosts" true
bad "a missing hostfile" "hora run: --hostfile $T/nohosts: No such file" -np 2 --hostfile "$T/nohosts" true
bad "-np against the file" "hora run: -np 3, but $T/local.yaml has 4 worker(s)" -np 3 "$T/local.yaml" true
bad "-H and a file" "hora run: give one of -H, --hostfile and CLUSTER.yaml" -np 4 -H 127.0.0.1:4 "$T/local.yaml" true
bad "a bad --set" "--set 'collectives.algorithm=fancy'" -np 2 --set collectives.algorithm=fancy true
bad "--set of no key" "unknown key 'cluster.nonsense'" -np 2 --set cluster.nonsense=1 true
bad "cluster.bind: core for remote copies" "cluster.bind: core pins the processes it starts on this host" \
  -np 1 -H 192.0.2.10:1 --set cluster.bind=core true
bad "a loopback host beside a remote one" "hora run: -H: host 'localhost' is a loopback address (127.0.0.1), which 192.0.2.10 cannot reach" \
  -np 2 -H localhost:1,192.0.2.10:1 true
bad "a --set the whole-file check refuses" "hora run: the job's cluster file (written by hora run): membership.suspect_timeout_ms (100) must be at least" \
  -np 2 --set membership.suspect_timeout_ms=100 true
bad "--port out of range" "hora run: --port must be an integer in 1024..60000 (got '80')" -np 2 --port 80 true

echo "run: $pass passed, $fail failed"
[[ $fail == 0 ]]
