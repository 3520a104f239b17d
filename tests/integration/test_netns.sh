#!/usr/bin/env bash
# test_netns.sh HORA_BIN - membership across network-namespace hosts:
#  1. `hora launch` of a netns cluster file (4 hosts made by
#     deploy/netns-cluster.sh) with the trivial job exits 0, every worker
#     having installed the full view;
#  2. with workers running, a 2|2 partition: no side forms a view of 2 and
#     every worker reports paused; after `heal` the cluster re-forms (a new
#     4-member view, not paused); SIGTERM to the launcher ends all: every
#     worker leaves (exits 0), and the launcher, stopped by a signal, exits 1.
# Exit 77 (skipped) without root, ip or nft. Cleans up on any exit.
set -uo pipefail
HORA="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NET="$ROOT/deploy/netns-cluster.sh"
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v nft >/dev/null; then
  echo "SKIP: needs root, iproute2 and nftables"; exit 77
fi
TAG="ht$$"
T="$(mktemp -d)"
LPID=""
cleanup() { [[ -n $LPID ]] && kill -9 "$LPID" 2>/dev/null; bash "$NET" down --tag "$TAG" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
export HORA_SECRET="netns-integration-$$-secret"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }
bash "$NET" up 4 --rate 1gbit --tag "$TAG" || { echo "FAIL netns-cluster up"; exit 1; }
sed -e "s/netns: hn-/netns: $TAG-/" "$ROOT/deploy/clusters/netns.yaml" >"$T/netns.yaml"

# 1. the trivial job
timeout 60 "$HORA" launch "$T/netns.yaml" -- --until-full-view >"$T/job.log" 2>&1
rc=$?
[[ $rc == 0 && $(grep -c "rank [0-9] of 4 in view" "$T/job.log") == 4 ]]
check "hora launch netns.yaml: 4 workers, full view, exit 0 (rc=$rc)" $?

# 2. the training job of the same file, 1 epoch, on the four hosts
if [[ -d $ROOT/data/mnist ]]; then
  (cd "$ROOT" && timeout 120 "$HORA" launch "$T/netns.yaml" --set train.epochs=1 \
     --set "train.metrics=$T/m.jsonl") >"$T/train.log" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -q '^\[0 10.213.8.1\] epoch 1/1 .* val_acc 0\.[89]' "$T/train.log" \
    && grep -q '"workers":4' "$T/m.jsonl"
  check "hora launch netns.yaml trains 1 epoch on 4 namespace hosts (rc=$rc)" $? || tail -20 "$T/train.log"
else
  echo "skip training on the namespace hosts: no data/mnist (deploy/get-data.sh)"
fi

# 3. partition and heal (membership only)
"$HORA" launch "$T/netns.yaml" -- --no-train >"$T/run.log" 2>&1 & LPID=$!
last() { grep "^\[$1 " "$T/run.log" | grep -o 'view [0-9]*: [0-9]* members.*' | tail -1; }
wait_all() { # pattern, seconds
  local t=0
  while (( t < $2 * 10 )); do
    local ok=1
    for g in 0 1 2 3; do [[ $(last "$g") =~ $1 ]] || ok=0; done
    (( ok )) && return 0
    sleep 0.1; t=$((t+1))
  done
  return 1
}
wait_all '^view [0-9]+: 4 members, rank [0-3] \[' 20; check "4 namespace hosts agree on a 4-member view" $?
v_before=$(last 0 | grep -o '^view [0-9]*')
bash "$NET" partition 1,2 3,4 --tag "$TAG" >/dev/null
sleep 5
wait_all 'paused: no majority' 5; check "2|2 partition: every worker reports paused (no majority)" $?
! grep -qE 'view [0-9]+: 2 members' "$T/run.log"; check "no side formed a view of 2" $?
bash "$NET" heal --tag "$TAG" >/dev/null
wait_all '^view [0-9]+: 4 members, rank [0-3] \[' 40; rc=$?
v_after=$(last 0 | grep -o '^view [0-9]*')
[[ $rc == 0 ]]; check "after heal: 4-member view, not paused ($v_before -> $v_after)" $?
kill -TERM "$LPID"; wait "$LPID"; rc=$?; LPID=""
[[ $rc == 1 ]] && grep -q "^hora launch: 4 of 4 workers succeeded$" "$T/run.log" \
  && grep -q "^hora launch: stopped by signal 15 (forwarded to the workers)$" "$T/run.log"
check "SIGTERM to hora launch: forwarded, all 4 workers leave (exit 0), the launcher exits 1: stopped (rc=$rc)" $?

echo "netns: $pass passed, $fail failed"
if (( fail )); then tail -30 "$T/run.log"; tail -10 "$T/job.log"; fi
[[ $fail == 0 ]]
