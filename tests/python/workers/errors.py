"""Failures as a user meets them, one case per run (argv[1]):
  mismatch  rank 0 allreduces 10 elements, rank 1 11: both raise HoraError
            naming the mismatch, and the next call raises at once too
  lost      rank n-1 waits to be killed (the test kills it -9); the others
            sit in an allreduce it never joins: HoraError naming rank n-1
  sigint    rank 0 waits in an allreduce rank 1 never joins; the test sends
            it SIGINT: KeyboardInterrupt
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
        print("RESULT no error")
    except hora.HoraError as e:
        print("RESULT HoraError code=%d msg=%s" % (e.code, e.message))
    t0 = time.monotonic()
    try:
        hora.barrier()
        print("RESULT later call: no error")
    except hora.HoraError as e:
        print("RESULT later HoraError code=%d in %.3f s" % (e.code, time.monotonic() - t0))
    os._exit(0)  # the communicator is broken: no graceful leave to wait for

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
