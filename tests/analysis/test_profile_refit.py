"""Profiles and the bootstrap re-estimate through the result's refit: its approach with
its options as solved, on its grid (the refined one after the refinement stage).

The reference of every profile point is an independent estimate: ``estimate`` of the
problem with the parameter fixed by ``problem.variant(fix=...)``, on the result's
scheme and grid (the continuous approach: its ODE)."""
import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import EstimationProblem, Parameter, Status, bootstrap, estimate
from pyomo_odeest.analysis._uncertainty import nll_factor
from pyomo_odeest.models import lotka_volterra_data
from pyomo_odeest.models._lotka_volterra import LV_X0, lv_rhs

APPROACHES = {"reduced_space": dict(max_step=1.0), "simultaneous": dict(max_step=1.0),
              "continuous": {}}


@pytest.fixture(scope="module")
def lv():
    data = lotka_volterra_data(seed=3, variance=0.05**2)
    return EstimationProblem(states=["x1", "x2"],
                             parameters=[Parameter(f"p{k}", 1.0) for k in range(1, 5)],
                             rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data,
                             sigma=0.05)


@pytest.fixture(scope="module")
def fits(lv):
    return {a: estimate(lv, a, **kw) for a, kw in APPROACHES.items()}


def _reference(P, res, name, value):
    """J with ``name`` fixed at ``value``: a direct estimate on the result's discretization."""
    disc = ({} if res.scheme is None else
            dict(grid=res.grid, scheme=res.scheme.name, qmax=res.scheme.qmax, certify=False))
    u = res.estimates.copy()
    u[name] = value
    ref = estimate(P.variant(fix={name: value}), res.approach, u0=u.to_numpy(), **disc)
    assert ref.success, ref.status
    return ref.objective


@pytest.mark.parametrize("approach", list(APPROACHES))
def test_profile_through_refit_equals_direct_estimates(lv, fits, approach):
    """Every point of the profile of p3 is the minimum of J with p3 fixed (λ to the
    profile's tolerance, refine_tol on the signed root at the threshold); at the
    interval's ends the signed root of the direct estimates is the threshold's;
    the points' statuses are the package's."""
    res = fits[approach]
    assert res.success
    pr = res.profile(["p3"], progress=False)
    assert pr.approach == approach
    iv = pr.intervals.loc["p3"]
    assert iv["shape"] == "ok" and iv["lower_end"] == iv["upper_end"] == "crossed"
    curve = pr.curves["p3"]
    assert all(isinstance(s, Status) and s.success for s in curve["status"])
    kappa, tol = nll_factor(lv), 1e-3                       # ProfileTask.refine_tol
    lam_tol = tol * pr.threshold
    for value, lr in zip(curve["value"], curve["lr"]):
        lam = 2 * (_reference(lv, res, "p3", value) - res.objective) / kappa
        assert lr == pytest.approx(lam, abs=lam_tol), value
    target = np.sqrt(pr.threshold)
    for end in ("lower", "upper"):
        lam = 2 * (_reference(lv, res, "p3", iv[end]) - res.objective) / kappa
        assert np.sqrt(lam) == pytest.approx(target, rel=tol), end
    assert iv["lower"] < iv["estimate"] < iv["upper"]


def test_refit_solves_on_the_refined_grid_with_the_recorded_options(lv, fits):
    """The reduced-space result was refined (its first grid did not resolve the ODE):
    its refit solves on the refined grid, with the options it was estimated with."""
    res = fits["reduced_space"]
    rounds = res.extra["refinement"]
    assert len(rounds) > 1 and rounds[-1]["grid_points"] > rounds[0]["grid_points"]
    out = res.refit(fixed={"p1": float(res.estimates["p1"])})
    assert out.status.success and out.approach == "reduced_space"
    np.testing.assert_array_equal(out.grid.t, res.grid.t)
    assert out.objective == pytest.approx(res.objective, rel=1e-9)
    short = estimate(lv, "reduced_space", max_step=1.0, options={"max_iter": 3})
    again = short.refit(lv.u0)                        # the optimizer's options recorded
    assert short.status is again.status is Status.MAX_ITERATIONS and again.iterations == 3
    assert res.refit(lv.u0, options={"max_iter": 2}).iterations == 2      # or over them
    with pytest.raises(ValueError, match="not a parameter"):
        res.refit(fixed={"nope": 1.0})


def test_bootstrap_samples_are_refits_of_the_fit(lv, fits):
    """The samples are solved by the fit's approach on its (refined) grid."""
    fit = fits["reduced_space"]
    bs = bootstrap(lv, n=2, approach="reduced_space", fit=fit, seed=1)
    assert bs.table["success"].all()
    for out in bs.run.outputs.values():
        assert out.approach == "reduced_space"
        np.testing.assert_array_equal(out.grid.t, fit.grid.t)
    assert not np.allclose(bs.estimates.to_numpy()[0], fit.x)


def _steady_state_problems():
    """A ⇌ B at rates k1 (1 + L) A and k2 B, C' = ks L A − kd C, pre-equilibrated at
    L = 0.1 (the initial state is a steady state of the parameters), A and C measured
    with 1 % noise; and the same model in d = k1 − k2 instead of k1."""
    from scipy.integrate import solve_ivp
    from pyomo_odeest import Preequilibration
    k1, k2, ks, kd, lp = 0.7, 0.4, 1.5, 0.6, 0.1
    a0 = k2 / (k1 * (1 + lp) + k2)
    t = np.linspace(0.5, 8.0, 16)
    sol = solve_ivp(lambda _, x: [-k1 * 2 * x[0] + k2 * x[1], k1 * 2 * x[0] - k2 * x[1],
                                  ks * x[0] - kd * x[2]], (0, t[-1]),
                    [a0, 1 - a0, ks * lp * a0 / kd], t_eval=t, rtol=1e-12, atol=1e-13)
    noise = 1 + 0.01 * np.random.default_rng(0).standard_normal((len(t), 2))
    df = pd.DataFrame({"A": sol.y[0], "C": sol.y[2]}, index=t) * noise

    def make(first, rate):
        return EstimationProblem(
            ["A", "B", "C"],
            [first, Parameter("k2", 0.3, lb=0.01, ub=10), Parameter("ks", 1.0, lb=0.01, ub=10),
             Parameter("kd", 0.8, lb=0.01, ub=10), Parameter("L", 1.0, fixed=True)],
            lambda x, u, t: [-rate(u) * (1 + u.L) * x.A + u.k2 * x.B,
                             rate(u) * (1 + u.L) * x.A - u.k2 * x.B, u.ks * u.L * x.A - u.kd * x.C],
            {"A": 1.0, "B": 0.0, "C": 0.0}, df, sigma=0.01,
            preequilibration=Preequilibration(parameters={"L": lp}))
    return (make(Parameter("k1", 0.5, lb=0.01, ub=10), lambda u: u.k1),
            make(Parameter("d", 0.2), lambda u: u.d + u.k2))


def test_profile_of_a_combination_through_a_steady_state():
    """The profile of k1 − k2 (k1's bounds held as constraints, the steady state of the
    pre-equilibration formed again in the reparametrized problem) is the profile of d
    in the model written in d = k1 − k2."""
    P, D = _steady_state_problems()
    res = estimate(P, "reduced_space", steps_per_interval=10, certify=False)
    ref = estimate(D, "reduced_space", steps_per_interval=10, certify=False)
    assert res.success and ref.success
    row = res.profile(combination={"k1": 1, "k2": -1}, progress=False).intervals.loc["k1 − k2"]
    want = ref.profile(["d"], progress=False).intervals.loc["d"]
    assert row["shape"] == want["shape"] == "ok"
    for col in ("estimate", "lower", "upper"):
        assert row[col] == pytest.approx(want[col], abs=1e-6), col


def test_refit_of_a_user_model_keeps_its_constraints():
    """A simultaneous fit of the user's own model (a block plus a constraint p3 <= 0.95,
    active at the optimum): a refit with p1 held solves a copy of that model, so the
    constraint still holds and the user's model is left as it was."""
    import pyomo.environ as pyo
    from pyomo_odeest import build_block
    from pyomo_odeest.models import lotka_volterra_problem
    p = lotka_volterra_problem(p0=(0.8,) * 4)
    m = pyo.ConcreteModel()
    m.est = build_block(p, "adams_pc", 4, steps_per_interval=5)
    m.cap = pyo.Constraint(expr=m.est.u["p3"] <= 0.95)
    r = estimate(p, approach="simultaneous", model=m)
    assert r.estimates["p3"] == pytest.approx(0.95, abs=1e-6)      # active
    held = float(r.estimates["p1"]) * 1.01
    rf = r.refit(fixed={"p1": held})
    assert rf.success, rf.status
    assert rf.estimates["p1"] == held
    assert rf.estimates["p3"] <= 0.95 + 1e-7
    assert not m.est.u["p1"].fixed and pyo.value(m.est.u["p1"]) == pytest.approx(r.estimates["p1"])


def test_bootstrap_of_a_user_model_refuses_rather_than_reuse_its_data():
    """A user's model holds the data it was built with: a refit on resampled data
    (the bootstrap) must not solve it (every sample would be the original fit), so it
    says why instead."""
    import pyomo.environ as pyo
    from pyomo_odeest import ProblemError, build_block
    from pyomo_odeest.models import lotka_volterra_problem
    p = lotka_volterra_problem(p0=(0.8,) * 4)
    m = pyo.ConcreteModel()
    m.est = build_block(p, "adams_pc", 4, steps_per_interval=20)
    r = estimate(p, approach="simultaneous", model=m)
    assert r.success, r.status                  # a grid that resolves the ODE
    n = len(p.data)
    for other in (p.variant(values=p.data.to_numpy() * 1.01),          # residual bootstrap
                  p.variant(multiplicity=np.arange(n) % 2 * 2.0)):       # case resampling
        with pytest.raises(ProblemError, match="holds the data it was built with"):
            r.refit(problem=other)
    with pytest.raises(ProblemError, match="holds the data it was built with"):
        bootstrap(p, n=2, fit=r)


def test_covariance_of_a_user_model_with_an_inequality():
    """An inequality inactive at the estimates does not change the local problem: the
    covariance is the one without it.  One that is active is named, with the remedies
    (a Wald covariance would cross it)."""
    import pyomo.environ as pyo
    from pyomo_odeest import build_block
    from pyomo_odeest.models import lotka_volterra_problem
    p = lotka_volterra_problem(p0=(0.8,) * 4)

    def fit(cap):
        m = pyo.ConcreteModel()
        m.est = build_block(p, "adams_pc", 4, steps_per_interval=5)
        if cap is not None:
            m.cap = pyo.Constraint(expr=m.est.u["p1"] + m.est.u["p3"] <= cap)
        return estimate(p, approach="simultaneous", model=m, certify=False)
    free = fit(None)
    total = float(free.estimates["p1"] + free.estimates["p3"])
    loose = fit(total + 1.0)
    assert loose.success and free.success
    np.testing.assert_allclose(loose.covariance().matrix.to_numpy(),
                               free.covariance().matrix.to_numpy(), rtol=1e-6)
    tight = fit(total - 0.05)
    assert float(tight.estimates["p1"] + tight.estimates["p3"]) == pytest.approx(total - 0.05)
    with pytest.raises(ValueError, match=r"cap is active at the estimates.*deactivate it"):
        tight.covariance()
