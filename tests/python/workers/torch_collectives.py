"""hora.torch against NumPy/torch references on the job of
HORA_CONFIG/HORA_PROC: every collective and dtype (bfloat16 included), the
in-place and async forms, broadcast_parameters / broadcast_optimizer_state /
broadcast_object, DistributedOptimizer (replicas bitwise identical after
several steps, fp16 compression close to uncompressed, Sum, gradient
accumulation), neighbor_allreduce."""
import hashlib

import numpy as np
import torch

import hora.torch as hvd

torch.set_num_threads(1)
import os
if os.environ.get("HORA_TEST_INLINE") == "1":
    hvd.set_interruptible(False)     # blocking calls on the calling thread
hvd.init()
r, n = hvd.rank(), hvd.size()

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def inp(rank, count, dt):
    return ((torch.arange(count) * 7 + rank * 3) % 11 + rank).to(dt)


def all_inputs(count, dt):
    return torch.stack([inp(k, count, dt).double() for k in range(n)])


for dt in DTYPES:
    fl = dt.is_floating_point
    xs = all_inputs(13, dt)
    x = inp(r, 13, dt)
    for op, red in ((hvd.Sum, xs.sum(0)), (hvd.Min, xs.min(0).values), (hvd.Max, xs.max(0).values)):
        y = hvd.allreduce(x, op=op)
        assert y.dtype == dt and torch.equal(y.double(), red), (dt, op, y, red)
    avg = hvd.allreduce(x)                           # Average by default
    ref = xs.sum(0) / n if fl else torch.div(xs.sum(0), n, rounding_mode="floor")
    assert torch.allclose(avg.double(), ref, rtol=1e-2 if dt == torch.bfloat16 else 1e-3), (dt, avg, ref)
    p = (1 + (torch.arange(5) + r) % 2).to(dt)
    assert torch.equal(hvd.allreduce(p, op=hvd.Product).double(),
                       torch.stack([(1 + (torch.arange(5) + k) % 2).double() for k in range(n)]).prod(0))
    # in place (zero copy: the same storage), async, non-contiguous
    z = x.clone()
    ptr = z.data_ptr()
    assert hvd.allreduce_(z, op=hvd.Sum) is z and z.data_ptr() == ptr
    assert torch.equal(z.double(), xs.sum(0)), dt
    h = hvd.allreduce_async(x, op=hvd.Sum)
    assert torch.equal(hvd.synchronize(h).double(), xs.sum(0))
    z = x.clone()
    h = hvd.allreduce_async_(z, op=hvd.Max)
    hvd.synchronize(h)
    assert torch.equal(z.double(), xs.max(0).values)
    m = torch.stack([x, x], 1)[:, 0]                 # a non-contiguous view
    assert not m.is_contiguous()
    assert torch.equal(hvd.allreduce(m, op=hvd.Sum).double(), xs.sum(0))
    # allgather with first dims that differ, in rank order
    a = torch.full((r + 1, 2), r).to(dt)
    g = hvd.allgather(a)
    assert g.dtype == dt and torch.equal(g, torch.cat([torch.full((k + 1, 2), k).to(dt) for k in range(n)]))
    # broadcast from every root, new and in place
    for root in range(n):
        b = (torch.arange(4) * (r + 1)).to(dt)
        nb = hvd.broadcast(b, root)
        assert torch.equal(nb, (torch.arange(4) * (root + 1)).to(dt)) and torch.equal(b, (torch.arange(4) * (r + 1)).to(dt))
        assert hvd.broadcast_(b, root) is b and torch.equal(b, nb)
    # reducescatter: 2n+1 rows, the first rank one more
    rows = 2 * n + 1
    t = ((torch.arange(rows * 3).reshape(rows, 3) % 5) + r).to(dt)
    s = hvd.reducescatter(t, op=hvd.Sum)
    full = torch.stack([((torch.arange(rows * 3).reshape(rows, 3) % 5) + k).double() for k in range(n)]).sum(0)
    each = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    st = sum(each[:r])
    assert torch.equal(s.double(), full[st:st + each[r]]), (dt, s)

# broadcast moves any dtype (bytes), e.g. bool and uint8 buffers of a state_dict
bb = torch.tensor([r % 2 == 0, True, r == 0])
hvd.broadcast_(bb, 0)
assert bb.tolist() == [True, True, True]
u8 = torch.full((3,), r, dtype=torch.uint8)
assert hvd.broadcast(u8, n - 1).tolist() == [n - 1] * 3

# fp16 compression: close to the f32 average, exact where the values are
v = torch.randn(1000, generator=torch.Generator().manual_seed(r)) 
exact = hvd.allreduce(v)
c16 = hvd.allreduce(v, compression=hvd.Compression.fp16)
assert c16.dtype == torch.float32 and torch.allclose(c16, exact, atol=1e-2, rtol=1e-2), (c16 - exact).abs().max()
assert not torch.equal(c16, exact) or n == 1

# objects
assert hvd.broadcast_object({"rank": r, "l": [1, 2]}, root_rank=n - 1) == {"rank": n - 1, "l": [1, 2]}
assert hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)]


def params_hash(model):
    h = hashlib.sha256()
    for p in model.state_dict().values():
        h.update(p.detach().numpy().tobytes())
    return torch.frombuffer(bytearray(h.digest()), dtype=torch.int32).clone()


def same_params_everywhere(model, what):
    hs = hvd.allgather(params_hash(model).view(1, -1))
    assert (hs == hs[0]).all(), "%s: replicas differ: %s" % (what, hs)


def make(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def data(step):
    g = torch.Generator().manual_seed(1000 * step + r)    # every rank its own batch
    return torch.randn(8, 20, generator=g), torch.randint(0, 4, (8,), generator=g)


def train(compression=hvd.Compression.none, op=hvd.Average, steps=5, bpps=1, threshold=None,
          opt_cls=torch.optim.SGD, **kw):
    model = make(100 + r)                            # different on every rank at first
    opt = opt_cls(model.parameters(), lr=0.05, **kw)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    same_params_everywhere(model, "after broadcast_parameters")
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression, op=op, backward_passes_per_step=bpps,
                                   fusion_threshold_bytes=threshold)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(steps):
        opt.zero_grad()
        for k in range(bpps):
            xb, yb = data(step * bpps + k)
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    same_params_everywhere(model, "after %d steps" % steps)
    return model


def reference_sgd(steps=5, lr=0.05, momentum=0.9):
    """the same training on one process with every rank's batch: the mean
    gradient, as the Average of the ranks' gradients"""
    model = make(100)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for step in range(steps):
        opt.zero_grad()
        for k in range(n):
            g = torch.Generator().manual_seed(1000 * step + k)
            xb, yb = torch.randn(8, 20, generator=g), torch.randint(0, 4, (8,), generator=g)
            (torch.nn.functional.cross_entropy(model(xb), yb) / n).backward()
        opt.step()
    return model


m1 = train(momentum=0.9)
ref = reference_sgd()
for a, b in zip(m1.parameters(), ref.parameters()):
    assert torch.allclose(a, b, atol=1e-5), ("DistributedOptimizer vs one process", (a - b).abs().max())
m_small = train(momentum=0.9, threshold=64)           # one bucket per tensor, the same result
for a, b in zip(m1.parameters(), m_small.parameters()):
    assert torch.allclose(a, b, atol=1e-6)
m16 = train(compression=hvd.Compression.fp16, momentum=0.9)
for a, b in zip(m1.parameters(), m16.parameters()):
    assert torch.allclose(a, b, atol=1e-2), ("fp16 vs f32", (a - b).abs().max())
train(opt_cls=torch.optim.Adam, steps=3)
train(bpps=2, steps=2, momentum=0.9)
train(op=hvd.Sum, steps=2)

# misuse is refused, never a race with the averaging in flight
if n > 1:
    model = make(9)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    xb, yb = data(0)
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    for call in (lambda: torch.nn.functional.cross_entropy(model(xb), yb).backward(), opt.zero_grad):
        try:
            call()
            raise AssertionError("accepted")
        except RuntimeError as e:
            assert "before step() or synchronize()" in str(e), e
    opt.step()        # (what the refused backward accumulated may have raced: not compared)
    opt.zero_grad()

# a parameter without a gradient this step averages zeros, also after the
# gradients were set to None (torch 2's model.zero_grad() default), not the
# last step's average still in its view
a_, b_ = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
opt = hvd.DistributedOptimizer(torch.optim.SGD([a_.weight, b_.weight], lr=0.0),
                               named_parameters=[("a", a_.weight), ("b", b_.weight)])
x1 = torch.ones(1, 2)
(a_(x1) + b_(x1)).sum().backward()
opt.step()
assert torch.equal(b_.weight.grad, torch.ones(1, 2)), b_.weight.grad
for p_ in (a_.weight, b_.weight):
    p_.grad = None
a_(x1).sum().backward()                               # b_ takes no part
opt.step()
if n > 1:  # (alone there is nothing to average: torch's own None stays)
    assert torch.equal(b_.weight.grad, torch.zeros(1, 2)), ("stale gradient", b_.weight.grad)
assert torch.equal(a_.weight.grad, torch.ones(1, 2)), a_.weight.grad

# a Compressor of the user's acts in DistributedOptimizer: called every step,
# the average the same as without compression (here: through f64)
class CountingF64(hvd.Compression.none):
    calls = [0, 0]

    @staticmethod
    def compress(t):
        CountingF64.calls[0] += 1
        return t.double(), t.dtype

    @staticmethod
    def decompress(t, ctx):
        CountingF64.calls[1] += 1
        return t.to(ctx)


mc = train(compression=CountingF64, momentum=0.9)
if n > 1:
    assert CountingF64.calls[0] == 5 and CountingF64.calls[1] == 5, CountingF64.calls  # 5 steps, 1 bucket
    for a, b in zip(m1.parameters(), mc.parameters()):
        assert torch.allclose(a, b, atol=1e-6), ("a compressor of one's own vs none", (a - b).abs().max())

# prescale / postscale keep an integer tensor's dtype (truncated, as the sum's)
iv = hvd.allreduce(torch.tensor([3, 5], dtype=torch.int64), op=hvd.Sum, prescale_factor=0.5)
assert iv.dtype == torch.int64 and iv.tolist() == [1 * n, 2 * n], iv

# broadcast_optimizer_state takes root's state by name: a root resumed with
# state for the second layer only, the others with state for both
model = make(11)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
if r == 0:
    with torch.no_grad():
        for p_ in model.parameters():
            p_.grad = None
    xb, yb = data(0)
    for p_ in model[0].parameters():
        p_.requires_grad_(False)
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    opt.step()                                         # state for model[2] only
    for p_ in model[0].parameters():
        p_.requires_grad_(True)
else:
    xb, yb = data(r)
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    opt.step()                                         # state for every parameter
hvd.broadcast_optimizer_state(opt, root_rank=0)
params = list(model.parameters())
assert all(len(opt.state[p_]) == 0 for p_ in params[:2]), [dict(opt.state[p_]) for p_ in params[:2]]
sig = torch.cat([opt.state[p_]["exp_avg"].view(-1) for p_ in params[2:]] +
                [opt.state[p_]["exp_avg_sq"].view(-1) for p_ in params[2:]])
alls = hvd.allgather(sig.view(1, -1))
assert (alls == alls[0]).all(), "exp_avg of the second layer differs from root's"

# broadcast_optimizer_state: root's momentum buffers and options everywhere
model = make(7)
opt = torch.optim.SGD(model.parameters(), lr=0.01 * (r + 1), momentum=0.5)
xb, yb = data(r)
torch.nn.functional.cross_entropy(model(xb), yb).backward()
opt.step()                                            # momentum from this rank's own batch
hvd.broadcast_optimizer_state(opt, root_rank=n - 1)
assert opt.param_groups[0]["lr"] == 0.01 * n
bufs = torch.cat([opt.state[p]["momentum_buffer"].view(-1) for p in model.parameters()])
allb = hvd.allgather(bufs.view(1, -1))
assert (allb == allb[n - 1]).all()
# a fresh Adam: its state made by a zero step, the parameters kept
model = make(8)
before = [p.detach().clone() for p in model.parameters()]
opt = torch.optim.Adam(model.parameters(), lr=0.1, weight_decay=0.1)
hvd.broadcast_optimizer_state(opt, root_rank=0)
assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
assert len(opt.state) == len(before)

# neighbor_allreduce, BlueFog's arguments: the default exponential graph, a ring with weights
xv = torch.full((6,), float(r))
src = hvd.in_neighbor_ranks()
w = 1.0 / (len(src) + 1)
assert torch.allclose(hvd.neighbor_allreduce(xv), torch.full((6,), w * (r + sum(src))))
if n > 1:
    left, right = (r - 1) % n, (r + 1) % n
    sw = {left: 0.25} if n == 2 else {left: 0.25, right: 0.25}
    dst = [right] if n == 2 else [left, right]
    y = hvd.neighbor_allreduce(xv, self_weight=0.5, src_weights=sw, dst_weights=dst)
    refv = 0.5 * r + sum(wt * k for k, wt in sw.items())
    assert torch.allclose(y, torch.full((6,), refv)), (y, refv)
    y = hvd.neighbor_allreduce(xv, self_weight=1.0, src_weights={left: 1.0},
                               dst_weights={right: 2.0})   # what is sent is scaled by dst_weights
    assert torch.allclose(y, torch.full((6,), r + 2.0 * left)), y
hvd.barrier()
hvd.shutdown()
print("torch_collectives ok rank %d of %d" % (r, n))
