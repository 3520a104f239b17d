#!/usr/bin/env python3
"""torch_mlp.py - the MNIST MLP of `hora bench train` in PyTorch, on the GPU,
for issue 16's comparison (gpu/device-check.sh runs it beside
`hora bench train --device cuda`, same run, same GPU).

The same network (784-128-10, ReLU, softmax cross-entropy, mean loss), the
same optimizer (plain SGD, lr 0.1), batch 32/256/1024, torch.compile off and
on. The data set is on the device (PyTorch's best case: no host copies per
step); samples/s is timed over whole steps (zero_grad, forward, backward,
step) with torch.cuda.synchronize() around the timed loop, median of reps.

    python3 gpu/torch_mlp.py --data DIR --batch 32,256,1024 --json out.json

Needs torch with CUDA (the device machine's plain `python3`); prints why and
exits 77 otherwise. Not a hora test: a bench, for the device run only.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time


def load_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
                return f.read()
    raise FileNotFoundError(path)


def mnist(d, torch):
    img = load_idx(os.path.join(d, "train-images-idx3-ubyte"))
    lab = load_idx(os.path.join(d, "train-labels-idx1-ubyte"))
    n = int.from_bytes(img[4:8], "big")
    rows, cols = int.from_bytes(img[8:12], "big"), int.from_bytes(img[12:16], "big")
    x = torch.frombuffer(bytearray(img[16:]), dtype=torch.uint8).view(n, rows * cols)
    y = torch.frombuffer(bytearray(lab[8:]), dtype=torch.uint8).long()
    return x.float().div_(255.0), y


def run(torch, x, y, batch, compiled, steps, reps):
    nn = torch.nn
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(step) if compiled else step
    n = x.shape[0]
    nb = n // batch
    g = torch.Generator(device="cpu").manual_seed(1)
    perm = torch.randperm(n, generator=g).cuda()
    xs = [x[perm[(i % nb) * batch:(i % nb + 1) * batch]] for i in range(min(nb, 64))]
    ys = [y[perm[(i % nb) * batch:(i % nb + 1) * batch]] for i in range(min(nb, 64))]
    t0 = time.perf_counter()
    for i in range(30):  # warm-up (and compilation)
        fn(xs[i % len(xs)], ys[i % len(ys)])
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    per = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            fn(xs[i % len(xs)], ys[i % len(ys)])
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / steps)
    s = statistics.median(per)
    return {"batch_size": batch, "compile": compiled, "steps": steps, "reps": reps,
            "step_us": s * 1e6, "samples_per_s": batch / s, "warmup_s": warm}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--batch", default="32,256,1024")
    ap.add_argument("--compile", default="off,on")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print("SKIPPED: no torch here (%s)" % e)
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: torch %s has no usable CUDA device" % torch.__version__)
        return 77
    x, y = mnist(a.data, torch)
    x, y = x.cuda(), y.cuda()
    out = {"bench": "torch_mlp", "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0), "samples": int(x.shape[0]), "rows": []}
    print("# torch %s on %s, MLP 784-128-10, SGD lr 0.1, data on the device (%d samples)"
          % (torch.__version__, out["device"], x.shape[0]))
    print("%8s %8s %10s %14s %10s" % ("batch", "compile", "step_us", "samples_per_s", "warmup_s"))
    for c in a.compile.split(","):
        for b in (int(v) for v in a.batch.split(",")):
            try:
                r = run(torch, x, y, b, c == "on", a.steps if b < 1024 else a.steps // 2, a.reps)
            except Exception as e:  # one failed configuration must not hide the rest
                r = {"batch_size": b, "compile": c == "on", "error": repr(e)}
                print("%8d %8s error: %r" % (b, c, e))
            else:
                print("%8d %8s %10.1f %14.0f %10.1f" % (b, c, r["step_us"], r["samples_per_s"],
                                                       r["warmup_s"]))
            out["rows"].append(r)
            sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
