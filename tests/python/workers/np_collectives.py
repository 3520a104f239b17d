"""Every NumPy collective of hora against a NumPy reference, every dtype and
op, on the job of HORA_CONFIG/HORA_PROC; results bitwise identical on every
rank. Exits non-zero (an AssertionError naming the case) on a mismatch."""
import numpy as np

import hora

import os
if os.environ.get("HORA_TEST_INLINE") == "1":
    hora.set_interruptible(False)    # blocking calls on the calling thread
hora.init()
r, n = hora.rank(), hora.size()
assert 0 <= r < n and hora.local_size() == n and hora.local_rank() == r, (r, n)

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]
OPS = {hora.Sum: "sum", hora.Average: "avg", hora.Min: "min", hora.Max: "max", hora.Product: "prod"}
COUNTS = [0, 1, 13, 40000]


def inp(rank, count, dt, op):
    i = np.arange(count)
    if op == hora.Product:
        return (1 + (i + rank) % 2).astype(dt)          # 1 or 2: the product stays exact
    return ((i * 7 + rank * 3) % 11 + rank).astype(dt)  # small integers: sums exact in every dtype


def reference(count, dt, op):
    xs = np.stack([inp(k, count, dt, op).astype(np.float64) for k in range(n)])
    if op == hora.Sum:
        v = xs.sum(0)
    elif op == hora.Average:
        v = xs.sum(0)
        if np.issubdtype(dt, np.integer):
            return (v // n).astype(dt)                  # integers truncate (all positive here)
        return (v.astype(np.float32) / np.float32(n)).astype(dt) if dt != np.float64 else v / n
    elif op == hora.Min:
        v = xs.min(0)
    elif op == hora.Max:
        v = xs.max(0)
    else:
        v = xs.prod(0)
    return v.astype(dt)


def same_everywhere(a, what):
    """the result's bytes on every rank are rank 0's"""
    b = np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=np.uint8)
    b = np.concatenate([b, np.zeros((-b.size) % 4, np.uint8)]).view(np.int32)
    allb = hora.allgather(b.reshape(1, -1) if b.size else b.reshape(1, 0))
    assert (allb == allb[0]).all(), "%s: ranks disagree" % what


for dt in DTYPES:
    for op, opname in OPS.items():
        for count in COUNTS:
            what = "allreduce %s %s count %d" % (np.dtype(dt).name, opname, count)
            x = inp(r, count, dt, op)
            keep = x.copy()
            y = hora.allreduce(x, op=op)
            ref = reference(count, dt, op)
            assert y.dtype == np.dtype(dt) and y.shape == x.shape, what
            if op == hora.Average and not np.issubdtype(dt, np.integer):
                # hora may multiply by 1/n: within one rounding of the quotient
                tol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-14}[dt]
                ok = np.allclose(y.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=0)
            else:
                ok = np.array_equal(y, ref)
            assert ok, "%s: %s != %s" % (what, y[:8], ref[:8])
            assert np.array_equal(x, keep), what + ": the input changed"
            if count == 13:
                same_everywhere(y, what)
    # the default op is Average, average=False is Sum; async, poll, in place
    x = inp(r, 13, dt, hora.Sum)
    assert np.allclose(hora.allreduce(x).astype(np.float64),
                       reference(13, dt, hora.Average).astype(np.float64), rtol=1e-3), dt
    assert np.array_equal(hora.allreduce(x, average=False), reference(13, dt, hora.Sum)), dt
    h = hora.allreduce_async(x, op=hora.Max)
    assert isinstance(h, int)
    while not hora.poll(h):
        pass
    assert np.array_equal(hora.synchronize(h), reference(13, dt, hora.Max)), dt
    z = x.copy()
    out = hora.allreduce_(z, op=hora.Sum)
    assert out is z and np.array_equal(z, reference(13, dt, hora.Sum)), dt
    # non-contiguous input: copied, the result as for the contiguous one
    big = np.stack([x, x]).T.copy()          # (13, 2): column 0 is x
    col = big[:, 0]
    assert not col.flags.c_contiguous
    assert np.array_equal(hora.allreduce(col, op=hora.Sum), reference(13, dt, hora.Sum)), dt
    hora.allreduce_(col, op=hora.Sum)        # in place through a copy written back
    assert np.array_equal(big[:, 0], reference(13, dt, hora.Sum)) and np.array_equal(big[:, 1], x)

    # allgather: rank k gives k+1 rows of 3 (first dims differ), then equal shapes
    a = np.full((r + 1, 3), r, dtype=dt) + np.arange(3, dtype=dt)
    g = hora.allgather(a)
    ref = np.concatenate([np.full((k + 1, 3), k, dtype=dt) + np.arange(3, dtype=dt) for k in range(n)])
    assert g.dtype == np.dtype(dt) and np.array_equal(g, ref), ("allgather", dt, g, ref)
    e = np.arange(4, dtype=dt) + r
    g = hora.synchronize(hora.allgather_async(e))
    assert np.array_equal(g, np.concatenate([np.arange(4, dtype=dt) + k for k in range(n)])), dt

    # broadcast from every root, a new array and in place
    for root in range(n):
        b = np.arange(5, dtype=dt) * (r + 1)
        nb = hora.broadcast(b, root)
        assert np.array_equal(nb, np.arange(5, dtype=dt) * (root + 1)), ("broadcast", dt, root)
        assert np.array_equal(b, np.arange(5, dtype=dt) * (r + 1)), "broadcast changed its input"
        out = hora.broadcast_(b, root)
        assert out is b and np.array_equal(b, nb), ("broadcast_", dt, root)

    # reduce-scatter: rows split over the ranks, the first rows % n ranks one more
    for rows in (2 * n, 2 * n + 1):
        for op in (hora.Sum, hora.Average, hora.Min, hora.Max):
            x = (np.arange(rows * 2).reshape(rows, 2) % 5 + r).astype(dt)
            y = hora.reduce_scatter(x, op=op)
            allx = np.stack([(np.arange(rows * 2).reshape(rows, 2) % 5 + k).astype(np.float64)
                             for k in range(n)])
            red = {hora.Sum: allx.sum(0), hora.Min: allx.min(0), hora.Max: allx.max(0),
                   hora.Average: allx.sum(0)}[op]
            if op == hora.Average:
                red = red // n if np.issubdtype(dt, np.integer) else red / n
            each = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
            start = sum(each[:r])
            ref = red[start:start + each[r]].astype(dt)
            tol = 1e-3 if dt == np.float16 else 1e-6
            assert y.shape == ref.shape and np.allclose(y.astype(np.float64), ref, rtol=tol), \
                ("reduce_scatter", dt, rows, OPS[op], y, ref)

hora.barrier()
# unsupported dtypes are refused by name before anything is sent
try:
    hora.allreduce(np.zeros(3, dtype=np.uint8))
    raise AssertionError("uint8 was accepted")
except TypeError as e:
    assert "uint8" in str(e)
hora.shutdown()
assert not hora.is_initialized()
print("np_collectives ok rank %d of %d" % (r, n))
