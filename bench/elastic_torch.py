#!/usr/bin/python3
"""torchrun worker for bench/elastic.sh's anchor: the MNIST MLP 784-128-10
under DistributedDataParallel over Gloo (as ../shared/anchors/src/ddp_mlp.py),
started by torchrun (RANK, WORLD_SIZE, MASTER_* from the environment).
After every step it appends "wallclock_ns step world restart" to --log, so
that the bench can time kill -> first step of the re-formed job.

  torchrun --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d
           --rdzv_endpoint=127.0.0.1:PORT --max_restarts=3 --redirects=2 --tee=2
           bench/elastic_torch.py --data DIR --log FILE [--batch 32] [--steps 100000]
Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse, os, struct, time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=100000)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(42)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    xs = read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).float().div_(255).reshape(-1, 784)
    ys = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).long()
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * world)
    per = xs.shape[0] // world
    perm = torch.randperm(xs.shape[0], generator=torch.Generator().manual_seed(42))[rank * per:(rank + 1) * per]
    nb = per // a.batch
    with open(a.log, "a") as log:
        for s in range(a.steps):
            j = perm[(s % nb) * a.batch:(s % nb + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xs[j]), ys[j]).backward()
            opt.step()
            log.write(f"{time.time_ns()} {s + 1} {world} {restart}\n")
            log.flush()
            time.sleep(0.001)  # keep the two agents' workers from hogging both CPUs
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
