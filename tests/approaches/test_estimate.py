"""The front door ``estimate(problem, approach=...)``: one call, one result type, clear
errors for options an approach does not take."""

import numpy as np
import pytest

import pyomo_odeest as po
from pyomo_odeest.approaches._estimate import approach_options
from pyomo_odeest.models import lotka_volterra_problem

START = (0.8, 0.8, 0.8, 0.8)
# the tests below compare the optima of one discretization (5 steps per interval), which
# the grid certificate would refine: certify=False solves on that grid only


@pytest.fixture(scope="module")
def reference():
    return po.estimate_simultaneous(lotka_volterra_problem(p0=START), "adams_pc", 3,
                                    steps_per_interval=5, options={"tol": 1e-10}, certify=False)


@pytest.mark.parametrize("approach, extra", [
    ("simultaneous", {}),
    ("reduced_space", {"gradient": "adjoint"}),
    # multiple shooting restarts the multistep scheme at every node (a different discrete
    # problem); with one shooting interval it solves the same equations
    ("multiple_shooting", {"jacobian": "adjoint", "nodes": (0.0, 10.0)}),
])
def test_every_discrete_approach_reaches_the_same_optimum(reference, approach, extra):
    res = po.estimate(lotka_volterra_problem(p0=START), approach, scheme="adams_pc", qmax=3,
                      steps_per_interval=5, options={"tol": 1e-10}, certify=False, **extra)
    assert isinstance(res, po.EstimationResult)
    assert res.approach == approach and res.success
    assert np.max(np.abs(res.x - reference.x)) < 1e-6


def test_front_door_is_the_implementation(reference):
    """Same call through the front door and through the per-approach function: identical."""
    a = po.estimate(lotka_volterra_problem(p0=START), "reduced_space", scheme="adams_pc", qmax=3,
                    steps_per_interval=5, options={"tol": 1e-10}, certify=False)
    b = po.estimate_reduced(lotka_volterra_problem(p0=START), scheme="adams_pc", qmax=3,
                            steps_per_interval=5, options={"tol": 1e-10}, certify=False)
    assert np.array_equal(a.x, b.x) and a.iterations == b.iterations


def test_common_options_mean_the_same_everywhere():
    common = {"u0", "options", "tee", "scale"}
    discretized = {"scheme", "qmax", "grid", "max_step", "steps_per_interval"}
    for approach in po.APPROACH_NAMES:
        opts = set(approach_options(approach))
        assert {"u0", "options", "tee"} <= opts, approach
        if approach in ("simultaneous", "reduced_space", "multiple_shooting"):
            assert common | discretized <= opts, approach


def test_an_option_the_approach_does_not_take_is_an_error():
    prob = lotka_volterra_problem(p0=START)
    with pytest.raises(TypeError, match=r"'continuous' does not take option\(s\) \['scheme'\]"):
        po.estimate(prob, "continuous", scheme="adams_pc")
    with pytest.raises(TypeError, match="nodes"):
        po.estimate(prob, "simultaneous", nodes=3)


def test_unknown_approach_and_bad_problem():
    with pytest.raises(ValueError, match="unknown approach 'magic'.*simultaneous"):
        po.estimate(lotka_volterra_problem(), "magic")
    with pytest.raises(TypeError, match="approach must be a string"):
        po.estimate(lotka_volterra_problem(), po.estimate_reduced)
    with pytest.raises(po.ProblemError, match="EstimationProblem"):
        po.estimate({"states": ["x"]}, "reduced_space")
