#!/usr/bin/env python3
"""device-summary.py OUT - issue 16's acceptance table from the files that
gpu/device-check.sh wrote into OUT: each point measured, its threshold and
PASS / FAIL / NOT MEASURED (with why). Plain Python, no packages."""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
rows = []


def add(point, value, want, ok):
    rows.append((point, value, want, "NOT MEASURED" if ok is None else "PASS" if ok else "FAIL"))


def read(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else None


def last_epoch(name):
    t = read(name)
    if not t or not t.strip():
        return None
    return json.loads(t.strip().splitlines()[-1])


# 1. gradients vs the CPU MLP (test_gpu_mlp's lines)
log = read("gputests.log") or ""
diffs = [float(m) for m in re.findall(r"max\|cuda-cpu\|/max\|cpu\| = ([0-9.eE+-]+) \(< 0.0001\)", log)]
skipped = "SKIPPED" in log and not diffs
if diffs:
    add("CUDA vs CPU MLP gradients, max rel. diff", "%.3g over %d checks" % (max(diffs), len(diffs)),
        "< 1e-4", max(diffs) < 1e-4)
else:
    add("CUDA vs CPU MLP gradients, max rel. diff", "skipped" if skipped else "no result", "< 1e-4", None)

san = read("sanitize.log") or ""
m = re.search(r"ERROR SUMMARY: (\d+) error", san)
add("compute-sanitizer memcheck over test_gpu_mlp", m.group(0) if m else "no result", "0 errors",
    (int(m.group(1)) == 0 and "passed: 0 failure" in san) if m else None)

for name, want in (("mnist", 0.95), ("fashion", 0.87)):
    e = last_epoch(name + ".jsonl")
    if e:
        add("20 epochs %s on one GPU, val_acc" % name, "%.4f (epoch %d)" % (e["val_acc"], e["epoch"]),
            ">= %.2f" % want, e["val_acc"] >= want and e["epoch"] >= 20)
    else:
        add("20 epochs %s on one GPU, val_acc" % name, "no result", ">= %.2f" % want, None)

bench = {}
for p in glob.glob(os.path.join(out, "bench-*.json")):
    for line in open(p):
        if line.strip():
            j = json.loads(line)
            if j.get("device") == "cuda":
                bench[j["batch_size"]] = j
b = bench.get(1024)
add("bench train --device cuda, step/gemm at 1024", "%.3f" % b["ratio"] if b else "no result", "<= 1.3",
    b["ratio"] <= 1.3 if b else None)

torch = {}
t = read("torch.json")
if t:
    for r in json.loads(t)["rows"]:
        if "samples_per_s" in r:
            torch[(r["batch_size"], r["compile"])] = r["samples_per_s"]
for bs, want in ((32, 2.0), (256, None), (1024, 1.0)):
    h = bench.get(bs)
    best = max([v for (b2, _), v in torch.items() if b2 == bs], default=None)
    if h and best:
        ratio = h["samples_per_s"] / best
        add("samples/s vs PyTorch (best of compile off/on) at %d" % bs,
            "hora %.0f / torch %.0f = %.2f" % (h["samples_per_s"], best, ratio),
            ">= %.1f x" % want if want else "(reported)", ratio >= want if want else True)
    else:
        add("samples/s vs PyTorch at %d" % bs, "no result", ">= %.1f x" % want if want else "-", None)

log = read("launch2.log") or ""
accs = re.findall(r"epoch 20/20 .*val_acc ([0-9.]+)", log)
crcs = set(re.findall(r"final parameters crc32 ([0-9a-f]+)", log))
if accs and crcs:
    add("2-worker GPU training (TCP ring, host averaging), val_acc; replicas",
        "%s; %d distinct crc32" % (accs[-1], len(crcs)), ">= 0.95; 1",
        float(accs[-1]) >= 0.95 and len(crcs) == 1)
else:
    add("2-worker GPU training (TCP ring, host averaging)", "no result", ">= 0.95; 1", None)
for p in ("2 processes x size-1 NCCL comm: device allreduce, every dtype/op, bitwise",
          "2-worker GPU training over NCCL + the ring, identical replicas",
          "device allreduce busbw 1 KiB..256 MiB vs torch.distributed Gloo"):
    add(p, "not built (NCCL communicator not done)", "-", None)

w = max(len(r[0]) for r in rows)
print("\n# issue 16, acceptance point 2, from %s" % out)
for r in rows:
    print("%-*s  %-40s %-10s %s" % (w, r[0], r[1], r[2], r[3]))
