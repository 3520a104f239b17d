#!/usr/bin/env bash
# test_elastic.sh HORA DATA_DIR - elastic training with real processes: a
# 4-worker MNIST job (a 2000/1000 sample subset of DATA_DIR, written here;
# train.elastic with commit_steps 10) disturbed once it trains, in turn:
#   kill9-rank2   kill -9 of worker 2
#   kill9-rank0   kill -9 of worker 0 (rank 0, and the file's seed)
#   kill9-pair    kill -9 of workers 0 and 2 at once: 2 of 4 left, who go
#                 on because the two are proven gone (their ports answer
#                 unreachable); two silent ones would be a 2|2 partition
#   kill9-seed    kill -9 of a separate `hora seed` process (no view change)
#   term-rank1    SIGTERM of worker 1 (it leaves gracefully)
#   stop-rank3    SIGSTOP of worker 3 (declared dead; the launcher kills it
#                 after the others finish)
#   restart-rank2 kill -9 of worker 2 with train.elastic.restart: the
#                 launcher restarts it and it rejoins
#   global-kill9  kill -9 of worker 2 with train.elastic.batch: global and
#                 batch 400: the 1600-sample global batch stays, each of the
#                 3 left trains 533-534 samples a step, more than the
#                 trainer's buffers first held (512): the model is built
#                 again for the larger share
#   die-at-start  worker 2 dies during the start's sync (a test hook): the
#                 others re-form and train
#   die0-at-start the same with worker 0, the metrics' writer: the new rank
#                 0 empties an older job's metrics lines at its first line
#   max3          train.elastic.max_workers 3: worker 3 is refused by name
#   pause         min_workers 4: worker 2 killed, the others pause naming it,
#                 it is started again 3 s later and training resumes
#   wait_s        the same without the restart: the job fails after wait_s 3,
#                 naming the missing worker
#   join-5th      4 of a 5-worker file start (membership.min_members 4,
#                 `hora worker` each), the 5th joins at epoch 5
#   slow-join     the same with a joiner that loads for 6 s, above
#                 transport.io_timeout_ms 2000: the others wait for it
#   gone-join     a joiner that loads for 8 s, above train.elastic.wait_s 3:
#                 it leaves, the others re-form without it and finish
#   die-while-join worker 3 killed while an admitted joiner loads: the
#                 joiner leaves (exit 3), the three others finish
#   resume-one    after a 1-epoch job's checkpoint, 2 workers start again
#                 with --resume on worker 1 only: both stop, worker 1 naming
#                 train.resume, rank 0 naming worker 1 (before, rank 0
#                 trained on alone), and rank 0 keeps the first job's
#                 metrics (before, it emptied the file at once)
# Each but resume-one: every process that should finish exits 0 (the launcher: "training
# completed"), the survivors' final parameters are bitwise identical (the
# crc32 each prints), the sample accounting holds (HORA_TEST_SAMPLE_LOG and
# check_samples.py: after the rollbacks, every sample of every epoch was
# trained exactly once), and every survivor prints the view-change line.
# Kills only PIDs it started. Exit 77 (skip) without MNIST or a python3 that
# the checker can run.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=mnist_job.sh
. "$HERE/mnist_job.sh"
export HORA_SECRET="elastic-test-secret-$RANDOM$RANDOM-0123456789"
NTRAIN=2000 EPOCHS=30
mnist_subset "$NTRAIN" 1000

# cluster FILE WORKERS PORT_BASE [extra train.elastic lines] [extra seed] [extra membership lines]
cluster() {
  local seeds="\"127.0.0.1:$(($3 + 1))\""
  [[ -n ${5:-} ]] && seeds="\"$5\", $seeds"
  cat >"$1" <<YAML
cluster:
  name: elastic
  launcher: local
  port_base: $3
  seeds: [$seeds]
  nodes:
    - {host: 127.0.0.1, workers: $2}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
${6:-}
train:
  model: mnist_mlp
  data: $T/data
  epochs: $EPOCHS
  batch_size: ${BATCH:-32}
  seed: 7
  elastic:
    commit_steps: 10
${4:-}
YAML
}

# the PID of the launcher's child that is worker G
worker_pid() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do
    tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | grep -qE -- "--proc $2( |$)" && { echo "$p"; return; }
  done
}

# wait until FILE shows "epoch 1/" (the job trains), up to 120 s
wait_training() {
  for _ in $(seq 1200); do grep -q 'epoch 1/' "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# verdict NAME OUTPUT SURVIVORS LAUNCH_RC VIEWLINES (how many print the
# view-change line; 0: there must be no view change)
verdict() {
  local name=$1 out=$2 n=$3 rc=$4 want_line=$5
  check "$name: the job completes (exit $rc)" "$([[ $rc == 0 ]]; echo $?)"
  local crcs
  crcs="$(grep -o 'final parameters crc32 [0-9a-f]*' "$out" | sort | uniq -c)"
  check "$name: $n survivors with bitwise identical parameters ($(echo $crcs))" \
    "$([[ $(echo "$crcs" | wc -l) == 1 && $(echo "$crcs" | awk '{print $1}') == "$n" ]]; echo $?)"
  local arc=0
  "$PY" "$HERE/check_samples.py" "$T/samples-$name" "$NTRAIN" "$EPOCHS" >"$T/acct" 2>&1 || arc=$?
  check "$name: sample accounting ($(cat "$T/acct"))" $arc
  if [[ $want_line -gt 0 ]]; then
    local lines
    lines="$(grep -cE 'view [0-9]+: (lost worker|worker [0-9]+ .* joined).* at step [0-9]+; [0-9]+ workers; rolled back [0-9]+ steps to the commit at step [0-9]+; lr [0-9.e-]+; training again after [0-9.]+ s' "$out")"
    check "$name: every survivor printed the view-change line ($lines)" "$([[ $lines -ge $want_line ]]; echo $?)"
  else
    check "$name: no view change" "$(! grep -q 'rolled back' "$out"; echo $?)"
  fi
  [[ $fail == 0 ]] || { echo "--- $name output:"; tail -30 "$out"; }
}

# launched NAME SIGNAL WORKERS SURVIVORS VIEWLINES [extra elastic lines]
# (WORKERS: one index, or several in quotes, signalled together)
launched() {
  local name=$1 sig=$2 g=$3 n=$4 nl=$5 P=$((12000 + RANDOM % 15000))
  cluster "$T/$name.yaml" 4 $P "${6:-}"
  HORA_TEST_SAMPLE_LOG="$T/samples-$name" "$HORA" launch "$T/$name.yaml" >"$T/$name.out" 2>&1 &
  local L=$!
  PIDS+=($L)
  wait_training "$T/$name.out"
  local w=() x
  for x in $g; do w+=("$(worker_pid $L "$x")"); done
  PIDS+=("${w[@]}")
  kill -"$sig" "${w[@]}" && kill -0 $L
  check "$name: worker(s) $g (pid ${w[*]}) got SIG$sig while the job trained" $?
  timeout 120 tail --pid=$L -f /dev/null
  if kill -0 $L 2>/dev/null; then # a broken recovery (workers paused for ever) fails, not hangs
    check "$name: the job ended within 120 s" 1
    kill -TERM $L; sleep 3; kill -KILL $L 2>/dev/null
  fi
  wait $L
  verdict "$name" "$T/$name.out" "$n" $? "$nl"
}

launched kill9-rank2 KILL 2 3 3
launched kill9-rank0 KILL 0 3 3
launched kill9-pair KILL "0 2" 2 2
launched term-rank1 TERM 1 3 3
launched stop-rank3 STOP 3 3 3
launched restart-rank2 KILL 2 4 3 "    restart: true" # the joiner prints its own line
# 60 steps at batch 400 would end before the kill lands on a fast machine:
# 200 epochs (400 steps) for this case
EPOCHS=200 BATCH=400 launched global-kill9 KILL 2 3 3 "    batch: global"
# the global batch stayed: a full step after the view change is 1600
# samples over the 3 left, 533 or 534 each, the epoch's last 400 133 or
# 134 (the sample log's lines: "t epoch step view sample", one file a
# worker; view 1 is the first)
shares="$(awk '$1 == "t" && $4 > 1 { c[FILENAME" "$3" "$4]++ } END { for (k in c) print c[k] }' \
  "$T"/samples-global-kill9.* | sort -n | uniq -c | awk '{printf "%s x %s; ", $1, $2}')"
check "global-kill9: each survivor's share of a step after the view change (count x samples: $shares)" \
  "$(grep -qE '^([0-9]+ x (533|534|133|134); )+$' <<<"$shares"; echo $?)"

# a worker that dies during the start's sync (HORA_TEST_DIE_AT_START: rank 2
# kills itself right before it): the other three re-form and train (they
# all exited on the failed broadcast before)
P=$((12000 + RANDOM % 15000))
cluster "$T/das.yaml" 4 $P
HORA_TEST_DIE_AT_START=2 HORA_TEST_SAMPLE_LOG="$T/samples-die-at-start" timeout 180 "$HORA" launch \
  "$T/das.yaml" >"$T/das.out" 2>&1
rc=$?
grep -q 'worker 2 on 127.0.0.1 was killed by SIGKILL' "$T/das.out"
check "die-at-start: worker 2 killed itself at the start's sync" $?
verdict die-at-start "$T/das.out" 3 $rc 3

# the same with worker 0 (rank 0, the metrics' writer) and a metrics file
# holding an older job's lines: the new rank 0 empties them at its first
# line, and the job's 30 lines alone are left
P=$((12000 + RANDOM % 15000))
cluster "$T/das0.yaml" 4 $P
printf '{"epoch":40}\n{"epoch":41}\n' >"$T/das0.jsonl"
HORA_TEST_DIE_AT_START=0 HORA_TEST_SAMPLE_LOG="$T/samples-die0-at-start" timeout 180 "$HORA" launch \
  "$T/das0.yaml" --set "train.metrics=$T/das0.jsonl" >"$T/das0.out" 2>&1
rc=$?
grep -q 'worker 0 on 127.0.0.1 was killed by SIGKILL' "$T/das0.out"
check "die0-at-start: worker 0 killed itself at the start's sync" $?
check "die0-at-start: the metrics hold epochs 1..$EPOCHS alone ($(grep -c epoch "$T/das0.jsonl") lines)" \
  "$([[ $(grep -o '"epoch":[0-9]*' "$T/das0.jsonl" | cut -d: -f2 | tr '\n' ' ') == "$(seq -s ' ' 1 "$EPOCHS") " ]]; echo $?)"
verdict die0-at-start "$T/das0.out" 3 $rc 3

# max_workers 3 of a 4-worker file: worker 3 is refused by name (exit 2, not
# restarted), the other three train
P=$((12000 + RANDOM % 15000))
cluster "$T/max.yaml" 4 $P "    max_workers: 3
    restart: true"
HORA_TEST_SAMPLE_LOG="$T/samples-max3" "$HORA" launch "$T/max.yaml" >"$T/max.out" 2>&1
rc=$?
grep -q 'worker 3 is not admitted: view [0-9]* already has 3 workers (train.elastic.max_workers 3)' \
  "$T/max.out" && grep -q 'worker 3 (127.0.0.1) exited with status 2' "$T/max.out" \
  && ! grep -q 'restarted worker 3' "$T/max.out"
check "max3: worker 3 refused by name, exit 2, not restarted" $?
verdict max3 "$T/max.out" 3 $rc 0

# min_workers 4: worker 2 killed, the others pause naming it; it comes back
# (started by hand 3 s later) and training resumes with 4
P=$((12000 + RANDOM % 15000))
cluster "$T/pause.yaml" 4 $P "    min_workers: 4"
HORA_TEST_SAMPLE_LOG="$T/samples-pause" "$HORA" launch "$T/pause.yaml" >"$T/pause.out" 2>&1 &
L=$!
PIDS+=($L)
wait_training "$T/pause.out"
w="$(worker_pid $L 2)"
kill -KILL "$w" && kill -0 $L
check "pause: worker 2 (pid $w) got SIGKILL while the job trained" $?
sleep 3
HORA_TEST_SAMPLE_LOG="$T/samples-pause" "$HORA" worker --config "$T/pause.yaml" --proc 2 \
  >"$T/pause.2" 2>&1 &
J=$!
PIDS+=($J)
wait $L
rc=$?
wait $J || rc=$?
grep -q "training paused: view [0-9]* has 3 of train.elastic.min_workers 4 workers; missing: worker 2 " \
  "$T/pause.out"
check "pause: below min_workers the others pause naming worker 2" $?
cat "$T/pause.2" >>"$T/pause.out"
verdict pause "$T/pause.out" 4 $rc 3

# ... and when it does not come back within wait_s, the job fails saying so
P=$((12000 + RANDOM % 15000))
cluster "$T/wait.yaml" 4 $P "    min_workers: 4
    wait_s: 3"
"$HORA" launch "$T/wait.yaml" >"$T/wait.out" 2>&1 &
L=$!
PIDS+=($L)
wait_training "$T/wait.out"
w="$(worker_pid $L 1)"
kill -KILL "$w"
wait $L
rc=$?
grep -q "no view to train in after train.elastic.wait_s 3 s: 3 of min_workers 4 workers; missing: worker 1 " \
  "$T/wait.out"
check "wait_s: the job fails after wait_s naming the missing worker (exit $rc)" \
  "$([[ $rc != 0 ]] && grep -q 'training did not complete' "$T/wait.out"; echo $?)"

# a separate seed, killed: seeds are never in a view, training goes on
P=$((12000 + RANDOM % 15000)) S=$((12000 + RANDOM % 15000))
"$HORA" seed --listen "127.0.0.1:$S" >"$T/seed.out" 2>&1 &
SEED=$!
PIDS+=($SEED)
cluster "$T/seed.yaml" 4 $P "" "127.0.0.1:$S"
HORA_TEST_SAMPLE_LOG="$T/samples-kill9-seed" "$HORA" launch "$T/seed.yaml" >"$T/seed-job.out" 2>&1 &
L=$!
PIDS+=($L)
wait_training "$T/seed-job.out"
kill -KILL $SEED && kill -0 $L
check "kill9-seed: the seed got SIGKILL while the job trained" $?
wait $L
verdict kill9-seed "$T/seed-job.out" 4 $? 0

# join NAME DELAY_MS [extra train.elastic lines] [extra membership lines]
# (KILL_WHILE_JOINING=G: kill -9 of worker G once the joiner is admitted;
# its exit does not count in $rc):
# 4 of 5 workers start (membership.min_members 4, `hora worker` each), the
# 5th joins at epoch 5, after sleeping DELAY_MS before it loads its data
# (HORA_TEST_LOAD_DELAY_MS). Leaves $T/NAME.[0-4], $T/NAME.out (all five)
# and $rc (the first 4 workers' worst exit), $jrc (the joiner's exit).
join() {
  local name=$1 delay=$2 P=$((12000 + RANDOM % 15000)) g JP=()
  cluster "$T/$name.yaml" 5 $P "${3:-}" "" "  min_members: 4${4:-}"
  for g in 0 1 2 3; do
    HORA_TEST_SAMPLE_LOG="$T/samples-$name" "$HORA" worker --config "$T/$name.yaml" --proc $g \
      >"$T/$name.$g" 2>&1 &
    JP+=($!)
  done
  PIDS+=("${JP[@]}")
  for _ in $(seq 1200); do grep -q 'epoch 5/' "$T/$name.0" && break; sleep 0.1; done
  HORA_TEST_LOAD_DELAY_MS=$delay HORA_TEST_SAMPLE_LOG="$T/samples-$name" "$HORA" worker \
    --config "$T/$name.yaml" --proc 4 >"$T/$name.4" 2>&1 &
  local J=$! k=${KILL_WHILE_JOINING:-}
  PIDS+=($J)
  if [[ -n $k ]]; then # kill -9 of worker k once the joiner is admitted (it loads)
    for _ in $(seq 300); do grep -q 'joined the running job' "$T/$name.4" && break; sleep 0.1; done
    kill -KILL "${JP[$k]}"
  fi
  rc=0 jrc=0
  for g in 0 1 2 3; do
    timeout 120 tail --pid="${JP[$g]}" -f /dev/null
    kill -0 "${JP[$g]}" 2>/dev/null && { check "$name: worker $g ended within 120 s" 1; kill -KILL "${JP[$g]}"; }
    wait "${JP[$g]}" || [[ $g == "$k" ]] || rc=$?
  done
  timeout 60 tail --pid=$J -f /dev/null
  kill -0 $J 2>/dev/null && { check "$name: the joiner ended within 60 s of the others" 1; kill -KILL $J; }
  wait $J || jrc=$?
  cat "$T/$name".[0-4] >"$T/$name.out"
}

# a joiner: the 5th joins at epoch 5
join join-5th 0
grep -q 'joined at step [0-9]* as rank 4 of 5; received the committed state from rank [0-9]: [0-9]* bytes' \
  "$T/join-5th.4"
g=$?
check "join-5th: the joiner got the committed state ($(grep -o 'received.*' "$T/join-5th.4"); exit $jrc)" \
  "$([[ $g == 0 && $jrc == 0 ]]; echo $?)"
verdict join-5th "$T/join-5th.out" 5 $rc 4 # the joiner's line is the one above

# a joiner slower to load than transport.io_timeout_ms (6 s against 2 s):
# the others wait in readiness rounds its keeper answers (they failed on
# the sync's first broadcast before: the job ended)
join slow-join 6000 "" "
transport:
  io_timeout_ms: 2000"
grep -q 'joined at step [0-9]* as rank 4 of 5; received the committed state' "$T/slow-join.4"
g=$?
check "slow-join: the joiner got the committed state after its 6 s load (exit $jrc)" \
  "$([[ $g == 0 && $jrc == 0 ]]; echo $?)"
w="$(grep -o 'waited [0-9.]* s for every worker of it to be ready' "$T/slow-join.0")"
check "slow-join: worker 0 waited for it ($w)" \
  "$(awk '{ exit !($2 >= 5.5) }' <<<"${w:-waited 0}"; echo $?)"
verdict slow-join "$T/slow-join.out" 5 $rc 4

# a joiner that makes no call of its own within train.elastic.wait_s (3 s;
# its load takes 8): it leaves the job, the other four re-form without it
# and finish, naming it; the joiner fails (an exit, no signal) naming wait_s
join gone-join 8000 "    wait_s: 3"
check "gone-join: the joiner fails naming train.elastic.wait_s (exit $jrc)" \
  "$([[ $jrc == 3 ]] && grep -q 'this worker made no call since (its data or model still loading: train.elastic.wait_s 3): this worker left the job before it was ready' "$T/gone-join.4"; echo $?)"
check "gone-join: the others name it ($(grep -c 'joined and was gone again' "$T/gone-join.out") lines)" \
  "$([[ $(grep -c 'worker 4 (127.0.0.1:[0-9]*) joined and was gone again at step' "$T/gone-join.out") == 4 ]]; echo $?)"
rm -f "$T/samples-gone-join.4" # it trained no sample (an empty log, if any)
verdict gone-join "$T/gone-join.out" 4 $rc 4

# a worker of the job dies while an admitted joiner loads: the others
# re-form, which the joiner's main thread could not take part in, so its
# keeper leaves the job (exit 3, naming the failed round); the three left
# re-form without both and finish
KILL_WHILE_JOINING=3 join die-while-join 6000
check "die-while-join: the joiner leaves naming the failed round (exit $jrc)" \
  "$([[ $jrc == 3 ]] && grep -q 'a readiness round of view [0-9]* failed while this worker loaded.*this worker left the job before it was ready' "$T/die-while-join.4"; echo $?)"
rm -f "$T/samples-die-while-join.4"
verdict die-while-join "$T/die-while-join.out" 3 $rc 3

# train.resume on one worker only: both stop at once (the job is compared
# before the resuming one's broadcasts meet the other's sync): worker 1
# names train.resume, rank 0 names worker 1; the first job's metrics line
# is still there (rank 0, not resuming, empties its file only once the job
# is agreed on)
P=$((12000 + RANDOM % 15000))
EPOCHS=1 cluster "$T/res.yaml" 2 $P "  checkpoint: {dir: $T/ckpt, every_epochs: 1}"
printf '{"epoch":5}\n{"epoch":6}\n' >"$T/res.jsonl" # an older job's lines: a fresh job empties them
timeout 120 "$HORA" launch "$T/res.yaml" --set "train.metrics=$T/res.jsonl" >"$T/res-first.out" 2>&1 # in the foreground
check "resume-one: a first job writes its checkpoint and its one metrics line, the older ones gone (exit $?)" \
  "$([[ -f $T/ckpt/checkpoint.hora && $(grep -c epoch "$T/res.jsonl") == 1 ]]; echo $?)"
"$HORA" worker --config "$T/res.yaml" --proc 0 --metrics "$T/res.jsonl" >"$T/res.0" 2>&1 &
R0=$!
"$HORA" worker --config "$T/res.yaml" --proc 1 --resume >"$T/res.1" 2>&1 &
R1=$!
PIDS+=($R0 $R1)
timeout 120 tail --pid=$R0 -f /dev/null
timeout 20 tail --pid=$R1 -f /dev/null
if kill -0 $R0 2>/dev/null || kill -0 $R1 2>/dev/null; then # hung, not stopped: fails, not hangs
  check "resume-one: both workers stopped within 120 s" 1
  kill -KILL $R0 $R1 2>/dev/null
fi
rc0=0 rc1=0
wait $R0 || rc0=$?
wait $R1 || rc1=$?
check "resume-one: worker 1 stops naming train.resume (exit $rc1: $(grep -o 'train.resume is.*rank 0' "$T/res.1"))" \
  "$([[ $rc1 != 0 ]] && grep -q 'train.resume is 1 here and 0 on rank 0' "$T/res.1"; echo $?)"
check "resume-one: rank 0 stops naming a different job (exit $rc0)" \
  "$([[ $rc0 != 0 ]] && grep -q 'rank 1 runs a different job than rank 0' "$T/res.0"; echo $?)"
check "resume-one: the first job's metrics line is kept ($(grep -c epoch "$T/res.jsonl") lines)" \
  "$([[ $(grep -c epoch "$T/res.jsonl") == 1 ]]; echo $?)"
[[ $fail == 0 ]] || tail -n 5 "$T/res.0" "$T/res.1"
exit $fail
