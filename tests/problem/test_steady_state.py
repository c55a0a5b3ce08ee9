"""Pre-equilibration: the steady state, its derivatives, and fits through every approach.

The model: A <-> B at rates k1 (1 + L) A and k2 B (A + B conserved), and
C' = ks L A - kd C (no conservation).  Under the pre-equilibration value L_p
the steady state is, with T = A0 + B0,
A = k2 T / (k1 (1 + L_p) + k2),  B = T - A,  C = ks L_p A / kd.
"""
import pickle

import numpy as np
import pandas as pd
import pytest
import sympy
from scipy.integrate import solve_ivp

from pyomo_odeest import (DiscreteModel, EstimationProblem, Experiment, Parameter,
                          Preequilibration, SteadyStateError, estimate)
from pyomo_odeest.problem import conservation_laws

TRUE = {"k1": 0.7, "k2": 0.4, "ks": 1.5, "kd": 0.6}
LP = 0.1
TIMES = np.linspace(0.5, 8.0, 16)


def rhs(x, u, t):
    return [-u.k1 * (1 + u.L) * x.A + u.k2 * x.B, u.k1 * (1 + u.L) * x.A - u.k2 * x.B,
            u.ks * u.L * x.A - u.kd * x.C]


def closed_form(k1, k2, ks, kd, L=LP, total=1.0):
    A = k2 * total / (k1 * (1 + L) + k2)
    return np.array([A, total - A, ks * L * A / kd])


def ode(t, x, k1, k2, ks, kd, L):
    A, B, C = x
    return [-k1 * (1 + L) * A + k2 * B, k1 * (1 + L) * A - k2 * B, ks * L * A - kd * C]


def data(x0, times=TIMES, L=1.0):
    """Measurements of A and C from x0 (independent of the package: scipy at tight tolerances)."""
    sol = solve_ivp(ode, (0, times[-1]), x0, args=(*TRUE.values(), L), t_eval=times,
                    rtol=1e-12, atol=1e-13)
    return pd.DataFrame({"A": sol.y[0], "C": sol.y[2]}, index=times)


def parameters():
    return [Parameter("k1", 0.5, lb=0.01, ub=10), Parameter("k2", 0.3, lb=0.01, ub=10),
            Parameter("ks", 1.0, lb=0.01, ub=10), Parameter("kd", 0.8, lb=0.01, ub=10),
            Parameter("L", 1.0, fixed=True)]


def problem(pre=None, df=None):
    pre = Preequilibration(parameters={"L": LP}) if pre is None else pre
    df = data(closed_form(*TRUE.values())) if df is None else df
    return EstimationProblem(["A", "B", "C"], parameters(), rhs, {"A": 1.0, "B": 0.0, "C": 0.0},
                             df, preequilibration=pre)


def test_steady_state_and_implicit_derivatives_against_closed_form():
    P = problem()
    ss = P.steady_state
    assert [str(s) for s in ss.u_sym] == ["k1", "k2", "ks", "kd"]     # L is fixed at L_p
    W = ss.W / ss.W[0, 0]
    np.testing.assert_allclose(W, [[1.0, 1.0, 0.0]], atol=1e-12)      # A + B conserved
    u = np.array([0.9, 0.35, 1.2, 0.5])
    np.testing.assert_allclose(P.initial_state(np.r_[u, 1.0]), closed_form(*u), rtol=1e-13)
    # first and second derivatives: the closed form differentiated by sympy
    k = sympy.symbols("k1 k2 ks kd")
    cf = sympy.Matrix(closed_form(*k))
    J = np.array(cf.jacobian(k).subs(dict(zip(k, u))), dtype=float)
    np.testing.assert_allclose(ss.sensitivity(u), J, rtol=1e-12, atol=1e-14)
    H = np.array([[[float(sympy.diff(cf[i], k[a], k[b]).subs(dict(zip(k, u)))) for b in range(4)]
                   for a in range(4)] for i in range(3)])
    np.testing.assert_allclose(ss.second(u), H, rtol=1e-10, atol=1e-13)
    # the symbolic l(u) carries them: d l / d u through sympy (as every approach does)
    lu = sympy.lambdify((P.u_sym,), sympy.Matrix(P.l_sym).jacobian(P.u_sym))(np.r_[u, 1.0])
    np.testing.assert_allclose(np.asarray(lu, float)[:, :4], J, rtol=1e-12, atol=1e-14)


def test_no_conservation_law_and_override_by_parameter_name():
    """x' = p - q x: x_ss = p / q, no conservation law; the pre-equilibration uses p0."""
    P = EstimationProblem(
        ["x"], [Parameter("p", 2.0), Parameter("q", 0.5), Parameter("p0", 3.0)],
        lambda x, u, t: [u.p - u.q * x.x], {"x": 0.0},
        pd.DataFrame({"x": [1.0, 2.0]}, index=[1.0, 2.0]),
        preequilibration=Preequilibration(parameters={"p": "p0"}))
    assert P.steady_state.W.shape == (0, 1)
    np.testing.assert_allclose(P.initial_state([2.0, 0.25, 3.0]), [12.0], rtol=1e-14)
    np.testing.assert_allclose(P.steady_state.sensitivity([0.25, 3.0]), [[-48.0, 4.0]],
                               rtol=1e-12)


def test_conservation_laws_of_two_moieties():
    x = sympy.symbols("a b c d", real=True)
    k = sympy.symbols("k1 k2", real=True)
    f = [-k[0] * x[0] * x[1] + k[1] * x[2], -k[0] * x[0] * x[1] + k[1] * x[2],
         k[0] * x[0] * x[1] - k[1] * x[2], sympy.Integer(0)]
    W = conservation_laws(f, x, k, [1, 1, 0, 2], [1.0, 1.0])
    assert W.shape == (3, 4)
    # a + c, b + c and d are conserved: W spans them
    for w in ([1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]):
        r = np.asarray(w, float) - W.T @ (W @ np.asarray(w, float))
        assert np.linalg.norm(r) < 1e-12


def test_reset_states_and_rhs_override():
    P = problem(Preequilibration(parameters={"L": LP}, reset=["C"], initial={"A": 2.0}))
    u = np.r_[list(TRUE.values()), 1.0]
    x_ss = closed_form(*TRUE.values(), total=2.0)
    np.testing.assert_allclose(P.initial_state(u), [x_ss[0], x_ss[1], 0.0], rtol=1e-13)
    # other dynamics during pre-equilibration (A fed, B and C degraded): A = 1/k1, B = 1/k2
    Q = problem(Preequilibration(rhs=lambda x, u, t: [1.0 - u.k1 * x.A, u.k1 * x.A - u.k2 * x.B,
                                                      -u.kd * x.C]))
    np.testing.assert_allclose(Q.initial_state(u), [1 / 0.7, 1 / 0.4, 0.0], rtol=1e-13, atol=1e-15)


def test_no_steady_state_is_an_error():
    df = pd.DataFrame({"x": [1.0]}, index=[1.0])
    with pytest.raises(SteadyStateError, match="no steady state"):        # x' = p + x^2 > 0
        EstimationProblem(["x"], [Parameter("p", 1.0)], lambda x, u, t: [u.p + x.x ** 2],
                          {"x": 0.0}, df, preequilibration=Preequilibration())
    with pytest.raises(SteadyStateError, match="no steady state"):        # x = p is unstable
        EstimationProblem(["x"], [Parameter("p", 1.0)], lambda x, u, t: [x.x - u.p],
                          {"x": 0.0}, df, preequilibration=Preequilibration())
    with pytest.raises(SteadyStateError, match="singular"):    # x + V y conserved, V estimated
        EstimationProblem(["x", "y"], [Parameter("a", 1.0), Parameter("b", 2.0),
                                       Parameter("V", 3.0)],
                          lambda x, u, t: [-u.a * x.x + u.b * x.y, (u.a * x.x - u.b * x.y) / u.V],
                          {"x": 1.0, "y": 0.0}, pd.DataFrame({"x": [1.0]}, index=[1.0]),
                          preequilibration=Preequilibration())
    with pytest.raises(Exception, match="autonomous"):
        EstimationProblem(["x"], [Parameter("p", 1.0)], lambda x, u, t: [u.p - t * x.x],
                          {"x": 0.0}, df, preequilibration=Preequilibration())
    with pytest.raises(Exception, match="not states"):
        problem(Preequilibration(reset=["Z"]))


def test_pickled_problem_keeps_its_steady_state():
    P = problem()
    Q = pickle.loads(pickle.dumps(P))
    u = np.r_[0.9, 0.35, 1.2, 0.5, 1.0]
    np.testing.assert_allclose(Q.initial_state(u), closed_form(*u[:4]), rtol=1e-13)


def test_discrete_gradient_and_exact_hessian_through_the_steady_state():
    """The reduced space's adjoint gradient and second-order-adjoint Hessian carry the
    implicit-function derivatives of x_ss: against central differences."""
    P = problem()
    dm = DiscreteModel(P, "adams_pc", 4, steps_per_interval=4)
    u = np.r_[0.9, 0.35, 1.2, 0.5, 1.0]
    g = dm.gradient(u)
    H = dm.hessian(u, "soa")
    h = 1e-6
    for j in range(4):
        e = np.zeros(5)
        e[j] = h
        fd_g = (dm.objective(u + e) - dm.objective(u - e)) / (2 * h)
        assert abs(g[j] - fd_g) <= 1e-6 * (1 + abs(g[j]))
        fd_H = (dm.gradient(u + e) - dm.gradient(u - e)) / (2 * h)
        np.testing.assert_allclose(H[j, :4], fd_H[:4], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("approach", ["simultaneous", "reduced_space", "multiple_shooting",
                                      "continuous", "adaptive"])
def test_fits_recover_the_parameters(approach):
    """Exact data: the estimates are the true values up to the discretization error (the
    adaptive approach at its controller's eps, fit_tol=None and no certificate: a few
    percent)."""
    opts = ({} if approach == "continuous" else
            dict(fit_tol=None, certify=False) if approach == "adaptive" else
            dict(steps_per_interval=20))
    res = estimate(problem(), approach=approach, **opts)
    assert res.success, res.status
    np.testing.assert_allclose(res.estimates[list(TRUE)].to_numpy(), list(TRUE.values()),
                               rtol=3e-2 if approach == "adaptive" else 2e-4)


def test_experiments_with_their_own_preequilibration():
    """Two experiments: one pre-equilibrated at L_p, one at L = 0 with C reset to 0.3 and a
    local total A0; the reduced space recovers the parameters.  The problem pickles with
    the standard pickle (the experiments' pre-equilibrations were closures before) and
    its copy estimates the same."""
    x1 = closed_form(*TRUE.values())
    x2 = closed_form(*TRUE.values(), L=0.0, total=1.5)
    x2[2] = 0.3
    P = EstimationProblem(
        ["A", "B", "C"], parameters() + [Parameter("A0", 1.0, local=True)], rhs,
        {"A": "A0", "B": 0.0, "C": 0.0}, None, experiments=[
            Experiment("e1", data(x1), parameters={"A0": Parameter("A0", 1.0, fixed=True)},
                       preequilibration=Preequilibration(parameters={"L": LP})),
            Experiment("e2", data(x2), initial={"C": 0.3},
                       parameters={"A0": Parameter("A0", 1.2, lb=0.1, ub=5)},
                       preequilibration=Preequilibration(parameters={"L": 0.0}, reset=["C"]))])
    u = P.u0.copy()
    u[P.parameter_names.index("A0_e2")] = 1.5
    for sp, x in zip(P.experiment_problems, (x1, x2)):
        uu = u.copy()
        uu[:4] = list(TRUE.values())
        np.testing.assert_allclose(sp.initial_state(uu), x, rtol=1e-12)
    res = estimate(P, approach="reduced_space", steps_per_interval=20)
    assert res.success
    est = res.estimates
    np.testing.assert_allclose(est[list(TRUE)].to_numpy(), list(TRUE.values()), rtol=2e-4)
    assert est["A0_e2"] == pytest.approx(1.5, rel=2e-4)
    Q = pickle.loads(pickle.dumps(P))
    for sp, sq in zip(P.experiment_problems, Q.experiment_problems):
        np.testing.assert_array_equal(sq.initial_state(u), sp.initial_state(u))
    again = estimate(Q, approach="reduced_space", steps_per_interval=20)
    np.testing.assert_array_equal(again.x, res.x)
    back = pickle.loads(pickle.dumps(res.lean()))
    np.testing.assert_array_equal(back.x, res.x)


def test_unstable_root_rejected_and_flagged_in_the_block():
    """x' = -p (x-1)(x-2)(x-3) from 1.8: Newton goes to the unstable root 2, the simulation
    to 1; the accepted state is 1, and a block whose x_ss sits at 2 is flagged."""
    from pyomo_odeest import build_block
    from pyomo_odeest.transcription._initial_state import steady_state_mismatch
    P = EstimationProblem(["x"], [Parameter("p", 1.0)],
                          lambda x, u, t: [-u.p * (x.x - 1) * (x.x - 2) * (x.x - 3)], {"x": 1.8},
                          pd.DataFrame({"x": [1.0, 1.0]}, index=[1.0, 2.0]),
                          preequilibration=Preequilibration())
    assert P.initial_state([1.0])[0] == pytest.approx(1.0, abs=1e-12)
    b = build_block(P, "adams_pc", 2, steps_per_interval=2)
    assert b.x_ss["x"].value == pytest.approx(1.0, abs=1e-12)
    assert steady_state_mismatch(b, [1.0]) == []
    b.x_ss["x"].set_value(2.0)
    assert "not the stable state" in steady_state_mismatch(b, [1.0])[0]


def test_initial_hessian_of_steady_state_and_explicit_entries():
    """∂²l/∂u²: the steady-state rows from the implicit function theorem (against the closed
    form), a reset row with an explicit initial value ks² kd symbolically."""
    P = problem(Preequilibration(parameters={"L": LP}, reset=["C"]))
    P2 = EstimationProblem(["A", "B", "C"], parameters(), rhs,
                           {"A": 1.0, "B": 0.0, "C": lambda u: u.ks ** 2 * u.kd},
                           data(closed_form(*TRUE.values())),
                           preequilibration=Preequilibration(parameters={"L": LP}, reset=["C"]))
    u = np.array([0.9, 0.35, 1.2, 0.5, 1.0])
    k = sympy.symbols("k1 k2 ks kd")
    cf = closed_form(*k)
    H_cf = np.array([[[float(sympy.diff(cf[i], k[a], k[b]).subs(dict(zip(k, u))))
                       for b in range(4)] for a in range(4)] for i in range(2)])
    for prob in (P, P2):
        H = prob.initial_hessian()(u)
        assert H.shape == (3, 5, 5)
        np.testing.assert_allclose(H[:2, :4, :4], H_cf, rtol=1e-10, atol=1e-13)
        assert np.all(H[:, 4, :] == 0) and np.all(H[:, :, 4] == 0)     # L: fixed at L_p
    np.testing.assert_allclose(P.initial_hessian()(u)[2], 0.0)
    C = np.zeros((5, 5))
    C[2, 2], C[2, 3], C[3, 2] = 2 * u[3], 2 * u[2], 2 * u[2]            # d²(ks² kd)
    np.testing.assert_allclose(P2.initial_hessian()(u)[2], C, rtol=1e-14)


def test_states_that_start_at_zero_and_stay_there_are_fixed():
    """An inhibitor I absent during pre-equilibration (I_p = 0) and its complex
    Q' = kq I A that nothing consumes: Q's column of f_x is zero, so the steady state is
    not isolated along Q (Newton's Jacobian is singular).  {I, Q} start at 0 and stay
    there, so the steady state has I = Q = 0 for every parameter value: the closed form
    for A, B, C, zero derivatives for I and Q, and the fits of the experiment (I given
    after the pre-equilibration) run through it."""
    from pyomo_odeest.problem._steady_state import zero_face

    def rhs5(x, u, t):
        return rhs(x, u, t) + [-u.kq * x.I * x.A, u.kq * x.I * x.A]

    params = parameters() + [Parameter("kq", 0.3, fixed=True)]
    true = closed_form(*TRUE.values())
    x0 = np.r_[true, 0.5, 0.0]                     # I = 0.5 added after the pre-equilibration

    def ode5(t, x):
        k1, k2, ks, kd = TRUE.values()
        A, B, C, I, Q = x
        return ode(t, x[:3], k1, k2, ks, kd, 1.0) + [-0.3 * I * A, 0.3 * I * A]
    sol = solve_ivp(ode5, (0, TIMES[-1]), x0, t_eval=TIMES, rtol=1e-12, atol=1e-13)
    df = pd.DataFrame({"A": sol.y[0], "C": sol.y[2], "Q": sol.y[4]}, index=TIMES)
    P = EstimationProblem(["A", "B", "C", "I", "Q"], params, rhs5,
                          {"A": 1.0, "B": 0.0, "C": 0.0, "I": 0.5, "Q": 0.0}, df,
                          preequilibration=Preequilibration(parameters={"L": LP},
                                                            initial={"I": 0.0}, reset=["I"]))
    ss = P.steady_state
    assert zero_face(ss.f_sym, ss.x0_sym, ss.x_sym) == (3, 4) == ss.zero
    assert "1 conservation laws, 2 states fixed at 0" in repr(ss)
    assert [str(s) for s in ss.u_sym] == ["k1", "k2", "ks", "kd", "kq"]
    u = np.array([0.9, 0.35, 1.2, 0.5])
    np.testing.assert_allclose(ss.state(np.r_[u, 0.3]), np.r_[closed_form(*u), 0.0, 0.0],
                               rtol=1e-13, atol=1e-15)
    S = ss.sensitivity(np.r_[u, 0.3])
    np.testing.assert_allclose(S[3:], 0.0, atol=1e-15)
    np.testing.assert_allclose(S[:, 4], 0.0, atol=1e-15)
    k = sympy.symbols("k1 k2 ks kd")
    J = np.array(sympy.Matrix(closed_form(*k)).jacobian(k).subs(dict(zip(k, u))), dtype=float)
    np.testing.assert_allclose(S[:3, :4], J, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(P.initial_state(np.r_[u, 1.0, 0.3]),
                               np.r_[closed_form(*u), 0.5, 0.0], rtol=1e-13, atol=1e-15)
    for approach in ("continuous", "reduced_space", "simultaneous"):
        res = estimate(P, approach)
        assert res.success, (approach, res.status)
        np.testing.assert_allclose(res.estimates[list(TRUE)], list(TRUE.values()), rtol=2e-3)


@pytest.mark.extras
def test_zero_face_laws_are_the_face_dynamics_own():
    """Isensee's pre-equilibration has 15 states on its zero face and conservation laws
    that differ only on the face (AC with and without forskolin, phosphorylated or not):
    restricted to the states off the face they nearly cancel, and orthonormalizing the
    restrictions made a "law" the dynamics do not keep (violated by 2.7e-4 along the
    trajectory; a steady state with |f| = 1.5e-5, the nominal NLL 0.089 off).  The laws
    found on the face itself give the steady state a long simulation reaches."""
    import os
    pytest.importorskip("petab")
    pytest.importorskip("libsbml")
    from pyomo_odeest.petab_io import petab_problem, read_petab
    from pyomo_odeest.symbolic import lambdify
    folder = os.path.join(os.path.dirname(__file__), "..", "data", "petab", "Isensee_JCB2018")
    first = read_petab(folder).conditions[0]
    sp = petab_problem(folder, conditions=[first]).problem
    ss = sp.steady_state
    assert len(ss.zero) == 15
    u = np.array([sp.u0[list(sp.u_sym).index(s)] for s in ss.u_sym])
    f = lambdify((tuple(ss.x_sym), tuple(ss.u_sym)), list(ss.f_sym), "numpy")
    x0 = np.array(lambdify((tuple(ss.u_sym),), list(ss.x0_sym), "numpy")(u), dtype=float)
    sim = solve_ivp(lambda t, x: np.asarray(f(x, u), dtype=float), (0, 1e6), x0,
                    method="LSODA", rtol=1e-10, atol=1e-14).y[:, -1]
    xss = ss.state(u)
    assert np.max(np.abs(np.asarray(f(xss, u), dtype=float))) < 1e-14
    np.testing.assert_allclose(xss, sim, rtol=0, atol=1e-9 * np.max(np.abs(sim)))
