"""hora.torch on jobs of 1 to 4 processes (tests/python/workers/)."""
import pytest

from conftest import check_all_ok


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_torch_collectives_optimizer_and_broadcasts(job, n):
    check_all_ok(job(n, "torch_collectives.py").wait(240))
