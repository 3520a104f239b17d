"""gossip.py - BlueFog's neighbor_allreduce over hora_neighbor_allreduce.

    x = neighbor_allreduce(x, self_weight=0.5, src_weights={1: 0.5}, dst_weights=[1])

recv = self_weight * x + sum over src of src_weights[src] * (what src sent);
this rank sends x to every rank of dst_weights (a list of ranks, or a dict
rank -> weight scaling what it sends). Without weights the default graph is
BlueFog's default, the exponential graph (to r + 2^i, from r - 2^i, for
2^i < size), uniformly weighted (1/(in-degree + 1)). self_weight and
src_weights go together, as in BlueFog. It is a collective: every rank
calls it in the same order as the other collectives; patterns that do not
agree (a in b's sources exactly when b in a's destinations) fail on every
rank with a HoraError naming the ranks, unless enable_topo_check=False
(every rank must pass the same).
"""
import ctypes

import torch

import hora as _h
from hora import _comm


def _exp2(n, r, sign):
    out, i = [], 1
    while i < n:
        out.append((r + sign * i) % n)
        i *= 2
    return sorted(set(out) - {r})


def in_neighbor_ranks():
    """the default graph's sources of this rank (exponential graph)"""
    return _exp2(_h.size(), _h.rank(), -1)


def out_neighbor_ranks():
    """the default graph's destinations of this rank"""
    return _exp2(_h.size(), _h.rank(), +1)


def _arrays(ranks, weights):
    n = len(ranks)
    ri = (ctypes.c_int * max(n, 1))(*ranks)
    wd = (ctypes.c_double * max(n, 1))(*weights) if weights is not None else None
    return ri, wd, n


def neighbor_allreduce_nonblocking(tensor, self_weight=None, src_weights=None, dst_weights=None,
                                   enable_topo_check=True, name=None):
    from . import _cpu_contig, _as_np, _code, _to_device
    if (self_weight is None) != (src_weights is None):
        raise ValueError("neighbor_allreduce: self_weight and src_weights go together")
    if self_weight is None:
        src = in_neighbor_ranks()
        self_weight = 1.0 / (len(src) + 1)
        sw = [self_weight] * len(src)
    else:
        if not isinstance(src_weights, dict):
            raise ValueError("neighbor_allreduce: src_weights must be a dict rank -> weight")
        src = sorted(int(r) for r in src_weights)
        sw = [float(src_weights[r]) for r in src]
    if dst_weights is None:
        dst, dw = out_neighbor_ranks(), None
    elif isinstance(dst_weights, dict):
        dst = sorted(int(r) for r in dst_weights)
        dw = [float(dst_weights[r]) for r in dst]
    else:
        dst, dw = [int(r) for r in dst_weights], None
    _comm.set_neighbor_check(enable_topo_check)
    s, _ = _cpu_contig(tensor)
    out = torch.empty_like(s)
    si, swa, ns = _arrays(src, sw)
    di, dwa, nd = _arrays(dst, dw)
    a, b = _as_np(s), _as_np(out)
    return _comm.submit("hora_neighbor_allreduce_async",
                        (a.ctypes.data, b.ctypes.data, a.size, _code(s), float(self_weight), si,
                         swa, ns, di, dwa, nd), (a, b, s, si, swa, di, dwa),
                        lambda: _to_device(out, tensor), name or "neighbor_allreduce")


neighbor_allreduce_async = neighbor_allreduce_nonblocking


def neighbor_allreduce(tensor, self_weight=None, src_weights=None, dst_weights=None,
                       enable_topo_check=True, name=None):
    """the weighted neighbour average of tensor (a new tensor)"""
    return _comm.call(lambda: neighbor_allreduce_nonblocking(
        tensor, self_weight, src_weights, dst_weights, enable_topo_check, name))
