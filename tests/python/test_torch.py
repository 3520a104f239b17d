"""hora.torch on jobs of 1 to 4 processes (tests/python/workers/)."""
import pytest

from conftest import check_all_ok


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_torch_collectives_optimizer_and_broadcasts(job, n):
    check_all_ok(job(n, "torch_collectives.py").wait(240))


def test_the_same_with_blocking_calls_on_the_calling_thread(job):
    check_all_ok(job(2, "torch_collectives.py", env={"HORA_TEST_INLINE": "1"}).wait(240))
