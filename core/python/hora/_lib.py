"""_lib.py - finds libhora.so, declares the ctypes prototypes of the part of
core/hora.h the binding uses, and defines HoraError.

Not the user API (hora/__init__.py and hora/torch/ are). ctypes.CDLL drops
the GIL for the length of every call, so a collective waiting on the network
never blocks the other Python threads.

Where the library is looked for, in order (the first that loads wins, and the
ImportError lists every place tried and why it failed):
  1. $HORA_LIBRARY (a path to libhora.so.*),
  2. the path CMake wrote into hora/_paths.py (the build tree's library for
     the copy under build/python, the installed one for `cmake --install`),
  3. a libhora.so* next to the package (hora/ or hora/lib/: a wheel-style
     bundle), and ../../lib relative to it,
  4. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache):
     libhora.so.0, libhora.so.
"""
import ctypes
import glob
import os

__all__ = ["lib", "HoraError", "check", "library_path"]


class HoraError(RuntimeError):
    """A hora call failed. .code is hora's code (negative errno or
    HORA_ERR_*), .message hora's text for it: the communicator's last error
    (rank, peer, view, cause) when there is one, else hora_strerror(code)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("HORA_LIBRARY")
    if env:
        yield "$HORA_LIBRARY", env
    try:
        from . import _paths  # written by CMake (core/python/CMakeLists.txt)
        for p in getattr(_paths, "LIBRARIES", ()):
            yield "hora/_paths.py", p
    except ImportError:
        pass
    for d in (here, os.path.join(here, "lib"), os.path.normpath(os.path.join(here, "..", "..", "lib"))):
        for p in sorted(glob.glob(os.path.join(d, "libhora.so*"))):
            yield "next to the package", p
    yield "the dynamic loader", "libhora.so.0"
    yield "the dynamic loader", "libhora.so"


def _load():
    tried = []
    for how, path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("  %s (%s): %s" % (path, how, e))
    raise ImportError(
        "hora: cannot load libhora.so; tried:\n" + "\n".join(tried) +
        "\nBuild it (cmake --build build) and use PYTHONPATH=build/python, install it "
        "(cmake --install build), or set HORA_LIBRARY=/path/to/libhora.so")


lib, library_path = _load()

_c = ctypes
_vp, _sz, _int, _dbl = _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_double
_pp = _c.POINTER(_c.c_void_p)
_ip = _c.POINTER(_c.c_int)
_dp = _c.POINTER(_c.c_double)


def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)


_proto("hora_strerror", _c.c_char_p, _int)
_proto("hora_version", _c.c_char_p)
_proto("hora_init", _int, _c.c_char_p, _pp, _c.c_char_p, _sz)
_proto("hora_finalize", None, _vp)
for _n in ("hora_rank", "hora_size", "hora_local_rank", "hora_local_size"):
    _proto(_n, _int, _vp)
_proto("hora_comm_last_error", _c.c_char_p, _vp)
_proto("hora_allreduce_async", _int, _vp, _vp, _vp, _sz, _int, _int, _pp)
_proto("hora_broadcast_async", _int, _vp, _vp, _sz, _int, _int, _pp)
_proto("hora_allgather_async", _int, _vp, _vp, _vp, _sz, _int, _pp)
_proto("hora_reduce_scatter_async", _int, _vp, _vp, _vp, _sz, _int, _int, _pp)
_proto("hora_barrier_async", _int, _vp, _pp)
_proto("hora_neighbor_allreduce_async", _int, _vp, _vp, _vp, _sz, _int, _dbl, _ip, _dp, _int,
       _ip, _dp, _int, _pp)
_proto("hora_comm_set_neighbor_check", _int, _vp, _int)
# the blocking forms (hora.set_interruptible(False)): the same arguments, no request
_proto("hora_allreduce", _int, _vp, _vp, _vp, _sz, _int, _int)
_proto("hora_broadcast", _int, _vp, _vp, _sz, _int, _int)
_proto("hora_allgather", _int, _vp, _vp, _vp, _sz, _int)
_proto("hora_reduce_scatter", _int, _vp, _vp, _vp, _sz, _int, _int)
_proto("hora_barrier", _int, _vp)
_proto("hora_neighbor_allreduce", _int, _vp, _vp, _vp, _sz, _int, _dbl, _ip, _dp, _int, _ip, _dp, _int)


# device (CUDA) buffers: the collectives take them once the GPU module is loaded
_proto("hora_cuda_init", _int, _c.c_char_p, _sz)

# hora.h's "elastic jobs" (hora.torch.elastic)
_proto("hora_elastic_on", _int, _vp)
_proto("hora_elastic_joined", _int, _vp)
_proto("hora_elastic_pending", _int, _vp)
_proto("hora_elastic_view", _c.c_uint64, _vp)
_proto("hora_elastic_reform", _int, _vp, _int, _c.c_char_p, _sz)
_proto("hora_wait", _int, _vp)
_proto("hora_test", _int, _vp)
_proto("hora_wait_timeout", _int, _vp, _int)
_proto("hora_wait_ready", _int, _vp, _int)
_proto("hora_request_status", _int, _vp)


def strerror(code):
    return lib.hora_strerror(code).decode("utf-8", "replace")


def check(rc, comm=None, what=None):
    """Raise HoraError for a negative rc, with the communicator's last error."""
    if rc >= 0:
        return rc
    msg = ""
    if comm:
        m = lib.hora_comm_last_error(comm)
        msg = m.decode("utf-8", "replace") if m else ""
    if not msg:
        msg = strerror(rc)
    if what:
        msg = "%s: %s" % (what, msg)
    raise HoraError(rc, msg)
