"""The adaptive approach, model (55) [GM-grad, eq. (55)], on problems of real size:
several experiments (one block per experiment, parameters shared), a start where the
solution blows up before the last measurement (the Lotka–Volterra problem's default
start), bounded steps, and the tolerance derived from a target error of the fitted
values in units of σ (``fit_tol``).

Tolerances: with ``fit_tol=0.01`` the fitted values of the adaptive model are within
about 0.01σ of the ODE's, so its estimates are within a small fraction of their
standard errors of the ODE's estimates; the references solve the ODE on a fine grid
(Adams PC(4), 20–40 steps per interval, whose error is far below that).  The tests
require agreement to 0.1 standard error, the criterion under which a discretization
is said not to move the estimates.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import pyomo_odeest as po
from pyomo_odeest import Status
from pyomo_odeest.models import lotka_volterra_problem

sys.path.insert(0, str(Path(__file__).parent))
from test_base import two_experiments  # noqa: E402


def _se(result):
    return result.covariance().se.to_numpy()


def test_two_experiments_agree_with_the_reduced_space_on_a_fine_grid():
    P = two_experiments()
    ref = po.estimate(P, "reduced_space", qmax=4, steps_per_interval=20)
    r = po.estimate(P, "adaptive", fit_tol=0.01)
    assert r.success, (r.status, r.message)
    assert r.extra["pattern_stable"] and r.extra["fit_error"] <= 0.01
    se = _se(ref)
    assert np.all(np.abs(r.x - ref.x) <= 0.1 * se), (r.x, ref.x, se)
    # one block per experiment, the shared parameter in one variable
    blocks = r.model.est.experiment_blocks
    assert [b.name.split(".")[-1] for b in blocks] == ["e1", "e2"]
    assert all(b.u["k"] is r.model.est.u["k"] for b in blocks)
    # frames stacked by experiment like the other approaches
    assert list(r.states.index.names) == ["experiment", "time"]
    assert list(r.fitted.index.levels[0]) == ["e1", "e2"]
    assert set(r.extra["experiments"]) == {"e1", "e2"}
    assert r.extra["experiments"]["e2"]["grid"]["k"] > 0
    assert r.objective == pytest.approx(sum(
        am.objective(r.x) for am in (r.extra["experiments"][e]["adaptive_model"]
                                     for e in ("e1", "e2"))), rel=1e-6)


def test_lotka_volterra_default_start_reaches_the_simultaneous_optimum():
    """From p0 = (0.5, 0.5, 0.5, -0.2) the solution blows up at t ≈ 3.31 (x2' grows
    like x2²): the adaptive integration at the start underflows.  The fixed-grid seed
    starts the rounds; the result is the ODE's optimum within 0.1 SE."""
    P = lotka_volterra_problem()
    ref = po.estimate(P, "simultaneous", qmax=4, steps_per_interval=40)
    r = po.estimate(P, "adaptive", fit_tol=0.01)
    assert r.success, (r.status, r.message)
    seed = r.extra["seed"]
    assert "step size underflow" in seed["start_error"] and seed["init"] == ["data"]
    assert r.extra["pattern_stable"] and r.extra["fit_error"] <= 0.01
    se = _se(ref)
    assert np.all(np.abs(r.x - ref.x) <= 0.1 * se), (r.x, ref.x, se)
    # the same certificate as the grid approaches, by the independent simulation
    cert = r.extra["certificate"]
    assert cert["certified"] and cert["fit_error"] <= 0.01 and cert["grid_points"] > 100


def test_adaptive_default_tolerance_is_certified_or_says_not():
    """The adaptive model's default fit_tol is the certificate's (0.01): its tolerance
    is tightened until the grid certificate holds.  Its eps as given (fit_tol=None,
    eps = 1e-3) leaves the fitted values of the Lotka–Volterra problem 0.15 residual
    scale from the ODE's: the certificate says so, the status is not a success, and
    the reason names fit_tol."""
    lv = lotka_volterra_problem(p0=(0.8,) * 4)
    r = po.estimate(lv, "adaptive")
    assert r.success and r.extra["certificate"]["certified"], r.summary()
    assert r.extra["fit_tol"] == 0.01 and len(r.extra["tolerance_rounds"]) >= 2
    r = po.estimate(lv, "adaptive", fit_tol=None)
    cert = r.extra["certificate"]
    assert cert["fit_error"] > 0.01 and not cert["certified"]
    assert r.status is Status.NOT_RESOLVED and not r.success
    assert "fit_tol" in cert["reason"]
    assert any(w.startswith("discretization error") for w in r.warnings), r.warnings
    off = po.estimate(lv, "adaptive", fit_tol=None, certify=False)
    assert off.success and "certificate" not in off.extra


def test_lotka_volterra_default_start_without_seed_is_a_status_not_an_error():
    r = po.estimate(lotka_volterra_problem(), "adaptive", seed="never")
    assert r.status is Status.SIMULATION_FAILED and not r.success
    assert "cannot be simulated at the start" in r.message
    assert "step size underflow" in r.message and "t=3.31" in r.message
    r = po.estimate(lotka_volterra_problem(p0=(0.9,) * 4), "adaptive", seed="never",
                    max_steps=20)
    assert r.status is Status.SIMULATION_FAILED
    assert "more than max_steps=20 steps" in r.message


def test_step_bound_h_min_is_the_controller_s():
    from pyomo_odeest.discretization.adaptive import AdaptiveError, AdaptiveModel, StepController
    P = lotka_volterra_problem()
    am = AdaptiveModel(P, StepController(h_min=1e-6), 2)
    with pytest.raises(AdaptiveError, match=r"h_min=1e-06\) in step \d+ at t=3\.3"):
        am.run(P.u0)
    with pytest.raises(ValueError, match="h_min must be positive"):
        StepController(h_min=0.0)


def test_a_given_model_keeps_its_eps_unless_fit_tol_is_given():
    """``model=`` an AdaptiveModel: solved at its controller's eps (as the other
    approaches solve a given model as it is), and certified; fit_tol given tightens it."""
    from pyomo_odeest.discretization.adaptive import AdaptiveModel, StepController
    lv = lotka_volterra_problem(p0=(0.8,) * 4)
    am = AdaptiveModel(lv, StepController(eps=1e-3), qmax=2)
    r = po.estimate(lv, "adaptive", model=am)
    assert r.extra["eps"] == 1e-3 and "tolerance_rounds" not in r.extra
    assert r.status is Status.NOT_RESOLVED and not r.extra["certificate"]["certified"]
    r = po.estimate(lv, "adaptive", model=am, fit_tol=0.01)
    assert r.extra["eps"] < 1e-3 and r.extra["certificate"]["certified"], r.summary()


def test_seird_is_certified_by_the_defaults():
    """SEIRD (states 0.04-1): the default controller's relative norm lets the tolerance
    loop of ``fit_tol`` reach its target (two tolerances); the estimates within 0.1 SE
    of the ODE's optimum (the continuous least squares at rtol 1e-10)."""
    from pyomo_odeest.models import seird_data, seird_problem
    prob = seird_problem(seird_data())
    r = po.estimate(prob, "adaptive", max_wall_time=120)
    assert r.success, (r.status, r.message)
    cert = r.extra["certificate"]
    assert cert["certified"] and cert["fit_error"] <= 0.01, cert
    assert r.extra["fit_error"] <= 0.01 and len(r.extra["tolerance_rounds"]) >= 2
    ref = po.estimate(prob, "continuous", optimizer="least_squares", rtol=1e-10, atol=1e-12)
    assert np.all(np.abs(r.x - ref.x) <= 0.1 * _se(ref)), (r.x, ref.x)
