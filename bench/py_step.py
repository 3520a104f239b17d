#!/usr/bin/python3
"""py_step.py plain|sync|dist|inline - where a hora.torch training step goes
(issue 17, point 2): the MNIST MLP's step at batch 32 on random data, 2000
timed steps after 50, with the plain torch optimizer (no averaging: the
cost of processes side by side), the plain step followed by an 8-byte
allreduce on the calling thread (sync: what holding the ranks in step
costs, without the gradient's bytes), hora.torch's DistributedOptimizer,
or the same after set_interruptible(False). Rank 0 prints "MODE N us/step".
  build/hora run -np 2 /usr/bin/python3 bench/py_step.py dist
Needs /usr/bin/python3 with torch, PYTHONPATH=build/python."""
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
import hora.torch as hvd
hvd.init(); torch.set_num_threads(1); torch.manual_seed(0)
mode = sys.argv[1]
if mode not in ("plain", "sync", "dist", "inline"):
    sys.exit("py_step.py: MODE is plain, sync, dist or inline")
model = nn.Sequential(nn.Linear(784,128), nn.ReLU(), nn.Linear(128,10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if mode in ("dist", "inline"):
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
if mode in ("inline", "sync"):
    hvd.set_interruptible(False)
tiny = torch.zeros(2)
x = torch.rand(8000, 784); y = torch.randint(0, 10, (8000,))
def step(i):
    j = slice((i*32) % 7968, (i*32) % 7968 + 32)
    opt.zero_grad(); F.cross_entropy(model(x[j]), y[j]).backward(); opt.step()
    if mode == "sync":
        hvd.allreduce_(tiny)
for i in range(50): step(i)
hvd.barrier(); t0 = time.perf_counter()
for i in range(2000): step(i)
hvd.barrier(); dt = time.perf_counter() - t0
if hvd.rank() == 0: print(mode, "%.0f us/step" % (dt / 2000 * 1e6))
