#!/usr/bin/env bash
# test_slurm.sh HORA DATA_DIR - hora under a real, private Slurm (issue 18,
# point 1): munged with its own key and socket, slurmctld, and two slurmd
# (-N n1, -N n2, their own ports) faking two nodes of this machine, from a
# slurm.conf generated in a temp dir (proctrack/linuxproc, task/none, ports
# chosen at random), touching no Slurm the machine may run (its own
# SLURM_CONF, state, spool, socket; every daemon stopped by PID at the end).
#  1. `sbatch -N2 -n4 --wait deploy/slurm/hora.sbatch CONFIG` (CONFIG: no
#     node list; deploy/slurm/mnist.yaml with the data at DATA_DIR): exit 0,
#     20 epoch lines, val_acc >= 0.95, the tasks' hosts and ranks from the
#     step (rank 0 says "4 workers");
#  2. the same job (train.elastic on) with one task's hora killed (SIGKILL)
#     mid-run: the job still exits 0 ("training completed: 3 tasks
#     finished, 1 died");
#  3. without train.elastic, the same kill fails the job (exit != 0).
# Needs root and slurm-wlm + munge (deploy/install-deps.sh installs them):
# exit 77 (skipped) without them.
set -uo pipefail
HORA="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
DATA="$(cd "$2" && pwd)"
ROOTDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ $(id -u) == 0 ]] || { echo "SKIP test_slurm: needs root (slurmd)"; exit 77; }
for b in munged slurmctld slurmd sbatch sinfo scontrol; do
  command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
    { echo "SKIP test_slurm: no $b (apt-get install slurm-wlm munge)"; exit 77; }
done
export PATH="$PATH:/usr/sbin"
T="$(mktemp -d)"
DAEMONS=()
cleanup() {
  for j in $(squeue -h -o %i 2>/dev/null); do scancel "$j" 2>/dev/null; done
  for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${DAEMONS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

# --- the private Slurm
mkdir -p "$T"/{munge,state,spool/n1,spool/n2,log,run}
chmod 0700 "$T/munge"
head -c 1024 /dev/urandom >"$T/munge/munge.key" && chmod 0400 "$T/munge/munge.key"
munged -F -f --socket="$T/munge/sock" --key-file="$T/munge/munge.key" --pid-file="$T/munge/pid" \
  --log-file="$T/munge/log" --seed-file="$T/munge/seed" >"$T/log/munged.out" 2>&1 &
DAEMONS+=($!)
CP=$((21000 + RANDOM % 8000))
cat >"$T/slurm.conf" <<EOF
ClusterName=horatest$$
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CP
SlurmdPort=$((CP + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd-%n.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
PlugStackConfig=/dev/null
KillWait=5
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((CP + 2)) CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((CP + 3)) CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=hora Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF="$T/slurm.conf"
for _ in $(seq 50); do [[ -S $T/munge/sock ]] && break; sleep 0.1; done
slurmctld -D -i -f "$SLURM_CONF" >"$T/log/ctld.out" 2>&1 &
DAEMONS+=($!)
sleep 1
for n in n1 n2; do
  slurmd -D -N "$n" -f "$SLURM_CONF" >"$T/log/d-$n.out" 2>&1 &
  DAEMONS+=($!)
done
up=1
for _ in $(seq 100); do
  [[ $(sinfo -h -o '%D %t' 2>/dev/null) == "2 idle" ]] && { up=0; break; }
  sleep 0.2
done
check "a private Slurm: munged, slurmctld, slurmd n1 and n2 (sinfo: 2 idle)" $up
if [[ $up != 0 ]]; then tail -5 "$T"/log/*; exit 1; fi

# --- the job
sed "s#data: data/mnist #data: $DATA #" "$ROOTDIR/deploy/slurm/mnist.yaml" >"$T/mnist.yaml"
grep -q "data: $DATA " "$T/mnist.yaml" || { echo "FAIL the data path of deploy/slurm/mnist.yaml"; exit 1; }
submit() { # name config [extra sbatch args]: sbatch --wait in the background, its PID in SB
  local name=$1 cfg=$2; shift 2
  HORA="$HORA" sbatch --wait -N2 -n4 -D "$T" -o "$T/$name.out" "$@" "$ROOTDIR/deploy/slurm/hora.sbatch" \
    "$cfg" >/dev/null 2>"$T/$name.err" &
  SB=$!
}
submit plain "$T/mnist.yaml"
wait "$SB"; rc=$?
check "sbatch -N2 -n4 --wait deploy/slurm/hora.sbatch exits 0" $rc
[[ $rc == 0 ]] || { tail -15 "$T/plain.out" "$T/plain.err" | sed 's/^/  | /'; }
grep -q "4 workers" "$T/plain.out"; check "rank 0 trains with the step's 4 tasks" $?
acc=$(sed -n 's/.*epoch 20\/20 .* val_acc \([0-9.]*\) .*/\1/p' "$T/plain.out" | head -1)
/usr/bin/python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.95 else 1)"
check "val_acc after 20 epochs >= 0.95 (got ${acc:-none})" $?

# --- one task killed mid-run
kill_task() { # name config: SIGKILL to task 2's hora once rank 0 is at epoch 3
  for _ in $(seq 300); do grep -q "epoch 3/" "$T/$1.out" 2>/dev/null && break; sleep 0.1; done
  for p in $(pgrep -f -- "worker --config $2"); do
    [[ $(tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -x 'SLURM_PROCID=2') ]] &&
      [[ $(cat /proc/$p/comm 2>/dev/null) == hora ]] && { kill -9 "$p"; echo "  killed task 2 (pid $p)"; return 0; }
  done
  echo "  no task 2 to kill"; return 1
}
sed 's/^  epochs: 20/  epochs: 60/' "$T/mnist.yaml" >"$T/elastic.yaml"
submit elastic "$T/elastic.yaml"
kill_task elastic "$T/elastic.yaml"; killed=$?
wait "$SB"; rc=$?
[[ $killed == 0 && $rc == 0 ]] && grep -q "training completed: 3 tasks finished, 1 died" "$T/elastic.out"
check "train.elastic on: one task killed, the job still exits 0" $?
[[ $rc == 0 ]] || { tail -15 "$T/elastic.out" "$T/elastic.err" | sed 's/^/  | /'; }
grep -v "elastic:" "$T/elastic.yaml" >"$T/rigid.yaml"
submit rigid "$T/rigid.yaml"
kill_task rigid "$T/rigid.yaml"; killed=$?
wait "$SB"; rc=$?
[[ $killed == 0 && $rc != 0 ]] && grep -q "the job failed" "$T/rigid.out" "$T/rigid.err"
check "without train.elastic: the same kill fails the job (exit $rc)" $?
exit $fail
