"""optimizer.py - DistributedOptimizer, as horovod.torch's: gradients are
averaged across the ranks on hora's background thread while backward goes
on, and step() waits for them, then runs the wrapped optimizer.

How (and why it is fast and deterministic):
- Fusion: the parameters, taken in reverse order (backward produces the last
  layer's gradients first), are cut into buckets of about threshold bytes
  ($HORA_FUSION_THRESHOLD, default 1 MiB) of one dtype. Each bucket owns one
  flat gradient buffer and every p.grad is a view into it, so autograd
  accumulates straight into the buffer and a bucket is averaged by one
  in-place hora_allreduce_async: no copies, one round trip per bucket (the
  784-128-10 MLP's 4 tensors are one bucket).
- A hook on each parameter's gradient accumulator (p.expand_as(p).grad_fn
  .next_functions[0][0], as Horovod) counts the gradient in; once every
  gradient of a bucket is in (backward_passes_per_step times), the bucket is
  queued - but always in bucket order, so every rank queues the same
  allreduces in the same order whatever order the hooks fire in, and every
  replica applies bitwise the same average.
- step() / synchronize() queues the buckets not queued yet (a parameter
  without a gradient this step contributes zeros, even when its gradient
  was set to None rather than zeroed in its view), waits for all, then the
  wrapped optimizer steps.
- Compression.fp16 / bf16: the bucket travels as a 16-bit copy (reduced in
  f32 by hora), copied back into the f32 buffer. A Compressor of the user's
  (compress(tensor) -> (tensor, ctx), decompress(tensor, ctx), as Horovod's):
  called on the bucket every step, its tensor averaged, decompressed back
  into the bucket (CPU parameters).
- CUDA parameters: their buckets are on their device (a bucket holds one
  device's parameters), averaged as device buffers once hora's GPU module
  loads (hora.torch.nccl_built()), else through a CPU copy.
A gradient that autograd replaced by a tensor of its own (zero_grad with
set_to_none=True) is copied into its bucket's view when its bucket goes.
"""
import contextlib
import os
import weakref

import torch

from hora import _comm
import hora as _h
from .compression import Compression


def _threshold():
    v = os.environ.get("HORA_FUSION_THRESHOLD")
    if v is None or v == "":
        return 1 << 20
    try:
        n = int(v)
    except ValueError:
        raise ValueError("HORA_FUSION_THRESHOLD must be an integer number of bytes (got '%s')" % v)
    if n < 0:
        raise ValueError("HORA_FUSION_THRESHOLD must be >= 0 (got '%s')" % v)
    return n


def _builtin(compression):
    return compression in (Compression.none, Compression.fp16, Compression.bf16)


class _Bucket:
    __slots__ = ("params", "flat", "views", "half", "ready", "handle", "code", "array", "host", "dev",
                 "custom", "cctx")

    def __init__(self, params, compression):
        dt = params[0].dtype
        n = sum(p.numel() for p in params)
        self.params = params
        self.flat = torch.zeros(n, dtype=dt, device=params[0].device)  # the gradients' device
        self.views = []
        off = 0
        for p in params:
            self.views.append(self.flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        # a compressor of the user's (Horovod's Compressor API): compress and
        # decompress each step around the bucket's allreduce (the built-in
        # ones: a 16-bit copy kept from step to step)
        self.custom = not _builtin(compression)
        self.cctx = None
        if self.custom and params[0].device.type != "cpu":
            raise ValueError("DistributedOptimizer: a compressor of your own (%s) takes CPU parameters "
                             "only; on CUDA use Compression.none, fp16 or bf16" % getattr(
                                 compression, "__name__", type(compression).__name__))
        comp, _ = (self.flat, None) if self.custom else compression.compress(self.flat)
        self.half = comp.contiguous() if comp is not self.flat else None
        buf = self.half if self.half is not None else self.flat
        from . import _code, _buf, _on_device
        self.code = _code(buf)
        # what the allreduce reads and writes, in place: the buffer itself (CPU,
        # or CUDA once hora's GPU module loads), else a CPU copy of a CUDA one
        self.dev = buf.device.type == "cuda"
        self.host = None
        if self.dev and not _on_device(buf):
            self.host = torch.empty(n, dtype=buf.dtype, device="cpu")
        self.array = _buf(self.host if self.host is not None else buf)
        self.ready = 0
        self.handle = None


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 threshold):
        super(self.__class__, self).__init__(params)
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [("allreduce.noname.%d" % i, p) for i, p in
                     enumerate(p for g in self.param_groups for p in g["params"])]
        if any(not isinstance(x, tuple) for x in named):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "e.g. model.named_parameters()")
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters holds a name twice: %s" %
                             sorted(n for n in set(names) if names.count(n) > 1))
        ids = {id(p) for _, p in named}
        missing = [p for g in self.param_groups for p in g["params"] if id(p) not in ids]
        if missing:
            raise ValueError("named_parameters lacks %d of the optimizer's parameters" % len(missing))
        self._op = _h._op(op, None)
        self._compression = compression
        self._bpps = int(backward_passes_per_step)
        if self._bpps < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self._skip = False
        # parameters in the optimizer's order; buckets from the last backwards
        order = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._buckets = []
        cur, cur_bytes = [], 0
        for p in reversed(order):
            nb = p.numel() * p.element_size()
            if cur and (cur[0].dtype != p.dtype or cur[0].device != p.device or
                        cur_bytes + nb > threshold):
                self._buckets.append(_Bucket(cur, compression))
                cur, cur_bytes = [], 0
            cur.append(p)
            cur_bytes += nb
        if cur:
            self._buckets.append(_Bucket(cur, compression))
        self._slot = {}  # id(p) -> (bucket index, view index)
        for bi, b in enumerate(self._buckets):
            for vi, p in enumerate(b.params):
                self._slot[id(p)] = (bi, vi)
                with torch.no_grad():
                    if p.grad is not None:
                        b.views[vi].copy_(p.grad)
                p.grad = b.views[vi]
        self._counts = {id(p): 0 for p in order}
        self._next = 0  # next bucket to queue
        self._grad_accs = []
        ref = weakref.WeakMethod(self._drop_requests)
        _comm._reset_hooks.append(lambda: ref() and ref()())
        # hooks when there is someone to average with, now or later (elastic: a job may grow)
        self._hooked = _h.size() > 1 or _comm.state.elastic
        if self._hooked:
            for p in order:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._make_hook(p))
                self._grad_accs.append(acc)

    def _make_hook(self, p):
        key = id(p)

        def hook(*_):
            if self._skip:
                return
            c = self._counts[key] + 1
            self._counts[key] = c
            if c > self._bpps:
                # its bucket may be on the wire: accumulating into it now would race
                raise RuntimeError(
                    "hora.torch.DistributedOptimizer: gradients were computed more than "
                    "backward_passes_per_step (%d) times before step() or synchronize(); "
                    "raise backward_passes_per_step to accumulate" % self._bpps)
            if c != self._bpps:
                return
            b = self._buckets[self._slot[key][0]]
            b.ready += 1
            if b.ready == len(b.params):
                self._queue_ready(defer_last=not _comm.state.interruptible)
        return hook

    def _queue_ready(self, all_=False, defer_last=False):
        """defer_last (hora.set_interruptible(False)): the last bucket is left
        to synchronize(), which runs it on the calling thread: backward is
        over by then, so there is nothing to overlap, and no hand-off"""
        bs = self._buckets
        while self._next < len(bs) and (all_ or bs[self._next].ready == len(bs[self._next].params)):
            if defer_last and self._next == len(bs) - 1:
                break
            self._queue(bs[self._next])
            self._next += 1

    def _queue(self, b):
        for p, v in zip(b.params, b.views):
            g = p.grad
            if g is None:
                # no gradient this step (the gradients were set to None, as
                # torch's model.zero_grad(set_to_none=True) does, and this
                # parameter took no part): zeros go, as in Horovod, not what
                # the view held from the last step
                with torch.no_grad():
                    v.zero_()
                p.grad = v
            elif g.data_ptr() != v.data_ptr():
                with torch.no_grad():
                    v.copy_(g)
                p.grad = v
        if b.custom:
            from . import _code, _buf
            comp, ctx = self._compression.compress(b.flat)
            comp = comp.contiguous()
            b.cctx = (comp, ctx)  # alive until synchronize decompresses it
            a = _buf(comp)
            b.handle = _h._allreduce_async(a, _code(comp), self._op, a, None, "DistributedOptimizer")
            return
        if b.half is not None:
            b.half.copy_(b.flat)
        src = b.half if b.half is not None else b.flat
        if b.host is not None:
            b.host.copy_(src)  # through the CPU (synchronous)
        elif b.dev:
            torch.cuda.current_stream(src.device).synchronize()  # the gradients are written
        a = b.array
        b.handle = _h._allreduce_async(a, b.code, self._op, a, None, "DistributedOptimizer")

    def synchronize(self):
        """Queue what is left, wait for every average (the gradients then hold
        it)."""
        if not self._hooked:
            return
        with _comm._blocking():  # inline after hora.set_interruptible(False)
            self._queue_ready(all_=True)
        for b in self._buckets:
            if b.handle is not None:
                h, b.handle = b.handle, None
                _comm.synchronize(h)
                if b.cctx is not None:
                    comp, ctx = b.cctx
                    b.cctx = None
                    with torch.no_grad():
                        b.flat.copy_(self._compression.decompress(comp, ctx))
                if b.host is not None:
                    (b.half if b.half is not None else b.flat).copy_(b.host)
                if b.half is not None:
                    b.flat.copy_(b.half)
            b.ready = 0
        for k in self._counts:
            self._counts[k] = 0
        self._next = 0

    def _drop_requests(self):
        """after a re-form (hora.torch.elastic): the requests in flight are gone"""
        for b in self._buckets:
            b.handle = None
            b.cctx = None
            b.ready = 0
        for k in self._counts:
            self._counts[k] = 0
        self._next = 0

    @contextlib.contextmanager
    def skip_synchronize(self):
        """with opt.skip_synchronize(): opt.step() - after an explicit
        opt.synchronize() (e.g. to clip the averaged gradients)"""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not self._skip:
            self.synchronize()
        return super(self.__class__, self).step(closure)

    def _hora_inner_step(self):
        """the wrapped optimizer's step without averaging (broadcast_optimizer_state)"""
        return super(self.__class__, self).step()

    def zero_grad(self, set_to_none=False):
        """Zero every gradient in place (the bucket buffers; set_to_none is
        not followed, so that the gradients stay views of them)."""
        if any(b.handle is not None for b in self._buckets) or any(self._counts.values()):
            raise RuntimeError("hora.torch.DistributedOptimizer: zero_grad() was called after "
                               "backward() but before step() or synchronize()")
        for b in self._buckets:
            b.flat.zero_()
            for p, v in zip(b.params, b.views):
                if p.grad is None or p.grad.data_ptr() != v.data_ptr():
                    p.grad = v


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=_h.Average, gradient_predivide_factor=1.0,
                         fusion_threshold_bytes=None):
    """Wrap a torch optimizer: its class with the averaging above, over its
    param_groups (as horovod.torch.DistributedOptimizer). op: Average (the
    default) or Sum. gradient_predivide_factor must be 1 (not in hora).
    fusion_threshold_bytes: the bucket size (default $HORA_FUSION_THRESHOLD,
    else 1 MiB)."""
    if gradient_predivide_factor != 1.0:
        raise ValueError("hora.torch.DistributedOptimizer: gradient_predivide_factor is not supported")
    if op not in (_h.Average, _h.Sum):
        raise ValueError("hora.torch.DistributedOptimizer: op must be Average or Sum")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    thr = _threshold() if fusion_threshold_bytes is None else int(fusion_threshold_bytes)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               thr)
