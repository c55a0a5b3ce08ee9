"""Tests for pyomo_odeest.optimizers (CG / BFGS with secant and strong-Wolfe line searches)."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from pyomo_odeest.optimizers import (CG_BETAS, LINE_SEARCHES, OptimizeResult, line_search_secant,
                                     line_search_wolfe, minimize_bfgs, minimize_cg)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def spd_quadratic(n, cond, seed):
    """0.5 x'Ax - b'x with A = Q diag(linspace(1, cond)) Q', Q random orthogonal."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = Q @ np.diag(np.linspace(1.0, cond, n)) @ Q.T
    A = 0.5 * (A + A.T)
    b = rng.standard_normal(n)
    return A, b, (lambda x: 0.5 * x @ A @ x - b @ x), (lambda x: A @ x - b)


def run(method, fun, grad, x0, ls, **kw):
    if method == "BFGS":
        return minimize_bfgs(fun, grad, x0, line_search=ls, **kw)
    return minimize_cg(fun, grad, x0, beta=method, line_search=ls, **kw)


METHODS = list(CG_BETAS) + ["BFGS"]
ROSEN_X0 = {"rosen2": np.array([-1.2, 1.0]), "chained10": np.tile([-1.2, 1.0], 5)}


# ---------------------------------------------------------------------------
# finite termination on quadratics (exact = secant line search)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("beta", CG_BETAS)
@pytest.mark.parametrize("n,cond,seed", [(5, 10.0, 0), (5, 1e3, 1), (10, 10.0, 2), (10, 1e3, 3)])
def test_cg_finite_termination_on_quadratic(beta, n, cond, seed):
    A, b, f, g = spd_quadratic(n, cond, seed)
    x0 = np.zeros(n)
    g0 = np.max(np.abs(g(x0)))
    r = minimize_cg(f, g, x0, beta=beta, line_search="secant", gtol=1e-8 * g0, ftol=0.0)
    assert r.success, r.message
    assert r.nit <= n, f"{beta}: {r.nit} iterations > n = {n}"
    assert np.max(np.abs(g(r.x))) <= 1e-8 * g0
    np.testing.assert_allclose(r.x, np.linalg.solve(A, b), rtol=0, atol=1e-6)


@pytest.mark.parametrize("n,cond,seed", [(5, 1e3, 1), (10, 1e3, 3)])
def test_bfgs_finite_termination_on_quadratic(n, cond, seed):
    """BFGS with exact line searches on a quadratic also terminates in ≤ n steps."""
    A, b, f, g = spd_quadratic(n, cond, seed)
    x0 = np.zeros(n)
    g0 = np.max(np.abs(g(x0)))
    r = minimize_bfgs(f, g, x0, line_search="secant", gtol=1e-8 * g0, ftol=0.0)
    assert r.success and r.nit <= n, (r.nit, r.message)


def test_steepest_descent_like_restart_does_not_terminate():
    """Control: with restart=1 (steepest descent) the n-step termination is lost."""
    A, b, f, g = spd_quadratic(10, 1e3, 3)
    x0 = np.zeros(10)
    g0 = np.max(np.abs(g(x0)))
    r = minimize_cg(f, g, x0, beta="FR", line_search="secant", gtol=1e-8 * g0, ftol=0.0,
                    restart=1, max_iter=50)
    assert r.nit > 10


# ---------------------------------------------------------------------------
# Rosenbrock
# ---------------------------------------------------------------------------
_ROSEN_CACHE = {}


def rosen_run(method, problem, ls):
    key = (method, problem, ls)
    if key not in _ROSEN_CACHE:
        _ROSEN_CACHE[key] = run(method, rosen, rosen_der, ROSEN_X0[problem], ls,
                                gtol=1e-9, ftol=0.0, max_iter=5000)
    return _ROSEN_CACHE[key]


@pytest.mark.parametrize("ls", LINE_SEARCHES)
@pytest.mark.parametrize("problem", list(ROSEN_X0))
@pytest.mark.parametrize("method", METHODS)
def test_rosenbrock_reaches_minimizer(method, problem, ls):
    r = rosen_run(method, problem, ls)
    assert isinstance(r, OptimizeResult)
    assert r.success, r.message
    np.testing.assert_allclose(r.x, 1.0, rtol=0, atol=1e-6)


@pytest.mark.parametrize("ls", LINE_SEARCHES)
@pytest.mark.parametrize("problem", list(ROSEN_X0))
def test_bfgs_fewer_iterations_than_fr(problem, ls):
    fr, bf = rosen_run("FR", problem, ls), rosen_run("BFGS", problem, ls)
    print(f"\n{problem}/{ls}: FR nit={fr.nit} nfev={fr.nfev}; BFGS nit={bf.nit} nfev={bf.nfev}")
    assert bf.nit < fr.nit


def test_same_minimizer_as_scipy_bfgs():
    x0 = ROSEN_X0["rosen2"]
    ref = minimize(rosen, x0, jac=rosen_der, method="BFGS", options={"gtol": 1e-10})
    for method in ("BFGS", "PR+"):
        r = rosen_run(method, "rosen2", "wolfe")
        np.testing.assert_allclose(r.x, ref.x, rtol=0, atol=1e-6)
        assert abs(r.fun - ref.fun) < 1e-12


# ---------------------------------------------------------------------------
# line searches
# ---------------------------------------------------------------------------
def _gamma(b):
    return math.sqrt(1 + b * b) - b


def mt_functions():
    """Moré & Thuente (1994) test functions: (name, phi, dphi, c1, c2)."""
    out = []
    beta = 2.0
    out.append(("MT1", lambda a: -a / (a * a + beta),
                lambda a: (a * a - beta) / (a * a + beta) ** 2, 1e-3, 0.1))
    beta = 0.004
    out.append(("MT2", lambda a: (a + beta) ** 5 - 2 * (a + beta) ** 4,
                lambda a: 5 * (a + beta) ** 4 - 8 * (a + beta) ** 3, 0.01, 0.1))
    beta, l = 0.01, 39

    def phi3(a):
        if a <= 1 - beta:
            p0 = 1 - a
        elif a >= 1 + beta:
            p0 = a - 1
        else:
            p0 = (a - 1) ** 2 / (2 * beta) + beta / 2
        return p0 + 2 * (1 - beta) / (l * math.pi) * math.sin(l * math.pi * a / 2)

    def dphi3(a):
        if a <= 1 - beta:
            d0 = -1.0
        elif a >= 1 + beta:
            d0 = 1.0
        else:
            d0 = (a - 1) / beta
        return d0 + (1 - beta) * math.cos(l * math.pi * a / 2)
    out.append(("MT3", phi3, dphi3, 0.01, 0.1))
    for name, b1, b2 in (("MT4", 1e-3, 1e-3), ("MT5", 1e-2, 1e-3), ("MT6", 1e-3, 1e-2)):
        g1, g2 = _gamma(b1), _gamma(b2)
        out.append((name,
                    lambda a, b1=b1, b2=b2, g1=g1, g2=g2:
                        g1 * math.sqrt((1 - a) ** 2 + b2 ** 2) + g2 * math.sqrt(a * a + b1 ** 2),
                    lambda a, b1=b1, b2=b2, g1=g1, g2=g2:
                        -g1 * (1 - a) / math.sqrt((1 - a) ** 2 + b2 ** 2)
                        + g2 * a / math.sqrt(a * a + b1 ** 2),
                    1e-4, 1e-3))
    return out


@pytest.mark.parametrize("alpha0", [1e-3, 1e-1, 1e1, 1e3])
@pytest.mark.parametrize("case", mt_functions(), ids=lambda c: c[0])
def test_wolfe_step_satisfies_strong_wolfe(case, alpha0):
    name, phi, dphi, c1, c2 = case
    p0, d0 = phi(0.0), dphi(0.0)
    assert d0 < 0
    a, nfev, ngev = line_search_wolfe(phi, dphi, p0, d0, alpha0=alpha0, c1=c1, c2=c2)
    assert a is not None and a > 0
    assert phi(a) <= p0 + c1 * a * d0, name
    assert abs(dphi(a)) <= c2 * abs(d0), name
    assert nfev >= 1 and ngev >= 1


def test_secant_exact_on_quadratic_in_one_step():
    astar, c = 0.37, 5.0
    phi = lambda a: 0.5 * c * (a - astar) ** 2 - 1.0
    dphi = lambda a: c * (a - astar)
    for alpha0 in (0.01, 0.2, 1.0, 30.0):
        a, nfev, ngev = line_search_secant(phi, dphi, alpha0, phi0=phi(0.0), dphi0=dphi(0.0))
        assert abs(a - astar) <= 1e-14
        # dphi at alpha0 and at the single secant iterate, nothing else
        assert ngev == 2, (alpha0, ngev)


@pytest.mark.parametrize("alpha0", [1e-3, 0.5, 1.0, 20.0])
@pytest.mark.parametrize("case", [
    ("exp", lambda a: math.exp(a) - 3 * a, lambda a: math.exp(a) - 3, math.log(3.0)),
    ("MT1", lambda a: -a / (a * a + 2), lambda a: (a * a - 2) / (a * a + 2) ** 2, math.sqrt(2.0)),
    ("quartic", lambda a: (a - 1.5) ** 4 + (a - 1.5) ** 2, lambda a: 4 * (a - 1.5) ** 3 + 2 * (a - 1.5),
     1.5),
], ids=lambda c: c[0] if isinstance(c, tuple) else None)
def test_secant_converges_on_smooth_function(case, alpha0):
    _, phi, dphi, astar = case
    a, nfev, ngev = line_search_secant(phi, dphi, alpha0)
    assert abs(a - astar) <= 1e-8
    assert nfev <= 60 and ngev <= 60


def test_line_searches_shrink_on_nonfinite_values():
    # f(x) = -log x + x along x = 3 - 2 alpha: non-finite for alpha >= 1.5
    def phi(a):
        x = 3 - 2 * a
        return -math.log(x) + x if x > 0 else math.nan

    def dphi(a):
        x = 3 - 2 * a
        return -2 * (1 - 1 / x) if x > 0 else math.nan
    p0, d0 = phi(0.0), dphi(0.0)
    for alpha0 in (2.0, 10.0, 1e3):
        a, _, _ = line_search_secant(phi, dphi, alpha0, phi0=p0, dphi0=d0)
        assert abs(a - 1.0) <= 1e-8                     # x* = 1
        a, _, _ = line_search_wolfe(phi, dphi, p0, d0, alpha0=alpha0, c2=0.1)
        assert 0 < a < 1.5 and phi(a) <= p0 + 1e-4 * a * d0 and abs(dphi(a)) <= 0.1 * abs(d0)


def test_line_search_input_errors():
    phi, dphi = (lambda a: (a - 1) ** 2), (lambda a: 2 * (a - 1))
    with pytest.raises(ValueError, match="descent"):
        line_search_wolfe(phi, dphi, 1.0, 2.0)
    with pytest.raises(ValueError, match="descent"):
        line_search_secant(lambda a: (a + 1) ** 2, lambda a: 2 * (a + 1))
    with pytest.raises(ValueError, match="c1"):
        line_search_wolfe(phi, dphi, 1.0, -2.0, c1=0.5, c2=0.1)
    with pytest.raises(ValueError, match="alpha0"):
        line_search_secant(phi, dphi, -1.0)


# ---------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------
def bounded_quadratic(n=8, seed=7):
    """Quadratic with a known KKT point x*: 3 components at lower, 2 at upper bounds."""
    A, _, _, _ = spd_quadratic(n, 50.0, seed)
    lb, ub = -np.ones(n), np.ones(n)
    xs = np.array([-1.0, 1.0, -1.0, 0.3, 1.0, -0.2, -1.0, 0.5])[:n]
    gs = np.zeros(n)
    gs[xs == -1.0] = [0.5, 2.0, 1.0]        # ∇f(x*) > 0 at lower bounds
    gs[xs == 1.0] = [-1.5, -0.7]            # ∇f(x*) < 0 at upper bounds
    b = A @ xs - gs
    return (lambda x: 0.5 * x @ A @ x - b @ x), (lambda x: A @ x - b), list(zip(lb, ub)), xs


@pytest.mark.parametrize("ls", LINE_SEARCHES)
@pytest.mark.parametrize("method", METHODS)
def test_bounded_quadratic_reaches_kkt_point(method, ls):
    f, g, bounds, xs = bounded_quadratic()
    x0 = np.full(8, 0.1)
    r = run(method, f, g, x0, ls, bounds=bounds, gtol=1e-10, ftol=0.0)
    assert r.success, r.message
    np.testing.assert_allclose(r.x, xs, rtol=0, atol=1e-6)
    lb, ub = np.array(bounds).T
    assert np.all(r.x >= lb) and np.all(r.x <= ub)
    assert all(np.all((x >= lb) & (x <= ub)) for x in r.history.x)
    assert r.history.gnorm[-1] <= 1e-10


@pytest.mark.parametrize("method", ["FR", "BFGS"])
def test_exact_search_along_projected_path(method):
    """f = 0.5 |x - c|^2: the projected path P(x0 - a g0) passes through x* = P(c) at a = 1,
    the minimizer of phi along the path; an exact search (with the correct one-sided
    derivative of the kinked path) must land on x* in one iteration."""
    c = np.array([3.0, -2.0, 0.5, 0.2, -0.7])
    lb, ub = np.array([-1.0, -1.0, -1.0, 0.4, -1.0]), np.array([1.0, 1.0, 1.0, 1.0, 1.0])
    f = lambda x: 0.5 * float((x - c) @ (x - c))
    g = lambda x: x - c
    r = run(method, f, g, [0.0, 0.0, 0.0, 0.5, 0.0], "secant", bounds=list(zip(lb, ub)), gtol=1e-12)
    np.testing.assert_allclose(r.x, np.clip(c, lb, ub), atol=1e-12)
    assert r.nit == 1 and r.history.step[1] == pytest.approx(1.0, abs=1e-9)


def test_bounds_with_none_and_one_sided():
    # min (x0-2)^2 + (x1+3)^2 + x2^2, x0 <= 1, x1 >= 0, x2 free  ->  (1, 0, 0)
    f = lambda x: (x[0] - 2) ** 2 + (x[1] + 3) ** 2 + x[2] ** 2
    g = lambda x: np.array([2 * (x[0] - 2), 2 * (x[1] + 3), 2 * x[2]])
    for method in ("PR+", "BFGS"):
        r = run(method, f, g, [0.0, 5.0, 4.0], "wolfe", bounds=[(None, 1.0), (0.0, None), None],
                gtol=1e-10)
        np.testing.assert_allclose(r.x, [1.0, 0.0, 0.0], atol=1e-8)


# ---------------------------------------------------------------------------
# non-finite trial values inside the optimizers
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("ls", LINE_SEARCHES)
@pytest.mark.parametrize("method", ["FR", "PR", "BFGS"])
def test_nonfinite_trial_values_are_shrunk(method, ls):
    """f = -log x + 10 x from x0 = 0.5: the first trial step lands at x = -0.5."""
    seen = []

    def f(x):
        seen.append(x[0])
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(-np.log(x[0]) + 10 * x[0])
    g = lambda x: np.array([-1 / x[0] + 10])
    r = run(method, f, g, [0.5], ls, gtol=1e-7)
    assert min(seen) <= 0, "the test did not produce a non-finite trial value"
    assert r.success, r.message
    assert abs(r.x[0] - 0.1) < 1e-8


# ---------------------------------------------------------------------------
# input checking, history, callback
# ---------------------------------------------------------------------------
def test_input_errors_and_warnings():
    f, g = (lambda x: float(x @ x)), (lambda x: 2 * x)
    with pytest.raises(ValueError, match="unknown beta"):
        minimize_cg(f, g, [1.0, 2.0], beta="XX")
    with pytest.raises(ValueError, match="unknown line_search"):
        minimize_cg(f, g, [1.0, 2.0], line_search="armijo")
    with pytest.raises(ValueError, match="unknown line_search"):
        minimize_bfgs(f, g, [1.0, 2.0], line_search="exact")
    with pytest.raises(ValueError, match=r"fun\(x0\)"):
        minimize_bfgs(lambda x: np.nan, g, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"fun\(x0\)"):
        minimize_cg(lambda x: np.inf, g, [1.0, 2.0])
    with pytest.raises(ValueError, match="bounds"):
        minimize_cg(f, g, [1.0, 2.0], bounds=[(0, 1)])
    with pytest.raises(ValueError, match="lb <= ub"):
        minimize_cg(f, g, [1.0, 2.0], bounds=[(0, 1), (3, 2)])
    with pytest.warns(UserWarning, match="outside the bounds"):
        r = minimize_bfgs(f, g, [5.0, -5.0], bounds=[(1, 2), (-1, 1)])
    np.testing.assert_allclose(r.x, [1.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(r.history.x[0], [2.0, -1.0])


def test_history_and_counts():
    calls = {"f": 0, "g": 0}

    def f(x):
        calls["f"] += 1
        return rosen(x)

    def g(x):
        calls["g"] += 1
        return rosen_der(x)
    r = minimize_bfgs(f, g, [-1.2, 1.0], gtol=1e-8)
    h = r.history
    assert len(h) == r.nit + 1 and h.it == list(range(r.nit + 1))
    assert (r.nfev, r.ngev) == (calls["f"], calls["g"])
    assert h.nfev[-1] == r.nfev and h.ngev[-1] == r.ngev
    assert np.isnan(h.step[0]) and all(s > 0 for s in h.step[1:])
    assert all(np.diff(h.f) <= 0)                       # monotone decrease
    df = h.to_frame()
    assert isinstance(df, pd.DataFrame) and len(df) == r.nit + 1
    assert {"f", "gnorm", "step", "nfev", "ngev", "x0", "x1"} <= set(df.columns)
    np.testing.assert_allclose(df[["x0", "x1"]].to_numpy()[-1], r.x)
    assert r.method == "BFGS/wolfe"


def test_callback_stops_and_max_iter():
    seen = []

    def cb(x):
        seen.append(x)
        return len(seen) >= 3
    r = minimize_cg(rosen, rosen_der, [-1.2, 1.0], callback=cb)
    assert r.nit == 3 and not r.success and "callback" in r.message
    r = minimize_cg(rosen, rosen_der, [-1.2, 1.0], max_iter=4)
    assert r.nit == 4 and not r.success and "maximum" in r.message


def test_bfgs_inverse_hessian_is_exact_after_n_exact_steps():
    """Quadratic termination of BFGS: with exact line searches H_n = A^{-1} (any SPD H_0)."""
    n = 5
    A, b, f, g = spd_quadratic(n, 10.0, 4)
    r = minimize_bfgs(f, g, np.zeros(n), line_search="secant", gtol=0.0, ftol=0.0, max_iter=n)
    assert r.nit == n
    H = r.hess_inv
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    np.testing.assert_allclose(H, np.linalg.inv(A), rtol=0, atol=1e-6 * np.abs(np.linalg.inv(A)).max())
    assert minimize_cg(f, g, np.zeros(n)).hess_inv is None


@pytest.mark.parametrize("method,ls", [("BFGS", "wolfe"), ("BFGS", "secant"), ("PR+", "secant")])
def test_ftol_zero_does_not_stop_on_an_unchanged_objective(method, ls):
    """f = 1e8 + the bounded quadratic: near x* f no longer changes in floating point
    (its spacing there is 1.5e-8) while |g| is still 1e-4.  With ``ftol=0`` the
    relative-decrease test is off, so the run goes on to gtol (it used to stop there,
    called a success, with |g| ~ 1e-7)."""
    f0, g, bounds, xs = bounded_quadratic()
    r = run(method, lambda x: 1e8 + f0(x), g, np.full(8, 0.1), ls, bounds=bounds,
            gtol=1e-9, ftol=0.0, max_iter=500)
    assert r.success, r.message
    assert r.history.gnorm[-1] <= 1e-9
    np.testing.assert_allclose(r.x, xs, rtol=0, atol=1e-8)


@pytest.mark.parametrize("method", ["BFGS", "PR+"])
def test_decrease_below_the_objectives_roundoff_still_converges(method):
    """The bounded quadratic plus a deterministic jitter of 1e-13 (the size of its
    round-off): near x* the decrease along d falls below the jitter while |g| ~ 1e-8, so
    no step passes the Wolfe search's decrease test (BFGS stopped there, "line search
    failed", as in one loaded run of the plain quadratic).  The step is then taken by
    the approximate Wolfe conditions on φ' and the projected gradient reaches 1e-10."""
    f0, g, bounds, xs = bounded_quadratic()

    def jittered(x):
        return f0(x) + 1e-13 * np.sin(1e7 * float(np.sum(x * np.arange(1, 9))))

    r = run(method, jittered, g, np.full(8, 0.1), "wolfe", bounds=bounds, gtol=1e-10,
            ftol=0.0, max_iter=500)
    assert r.success, r.message
    assert r.history.gnorm[-1] <= 1e-10
    np.testing.assert_allclose(r.x, xs, rtol=0, atol=1e-9)
