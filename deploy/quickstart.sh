#!/usr/bin/env bash
# hora quick start on a fresh Debian 12 machine: install dependencies, build,
# fetch the data, and train the MNIST reference model (784-128-10 MLP).
# Today this trains one worker; the cluster issues turn it into a local
# multi-worker cluster started from deploy/clusters/local.yaml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"${JOBS:-2}"
bash deploy/get-data.sh
./build/hora train --config deploy/mnist.yaml --metrics build/mnist-metrics.jsonl "$@"
