"""Discrete models with automatic step-length control [GM-grad, §2.4, model (55)]."""

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest

import pyomo_odeest as po
from pyomo_odeest.discretization.adaptive import (AdaptiveError, AdaptiveModel, PowerLaw, StepController,
                                   StepTable, adams_pc_coefficients, max_relative_discrepancy)
from pyomo_odeest import build_adaptive_block
from pyomo_odeest.transcription._adaptive_block import (adaptive_constraint,
                                                        compare_block_multipliers)
from pyomo_odeest.approaches import estimate_adaptive
from pyomo_odeest.discretization.discrete import DiscreteModel
from pyomo_odeest.models import lotka_volterra_problem
from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.discretization.schemes import adams_bashforth_coefficients, adams_moulton_coefficients


TABLE_R = StepTable((0.1, 0.5, 1.0), (2.0, 1.5, 1.0, 0.7))
TABLE_r = StepTable((2.0, 10.0), (0.7, 0.5, 0.25))


def stiff_problem(k=30.0, p=0.5, start=(28.0, 0.5), seed=0):
    """x1' = -k (x1 - x2), x2' = -p x2: stiffness ratio k/p = 60, both rates estimated."""
    t = np.array([0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0])
    x2 = np.exp(-p * t)
    x1 = k / (k - p) * (np.exp(-p * t) - np.exp(-k * t))
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({"x1": x1 + 0.01 * rng.normal(size=t.size),
                         "x2": x2 + 0.01 * rng.normal(size=t.size)}, index=t)
    return po.EstimationProblem(
        states=["x1", "x2"], parameters=[po.Parameter("k", start[0], lb=1.0),
                                         po.Parameter("p", start[1])],
        rhs=lambda x, u, t: [-u.k * (x.x1 - x.x2), -u.p * x.x2],
        initial={"x1": 0.0, "x2": 1.0}, data=data, name="stiff_linear")


def nonautonomous_problem():
    t = np.linspace(0.5, 3.0, 6)
    data = pd.DataFrame({"x": np.cos(t), "y": 1 + 0.1 * t}, index=t)
    return po.EstimationProblem(
        states=["x", "y"], parameters=[po.Parameter("a", 0.7), po.Parameter("b", 1.3)],
        rhs=lambda x, u, t: [-u.a * x.x + pyo.sin(u.b * t) * x.y, -x.x * x.y / (1 + x.x**2)],
        initial={"x": 1.0, "y": 0.5}, data=data)


@pytest.fixture(scope="module")
def lv():
    return lotka_volterra_problem(p0=(0.9,) * 4)


_MODELS = {}


def model(prob, key, qmax, **ctl):
    """Adaptive models are cached per module (building one lambdifies its derivatives)."""
    k = (key, qmax, tuple(sorted(ctl.items(), key=lambda kv: kv[0])))
    if k not in _MODELS:
        _MODELS[k] = AdaptiveModel(prob, StepController(**ctl), qmax=qmax)
    return _MODELS[k]


from helpers import rel


# ---------------------------------------------------------------------------
# Theorem 3
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("qmax", [2, 3])
def test_theorem3_piecewise_constant_controller_gives_fixed_step_gradient(lv, qmax):
    """Q constant, R and r piecewise constant: ∇J_{h,k} = ∇J_k on the accepted grid."""
    am = model(lv, "lv", qmax, eps=1e-3, h0=0.05, R=TABLE_R, r=TABLE_r)
    assert am.controller.piecewise_constant
    u = lv.u0
    run = am.run(u)
    assert run.n_rejected > 0 and len(run.clipped_steps) == len(lv.meas_times)
    adj = am.adjoint(run)
    g_fixed = DiscreteModel(lv, "adams_pc", qmax, grid=run.grid(lv.meas_times)).gradient(u)
    assert rel(adj.gradient, g_fixed) < 1e-10
    # Remark 3: every γ vanishes; the state adjoint is the fixed-grid adjoint
    assert np.all(np.concatenate(adj.gamma) == 0.0)
    dm = am.fixed_grid_model(run)
    assert rel(adj.p, dm.adjoint(dm.simulate(u))[dm.xblk]) < 1e-10
    # the general transposed solve agrees (α, δ, θ grow through the clip chain with
    # tables: the system is ill conditioned, hence the looser bound on its gradient)
    gen = am.general_adjoint(run)
    assert rel(gen.gradient, g_fixed) < 1e-8


def test_theorem3_fails_for_a_smooth_controller(lv):
    """Negative control: with smooth Q, R, r the step sensitivities change the gradient."""
    am = model(lv, "lv", 2, eps=1e-3)
    run = am.run(lv.u0)
    g = am.adjoint(run).gradient
    g_frozen = am.gradient(lv.u0, "frozen_grid", run=run)
    assert rel(g_frozen, g) > 1e-4
    assert np.max(np.abs(np.concatenate(am.adjoint(run).gamma))) > 0


# ---------------------------------------------------------------------------
# smooth controller: (59) vs finite differences and vs the general form
# ---------------------------------------------------------------------------
def _stable_point(am, u0, step, tries=6):
    """First u near u0 where no perturbation u ± step e_a changes the pattern."""
    for s in range(tries):
        u = u0 * (1 + 0.013 * s)
        base = am.run(u).pattern
        ok = True
        for a in range(len(u)):
            for sg in (1, -1):
                du = np.zeros(len(u))
                du[a] = sg * step * max(1.0, abs(u[a]))
                if am.run(u + du).pattern != base:
                    ok = False
        if ok:
            return u
    pytest.fail("no point with a stable pattern found")


@pytest.mark.parametrize("case", ["lv2", "lv3", "nonauto2", "nonauto3", "stiff2"])
def test_smooth_gradient_vs_fd_and_general_form(lv, case):
    if case.startswith("lv"):
        prob, key, u0 = lv, "lv", lv.u0
    elif case.startswith("nonauto"):
        prob, key, u0 = nonautonomous_problem(), "nonauto", np.array([0.9, 1.7])
    else:
        prob, key, u0 = stiff_problem(), "stiff", np.array([28.0, 0.5])
    qmax = int(case[-1])
    am = model(prob, key, qmax, eps=1e-3 if key != "nonauto" else 1e-4)
    step = 1e-6
    u = _stable_point(am, u0, step)
    run = am.run(u)
    adj = am.adjoint(run)
    # central differences of J_{h,k} by free adaptive runs (pattern checked unchanged)
    fd = np.zeros(len(u))
    for a in range(len(u)):
        du = np.zeros(len(u))
        du[a] = step * max(1.0, abs(u[a]))
        rp, rm = am.run(u + du), am.run(u - du)
        assert rp.pattern == run.pattern and rm.pattern == run.pattern
        fd[a] = (am.objective(run=rp) - am.objective(run=rm)) / (2 * du[a])
    assert rel(adj.gradient, fd) < 1e-6
    gen = am.general_adjoint(run)
    assert rel(adj.gradient, gen.gradient) < 1e-10
    d = max_relative_discrepancy(gen, adj)
    assert d["max"] < 1e-10, d
    # the step-size sensitivities are really present
    assert np.max(np.abs(np.concatenate(adj.gamma))) > 0 and np.max(np.abs(adj.beta)) > 0


# ---------------------------------------------------------------------------
# Ipopt's multipliers = p, α, β, γ, δ
# ---------------------------------------------------------------------------
def test_block_duals_equal_recursion_lotka_volterra(lv):
    am = model(lv, "lv", 2, eps=1e-3)
    res = estimate_adaptive(lv, model=am, options={"tol": 1e-12}, max_rebuilds=5,
                            fit_tol=None, certify=False)        # this eps's discrete optimum
    assert res.success and res.extra["pattern_stable"]
    assert res.extra["rounds"][-1]["pattern_changed"] is False
    np.testing.assert_allclose(res.x, [1.0, 1.0, 1.0, 1.0], atol=0.05)
    cmp = compare_block_multipliers(res.model)
    for fam in ("p", "alpha", "beta", "gamma", "delta", "theta", "q"):
        assert cmp[fam] < 1e-6, (fam, cmp[fam])
    assert cmp["general"] < 1e-10
    # the duals are not trivially zero, and the gradient (59) from them vanishes
    duals = cmp["duals"]
    assert np.max(np.abs(duals.beta)) > 1e-3 and np.max(np.abs(duals.p)) > 1e-1
    assert np.max(np.abs(duals.gradient)) < 1e-6
    # result bookkeeping
    assert res.multipliers["trial"].shape[0] == res.extra["block_run"].n_trials
    assert res.extra["grid"]["k"] == res.extra["block_run"].k


def test_block_duals_equal_recursion_stiff():
    # the norm absolute below 1 (scale=1), with which this run was measured; with the
    # default relative norm its Ipopt path depends on the environment (2,378 iterations
    # to 'acceptable' in one, the iteration limit in a bare one)
    prob = stiff_problem()
    am = model(prob, "stiff", 2, eps=1e-3, scale=1.0)
    res = estimate_adaptive(prob, model=am, options={"tol": 1e-12}, max_rebuilds=20,
                            fit_tol=None, certify=False)
    assert res.success
    assert abs(res.x[0] - 30.0) < 3.0 and abs(res.x[1] - 0.5) < 0.02
    assert res.extra["grid"]["rejected"] > 0
    cmp = compare_block_multipliers(res.model)
    assert cmp["max"] < 1e-6, {k: v for k, v in cmp.items() if isinstance(v, float)}
    assert cmp["general"] < 1e-10


def test_block_is_satisfied_by_the_run_and_named(lv):
    am = model(lv, "lv", 3, eps=1e-3)
    run = am.run(lv.u0)
    m = pyo.ConcreteModel()
    m.est = b = build_adaptive_block(am, run)
    ev = PyomoNLPEvaluator(m)
    x = np.array([v.value for v in ev.variables])
    assert np.max(np.abs(ev.constraints(x) - ev.g_lb)) < 1e-12
    i = int(run.clipped_steps[0])
    j = run.pattern.j[i]
    assert b.trial_kind[i, j] == "clip"
    assert adaptive_constraint(b, "trial", i, j) is b.trial_eq[i, j]
    assert adaptive_constraint(b, "corr", i, state="x1") is b.corr_eq[i, "x1"]
    assert abs(pyo.value(b.misfit) - am.objective(run=run)) < 1e-12
    # a perturbed state breaks a row (the block is not vacuous)
    x2 = x.copy()
    x2[ev.column(b.x[5, "x2"])] += 1e-3
    assert np.max(np.abs(ev.constraints(x2) - ev.g_lb)) > 1e-5


# ---------------------------------------------------------------------------
# the integrator
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("qmax", [2, 3])
def test_integrator_lands_on_measurement_times_and_records_pattern(lv, qmax):
    # the norm absolute below 1 (scale=1), where LV's run at eps=1e-3 rejects trials
    # (with the default relative norm it rejects none: nothing to check below)
    am = model(lv, "lv", qmax, eps=1e-3, scale=1.0)
    run = am.run(lv.u0)
    eps = am.controller.eps
    assert np.array_equal(run.t[run.J], lv.meas_times)        # exact landing
    assert run.t[0] == lv.t0 and run.t[-1] == lv.T
    assert np.all(np.diff(run.t) > 0)
    clipped = run.clipped_steps
    assert np.array_equal(run.t[clipped + 1], am.targets)      # every target hit by a clip
    for i in range(run.k):
        ji = run.pattern.j[i]
        assert len(run.H[i]) == ji == len(run.eta[i])
        assert run.eta[i][ji - 1] <= eps and np.all(run.eta[i][:ji - 1] > eps)
        assert run.h[i] == run.H[i][ji - 1] and run.e[i] == run.eta[i][ji - 1]
        c = run.pattern.clip[i]
        if c:
            assert run.H[i][c - 1] == am.targets[np.searchsorted(am.targets, run.t[i], "right")] - run.t[i]
    assert run.n_rejected == sum(run.pattern.j) - run.k > 0
    # replaying the frozen pattern reproduces the run
    rep = am.run(lv.u0, run.pattern)
    assert rep.pattern == run.pattern and np.array_equal(rep.x, run.x)
    # a step's first trial follows R, a retrial follows r
    i = next(i for i in range(1, run.k) if run.pattern.kind(i, 0) == "R")
    assert np.isclose(run.H[i][0], am.ctl("R", run.e[i - 1], -1)[0] * run.h[i - 1], rtol=1e-14)


def test_grid_shrinks_with_tolerance(lv):
    k = [model(lv, "lv", 2, eps=e).run(lv.u0).k for e in (1e-2, 1e-3)]
    assert k[1] > 2 * k[0]


def test_bad_controller_settings_raise():
    for bad in (0.0, -1e-3, np.nan, np.inf):
        with pytest.raises(ValueError, match="eps"):
            StepController(eps=bad)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="j_max"):
            StepController(j_max=bad)
    with pytest.raises(ValueError, match="r must reduce"):
        StepController(r=StepTable((1.0,), (0.5, 1.2)))
    with pytest.raises(ValueError):
        PowerLaw(fac=0.9, lo=2.0, hi=1.0)
    with pytest.raises(ValueError):
        StepController(h0=-0.1)
    with pytest.raises(ValueError, match="qmax"):
        AdaptiveModel(lotka_volterra_problem(), StepController(), qmax=4)


def test_always_successful_assumption_violation_is_reported(lv):
    am = model(lv, "lv", 2, eps=1e-6, j_max=1, h0=0.5)
    with pytest.raises(AdaptiveError, match="j_max"):
        am.run(lv.u0)


def test_variable_step_coefficients_equal_the_schemes():
    pi1, K1 = adams_pc_coefficients(1)
    assert [float(v) for v in pi1] == [1.0] and [float(v) for v in K1] == [0.5, 0.5]
    pi, K = adams_pc_coefficients(2)
    from pyomo_odeest.discretization.adaptive import RHO
    rng = np.random.default_rng(0)
    for _ in range(5):
        ti, hm, h = 1.3, rng.uniform(0.05, 1), rng.uniform(0.05, 1)
        rho = h / hm
        ab = adams_bashforth_coefficients([ti, ti - hm], h)
        am_ = adams_moulton_coefficients([ti, ti - hm], ti + h)
        np.testing.assert_allclose([float(v.subs(RHO, rho)) for v in pi], ab, rtol=1e-13)
        np.testing.assert_allclose([float(v.subs(RHO, rho)) for v in K], am_, rtol=1e-13)


def test_global_error_follows_the_tolerance():
    """The weighted norm's ``scale`` a: with the default 0.01 the global error of SEIRD's
    states (fractions of a population, 0.04-1) at the measurement times falls with ε as
    ε does (about 60-fold from 1e-3 to 1e-5); with a = 1, absolute below 1, it falls
    3-fold, so tightening ε (``fit_tol``) cannot bring the fitted values to a target."""
    from pyomo_odeest.discretization.continuous import continuous_model
    from pyomo_odeest.models import seird_data, seird_problem
    prob = seird_problem(seird_data())
    u = np.array([0.35493822, 0.19906565, 0.10148857, 0.0051255])     # near its optimum
    X = continuous_model(prob, "scipy", rtol=1e-12, atol=1e-14)._forward(u)[1]
    top = np.abs(X).max(axis=0)

    def error(**ctl):
        run = AdaptiveModel(prob, StepController(**ctl), qmax=2).run(u)
        assert np.array_equal(run.t[run.J], prob.meas_times)
        return float(np.max(np.abs(run.x[run.J] - X) / top))

    assert StepController().scale == 0.01
    default = [error(eps=e) for e in (1e-3, 1e-5)]
    absolute = [error(eps=e, scale=1.0) for e in (1e-3, 1e-5)]
    assert default[0] / default[1] > 30, default
    assert absolute[0] / absolute[1] < 5, absolute
    assert default[1] < 2e-4 < absolute[1]
