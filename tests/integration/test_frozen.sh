#!/usr/bin/env bash
# test_frozen.sh HORA DATA_DIR - a frozen worker (SIGSTOP) with real processes:
# `hora launch` of a 3-worker MNIST job (deploy/clusters/local.yaml style,
# random ports, enough epochs to last), worker 2 stopped mid-training. With
# elastic training off the job must fail within the failure detector's time,
# not the 30 s I/O timeout:
#  - the launcher exits non-zero within 20 s of the SIGSTOP (detection is
#    suspect_timeout 1 s + 2 probe periods; then the launcher's grace,
#    2 x suspect_timeout + 3 s, before it kills the stopped worker; 20 s is a
#    generous bound, not a speed measurement);
#  - workers 0 and 1 exit 4 (HORA_ERR_LOST), each naming rank 2 (worker 2,
#    its address) as declared dead by the failure detector;
#  - the launcher names worker 2 and kills it (SIGKILL): no process of the
#    job is left.
# Before: the survivors waited for the I/O timeout and `hora launch` never
# exited while worker 2 lived. Kills only the PIDs it started (the launcher
# and, read from its children, the workers). Exit 77 (skip) without MNIST.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
if [[ ! -f $DATA/train-images-idx3-ubyte ]]; then
  echo "skip: no MNIST in '$DATA' (deploy/get-data.sh)"
  exit 77
fi
T="$(mktemp -d)"
L="" WPIDS=()
cleanup() {
  for p in "${WPIDS[@]}" $L; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
export HORA_SECRET="frozen-test-secret-$RANDOM$RANDOM-0123456789"
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
P=$((12000 + RANDOM % 15000))
cat >"$T/c.yaml" <<YAML
cluster:
  name: frozen
  launcher: local
  port_base: $P
  seeds: ["127.0.0.1:$((P + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 3}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
train:
  model: mnist_mlp
  data: $DATA
  epochs: 1000
  batch_size: 32
YAML
"$HORA" launch "$T/c.yaml" >"$T/out" 2>&1 &
L=$!
for _ in $(seq 600); do grep -q '^\[0 127.0.0.1\] epoch 2/' "$T/out" && break; sleep 0.1; done
grep -q '^\[0 127.0.0.1\] epoch 2/' "$T/out"; check "the job trains (epoch 2 reached)" $?
# the workers: the launcher's children, worker g with "--proc g" in its argv
W2=""
for p in $(ps -o pid= --ppid "$L"); do
  WPIDS+=("$p")
  tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--proc 2 " && W2=$p
done
[[ ${#WPIDS[@]} == 3 && -n $W2 ]]; check "three workers running, worker 2 is pid ${W2:-?}" $?
t0=$(date +%s.%N)
kill -STOP "$W2"
for _ in $(seq 400); do kill -0 "$L" 2>/dev/null || break; sleep 0.1; done # 40 s at most
t1=$(date +%s.%N)
if kill -0 "$L" 2>/dev/null; then
  rc=timeout
else
  wait "$L"; rc=$?
fi
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
echo "SIGSTOP of worker 2 to the launcher's exit: $secs s (rc $rc)"
[[ $rc != timeout && $rc != 0 ]] && awk -v s="$secs" 'BEGIN { exit !(s < 20) }'; check "the launcher exits non-zero within 20 s ($secs s, rc $rc)" $?
for g in 0 1; do
  grep -q "^\[$g 127.0.0.1\] hora worker: rank $g: .*rank 2 (worker 2, 127.0.0.1:$((P + 3))) was declared dead by the failure detector (view [0-9]* without it): the job stops (elastic training is off)" "$T/out"
  check "worker $g names rank 2 (worker 2, 127.0.0.1:$((P + 3))) as declared dead" $?
  grep -q "worker $g on 127.0.0.1 exited with status 4" "$T/out"; check "worker $g exits 4 (HORA_ERR_LOST)" $?
done
grep -q "hora launch: worker 2 on 127.0.0.1 is still running [0-9.]* s after worker [01] failed (stopped or hung?): killing it (SIGKILL)" "$T/out" \
  && grep -q "worker 2 on 127.0.0.1 was killed by signal 9" "$T/out" && grep -q "0 of 3 workers succeeded" "$T/out"
check "the launcher names worker 2 and kills it" $?
left=0
for p in "${WPIDS[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
check "no process of the job is left" $left
if [[ $fail != 0 || -n ${VERBOSE:-} ]]; then
  grep -v '^\[[0-2] 127.0.0.1\] epoch' "$T/out" | tail -40
fi
exit $fail
