#!/usr/bin/python3
"""py_allreduce.py [--sizes 8,16M] [--iters N] [--json OUT] - issue 17, point 3:
hora's allreduce through the Python binding (NumPy float32 arrays, in place:
hora.allreduce_), timed per call on every rank, under `hora run -np N`.
Three modes: "background", the default (the call goes through hora's
background thread and a wait in 50 ms slices that lets Ctrl-C in);
"inline", hora.set_interruptible(False) (the call on the calling thread, as
C's hora_allreduce); "inline-out", the same out of place into a preallocated
array, as `hora bench allreduce` calls it (send -> recv). bench/python.sh
--overhead runs it beside `hora bench allreduce` (C) at the same sizes and
prints the binding's cost per call in us. Rank 0 prints one line per size
and mode: "size bytes mode median_us" and writes --json.
Needs /usr/bin/python3 with NumPy and PYTHONPATH=build/python."""
import argparse
import json
import statistics
import time

import numpy as np

import hora


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def timed(call, iters):
    """median us per call over 5 batches of iters calls, after a barrier"""
    for _ in range(max(3, iters // 10)):
        call()
    out = []
    for _ in range(5):
        hora.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        out.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(out)


def out_of_place(a, out):
    """send a, receive into out, as the C bench does (the engine under
    hora.allreduce, with a preallocated result instead of a new array)"""
    return lambda: hora._comm.call(lambda: hora._allreduce_async(a, hora._code(a), hora.Sum, out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8,16M")
    p.add_argument("--iters", type=int, default=0, help="calls per batch (default by size)")
    p.add_argument("--json")
    a = p.parse_args()
    hora.init()
    rows = []
    for s in a.sizes.split(","):
        nbytes = parse_size(s)
        arr = np.ones(max(1, nbytes // 4), dtype=np.float32)
        res = np.empty_like(arr)
        iters = a.iters or (2000 if nbytes <= 65536 else 20)
        in_place = lambda: hora.allreduce_(arr, op=hora.Sum)
        for mode, inter, call in (("background", True, in_place), ("inline", False, in_place),
                                  ("inline-out", False, out_of_place(arr, res))):
            hora.set_interruptible(inter)
            us = timed(call, iters)
            rows.append({"bytes": nbytes, "mode": mode, "us": us, "ranks": hora.size()})
            if hora.rank() == 0:
                print("%d bytes %s %.2f us" % (nbytes, mode, us), flush=True)
        hora.set_interruptible(True)
    if hora.rank() == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)
    hora.shutdown()


if __name__ == "__main__":
    main()
