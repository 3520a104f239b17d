#!/usr/bin/env bash
# test_launch_set.sh HORA_BIN - every `hora launch --set` reaches every
# worker: keys of the cluster, membership and collectives sections act in the
# workers as they do in the launcher (which starts as many workers as the
# edited file has), not only train.* keys. Each job is the shipped
# deploy/clusters/local.yaml on random ports of its own; the training job
# needs data/mnist (deploy/get-data.sh) and is skipped without it.
set -uo pipefail
HORA="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
export HORA_SECRET="launch-set-test-secret-0123456789"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -20; fi; }
P=$((12000 + RANDOM % 15000))
sed -e "s/29500/$P/; s/29501/$((P + 1))/" "$ROOT/deploy/clusters/local.yaml" >"$T/local.yaml"

# cluster.nodes[0].workers=3: three workers, each forming the view of three
# (before: the workers re-read the file, and each waited for a 4th).
timeout 60 "$HORA" launch "$T/local.yaml" --set 'cluster.nodes[0].workers=3' -- --until-full-view \
  >"$T/out" 2>&1; rc=$?
[[ $rc == 0 && $(grep -cE '^\[[0-2] 127\.0\.0\.1\] worker .*: rank [0-2] of 3 in view' "$T/out") == 3 ]] \
  && grep -q "local-demo: 3 workers on 1 node(s)" "$T/out" && grep -q "3 of 3 workers succeeded" "$T/out" \
  && ! grep -q '^\[3 ' "$T/out"
check "--set cluster.nodes[0].workers=3: 3 workers, each in a view of 3 (rc=$rc)" $?

# cluster.port_base and cluster.seeds: the workers listen where the edited
# file says, worker g on port_base + 1 + g.
Q=$((P + 100))
timeout 60 "$HORA" launch "$T/local.yaml" --set cluster.port_base=$Q --set "cluster.seeds=127.0.0.1:$((Q + 1))" \
  -- --until-full-view >"$T/out" 2>&1; rc=$?
ok=$([[ $rc == 0 ]] && echo 0 || echo 1)
for g in 0 1 2 3; do
  grep -q "^\[$g 127.0.0.1\] worker 127.0.0.1:$((Q + 1 + g)): up (membership on UDP port $((Q + 1 + g)))" "$T/out" || ok=1
done
check "--set cluster.port_base, cluster.seeds: worker g listens on port_base + 1 + g (rc=$rc)" $ok

# membership.join_timeout_ms with a seed that nobody runs: every worker gives
# up after the edited timeout and says so (before: the file's seed, worker 0,
# admitted them all and the job succeeded).
timeout 60 "$HORA" launch "$T/local.yaml" --set "cluster.seeds=127.0.0.1:$((P + 50))" \
  --set membership.join_timeout_ms=500 -- --until-full-view >"$T/out" 2>&1; rc=$?
[[ $rc == 1 ]] && grep -q "0 of 4 workers succeeded" "$T/out" \
  && [[ $(grep -c "never joined: no authenticated answer from 1 seed(s) within .* ms (membership.join_timeout_ms" "$T/out") -ge 4 ]]
check "--set membership.join_timeout_ms and cluster.seeds reach every worker (rc=$rc)" $?

# a train key for a membership-only job: refused before starting, as each
# worker would refuse it
timeout 60 "$HORA" launch "$T/local.yaml" --set train.epochs=2 -- --until-full-view >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q -- "--set train.epochs=2: train keys apply to a training job only" "$T/out" \
  && ! grep -q "workers on" "$T/out"
check "--set train.KEY with --until-full-view is refused before starting (rc=$rc)" $?

# the training job with 3 workers (before: 3 workers waiting 30 s for a 4th)
if [[ -d $ROOT/data/mnist ]]; then
  (cd "$ROOT" && timeout 180 "$HORA" launch "$T/local.yaml" --set 'cluster.nodes[0].workers=3' \
     --set train.epochs=1 --set collectives.algorithm=ring) >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -q '3 workers (global batch 96, lr x 3)' "$T/out" \
    && grep -q '^\[0 127.0.0.1\] epoch 1/1 .* val_acc 0\.[89]' "$T/out" && grep -q "3 of 3 workers succeeded" "$T/out"
  check "--set cluster.nodes[0].workers=3 trains with 3 workers (rc=$rc)" $?
  # the same value refused in the launcher and in every worker
  (cd "$ROOT" && timeout 60 "$HORA" launch "$T/local.yaml" --set collectives.algorithm=fancy) >"$T/out" 2>&1; rc=$?
  [[ $rc == 2 ]] && [[ $(grep "collectives.algorithm" "$T/out") == *fancy* ]] \
    && ! grep -q "workers on" "$T/out"
  check "--set collectives.algorithm=fancy refused before starting (rc=$rc)" $?
else
  echo "skip the training job: no data/mnist (deploy/get-data.sh)"
fi

echo "launch-set: $pass passed, $fail failed"
[[ $fail == 0 ]]
