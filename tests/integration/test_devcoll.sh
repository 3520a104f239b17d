#!/usr/bin/env bash
# test_devcoll.sh HORA DEVCOLL_PROG FAKE_GPU_V3_SO - the collectives on
# device buffers (core/devcoll.c), here without a GPU: the workers load the
# CPU test double of the GPU library (tests/plugins/fake_gpu.c FAKE_V3),
# whose "device memory" is tracked host memory, and whose NCCL takes
# communicators of one rank only.
#  1. two workers on one host (`hora run -np 2`): the fake's NCCL refuses
#     two ranks, so both agree to stage through host memory; every dtype x
#     op x count of allreduce (out of place, in place), broadcast,
#     allgather and reduce-scatter on device buffers equals the host
#     collective's result bitwise, on both ranks.
#  2. the same call with device buffers on rank 0 and host buffers on rank
#     1: both ranks fail (a mismatch), none hangs.
#  3. with root: two hosts (network namespaces, deploy/netns-cluster.sh) of
#     one worker each: device buffers through the cross-host path.
# Stops only what it started.
set -u
HORA="$1" PROG="$2" FAKE="$3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
T="$(mktemp -d)" TAG="dc$$" NS=0
cleanup() {
  ((NS)) && bash "$ROOT/deploy/netns-cluster.sh" down --tag "$TAG" >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; sed 's/^/  | /' "$T/out" | tail -20; fi; }

# 1.
# the calls of `check`: (allreduce, in place, reduce-scatter: 6 dtypes x 5
# ops; broadcast, allgather: 6 dtypes) x 3 counts
CALLS=$(((3 * 6 * 5 + 2 * 6) * 3))
timeout 120 "$HORA" run -np 2 "$PROG" "$FAKE" check >"$T/out" 2>&1
rc=$?
# (the fake's NCCL takes one rank: every call staged, none through NCCL)
[[ $rc == 0 ]] && [[ $(grep -cE "^\[[01] [^]]*\] devcoll: rank [01] of 2: $CALLS results equal to the host's; device buffers: 0 calls by NCCL, $CALLS staged through host memory; no NCCL: .*fake NCCL: communicators of one rank only" "$T/out") == 2 ]]
check "one host, 2 ranks: device-buffer collectives equal the host's, every dtype x op (rc=$rc)" $?

# 2.
timeout 60 "$HORA" run -np 2 "$PROG" "$FAKE" mismatch >"$T/out" 2>&1
rc=$?
[[ $rc != 0 ]] && [[ $(grep -cE '^\[[01] [^]]*\] devcoll: rank [01]: failed as it must: .*mismatched buffers: rank [01] passed (device|host) buffers to allreduce #1' "$T/out") == 2 ]]
check "device buffers on one rank, host buffers on the other: both fail naming it (rc=$rc)" $?

# 3.
if [[ $(id -u) == 0 ]] && bash "$ROOT/deploy/netns-cluster.sh" up 2 --tag "$TAG" >/dev/null 2>&1; then
  NS=1
  P=$((20000 + RANDOM % 20000))
  cat >"$T/ns.yaml" <<EOF
cluster:
  name: devcoll-netns
  launcher: netns
  port_base: $P
  seeds: ["10.213.8.1:$((P + 1))"]
  nodes:
    - {host: 10.213.8.1, netns: $TAG-1, workers: 1}
    - {host: 10.213.8.2, netns: $TAG-2, workers: 1}
EOF
  HORA_SECRET="devcoll-$RANDOM$RANDOM" timeout 120 "$HORA" launch "$T/ns.yaml" -- "$PROG" "$FAKE" check >"$T/out" 2>&1
  rc=$?
  [[ $rc == 0 ]] && [[ $(grep -cE "devcoll: rank [01] of 2: $CALLS results equal to the host's; device buffers: 0 calls by NCCL, $CALLS staged" "$T/out") == 2 ]]
  check "two hosts (network namespaces) x 1 rank: device buffers through the cross-host path (rc=$rc)" $?
else
  echo "skip two namespace hosts: needs root and network namespaces"
fi
echo "devcoll: $pass passed, $fail failed"
((fail == 0))
