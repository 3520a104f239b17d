"""_comm.py - the one communicator of the process and the table of pending
requests, shared by the NumPy API (hora/__init__.py) and hora.torch.

Not the user API. Every collective is queued on the communicator's
background thread (hora_*_async) and waited for with hora_wait_ready in
short slices, so a wait for a peer that does not come can be interrupted by
Ctrl-C (KeyboardInterrupt) while the GIL is free for other threads.
KeyboardInterrupt may be raised right after any call returns, before its
result is stored: so a request is entered in the table before the call that
makes it, and a finished one is forgotten (its status kept) before the call
that frees it. An interrupt anywhere leaves at worst a request that is never
freed, never one freed twice nor buffers freed under the C thread. Handles
are ints; the table keeps the buffers of a request alive until it finished,
and a finish function turns the raw result into what the caller gets
(a slice, a copy back, a decompression).
"""
import atexit
import contextlib
import ctypes
import errno
import itertools
import threading

from ._lib import lib, check, HoraError

# enum hora_dtype / enum hora_op of core/hora.h
F32, F64, F16, BF16, I32, I64 = range(6)
SUM, AVG, MIN, MAX, PROD = range(5)
HORA_ERR_LOST, HORA_ERR_VIEW = -10006, -10007

WAIT_SLICE_MS = 50  # how long a wait sleeps in C before Python looks for signals


class _State:
    comm = None          # ctypes.c_void_p of hora_init, None before init / after shutdown
    rank = 0
    size = 1
    local_rank = 0
    local_size = 1
    neighbor_check = True
    interruptible = True  # blocking calls through the background thread (Ctrl-C gets in)
    elastic = False       # the cluster file turns train.elastic on: re-formed after a lost worker
    joiner = False        # this process joined a running elastic job (no state yet)


state = _State()
_lock = threading.Lock()
_ids = itertools.count(1)
# handle -> [request c_void_p or None (finished: its status in [3]),
#            keep-alive objects, finish(result) or None, status]
_pending = {}
_tls = threading.local()  # .blocking: the call being submitted is a blocking one


def set_interruptible(on):
    """True (the default): a blocking call (allreduce, ...) is queued on the
    communicator's background thread and waited for in slices, so Ctrl-C
    interrupts it. False: it runs on the calling thread (hora_allreduce ...,
    no hand-off between threads: lower latency for small calls), and Ctrl-C
    is seen only once it returned (it does when the peer comes, or fails:
    the failure detection, the I/O timeout). The _async forms are not
    affected."""
    state.interruptible = bool(on)


@contextlib.contextmanager
def _blocking():
    was = getattr(_tls, "blocking", False)
    _tls.blocking = True
    try:
        yield
    finally:
        _tls.blocking = was


def call(start):
    """a blocking call: start() submits it (an _async function), then wait"""
    with _blocking():
        h = start()
    return synchronize(h)


def _counts(c):
    state.rank = lib.hora_rank(c)
    state.size = lib.hora_size(c)
    state.local_rank = lib.hora_local_rank(c)
    state.local_size = lib.hora_local_size(c)


def init():
    """Join the job: hora_init(NULL, ...) reads HORA_CONFIG / HORA_PROC (set
    by `hora run` / `hora launch FILE -- CMD`, or an srun step, or a
    Kubernetes Indexed Job); without them a job of one. Calling it again is
    a no-op. The job is elastic (hora.torch.elastic: a lost worker raises
    HoraError HORA_ERR_VIEW, and the job goes on after a re-form) when the
    cluster file's train section turns train.elastic on, e.g.
    `train: {elastic: {min_workers: 2}}` (its min_workers, max_workers and
    wait_s act as for the built-in trainer; `hora run` and `hora launch`
    read the same keys for their elastic rules)."""
    with _lock:
        if state.comm is not None:
            return
        c = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        rc = lib.hora_init(None, ctypes.byref(c), err, len(err))
        if rc:
            msg = err.value.decode("utf-8", "replace") or lib.hora_strerror(rc).decode()
            raise HoraError(rc, "hora.init: " + msg)
        state.comm = c
        state.elastic = bool(lib.hora_elastic_on(c))
        state.joiner = bool(lib.hora_elastic_joined(c))
        _counts(c)


_reset_hooks = []  # callables run after a re-form (DistributedOptimizer drops its requests)


def reform(code=0):
    """Finish (drop) every pending request, re-form the elastic communicator
    over the next view (hora_elastic_reform: after the failure `code`, it
    first waits up to the failure-detection time for the view to change;
    when it does not, the failure stands and is raised), take the new rank
    and size."""
    c = comm()
    for h in list(_pending):
        try:
            synchronize(h)
        except (HoraError, ValueError):
            pass
    _pending.clear()
    err = ctypes.create_string_buffer(1024)
    rc = lib.hora_elastic_reform(c, int(code), err, len(err))
    if rc:
        raise HoraError(rc, "hora: re-forming the job: " + (err.value.decode("utf-8", "replace") or
                                                          lib.hora_strerror(rc).decode()))
    _counts(c)
    for f in list(_reset_hooks):
        f()


def is_initialized():
    return state.comm is not None


def comm():
    c = state.comm
    if c is None:
        raise ValueError("hora has not been initialized; use hora.init() (or hora.torch.init())")
    return c


def shutdown():
    """Finish every pending request, then leave the job (hora_finalize).
    A no-op when not initialized."""
    with _lock:
        c = state.comm
        if c is None:
            return
        for h in list(_pending):
            try:
                synchronize(h)
            except HoraError:
                pass
        state.comm = None
        lib.hora_finalize(c)


def _atexit():
    # A request still running (a Ctrl-C left it, or its peer never came) would
    # make hora_finalize wait for it: then the communicator is left to the
    # process's end, and the buffers to the C thread (never freed).
    if state.comm is None:
        return
    if any(p[0] is not None and p[0].value and not lib.hora_test(p[0]) for p in _pending.values()):
        keep = list(_pending.values())
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(keep))
        state.comm = None
        return
    shutdown()


atexit.register(_atexit)


def submit(fn, args, keep, finish=None, what=None):
    """Queue hora_<fn>_async(comm, *args, &req); returns a handle."""
    c = comm()
    if not state.interruptible and getattr(_tls, "blocking", False):
        check(getattr(lib, fn[:-len("_async")])(c, *args), c, what)  # inline, finished
        h = next(_ids)
        _pending[h] = [None, keep, finish, 0]
        return h
    # entered before the call: an interrupt right after it returns must not
    # let the buffers go while the C thread uses them
    req = ctypes.c_void_p()
    h = next(_ids)
    rec = [req, keep, finish, -errno.ECANCELED]
    _pending[h] = rec
    rc = getattr(lib, fn)(c, *args, ctypes.byref(req))
    if rc < 0:
        del _pending[h]
        check(rc, c, what)
    return h


def poll(handle):
    """True once the request finished (synchronize then returns at once)."""
    p = _pending.get(handle)
    if p is None:
        raise ValueError("hora: unknown or already synchronized handle %r" % (handle,))
    return p[0] is None or not p[0].value or bool(lib.hora_test(p[0]))


def synchronize(handle):
    """Wait for the request, then return its result (None for a barrier).
    Ctrl-C raises KeyboardInterrupt here; the request then goes on in the
    background and stays pending: synchronize(handle) again waits for it."""
    p = _pending.get(handle)
    if p is None:
        raise ValueError("hora: unknown or already synchronized handle %r" % (handle,))
    req = p[0]
    if req is not None and req.value:  # None: finished (inline, or freed below)
        ready = lib.hora_wait_ready(req, 0)
        while ready == 0:
            ready = lib.hora_wait_ready(req, WAIT_SLICE_MS)
        p[3] = lib.hora_request_status(req)
        p[0] = None  # forgotten before it is freed: never freed twice
        lib.hora_wait(req)
    # (a request whose submission an interrupt cut short keeps -ECANCELED)
    rc = p[3]
    if rc:
        del _pending[handle]
        check(rc, state.comm)
    # the result before the handle goes: an interrupt in between leaves it
    # pending, and synchronize(handle) again returns it
    finish = p[2]
    res = finish() if finish is not None else None
    _pending.pop(handle, None)
    return res


def run(fn, args, keep, finish=None, what=None):
    """The blocking form: submit, then synchronize."""
    return call(lambda: submit(fn, args, keep, finish, what))


def set_neighbor_check(on):
    on = bool(on)
    if on != state.neighbor_check:
        check(lib.hora_comm_set_neighbor_check(comm(), int(on)), state.comm)
        state.neighbor_check = on
