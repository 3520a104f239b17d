#!/usr/bin/python3
"""Horovod's PyTorch MNIST example on hora: the 784-128-10 MLP, plain SGD
with lr x size, gradients averaged by hora's distributed optimizer, every
rank training its own shard of one seeded shuffle per epoch, the loss and
accuracy averaged across ranks with allreduce.

  build/hora run -np 4 /usr/bin/python3 core/examples/pytorch_mnist.py [--data data/mnist]
        [--epochs 20] [--batch 32] [--lr 0.1] [--steps K] [--json OUT]

Rank 0 prints one line per epoch, as the C trainer does:
  epoch E/N loss L acc A val_loss V val_acc W samples/s S seconds T
--steps K times K steps (after 20 warm-up steps, on every rank at once)
instead of whole epochs and prints samples/s over all ranks; --json writes
rank 0's figures. Started without `hora run` it is a job of one.
Needs Debian's python3-torch (/usr/bin/python3) and the hora package on
PYTHONPATH (build/python: core/python/README.md).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def idx(d, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"pytorch_mnist: {d}: no {stem}[.gz] (deploy/get-data.sh fetches data/mnist)")


def load(d):
    xs = read_idx(idx(d, "train-images-idx3-ubyte")).float().div_(255).reshape(-1, 784)
    ys = read_idx(idx(d, "train-labels-idx1-ubyte")).long()
    xt = read_idx(idx(d, "t10k-images-idx3-ubyte")).float().div_(255).reshape(-1, 784)
    yt = read_idx(idx(d, "t10k-labels-idx1-ubyte")).long()
    return xs, ys, xt, yt


def averaged(values, name):
    """The mean over ranks of a few floats, one allreduce."""
    return hvd.allreduce(torch.tensor(values, dtype=torch.float64), name=name).tolist()


def evaluate(model, xt, yt):
    """Loss and accuracy over the whole test set: each rank a shard, summed."""
    lo = hvd.rank() * len(xt) // hvd.size()
    hi = (hvd.rank() + 1) * len(xt) // hvd.size()
    with torch.no_grad():
        out = model(xt[lo:hi])
        s = [F.cross_entropy(out, yt[lo:hi], reduction="sum").item(),
             (out.argmax(1) == yt[lo:hi]).sum().item(), float(hi - lo)]
    s = hvd.allreduce(torch.tensor(s, dtype=torch.float64), op=hvd.Sum, name="val").tolist()
    return s[0] / s[2], s[1] / s[2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--json")
    a = p.parse_args()

    hvd.init()                                      # Horovod: hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    xs, ys, xt, yt = load(a.data)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr * hvd.size())   # lr x size
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    n, g = len(xs), torch.Generator().manual_seed(a.seed)
    per = n // hvd.size()
    nb = per // a.batch

    def step(j):
        opt.zero_grad()
        out = model(xs[j])
        loss = F.cross_entropy(out, ys[j])
        loss.backward()
        opt.step()
        return loss, out

    if a.steps:
        return timed(a, step, torch.randperm(n, generator=g), per, nb)
    t_all = time.perf_counter()
    for ep in range(a.epochs):
        perm = torch.randperm(n, generator=g)[hvd.rank() * per:(hvd.rank() + 1) * per]
        t0, tot, hits = time.perf_counter(), 0.0, 0
        for s in range(nb):
            j = perm[s * a.batch:(s + 1) * a.batch]
            loss, out = step(j)
            tot += loss.item()
            hits += (out.argmax(1) == ys[j]).sum().item()
        dt = time.perf_counter() - t0
        loss, acc = averaged([tot / nb, hits / (nb * a.batch)], "train")
        val_loss, val_acc = evaluate(model, xt, yt)
        if hvd.rank() == 0:
            print(f"epoch {ep + 1}/{a.epochs} loss {loss:.4f} acc {acc:.4f} val_loss {val_loss:.4f} "
                  f"val_acc {val_acc:.4f} samples/s {nb * a.batch * hvd.size() / dt:.0f} seconds {dt:.2f}",
                  flush=True)
    if hvd.rank() == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"world": hvd.size(), "epochs": a.epochs, "val_acc": val_acc,
                       "seconds": time.perf_counter() - t_all}, f)
    hvd.shutdown()


def timed(a, step, perm, per, nb):
    """--steps: K steps after 20 warm-up ones, every rank from a barrier."""
    perm = perm[hvd.rank() * per:(hvd.rank() + 1) * per]
    for i in range(20):
        step(perm[(i % nb) * a.batch:(i % nb + 1) * a.batch])
    hvd.barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(perm[(i % nb) * a.batch:(i % nb + 1) * a.batch])
    hvd.barrier()
    dt = time.perf_counter() - t0
    out = {"world": hvd.size(), "batch_per_worker": a.batch, "steps": a.steps, "seconds": dt,
           "samples_per_s": a.steps * a.batch * hvd.size() / dt}
    if hvd.rank() == 0:
        print(f"{hvd.size()} workers, batch {a.batch}: {out['samples_per_s']:.0f} samples/s "
              f"({a.steps} steps in {dt:.2f} s)", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
