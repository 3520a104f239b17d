"""hora's NumPy API on jobs of 1 to 4 processes (tests/python/workers/)."""
import pytest

from conftest import check_all_ok


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_collective_dtype_and_op_against_numpy(job, n):
    check_all_ok(job(n, "np_collectives.py").wait(180))
