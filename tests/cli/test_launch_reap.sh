#!/usr/bin/env bash
# test_launch_reap.sh HORA [timed|untimed] - `hora launch` times a worker's
# death when it happens, not when it next reaps. Stand-in workers
# (launch_standin.sh through HORA_LAUNCH_WORKER), train.elastic on so that
# the launcher prints the time of each death ("... was killed by SIGKILL at
# T s", seconds since its start). Two deaths, each of a worker that first
# closes its output (the launcher sees its pipe end) and then kills itself
# (SIGKILL), writing the CLOCK_REALTIME time just before: worker 1 20 ms
# after closing, then, once worker 1 is reaped, worker 2 180 ms after
# closing; worker 0 exits 0 once worker 2 is reaped. The interval between
# the two printed times must be the interval between the kills. Three
# trials, each:
#  - the job completes (exit 0), the summary names both deaths;
#  - timed (the Release build; tests/CMakeLists.txt passes `untimed` under
#    the sanitizers, which only prints the figures): the printed interval is
#    within 50 ms of the real one.
# Before: the pipe's end woke the launcher, whose reap then found no
# zombie yet, and the next reap came with the poll's timeout, 200 ms after
# the pipe ended: worker 1's death was printed 180 ms late, worker 2's 20
# ms late, and the interval came out 160 ms short. Kills only the PIDs it
# started.
set -uo pipefail
HORA="$1"
MODE="${2:-timed}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="$(mktemp -d)"
L=""
cleanup() {
  [[ -n $L ]] && kill -KILL "$L" 2>/dev/null
  for f in "$T"/d/pid.*; do [[ -e $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export HORA_SECRET="launch-reap-test-secret-0123456789"
export HORA_LAUNCH_WORKER="$ROOT/tests/cli/launch_standin.sh"
export STANDIN_DIR="$T/d"
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; sed 's/^/  | /' "$T/out" | tail -15; fi; }
P=$((12000 + RANDOM % 15000))
cat >"$T/c.yaml" <<YAML
cluster:
  name: reap-test
  launcher: local
  port_base: $P
  seeds: ["127.0.0.1:$((P + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 3}
train:
  model: mnist_mlp
  data: data/mnist
  epochs: 1
  elastic: {min_workers: 1}
YAML
for trial in 1 2 3; do
  rm -rf "$T/d"
  mkdir -p "$T/d"
  echo 'waitgone 2; exit 0' >"$T/d/plan.0"
  echo 'exec >&- 2>&-; read -r -t 0.02 -u "$PAUSE" _; echo "$EPOCHREALTIME" >"$D/killed.1"; kill -KILL $$' \
    >"$T/d/plan.1"
  echo 'waitgone 1; exec >&- 2>&-; read -r -t 0.18 -u "$PAUSE" _; echo "$EPOCHREALTIME" >"$D/killed.2"; kill -KILL $$' \
    >"$T/d/plan.2"
  timeout 40 "$HORA" launch "$T/c.yaml" >"$T/out" 2>&1 &
  L=$!
  wait $L
  rc=$?
  L=""
  at() { sed -n "s/^hora launch: worker $1 on 127\.0\.0\.1 was killed by SIGKILL at \([0-9.]*\) s; the others go on without it.*/\1/p" "$T/out"; }
  t1=$(at 1) t2=$(at 2) k1=$(cat "$T/d/killed.1" 2>/dev/null) k2=$(cat "$T/d/killed.2" 2>/dev/null)
  [[ $rc == 0 ]] && grep -qE "^hora launch: training completed by 1 worker; worker 1 \(127\.0\.0\.1\) was killed by SIGKILL at [0-9]+\.[0-9] s; worker 2 \(127\.0\.0\.1\) was killed by SIGKILL at [0-9]+\.[0-9] s$" "$T/out"
  check "trial $trial: the job completes, the summary names both deaths" $?
  if [[ -z $t1 || -z $t2 || -z $k1 || -z $k2 ]]; then
    check "trial $trial: both deaths' times (printed '$t1' '$t2', kills '$k1' '$k2')" 1
    continue
  fi
  off=$(awk -v a="$t1" -v b="$t2" -v x="$k1" -v y="$k2" 'BEGIN { printf "%.3f", (b - a) - (y - x) }')
  echo "trial $trial: kills $(awk -v x="$k1" -v y="$k2" 'BEGIN { printf "%.3f", y - x }') s apart, printed $t1 s and $t2 s: off by $off s"
  if [[ $MODE == timed ]]; then
    awk -v o="$off" 'BEGIN { exit !(o <= 0.05 && o >= -0.05) }'
    check "trial $trial: the interval between the printed times is within 50 ms of the kills' ($off s)" $?
  fi
done
exit $fail
