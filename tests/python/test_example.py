"""core/examples/pytorch_mnist.py and `hora run` with Python copies: the
example trains 2 epochs on 2 processes started by `hora run` (the build's
hora: $HORA_BUILD_DIR, set by CTest), rank 0's lines come back prefixed
"[0 127.0.0.1]", val_acc >= 0.85; a copy that exits 3 makes `hora run`
exit non-zero naming it, and the other copy is ended."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DATA = os.path.join(ROOT, "data", "mnist")


def hora_bin():
    b = os.environ.get("HORA_BUILD_DIR")
    if not b or not os.access(os.path.join(b, "hora"), os.X_OK):
        pytest.fail("HORA_BUILD_DIR (set by CTest) must name the build with the hora executable")
    return os.path.join(b, "hora")


def run(args, timeout=240):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("HORA_SECRET", None)  # hora run makes one for the job
    return subprocess.run([hora_bin(), "run"] + args, capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def test_the_example_trains_under_hora_run():
    assert os.path.isdir(DATA), "no %s (deploy/get-data.sh)" % DATA
    p = run(["-np", "2", sys.executable, "core/examples/pytorch_mnist.py", "--epochs", "2",
             "--data", DATA])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    lines = re.findall(r"^\[0 127\.0\.0\.1\] epoch (\d)/2 .* val_acc ([0-9.]+) ", p.stdout, re.M)
    assert [e for e, _ in lines] == ["1", "2"], out
    assert float(lines[-1][1]) >= 0.85, out
    assert not re.search(r"^\[1 127\.0\.0\.1\] epoch", p.stdout, re.M), "only rank 0 prints epochs"
    assert "2 of 2 workers succeeded" in out, out


def test_a_failing_copy_fails_hora_run_naming_it():
    code = ("import os, sys, time, hora\n"
            "hora.init()\n"
            "if os.environ['HORA_PROC'] == '1': sys.exit(3)\n"
            "time.sleep(60)\n")
    p = run(["-np", "2", "--set", "membership.suspect_timeout_ms=500", sys.executable, "-c", code],
            timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "worker 1 on 127.0.0.1 exited with status 3" in out, out
    assert "worker 0 on 127.0.0.1" in out, out  # the other one ended, named
