#!/usr/bin/env bash
# elastic.sh [--out DIR] [--single 20] [--double 5] [--vc 5] [--double0 10]
#            [--freeze 20] [--join 5] [--torchrun 2] [--epochs 40]
#            [--commit-steps N] [--seed S] [--hora PATH] - the chaos bench of
# elastic training (issue 13, acceptance point 2; issue 34, point 2): an
# undisturbed 4-worker run, then 60 trials in random order of 4 workers (hora
# launch, MNIST MLP, train.elastic on, default membership timings), each
# killing with SIGKILL
#   single  (20): one random worker (rank 0 included) at a random step
#   double   (5): that, and a second survivor 0.3-1 s later
#   vc       (5): that, and a second survivor 20-300 ms later (during the
#                 detection of the first loss or the re-forming: 2 of 4 left)
#   double0 (10): worker 0 and a second random worker within 0-0.15 s of
#                 each other, which one first at random
# or freezing
#   freeze  (20): one random worker stopped (SIGSTOP) for a uniform 0.2-5 s,
#                 then resumed (tests/integration/freeze_trial.py)
# and, spread among them, torchrun's figure (--nnodes=1:2, c10d: kill -9 of
# one agent's process group, time until the survivor trains again;
# bench/elastic_torch.py; skipped without torchrun). Per kill trial: launcher
# exit status, final val_acc vs the undisturbed run, survivors' crc32s, steps
# rolled back per view change, recovery = kill -> end of the first step of
# the next or final view (HORA_TEST_STEP_LOG). Per freeze trial: completed,
# view changed, the others' longest stall, recovery (SIGSTOP -> their first
# step in the new view), the stall on the wake-up. Then 5 joiners. The
# summary sets the kill recoveries against the goal median <= 0.3 s, max <=
# 1.0 s. Data: the first 4,000 / 1,000 images of data/mnist (a trial trains
# ~4 s). Writes DIR/trials.jsonl, DIR/summary.txt and each launch's output;
# about 12 minutes in all. --hora: the binary (default build/hora).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/bench/results/issue34/elastic" ARGS=() HORA="$ROOT/build/hora"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --hora) HORA="$(realpath "$2")"; shift 2 ;;
    --single|--double|--vc|--double0|--freeze|--join|--torchrun|--epochs|--commit-steps|--seed)
      ARGS+=("$1" "$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $HORA ]] || { echo "build hora first" >&2; exit 1; }
[[ -d $ROOT/data/mnist ]] || { echo "no data/mnist (deploy/get-data.sh)" >&2; exit 1; }
command -v torchrun >/dev/null || ARGS+=(--torchrun 0)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hora-elastic.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT INT TERM
export HORA_SECRET="elastic-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
/usr/bin/python3 "$ROOT/tests/integration/idx_subset.py" "$ROOT/data/mnist" "$TMP/mnist4k" 4000 1000
mkdir -p "$OUT"
/usr/bin/python3 "$ROOT/bench/elastic.py" --hora "$HORA" --data "$TMP/mnist4k" --out "$OUT" --tmp "$TMP" "${ARGS[@]}"
# no machine paths in what is committed: the repository's and the temporary folder's
sed -i -e "s#$ROOT/##g" -e "s#$TMP/##g" "$OUT"/*.txt "$OUT"/*.jsonl
