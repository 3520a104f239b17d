#!/usr/bin/env python3
"""cuda_check.py - hora.torch on CUDA tensors, for the GPU machine
(gpu/device-check.sh runs it as `hora run -np 2 -- python3
tests/python/cuda_check.py`; not part of the CPU suite: Debian's torch has
no CUDA). Each rank, on its GPU (local rank mod the devices):
- hora.torch.nccl_built(): the CUDA tensors go to hora as device buffers;
- allreduce_ (sum, average) and broadcast_ of CUDA tensors: exact values;
- DistributedOptimizer over a CUDA MLP (784-128-10, SGD, fp32 and fp16
  compression), 20 steps on each rank's own random batch: every rank ends
  with bitwise the same parameters (their crc over an allgather) and the
  loss fell;
then prints "cuda_check: rank R of N: ok (...)". Exit 77 without CUDA, 1 on
a failed check (what failed on stderr).
"""
import sys
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import hora.torch as hvd


def fail(msg):
    print("cuda_check: rank %d: %s" % (hvd.rank(), msg), file=sys.stderr)
    sys.exit(1)


def crc(model):
    b = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    return zlib.crc32(b)


def train(comp, dev):
    torch.manual_seed(1)  # the same initial model everywhere
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator(device="cpu").manual_seed(100 + hvd.rank())  # each rank its own data
    x = torch.rand(64, 784, generator=g).to(dev)
    y = torch.randint(0, 10, (64,), generator=g).to(dev)
    first = last = None
    for _ in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        last = loss.item()
        first = last if first is None else first
    crcs = hvd.allgather(torch.tensor([crc(model)], dtype=torch.int64)).tolist()
    if len(set(crcs)) != 1:
        fail("%s: the replicas differ after 20 steps (crc %s)" % (comp.__name__, crcs))
    if not last < first:
        fail("%s: the loss did not fall (%g -> %g)" % (comp.__name__, first, last))
    return first, last


def main():
    if not torch.cuda.is_available():
        print("cuda_check: torch sees no CUDA device")
        return 77
    hvd.init()
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if not hvd.nccl_built():
        fail("CUDA tensors go through CPU copies: %s" % hvd.cuda_reason())
    n, r = hvd.size(), hvd.rank()
    t = torch.full((1 << 20,), float(r + 1), device=dev)
    hvd.allreduce_(t, op=hvd.Sum)
    if not bool((t == n * (n + 1) / 2).all()):
        fail("allreduce_ (sum) of a CUDA tensor: %g, not %g" % (t[0].item(), n * (n + 1) / 2))
    a = hvd.allreduce(torch.full((4097,), float(r), device=dev))
    if a.device != dev or not bool((a == (n - 1) / 2).all()):
        fail("allreduce (average): %s on %s" % (a[:2].tolist(), a.device))
    b = torch.full((333,), float(r), device=dev)
    hvd.broadcast_(b, root_rank=n - 1)
    if not bool((b == n - 1).all()):
        fail("broadcast_ of a CUDA tensor: %g" % b[0].item())
    f32 = train(hvd.Compression.none, dev)
    f16 = train(hvd.Compression.fp16, dev)
    print("cuda_check: rank %d of %d: ok (device %s; loss %.4f -> %.4f, fp16 %.4f -> %.4f)"
          % (r, n, dev, f32[0], f32[1], f16[0], f16[1]))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
