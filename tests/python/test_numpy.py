"""hora's NumPy API on jobs of 1 to 4 processes (tests/python/workers/)."""
import pytest

from conftest import check_all_ok


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_collective_dtype_and_op_against_numpy(job, n):
    check_all_ok(job(n, "np_collectives.py").wait(180))


@pytest.mark.parametrize("n", [1, 3])
def test_the_same_with_blocking_calls_on_the_calling_thread(job, n):
    """hora.set_interruptible(False): blocking calls run inline (no hand-off)"""
    check_all_ok(job(n, "np_collectives.py", env={"HORA_TEST_INLINE": "1"}).wait(180))
