#!/usr/bin/env bash
# test_cli.sh HORA_BIN PLUGIN_NOSYM DATA_DIR - the `hora` command line as a
# user meets it: exit codes (0 ok, 2 bad input), error texts that name the
# file/line/key, flags overriding the YAML file, metrics JSONL, and the
# progress bar on a terminal. Exit 77 = skipped (no data).
set -uo pipefail
HORA="$1" NOSYM="$2" DATA="$3"
[[ -f $DATA/train-images-idx3-ubyte ]] || { echo "SKIP: $DATA missing (deploy/get-data.sh)"; exit 77; }
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() { # name, condition-result
  if [[ $2 == 0 ]]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
expect() { # name, want_rc, want_stderr_substring, cmd...
  local name=$1 want=$2 sub=$3; shift 3
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  if [[ $rc == "$want" ]] && grep -qF -- "$sub" "$T/err" "$T/out"; then check "$name" 0
  else check "$name" 1; echo "  rc=$rc (want $want), want text: $sub"; sed 's/^/  | /' "$T/err" | tail -5; fi
}

expect "missing data dir exits 2 naming the file" 2 "/nonexistent/train-images-idx3-ubyte: missing" \
  "$HORA" train --data /nonexistent --epochs 1
mkdir "$T/bad" && cp "$DATA"/* "$T/bad/" && truncate -s 100 "$T/bad/t10k-images-idx3-ubyte"
expect "truncated images exit 2 naming the file" 2 "bad/t10k-images-idx3-ubyte: truncated" \
  "$HORA" train --data "$T/bad" --epochs 1
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x03\x0c' >"$T/bad/t10k-labels-idx1-ubyte"
cp "$DATA/t10k-images-idx3-ubyte" "$T/bad/"
expect "count mismatch exits 2" 2 "count mismatch: 2 labels" "$HORA" train --data "$T/bad" --epochs 1
printf 'train:\n  epochs: 2\n  batch_size: lots\n' >"$T/bad.yaml"
expect "bad YAML value exits 2 with file:line:col and key" 2 \
  "bad.yaml:3:15: train.batch_size must be an integer" "$HORA" train --config "$T/bad.yaml"
printf 'train:\n  epochs: [2\n' >"$T/broken.yaml"
expect "malformed YAML exits 2 with a position" 2 "broken.yaml:" "$HORA" train --config "$T/broken.yaml"
expect "plugin without entry symbol exits 2" 2 "missing entry symbol 'hora_model_plugin_v1'" \
  "$HORA" train --model "$NOSYM" --data "$DATA" --epochs 1
expect "unknown --set key exits 2" 2 "unknown key 'train.nope'" "$HORA" train --set train.nope=1
expect "bad flag value exits 2" 2 "train.optimizer.lr must be a positive number (got '-1')" \
  "$HORA" train --lr -1
expect "unknown command exits 2" 2 "unknown command 'trian'" "$HORA" trian

# flags override the file; metrics are written
printf 'train:\n  data: %s\n  epochs: 5\n  batch_size: 64\n  hidden: [32]\n' "$DATA" >"$T/ok.yaml"
expect "config + overriding flags train" 0 "final: val_acc" \
  "$HORA" train --config "$T/ok.yaml" --epochs 2 --metrics "$T/m.jsonl" --progress lines
[[ $(wc -l <"$T/m.jsonl") == 2 ]]; check "--epochs 2 overrides epochs: 5 (2 metrics lines)" $?
grep -q '"epoch":2,"loss":' "$T/m.jsonl" && grep -q '"samples_per_s":' "$T/m.jsonl"; check "metrics JSONL keys" $?
grep -q "batch 64" "$T/out"; check "batch_size from the file is used" $?
grep -q "^epoch 2/2 loss .* val_acc .* samples/s .* seconds " "$T/out"; check "one line per epoch off a terminal" $?

# on a terminal: a Keras-like bar
if command -v script >/dev/null; then
  script -qec "$HORA train --config $T/ok.yaml --epochs 1" "$T/tty.log" >/dev/null 2>&1
  grep -q "Epoch 1/1" "$T/tty.log" && grep -q "\[==============================\]" "$T/tty.log" \
    && grep -q "val_acc:" "$T/tty.log"; check "progress bar on a terminal" $?
fi

echo "cli: $pass passed, $fail failed"
[[ $fail == 0 ]]
