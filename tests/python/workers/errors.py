"""Failures as a user meets them, one case per run (argv[1]):
  mismatch  rank 0 allreduces 10 elements, rank 1 11: both raise HoraError
            naming the mismatch, and the next call raises at once too
  lost      rank n-1 waits to be killed (the test kills it -9); the others
            sit in an allreduce it never joins: HoraError naming rank n-1
  sigint    rank 0 waits in an allreduce rank 1 never joins; the test sends
            it SIGINT: KeyboardInterrupt
  interrupt_after  a KeyboardInterrupt raised right after each C call of
            submit and synchronize returns, in turn (as Python raises a
            pending Ctrl-C there, before the call's result is stored): the
            documented recovery, synchronize(h) again, returns the right
            average every time, and the process ends cleanly (a request
            freed twice aborts it: glibc's double-free check)
Each rank prints 'RESULT <what>' lines the test reads."""
import os
import sys
import time

import numpy as np

import hora

case = sys.argv[1]
if os.environ.get("HORA_TEST_INLINE") == "1":
    hora.set_interruptible(False)    # the blocking calls on the calling thread
hora.init()
r, n = hora.rank(), hora.size()
hora.barrier()
print("READY", flush=True)

if case == "mismatch":
    try:
        hora.allreduce(np.ones(10 + r, dtype=np.float32))
        print("RESULT no error", flush=True)
    except hora.HoraError as e:
        print("RESULT HoraError code=%d msg=%s" % (e.code, e.message), flush=True)
    t0 = time.monotonic()
    try:
        hora.barrier()
        print("RESULT later call: no error", flush=True)
    except hora.HoraError as e:
        print("RESULT later HoraError code=%d in %.3f s" % (e.code, time.monotonic() - t0), flush=True)
    # the communicator is broken: no graceful leave to wait for; os._exit skips
    # Python's flush of stdout (a pipe: block-buffered), hence flush=True above
    os._exit(0)

if case == "lost":
    if r == n - 1:
        time.sleep(120)
    t0 = time.monotonic()
    try:
        hora.allreduce(np.ones(4, dtype=np.float32))
        print("RESULT no error", flush=True)
    except hora.HoraError as e:
        print("RESULT HoraError code=%d after %.1f s msg=%s" % (e.code, time.monotonic() - t0,
                                                                 e.message), flush=True)
    os._exit(0)

if case == "interrupt_after":
    from hora import _comm

    class Once:
        """lib, but the k-th call of a function in `names` raises
        KeyboardInterrupt after it returned"""
        def __init__(self, real, names, k):
            self.real, self.names, self.k, self.fired = real, names, k, None

        def __getattr__(self, name):
            f = getattr(self.real, name)
            if name not in self.names:
                return f

            def call(*a):
                if name == "hora_wait_ready":
                    # ready at the first call on every rank, so the k-th
                    # call is the same C call everywhere (a request still
                    # running would add wait_ready calls, and the cut would
                    # fall elsewhere on each rank from run to run)
                    a = (a[0], 60000)
                rc = f(*a)
                self.k -= 1
                if self.k == 0:
                    self.fired = name
                    raise KeyboardInterrupt
                return rc
            return call

    real = _comm.lib
    names = {"hora_allreduce_async", "hora_wait_ready", "hora_request_status", "hora_wait",
             "hora_wait_timeout"}
    fired = []
    for k in range(1, 8):
        x = np.full(1000, float(r + 1), dtype=np.float32)
        once = _comm.lib = Once(real, names, k)
        h = None
        try:
            h = hora.allreduce_async_(x, name="k%d" % k)
            hora.synchronize(h)
        except KeyboardInterrupt:
            _comm.lib = real
            if h is None:  # cut short in submit: the request runs on, its handle is lost
                for hh in list(_comm._pending):
                    hora.synchronize(hh)
            elif h in _comm._pending:
                hora.synchronize(h)
        fired.append(once.fired or "-")
        _comm.lib = real
        want = (n + 1) / 2.0
        if not np.all(x == want):
            print("RESULT wrong k=%d: %r, want %r" % (k, x[:3], want), flush=True)
            os._exit(0)
        hora.barrier()
    print("RESULT ok", " ".join(str(f) for f in fired), flush=True)
    hora.shutdown()
    sys.exit(0)

if case == "sigint":
    if r == 1:
        time.sleep(120)
    print("WAITING", flush=True)
    t0 = time.monotonic()
    try:
        hora.allreduce(np.ones(4, dtype=np.float32))
        print("RESULT no error", flush=True)
    except KeyboardInterrupt:
        print("RESULT KeyboardInterrupt after %.1f s" % (time.monotonic() - t0), flush=True)
    os._exit(0)
