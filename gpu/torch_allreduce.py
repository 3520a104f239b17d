#!/usr/bin/env python3
"""torch_allreduce.py - the anchor of `hora bench allreduce --device cuda`
(issue 16): torch.distributed's allreduce of CUDA tensors over the Gloo
backend between 2 processes on the one GPU (what a PyTorch user has there
without NCCL, which takes one rank per GPU), f32 sum, 1 KiB ... 256 MiB,
timed as hora's bench: a few warm-up calls, then about 200 ms of calls with
torch.cuda.synchronize() after each, per call the max over the ranks, the
median; busbw = algbw x 2(N-1)/N.

    python3 gpu/torch_allreduce.py --sizes 1K:256M --json out.json

Needs torch with CUDA (the device machine's plain `python3`); prints why and
exits 77 otherwise. A bench for the device run, not a hora test.
"""
import argparse
import json
import os
import statistics
import sys
import time


def size_of(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def rank_main(rank, world, port, sizes, q):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    rows = []
    for b in sizes:
        x = torch.ones(b // 4, dtype=torch.float32, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        iters = max(5, min(1000, int(2e8 / max(b, 1024) / 2)))
        t = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            t.append(time.perf_counter() - t0)
        tt = torch.tensor(t, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        med = statistics.median(tt.tolist())
        algbw = b / med / 1e9
        rows.append({"size_bytes": b, "time_us": med * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (world - 1) / world})
    if rank == 0:
        q.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1K:256M")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print("torch_allreduce: no torch here (%s)" % e)
        return 77
    if not torch.cuda.is_available():
        print("torch_allreduce: torch sees no CUDA device")
        return 77
    lo, hi = (size_of(x) for x in a.sizes.split(":"))
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= 4
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 20000 + os.getpid() % 20000
    ps = [ctx.Process(target=rank_main, args=(r, a.world, port, sizes, q)) for r in range(a.world)]
    for x in ps:
        x.start()
    try:
        rows = q.get(timeout=300)
    except Exception:  # queue.Empty: a rank died before rank 0 reported
        print("torch_allreduce: no result from rank 0 (exit codes %s)" % [x.exitcode for x in ps])
        for x in ps:
            x.kill()
        return 1
    for x in ps:
        x.join()
    print("# torch.distributed gloo, CUDA tensors, %d processes on one GPU, f32 sum" % a.world)
    print("%12s %12s %12s %12s" % ("size", "time_us", "algbw_GBps", "busbw_GBps"))
    for r in rows:
        print("%12d %12.2f %12.4f %12.4f" % (r["size_bytes"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch_gloo_cuda": rows}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
