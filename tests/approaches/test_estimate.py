"""The front door ``estimate(problem, approach=...)``: one call, one result type, clear
errors for options an approach does not take."""

import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest.approaches import Approach, approach_class, approach_config
from pyomo_odeest import approach_options
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
    with pytest.raises(TypeError, match="approach must be an approach name"):
        po.estimate(lotka_volterra_problem(), po.estimate_reduced)
    with pytest.raises(po.ProblemError, match="EstimationProblem"):
        po.estimate({"states": ["x"]}, "reduced_space")


# ---------------------------------------------------------------------------
# an approach of the user's: a class or an instance
# ---------------------------------------------------------------------------
def _decay():
    t = np.linspace(0.5, 3.0, 6)
    return po.EstimationProblem(["x"], [po.Parameter("k", 0.5, lb=0.0)],
                                rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0},
                                data=pd.DataFrame({"x": 2 * np.exp(-0.7 * t)}, index=t),
                                sigma=0.05)


SMALL = dict(steps_per_interval=5, certify=False)


def test_an_approach_class_or_instance_runs_as_its_name():
    reduced = approach_class("reduced_space")
    by_name = po.estimate(_decay(), "reduced_space", **SMALL)
    for approach in (reduced, reduced()):
        r = po.estimate(_decay(), approach, **SMALL)
        assert r.approach == "reduced_space" and r.iterations == by_name.iterations
        np.testing.assert_array_equal(r.x, by_name.x)


def test_an_instance_presets_options_that_each_call_may_override():
    lbfgs = approach_class("reduced_space")(optimizer="L-BFGS-B", **SMALL)
    assert repr(lbfgs) == ("ReducedApproach(optimizer='L-BFGS-B', steps_per_interval=5, "
                           "certify=False)")
    a = po.estimate(_decay(), lbfgs)
    b = po.estimate(_decay(), lbfgs, optimizer="ipopt")
    c = po.estimate(_decay(), lbfgs)                  # the presets again, not b's options
    assert a.method.startswith("scipy-L-BFGS-B") and c.method == a.method
    assert b.method.startswith("ipopt/")
    assert a.success and b.success and a.estimates["k"] == pytest.approx(0.7, rel=1e-4)
    # a positional discretization option of the call replaces the preset one
    r = approach_class("reduced_space")(scheme="enright").estimate(_decay(), "adams_pc", **SMALL)
    assert r.scheme.name == "adams_pc"
    # presets are validated when the instance is made
    with pytest.raises(po.ProblemError, match="unknown optimizer 'magic'"):
        approach_class("reduced_space")(optimizer="magic")
    with pytest.raises(TypeError, match=r"'reduced_space' does not take option\(s\) \['nodes'\]"):
        approach_class("reduced_space")(nodes=3)


def test_a_subclass_is_named_by_its_parent_or_its_class():
    class Lbfgs(approach_class("reduced_space")):
        DEFAULTS = {"optimizer": "L-BFGS-B"}

    class Mine(Approach):
        pass

    assert Lbfgs.name == "reduced_space" and Mine.name == "Mine"
    assert approach_options(Lbfgs) == approach_options("reduced_space")
    assert approach_config(Lbfgs()).optimizer == "L-BFGS-B"
    assert approach_class(Lbfgs()) is Lbfgs
    assert po.estimate(_decay(), Lbfgs, **SMALL).method.startswith("scipy-L-BFGS-B")


@pytest.mark.parametrize("bad", [po.estimate_reduced, dict, object(), 3],
                         ids=["function", "class", "object", "number"])
def test_what_is_not_an_approach_is_a_type_error_naming_what_is(bad):
    accepted = (r"approach must be an approach name \(one of simultaneous, reduced_space, "
                r"multiple_shooting, continuous, adaptive\), an Approach subclass or an "
                r"instance of one; got ")
    with pytest.raises(TypeError, match=accepted):
        po.estimate(_decay(), bad)
    with pytest.raises(TypeError, match=accepted):
        approach_options(bad)
