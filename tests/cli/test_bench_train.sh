#!/usr/bin/env bash
# test_bench_train.sh HORA_BIN DATA - `hora bench train` (bench/train.c) at
# a tiny size: the header, one row whose columns hold together (samples/s =
# batch / step time; a step is its GEMMs and more), the JSON with the same
# figures, the peak RSS under its limit, and bad arguments refused with
# exit 2 and the thing named. No timing is checked. Exit 77 (skip) without
# MNIST or a python3.
set -uo pipefail
HORA="$1"
DATA="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration" && pwd)"
# shellcheck source=../integration/mnist_job.sh
. "$HERE/mnist_job.sh" # the skip without MNIST, $T, $PY, check

timeout 120 "$HORA" bench train --data "$DATA" --batch-size 16 --steps 10 --reps 3 --json "$T/r.json" >"$T/out" 2>&1; rc=$?
[[ $rc == 0 ]] && grep -q '^# hora bench train: model mnist_mlp (101770 params) on cpu, batch 16, 10 steps x 3 reps' "$T/out" \
  && "$PY" - "$T/out" "$T/r.json" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#") and l.split()[0].isdigit()]
assert len(rows) == 1, rows
b, step, gemm, ratio, sps, rss, lim = rows[0]
assert int(b) == 16
step, gemm, ratio, sps, rss, lim = map(float, (step, gemm, ratio, sps, rss, lim))
assert step > 0 and gemm > 0 and ratio > 0, rows  # no bound on the ratio: a loaded machine moves it
assert abs(sps - 16 / (step * 1e-6)) / sps < 0.02, (sps, step)
assert 0 < rss <= lim, (rss, lim)
j = json.load(open(sys.argv[2]))
assert j["bench"] == "train" and j["batch_size"] == 16 and j["steps"] == 10 and j["reps"] == 3, j
assert abs(j["step_us"] - step) < 0.06 and abs(j["samples_per_s"] - sps) / sps < 1e-3, (j, step, sps)
assert j["peak_rss_bytes"] <= j["rss_limit_bytes"], j
PY
check "bench train: header, one consistent row, the same figures in the JSON (rc=$rc)" $?
[[ $fail == 0 ]] || sed 's/^/  | /' "$T/out" | tail -15

"$HORA" bench train --data "$DATA" --batch-size 0 >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q 'batch_size must be an integer' "$T/out"
check "bench train --batch-size 0: refused, named (rc=$rc)" $?
"$HORA" bench train --data "$T/none" >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "$T/none/train-images-idx3-ubyte: missing" "$T/out"
check "bench train --data with no MNIST: the file named, exit 2 (rc=$rc)" $?

[[ $fail == 0 ]]
