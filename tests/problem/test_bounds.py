"""The parameters' bounds as arrays (an absent bound infinite), written once on the
parameter and the problem."""
import numpy as np
import pandas as pd

from pyomo_odeest import EstimationProblem, Parameter
from pyomo_odeest.problem import start_values


def _problem():
    t = np.linspace(0.5, 2.0, 4)
    return EstimationProblem(
        ["x"], [Parameter("k", 0.5, lb=0), Parameter("c", 2, ub=10),
                Parameter("a", 1.0), Parameter("f", 7.0, lb=0, ub=5, fixed=True)],
        rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "c"},
        data=pd.DataFrame({"x": 2 * np.exp(-0.5 * t)}, index=t))


def test_parameter_bounds():
    assert Parameter("k", 1.0).bounds == (-np.inf, np.inf)
    lb, ub = Parameter("k", 1, lb=0, ub=3).bounds
    assert (lb, ub) == (0.0, 3.0) and type(lb) is float and type(ub) is float


def test_problem_bounds_of_all_and_of_some_parameters():
    P = _problem()
    lb, ub = P.bounds()
    np.testing.assert_array_equal(lb, [0, -np.inf, -np.inf, 0])
    np.testing.assert_array_equal(ub, [np.inf, 10, np.inf, 5])
    for select in (P.free_mask, np.flatnonzero(P.free_mask)):
        lb, ub = P.bounds(select)
        np.testing.assert_array_equal(lb, [0, -np.inf, -np.inf])
        np.testing.assert_array_equal(ub, [np.inf, 10, np.inf])


def test_start_values_clip_free_parameters_only():
    """A fixed parameter keeps its value even outside its declared bounds."""
    np.testing.assert_array_equal(start_values(_problem()), [0.5, 2.0, 1.0, 7.0])
