#!/usr/bin/env bash
# test_launch_elastic.sh HORA - `hora launch` with train.elastic: a worker
# that dies is a casualty, not the end of the job. The workers are stand-ins
# (launch_standin.sh, run through the launcher's test hook
# HORA_LAUNCH_WORKER) that exit 0, exit non-zero, get killed or stop
# themselves as each test's plan says, in an order fixed by marker files and
# by waiting for a PID to be reaped (no sleeps to get an order right):
#  - exit 0 when training completed (a worker exited 0, and every worker
#    running then exited 0), with one summary line naming each death, how
#    and when; 1 when no worker completed or one failed after completion;
#  - restart: true starts a dead worker again with the same command line and
#    the same "[G host]" prefix, at most restart_limit times, never one that
#    exited 0, never after a forwarded SIGTERM;
#  - a stopped worker left after the others completed (or after the others
#    exited) is killed a grace period later and named;
#  - restart: true without elastic is refused before anything starts;
#  - elastic off: today's outcome and report, unchanged.
# Before (main): any death made the exit status 1 ("2 of 4 workers
# succeeded"), nothing was restarted, and a stopped worker kept the launcher
# running for ever once the others had exited 0. Kills only the PIDs it
# started (the launcher, and the stand-ins by the PIDs they wrote).
set -uo pipefail
HORA="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="$(mktemp -d)"
L=""
killall_standins() {
  for f in "$T"/d/pid.*; do [[ -e $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  return 0
}
cleanup() {
  [[ -n $L ]] && kill -KILL "$L" 2>/dev/null
  killall_standins
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export HORA_SECRET="launch-elastic-test-secret-0123456789"
export HORA_LAUNCH_WORKER="$ROOT/tests/cli/launch_standin.sh"
export STANDIN_DIR="$T/d"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -25; fi; }
P=$((12000 + RANDOM % 15000))
# cluster FILE WORKERS ELASTIC-YAML: a training job of WORKERS stand-ins
# (membership timings give a grace period of 2 x 0.2 + 3 = 3.4 s)
cluster() {
  cat >"$1" <<YAML
cluster:
  name: elastic-test
  launcher: local
  port_base: $P
  seeds: ["127.0.0.1:$((P + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: $2}
membership:
  probe_interval_ms: 100
  ping_timeout_ms: 40
  suspect_timeout_ms: 200
train:
  model: mnist_mlp
  data: data/mnist
  epochs: 1
$3
YAML
}
# plan G LINE...: what the n-th start of worker G does (line n)
plan() { local g=$1; shift; printf '%s\n' "$@" >"$T/d/plan.$g"; }
fresh() { killall_standins; rm -rf "$T/d"; mkdir -p "$T/d"; }
launch() { timeout 40 "$HORA" launch "$@" >"$T/out" 2>&1; }
summary() { grep '^hora launch: training ' "$T/out"; }
runs() { cat "$T/d/runs.$1" 2>/dev/null || echo 0; }
N='[0-9]+\.[0-9]'

cluster "$T/el.yaml" 4 "  elastic: {min_workers: 1}"
cluster "$T/re.yaml" 4 "  elastic: {restart: true, restart_limit: 2}"
cluster "$T/re2.yaml" 2 "  elastic: {restart: true, restart_limit: 2}"
cluster "$T/off.yaml" 4 ""

# 1. casualties: worker 1 exits 3, worker 2 is killed by SIGKILL, the
# others complete after both are gone: exit 0, both named, nothing restarted.
fresh
plan 1 'exit 3'
plan 2 'kill -KILL $$'
for g in 0 3; do plan $g 'waitgone 1; waitgone 2; exit 0'; done
launch "$T/el.yaml"; rc=$?
[[ $rc == 0 ]] && summary | grep -qxE "hora launch: training completed by 2 workers; worker 1 \(127\.0\.0\.1\) exited with status 3 at $N s; worker 2 \(127\.0\.0\.1\) was killed by SIGKILL at $N s" \
  && grep -q "hora launch: worker 2 on 127.0.0.1 was killed by SIGKILL at .* s; the others go on without it" "$T/out" \
  && [[ $(runs 1) == 1 && $(runs 2) == 1 ]] && ! grep -q "workers succeeded" "$T/out" && ! grep -q "killing it" "$T/out"
check "elastic: a worker killed and one exiting 3 are casualties; the job completes with exit 0, both named (rc=$rc)" $?

# 2. no worker died: exit 0, said so
fresh
for g in 0 1 2 3; do plan $g 'exit 0'; done
launch "$T/el.yaml"; rc=$?
[[ $rc == 0 ]] && summary | grep -qx "hora launch: training completed by 4 workers; no worker died"
check "elastic: every worker exits 0: exit 0, 'training completed by 4 workers; no worker died' (rc=$rc)" $?

# 3. no worker completed: exit 1
fresh
for g in 0 1 2 3; do plan $g 'exit 1'; done
launch "$T/el.yaml"; rc=$?
[[ $rc == 1 ]] && summary | grep -qE "^hora launch: training did not complete \(no worker exited 0\); worker 0 \(127\.0\.0\.1\) exited with status 1 at $N s; .*; worker 3 \(127\.0\.0\.1\) exited with status 1 at $N s$"
check "elastic: every worker fails: exit 1, each named (rc=$rc)" $?

# 4. a worker running when training completed fails afterwards: exit 1
fresh
plan 0 'exit 0'
plan 1 'waitgone 0; exit 1'
for g in 2 3; do plan $g 'waitgone 0; exit 0'; done
launch "$T/el.yaml"; rc=$?
[[ $rc == 1 ]] && summary | grep -qxE "hora launch: training did not complete \(1 worker failed after it completed\); worker 1 \(127\.0\.0\.1\) exited with status 1 at $N s, after training completed"
check "elastic: a worker failing after training completed fails the job (rc=$rc)" $?

# 5. restart: worker 1 dies three times (SIGKILL, exit 3, SIGTERM) with
# restart_limit 2: restarted twice with the same prefix, the third death
# stays; the others complete after it and are never restarted.
fresh
plan 1 'kill -KILL $$' 'exit 3' 'mark final1; kill -TERM $$' 'exit 0'
for g in 0 2 3; do plan $g 'waitfor final1; waitgone 1; exit 0'; done
launch "$T/re.yaml"; rc=$?
[[ $rc == 0 ]] && summary | grep -qxE "hora launch: training completed by 3 workers; worker 1 \(127\.0\.0\.1\) was killed by SIGKILL at $N s and restarted at $N s \(1 of 2 restarts\); worker 1 \(127\.0\.0\.1\) exited with status 3 at $N s and restarted at $N s \(2 of 2 restarts\); worker 1 \(127\.0\.0\.1\) was killed by SIGTERM at $N s \(no restarts left: 2 of 2 used\)" \
  && [[ $(runs 1) == 3 && $(runs 0) == 1 && $(runs 2) == 1 && $(runs 3) == 1 ]] \
  && grep -q '^\[1 127\.0\.0\.1\] standin 1 run 3: ' "$T/out" \
  && grep -q "hora launch: restarted worker 1 on 127.0.0.1 (2 of 2 restarts)" "$T/out"
ok=$?; r="$(runs 0) $(runs 1) $(runs 2) $(runs 3)" # (a command substitution in check's arguments would reset $?)
check "restart: a dead worker is restarted at most restart_limit (2) times, the others never (rc=$rc, runs $r)" $ok

# 6. restart of a worker that then completes with the others: exit 0
fresh
plan 1 'kill -KILL $$' 'mark back1; exit 0'
plan 0 'waitfor back1; waitgone 1; exit 0'
launch "$T/re2.yaml"; rc=$?
[[ $rc == 0 ]] && summary | grep -qxE "hora launch: training completed by 2 workers; worker 1 \(127\.0\.0\.1\) was killed by SIGKILL at $N s and restarted at $N s \(1 of 2 restarts\)" \
  && [[ $(runs 1) == 2 ]]
check "restart: the restarted worker completes with the others: exit 0 (rc=$rc)" $?

# 7. SIGTERM to the launcher, and SIGINT to its process group (Ctrl-C: it
# reaches the launcher, which forwards it; each worker leads a group of its
# own): nothing is restarted, exit 1
for how in launcher group; do
  fresh
  for g in 0 1 2 3; do plan $g 'waitfor never'; done
  setsid "$HORA" launch "$T/re.yaml" >"$T/out" 2>&1 &
  L=$!
  # every stand-in in its plan's loop of builtins, past its start's
  # command substitutions (a SIGINT there once left one running: loaded run)
  for _ in $(seq 400); do [[ -e $T/d/inplan.0.1 && -e $T/d/inplan.1.1 && -e $T/d/inplan.2.1 && -e $T/d/inplan.3.1 ]] && break; sleep 0.05; done
  if [[ $how == launcher ]]; then kill -TERM "$L"; sig=SIGTERM; else kill -INT -- "-$L"; sig=SIGINT; fi
  wait "$L"; rc=$?; L=""
  [[ $rc == 1 ]] && summary | grep -qxE "hora launch: training did not complete \(no worker exited 0\)(; worker [0-3] \(127\.0\.0\.1\) was killed by $sig at $N s){4}" \
    && [[ $(runs 0) == 1 && $(runs 1) == 1 && $(runs 2) == 1 && $(runs 3) == 1 ]]
  check "restart: after $sig to the $how no worker is restarted; exit 1 (rc=$rc)" $?
done

# 8. a stopped worker (SIGSTOP) the others completed without: killed 3.4 s
# after they exited, named; exit 0, no process left.
fresh
plan 2 'kill -STOP $$; exit 0'
for g in 0 1 3; do plan $g 'waitstopped 2; exit 0'; done
launch "$T/el.yaml"; rc=$?
p2=$(cat "$T/d/pid.2" 2>/dev/null)
[[ $rc == 0 ]] && summary | grep -qxE "hora launch: training completed by 3 workers; worker 2 \(127\.0\.0\.1\) was killed by SIGKILL at $N s \(still running 3\.4 s after the others finished: stopped or hung\?\)" \
  && grep -q "hora launch: worker 2 on 127.0.0.1 is still running 3.4 s after the others finished (stopped or hung?): killing it (SIGKILL)" "$T/out" \
  && [[ -n $p2 ]] && ! kill -0 "$p2" 2>/dev/null
check "elastic: a stopped worker left after the others completed is killed and named; exit 0 (rc=$rc)" $?

# 9. a stopped worker and the only other one failed: killed, exit 1 (the
# launcher does not wait for ever on a frozen worker)
fresh
plan 1 'kill -STOP $$; exit 0'
plan 0 'waitstopped 1; exit 4'
cluster "$T/two.yaml" 2 "  elastic: {min_workers: 1}"
launch "$T/two.yaml"; rc=$?
[[ $rc == 1 ]] && summary | grep -qxE "hora launch: training did not complete \(no worker exited 0\); worker 0 \(127\.0\.0\.1\) exited with status 4 at $N s; worker 1 \(127\.0\.0\.1\) was killed by SIGKILL at $N s \(still running 3\.4 s after the workers not stopped exited: stopped or hung\?\)"
check "elastic: a stopped worker is killed once every other worker exited; exit 1 (rc=$rc)" $?

# 10. restart: true with elastic off: refused, nothing started
fresh
for g in 0 1 2 3; do plan $g 'exit 0'; done
cluster "$T/bad.yaml" 4 "  elastic: {restart: true, enabled: false}"
launch "$T/bad.yaml"; rc=$?
[[ $rc == 2 ]] && grep -q "bad.yaml: train.elastic.restart: true needs elastic training, and train.elastic.enabled is false" "$T/out" \
  && ! grep -q "workers on" "$T/out" && [[ $(runs 0) == 0 ]]
check "restart: true with enabled: false is refused before starting (rc=$rc)" $?
launch "$T/re.yaml" --set train.elastic.enabled=false; rc=$?
[[ $rc == 2 ]] && grep -q "train.elastic.restart: true needs elastic training" "$T/out" && [[ $(runs 0) == 0 ]]
check "restart: true with --set train.elastic.enabled=false is refused before starting (rc=$rc)" $?

# 11. elastic off: the plan of test 1 fails the job as before
fresh
plan 1 'exit 3'
plan 2 'kill -KILL $$'
for g in 0 3; do plan $g 'waitgone 1; waitgone 2; exit 0'; done
launch "$T/off.yaml"; rc=$?
[[ $rc == 1 ]] && grep -qx "hora launch: 2 of 4 workers succeeded" "$T/out" \
  && grep -q "hora launch: worker 1 on 127.0.0.1 exited with status 3; last lines:" "$T/out" \
  && grep -q "hora launch: worker 2 on 127.0.0.1 was killed by signal 9; last lines:" "$T/out" \
  && ! grep -q "training completed" "$T/out" && [[ $(runs 1) == 1 && $(runs 2) == 1 ]]
check "elastic off: a dead worker fails the job as before ('2 of 4 workers succeeded', exit 1) (rc=$rc)" $?

echo "launch-elastic: $pass passed, $fail failed"
[[ $fail == 0 ]]
