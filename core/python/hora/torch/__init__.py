"""hora.torch - horovod.torch's API on hora (import hora.torch as hvd).

The collectives on torch tensors (a new tensor; `_` variants in place;
`_async` variants return an int handle for synchronize()/poll()), zero copy
for contiguous CPU tensors (data_ptr), and for CUDA tensors in allreduce,
broadcast and DistributedOptimizer once hora's GPU module loads
(core/devcoll.h: NCCL within a host, staged elsewhere; cuda_reason() says
why not), other tensors through a contiguous CPU copy. dtypes: float32, float64, float16, bfloat16, int32, int64 (and any
dtype for broadcast, moved as bytes). broadcast_parameters,
broadcast_optimizer_state, broadcast_object, allgather_object,
DistributedOptimizer and Compression as Horovod's; hora.torch.elastic
(a cluster file with train.elastic; State/TorchState, commit, @elastic.run); neighbor_allreduce
with BlueFog's arguments. core/python/README.md has the table against Horovod.
"""
import collections
import ctypes
import io
import pickle

import numpy as _np
import torch as _torch

import hora as _h
from hora import _comm
from hora._comm import init, shutdown, is_initialized, poll, set_interruptible
from hora import (rank, size, local_rank, local_size, barrier, HoraError, version,
                  Sum, Average, Min, Max, Product, Adasum)
from .compression import Compression
from .optimizer import DistributedOptimizer
from . import elastic
from .gossip import (neighbor_allreduce, neighbor_allreduce_nonblocking, neighbor_allreduce_async,
                     in_neighbor_ranks, out_neighbor_ranks)

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
           "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async",
           "broadcast_async_", "reducescatter", "reducescatter_async", "reduce_scatter",
           "barrier", "synchronize", "poll", "broadcast_parameters", "broadcast_optimizer_state",
           "broadcast_object", "allgather_object", "DistributedOptimizer", "Compression",
           "neighbor_allreduce", "neighbor_allreduce_nonblocking", "HoraError",
           "Sum", "Average", "Min", "Max", "Product", "nccl_built", "mpi_built", "gloo_built",
           "mpi_threads_supported", "set_interruptible", "cuda_reason"]

def nccl_built():
    """True when CUDA tensors go to hora as device buffers (NCCL within a
    host); False: they move through CPU copies (cuda_reason() says why)"""
    return _cuda_ready()


_cuda = {}


def _cuda_ready():
    """hora's GPU module loaded (hora_cuda_init), once per process"""
    if "ok" not in _cuda:
        why = ctypes.create_string_buffer(512)
        n = _comm.lib.hora_cuda_init(why, len(why))
        _cuda["ok"] = n > 0
        _cuda["why"] = "" if n > 0 else why.value.decode("utf-8", "replace")
    return _cuda["ok"]


def cuda_reason():
    """"" when CUDA tensors go to hora as device buffers, else why they move
    through CPU copies"""
    return "" if _cuda_ready() else _cuda["why"]


class _DevArray:
    """a CUDA tensor where the binding takes a NumPy array: its device
    pointer (ctypes.data) and element count (size); keeps it alive"""

    class _C:
        def __init__(self, p):
            self.data = p

    def __init__(self, t):
        self.tensor = t
        self.size = t.numel()
        self.ctypes = _DevArray._C(t.data_ptr())


def _on_device(t):
    """t goes to hora as a device buffer (a CUDA tensor, the module loaded)"""
    return t.device.type == "cuda" and _cuda_ready()


def _ready(t):
    """the buffer is ready for hora's own streams: the caller's stream done"""
    _torch.cuda.current_stream(t.device).synchronize()


def _buf(t):
    """what the binding reads and writes: a NumPy view, or a device buffer"""
    return _DevArray(t) if t.device.type == "cuda" else _as_np(t)


def mpi_built():
    return False


def gloo_built():
    return False


def mpi_threads_supported():
    return False


_CODES = {_torch.float32: _comm.F32, _torch.float64: _comm.F64, _torch.float16: _comm.F16,
          _torch.bfloat16: _comm.BF16, _torch.int32: _comm.I32, _torch.int64: _comm.I64}


def _code(t):
    c = _CODES.get(t.dtype)
    if c is None:
        raise TypeError("hora.torch: dtype %s is not supported here (float32, float64, float16, "
                        "bfloat16, int32, int64)" % t.dtype)
    return c


def _as_np(t):
    """a numpy view of a contiguous CPU tensor (bfloat16 as int16 bits)"""
    if t.dtype == _torch.bfloat16:
        return t.view(_torch.int16).numpy()
    return t.numpy()


def _as_torch(a, dtype):
    t = _torch.from_numpy(a)
    return t.view(_torch.bfloat16) if dtype == _torch.bfloat16 else t


def _cpu_contig(t):
    """(the tensor the library reads, whether it is t itself)"""
    if not isinstance(t, _torch.Tensor):
        raise TypeError("hora.torch: expected a torch.Tensor, got %s" % type(t).__name__)
    src = t.detach()
    if src.device.type != "cpu":
        src = src.cpu()
    if not src.is_contiguous():
        src = src.contiguous()
    return src, src.data_ptr() == t.data_ptr() and t.device.type == "cpu"


def _op(op, average):
    return _h._op(op, average)


# ---- allreduce ---------------------------------------------------------------

def _dev_contig(t):
    """(the CUDA tensor hora reads, whether it is t itself)"""
    src = t.detach()
    if not src.is_contiguous():
        src = src.contiguous()
    return src, src.data_ptr() == t.data_ptr()


def _allreduce_async(tensor, inplace, op, compression, name, pre, post):
    dev = isinstance(tensor, _torch.Tensor) and _on_device(tensor)
    src, own = _dev_contig(tensor) if dev else _cpu_contig(tensor)  # own: src is tensor's own memory
    if pre != 1.0:  # in the tensor's dtype (an integer one truncated), as the reduction
        src, own = (src * pre).to(src.dtype), False
    comp, ctx = compression.compress(src)
    if comp is not src:
        send = out = comp.contiguous()          # a fresh buffer: reduce in place in it
    elif own and inplace:
        send = out = src                        # the caller's memory: zero copy
    elif own:
        send, out = src, _torch.empty_like(src)  # out of place: the caller's tensor untouched
    else:
        send = out = src                        # already a copy of ours
    a, b = _buf(send), _buf(out)
    if dev:
        _ready(send)

    def finish():
        r = compression.decompress(out, ctx)
        if post != 1.0:
            r = (r * post).to(r.dtype)
        if inplace:
            if r.data_ptr() != tensor.data_ptr():
                with _torch.no_grad():
                    tensor.copy_(r)
            return tensor
        return _to_device(r, tensor)
    return _h._allreduce_async(a, _code(send), op, b, finish, name)


def allreduce_async(tensor, average=None, name=None, op=None, compression=Compression.none,
                    prescale_factor=1.0, postscale_factor=1.0):
    return _allreduce_async(tensor, False, _op(op, average), compression, name, prescale_factor,
                            postscale_factor)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0):
    """op (default Average) of tensor over every rank, as a new tensor"""
    return _comm.call(lambda: allreduce_async(tensor, average, name, op, compression,
                                              prescale_factor, postscale_factor))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0):
    return _allreduce_async(tensor, True, _op(op, average), Compression.none, name,
                            prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """in place"""
    return _comm.call(lambda: allreduce_async_(tensor, average, name, op, prescale_factor,
                                               postscale_factor))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None):
    hs = [allreduce_async(t, average, name, op, compression) for t in tensors]
    return [synchronize(h) for h in hs]


# ---- allgather, broadcast, reducescatter ---------------------------------------

def _to_device(r, like):
    return r.to(like.device) if like.device.type != "cpu" else r


def allgather_async(tensor, name=None):
    src, _ = _cpu_contig(tensor)
    dt = src.dtype
    return _h._allgather_async(_as_np(src), _code(src),
                               lambda a: _to_device(_as_torch(a, dt), tensor), name)


def allgather(tensor, name=None):
    """every rank's tensor concatenated along dim 0 (the first dims may differ)"""
    return _comm.call(lambda: allgather_async(tensor, name))


def _bytes_view(t):
    """a contiguous CPU copy of t as int32 words (padded), for dtypes hora
    cannot reduce but may move: broadcast copies bytes"""
    b = t.detach().cpu().contiguous().view(-1).view(_torch.uint8)
    pad = (-b.numel()) % 4
    if pad:
        b = _torch.cat([b, _torch.zeros(pad, dtype=_torch.uint8)])
    else:
        b = b.clone()
    return b.view(_torch.int32)


def broadcast_async_(tensor, root_rank, name=None):
    if tensor.dtype not in _CODES:
        words = _bytes_view(tensor)

        def back_bytes():
            n = tensor.numel() * tensor.element_size()
            with _torch.no_grad():
                tensor.copy_(words.view(_torch.uint8)[:n].view(tensor.dtype).view(tensor.shape))
            return tensor
        return _h._broadcast_async(words.numpy(), _comm.I32, root_rank, back_bytes, name)
    dev = _on_device(tensor)
    src, own = _dev_contig(tensor) if dev else _cpu_contig(tensor)
    buf = tensor.detach() if own else src
    if dev:
        _ready(buf)

    def back():
        if not own:
            with _torch.no_grad():
                tensor.copy_(buf)
        return tensor
    return _h._broadcast_async(_buf(buf), _code(buf), root_rank, back, name)


def broadcast_(tensor, root_rank, name=None):
    """root_rank's tensor into tensor, in place"""
    return _comm.call(lambda: broadcast_async_(tensor, root_rank, name))


def broadcast_async(tensor, root_rank, name=None):
    return broadcast_async_(tensor.detach().clone(), root_rank, name)


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor as a new tensor"""
    return _comm.call(lambda: broadcast_async(tensor, root_rank, name))


def reducescatter_async(tensor, name=None, compression=Compression.none, op=Average):
    src, _ = _cpu_contig(tensor)
    comp, ctx = compression.compress(src)
    comp = comp.contiguous()
    dt = comp.dtype
    return _h._reduce_scatter_async(
        _as_np(comp), _code(comp), _op(op, None),
        lambda a: _to_device(compression.decompress(_as_torch(a, dt), ctx), tensor), name)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average):
    """this rank's part (along dim 0) of op over every rank's tensor"""
    return _comm.call(lambda: reducescatter_async(tensor, name, compression, op))


reduce_scatter = reducescatter
reduce_scatter_async = reducescatter_async


def synchronize(handle):
    """wait for an async call; returns its result tensor"""
    return _comm.synchronize(handle)


# ---- objects, parameters, optimizer state -------------------------------------------

def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's obj (pickled) on every rank"""
    if rank() == root_rank:
        data = pickle.dumps(obj)
        n = _torch.tensor([len(data)], dtype=_torch.int64)
    else:
        n = _torch.zeros(1, dtype=_torch.int64)
    broadcast_(n, root_rank, name)
    buf = _torch.zeros(int(n.item()), dtype=_torch.uint8)
    if rank() == root_rank:
        buf = _torch.frombuffer(bytearray(data), dtype=_torch.uint8)
    broadcast_(buf, root_rank, name)
    return obj if rank() == root_rank else pickle.loads(buf.numpy().tobytes())


def allgather_object(obj, name=None):
    """every rank's obj, as a list in rank order"""
    data = pickle.dumps(obj)
    lens = allgather(_torch.tensor([len(data)], dtype=_torch.int64)).tolist()
    pad = max(lens)
    b = _torch.zeros(pad + (-pad) % 4, dtype=_torch.uint8)
    b[:len(data)] = _torch.frombuffer(bytearray(data), dtype=_torch.uint8)
    allb = allgather(b.view(_torch.int32).view(1, -1)).view(_torch.uint8)
    return [pickle.loads(allb[r, :lens[r]].numpy().tobytes()) for r in range(len(lens))]


def broadcast_parameters(params, root_rank):
    """root_rank's values into params, in place: a state_dict (dict), or
    named_parameters() (an iterable of (name, tensor)), or tensors. The
    order is the sorted names of a dict, the given order otherwise: the same
    on every rank."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if items and not isinstance(items[0], tuple):
            items = [("param.%d" % i, t) for i, t in enumerate(items)]
    hs = []
    for name, p in items:
        if p is None:
            continue
        if not isinstance(p, _torch.Tensor):
            raise ValueError("broadcast_parameters: %s is a %s, not a tensor" % (name, type(p).__name__))
        hs.append(broadcast_async_(p.data, root_rank, name))
    for h in hs:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank):
    """root_rank's optimizer state (each group's options, each parameter's
    state: tensors in place, other values by pickle) on every rank. A fresh
    optimizer first takes one step with zero gradients (the parameters and
    gradients restored after it) so that its state exists, as Horovod does."""
    if isinstance(optimizer, _torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: LBFGS is not supported")
    if not optimizer.state_dict()["state"]:
        _init_state(optimizer)
    sd = optimizer.state_dict()
    by_id = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            by_id[len(by_id)] = p
    scalars = {}
    desc = []  # root's state tensors by name: every rank matches these, not its own list
    for gi, group in enumerate(sd["param_groups"]):
        for k, v in group.items():
            if k != "params":
                scalars[("group", gi, k)] = v
        for pid in group["params"]:
            for k, v in sorted(sd["state"].get(pid, {}).items(), key=lambda kv: str(kv[0])):
                if isinstance(v, _torch.Tensor):
                    on_param = pid in by_id and v.device == by_id[pid].device
                    desc.append((pid, k, tuple(v.shape), str(v.dtype).replace("torch.", ""), on_param))
                else:
                    scalars[("state", pid, k)] = v
    root = broadcast_object({"scalars": scalars, "tensors": desc}, root_rank)
    scalars, desc = root["scalars"], root["tensors"]
    # root's state is the state: a tensor this rank lacks (or has in another
    # shape or dtype: a resumed root whose state covers other parameters)
    # is made for it, and what root does not have is dropped
    tensors, keep = [], set()
    for pid, k, shape, dtype, on_param in desc:
        if pid not in by_id:
            raise ValueError("broadcast_optimizer_state: rank %d's optimizer state names parameter %d; "
                             "this rank's optimizer has %d parameters" % (root_rank, pid, len(by_id)))
        st = optimizer.state[by_id[pid]]
        v = st.get(k)
        dt = getattr(_torch, dtype)
        if not (isinstance(v, _torch.Tensor) and tuple(v.shape) == shape and v.dtype == dt):
            v = st[k] = _torch.zeros(shape, dtype=dt, device=by_id[pid].device if on_param else "cpu")
        tensors.append(("%d.%s" % (pid, k), v))
        keep.add((pid, k))
    broadcast_parameters(tensors, root_rank)
    keep |= {(key[1], key[2]) for key in scalars if key[0] == "state"}
    for pid, p in by_id.items():
        st = optimizer.state.get(p)
        for k in [k for k in (st or {}) if (pid, k) not in keep]:
            del st[k]
    for key, v in scalars.items():
        if key[0] == "group":
            optimizer.param_groups[key[1]][key[2]] = v
        else:
            optimizer.state[by_id[key[1]]][key[2]] = v


def _init_state(optimizer):
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                saved.append((p, p.data.clone(), p.grad))
                p.grad = _torch.zeros_like(p.data)
    step = getattr(optimizer, "_hora_inner_step", None)
    (step or optimizer.step)()
    for p, data, grad in saved:
        p.data.copy_(data)
        p.grad = grad
