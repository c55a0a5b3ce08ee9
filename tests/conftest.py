"""Fixtures shared by the tests; plain helper functions are in ``helpers.py``."""
import pytest

from helpers import nonautonomous_problem


@pytest.fixture(scope="module")
def prob():
    """The non-autonomous two-state problem with x0 = l(u) and a nonlinear observation."""
    return nonautonomous_problem()
