#!/usr/bin/env bash
# test_devcoll.sh HORA PROG FAKE_V3_SO GROUP_SO FAIL_SO HANG_SO - the collectives on
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
# With GROUP_SO (the fake whose NCCL takes several processes of one host,
# tests/plugins/fake_nccl.c):
#  4. three workers on one host: every call by NCCL (set up once: rank 0's
#     id over hora's transport), equal to the host's results;
#  5. with root: two hosts x two workers: the allreduces by NCCL's
#     reduce-scatter, the cross-host ring, NCCL's allgather; the other
#     collectives staged;
#  6. with HANG_SO (GROUP_SO whose worker 2 gets stuck in its 20th NCCL
#     call): worker 2 killed (SIGKILL) while the others wait for it inside
#     NCCL: they fail promptly naming it (the loss watcher interrupts the
#     NCCL wait; the I/O timeout, which also bounds an NCCL call, is 10
#     minutes there), nothing left in /dev/shm;
#  7. the same on an elastic job: the others re-form and go on, NCCL built
#     again over the 2 that are left.
# With FAIL_SO (GROUP_SO whose every NCCL call fails): 8. the error
# reaches every rank.
# Stops only what it started.
set -u
HORA="$1" PROG="$2" FAKE="$3" GROUP="$4" FAIL="$5" HANG="$6"
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
# the calls of `check` at N ranks: (allreduce, reduce-scatter, each also in
# place: 6 dtypes x 5 ops; broadcast, allgather, allgather in place: 6
# dtypes; neighbour allreduce: f32, f64; pair average: f32, f64 when N is
# even) x 3 counts
calls() { echo $(((4 * 6 * 5 + 3 * 6 + 2 + ($1 % 2 ? 0 : 2)) * 3)); }
CALLS=$(calls 2)
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
  HORA_SECRET="devcoll-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')" timeout 120 "$HORA" launch "$T/ns.yaml" -- "$PROG" "$FAKE" check >"$T/out" 2>&1
  rc=$?
  [[ $rc == 0 ]] && [[ $(grep -cE "devcoll: rank [01] of 2: $CALLS results equal to the host's; device buffers: 0 calls by NCCL, $CALLS staged" "$T/out") == 2 ]]
  check "two hosts (network namespaces) x 1 rank: device buffers through the cross-host path (rc=$rc)" $?
else
  echo "skip two namespace hosts: needs root and network namespaces"
fi

# 4.
timeout 120 "$HORA" run -np 3 "$PROG" "$GROUP" check >"$T/out" 2>&1
rc=$?
# (all but the neighbour allreduces, which NCCL has not: 2 x 3 staged)
C3=$(calls 3)
[[ $rc == 0 ]] && [[ $(grep -cE "devcoll: rank [012] of 3: $C3 results equal to the host's; device buffers: $((C3 - 6)) calls by NCCL, 6 staged through host memory; NCCL on device 0, set up 1 time$" "$T/out") == 3 ]]
check "one host, 3 ranks: every collective by NCCL, equal to the host's (rc=$rc)" $?

# 5.
if ((NS)); then
  sed -i 's/workers: 1}/workers: 2}/' "$T/ns.yaml"
  # the allreduces of 1000 and 70001 elements (out of place and in place:
  # 2 x 6 x 5 x 2) by NCCL within each host; the rest staged (of one
  # element: no whole shard of 2 ranks; the other collectives)
  AR=$((2 * 6 * 5 * 2)) REST=$((CALLS - 2 * 6 * 5 * 2))
  HORA_SECRET="devcoll-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')" timeout 120 "$HORA" launch "$T/ns.yaml" -- "$PROG" "$GROUP" check >"$T/out" 2>&1
  rc=$?
  [[ $rc == 0 ]] && [[ $(grep -cE "devcoll: rank [0-3] of 4: $CALLS results equal to the host's; device buffers: $AR calls by NCCL, $REST staged through host memory; NCCL on device 0, set up 1 time$" "$T/out") == 4 ]]
  check "two hosts x 2 ranks: allreduces by NCCL within the host and the ring across (rc=$rc)" $?
fi

# 6. and 7.: 3 workers on one host, worker 2 killed mid-loop
loop_file() { # elastic(0/1)
  local p=$((12000 + RANDOM % 15000)) # below the ephemeral range
  printf 'cluster:\n  name: devcoll-loop\n  port_base: %d\n  seeds: ["127.0.0.1:%d"]\n  nodes:\n    - {host: 127.0.0.1, workers: 3}\nmembership:\n  probe_interval_ms: 100\n  suspect_timeout_ms: 500\ntransport:\n  io_timeout_ms: 600000\n' \
    "$p" $((p + 1)) >"$T/l.yaml"
  [[ $1 == 1 ]] && printf 'train:\n  elastic: {min_workers: 2}\n' >>"$T/l.yaml"
}
waitline() { # FILE REGEX: until FILE has a line matching REGEX (30 s at most)
  for _ in $(seq 300); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
loop_run() { # LIBRARY STEPS MARK: three workers; worker 2 killed once its output shows MARK
  local w=() g
  for g in 0 1 2; do
    HORA_SECRET=devcoll-loop-secret HORA_CONFIG="$T/l.yaml" HORA_PROC=$g timeout 90 "$PROG" "$1" loop "$2" \
      >"$T/w$g" 2>&1 &
    w[$g]=$!
  done
  waitline "$T/w2" "$3" || echo "  (worker 2 never printed '$3')"
  pkill -KILL -P "${w[2]}" 2>/dev/null || kill -KILL "${w[2]}"
  wait "${w[0]}"; R0=$?
  wait "${w[1]}"; R1=$?
  wait "${w[2]}" 2>/dev/null
  cat "$T/w0" "$T/w1" >"$T/out"
}
shm_before=$(ls /dev/shm | grep -c '^hora-fake-nccl-')
loop_file 0
loop_run "$HANG" 100000 'fake NCCL: rank 2 hangs in its collective' 
[[ $R0 == 4 && $R1 == 4 ]] && [[ $(grep -cE 'devcoll: rank [01]: step [0-9]+ failed: .*(rank 2|lost)' "$T/out") == 2 ]] &&
  ! grep -q 'not done after\|did not come within' "$T/out" && [[ $(ls /dev/shm | grep -c '^hora-fake-nccl-') == "$shm_before" ]]
check "a worker killed amid NCCL allreduces: the others fail naming it, no NCCL timeout, no /dev/shm leftovers (rc=$R0,$R1)" $?
loop_file 1
loop_run "$GROUP" 250 'devcoll: rank 2: 10 steps done' 
[[ $R0 == 0 && $R1 == 0 ]] && [[ $(grep -cE 'devcoll: rank [01] of 2: done: 250 steps; device buffers: [0-9]+ calls by NCCL, 0 staged through host memory; NCCL on device 0, set up 2 times$' "$T/out") == 2 ]] &&
  [[ $(grep -c 're-formed: rank [01] of 2' "$T/out") == 2 ]]
check "elastic: the two left re-form and go on, NCCL built again over them (rc=$R0,$R1)" $?

# 8.
timeout 60 "$HORA" run -np 2 "$PROG" "$FAIL" loop 5 >"$T/out" 2>&1
rc=$?
[[ $rc != 0 ]] && [[ $(grep -cE '^\[[01] [^]]*\] devcoll: rank [01]: step 0 failed: ' "$T/out") == 2 ]] &&
  grep -qE 'NCCL allreduce on device 0: NCCL allreduce: fake NCCL failure' "$T/out"
check "an NCCL failure fails the call on every rank, naming it (rc=$rc)" $?
echo "devcoll: $pass passed, $fail failed"
((fail == 0))
