"""The package outside the build tree: `cmake --install` into a temporary
prefix imports from there and finds the installed libhora (its _paths.py),
with neither PYTHONPATH=build/python nor HORA_LIBRARY; a library that cannot
be found is an ImportError naming every place tried."""
import glob
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("HORA_BUILD_DIR")


def clean_env(**kw):
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HORA_LIBRARY", "HORA_CONFIG")}
    e.update(kw)
    return e


@pytest.mark.skipif(not BUILD, reason="HORA_BUILD_DIR not set (CTest sets it)")
def test_cmake_install_puts_an_importable_package_under_the_prefix(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(prefix)], check=True,
                   stdout=subprocess.DEVNULL)
    found = glob.glob(str(prefix / "**" / "hora" / "_paths.py"), recursive=True)
    assert len(found) == 1, found
    site = os.path.dirname(os.path.dirname(found[0]))
    code = ("import hora, numpy as np; hora.init(); "
            "print(hora.library_path); print(hora.allreduce(np.arange(3.0), op=hora.Sum).tolist())")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(PYTHONPATH=site),
                         cwd=str(tmp_path), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lib, res = out.stdout.splitlines()
    assert lib.startswith(str(prefix)), lib
    assert res == "[0.0, 1.0, 2.0]"


def test_a_missing_library_is_an_importerror_naming_what_was_tried(tmp_path):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "core", "python")
    out = subprocess.run([sys.executable, "-c", "import hora"],
                         env=clean_env(PYTHONPATH=os.path.abspath(src),
                                       HORA_LIBRARY=str(tmp_path / "nope.so"),
                                       LD_LIBRARY_PATH=str(tmp_path)),
                         cwd=str(tmp_path), capture_output=True, text=True)
    assert out.returncode != 0
    assert "ImportError: hora: cannot load libhora.so" in out.stderr, out.stderr
    assert "nope.so ($HORA_LIBRARY)" in out.stderr and "HORA_LIBRARY=" in out.stderr, out.stderr
