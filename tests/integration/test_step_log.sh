#!/usr/bin/env bash
# test_step_log.sh HORA DATA_DIR - the HORA_TEST_STEP_LOG test hook that
# bench/elastic.sh times recoveries with: a 2-worker elastic `hora launch`
# (2 epochs of MNIST, batch 32) with the hook set must leave PREFIX.0 and
# PREFIX.1, each with one "wallclock_ns step view" line per step: steps
# 1..N in order (N = 2 x ceil(8000 / 64) = 250 on data/mnist's 8,000
# images), view 1, the clock never going back, and the two files agreeing
# on N; with elastic off the hook writes nothing (it lives in elastic.c).
# Exit 77 (skip) without MNIST.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
if [[ ! -f $DATA/train-images-idx3-ubyte ]]; then
  echo "skip: no MNIST in '$DATA' (deploy/get-data.sh)"
  exit 77
fi
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
export HORA_SECRET="step-log-test-secret-$RANDOM$RANDOM-0123456789"
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
P=$((12000 + 10 * (RANDOM % 1500)))
cluster() { # FILE PORT_BASE
  cat >"$1" <<YAML
cluster:
  name: step-log
  launcher: local
  port_base: $2
  seeds: ["127.0.0.1:$(($2 + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 2}
train:
  model: mnist_mlp
  data: $DATA
  epochs: 2
  batch_size: 32
YAML
}
cluster "$T/c.yaml" "$P"
cluster "$T/off.yaml" "$((P + 5))"
HORA_TEST_STEP_LOG="$T/st" "$HORA" launch "$T/c.yaml" --set train.elastic.enabled=true >"$T/out" 2>&1
check "elastic job with the hook exits 0" $?
n=$(awk 'END { print NR }' "$T/st.0" 2>/dev/null || echo 0)
for g in 0 1; do
  awk -v n=250 'NF != 3 || $2 != NR || $3 != 1 || $1 < prev { bad = 1 } { prev = $1 }
    END { exit bad || NR != n }' "$T/st.$g" 2>/dev/null
  check "st.$g: 250 lines 'wallclock_ns step view', steps 1..250, view 1, time non-decreasing" $?
done
[[ $n == $(awk 'END { print NR }' "$T/st.1" 2>/dev/null || echo x) ]]
check "both workers logged the same number of steps" $?
rm -f "$T"/st.*
HORA_TEST_STEP_LOG="$T/st" "$HORA" launch "$T/off.yaml" >"$T/out" 2>&1
check "elastic off: the job exits 0" $?
! ls "$T"/st.* >/dev/null 2>&1
check "elastic off: the hook writes nothing" $?
[[ $fail == 0 ]] || { tail -20 "$T/out"; exit 1; }
