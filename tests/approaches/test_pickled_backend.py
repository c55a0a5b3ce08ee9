"""A pickled result's analyses are the original's, for every approach.

The backend behind the analyses pickles as the data that build it again: the
problem, each experiment's scheme and grid (restarts included), the shooting
nodes and node values, the integrator's settings, the KKT system at the
simultaneous solution.  A result rebuilt from its scheme and grid alone used to
differ: multiple shooting's sensitivities from the null space of its continuity
constraints [AT, eq. (6)] became those of single shooting without the order ramp's
restarts at the nodes, and the adaptive approach's default-grid model changed its
order to the result's.  Covariances (Fisher information and exact Hessian) must
agree to 1e-8 relative.  A result's JSON form keeps the same data: read back with
the problem built again, its covariances are the original's too.
"""
import json
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest import APPROACH_NAMES, EstimationProblem, EstimationResult, Experiment, Parameter
from pyomo_odeest.approaches import DiscreteBackend

RTOL = 1e-8
T = np.linspace(0.5, 3.0, 6)
NOISE = np.array([0.031, -0.024, 0.012, 0.027, -0.035, 0.008])


def _decay(c=2.0, k=0.7):
    """x' = -k x^1.5, x(0) = c: nonlinear in the state, noisy data."""
    x = (c ** -0.5 + 0.5 * k * T) ** -2
    return pd.DataFrame({"x": x + NOISE}, index=T)


def decay():
    return EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.0),
                                     Parameter("c", 1.8, lb=0.1, ub=10)],
                             rhs=lambda x, u, t: [-u.k * x.x ** 1.5], initial={"x": "c"},
                             data=_decay(), sigma=0.05)


def two_experiments():
    return EstimationProblem(
        ["x"], [Parameter("k", 0.5, lb=0.0), Parameter("c", 1.8, lb=0.1, ub=10, local=True)],
        rhs=lambda x, u, t: [-u.k * x.x ** 1.5], initial={"x": "c"}, data=None, sigma=0.05,
        experiments=[Experiment("e1", _decay(c=2.0)), Experiment("e2", _decay(c=1.0))])


#: per approach: multiple shooting on its default nodes (every measurement time: the
#: backend's sensitivities from the null space of the continuity constraints), the
#: adaptive approach at a qmax that is neither its default nor its backend's
OPTS = {"simultaneous": dict(qmax=4, steps_per_interval=5),
        "reduced_space": dict(qmax=3, steps_per_interval=5),
        "multiple_shooting": dict(qmax=4, steps_per_interval=5),
        "continuous": dict(rtol=1e-10, atol=1e-12),
        "adaptive": dict(qmax=3)}

#: further cases: shooting nodes between measurement times (single shooting on the
#: grid restarting at the nodes), several experiments, CVODES's Adams method
MORE = {
    "shooting_interior_nodes": (decay, "multiple_shooting",
                                dict(qmax=3, steps_per_interval=5, nodes=(0.0, 1.25, 2.0, 3.0))),
    "shooting_two_experiments": (two_experiments, "multiple_shooting",
                                 dict(qmax=4, steps_per_interval=5,
                                      nodes={"e1": (0.0, 1.0, 3.0), "e2": None})),
    "simultaneous_two_experiments": (two_experiments, "simultaneous",
                                     dict(qmax=3, steps_per_interval=5)),
    "continuous_two_experiments_adams": (two_experiments, "continuous",
                                         dict(method="Adams", rtol=1e-9, atol=1e-12)),
}


def _covariances(result):
    return [result.covariance(m).matrix.to_numpy() for m in ("fim", "hessian")]


def _check(result, make):
    assert result.success, (result.status, result.message)
    before = _covariances(result)
    _check_json(result, make, before)
    back = pickle.loads(pickle.dumps(result))
    assert "_backend" not in back.__dict__             # built on first use
    for C, D, m in zip(before, _covariances(back), ("fim", "hessian")):
        np.testing.assert_allclose(D, C, rtol=RTOL, atol=0, err_msg=m)
    assert back.backend.discretization.keys() == result.backend.discretization.keys()
    # the backend alone pickles as well, with the same sensitivities
    be = pickle.loads(pickle.dumps(result.backend))
    u, free = result.x, np.flatnonzero(result.problem.free_mask)
    for (_, S, r, _), (_, S2, r2, _) in zip(result.backend.observation_sensitivities(u, free),
                                            be.observation_sensitivities(u, free)):
        np.testing.assert_allclose(S2, S, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(r2, r, rtol=RTOL, atol=1e-14)
    return back


def _check_json(result, make, before):
    """Read back from JSON on the problem built again: the original's backend and
    covariances, without a warning; pickled after reading and written again, the same."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = EstimationResult.from_json(result.to_json(), problem=make())
        assert type(back.backend) is type(result.backend)
        for C, D, m in zip(before, _covariances(back), ("fim", "hessian")):
            np.testing.assert_allclose(D, C, rtol=RTOL, atol=0, err_msg=m)
    for again in (pickle.loads(pickle.dumps(EstimationResult.from_json(result.to_json(),
                                                                       problem=make()))),
                  EstimationResult.from_json(back.to_json(), problem=make())):
        np.testing.assert_allclose(again.covariance().matrix.to_numpy(), before[0],
                                   rtol=RTOL, atol=0)
    assert back.warnings == result.warnings


@pytest.mark.parametrize("approach", APPROACH_NAMES)
def test_pickled_result_has_the_original_covariance(approach):
    r = po.estimate(decay(), approach, **OPTS.get(approach, {}))
    back = _check(r, decay)
    again = pickle.loads(pickle.dumps(back))           # from the recipe, pickled again
    np.testing.assert_allclose(again.covariance().matrix.to_numpy(),
                               r.covariance().matrix.to_numpy(), rtol=RTOL, atol=0)


#: cases that need an optional package (CVODES comes with casadi)
NEEDS_CASADI = {"continuous_two_experiments_adams"}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.extras) if c in NEEDS_CASADI else c for c in sorted(MORE)])
def test_pickled_result_has_the_original_covariance_in_more_cases(case):
    if case in NEEDS_CASADI:
        pytest.importorskip("casadi")
    make, approach, opts = MORE[case]
    _check(po.estimate(make(), approach, **opts), make)


def test_json_without_the_backend_data_says_its_analyses_are_approximate():
    """A file written before the backend's data were kept rebuilds a discrete model of
    the scheme on the default grid (not the KKT system of the original): a warning
    says so, once, and the result keeps it."""
    r = po.estimate(decay(), "simultaneous", qmax=4, steps_per_interval=5)
    d = json.loads(r.to_json())
    assert d["backend"] is not None
    del d["backend"]
    old = EstimationResult.from_dict(d, problem=decay())
    with pytest.warns(UserWarning, match="approximate the original's"):
        old.covariance()
    assert type(old.backend) is DiscreteBackend
    assert sum("approximate the original's" in w for w in old.warnings) == 1
    assert "approximate" not in " ".join(r.warnings)


def test_json_backend_data_that_do_not_fit_are_refused():
    r = po.estimate(decay(), "reduced_space", qmax=3, steps_per_interval=5)
    d = json.loads(r.to_json())
    with pytest.raises(ValueError, match="'backend' must be"):
        EstimationResult.from_dict({**d, "backend": [1, 2]})
    # the problem of another number of experiments: the data name an experiment it lacks
    other = EstimationResult.from_json(po.estimate(two_experiments(), "reduced_space", qmax=3,
                                                   steps_per_interval=5).to_json(),
                                       problem=decay())
    with pytest.raises(ValueError, match="do not build a backend of its problem"):
        other.covariance()


def test_lean_copy_builds_the_original_backend():
    """The copy the runner sends back (``lean``: no Pyomo model) has the original's
    KKT system, not a discrete model's sensitivities at a simulation."""
    r = po.estimate(decay(), "simultaneous", qmax=4, steps_per_interval=5)
    lean = r.lean()
    assert lean.model is None and "_backend" not in lean.__dict__
    assert type(lean.backend) is type(r.backend) and lean.backend.model is None
    np.testing.assert_array_equal(lean.covariance("hessian").matrix.to_numpy(),
                                  r.covariance("hessian").matrix.to_numpy())


def test_scheme_pickles_without_its_formula_caches():
    r = po.estimate(decay(), "reduced_space", qmax=4, steps_per_interval=50)
    assert len(r.scheme._cache) > 0
    back = pickle.loads(pickle.dumps(r.scheme))
    assert back == r.scheme and len(back._cache) == 0
    assert len(pickle.dumps(r.scheme)) < 1000
