#!/usr/bin/env bash
# test_cluster_cli.sh HORA_BIN - bad cluster files: every error names
# file:line:col and the key, exit status 2, for `hora launch` and
# `hora worker --config`.
set -uo pipefail
HORA="$1"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
export HORA_SECRET="cluster-cli-test-secret-0123"
pass=0 fail=0
check() { if [[ $2 == 0 ]]; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; return "$2"; }
expect() { # name, file content, expected text
  printf '%s' "$2" >"$T/c.yaml"
  for cmd in "launch $T/c.yaml" "worker --config $T/c.yaml"; do
    "$HORA" $cmd >"$T/out" 2>&1; local rc=$?
    if [[ $rc == 2 ]] && grep -qF -- "$3" "$T/out"; then check "$1 ($cmd)" 0
    else check "$1 ($cmd)" 1; echo "  rc=$rc want 2 and: $3"; sed 's/^/  | /' "$T/out" | head -3; fi
  done
}
expect "workers not a number" $'cluster:\n  nodes:\n    - host: 127.0.0.1\n      workers: four\n' \
  "c.yaml:4:16: cluster.nodes[0].workers must be a positive integer (got 'four')"
expect "negative workers" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: -1}\n' \
  "c.yaml:3:34: cluster.nodes[0].workers must be a positive integer (got '-1')"
expect "host neither an address nor a name" $'cluster:\n  nodes:\n    - {host: node_1, workers: 1}\n' \
  "c.yaml:3:14: cluster.nodes[0].host must be an IPv4 address or a host name (got 'node_1')"
expect "host a broken address" $'cluster:\n  nodes:\n    - {host: 10.0.0, workers: 1}\n' \
  "c.yaml:3:14: cluster.nodes[0].host must be an IPv4 address or a host name (got '10.0.0')"
expect "missing workers" $'cluster:\n  nodes:\n    - host: 127.0.0.1\n' \
  "c.yaml:3:13: cluster.nodes[0].workers is missing"
expect "missing nodes" $'cluster:\n  name: x\n' "cluster.nodes is missing"
expect "unknown key" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\nmembership:\n  probe_interval: 100\n' \
  "c.yaml:5:3: unknown key 'membership.probe_interval'"
expect "unknown section" $'clutser:\n  nodes: []\n' "c.yaml:1:1: unknown section 'clutser'"
expect "duplicate host" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n    - {host: 127.0.0.1, workers: 2}\n' \
  "c.yaml:4:14: cluster.nodes[1].host 127.0.0.1 is already cluster.nodes[0].host"
expect "unreadable secret file" $'cluster:\n  secret_file: /nonexistent/secret\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' \
  "c.yaml:2:16: cluster.secret_file: secret file /nonexistent/secret: No such file or directory"
expect "bad seed" $'cluster:\n  seeds: [\"127.0.0.1\"]\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' \
  "c.yaml:2:10: cluster.seeds must be a list of HOST:PORT, HOST an IPv4 address or a host name (got '127.0.0.1')"
expect "wrong type for a size" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntransport:\n  chunk_size: big\n' \
  "c.yaml:5:15: transport.chunk_size must be a size"
expect "not a boolean" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntransport:\n  rcvlowat: maybe\n' \
  "c.yaml:5:13: transport.rcvlowat must be true or false (got 'maybe')"
expect "list where a scalar goes" $'cluster:\n  name: [a, b]\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' \
  "c.yaml:2:9: cluster.name must be a scalar, not a list"
expect "unknown collective algorithm" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ncollectives:\n  algorithm: fancy\n' \
  "c.yaml:5:14: collectives.algorithm must be auto, ring, latency or direct (got 'fancy')"
expect "bad collective size" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ncollectives:\n  segment_size: 1KiB\n' \
  "c.yaml:5:17: collectives.segment_size must be a size in 4KiB..64MiB"
expect "bad slice size" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ncollectives:\n  slice_size: 2GiB\n' \
  "c.yaml:5:15: collectives.slice_size must be a size in 64KiB..1GiB"
expect "unknown shm mode" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntransport:\n  shm: maybe\n' \
  "c.yaml:5:8: transport.shm must be auto or off (got 'maybe')"
expect "unknown hierarchical mode" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ncollectives:\n  hierarchical: always\n' \
  "c.yaml:5:17: collectives.hierarchical must be auto, on or off (got 'always')"
expect "hierarchical on without shared memory" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntransport:\n  shm: off\ncollectives:\n  hierarchical: on\n' \
  "c.yaml:7:17: collectives.hierarchical: on needs transport.shm: auto (its stage within a host is shared memory)"
expect "ping timeout not below the period" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\nmembership:\n  ping_timeout_ms: 300\n' \
  "c.yaml: membership.ping_timeout_ms (300) must be at least 1 and below membership.probe_interval_ms (200)"
expect "suspect timeout below the period" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\nmembership:\n  probe_interval_ms: 500\n  suspect_timeout_ms: 400\n' \
  "c.yaml: membership.suspect_timeout_ms (400) must be at least membership.probe_interval_ms (500)"
expect "malformed YAML" $'cluster:\n  nodes: [\n' "c.yaml:3:1: invalid YAML"
# the whole file, train section included, before any worker starts
expect "bad train value" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntrain:\n  epochs: x\n' \
  "c.yaml:5:11: train.epochs must be a positive integer (got 'x')"
"$HORA" launch "$T/c.yaml" >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && ! grep -q "workers on" "$T/out" && ! grep -q '^\[0 ' "$T/out"
check "hora launch: a bad train value in the file starts no worker (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -5
printf 'cluster:\n  launcher: netns\n  nodes:\n    - {host: 10.9.9.1, netns: nope, workers: 1}\n    - {host: 10.9.9.2, workers: 1}\n' >"$T/c.yaml"
"$HORA" launch "$T/c.yaml" >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "c.yaml: cluster.nodes\[1\].netns is missing (launcher netns)" "$T/out" && ! grep -q "workers on" "$T/out"
check "hora launch: a node without netns is refused before any worker starts (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -5
expect "GPUs per node are refused, not ignored" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1, gpus: [0]}\n' \
  "c.yaml:3:37: cluster.nodes[0].gpus: placing workers on GPUs is not available in this build"
expect "a second YAML document" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n---\ncluster: {}\n' \
  "c.yaml:4:1: a second YAML document"
expect "a size with a suffix is a size everywhere" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntransport:\n  sndbuf_bytes: 2GiB\n' \
  "c.yaml:5:17: transport.sndbuf_bytes must be a size in 0..1GiB"
# 200,000 levels of nesting: refused where level 65 opens, at once (it took
# minutes of CPU in libyaml's parser before)
deep="$(printf '[%.0s' {1..200000})$(printf ']%.0s' {1..200000})"
expect "nesting 200,000 levels deep" "cluster:"$'\n'"  name: $deep"$'\n' \
  "c.yaml:2:71: nested more than 64 levels deep"
# train-section keys of features this build lacks: hora launch (before any
# worker starts), the worker that reads the train section and hora train
# refuse them
expect_train() { # name, file content, expected text
  printf '%s' "$2" >"$T/c.yaml"
  for cmd in "launch $T/c.yaml" "worker --config $T/c.yaml" "train --config $T/c.yaml"; do
    "$HORA" $cmd >"$T/out" 2>&1; local rc=$?
    if [[ $rc == 2 ]] && grep -qF -- "$3" "$T/out"; then check "$1 ($cmd)" 0
    else check "$1 ($cmd)" 1; echo "  rc=$rc want 2 and: $3"; sed 's/^/  | /' "$T/out" | head -3; fi
  done
}
expect_train "train.gossip: an unknown key is refused, not skipped" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntrain:\n  epochs: 1\n  gossip: {fanout: 3}\n' \
  "unknown key 'train.gossip.fanout'"
expect_train "train.gossip.mode: async refuses self_weight, at its place" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\ntrain:\n  sync: gossip\n  gossip:\n    mode: async\n    self_weight: 0.5\n' \
  "c.yaml:8:18: train.gossip.self_weight does not apply to train.gossip.mode: async"
( unset HORA_SECRET; printf 'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' >"$T/c.yaml"
  "$HORA" launch "$T/c.yaml" >"$T/out" 2>&1; rc=$?
  [[ $rc == 2 ]] && grep -q "no cluster secret: set cluster.secret_file or HORA_SECRET" "$T/out" ); check "no secret at all" $?
printf 'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 2}\n' >"$T/c.yaml"
"$HORA" worker --config "$T/c.yaml" --proc 5 >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "worker 5 does not exist: .* has 2 workers" "$T/out"; check "worker index out of range" $?
# hora launch: the trivial job on deploy/clusters/local.yaml, and a failing one.
# The shipped file on ports of its own (29500 is also PyTorch's default), so
# nothing else on the machine can be in its way.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
P=$((12000 + RANDOM % 15000))
sed -e "s/29500/$P/; s/29501/$((P + 1))/" "$ROOT/deploy/clusters/local.yaml" >"$T/local.yaml"
grep -q "port_base: $P " "$T/local.yaml" && grep -q "127.0.0.1:$((P + 1))" "$T/local.yaml"
check "local.yaml copied with port_base $P" $?
timeout 120 "$HORA" launch "$T/local.yaml" -- --until-full-view >"$T/out" 2>&1; rc=$?
[[ $rc == 0 && $(grep -cE '^\[[0-3] 127\.0\.0\.1\] worker .*: rank [0-3] of 4 in view' "$T/out") == 4 ]] \
  && grep -q "4 of 4 workers succeeded" "$T/out"
check "hora launch local.yaml: 4 workers print rank and view, exit 0 (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | tail -30
# the training job of local.yaml (4 workers, 2 epochs) from the repository root
if [[ -d $ROOT/data/mnist ]]; then
  (cd "$ROOT" && timeout 180 "$HORA" launch "$T/local.yaml" --set train.epochs=2 \
     --set "train.metrics=$T/m.jsonl") >"$T/out" 2>&1; rc=$?
  [[ $rc == 0 ]] && grep -q '4 workers (global batch 128, lr x 4)' "$T/out" \
    && grep -q '^\[0 127.0.0.1\] epoch 2/2 .* val_acc 0\.[89]' "$T/out" \
    && [[ $(grep -c '"workers":4' "$T/m.jsonl") == 2 ]] && ! grep -q '^\[[123] ' "$T/out"
  check "hora launch local.yaml trains: rank 0 reports 2 epochs of 4 workers (rc=$rc)" $? \
    || sed 's/^/  | /' "$T/out" | tail -30
  (cd "$ROOT" && timeout 60 "$HORA" launch "$T/local.yaml" --set train.epochs=x) >"$T/out" 2>&1; rc=$?
  [[ $rc == 2 ]] && grep -q "train.epochs must be a positive integer (got 'x')" "$T/out"
  check "hora launch --set train.KEY is checked before starting (rc=$rc)" $?
else
  echo "skip the training job: no data/mnist (deploy/get-data.sh)"
fi
# A --set acts as the key in the file: probe_interval_ms 50 alone is valid
# (ping_timeout_ms left out resolves to 0.4 x 50), a ping_timeout_ms that is
# not below the file's probe_interval_ms (200) is not.
timeout 60 "$HORA" launch "$T/local.yaml" --set membership.ping_timeout_ms=300 >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "membership.ping_timeout_ms (300) must be at least 1 and below membership.probe_interval_ms (200)" "$T/out" \
  && ! grep -q "workers on" "$T/out"
check "hora launch --set membership timings are checked together before starting (rc=$rc)" $?
timeout 60 "$HORA" launch "$T/local.yaml" -- --no-such-flag >"$T/out" 2>&1; rc=$?
[[ $rc == 1 ]] && grep -q "worker 2 on 127.0.0.1 exited with status 2; last lines:" "$T/out" \
  && grep -q "unrecognized option '--no-such-flag'" "$T/out"
check "hora launch: failed workers named with their last lines, exit 1 (rc=$rc)" $?
# the secret file: a directory is named a directory (not "too short: 0
# bytes"); a mode others may read is warned about once, naming file and mode
mkdir -p "$T/secret.d"
expect "secret_file is a directory" $'cluster:\n  secret_file: '"$T"$'/secret.d\n  nodes:\n    - {host: 127.0.0.1, workers: 1}\n' \
  "cluster.secret_file: secret file $T/secret.d is a directory, not a regular file"
printf 'world-readable-secret-0123456789\n' >"$T/secret.644"; chmod 644 "$T/secret.644"
timeout 30 "$HORA" worker --secret-file "$T/secret.644" --listen 127.0.0.1:0 --run-ms 300 >"$T/out" 2>&1; rc=$?
[[ $rc == 0 && $(grep -c "warning: secret file $T/secret.644 has mode 0644" "$T/out") == 1 ]]
check "a secret file others may read is warned about once (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -5

# a job's view holds at most 128 workers: more is refused at load, naming the
# node past the limit (before, 129 workers started and no view ever formed)
expect "more workers than a job holds" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 100}\n    - {host: 127.0.0.2, workers: 29}\n' \
  "c.yaml:4:14: cluster.nodes[1].workers: the cluster has 129 workers (129 up to this node), more than the 128 a job holds"
expect "a min_members no view can reach" $'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 2}\nmembership:\n  min_members: 129\n' \
  "c.yaml:5:16: membership.min_members must be an integer in 1..128 (got '129')"
printf 'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 100}\n    - {host: 127.0.0.2, workers: 28}\n' >"$T/c128.yaml"
"$HORA" worker --config "$T/c128.yaml" --proc 127 --run-ms 200 >"$T/out" 2>&1; rc=$?
! grep -q "a job holds" "$T/out" && grep -q "up (membership" "$T/out"
check "128 workers are accepted (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -3
printf 'cluster:\n  nodes:\n    - {host: 127.0.0.1, workers: 129}\n' >"$T/c129.yaml"
"$HORA" launch "$T/c129.yaml" -- --until-full-view >"$T/out" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "c129.yaml:3:14: cluster.nodes\[0\].workers: the cluster has 129 workers" "$T/out" \
  && ! grep -q "workers on" "$T/out"
check "hora launch: a file past the limit starts no worker (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -3
# --until-full-view stopped before its view: not a success
printf 'cluster:\n  port_base: %d\n  nodes:\n    - {host: 127.0.0.1, workers: 3}\n' $((20000 + RANDOM % 20000)) >"$T/c3.yaml"
"$HORA" worker --config "$T/c3.yaml" --proc 1 --until-full-view >"$T/out" 2>&1 & wpid=$!
for _ in $(seq 100); do grep -q "up (membership" "$T/out" && break; sleep 0.05; done
kill -TERM "$wpid"; wait "$wpid"; rc=$?
[[ $rc == 143 ]] && grep -q "stopped by signal 15 before the full view (no view yet: 0 of 3 members)" "$T/out"
check "--until-full-view stopped by SIGTERM before its view exits 143, saying so (rc=$rc)" $? || sed 's/^/  | /' "$T/out" | head -3

echo "cluster-cli: $pass passed, $fail failed"
[[ $fail == 0 ]]
