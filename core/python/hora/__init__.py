"""hora - Python binding of hora's collectives (libhora.so through ctypes).

The NumPy API, Horovod's names and semantics on numpy arrays:

    import hora
    hora.init()                      # joins the job of HORA_CONFIG/HORA_PROC (hora run)
    avg = hora.allreduce(x)          # op=hora.Average by default, a new array
    h = hora.allreduce_async(x, op=hora.Sum); y = hora.synchronize(h)
    rows = hora.allgather(x)         # concatenation along dim 0 (dim 0 may differ per rank)

C-contiguous arrays are passed to the library as they are (zero copy); others
are copied first. dtypes: float32, float64, float16, int32, int64 (bfloat16
through hora.torch, or an ml_dtypes bfloat16 array). PyTorch: hora.torch.
Failures raise hora.HoraError (.code, .message with hora's reason).
"""
import numpy as _np

from ._lib import HoraError, library_path, lib as _lib
from . import _comm
from ._comm import init, shutdown, is_initialized, poll, synchronize, set_interruptible

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
           "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
           "reduce_scatter", "reduce_scatter_async", "reducescatter", "reducescatter_async",
           "barrier", "synchronize", "poll", "HoraError", "version", "set_interruptible",
           "Sum", "Average", "Min", "Max", "Product"]

# reduction ops (horovod.torch's names)
Sum, Average, Min, Max, Product = _comm.SUM, _comm.AVG, _comm.MIN, _comm.MAX, _comm.PROD
Adasum = None  # not in hora: passing it is refused

_NP_CODES = {_np.dtype(_np.float32): _comm.F32, _np.dtype(_np.float64): _comm.F64,
             _np.dtype(_np.float16): _comm.F16, _np.dtype(_np.int32): _comm.I32,
             _np.dtype(_np.int64): _comm.I64}


def version():
    """libhora's version, "MAJOR.MINOR.PATCH"."""
    return _lib.hora_version().decode()


def rank():
    _comm.comm()
    return _comm.state.rank


def size():
    _comm.comm()
    return _comm.state.size


def local_rank():
    _comm.comm()
    return _comm.state.local_rank


def local_size():
    _comm.comm()
    return _comm.state.local_size


def _code(a):
    c = _NP_CODES.get(a.dtype)
    if c is None:
        if a.dtype.name == "bfloat16":  # ml_dtypes
            return _comm.BF16
        raise TypeError("hora: dtype %s is not supported (float32, float64, float16, int32, int64; "
                        "bfloat16 through hora.torch)" % a.dtype)
    return c


def _op(op, average=None):
    if op is None:
        if average is None or average:
            return Average
        return Sum
    if average is not None:
        raise ValueError("hora: give op or average, not both")
    if op not in (Sum, Average, Min, Max, Product):
        raise ValueError("hora: op %r is not one of hora.Sum, Average, Min, Max, Product (no Adasum)"
                         % (op,))
    return op


def _contig(a):
    return _np.ascontiguousarray(a)


def _ptr(a):
    return a.ctypes.data


# ---- the engine on (array, dtype code); hora.torch uses it too ----------------

def _allreduce_async(a, code, op, out=None, finish=None, name=None):
    """a: C-contiguous; out: C-contiguous of a's size (a itself: in place)."""
    if out is None:
        out = _np.empty_like(a)
    fin = finish if finish is not None else (lambda: out)
    return _comm.submit("hora_allreduce_async", (_ptr(a), _ptr(out), a.size, code, op), (a, out),
                        fin, name or "allreduce")


def _broadcast_async(buf, code, root, finish=None, name=None):
    """in place on buf (C-contiguous, writable)"""
    root = int(root)
    if not 0 <= root < size():
        raise ValueError("hora: broadcast root_rank %d is not a rank (size %d)" % (root, size()))
    fin = finish if finish is not None else (lambda: buf)
    return _comm.submit("hora_broadcast_async", (_ptr(buf), buf.size, code, root), (buf,), fin,
                        name or "broadcast")


def _rows(a):
    """(first dim, elements per row) of a, a 0-d array being one row"""
    if a.ndim == 0:
        return 1, 1
    row = 1
    for d in a.shape[1:]:
        row *= d
    return a.shape[0], row


def _allgather_async(a, code, finish=None, name=None):
    """Horovod's allgather: concatenation along dim 0; the first dims may
    differ between ranks. A blocking exchange of the shapes comes first (so
    every rank can size the result), then the data asynchronously."""
    n = size()
    rows, row = _rows(a)
    tail = a.shape[1:] if a.ndim else ()
    shape_key = 0
    for d in (max(a.ndim, 1),) + tuple(tail):
        shape_key = (shape_key * 1000003 + int(d)) % (1 << 61)
    meta = _np.array([rows, shape_key], dtype=_np.int64)
    allm = _np.empty(2 * n, dtype=_np.int64)
    _comm.run("hora_allgather_async", (_ptr(meta), _ptr(allm), 2, _comm.I64), (meta, allm), None,
              "allgather (shapes)")
    allm = allm.reshape(n, 2)
    if (allm[:, 1] != shape_key).any():
        bad = [r for r in range(n) if allm[r, 1] != allm[0, 1]]
        raise HoraError(-22, "allgather: the arrays of ranks %s differ from rank 0's beyond dim 0 "
                        "(this rank: shape %s)" % (bad, a.shape))
    counts = [int(r) for r in allm[:, 0]]
    most = max(counts)
    if all(c == most for c in counts):
        out = _np.empty((n * most,) + tail, dtype=a.dtype)
        src = a
        post = lambda: out
    else:  # pad every rank's rows to the longest, gather, then drop the padding
        src = _np.zeros((most,) + tail, dtype=a.dtype)
        src[:rows] = a.reshape((rows,) + tail)
        out = _np.empty((n * most,) + tail, dtype=a.dtype)
        post = lambda: _np.concatenate([out[r * most:r * most + counts[r]] for r in range(n)])
    src = _contig(src)
    fin = (lambda: finish(post())) if finish is not None else post
    return _comm.submit("hora_allgather_async", (_ptr(src), _ptr(out), most * row, code),
                        (src, out, a), fin, name or "allgather")


def _reduce_scatter_async(a, code, op, finish=None, name=None):
    """Horovod's reducescatter: the reduction of a (the same shape on every
    rank), split along dim 0, rank r getting part r; when dim 0 does not
    divide by size the first dim0 % size ranks get one row more."""
    n = size()
    rows, row = _rows(a)
    tail = a.shape[1:] if a.ndim else ()
    each = [rows // n + (1 if r < rows % n else 0) for r in range(n)]
    most = max(each)
    me = rank()
    if rows % n == 0:
        src = a
    else:
        src = _np.zeros((n * most,) + tail, dtype=a.dtype)
        a2 = a.reshape((rows,) + tail)
        start = 0
        for r in range(n):
            src[r * most:r * most + each[r]] = a2[start:start + each[r]]
            start += each[r]
    src = _contig(src)
    out = _np.empty((most,) + tail, dtype=a.dtype)
    post = (lambda: out) if rows % n == 0 else (lambda: out[:each[me]].copy())
    fin = (lambda: finish(post())) if finish is not None else post
    return _comm.submit("hora_reduce_scatter_async", (_ptr(src), _ptr(out), most * row, code, op),
                        (src, out, a), fin, name or "reduce_scatter")


def _scale(a, f):
    return a if f == 1.0 else (a * f).astype(a.dtype, copy=False)


# ---- the public NumPy API --------------------------------------------------------

def allreduce_async(array, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0):
    """Start op (default Average) over every rank's array; returns a handle
    whose synchronize() gives a new array of the same shape and dtype."""
    a = _contig(_scale(_np.asarray(array), prescale_factor))
    code = _code(a)
    fin = None
    if postscale_factor != 1.0:
        out = _np.empty_like(a)
        fin = lambda: _scale(out, postscale_factor)
        return _allreduce_async(a, code, _op(op, average), out, fin, name)
    return _allreduce_async(a, code, _op(op, average), name=name)


def allreduce(array, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """op (default Average) of array over every rank, as a new array."""
    return _comm.call(lambda: allreduce_async(array, average, name, op, prescale_factor,
                                                postscale_factor))


def allreduce_async_(array, average=None, name=None, op=None):
    """In place on array (a numpy array; zero copy when C-contiguous and
    writable, else through a copy written back at synchronize)."""
    if not isinstance(array, _np.ndarray):
        raise TypeError("hora.allreduce_async_ needs a numpy array")
    code = _code(array)
    if array.flags.c_contiguous and array.flags.writeable:
        return _allreduce_async(array, code, _op(op, average), array, name=name)
    tmp = _np.ascontiguousarray(array)

    def back():
        array[...] = tmp
        return array
    return _allreduce_async(tmp, code, _op(op, average), tmp, back, name)


def allreduce_(array, average=None, name=None, op=None):
    return _comm.call(lambda: allreduce_async_(array, average, name, op))


def allgather_async(array, name=None):
    a = _contig(_np.asarray(array))
    return _allgather_async(a, _code(a), name=name)


def allgather(array, name=None):
    """Every rank's array concatenated along dim 0, in rank order (the first
    dims may differ; the rest of the shape must be the same)."""
    return _comm.call(lambda: allgather_async(array, name))


def broadcast_async_(array, root_rank, name=None):
    if not isinstance(array, _np.ndarray):
        raise TypeError("hora.broadcast_async_ needs a numpy array")
    code = _code(array)
    if array.flags.c_contiguous and array.flags.writeable:
        return _broadcast_async(array, code, root_rank, name=name)
    tmp = _np.ascontiguousarray(array)

    def back():
        array[...] = tmp
        return array
    return _broadcast_async(tmp, code, root_rank, back, name)


def broadcast_(array, root_rank, name=None):
    """root_rank's array into array, in place on every rank."""
    return _comm.call(lambda: broadcast_async_(array, root_rank, name))


def broadcast_async(array, root_rank, name=None):
    a = _np.array(array, order="C", copy=True)
    return _broadcast_async(a, _code(a), root_rank, name=name)


def broadcast(array, root_rank, name=None):
    """root_rank's array, as a new array on every rank."""
    return _comm.call(lambda: broadcast_async(array, root_rank, name))


def reduce_scatter_async(array, op=None, name=None):
    a = _contig(_np.asarray(array))
    return _reduce_scatter_async(a, _code(a), _op(op), name=name)


def reduce_scatter(array, op=None, name=None):
    """This rank's part (along dim 0) of op (default Average) over every
    rank's array."""
    return _comm.call(lambda: reduce_scatter_async(array, op, name))


reducescatter = reduce_scatter          # horovod's spelling
reducescatter_async = reduce_scatter_async


def barrier():
    """Returns once every rank has called it."""
    _comm.run("hora_barrier_async", (), (), None, "barrier")
