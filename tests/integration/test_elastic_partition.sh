#!/usr/bin/env bash
# test_elastic_partition.sh HORA_BIN - elastic training across a partition of
# network-namespace hosts (issue 13, acceptance 1): a 4-worker elastic MNIST
# training (a 4000/1000 subset of data/mnist) on 4 hosts made by
# deploy/netns-cluster.sh, partitioned while it trains and healed after 5 s:
#  a. 2|2 (`partition 1,2 3,4`): no side has a majority of the view, both
#     pause ("training paused: ..."), all 4 re-form after the heal;
#  b. 1|3 (`partition 1 2,3,4`): the 3 go on in a view of 3, the 1 pauses and
#     rejoins after the heal, its stale state discarded; the 3 train again
#     within 2.5 s of its return ("timed", the Release build; before, the
#     heal stalled them 3.0-3.3 s in half the runs).
# 2|2 changes no rank and rolls back to a commit: its final parameters are
# those of an undisturbed run of the same file, bit for bit.
# Each: `hora launch` exits 0 ("training completed by N workers"), every
# worker that finished prints the same final parameters crc32, the sample
# accounting holds (HORA_TEST_SAMPLE_LOG, check_samples.py: every sample of
# every epoch trained exactly once after the rollbacks), the view-change
# line is printed. Exit 77 (skipped) without root, ip or nft, or without
# data/mnist. Cleans up its namespaces (its own tag) on any exit.
set -uo pipefail
HORA="$1"
MODE="${2:-timed}" # untimed (sanitizer builds): the heal's stall is printed, not asserted
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NET="$ROOT/deploy/netns-cluster.sh"
PY=/usr/bin/python3
if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v nft >/dev/null; then
  echo "SKIP: needs root, iproute2 and nftables"; exit 77
fi
[[ -d $ROOT/data/mnist ]] || { echo "SKIP: no data/mnist (deploy/get-data.sh)"; exit 77; }
TAG="ep$$"
T="$(mktemp -d -t hora-elastic-partition.XXXXXX)"
LPID=""
cleanup() {
  if [[ -n $LPID ]]; then # the launcher forwards SIGTERM to its workers
    kill -TERM "$LPID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$LPID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$LPID" 2>/dev/null
  fi
  bash "$NET" down --tag "$TAG" >/dev/null 2>&1
  if [[ -n ${HORA_TEST_KEEP:-} ]]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
export HORA_SECRET="elastic-partition-$$-secret"
NTRAIN=4000 NTEST=1000 EPOCHS=${HORA_TEST_EPOCHS:-40}
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }

# the data subset: the first NTRAIN / NTEST samples of data/mnist's IDX files
mkdir -p "$T/mnist"
"$PY" "$ROOT/tests/integration/idx_subset.py" "$ROOT/data/mnist" "$T/mnist" $NTRAIN $NTEST ||
  { echo "FAIL writing the MNIST subset"; exit 1; }

bash "$NET" up 4 --rate 1gbit --tag "$TAG" >/dev/null || { echo "FAIL netns-cluster up"; exit 1; }
sed -e "s/netns: hn-/netns: $TAG-/" -e "s|data: data/mnist|data: $T/mnist|" \
    -e "s/epochs: 20/epochs: $EPOCHS/" "$ROOT/deploy/clusters/netns.yaml" >"$T/netns.yaml"
cat >>"$T/netns.yaml" <<YEOF
  elastic: {min_workers: 1, commit_steps: 10, wait_s: 60}
YEOF

# scenario NAME GROUP1 GROUP2: train, partition once worker 0 is in its
# second epoch, heal 5 s later, wait for the launcher
scenario() {
  local name=$1 log="$T/$1.log" s="$T/$1.samples"
  rm -f "$s".*
  HORA_TEST_SAMPLE_LOG="$s" HORA_PROGRESS=lines timeout 150 "$HORA" launch "$T/netns.yaml" >"$log" 2>&1 & LPID=$!
  local t=0
  until grep -q "^\[0 [^]]*\] epoch 2/" "$log" || (( t > 600 )); do sleep 0.1; t=$((t+1)); done
  bash "$NET" partition "$2" "$3" --tag "$TAG" >/dev/null
  echo "$name: partitioned $2 | $3 after $((t/10)) s"
  sleep 5
  bash "$NET" heal --tag "$TAG" >/dev/null
  wait "$LPID"; local rc=$?; LPID=""
  grep -q '^hora launch: training completed by [0-9]* worker' "$log" && [[ $rc == 0 ]]
  check "$name: hora launch exit 0, training completed (rc=$rc)" $? || tail -30 "$log"
  local crcs; crcs=$(grep -o 'final parameters crc32 [0-9a-f]*' "$log" | sort | uniq -c)
  echo "$crcs" | sed "s/^/  $name: /"
  [[ $(echo "$crcs" | wc -l) == 1 && -n $crcs ]]
  check "$name: every worker that finished has the same final parameters" $?
  grep -E '\] view [0-9]+: ' "$log" | sed "s/^/  $name: /"
  grep -E 'training paused' "$log" | sed "s/^/  $name: /"
  "$PY" "$ROOT/tests/integration/check_samples.py" "$s" $NTRAIN "$EPOCHS" | sed "s/^/  $name: /"
  check "$name: sample accounting: every sample of every epoch trained once" "${PIPESTATUS[0]}"
}

# the undisturbed run: a 2|2 partition changes no worker's rank and the
# rollback is to a commit, so its final parameters must be these, bit for bit
timeout 120 "$HORA" launch "$T/netns.yaml" >"$T/calm.log" 2>&1; rc=$?
calm=$(grep -o 'final parameters crc32 [0-9a-f]*' "$T/calm.log" | sort -u)
[[ $rc == 0 && $(echo "$calm" | wc -l) == 1 && -n $calm ]]
check "undisturbed: exit 0, one final crc32 (${calm##* })" $? || tail -20 "$T/calm.log"

scenario 2-2 1,2 3,4
# (unless the heal passed through a view of 3: stale death notices of the
# other side can make the coordinator commit one before they are refuted)
if [[ -n $(grep -E '\] view [0-9]+: ' "$T/2-2.log" | grep -v ': the same workers at step') ]]; then
  echo "  2-2: a view change other than the re-form of the same 4: no comparison with the undisturbed run"
else
  [[ $(grep -o 'final parameters crc32 [0-9a-f]*' "$T/2-2.log" | sort -u) == "$calm" ]]
  check "2|2: the final parameters are the undisturbed run's, bit for bit" $?
fi
# both sides paused, all four re-formed into one view
[[ $(grep '\] view [0-9]*: .*; 4 workers;' "$T/2-2.log" | grep -c '^\[[0-3] ') -ge 4 ]]
check "2|2: the view-change line, 4 workers, on every worker" $?
[[ $(grep 'training paused' "$T/2-2.log" | grep -o '^\[[0-3] ' | sort -u | wc -l) == 4 ]]
check "2|2: every worker paused (no side has a majority)" $?
! grep -qE '\] view [0-9]+: .*; 2 workers;' "$T/2-2.log"
check "2|2: no side trained in a view of 2" $?
[[ $(grep -cE 'final parameters crc32 [0-9a-f]+ \(rank [0-3] of 4,' "$T/2-2.log") == 4 ]]
check "2|2: all 4 workers finished, in a view of 4" $?

scenario 1-3 1 2,3,4
grep -qE '^\[[1-3] [^]]*\] view [0-9]+: lost worker 0 .*; 3 workers;' "$T/1-3.log"
check "1|3: the view-change line: the 3 go on without worker 0" $?
grep -q '^\[0 [^]]*\].*training paused' "$T/1-3.log"
check "1|3: worker 0, alone, paused" $?
! grep -qE '^\[[1-3] [^]]*\].*training paused' "$T/1-3.log"
check "1|3: the 3 did not pause" $?
grep -qE '^\[0 [^]]*\] view [0-9]+: .*; discarded its stale state \(view [0-9]+\) for the commit at step' "$T/1-3.log"
check "1|3: worker 0 rejoined after the heal, its stale state discarded" $?
# each of the 3 admitted worker 0 back: its view line names worker 0 as
# joined (with others, when a second transient loss on the majority side
# let a worker rejoin in the same view); or, that worker having been lost
# too, it rejoined beside worker 0 (discarding its own stale state, or
# saying that the others had dropped it, when its state was the newest)
back=0
for w in 1 2 3; do
  if grep -qE "^\[$w [^]]*\] view [0-9]+: ([^;]*, )?worker 0 \([^)]*\) joined" "$T/1-3.log"; then
    back=$((back+1))
  elif grep -qE "^\[$w [^]]*\] view [0-9]+: .*(; discarded its stale state|this worker was declared dead by the others .* and joined again)" \
      "$T/1-3.log"; then
    echo "  1-3: worker $w was lost on the majority side too, and rejoined beside worker 0"
    back=$((back+1))
  fi
done
[[ $back == 3 ]]
check "1|3: each of the 3 admitted worker 0 back (or rejoined beside it)" $?
[[ $(grep -cE 'final parameters crc32 [0-9a-f]+ \(rank [0-3] of 4,' "$T/1-3.log") == 4 ]]
check "1|3: all 4 workers finished, in a view of 4" $?
# the majority's stall when worker 0 comes back: a view change or two, not a
# formation's 3 s try waited out (before: 3.0-3.3 s in half the heals)
heal=$(grep -E "^\[[1-3] [^]]*\] view [0-9]+: ([^;]*, )?worker 0 \([^)]*\) joined" "$T/1-3.log" |
  sed -E 's/.*training again after ([0-9.]+) s.*/\1/' | sort -n | tail -1)
echo "  1-3: the majority's longest stall when worker 0 came back: ${heal:-none} s"
if [[ $MODE == timed && -n $heal ]]; then
  awk -v h="$heal" 'BEGIN { exit !(h <= 2.5) }'
  check "1|3: the majority trains again within 2.5 s of worker 0's return ($heal s)" $?
fi

echo "elastic partition: $pass passed, $fail failed"
[[ $fail == 0 ]]
