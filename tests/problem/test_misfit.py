"""The vectorised misfit equals the block's φ_j; the continuous backend honours R(u)."""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest
import sympy

from pyomo_odeest.problem import misfit_sym
from pyomo_odeest.discretization.continuous import ContinuousModel
from pyomo_odeest.problem import MeasurementMisfit
from pyomo_odeest.models import diagonal_linear_problem
from pyomo_odeest import EstimationProblem
from helpers import U_NL, likelihood_problem as nonlinear_problem


def _symbolic(prob, Xm, u):
    """Σφ_j, ∇_xφ_j, Σ∇_uφ_j and the Hessian blocks of each φ_j, by sympy from misfit_sym."""
    xs, us = list(prob.x_sym), list(prob.u_sym)
    val, Fx, Fu, H = 0.0, [], np.zeros(len(us)), []
    for j in range(len(prob.meas_times)):
        phi = sympy.sympify(misfit_sym(prob, j))
        at = {**dict(zip(xs, Xm[j])), **dict(zip(us, u))}
        val += float(phi.subs(at))
        Fx.append([float(sympy.diff(phi, s).subs(at)) for s in xs])
        Fu += [float(sympy.diff(phi, s).subs(at)) for s in us]
        H.append(np.array(sympy.hessian(phi, xs + us).subs(at), dtype=float))
    return val, np.array(Fx), Fu, H


@pytest.mark.parametrize("gaussian", [True, False])
def test_misfit_matches_block_objective(gaussian):
    prob = nonlinear_problem(gaussian)          # one value missing, g depends on u
    mf = MeasurementMisfit(prob)
    rng = np.random.default_rng(3)
    N, n, p = len(prob.meas_times), len(prob.states), len(prob.parameters)
    Xm = rng.uniform(0.3, 1.5, (N, n))
    val, Fx, Fu, H = _symbolic(prob, Xm, U_NL)
    assert mf.value(Xm, U_NL) == pytest.approx(val, rel=1e-13)
    gx, gu = mf.gradients(Xm, U_NL)
    np.testing.assert_allclose(gx, Fx, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gu, Fu, rtol=1e-12, atol=1e-13)
    S = rng.standard_normal((N, n, 3))
    V = rng.standard_normal((p, 3))
    M, Q = mf.directional_second(Xm, U_NL, S, V)
    M_ref = np.array([H[j][:n, :n] @ S[j] + H[j][:n, n:] @ V for j in range(N)])
    Q_ref = sum(H[j][n:, :n] @ S[j] + H[j][n:, n:] @ V for j in range(N))
    np.testing.assert_allclose(M, M_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Q, Q_ref, rtol=1e-12, atol=1e-12)


def test_continuous_objective_includes_penalty():
    """J, ∇J (adjoint, sensitivity) and the SOA Hessian carry R(u) = ρ‖u − ū‖²."""
    base = nonlinear_problem()
    prob = EstimationProblem(
        states=["x", "y"], parameters=base.parameters,
        rhs=lambda x, u, t: [-u.a * x.x + u.b * x.x * x.y + 0.1 * pyo.sin(u.c * t),
                             u.c * (1 - x.y) - u.a * u.b * x.x * x.y],
        initial={"x": "x0", "y": lambda u: u.b * u.x0**2},
        observe=lambda x, u, t: {"z1": x.x, "z2": x.x + u.c * x.y},
        data=base.data, loss=base.loss,
        penalty=lambda u: 3.0 * (u.a - 0.5)**2 + 2.0 * u.b * u.c)
    c0, c1 = ContinuousModel(base, method="DOP853"), ContinuousModel(prob, method="DOP853")
    u = np.asarray(U_NL, dtype=float)
    R = 3.0 * (u[0] - 0.5)**2 + 2.0 * u[1] * u[2]
    dR = np.array([6.0 * (u[0] - 0.5), 2.0 * u[2], 2.0 * u[1], 0.0])
    d2R = np.zeros((4, 4))
    d2R[0, 0] = 6.0
    d2R[1, 2] = d2R[2, 1] = 2.0
    assert c1.objective(u) - c0.objective(u) == pytest.approx(R, rel=1e-12)
    for m in ("adjoint", "sensitivity"):
        np.testing.assert_allclose(c1.gradient(u, m) - c0.gradient(u, m), dR, rtol=1e-9,
                                   atol=1e-9)
    np.testing.assert_allclose(c1.hessian(u) - c0.hessian(u), d2R, rtol=1e-8, atol=1e-8)
    g_fd = c1.gradient(u, "fd")
    assert np.linalg.norm(c1.gradient(u) - g_fd) / np.linalg.norm(g_fd) < 1e-5


def test_misfit_many_measurement_times():
    """200 measurement times, 30 observables: one lambdified g serves them all."""
    prob = diagonal_linear_problem(30, n_obs=200, seed=1)
    mf = MeasurementMisfit(prob)
    Xm = np.exp(np.outer(prob.meas_times, prob.true_values))
    gx, _ = mf.gradients(Xm, prob.true_values)
    # Σ = I: ∇_xφ_j = x_j − z̄_j
    np.testing.assert_allclose(gx, Xm - prob.data.to_numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_an_observable_that_is_not_finite_where_it_is_not_measured():
    """z = log10(y) with y(0) = 0 is -inf at t0, where only x is measured (PEtab's
    Bachmann): the objective, its gradient and the least-squares Jacobian stay finite
    and equal those of the problem without that entry, without a floating-point
    warning for the masked entry."""
    import pandas as pd
    import pyomo_odeest as po
    t = np.array([0.0, 0.5, 1.0, 2.0])
    data = pd.DataFrame({"x": [1.0, 0.62, 0.4, 0.15], "z": [np.nan, -0.5, -0.3, -0.2]},
                        index=t)

    def problem(log):
        return po.EstimationProblem(
            ["x", "y"], [po.Parameter("k", 0.9), po.Parameter("c", 0.5)],
            lambda x, u, t: [-u.k * x.x, u.c * x.x - 0.3 * x.y], {"x": 1.0, "y": 0.0},
            observe=lambda x, u, t: {"x": x.x,
                                     "z": (pyo.log10(x.y) if log else x.y)}, data=data)
    cm = ContinuousModel(problem(True))
    u = np.array([0.9, 0.5])
    J, g = cm.objective(u), cm.gradient(u, "sensitivity")
    assert np.isfinite(J) and np.all(np.isfinite(g))
    np.testing.assert_allclose(g, cm.gradient(u, "adjoint"), rtol=1e-5)
    _, Xm, Sm = cm.sensitivities(u)
    assert np.all(np.isfinite(cm.misfit.weighted_jacobian(Xm, u, Sm, np.arange(2))))
    H = cm.hessian(u)                     # second-order adjoint: the same masking
    h = 1e-6
    H_fd = np.column_stack([(cm.gradient(u + h * e, "adjoint") - cm.gradient(u - h * e, "adjoint"))
                            / (2 * h) for e in np.eye(2)])
    assert np.all(np.isfinite(H))
    np.testing.assert_allclose(H, H_fd, rtol=1e-4, atol=1e-6)
    res = po.estimate(problem(True), "continuous", optimizer="least_squares")
    assert res.success and np.isfinite(res.objective)
    # the discrete model of the reduced space evaluates the same misfit
    from pyomo_odeest.discretization.discrete import DiscreteModel
    dm = DiscreteModel(problem(True), "adams_pc", 3, steps_per_interval=8)
    g = dm.gradient(u, "adjoint")
    np.testing.assert_allclose(g, dm.gradient(u, "sensitivity"), rtol=1e-8)
    Hd = dm.hessian(u, "soa")
    np.testing.assert_allclose(Hd, dm.hessian(u, "adjoint_fd"), rtol=1e-4, atol=1e-6)
    assert np.isfinite(dm.objective(u)) and np.all(np.isfinite(dm.hessian(u, "gauss_newton")))


@pytest.mark.parametrize("diagonal", [True, False])
def test_a_diagonal_covariance_weighs_by_arrays(diagonal):
    """A diagonal Σ gives the A_j as arrays of their diagonals (``weights``), a full Σ
    keeps the matrices; A_j r_j and A_j S_j are the same products either way."""
    from pyomo_odeest import GaussianNLL
    cov = np.diag([0.5, 2.0, 1.5])
    if not diagonal:
        cov[0, 1] = cov[1, 0] = 0.3
    mf = MeasurementMisfit(diagonal_linear_problem(3, n_obs=5, loss=GaussianNLL(cov)))
    assert (mf.weights is not None) == diagonal
    rng = np.random.default_rng(2)
    r, S = rng.standard_normal((5, 3)), rng.standard_normal((5, 3, 2))
    np.testing.assert_allclose(mf.Ar(r), np.einsum("jab,jb->ja", mf.A, r), rtol=1e-15)
    np.testing.assert_allclose(mf.AS(S), np.einsum("jab,jbm->jam", mf.A, S), rtol=1e-15)
