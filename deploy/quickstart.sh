#!/usr/bin/env bash
# hora quick start on a fresh Debian 12 machine: install dependencies, build,
# fetch the data, and train the MNIST reference model (784-128-10 MLP) on a
# local cluster of 4 workers started from deploy/clusters/local.yaml
# (membership through a seed, gradients averaged by the distributed
# optimizer). Extra arguments go to `hora launch`, e.g. --set train.epochs=5.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
bash deploy/get-data.sh
# the cluster secret: from the environment, or a fresh one for this run
export HORA_SECRET="${HORA_SECRET:-$(head -c 32 /dev/urandom | base64)}"
./build/hora launch deploy/clusters/local.yaml --set train.metrics=build/mnist-metrics.jsonl "$@"
