# mnist_job.sh - sourced by the integration tests that train on an MNIST
# subset with real `hora` processes (test_elastic.sh, test_gossip.sh), after
# HORA, DATA and HERE are set: the python3 that sees Debian's packages
# (/usr/bin/python3 first), exit 77 (skip) without MNIST or a python3, a
# temporary folder $T (KEEP=1 keeps it), PIDS (every PID a test starts: all
# of them get SIGKILL at exit), check NAME STATUS (fail=1 on non-zero), and
# mnist_subset NTRAIN NTEST writing the first samples of DATA to $T/data.
PY=/usr/bin/python3
[[ -x $PY ]] || PY="$(command -v python3 || true)"
if [[ ! -f $DATA/train-images-idx3-ubyte || -z $PY ]]; then
  echo "skip: no MNIST in '$DATA' (deploy/get-data.sh) or no python3"
  exit 77
fi
T="$(mktemp -d)"
PIDS=()
cleanup() {
  # a launcher's workers first (SIGKILL of `hora launch` alone leaves them
  # running), resumed in case one is stopped
  for p in "${PIDS[@]}"; do pkill -CONT -P "$p" 2>/dev/null; pkill -KILL -P "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null
  if [[ -n ${KEEP:-} ]]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
fail=0
check() { if [[ $2 == 0 ]]; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
mnist_subset() {
  "$PY" "$HERE/idx_subset.py" "$DATA" "$T/data" "$1" "$2" || { echo "FAIL writing the MNIST subset"; exit 1; }
}
