"""The continuous approach on SUNDIALS CVODES (CasADi): objective, adjoint and forward
gradients, Gauss-Newton matrix and forward-over-adjoint Hessian against the SciPy path
and finite differences, on problems with measurement jumps (a measurement at t0 too),
inputs, several experiments, pre-equilibration and estimated initial states."""
import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest
import sympy

import pyomo_odeest as po
from scipy.integrate import solve_ivp

from pyomo_odeest import EstimationProblem, Experiment, Parameter, Preequilibration
from pyomo_odeest import estimate_continuous
from pyomo_odeest.discretization.continuous import (ContinuousModel, CvodesModel,
                                                    CvodesUnavailable, IntegrationError,
                                                    continuous_model, cvodes_available)
from pyomo_odeest import PiecewiseConstant, PiecewiseLinear, Spline

pytestmark = [pytest.mark.extras,
              pytest.mark.skipif(not cvodes_available(),
                                 reason="CasADi is not installed (pip install "
                                        "'pyomo_odeest[sundials]')")]

TOL = dict(rtol=1e-10, atol=1e-13)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


# -- problems ------------------------------------------------------------------
def nonlinear():
    """Estimated x0 with l(u) nonlinear, t-dependent rhs, correlated Gaussian noise,
    a missing value and a measurement at t0 (its jump acts on λ(t0) directly)."""
    t = np.array([0.0, 0.5, 1.0, 2.0, 3.0, 4.5])
    data = pd.DataFrame({"z1": [0.8, 0.62, 0.55, 0.47, np.nan, 0.35],
                         "z2": [1.2, 1.01, 0.98, 0.93, 0.9, 0.88]}, index=t)
    return EstimationProblem(
        states=["x", "y"],
        parameters=[Parameter("a", 0.7, lb=0.05, ub=5), Parameter("b", 0.4, lb=0.01, ub=5),
                    Parameter("c", 1.3, lb=0.1, ub=5), Parameter("x0", 0.9, lb=0.1, ub=5)],
        rhs=lambda x, u, t: [-u.a * x.x + u.b * x.x * x.y + 0.1 * pyo.sin(u.c * t),
                             u.c * (1 - x.y) - u.a * u.b * x.x * x.y],
        initial={"x": "x0", "y": lambda u: u.b * u.x0**2},
        observe=lambda x, u, t: {"z1": x.x, "z2": x.x + u.c * x.y},
        data=data, loss=po.GaussianNLL([[0.04, 0.01], [0.01, 0.09]]))


U_NL = np.array([0.9, 0.55, 1.1, 0.75])

T_IN = np.array([0.5, 1.0, 1.3, 2.0, 2.7, 3.5, 4.2, 5.0])       # 1.3 and 2.7 are switches
INPUTS = {
    "constant": PiecewiseConstant([0, 1.3, 2.7], [0.0, 1.0, 0.3]),
    "linear": PiecewiseLinear([0, 1.3, 2.7, 5], [0.0, 1.0, 0.3, 0.5]),
    "spline": Spline(np.linspace(0, 5, 8), np.sin(np.linspace(0, 5, 8))),
    "control": PiecewiseConstant([0, 1.3, 2.7], ["c0", "c1", 0.3]),
}


def with_input(inp):
    ctl = not inp.parameter_names()
    data = pd.DataFrame({"x": np.exp(-0.5 * T_IN), "y": 0.5 + 0.1 * T_IN}, index=T_IN)
    return EstimationProblem(
        ["x", "y"], [Parameter("k", 0.5, lb=0.01, ub=5),
                     Parameter("c0", 0.1, lb=-2, ub=2, fixed=ctl),
                     Parameter("c1", 0.9, lb=-2, ub=2, fixed=ctl)],
        rhs=lambda x, u, t: [-u.k * x.x + u.F * x.y, -0.1 * x.y + u.F * t],
        initial={"x": 1.0, "y": 0.5}, data=data, inputs={"F": inp}, sigma=0.1)


def experiments():
    rng = np.random.default_rng(3)
    times = np.linspace(0.5, 5.0, 8)

    def data(k1, k2, a0, b0, t):
        A = a0 * np.exp(-k1 * t)
        B = b0 * np.exp(-k2 * t) + a0 * k1 / (k2 - k1) * (np.exp(-k1 * t) - np.exp(-k2 * t))
        return pd.DataFrame({"A": A + 0.01 * rng.standard_normal(len(t)),
                             "B": B + 0.01 * rng.standard_normal(len(t))}, index=t)
    exps = [Experiment("e1", data(0.7, 0.3, 1.0, 0.0, times)),
            Experiment("e2", data(0.7, 0.3, 2.0, 0.0, times), parameters={"A0": 1.5}),
            Experiment("e3", data(0.7, 0.3, 0.5, 0.4, np.linspace(0.4, 4.0, 6)),
                       initial={"B": 0.4})]
    return EstimationProblem(
        states=["A", "B"],
        parameters=[Parameter("k1", 0.5, lb=0.01, ub=5), Parameter("k2", 0.5, lb=0.01, ub=5),
                    Parameter("A0", 1.0, lb=0.01, ub=5, local=True)],
        rhs=lambda x, u, t: [-u.k1 * x.A, u.k1 * x.A - u.k2 * x.B],
        initial={"A": "A0", "B": 0.0}, data=None, experiments=exps, sigma=0.01)


def preequilibrated(reset=()):
    """A <-> B (conserved), C' = ks L A - kd C; starts at the steady state under L = 0.1."""
    true = (0.7, 0.4, 1.5, 0.6)

    def ode(t, x, k1, k2, ks, kd, L):
        A, B, C = x
        return [-k1 * (1 + L) * A + k2 * B, k1 * (1 + L) * A - k2 * B, ks * L * A - kd * C]
    k1, k2, ks, kd = true
    A = k2 / (k1 * 1.1 + k2)
    times = np.linspace(0.5, 8.0, 12)
    sol = solve_ivp(ode, (0, 8.0), [A, 1 - A, ks * 0.1 * A / kd], args=(*true, 1.0),
                    t_eval=times, rtol=1e-12, atol=1e-13)
    df = pd.DataFrame({"A": sol.y[0], "C": sol.y[2]}, index=times)
    return EstimationProblem(
        ["A", "B", "C"],
        [Parameter("k1", 0.5, lb=0.01, ub=10), Parameter("k2", 0.3, lb=0.01, ub=10),
         Parameter("ks", 1.0, lb=0.01, ub=10), Parameter("kd", 0.8, lb=0.01, ub=10),
         Parameter("L", 1.0, fixed=True)],
        lambda x, u, t: [-u.k1 * (1 + u.L) * x.A + u.k2 * x.B,
                         u.k1 * (1 + u.L) * x.A - u.k2 * x.B, u.ks * u.L * x.A - u.kd * x.C],
        {"A": 1.0, "B": 0.0, "C": 0.0}, df, sigma=0.01,
        preequilibration=Preequilibration(parameters={"L": 0.1}, reset=reset))


def gauss_newton(model, u, cols):
    """J_w^T J_w of the weighted residuals (the least-squares optimizer's matrix)."""
    _, Xm, Sm = model.sensitivities(u, np.eye(model.p)[:, cols])
    Jw = model.misfit.weighted_jacobian(Xm, u, Sm, cols).reshape(-1, len(cols))
    return Jw.T @ Jw


def compare(problem, u=None, hess_tol=1e-6, method="BDF"):
    """Every derivative of the CVODES model (its ``method``) against the SciPy model and
    differences."""
    cv = CvodesModel(problem, method=method, **TOL)
    sc = ContinuousModel(problem, method="BDF", rtol=1e-11, atol=1e-13)
    u = cv._u(u)
    free = np.flatnonzero(problem.free_mask)
    assert cv.objective(u) == pytest.approx(sc.objective(u), rel=1e-8, abs=1e-9)
    g_sc = sc.gradient(u, "sensitivity", free)
    g_adj = cv.gradient(u, "adjoint", free)
    g_fwd = cv.gradient(u, "sensitivity", free)
    assert rel(g_adj, g_sc) < 1e-6
    assert rel(g_fwd, g_sc) < 1e-6
    assert rel(g_adj, g_fwd) < 1e-6
    cv.fd_step = 1e-4
    assert rel(cv.gradient(u, "fd", free), g_adj) < 1e-5
    assert rel(gauss_newton(cv, u, free), gauss_newton(sc, u, free)) < 1e-6
    H = cv.hessian(u, "soa", index=free)
    assert rel(H, sc.hessian(u, "soa", index=free)) < hess_tol
    assert rel(H, H.T) < hess_tol
    cv.hessian_fd_step = 1e-3               # differences of gradients: truncation ~ step²
    assert rel(H, cv.hessian(u, "adjoint_fd", index=free)) < 1e-5
    return cv, sc, u


# -- derivatives -----------------------------------------------------------------
def test_estimated_initial_state_jump_at_t0_and_correlated_noise():
    cv, sc, u = compare(nonlinear(), U_NL)
    assert cv.grid[0] > cv.t0 and cv.tau[0] == cv.t0       # the t0 measurement: no output
    ad = cv.adjoint(u)
    assert rel(ad["lambda0"], sc.adjoint(u)["lambda0"]) < 1e-6
    np.testing.assert_allclose(cv.simulate(u, [0.0, 0.3, 4.0]).values,
                               sc.simulate(u, [0.0, 0.3, 4.0]).values, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kind", ["control", "constant"])
def test_sensitivities_in_any_directions_are_the_unit_ones_combined(kind):
    """Unit directions (the free parameters') and dense ones take different compiled
    functions (columns of f_u against f_u V); over pieces between switching times, with
    an estimated input value, both equal the SciPy model's sensitivities, and S(V) is
    S(I) V."""
    P = with_input(INPUTS[kind])
    cv, sc = CvodesModel(P, **TOL), ContinuousModel(P, method="BDF", rtol=1e-11, atol=1e-13)
    u = cv._u(np.array([0.6, 0.3, 1.2]) if kind == "control" else None)
    V = np.random.default_rng(1).normal(size=(cv.p, 2))
    _, X1, S1 = cv.sensitivities(u)
    _, X2, S2 = cv.sensitivities(u, V)
    assert rel(S1, sc.sensitivities(u)[2]) < 1e-7
    assert rel(S2, sc.sensitivities(u, V)[2]) < 1e-7
    assert rel(S2, S1 @ V) < 1e-7
    np.testing.assert_array_equal(X1, X2)          # the forward solve's states, both times
    assert {k for k in cv._funs if k[0] == "sens"} == {("sens", tuple(range(len(
        cv._dynamic)))), ("sens", 2)}


@pytest.mark.parametrize("kind", list(INPUTS))
def test_inputs_restart_at_switching_times(kind):
    P = with_input(INPUTS[kind])
    cv, _, u = compare(P, np.array([0.6, 0.3, 1.2]) if kind == "control" else None)
    assert np.isin([1.3, 2.7], cv.grid).all()          # pieces end at the switches


def test_several_experiments_through_the_estimator():
    P = experiments()
    for sp in P.experiment_problems:
        compare(sp)
    u = np.array([0.6, 0.35, 0.9, 1.7, 0.6])
    cv = continuous_model(P.experiment_problems[0], "cvodes", **TOL)
    assert isinstance(cv, CvodesModel)
    # the other experiments' copies of A0 cannot move e1's states: no CVODES direction
    # is spent on them (compare() checked those columns against SciPy: zero)
    assert [P.parameter_names[i] for i in cv._dynamic] == ["k1", "k2", "A0_e1"]
    r_cv = estimate_continuous(P, optimizer="least_squares", engine="cvodes", u0=u)
    r_sc = estimate_continuous(P, optimizer="least_squares", engine="scipy", u0=u)
    assert r_cv.success and r_sc.success
    assert (r_cv.extra["integrator"]["name"].startswith("CVODES")
            and r_sc.extra["integrator"]["name"].startswith("solve_ivp"))
    np.testing.assert_allclose(r_cv.estimates.values, r_sc.estimates.values, rtol=1e-5)
    assert r_cv.objective == pytest.approx(r_sc.objective, rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("reset", [(), ("C",)])
def test_preequilibration(reset):
    compare(preequilibrated(reset), np.array([0.6, 0.35, 1.2, 0.7, 1.0]))


def test_estimate_default_engine_matches_scipy_with_exact_hessian():
    P = nonlinear()
    r_cv = estimate_continuous(P, hessian="soa")
    r_sc = estimate_continuous(P, hessian="soa", engine="scipy")
    assert r_cv.extra["integrator"]["engine"] == "cvodes", "CVODES is the default when CasADi imports"
    assert r_cv.success and r_sc.success
    np.testing.assert_allclose(r_cv.estimates.values, r_sc.estimates.values, rtol=1e-5)
    lam = r_cv.adjoint             # λ(t⁻) at t0 and the measurement times
    np.testing.assert_array_equal(lam.index, np.union1d([0.0], P.meas_times))


def test_preequilibrated_fit_recovers_the_truth():
    r = estimate_continuous(preequilibrated(), optimizer="least_squares")
    assert r.success and r.extra["integrator"]["engine"] == "cvodes"
    np.testing.assert_allclose(r.estimates.values[:4], [0.7, 0.4, 1.5, 0.6], rtol=1e-4)


@pytest.mark.parametrize("problem", ["nonlinear", "input"])
def test_adams_method_gives_the_same_derivatives(problem):
    """CVODES's Adams-Moulton (``method='Adams'``, for non-stiff problems): objective,
    adjoint and forward gradients, Gauss-Newton matrix and Hessians as the SciPy model's."""
    if problem == "nonlinear":
        cv, _, _ = compare(nonlinear(), U_NL, method="Adams")
    else:
        cv, _, _ = compare(with_input(INPUTS["linear"]), method="Adams")
    assert cv.cvodes_method == "Adams" and cv._opts()["linear_multistep_method"] == "adams"


# -- choices and refusals ----------------------------------------------------------
def test_engine_choice_and_refusals():
    P = nonlinear()
    assert isinstance(continuous_model(P), CvodesModel)
    assert type(continuous_model(P, method="LSODA")) is ContinuousModel
    with pytest.raises(ValueError, match="engine"):
        estimate_continuous(P, engine="amici")
    with pytest.raises(ValueError, match="use engine='scipy'"):
        continuous_model(P, "cvodes", method="LSODA")
    adams = continuous_model(P, method="Adams")                   # CVODES's own method
    assert isinstance(adams, CvodesModel) and adams.cvodes_method == "Adams"
    assert continuous_model(P).cvodes_method == "BDF"
    with pytest.raises(ValueError, match="CVODES's"):
        continuous_model(P, "scipy", method="Adams")
    r = estimate_continuous(P, method="Adams", optimizer="least_squares")
    assert r.success and r.extra["integrator"]["name"].startswith("CVODES Adams")
    from pyomo_odeest.discretization.continuous._cvodes import sympy_to_casadi
    x = sympy.Symbol("x")
    with pytest.raises(CvodesUnavailable, match="gamma"):
        sympy_to_casadi([sympy.gamma(x)], {x: 1.0})


def test_piecewise_and_functions_are_rendered_exactly():
    import casadi as ca
    from pyomo_odeest.discretization.continuous._cvodes import sympy_to_casadi
    x, y = sympy.symbols("x y", real=True)
    exprs = [sympy.Piecewise((x**2, x < 1), (sympy.exp(-x) + sympy.Max(x, y), True)),
             sympy.sqrt(x) * sympy.tanh(y) / (1 + x**-2) + sympy.Abs(y) ** sympy.Rational(3, 2),
             sympy.Heaviside(x - 2) * sympy.log(1 + y**2) + sympy.pi]
    X = ca.SX.sym("X", 2)
    fn = ca.Function("f", [X], [ca.vertcat(*sympy_to_casadi(exprs, {x: X[0], y: X[1]}))])
    ref = sympy.lambdify((x, y), exprs)
    for pt in ([0.5, -1.5], [3.0, 0.7], [1.0, 2.0]):
        np.testing.assert_allclose(np.array(fn(pt)).ravel(), ref(*pt), rtol=1e-14)


def test_integration_failure_is_an_integration_error(capsys):
    """x' = 5x² blows up at t = 0.2: an IntegrationError with CVODES's message, and not
    CasADi's dump of the failing function's inputs on standard error."""
    t = np.array([0.5, 1.0, 2.0])
    P = EstimationProblem(["x"], [Parameter("k", 5.0)], lambda x, u, t: [u.k * x.x**2],
                          {"x": 1.0}, pd.DataFrame({"x": [1.0, 1.0, 1.0]}, index=t), sigma=0.1)
    capsys.readouterr()
    with pytest.raises(IntegrationError, match="CVODES"):
        CvodesModel(P).objective()
    assert "Input 0" not in capsys.readouterr().err
    r = estimate_continuous(P, engine="cvodes")
    assert not r.success and r.status is po.Status.SIMULATION_FAILED


def test_stiff_hiv_adjoint_with_large_jumps():
    """HIV [MHV, eq. (30)]: jumps of 1e4 drive λ to ~1e5; the adjoint's seeds are scaled to
    the adjoint tolerance rule (with atol 1e-10 on the raw adjoint CVODES stopped with
    CV_TOO_MUCH_WORK)."""
    from pyomo_odeest.models import hiv_problem
    prob = hiv_problem(seed=1)
    cm = CvodesModel(prob, rtol=1e-8, atol=1e-10)
    u = prob.u0
    jumps, _ = cm.misfit.gradients(cm._forward(u)[1], u)
    assert np.abs(jumps).max() > 1e3
    g_adj, g_fwd = cm.gradient(u, "adjoint"), cm.gradient(u, "sensitivity")
    g_ref = ContinuousModel(prob, method="BDF", rtol=1e-10, atol=1e-12).gradient(u, "sensitivity")
    assert rel(g_adj, g_ref) < 1e-6 and rel(g_fwd, g_ref) < 1e-6
    lam = cm.adjoint(u, times=[0.0, 3.0, 14.0, 150.0])["lambda"].to_numpy()
    ref = ContinuousModel(prob, method="BDF", rtol=1e-10, atol=1e-12).adjoint(
        u, times=[0.0, 3.0, 14.0, 150.0])["lambda"].to_numpy()
    assert rel(lam, ref) < 1e-6


def test_models_of_one_experiment_share_their_compiled_functions(monkeypatch):
    """The starts of a multistart and a refit build a model of the same experiment
    again: the second builds no CasADi integrator (its functions are the first's, per
    tolerances) and gives the same values; other tolerances build their own."""
    import casadi
    problem = with_input(INPUTS["linear"])
    first = CvodesModel(problem, **TOL)
    u = first._u(None)
    times = np.linspace(0.0, 5.0, 41)                    # the result's fine grid
    values = (first.objective(u), first.gradient(u, "adjoint"), first.sensitivities(u)[2],
              first.simulate(u, times).to_numpy())
    built = []
    real = casadi.integrator
    monkeypatch.setattr(casadi, "integrator", lambda *a, **k: built.append(a[0]) or real(*a, **k))
    second = CvodesModel(problem, **TOL)
    again = (second.objective(u), second.gradient(u, "adjoint"), second.sensitivities(u)[2],
             second.simulate(u, times).to_numpy())
    assert built == []
    for a, b in zip(values, again):
        np.testing.assert_array_equal(a, b)
    CvodesModel(problem, rtol=1e-6, atol=1e-9).objective(u)
    assert built                                         # other tolerances: built anew


def test_experiments_with_other_inputs_keep_their_own_functions():
    """Experiments share one numeric cache; an experiment whose input differs (the same
    name, other values) is another key: each experiment's model gives the values of a
    model built on that experiment alone."""
    t = np.array([0.5, 1.5, 2.5, 3.5])
    data = pd.DataFrame({"x": 0.5 + 0.1 * t}, index=t)
    exps = [Experiment(f"e{i}", data, inputs={"F": PiecewiseConstant([0, 1.0, 2.0], v)})
            for i, v in enumerate(([0.0, 1.0, 0.2], [0.0, 3.0, 0.5]))]
    problem = EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.01, ub=5)],
                                rhs=lambda x, u, t: [-u.k * x.x + u.F], initial={"x": 1.0},
                                data=None, experiments=exps, sigma=0.1)
    shared = [CvodesModel(sp, **TOL) for sp in problem.experiment_problems]
    u = shared[0]._u(None)
    got = [(m.objective(u), m.sensitivities(u)[2]) for m in shared]
    assert got[0][0] != pytest.approx(got[1][0], rel=1e-3)
    for sp, (J, S) in zip(problem.experiment_problems, got):
        sp.__dict__["_numeric_cache"] = {}                # a cache of its own
        alone = CvodesModel(sp, **TOL)
        assert alone.objective(u) == pytest.approx(J, rel=1e-12)
        np.testing.assert_allclose(alone.sensitivities(u)[2], S, rtol=1e-10, atol=1e-14)



def test_the_step_limit_is_cvodes_own_and_grows_with_the_tolerance():
    """``max_num_steps=None``: 10,000 steps per output interval at rtol 1e-8 (CasADi's
    and AMICI's limit), times sqrt(1e-8 / rtol) at tighter tolerances (the check at the
    tolerances / 100 gets ten times as many), read when it integrates; a number is kept
    at every tolerance.  A model that needs more steps than its limit fails with
    CVODES's flag and the limit in the message, and integrates with a higher one."""
    from helpers import U_NL, likelihood_problem
    from pyomo_odeest.discretization.continuous._cvodes import MAX_NUM_STEPS
    prob = likelihood_problem()
    m = CvodesModel(prob)
    assert MAX_NUM_STEPS == 10_000 and m.max_num_steps == 10_000
    m.rtol = 1e-10
    assert m.max_num_steps == 100_000
    m.rtol = 1e-6
    assert m.max_num_steps == 10_000
    assert CvodesModel(prob, rtol=1e-12, max_num_steps=50).max_num_steps == 50
    assert CvodesModel(prob).settings["max_num_steps"] is None
    few = CvodesModel(prob, max_num_steps=3)
    with pytest.raises(IntegrationError, match=r"CV_TOO_MUCH_WORK.*max_num_steps=3\b"):
        few.objective(U_NL)
    assert np.isfinite(CvodesModel(prob).objective(U_NL))
