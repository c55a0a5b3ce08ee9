"""Continuous-time derivatives of the misfit [MHV]: every method against every other.

Tolerance tiers (norm-wise relative errors, parameters scaled by |u| where
their magnitudes differ): adjoint vs forward sensitivity 1e-6, vs central
finite differences 1e-5, second-order adjoint Hessian vs finite differences of
adjoint gradients 1e-5, closed forms of the diagonal linear model 1e-8.
"""

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest
import sympy

import pyomo_odeest as po
from pyomo_odeest.problem import misfit_constant, misfit_sym
from pyomo_odeest.approaches import estimate_continuous
from pyomo_odeest.discretization.continuous import ContinuousModel, IntegrationError
from pyomo_odeest.models import (diagonal_linear_exact_gradient, diagonal_linear_exact_hessian,
                                 diagonal_linear_problem)
from pyomo_odeest.models import HIV_ESTIMATED, HIV_PARAMETERS, HIV_STATES, hiv_problem, hiv_simulate
from pyomo_odeest.models._hiv import hiv_initial, hiv_rhs



from helpers import U_NL, likelihood_problem as nonlinear_problem, rel_norm as rel


@pytest.fixture(autouse=True)
def scipy_engine(monkeypatch):
    """This module tests the SciPy path (its tolerances and stopping rules): the
    estimators' default engine is SciPy here; tests/test_cvodes.py tests CVODES."""
    import pyomo_odeest.discretization.continuous._cvodes as cv
    monkeypatch.setattr(cv, "cvodes_available", lambda: False)





def robertson_problem():
    """Robertson's stiff kinetics (k2 = 3e7): A and C measured, B never."""
    t = np.array([0.1, 0.5, 1.0, 2.0, 5.0, 10.0])
    data = pd.DataFrame({"A": [0.9965, 0.9841, 0.9700, 0.9450, 0.8880, 0.8320],
                         "C": [0.0035, 0.0158, 0.0300, 0.0550, 0.1120, 0.1680]}, index=t)
    return po.EstimationProblem(
        states=["A", "B", "C"],
        parameters=[po.Parameter("k1", 0.05), po.Parameter("k2", 2e7), po.Parameter("k3", 1.2e4)],
        rhs=lambda x, u, t: [-u.k1 * x.A + u.k3 * x.B * x.C,
                             u.k1 * x.A - u.k3 * x.B * x.C - u.k2 * x.B**2, u.k2 * x.B**2],
        initial={"A": 1.0, "B": 0.0, "C": 0.0}, data=data, sigma=0.01)




@pytest.fixture(scope="module")
def hiv1():
    """HIV problem, seed 1 (5 % noise, perturbed start); shared, never modified."""
    return hiv_problem(seed=1)


# ---------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["LSODA", "DOP853"])
@pytest.mark.parametrize("gaussian", [True, False])
def test_gradients_agree_nonstiff(method, gaussian):
    """Adjoint = sensitivity (1e-6) = central FD (1e-5); Gaussian NLL with full Σ, a missing
    value, x0 = l(u) and g depending on u."""
    prob = nonlinear_problem(gaussian)
    assert prob.mask.sum() == 11
    cm = ContinuousModel(prob, method=method, fd_step=1e-6 if method == "DOP853" else 1e-4)
    ga = cm.gradient(U_NL, "adjoint")
    gs = cm.gradient(U_NL, "sensitivity")
    gf = cm.gradient(U_NL, "fd")
    assert np.all(np.abs(ga) > 1e-3)          # every parameter, x0 included, matters
    assert rel(ga, gs) < 1e-6
    assert rel(ga, gf) < 1e-5
    # the initial-condition term l_u^T λ(t0) is a real part of the gradient
    adj = cm.adjoint(U_NL)
    ic = cm.l_u.dense(U_NL).T @ adj["lambda0"]
    assert abs(ic[3]) > 0.1 * abs(ga[3]) and abs(ic[1]) > 0


@pytest.mark.parametrize("method", ["BDF", "Radau"])
def test_gradients_agree_stiff_robertson(method):
    """Stiff: after each jump λ has a boundary layer of width ~1/k2; the quadrature of
    f_u^T λ must resolve it (on the integrator's steps), as the step-size control did."""
    prob = robertson_problem()
    u = prob.u0
    cm = ContinuousModel(prob, method=method)
    ga, gs, gf = (cm.gradient(u, m) * u for m in ("adjoint", "sensitivity", "fd"))
    assert rel(ga, gs) < 1e-6
    assert rel(ga, gf) < 1e-5


def test_gradients_agree_stiff_hiv_bdf(hiv1):
    """HIV model, BDF; adjoint vs sensitivity for all 11 parameters (fixed ones too, x0 = l(u)
    depends on 9 of them), FD for the free ones; scaled by |u| (1.6e-5 ... 641)."""
    prob = hiv1
    u = prob.u0
    cm = ContinuousModel(prob, method="BDF")
    ga, gs = (cm.gradient(u, m) * u for m in ("adjoint", "sensitivity"))
    assert rel(ga, gs) < 1e-6
    free = np.flatnonzero(prob.free_mask)
    gf = cm.gradient(u, "fd", index=free) * u[free]
    assert rel(ga[free], gf) < 1e-5
    assert rel(cm.gradient(u, "sensitivity", index=free) * u[free], gs[free]) < 1e-8


def linear_time_varying_problem():
    r"""x1' = -a (1 + 0.8 sin 2t) x1 + b,  x2' = a x1 - c x2 + b cos t, x(0) = (x0, 0):
    f_x free of x but not of t (the backward system needs no x(t)); f_u depends on x;
    12 measurement times (11 jumps inside the horizon), one value missing."""
    t = np.linspace(0.0, 6.0, 12)
    z1 = 1.2 * np.exp(-0.4 * t) + 0.3
    z2 = 0.5 * np.sin(t) + 0.6
    z2[4] = np.nan
    data = pd.DataFrame({"z1": z1, "z2": z2}, index=t)
    return po.EstimationProblem(
        states=["x1", "x2"],
        parameters=[po.Parameter("a", 0.6), po.Parameter("b", 0.3), po.Parameter("c", 0.9),
                    po.Parameter("x0", 1.1)],
        rhs=lambda x, u, t: [-u.a * (1 + 0.8 * pyo.sin(2 * t)) * x.x1 + u.b,
                             u.a * x.x1 - u.c * x.x2 + u.b * pyo.cos(t)],
        initial={"x1": "x0", "x2": 0.0},
        observe=lambda x, u, t: {"z1": x.x1, "z2": x.x2},
        data=data, sigma=0.05)


@pytest.mark.parametrize("method", ["LSODA", "BDF", "Radau", "DOP853"])
def test_adjoint_many_jumps_every_integrator(method):
    """The adjoint (n unknowns backward, quadrature afterwards) on a linear time-varying and
    on a linear time-invariant model with many measurement times: = sensitivities (1e-8),
    = central FD (1e-6), = the closed form of the diagonal model (1e-8)."""
    prob = linear_time_varying_problem()
    cm = ContinuousModel(prob, method=method, fd_step=1e-5)
    assert not cm._fx_has_x and not cm._fx_const
    u = prob.u0
    ga, gs, gf = (cm.gradient(u, m) for m in ("adjoint", "sensitivity", "fd"))
    assert np.all(np.abs(ga) > 1e-2)
    assert rel(ga, gs) < 1e-8
    assert rel(ga, gf) < 1e-6
    dprob = diagonal_linear_problem(5, n_obs=9, seed=3)
    du = dprob.true_values + 0.03
    dm = ContinuousModel(dprob, method=method)
    assert dm._fx_const
    assert rel(dm.gradient(du), diagonal_linear_exact_gradient(du, dprob)) < 1e-8


@pytest.mark.parametrize("method", ["LSODA", "BDF", "Radau", "RK45"])
@pytest.mark.parametrize("span", [(0.0, 7.0), (7.0, 0.0)])
def test_dense_values_equal_ode_solution(method, span):
    """The vectorised evaluation of LSODA's and BDF's interpolants (all steps at once) gives
    OdeSolution's numbers; other interpolants go through OdeSolution itself."""
    from scipy.integrate import solve_ivp
    from pyomo_odeest.discretization.continuous._functions import _dense_values

    def f(t, y):
        return np.array([-0.5 * y[0] + np.sin(3 * t), y[0] - 2 * y[1], -y[2] * y[0]])
    sol = solve_ivp(f, span, [1.0, 0.3, 2.0], method=method, rtol=1e-9, atol=1e-12,
                    dense_output=True)
    t = np.random.default_rng(0).uniform(0.0, 7.0, 400)
    ref = sol.sol(t)
    assert len(sol.t) > 20
    assert np.max(np.abs(_dense_values(sol.sol, t) - ref)) < 1e-12 * np.max(np.abs(ref))


def test_adaptive_quadrature_rule_and_layers():
    """Kronrod 7 exact to degree 11; a layer of width 1e-7 at an edge is integrated to
    1e-10 once the edges resolve it, and an unresolvable integrand raises."""
    from pyomo_odeest.discretization.continuous._functions import _GK7, _adaptive_quadrature
    x, wk, wg = _GK7
    for d in range(12):
        assert abs(wk @ x**d - (1 - (-1) ** (d + 1)) / (d + 1)) < 1e-14
    for d in range(6):
        assert abs(wg @ x**d - (1 - (-1) ** (d + 1)) / (d + 1)) < 1e-14
    w = 1e-7

    def fun(t):
        return np.vstack([np.exp(-(2.0 - t) / w) + np.cos(t), t**2])
    exact = np.array([w * (1 - np.exp(-2.0 / w)) + np.sin(2.0), 8.0 / 3.0])
    layer = 2.0 - w * np.geomspace(1e3, 1e-3, 40)           # steps an integrator would take
    edges = np.concatenate([[0.0], np.linspace(0.1, 1.9, 10), layer, [2.0]])
    got = _adaptive_quadrature(fun, edges, 1e-12, 1e-14, 0.1)
    assert rel(got, exact) < 1e-10
    with pytest.raises(IntegrationError, match="panels"):
        _adaptive_quadrature(lambda t: np.atleast_2d(np.sign(np.sin(1e4 * t))),
                             [0.0, 1.0], 1e-12, 1e-14, 0.1, max_panels=50)


@pytest.mark.parametrize("sparse_jacobian", [10**6, 0])
def test_augmented_jacobians_are_exact(sparse_jacobian):
    """The Jacobians handed to BDF for x, λ (the adjoint: n unknowns, its quadrature is
    computed afterwards), [x, S] and [λ, μ, Q] equal FD of their rhs, dense and scipy.sparse
    alike; results do not depend on the format."""
    import scipy.sparse as sp
    prob = nonlinear_problem()
    cm = ContinuousModel(prob, method="BDF", sparse_jacobian=sparse_jacobian)
    solve = cm._solve
    seen = {}
    rng = np.random.default_rng(0)

    def spy(fun, jac, t_span, y0, dense=True, atol=None):
        sol = solve(fun, jac, t_span, y0, dense, atol)
        t = 0.5 * (t_span[0] + t_span[1])
        y = sol.y[:, -1] + 0.1 * rng.standard_normal(len(y0))
        J = jac(t, y)
        assert sp.issparse(J) == (sparse_jacobian == 0)
        J = J.toarray() if sp.issparse(J) else J
        h = 1e-6
        Jf = np.array([(fun(t, y + h * e) - fun(t, y - h * e)) / (2 * h)
                       for e in np.eye(len(y))]).T
        seen[len(y)] = max(seen.get(len(y), 0), rel(J, Jf))
        return sol
    cm._solve = spy
    g = cm.gradient(U_NL)
    gs = cm.gradient(U_NL, "sensitivity")
    H = cm.hessian(U_NL)
    assert set(seen) == {2, 10, 26}           # x and λ, [x, S], [λ, μ, Q]
    assert max(seen.values()) < 1e-8
    ref = ContinuousModel(prob, method="BDF")
    assert rel(g, ref.gradient(U_NL)) < 1e-12 and rel(gs, g) < 1e-6
    assert rel(H, ref.hessian(U_NL)) < 1e-12


def test_adjoint_jumps_at_measurement_times():
    r"""λ(τ_j⁻) − λ(τ_j⁺) = ∇_xφ_j and λ(T⁺) = 0 [MHV, eq. (15)]."""
    prob = nonlinear_problem()
    cm = ContinuousModel(prob, method="DOP853")
    tau = prob.meas_times
    eps = 1e-9
    times = np.concatenate([tau[1:], tau[1:] + eps])
    lam = cm.adjoint(U_NL, times=times)["lambda"].to_numpy()
    k = len(tau) - 1
    jumps = lam[:k] - lam[k:]
    _, Xm = cm._forward(U_NL)
    expected = []                              # ∇_xφ_j straight from the block's φ_j
    for j in range(1, len(tau)):
        phi = sympy.sympify(misfit_sym(prob, j))
        at = {**dict(zip(prob.x_sym, Xm[j])), **dict(zip(prob.u_sym, U_NL))}
        expected.append([float(sympy.diff(phi, s).subs(at)) for s in prob.x_sym])
    np.testing.assert_allclose(jumps, expected, rtol=1e-6, atol=1e-6)
    assert np.allclose(lam[-1], 0.0)          # just after T = τ_N


# ---------------------------------------------------------------------------
# Hessians
# ---------------------------------------------------------------------------
def test_soa_hessian_nonlinear():
    prob = nonlinear_problem()
    cm = ContinuousModel(prob, method="LSODA")
    H = cm.hessian(U_NL, "soa")
    Hc = cm.hessian(U_NL, "soa", block=1)          # strictly column by column
    Hf = cm.hessian(U_NL, "adjoint_fd")
    assert rel(H, H.T) < 1e-8
    assert rel(Hc, H) < 1e-8
    assert rel(H, Hf) < 1e-5
    assert np.all(np.abs(np.diag(H)) > 1e-3)
    v = np.array([0.3, -1.0, 0.5, 2.0])
    assert rel(cm.hessian_vector(U_NL, v), H @ v) < 1e-8


def test_soa_hessian_hiv_free_parameters(hiv1):
    prob = hiv1
    u = prob.u0
    free = np.flatnonzero(prob.free_mask)
    cm = ContinuousModel(prob, method="LSODA")
    S = np.outer(u[free], u[free])
    H = cm.hessian(u, "soa", index=free) * S
    Hf = cm.hessian(u, "adjoint_fd", index=free) * S
    assert H.shape == (len(HIV_ESTIMATED), len(HIV_ESTIMATED))
    assert rel(H, H.T) < 1e-8
    assert rel(H, Hf) < 1e-5


def test_fd_hessians_agree_roughly():
    prob = nonlinear_problem(gaussian=False)
    cm = ContinuousModel(prob, method="DOP853", hessian_fd_step=1e-3)
    H = cm.hessian(U_NL, "soa")
    assert rel(cm.hessian(U_NL, "sensitivity_fd"), H) < 1e-5
    assert rel(cm.hessian(U_NL, "fd"), H) < 1e-4


# ---------------------------------------------------------------------------
# diagonal linear model: closed forms [MHV, eqs. (24)-(29)]
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["LSODA", "DOP853"])
def test_diagonal_linear_closed_form(method):
    prob = diagonal_linear_problem(4, n_obs=11, seed=5)
    u = prob.true_values + 0.05          # data perturbed by (27), u off the truth
    g = diagonal_linear_exact_gradient(u, prob)
    H = diagonal_linear_exact_hessian(u, prob)
    cm = ContinuousModel(prob, method=method)
    for m in ("adjoint", "sensitivity", "fd"):
        assert rel(cm.gradient(u, m), g) < 1e-8, m
    assert rel(cm.hessian(u, "soa"), H) < 1e-8
    # objective: Gaussian NLL with Σ = I, including the constant (N p / 2) log 2π
    X = np.exp(np.outer(prob.meas_times, u))
    J = 0.5 * np.sum((X - prob.data.to_numpy()) ** 2) + misfit_constant(prob)
    assert abs(cm.objective(u) - J) < 1e-8 * abs(J)
    assert misfit_constant(prob) == pytest.approx(0.5 * 11 * 4 * np.log(2 * np.pi))


def test_diagonal_linear_stiff_integrator_least_squares_with_gap():
    """BDF, LeastSquares weights, one missing measurement: closed forms still hold."""
    prob0 = diagonal_linear_problem(3, n_obs=6, T=10.0, seed=2)
    data = prob0.data.copy()
    data.iloc[2, 1] = np.nan
    prob = po.EstimationProblem(states=prob0.states, parameters=prob0.parameters,
                                rhs=lambda x, u, t: [u[k] * x[k] for k in range(3)],
                                initial={s: 1.0 for s in prob0.states}, data=data,
                                weights=2.0)
    assert isinstance(prob.loss, po.LeastSquares) and prob.mask.sum() == 17
    u = np.array([-0.5, -0.3, -0.8])
    cm = ContinuousModel(prob, method="BDF")
    g = diagonal_linear_exact_gradient(u, prob)
    assert rel(cm.gradient(u, "adjoint"), g) < 1e-8
    assert rel(cm.gradient(u, "sensitivity"), g) < 1e-8
    assert rel(cm.hessian(u, "soa"), diagonal_linear_exact_hessian(u, prob)) < 1e-8


def test_diagonal_linear_problem_follows_the_seed():
    prob = diagonal_linear_problem(6, n_obs=11, seed=0)
    assert np.all((prob.true_values >= -1.1) & (prob.true_values <= -0.1))       # eq. (26)
    np.testing.assert_allclose(prob.meas_times, np.linspace(0, 100, 11))
    clean = np.exp(np.outer(prob.meas_times, prob.true_values))
    d = prob.data.to_numpy() - clean                                               # eq. (27)
    assert d.min() >= 0 and d.max() <= 0.1 * clean.max() and d.max() > 0.05
    assert np.all(prob.initial_state(prob.u0) == 1.0)


@pytest.mark.parametrize("optimizer,hessian,gradient", [
    ("ipopt", None, "adjoint"), ("ipopt", "soa", "adjoint"), ("ipopt", None, "sensitivity"),
    ("L-BFGS-B", None, "adjoint"), ("trust-constr", "soa", "adjoint")])
def test_estimation_recovers_diagonal_linear_parameters(optimizer, hessian, gradient):
    prob = diagonal_linear_problem(3, n_obs=11, T=10.0, perturb=False, seed=3)
    res = estimate_continuous(prob, optimizer=optimizer, hessian=hessian, gradient=gradient)
    assert res.success, res.status
    assert res.approach == "continuous"
    np.testing.assert_allclose(res.x, prob.true_values, atol=1e-5)
    assert res.objective == pytest.approx(misfit_constant(prob), abs=1e-8)
    assert res.objective < res.extra["objective_start"]


# ---------------------------------------------------------------------------
# HIV model [MHV, eq. (30), Table 1]
# ---------------------------------------------------------------------------
def test_hiv_model_definition():
    assert len(HIV_PARAMETERS) == 11 and len(HIV_STATES) == 5
    prob = hiv_problem(seed=0, noise=0.0)
    assert prob.obs_names == ["V", "T"]
    truth = np.array(list(HIV_PARAMETERS.values()))
    # initial state: the untreated steady state, a function of the parameters
    untreated = dict(HIV_PARAMETERS, eta_NRTI=0.0, eta_PI=0.0)

    class U:
        pass
    uu = U()
    uu.__dict__.update(untreated)
    x0 = hiv_initial(uu)
    xx = U()
    xx.__dict__.update({s: float(x0[s]) for s in HIV_STATES})
    assert np.max(np.abs(hiv_rhs(xx, uu, 0.0))) < 1e-12
    np.testing.assert_allclose(prob.initial_state(truth), [float(x0[s]) for s in HIV_STATES])
    # noise-free data are the model's observations
    cm = ContinuousModel(prob, method="LSODA")
    np.testing.assert_allclose(cm.observations(truth).to_numpy(), prob.data.to_numpy(),
                               rtol=1e-7)
    np.testing.assert_allclose(hiv_simulate().to_numpy(), prob.data.to_numpy())
    assert cm.objective(truth) < 1e-10
    assert [p.name for p in prob.parameters if not p.fixed] == list(HIV_ESTIMATED)
    # the gradient vanishes there (up to the integration error; ~1e4 at a perturbed start)
    assert np.linalg.norm(cm.gradient(truth)[prob.free_mask] * truth[prob.free_mask]) < 1e-3


def test_hiv_identifiability_of_the_estimated_subset():
    """Fisher information of the weighted residuals w.r.t. log-parameters (forward sensitivities):
    all 11 parameters are not identifiable from V and T, the six estimated ones are."""
    prob = hiv_problem(seed=0, noise=0.0)
    truth = np.array(list(HIV_PARAMETERS.values()))
    cm = ContinuousModel(prob, method="LSODA")
    _, Xm, Sm = cm.sensitivities(truth)
    P = np.array([[0, 0, 0, 1, 1], [1, 1, 1, 0, 0]], dtype=float)        # V, T
    W = np.sqrt(prob.weights)
    A = np.vstack([W[j][:, None] * (P @ Sm[j]) * truth for j in range(len(Sm))])
    F = A.T @ A
    ev = np.linalg.eigvalsh(F)
    assert ev[-1] / ev[0] > 1e10
    free = prob.free_mask
    ev6 = np.linalg.eigvalsh(F[np.ix_(free, free)])
    assert ev6[0] > 50 and ev6[-1] / ev6[0] < 1e3


def test_estimate_continuous_hiv_from_perturbed_start(hiv1):
    prob = hiv1
    truth = np.array(list(prob.true_values.values()))
    free = prob.free_mask
    assert np.max(np.abs(np.log(prob.u0[free] / truth[free]))) > 0.1      # really perturbed
    res = estimate_continuous(prob, optimizer="ipopt", rtol=1e-8, atol=1e-10)
    assert res.success, res.status
    J0 = res.extra["objective_start"]
    assert res.objective < 0.01 * J0
    # 24 measurements with 5 % noise: J ≈ χ²(18) at the optimum
    assert res.objective < 20
    # estimates close to the truth (identifiable parameters, 5 % noise)
    assert np.max(np.abs(np.log(res.x[free] / truth[free]))) < 0.2
    np.testing.assert_array_equal(res.x[~free], truth[~free])
    # first-order optimality relative to the start
    g = res.extra["gradient"].to_numpy()[free] * res.x[free]
    cm = res.backend.model
    assert cm.rtol == 1e-8
    g0 = cm.gradient(prob.u0)[free] * prob.u0[free]
    assert np.max(np.abs(g)) < 1e-4 * np.max(np.abs(g0))
    # result fields
    assert list(res.states.columns) == HIV_STATES and len(res.states) > 200
    np.testing.assert_array_equal(res.fitted.index, prob.meas_times)
    assert res.residuals.shape == prob.data.shape
    assert set(res.timings) >= {"build_s", "solve_s", "total_s"}
    assert res.evaluations["gradient"] >= 1 and res.iterations > 0


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------
def test_bad_arguments_and_integration_failure():
    prob = nonlinear_problem()
    with pytest.raises(ValueError, match="method"):
        ContinuousModel(prob, method="Euler")
    cm = ContinuousModel(prob)
    with pytest.raises(ValueError, match="gradient method"):
        cm.gradient(U_NL, "magic")
    with pytest.raises(ValueError, match="hessian method"):
        cm.hessian(U_NL, "magic")
    with pytest.raises(ValueError, match="length 4"):
        cm.objective(U_NL[:3])
    t = np.array([0.5, 2.0])
    blow = po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 0.1)],
                                rhs=lambda x, u, t: [u.k * x.x**2], initial={"x": 1.0},
                                data=pd.DataFrame({"x": [1.1, 1.3]}, index=t))
    cm = ContinuousModel(blow, method="LSODA")
    assert np.isfinite(cm.objective([0.1]))
    with pytest.raises(IntegrationError):
        cm.objective([4.0])                    # x = 1/(1 - 4t) blows up at t = 0.25
    with pytest.raises(IntegrationError):
        cm.gradient([4.0], "sensitivity")


def test_continuous_approach_in_the_comparison():
    """compare_approaches runs the continuous backend beside the block; the discrete
    estimate approaches the continuous one as h shrinks [GM-conv]."""
    from pyomo_odeest import compare_approaches
    prob = nonlinear_problem()
    free = prob.free_mask
    table, res = compare_approaches(prob, ("continuous", "simultaneous"),
                                    qmax=4, max_step=0.05)
    assert table["success"].all(), table["status"]
    uc, us = res["continuous"].x[free], res["simultaneous"].x[free]
    _, res_coarse = compare_approaches(prob, ("simultaneous",), qmax=4, max_step=0.2)
    d_fine = np.max(np.abs(uc - us))
    d_coarse = np.max(np.abs(uc - res_coarse["simultaneous"].x[free]))
    assert d_fine < 1e-4 and d_fine < d_coarse
    assert table.loc["continuous", "objective"] == pytest.approx(
        table.loc["simultaneous", "objective"], rel=1e-4)


def test_complex_power_is_an_evaluation_error():
    """A negative base to a non-integer power (Python gives a complex number) is an
    integration failure, which Ipopt's evaluator turns into an evaluation error (the line
    search backs off) instead of a TypeError that stops the fit."""
    from pyomo_odeest.approaches._continuous import _IpoptProblem, _ScaledObjective
    from pyomo_odeest import EvaluationError
    t = np.array([0.5, 1.0])
    prob = po.EstimationProblem(states=["x"], parameters=[po.Parameter("x0", 1.0)],
                                rhs=lambda x, u, t: [-x.x**1.5], initial={"x": "x0"},
                                data=pd.DataFrame({"x": [0.6, 0.45]}, index=t))
    cm = ContinuousModel(prob)
    assert np.isfinite(cm.objective([1.0]))
    with pytest.raises(IntegrationError, match="complex value"):
        cm.objective([-1.0])
    obj = _ScaledObjective(cm, np.array([1.0]), np.array([True]), np.ones(1), "adjoint", None)
    ev = _IpoptProblem(obj, np.ones(1), np.full(1, -2.0), np.full(1, 2.0))
    with pytest.raises(EvaluationError):
        ev.objective(np.array([-1.0]))


# ---------------------------------------------------------------------------
# no wrong answer reported as success
# ---------------------------------------------------------------------------
def _blow_up_problem(k0):
    t = np.array([0.5, 2.0])
    return po.EstimationProblem(states=["x"],
                                parameters=[po.Parameter("k", k0, lb=0.0, ub=10.0)],
                                rhs=lambda x, u, t: [u.k * x.x**2], initial={"x": 1.0},
                                data=pd.DataFrame({"x": [1.1, 1.3]}, index=t))


@pytest.mark.parametrize("optimizer", ["ipopt", "L-BFGS-B"])
def test_start_that_cannot_be_simulated_is_a_failed_result(optimizer):
    """x = 1/(1 - 4t) blows up before the last measurement: a failed result, not a
    traceback, with either optimizer."""
    res = po.estimate(_blow_up_problem(4.0), "continuous", optimizer=optimizer)
    assert not res.success and res.status is po.Status.SIMULATION_FAILED
    assert res.iterations == 0 and np.isnan(res.objective)


def test_scipy_trial_points_that_cannot_be_simulated_are_backed_off():
    """L-BFGS-B's trial points may leave the region where the ODE has a solution on the
    horizon; those evaluations count as J = ∞ and the line search backs off."""
    prob = _blow_up_problem(0.1)
    prob.data.loc[2.0, "x"] = 40.0                   # pulls k towards the blow-up at 0.5
    res = po.estimate(prob, "continuous", optimizer="L-BFGS-B")
    assert np.isfinite(res.objective) and res.x[0] < 0.5


def test_loose_stopping_test_is_not_reported_as_success():
    """L-BFGS-B told to stop on a 10 % relative decrease ends far from stationarity:
    the success is withdrawn (projected gradient 0.94 against the limit 0.01)."""
    prob = nonlinear_problem()
    ok = po.estimate(prob, "continuous", optimizer="L-BFGS-B")
    assert ok.success and ok.extra["stationarity"]["projected_gradient"] < 1e-4
    res = po.estimate(prob, "continuous", optimizer="L-BFGS-B", options=dict(ftol=1e-1))
    assert not res.success and res.status is po.Status.NOT_STATIONARY
    st = res.extra["stationarity"]
    assert st["projected_gradient"] > 10 * st["limit"]


def test_inexact_gradient_convergence_is_not_reported_as_success():
    """Ipopt on central differences with a 5 % step, allowed to stop at a loose
    acceptable level, claims convergence where the exact gradient, recomputed at tighter
    tolerances, is 0.16: not a success; with the default step the same fit is a success."""
    prob = nonlinear_problem()
    cm = ContinuousModel(prob)
    cm.fd_step = 1e-4
    good = po.estimate(prob, "continuous", gradient="fd", model=cm)
    assert good.success
    cm = ContinuousModel(prob)
    cm.fd_step = 0.05
    res = po.estimate(prob, "continuous", gradient="fd", model=cm,
                      options={"acceptable_tol": 0.1, "acceptable_iter": 3, "max_iter": 100})
    assert not res.success
    # where Ipopt stops depends on the inexact gradients (acceptable level here; without the
    # loose acceptable level the iteration limit): whenever it claims convergence, the check withdraws it
    if res.message.split(";")[0] in ("Solve_Succeeded", "Solved_To_Acceptable_Level"):
        assert res.status is po.Status.NOT_STATIONARY
        assert res.extra["stationarity"]["projected_gradient"] > 0.1
    assert cm.rtol == 1e-10 and cm.atol == 1e-12          # tolerances restored


@pytest.mark.parametrize("limit, factor", [(1e-11, 10.0), (1e-10, 1.0)])
def test_stationarity_check_falls_back_to_tolerances_the_integrator_meets(limit, factor):
    """A gradient that cannot be integrated at the tolerances / 100 (CVODES's adjoint
    exceeding its step limit on a stiff problem) is checked at / 10, or at the fit's own
    tolerances, and the message says which; not an infinite projected gradient."""
    from pyomo_odeest.discretization.continuous import IntegrationError

    class FailsWhenTight(ContinuousModel):
        def gradient(self, u, *args, **kwargs):
            if self.rtol < limit:
                raise IntegrationError("too much work")
            return super().gradient(u, *args, **kwargs)
    prob = nonlinear_problem()
    res = po.estimate(prob, "continuous", optimizer="L-BFGS-B", model=FailsWhenTight(prob),
                      options=dict(ftol=1e-1))
    st = res.extra["stationarity"]
    assert st["tolerance_factor"] == factor and np.isfinite(st["projected_gradient"])
    assert res.status is po.Status.NOT_STATIONARY
    assert f"integration tolerances / {factor:g})" in res.message


def test_gauss_newton_decrement_is_the_newton_decrement_of_the_gauss_newton_model():
    """Away from the bounds the predicted decrease is ½ gᵀ(DᵀD)⁻¹g with g = Dᵀρ; at the
    optimum it vanishes (to the fit's accuracy), and it is invariant to the parameters'
    scaling, unlike the gradient."""
    from pyomo_odeest.approaches._continuous import _SumOfSquares

    prob = nonlinear_problem()
    best = po.estimate(prob, "continuous", optimizer="least_squares")
    assert best.success
    cm = ContinuousModel(prob)

    class Obj:                      # the scaled free parameters w = u / s of the estimators
        def __init__(self, s):
            self.free, self.u_full, self.s = prob.free_mask, prob.u0, s

        def u(self, w):
            return np.asarray(w) * self.s
    far = np.inf * np.ones(cm.p)
    for s in (np.ones(cm.p), np.r_[10.0, 1e-3, np.ones(cm.p - 2)]):
        sq = _SumOfSquares(cm, Obj(s), -far, far)
        w = (U_NL * 1.2) / s
        r, D = sq.residuals(w), sq.jacobian(w)
        g = D.T @ r
        dec, jc = sq.decrement(w, -far, far)
        assert jc == pytest.approx(0.5 * r @ r, rel=1e-14)
        assert dec == pytest.approx(0.5 * g @ np.linalg.solve(D.T @ D, g), rel=1e-8)
        if s[0] == 1.0:
            first = dec
        else:
            assert dec == pytest.approx(first, rel=1e-8)          # same in any scaling
        w_hat = best.estimates.to_numpy() / s
        dec, jc = sq.decrement(w_hat, -far, far)
        assert dec < 1e-9 * jc


def test_gauss_newton_check_that_cannot_be_evaluated_keeps_not_stationary(monkeypatch):
    """Where the Gauss-Newton decrease cannot be computed (the sensitivities fail at the
    tighter tolerances), the gradient test's verdict stands: not stationary."""
    from pyomo_odeest.approaches._continuous import _SumOfSquares
    from pyomo_odeest.nlp import EvaluationError

    def fails(self, *args):
        raise EvaluationError("injected")
    monkeypatch.setattr(_SumOfSquares, "decrement", fails)
    res = po.estimate(nonlinear_problem(), "continuous", optimizer="L-BFGS-B",
                      options=dict(ftol=1e-1))
    st = res.extra["stationarity"]
    assert res.status is po.Status.NOT_STATIONARY and st["gauss_newton_decrement"] == np.inf
    assert "Gauss-Newton predicted decrease not found" in res.message


# ---------------------------------------------------------------------------
# Gauss-Newton trust region (optimizer='least_squares')
# ---------------------------------------------------------------------------
def test_weighted_residuals_are_the_misfit_and_their_jacobian_is_exact():
    """ρ_j = W_j r_j with W_jᵀW_j = 2A_j (full covariance, one value missing): ½Σ‖ρ_j‖² is
    the misfit, Jᵀρ its gradient, and J agrees with central differences of ρ."""
    prob = nonlinear_problem()
    cm = ContinuousModel(prob)
    mf = cm.misfit
    _, Xm, Sm = cm.sensitivities(U_NL)
    rho = mf.weighted_residuals(Xm, U_NL)
    assert 0.5 * np.sum(rho**2) == pytest.approx(mf.value(Xm, U_NL), rel=1e-13)
    assert np.all(rho[np.isnan(prob.data.to_numpy())] == 0.0)
    Jr = mf.weighted_jacobian(Xm, U_NL, Sm, np.arange(cm.p))
    np.testing.assert_allclose(np.einsum("jak,ja->k", Jr, rho),
                               cm.gradient(U_NL, "sensitivity"), rtol=1e-12)
    for k in range(cm.p):
        h = 1e-5
        up, um = U_NL.copy(), U_NL.copy()
        up[k] += h
        um[k] -= h
        fd = (mf.weighted_residuals(cm._forward(up)[1], up)
              - mf.weighted_residuals(cm._forward(um)[1], um)) / (2 * h)
        np.testing.assert_allclose(Jr[:, :, k], fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("gaussian", [True, False])
def test_least_squares_reaches_the_optimum_of_ipopt(gaussian):
    prob = nonlinear_problem(gaussian)
    a = po.estimate(prob, "continuous")
    b = po.estimate(prob, "continuous", optimizer="least_squares")
    assert a.success and b.success, (a.status, b.status)
    assert "least_squares" in b.method
    # Ipopt may stop at its acceptable level on these adjoint gradients (measured: x within
    # 9e-6, the objective within 1.2e-9 relative)
    np.testing.assert_allclose(b.x, a.x, rtol=2e-5)
    assert b.objective == pytest.approx(a.objective, rel=1e-8)


def test_least_squares_needs_no_adjoint_where_the_backward_solve_fails(monkeypatch):
    """The trust region works on forward sensitivities; its start and stationarity
    checks use them too (``gradient='sensitivity'`` unless the user names one), so a
    backward solve that fails (CVODES's CVodeB out of steps on a stiff adjoint, where
    the forward solves succeed) does not refuse the start.  A gradient the user names
    is used and its failure reported."""
    from pyomo_odeest.discretization.continuous import IntegrationError
    from pyomo_odeest.discretization.continuous._first_order import FirstOrder

    def no_adjoint(self, u=None, times=None):
        raise IntegrationError("CVODES failed: CVodeB returned CV_TOO_MUCH_WORK")
    prob = nonlinear_problem()
    ref = po.estimate(prob, "continuous", optimizer="least_squares")
    monkeypatch.setattr(FirstOrder, "adjoint", no_adjoint)
    r = po.estimate(prob, "continuous", optimizer="least_squares")
    assert r.success and "gradient=sensitivity" in r.method, (r.status, r.message)
    np.testing.assert_allclose(r.x, ref.x, rtol=1e-10)
    assert np.all(np.isfinite(r.extra["gradient"]))
    named = po.estimate(prob, "continuous", optimizer="least_squares", gradient="adjoint")
    assert named.status is po.Status.SIMULATION_FAILED and "CVodeB" in named.message


def test_a_least_squares_continuation_stops_where_it_stalls():
    """Without ``stall`` the trust region runs to its own stop; with it, it stops at the
    accepted iterate where the last STALL_WINDOW iterations lowered J by less than
    ``stall`` (the continuation after an ftol stop passes the decrement limit), with the
    status STALLED and that iterate.  A stall larger than any decrease stops it at the
    STALL_WINDOW + 1-th accepted iterate."""
    from pyomo_odeest.approaches._base import SolveClock
    from pyomo_odeest.approaches._continuous import (STALL_WINDOW, STALLED, _least_squares,
                                                     _ScaledObjective)
    prob = nonlinear_problem()
    cm = ContinuousModel(prob)
    free = prob.free_mask
    u0 = 2.5 * np.asarray(prob.u0, dtype=float)
    s = np.abs(u0[free])
    obj = _ScaledObjective(cm, u0, free, s, "sensitivity", None)
    lb, ub = prob.bounds(free)
    args = (cm, obj, u0[free] / s, lb / s, ub / s, {"ftol": None, "xtol": 1e-15,
                                                    "gtol": 1e-15}, False)
    free_run = _least_squares(*args, SolveClock(None, False))
    assert free_run.status != STALLED and free_run.njev > STALL_WINDOW + 1
    stalled = _least_squares(*args, SolveClock(None, False), stall=1e10)
    # stopped at the (STALL_WINDOW + 1)-th accepted iterate, before its Jacobian
    assert stalled.status == STALLED and stalled.njev == STALL_WINDOW
    assert "stalled: J decreased by" in stalled.message
    J = lambda w: cm.objective(obj.u(w))                       # noqa: E731
    assert J(free_run.x) <= J(stalled.x) < J(u0[free] / s)


def _quadratic_penalty(u):
    """Gaussian priors on a and c, and a coupling of c with x0: a quadratic R(u) >= 0."""
    return 0.5 * ((u.a - 0.7) / 0.1) ** 2 + 2.0 * (u.c - u.x0 - 0.3) ** 2


def _squares_are_the_penalty(mf, pq, cols, base, points):
    """½‖ρ(u_F)‖² - R(u) is one constant at every point, and ρ's Jacobian is exact."""
    gaps = []
    for uF in points:
        u = base.copy()
        u[cols] = uF
        r = pq.residuals(uF)
        gaps.append(0.5 * r @ r - mf.penalty(u))
        D, h = pq.jacobian(uF), 1e-6
        fd = np.column_stack([(pq.residuals(uF + h * e) - pq.residuals(uF - h * e)) / (2 * h)
                              for e in np.eye(len(cols))])
        np.testing.assert_allclose(D, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gaps, gaps[0], atol=1e-10 * max(1.0, abs(gaps[0])))


def test_quadratic_penalty_is_a_sum_of_squares_of_the_free_parameters():
    """R(u) = R(m) + ½‖L(u_F - m)‖² with the other parameters at their values (here x0,
    which R couples to c, and b, which R does not hold), for any free u_F."""
    prob = nonlinear_problem(penalty=_quadratic_penalty)
    mf = ContinuousModel(prob).misfit
    cols, base = np.array([0, 2]), np.array([0.7, 0.4, 1.3, 0.9])
    pq = mf.penalty_residuals(cols, base)
    assert pq.n_terms == 0 and pq.L.shape == (2, 2)          # linear rows only
    u_m = base.copy()
    u_m[cols] = pq.m
    rng = np.random.default_rng(3)
    for _ in range(5):
        u = base.copy()
        u[cols] = rng.normal(size=2)
        squares = 0.5 * np.sum((pq.L @ (u[cols] - pq.m)) ** 2)
        assert mf.penalty(u) == pytest.approx(mf.penalty(u_m) + squares, rel=1e-12)
    # b alone: R does not depend on it (no row), and it is bounded below
    assert mf.penalty_residuals(np.array([1]), base).size == 0


def _bounded_penalty(u):
    """Terms bounded below only within bounds: log(b) (the log sigma of an estimated
    sigma), a linear term in x0 beside a Gaussian prior on a, a quartic, a cosine."""
    return (0.5 * ((u.a - 0.7) / 0.1) ** 2 + 2 * pyo.log(u.b) + 0.3 * u.x0
            + (u.c - 1) ** 4 - 0.1 * pyo.cos(u.c) + 4 * pyo.log(u.b * pyo.exp(u.a)))


def test_penalty_bounded_below_in_the_bounds_is_a_sum_of_squares():
    """Every term not a convex quadratic is bounded below on the box by interval
    arithmetic and becomes a square-root row: the squares equal R up to a constant,
    with an exact Jacobian; without bounds those terms are refused."""
    from pyomo_odeest.problem._misfit import interval, penalty_squares
    prob = nonlinear_problem(penalty=_bounded_penalty)
    mf = ContinuousModel(prob).misfit
    cols, base = np.arange(4), U_NL.copy()
    lb, ub = np.array([0.1, 0.05, 0.5, -1.0]), np.array([2.0, 3.0, 2.0, 4.0])
    pq = mf.penalty_residuals(cols, base, lb, ub)
    assert pq is not None and pq.L.shape[0] == 1 and pq.n_terms >= 3
    rng = np.random.default_rng(5)
    _squares_are_the_penalty(mf, pq, cols, base, rng.uniform(lb, ub, size=(6, 4)))
    assert mf.penalty_residuals(cols, base) is None             # log(b) for b -> 0
    assert mf.penalty_residuals(cols, base, np.r_[lb[:3], -np.inf], ub) is None  # 0.3 x0
    # the bounds hold every value of the expression on the box
    a, b = prob.u_sym[:2]
    box = {a: (-1.0, 2.0), b: (0.5, 3.0)}
    for e in (a * b - a ** 2, 10 ** a / b, (a - b) ** 3, -4 * sympy.log(b * (1 + a ** 2)),
              (b - 0.5) ** 0.5 * a, sympy.exp(-a) * b ** -2):
        lo, hi = interval(e, box)
        f = sympy.lambdify((a, b), e)
        vals = [f(x, y) for x in np.linspace(-1, 2, 31) for y in np.linspace(0.5, 3, 31)]
        assert lo <= min(vals) + 1e-12 and max(vals) <= hi + 1e-12
    assert interval(sympy.log(a), box)[0] == -np.inf
    assert interval(b ** sympy.oo, box) == (-np.inf, np.inf)          # not bounded: no error
    assert interval(sympy.exp(1000 * a), box) == (pytest.approx(np.exp(-1000.0)), np.inf)
    assert interval(sympy.cos(a) - sympy.sin(b), box) == (-2.0, 2.0)
    assert penalty_squares(-a ** 2, prob.u_sym, [0], U_NL) is None       # concave
    concave = penalty_squares(-a ** 2 + b, prob.u_sym, [0], U_NL, [-1.0], [2.0])
    assert concave.n_terms == 1 and concave.L.shape == (0, 1)


def test_least_squares_with_bounded_penalty_reaches_the_optimum_of_ipopt():
    """The square-root rows are exact in value and gradient: the trust region reaches
    Ipopt's optimum of the same J (their curvature is the Gauss-Newton one)."""
    prob = nonlinear_problem(penalty=_bounded_penalty)
    bounds = dict(a=(0.1, 2.0), b=(0.05, 3.0), c=(0.5, 2.0), x0=(-1.0, 4.0))
    for p in prob.parameters:
        p.lb, p.ub = bounds[p.name]
    a = po.estimate(prob, "continuous")
    b = po.estimate(prob, "continuous", optimizer="least_squares")
    assert a.success and b.success, (a.status, b.status)
    np.testing.assert_allclose(b.x, a.x, rtol=2e-5, atol=1e-7)
    # b is at its lower bound with dJ/db = 6/b = 120; the trust region's iterates stay
    # strictly inside the bounds (measured: a few 1e-9 from it, 5e-7 in J)
    assert b.x[1] == pytest.approx(0.05, abs=1e-8)
    assert b.objective == pytest.approx(a.objective, abs=2e-6)


def test_least_squares_with_gaussian_priors_reaches_the_optimum_of_ipopt():
    """A quadratic penalty (PEtab's parameterScaleNormal priors) adds its rows to the
    residuals: the trust region reaches Ipopt's optimum of the same J."""
    prob = nonlinear_problem(penalty=_quadratic_penalty)
    a = po.estimate(prob, "continuous")
    b = po.estimate(prob, "continuous", optimizer="least_squares")
    assert a.success and b.success, (a.status, b.status)
    np.testing.assert_allclose(b.x, a.x, rtol=2e-5)
    assert b.objective == pytest.approx(a.objective, rel=1e-8)


def test_least_squares_refuses_what_is_not_a_sum_of_squares(monkeypatch):
    prob = nonlinear_problem()
    # not bounded below without bounds on the parameters
    for penalty in (lambda u: -(u.a - 0.7) ** 2, lambda u: 0.5 * (u.a - 0.7) ** 2 + u.b,
                    lambda u: pyo.log(u.a)):
        with pytest.raises(po.ProblemError, match="penalty"):
            po.estimate(nonlinear_problem(penalty=penalty), "continuous",
                        optimizer="least_squares")
    with pytest.raises(ValueError, match="hessian=None"):
        po.estimate(prob, "continuous", optimizer="least_squares", hessian="soa")
    with pytest.raises(ValueError, match=r"does not take the options \['tol'\]"):
        po.estimate(prob, "continuous", optimizer="least_squares", options={"tol": 1e-8})
    with pytest.raises(ValueError, match=r"does not take the options \['loss'\]"):
        po.estimate(prob, "continuous", optimizer="least_squares", options={"loss": "soft_l1"})
    # a penalty not bounded below is refused before any model is built
    # (a PEtab problem with priors and log-sigma terms over 123 conditions: 10 minutes)
    from pyomo_odeest.approaches import _continuous as _estimation

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")
    monkeypatch.setattr(_estimation, "continuous_model", no_model)
    with pytest.raises(po.ProblemError, match="penalty"):
        po.estimate(nonlinear_problem(penalty=lambda u: pyo.log(u.a) + (u.b - 1) ** 2),
                    "continuous", optimizer="least_squares")


def test_least_squares_in_the_comparison():
    from pyomo_odeest import compare_approaches
    table, res = compare_approaches(nonlinear_problem(),
                                    ("continuous", ("continuous_least_squares", "continuous",
                                              {"optimizer": "least_squares"})))
    assert table["success"].all(), table["status"]
    np.testing.assert_allclose(res["continuous_least_squares"].x, res["continuous"].x,
                               rtol=2e-6)


def test_least_squares_jacobian_failure_is_a_failed_result(monkeypatch):
    """Forward sensitivities that fail at an accepted point (the residuals were finite
    there) end the fit at that point with a failed status, not a traceback."""
    prob = nonlinear_problem()
    orig = ContinuousModel.sensitivities
    calls = []

    def failing(self, *a, **k):
        calls.append(1)
        if len(calls) == 4:        # the start's gradient, then the trust region's third
            raise IntegrationError("injected")
        return orig(self, *a, **k)
    monkeypatch.setattr(ContinuousModel, "sensitivities", failing)
    res = po.estimate(prob, "continuous", optimizer="least_squares")
    assert not res.success and res.status is po.Status.FAILED
    assert res.message.startswith("Jacobian_Failed") and "injected" in res.message
    assert np.isfinite(res.objective) and res.iterations == 2


def test_a_continuation_that_lowers_j_without_converging_keeps_its_stationarity_numbers(
        monkeypatch):
    """Ipopt's acceptable stop off the minimum is continued; where the continuation ends
    at its iteration limit having realized the Gauss-Newton decrease, its point is the
    result (max_iterations, not a success), with the stationarity check at that point
    in ``extra['stationarity']``, not left out."""
    from pyomo_odeest.approaches._continuous import ContinuousApproach
    t = np.linspace(0.5, 4.0, 8)
    P = po.EstimationProblem(["x"], [po.Parameter("k", 0.5, lb=0.01)],
                             lambda x, u, t: [-u.k * x.x], {"x": 2.0},
                             pd.DataFrame({"x": 2.0 * np.exp(-0.7 * t)}, index=t), sigma=0.05)
    real, calls = ContinuousApproach._ipopt, []

    def scripted(b, cfg, options, w0, method):
        out = real(b, cfg, options, w0, method)
        calls.append(out)
        if len(calls) == 1:            # an acceptable stop 20 % off the minimum
            out.x = out.x * 1.2
            out.status = po.Status.ACCEPTABLE
        else:                          # the continuation reaches it, at its limit
            out.status = po.Status.MAX_ITERATIONS
        return out

    monkeypatch.setattr(ContinuousApproach, "_ipopt", staticmethod(scripted))
    res = po.estimate(P, "continuous", optimizer="ipopt")
    assert len(calls) == 2
    assert res.status is po.Status.MAX_ITERATIONS and not res.success
    assert res.estimates["k"] == pytest.approx(0.7, rel=1e-5)
    st = res.extra["stationarity"]
    assert st is not None and st["rule"] == "decrement"
    assert st["gauss_newton_decrement"] <= st["decrement_limit"]


@pytest.mark.parametrize("several", [False, True])
def test_adjoint_swept_on_first_read(several):
    """The continuous result's adjoint is the backend's, swept when first read: equal to
    an eager sweep of the same model at the states' times, kept once read, and still
    deferred (then equal) in a pickled copy."""
    import pickle
    from helpers import three_experiments_problem
    from pyomo_odeest.discretization._experiments import experiment_models
    prob = three_experiments_problem() if several else nonlinear_problem()
    res = estimate_continuous(prob, optimizer="ipopt")
    assert res.__dict__.get("_adjoint_deferred") and res.__dict__.get("_adjoint") is None
    copy = pickle.loads(pickle.dumps(res))
    assert copy.__dict__.get("_adjoint_deferred")
    lam = res.adjoint
    assert not res.__dict__.get("_adjoint_deferred") and res.adjoint is lam
    names = prob.experiment_names
    models = experiment_models(res.backend.model)
    for k, m in enumerate(models):
        frame = lam.loc[names[k]] if names else lam
        states = res.states.loc[names[k]] if names else res.states
        assert np.array_equal(frame.index.to_numpy(float), states.index.to_numpy(float))
        eager = m.adjoint(res.x, times=frame.index.to_numpy(float))["lambda"]
        assert np.array_equal(frame.to_numpy(), eager.to_numpy())
    assert np.array_equal(copy.adjoint.to_numpy(), lam.to_numpy())
    assert np.array_equal(copy.adjoint.index.to_frame().to_numpy(),
                          lam.index.to_frame().to_numpy())


def test_least_squares_stops_at_the_level_of_a_known_minimum():
    """With ``known_minimum`` (J of a minimum found already, e.g. by another start) the
    trust region stops at the first accepted iterate whose J is within the decrement
    limit of it: from a start where it runs on, it ends there, a fit where the
    stationarity test holds, in fewer iterations; with a level far above the minimum it
    stops early and the stationarity test calls the point not stationary.  The level
    is compared with J as reported (loss constant and penalty included)."""
    from pyomo_odeest.nlp import decrement_limit
    prob = nonlinear_problem()
    opts = dict(approach="continuous", optimizer="least_squares", engine="scipy")
    ref = po.estimate(prob, **opts)
    assert ref.status == po.Status.CONVERGED
    u1 = 2.5 * np.asarray(prob.u0, dtype=float)
    free = po.estimate(prob, u0=u1, **opts)
    assert free.status == po.Status.CONVERGED
    known = po.estimate(prob, u0=u1, known_minimum=ref.objective, **opts)
    jc = ref.objective - misfit_constant(prob)
    assert known.status == po.Status.CONVERGED
    assert "stopped at the level of a known minimum" in known.message
    assert known.objective <= ref.objective + decrement_limit(jc) * (1 + 1e-9)
    assert known.iterations < free.iterations
    high = po.estimate(prob, u0=u1, known_minimum=ref.objective + 0.5 * abs(jc), **opts)
    assert high.status == po.Status.NOT_STATIONARY
    assert "stopped at the level of a known minimum" in high.message
    assert ref.objective < high.objective <= ref.objective + 0.5 * abs(jc) + decrement_limit(jc)
    # a refit (profile point, bootstrap sample) has its own minimum: not the start's level
    assert "known_minimum" not in known._refit.options
    refit = known.refit(u1)
    assert "stopped at the level" not in refit.message
    assert refit.objective == pytest.approx(free.objective, rel=1e-6)
    with pytest.raises(ValueError, match="option of optimizer 'least_squares'"):
        po.estimate(prob, approach="continuous", known_minimum=ref.objective)
    for bad in ("x", np.nan, True):
        with pytest.raises(po.ProblemError, match="known_minimum must be a finite number"):
            po.estimate(prob, known_minimum=bad, **opts)


def test_least_squares_says_when_its_trust_region_collapses_off_a_stationary_point(monkeypatch):
    """A least squares whose trust region shrinks to ``xtol`` at a point the stationarity
    test finds not stationary (PEtab's Borghans problem at rtol 1e-8:
    ``tests/petab_io/test_petab.py``) is ``not_stationary`` with the reason: J is not
    smooth there at the fit's integration tolerances, and the tolerances to refit at.
    A fit that converges says nothing of the kind."""
    from types import SimpleNamespace
    from pyomo_odeest.approaches import _continuous
    prob = nonlinear_problem()
    opts = dict(approach="continuous", optimizer="least_squares", engine="scipy")
    ok = po.estimate(prob, **opts)
    assert ok.status == po.Status.CONVERGED and "not smooth" not in ok.message

    def collapsed(cm, obj, w0, *args, **kw):       # every solve: an xtol stop where it began
        return SimpleNamespace(x=np.array(w0, dtype=float), status=3, success=True, njev=1,
                               message="`xtol` termination condition is satisfied.")
    monkeypatch.setattr(_continuous, "_least_squares", collapsed)
    res = po.estimate(prob, rtol=1e-7, atol=1e-9, **opts)
    assert res.status == po.Status.NOT_STATIONARY
    assert res.extra["stationarity"]["collapsed"]
    assert "not smooth there at the integration tolerances of the fit (rtol=1e-07" in res.message
    assert "rtol=1e-09, atol=1e-11" in res.message
    floor = po.estimate(prob, rtol=1e-13, atol=1e-15, **opts)       # nothing tighter to try
    assert floor.extra["stationarity"]["collapsed"]
    assert "the tolerances are at their floor: try another start" in floor.message
