#!/usr/bin/env bash
# blas-core.sh - prints the OpenBLAS kernel set this environment runs
# ("Prescott", "Haswell", ...), as hora's trainer and Debian's torch (both
# on libopenblas through libblas.so.3) pick it: OPENBLAS_CORETYPE when set,
# else OpenBLAS's own CPU detection, which falls back to the generic
# Prescott kernels on a CPU it does not know. Benches print it in their
# header: training figures taken on other kernels are not comparable.
# Prints "unknown (...)" when no OpenBLAS is found; never fails.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
"$PY" - <<'PYEOF' 2>/dev/null || echo "unknown (no python3 to ask OpenBLAS)"
import ctypes, os
for name in ("libopenblas.so.0", "libblas.so.3"):
    try:
        f = ctypes.CDLL(name).openblas_get_corename
    except (OSError, AttributeError):
        continue
    f.restype = ctypes.c_char_p
    env = os.environ.get("OPENBLAS_CORETYPE")
    print("%s (OPENBLAS_CORETYPE%s)" % (f().decode(), "=" + env if env else " unset"))
    break
else:
    print("unknown (no OpenBLAS among libopenblas.so.0, libblas.so.3)")
PYEOF
