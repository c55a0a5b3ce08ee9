"""Tests of the multistep schemes [GM-grad, eqs. (2), (4)-(6)] and the grid (eq. (3)).

Order tests fit the observed global order by least squares on log(error) vs
log(h) over five grids.  With the order ramp Q_i = min(i+1, Qmax-1) on a plain
uniform grid the low-order start-up caps the observed order at
``scheme.startup_order``; with refined start-up steps or exact start values the
full ``scheme.order`` is observed.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pyomo_odeest import Grid, make_grid
from pyomo_odeest.discretization.schemes import (
    SCHEMES,
    AdamsMoulton,
    AdamsPC,
    Enright,
    MultistepScheme,
    PointRef,
    SemiImplicitEnright,
    Stage,
    StepFormula,
    adams_bashforth_coefficients,
    adams_moulton_coefficients,
    enright_coefficients,
    get_scheme,
    integrate,
)

# ---------------------------------------------------------------------------
# classical uniform-step tables
# ---------------------------------------------------------------------------
AB_TABLE = {
    1: ([1], 1),
    2: ([3, -1], 2),
    3: ([23, -16, 5], 12),
    4: ([55, -59, 37, -9], 24),
    5: ([1901, -2774, 2616, -1274, 251], 720),
    6: ([4277, -7923, 9982, -7298, 2877, -475], 1440),
}
# AM_p: p points (K_0 for the new point first), order p
AM_TABLE = {
    1: ([1], 1),
    2: ([1, 1], 2),
    3: ([5, 8, -1], 12),
    4: ([9, 19, -5, 1], 24),
    5: ([251, 646, -264, 106, -19], 720),
    6: ([475, 1427, -798, 482, -173, 27], 1440),
}


def _uniform_hist(q, h=0.1, t_i=0.7):
    return t_i - h * np.arange(q), t_i + h


@pytest.mark.parametrize("q", sorted(AB_TABLE))
@pytest.mark.parametrize("h", [1.0, 0.1, 3.7e-3])
def test_adams_bashforth_uniform_table(q, h):
    num, den = AB_TABLE[q]
    t_hist, _ = _uniform_hist(q, h)
    np.testing.assert_allclose(adams_bashforth_coefficients(t_hist, h), np.array(num) / den, rtol=0, atol=1e-12)


@pytest.mark.parametrize("p", sorted(AM_TABLE))
@pytest.mark.parametrize("h", [1.0, 0.1, 3.7e-3])
def test_adams_moulton_uniform_table(p, h):
    num, den = AM_TABLE[p]
    q = p - 1
    t_hist, t_new = _uniform_hist(max(q, 1), h)
    got = adams_moulton_coefficients(t_hist, t_new, q=q)
    np.testing.assert_allclose(got, np.array(num) / den, rtol=0, atol=1e-12)
    if q >= 1:  # default q = len(t_hist)
        np.testing.assert_allclose(adams_moulton_coefficients(t_hist, t_new), got, rtol=0, atol=0)


def test_am2_is_trapezoid_and_ab2():
    np.testing.assert_allclose(adams_moulton_coefficients([0.0], 0.5), [0.5, 0.5], atol=1e-15)
    np.testing.assert_allclose(adams_bashforth_coefficients([1.0, 0.0], 1.0), [1.5, -0.5], atol=1e-15)


def test_enright_one_step_member():
    """x+ = x + h(2/3 f+ + 1/3 f) - h^2/6 fdot+ on any step (Q = 1)."""
    for t_i, h in [(0.0, 1.0), (2.3, 0.01), (-1.0, 7.5)]:
        rho, sigma = enright_coefficients([t_i], t_i + h)
        np.testing.assert_allclose(rho, [2 / 3, 1 / 3], atol=1e-12)
        assert abs(sigma + 1 / 6) < 1e-12


def test_enright_two_step_member_uniform():
    """Q = 2 member, uniform steps: (29/48, 5/12, -1/48), sigma = -1/8 (Enright 1974)."""
    rho, sigma = enright_coefficients([1.0, 0.0], 2.0)
    np.testing.assert_allclose(rho, [29 / 48, 5 / 12, -1 / 48], atol=1e-12)
    assert abs(sigma + 1 / 8) < 1e-12


def _random_history(rng, q, h=0.05, t_i=0.8, spread=0.6):
    """Past steps random in h*[1-spread, 1+spread]."""
    steps = h * rng.uniform(1 - spread, 1 + spread, size=max(q - 1, 0))
    t_hist = t_i - np.concatenate([[0.0], np.cumsum(steps)])
    return t_hist, t_i + h


@pytest.mark.parametrize("q", range(1, 8))
def test_exactness_random_histories(q):
    """Each formula integrates polynomials up to its degree exactly on random histories."""
    rng = np.random.default_rng(100 + q)
    for _ in range(5):
        t_hist, t_new = _random_history(rng, q, h=rng.uniform(0.01, 2.0))
        h = t_new - t_hist[0]
        # monomials in u = (t - c)/R, R = half the span of the stencil: |u| <= 1
        c = 0.5 * (t_new + t_hist[-1])
        R = 0.5 * (t_new - t_hist[-1])
        pi = adams_bashforth_coefficients(t_hist, h)
        k = adams_moulton_coefficients(t_hist, t_new)
        rho, sigma = enright_coefficients(t_hist, t_new)

        def x(tt, m):
            return ((tt - c) / R) ** m

        def f(tt, m):
            return m * ((tt - c) / R) ** (m - 1) / R if m else 0.0 * tt

        def fdot(tt, m):
            return m * (m - 1) * ((tt - c) / R) ** (m - 2) / R**2 if m >= 2 else 0.0 * tt

        def check(label, terms, m):
            exact = x(t_new, m) - x(t_hist[0], m)
            scale = 1.0 + np.sum(np.abs(terms))
            assert abs(np.sum(terms) - exact) <= 1e-10 * scale, (label, q, m)

        for m in range(0, q + 3):
            if m <= q:
                check("AB", h * pi * f(t_hist, m), m)
            if m <= q + 1:
                check("AM", np.concatenate([[h * k[0] * f(t_new, m)], h * k[1:] * f(t_hist, m)]), m)
            check("Enright", np.concatenate([[h * rho[0] * f(t_new, m), h**2 * sigma * fdot(t_new, m)],
                                             h * rho[1:] * f(t_hist, m)]), m)
        # the degrees are sharp: one degree higher is not integrated exactly
        m = q + 3
        en = h * (rho[0] * f(t_new, m) + np.dot(rho[1:], f(t_hist, m))) + h**2 * sigma * fdot(t_new, m)
        assert abs(en - (x(t_new, m) - x(t_hist[0], m))) > 1e-8
        m = q + 1
        assert abs(h * np.dot(pi, f(t_hist, m)) - (x(t_new, m) - x(t_hist[0], m))) > 1e-8


def test_coefficients_match_exact_rational_derivation():
    """Independent check: solve the moment conditions in exact rational arithmetic."""
    sympy = pytest.importorskip("sympy")
    t_hist = [Fraction(0), Fraction(-3, 10), Fraction(-7, 10), Fraction(-6, 5)]
    t_new = Fraction(1, 2)
    h = t_new - t_hist[0]
    s = [(tj - t_hist[0]) / h for tj in t_hist]
    q = len(s)
    # Adams-Bashforth: sum_j Pi_j s_j^m = 1/(m+1), m < q
    a = sympy.Matrix([[sympy.Rational(sj) ** m for sj in s] for m in range(q)])
    b = sympy.Matrix([sympy.Rational(1, m + 1) for m in range(q)])
    pi = a.LUsolve(b)
    # Enright: 1 = sum rho_j m s_j^(m-1) + rho_0 m + sigma m(m-1), m = 1..q+2
    rows = []
    for m in range(1, q + 3):
        rows.append([m] + [m * sympy.Rational(sj) ** (m - 1) for sj in s] + [m * (m - 1)])
    sol = sympy.Matrix(rows).LUsolve(sympy.Matrix([1] * (q + 2)))
    th = np.array([float(v) for v in t_hist])
    np.testing.assert_allclose(adams_bashforth_coefficients(th, float(h)), [float(v) for v in pi], atol=1e-12)
    rho, sigma = enright_coefficients(th, float(t_new))
    np.testing.assert_allclose(rho, [float(v) for v in sol[:-1]], atol=1e-12)
    assert abs(sigma - float(sol[-1])) < 1e-12


def test_coefficient_input_errors():
    with pytest.raises(ValueError, match="strictly decreasing"):
        adams_bashforth_coefficients([0.0, 0.1], 0.1)
    with pytest.raises(ValueError, match="positive"):
        adams_bashforth_coefficients([0.0], -1.0)
    with pytest.raises(ValueError, match="t_new"):
        adams_moulton_coefficients([0.0, -0.1], 0.0)
    with pytest.raises(ValueError, match="q must be"):
        adams_moulton_coefficients([0.0], 0.1, q=2)
    with pytest.raises(ValueError, match="non-finite"):
        enright_coefficients([np.nan], 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        enright_coefficients([], 1.0)


# ---------------------------------------------------------------------------
# scheme objects
# ---------------------------------------------------------------------------
ALL = [(name, q) for name in SCHEMES for q in (2, 3, 4, 5, 6)]


@pytest.mark.parametrize("name,qmax", ALL)
def test_formula_structure(name, qmax):
    sch = get_scheme(name, qmax)
    rng = np.random.default_rng(qmax)
    t = np.cumsum(np.concatenate([[0.0], rng.uniform(0.05, 0.15, 12)]))
    fs = sch.formulas(t)
    assert len(fs) == t.size - 1
    for i, sf in enumerate(fs):
        assert isinstance(sf, StepFormula)
        assert sf.i == i and sf.order_q == sch.order_q(i) == min(i + 1, qmax - 1)
        assert tuple(st.name for st in sf.stages) == sch.stage_names
        assert sf.stages[-1].name == "x"
        assert sf.max_lag == sf.order_q - 1
        assert sf == sch.step_formula(i, t)
        hash(sf.structure)
        assert len(sf.coefficients) == sum(len(st.f_terms) + len(st.fdot_terms) for st in sf.stages)
        # consistency: sum of f-coefficients = 1 for every stage
        for st in sf.stages:
            assert abs(sum(c for _, c in st.f_terms) - 1.0) < 1e-12
        x_stage = sf.stage("x")
        assert x_stage.implicit == (name != "adams_pc")
        for st in sf.stages[:-1]:
            assert not st.implicit
        assert bool(sf.stage("x").fdot_terms) == sch.needs_fdot
    # equal structure <=> equal Q
    for a in fs:
        for b in fs:
            assert (a.structure == b.structure) == (a.order_q == b.order_q)
    if qmax > 2:  # multistep on a non-uniform grid: coefficients depend on the history
        assert fs[-1].coefficients != fs[-2].coefficients
    assert sch.order == (qmax if name.startswith("adams") else qmax + 1)


def test_formulas_cached_and_uniform_steps_share_coefficients():
    sch = Enright(4)
    t = np.linspace(0.0, 1.0, 21)
    n0 = sch.n_formulas_built
    f1 = sch.formulas(t)
    assert sch.n_formulas_built == n0 + 20
    f2 = sch.formulas(t.copy())
    assert sch.n_formulas_built == n0 + 20 and f1 == f2 and f1 is not f2
    full = [sf for sf in f1 if sf.order_q == 3]
    for sf in full[1:]:
        np.testing.assert_allclose(sf.coefficients, full[0].coefficients, atol=1e-12)


def test_semi_implicit_stage_references():
    sf = SemiImplicitEnright(3).step_formula(5, np.linspace(0, 1, 11))
    y, yc, x = sf.stages
    assert all(p.kind == "past" for p, _ in y.f_terms)
    assert yc.f_terms[0][0] == PointRef("stage", stage="y")
    assert x.f_terms[0][0] == PointRef("new")
    assert x.fdot_terms == ((PointRef("stage", stage="yc"), x.fdot_terms[0][1]),)
    assert x.implicit and not yc.implicit
    pc = AdamsPC(3).step_formula(5, np.linspace(0, 1, 11))
    assert pc.stages[1].f_terms[0][0] == PointRef("stage", stage="y") and not pc.implicit


def test_stage_and_pointref_validation():
    with pytest.raises(ValueError):
        PointRef("future")
    with pytest.raises(ValueError):
        PointRef("past", -1)
    with pytest.raises(ValueError):
        PointRef("stage")
    with pytest.raises(ValueError):
        PointRef("new", 2)
    st = Stage("yc", ((PointRef("stage", stage="yc"), 1.0),))
    assert st.implicit


def test_get_scheme_and_bad_input():
    assert isinstance(get_scheme("adams_pc"), AdamsPC)
    assert isinstance(get_scheme("Adams-Moulton", 3), AdamsMoulton)
    assert get_scheme("enright", np.int64(5)).qmax == 5
    obj = SemiImplicitEnright(3)
    assert get_scheme(obj) is obj and get_scheme(obj, 3) is obj
    assert get_scheme(Enright, 2) == Enright(2)
    with pytest.raises(ValueError, match="valid names"):
        get_scheme("rk4")
    with pytest.raises(ValueError, match=r"\[2, 8\]"):
        get_scheme("enright", 1)
    with pytest.raises(ValueError, match=r"\[2, 8\]"):
        get_scheme("enright", 9)
    with pytest.raises(ValueError, match=r"\[2, 8\]"):
        get_scheme("enright", 3.0)
    with pytest.raises(ValueError, match=r"\[2, 8\]"):
        AdamsPC(True)
    with pytest.raises(ValueError, match="conflicts"):
        get_scheme(obj, 4)
    with pytest.raises(ValueError):
        get_scheme(3)
    sch = AdamsPC(3)
    with pytest.raises(ValueError, match="strictly increasing"):
        sch.formulas([0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="non-finite"):
        sch.formulas([0.0, np.nan])
    with pytest.raises(ValueError, match="at least two"):
        sch.formulas([0.0])
    with pytest.raises(ValueError, match="step index"):
        sch.step_formula(3, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="step index"):
        sch.order_q(-1)


def test_ill_conditioned_history_is_reported():
    """Self-check: absurd step ratios make the exactness check fail loudly."""
    t = np.concatenate([[0.0], 1e-13 * np.arange(1, 8), [1.0]])
    with pytest.raises(RuntimeError, match="ill-conditioned"):
        AdamsPC(8).formulas(t)
    t = np.concatenate([[0.0], 1e-9 * np.arange(1, 8), [1.0]])
    with pytest.raises(RuntimeError, match="ill-conditioned"):
        AdamsPC(8).formulas(t)


# ---------------------------------------------------------------------------
# reference integrator
# ---------------------------------------------------------------------------
def test_integrate_exact_for_polynomial_solutions_on_nonuniform_grid():
    """x(t) = polynomial of degree `order`: exact once the history is exact."""
    g = make_grid([0.4, 1.0], max_step=0.05, jitter=0.5, seed=3)
    for name in SCHEMES:
        for qmax in (2, 4, 6):
            sch = get_scheme(name, qmax)
            d = sch.order  # AM / PC exact for degree qmax, Enright for qmax + 1

            def xe(t):
                return np.atleast_1d((1.0 + t) ** d)

            def f(x, t):
                return np.atleast_1d(d * (1.0 + t) ** (d - 1) + 0.0 * x)

            def fdot(x, t):
                return np.atleast_1d(d * (d - 1) * (1.0 + t) ** (d - 2) + 0.0 * x)

            sv = np.array([xe(tt) for tt in g.t[: qmax - 1]])
            x = integrate(sch, f, g.t, sv[0], fdot=fdot, start_values=sv)
            np.testing.assert_allclose(x[:, 0], (1.0 + g.t) ** d, rtol=1e-11, atol=0)


def test_integrate_jacobian_paths_agree():
    a = np.array([[-1.0, 2.0], [-2.0, -1.0]])
    t = make_grid([1.0], max_step=0.05).t
    for name in ("adams_moulton", "enright", "semi_implicit_enright"):
        ref = integrate(name, lambda x, t: a @ x, t, [1.0, 0.5], fdot=lambda x, t: a @ a @ x,
                        jac=lambda x, t: a, fdot_jac=lambda x, t: a @ a)
        fd = integrate(name, lambda x, t: a @ x, t, [1.0, 0.5])  # FD Jacobians and FD fdot
        np.testing.assert_allclose(fd, ref, rtol=0, atol=1e-10)


def test_integrate_errors():
    t = np.linspace(0.0, 1.0, 11)

    def bad_f(x, tt):
        return -x if tt < 0.45 else np.array([np.nan])

    with pytest.raises(RuntimeError, match=r"step 4 \(t=0\.5\)"):
        integrate("adams_pc", bad_f, t, [1.0])
    with pytest.raises(RuntimeError, match="step"):
        integrate("enright", bad_f, t, [1.0], fdot=lambda x, tt: x)
    # Newton cannot converge for a huge step on a blow-up problem
    with pytest.raises(RuntimeError, match=r"Newton .* step 0"):
        integrate("adams_moulton", lambda x, tt: x**2, [0.0, 10.0], [1.0], max_newton=5)
    with pytest.raises(RuntimeError, match="shape"):
        integrate("adams_pc", lambda x, tt: np.zeros(3), t, [1.0])
    with pytest.raises(ValueError, match="start_values"):
        integrate("adams_pc", lambda x, tt: -x, t, [1.0], start_values=np.ones((2, 3)))
    with pytest.raises(ValueError, match="x0"):
        integrate("adams_pc", lambda x, tt: -x, t, [np.inf])
    with pytest.raises(ValueError, match="valid names"):
        integrate("euler", lambda x, tt: -x, t, [1.0])


# ---------------------------------------------------------------------------
# grid
# ---------------------------------------------------------------------------
def test_grid_contains_measurements_and_index_maps():
    tau = [0.0, 0.3, 0.35, 1.0, 2.5]
    g = make_grid(tau, max_step=0.1, extra_times=[1.7])
    assert isinstance(g, Grid)
    assert g.t[0] == 0.0 and g.t[-1] == 2.5
    assert np.all(np.diff(g.t) > 0) and np.all(g.h <= 0.1 + 1e-15) and g.k == g.t.size - 1
    np.testing.assert_array_equal(g.t[g.J], tau)
    assert 1.7 in g.t
    for i in range(g.k + 1):
        assert (g.I[i] != 0) == (g.t[i] in tau)
        if g.I[i]:
            assert g.t[i] == tau[g.I[i] - 1] and g.J[g.I[i] - 1] == i
    # fewest equal sub-steps: [0.35, 1.0] needs 7 steps of 0.0929
    i0, i1 = g.J[2], g.J[3]
    assert i1 - i0 == 7 and np.allclose(g.h[i0:i1], 0.65 / 7)
    g2 = make_grid([1.0, 2.0], steps_per_interval=3)
    np.testing.assert_allclose(g2.t, np.linspace(0, 2, 7))
    assert make_grid([1.0, 2.0], T=3.0, steps_per_interval=2, max_step=0.25).k == 12
    with pytest.raises(Exception):
        g.t[0] = 1.0  # read-only


def test_grid_jitter_and_refined_startup():
    g = make_grid(np.linspace(0.5, 2, 4), max_step=0.05, jitter=0.9, seed=1)
    assert np.all(np.diff(g.t) > 0)
    np.testing.assert_array_equal(g.t[g.J], np.linspace(0.5, 2, 4))
    u = make_grid(np.linspace(0.5, 2, 4), max_step=0.05)
    assert g.k == u.k and not np.allclose(g.h, u.h)
    np.testing.assert_array_equal(make_grid([1.0], max_step=0.1, jitter=0.3, seed=7).t,
                                  make_grid([1.0], max_step=0.1, jitter=0.3, seed=7).t)

    r = make_grid([1.0, 2.0], steps_per_interval=10, startup="refined")
    H = 0.1
    m = r.k - 20 + 1  # geometric steps replacing the first sub-step
    assert m >= 3
    np.testing.assert_allclose(r.h[1:m] / r.h[: m - 1], 2.0)
    assert abs(r.h[:m].sum() - H) < 1e-14 and np.allclose(r.h[m:], H)
    assert r.h[0] <= H * (H / 2.0) ** (4 / 3)  # h0 <= H (H/L)^((p-3)/3), p = 7
    r3 = make_grid([1.0], steps_per_interval=10, startup="refined", startup_steps=3)
    assert r3.k == 12
    # finer base grid -> relatively smaller first step (h0 = o(H))
    r_fine = make_grid([1.0, 2.0], steps_per_interval=40, startup="refined")
    assert r_fine.h[0] / 0.025 < r.h[0] / H


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(meas_times=[0.5, 0.2]), "sorted"),
        (dict(meas_times=[0.5, 0.5]), "duplicates"),
        (dict(meas_times=[0.5, np.nan]), "NaN"),
        (dict(meas_times=[0.5, 1.0], T=0.8), "outside"),
        (dict(meas_times=[-0.5, 1.0]), "outside"),
        (dict(meas_times=[1.0], max_step=0.0), "max_step"),
        (dict(meas_times=[1.0], max_step=-1.0), "max_step"),
        (dict(meas_times=[1.0], max_step=np.nan), "max_step"),
        (dict(meas_times=[1.0], steps_per_interval=0), "steps_per_interval"),
        (dict(meas_times=[1.0], steps_per_interval=2.5), "steps_per_interval"),
        (dict(meas_times=[1.0], t0=1.0), "greater than t0"),
        (dict(meas_times=[], t0=0.0), "T is required"),
        (dict(meas_times=[1.0], extra_times=[2.0]), "extra_times outside"),
        (dict(meas_times=[1.0], startup="fancy"), "startup"),
        (dict(meas_times=[1.0], jitter=1.0), "jitter"),
        (dict(meas_times=[1.0], startup_ratio=1.0), "startup_ratio"),
        (dict(meas_times=[[1.0, 2.0]]), "one-dimensional"),
    ],
)
def test_grid_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_grid(**kwargs)


# ---------------------------------------------------------------------------
# observed order of convergence
# ---------------------------------------------------------------------------
_A = np.array([[-1.0, 2.0], [-2.0, -1.0]])  # eigenvalues -1 +- 2i
_X0 = np.array([1.0, 0.5])


def _lin_exact(t):
    t = np.atleast_1d(t)
    c, s = np.cos(2 * t), np.sin(2 * t)
    return np.exp(-t)[:, None] * np.stack([c * _X0[0] + s * _X0[1], -s * _X0[0] + c * _X0[1]], 1)


LINEAR = dict(
    f=lambda x, t: _A @ x,
    fdot=lambda x, t: _A @ (_A @ x),
    jac=lambda x, t: _A,
    fdot_jac=lambda x, t: _A @ _A,
    exact=_lin_exact,
    T=2.0,
)


# non-autonomous logistic x' = r(t) x (1 - x), r = 1 + cos(t)/2, x(0) = 0.3:
# x(t) = 1 / (1 + (1/x0 - 1) exp(-R(t))), R = t + sin(t)/2
def _r(t):
    return 1.0 + 0.5 * np.cos(t)


def _logi_f(x, t):
    return _r(t) * x * (1.0 - x)


def _logi_fdot(x, t):  # D_x f f + d_t f
    return _r(t) * (1.0 - 2.0 * x) * _logi_f(x, t) - 0.5 * np.sin(t) * x * (1.0 - x)


def _logi_exact(t):
    t = np.atleast_1d(t)
    return (1.0 / (1.0 + (1.0 / 0.3 - 1.0) * np.exp(-(t + 0.5 * np.sin(t)))))[:, None]


LOGISTIC = dict(
    f=_logi_f,
    fdot=_logi_fdot,
    jac=lambda x, t: np.array([[_r(t) * (1.0 - 2.0 * x[0])]]),
    fdot_jac=None,  # finite differences inside integrate
    exact=_logi_exact,
    T=3.0,
)
PROBLEMS = {"linear": LINEAR, "logistic": LOGISTIC}
N_MEAS = 4  # measurement times T/4, T/2, 3T/4, T are grid points


def _grid_sizes(scheme, p):
    """Total step counts N (nominal h = T/N) with errors in the asymptotic range, above roundoff."""
    if p <= 4:
        return [32, 48, 64, 96, 128]
    # semi-implicit Enright approaches its order from above (see its docstring): start at 64
    return [64, 96, 128, 160, 192]


def observed_order(scheme, prob, mode, Ns):
    """Least-squares slope of log(max_i |x_i - x(t_i)|) against log(T/N)."""
    T = prob["T"]
    errs, hs = [], []
    for N in Ns:
        g = make_grid(
            np.linspace(0, T, N_MEAS + 1)[1:],
            steps_per_interval=N // N_MEAS,
            startup="refined" if mode == "refined" or mode == "refined_jitter" else "none",
            jitter=0.3 if mode.endswith("jitter") else 0.0,
            seed=N,
        )
        x_ex = prob["exact"](g.t)
        sv = x_ex[: scheme.qmax - 1] if mode.startswith("exact") else None
        x = integrate(scheme, prob["f"], g.t, x_ex[0], fdot=prob["fdot"], jac=prob["jac"],
                      fdot_jac=prob["fdot_jac"], start_values=sv)
        errs.append(np.max(np.abs(x - x_ex)))
        hs.append(T / N)
    errs = np.array(errs)
    assert np.all(errs > 1e-14), f"errors reach roundoff: {errs}"
    return np.polyfit(np.log(hs), np.log(errs), 1)[0], errs


MODES = {
    # order ramp on a plain uniform grid: start-up-limited
    "ramp_uniform": lambda s: s.startup_order,
    # full order: refined start-up (uniform / jittered) or exact start values (jittered)
    "refined": lambda s: s.order,
    "refined_jitter": lambda s: s.order,
    "exact_jitter": lambda s: s.order,
}


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("qmax", [2, 3, 4, 5])
@pytest.mark.parametrize("name", list(SCHEMES))
def test_observed_order(name, qmax, mode, problem):
    sch = get_scheme(name, qmax)
    p = MODES[mode](sch)
    slope, errs = observed_order(sch, PROBLEMS[problem], mode, _grid_sizes(sch, p))
    assert abs(slope - p) <= 0.2, f"{sch!r} {mode} {problem}: observed {slope:.2f}, expected {p}; errors {errs}"


@pytest.mark.parametrize("name", ["enright", "adams_pc"])
def test_observed_order_qmax6(name):
    sch = get_scheme(name, 6)
    slope, errs = observed_order(sch, LINEAR, "exact_jitter", [32, 40, 48, 64, 80])
    assert abs(slope - sch.order) <= 0.2, (slope, errs)


def test_startup_order_values():
    assert [AdamsPC(q).startup_order for q in (2, 3, 4, 6)] == [2, 3, 3, 3]
    assert [AdamsMoulton(q).startup_order for q in (2, 3, 5)] == [2, 3, 3]
    assert [Enright(q).startup_order for q in (2, 3, 4, 6)] == [3, 4, 4, 4]
    assert [SemiImplicitEnright(q).order for q in (2, 5)] == [3, 6]
    assert issubclass(Enright, MultistepScheme)


def test_newton_resolves_each_state_on_its_own_scale():
    """A fast binding equilibrium (unbinding 6e4 per unit time, steps of 0.5) of
    species of 1e-3 beside a reservoir of 1e7: the implicit stages solve each
    state to ``newton_tol`` of its own magnitude.  The same model with the small
    species counted in units 1e6 times smaller gives the same trajectory (1e-6, 1e-14 absolute);
    with one tolerance for all states (relative to the reservoir) the small
    species were off by far more (the start of a PEtab problem violated its own
    scheme equations by 3e2)."""
    from pyomo_odeest.discretization.schemes import integrate

    def model(c):                                  # c: units of the small species
        def f(x, t):
            e, a, p, ap = x
            bind, unbind = 1e-3 / c * a * p, 6e4 * ap
            return np.array([-1e-3 * e, unbind - bind, 3e-9 * c * e + unbind - bind - 1e-1 * p,
                             bind - unbind])
        return f

    t = np.concatenate([np.linspace(0, 1, 41), 1 + 0.5 * np.arange(1, 21)])
    x0 = np.array([1e7, 2e-2, 0.0, 0.0])
    X = integrate(Enright(4), model(1.0), t, x0)
    Y = integrate(Enright(4), model(1e6), t, x0 * [1, 1e6, 1e6, 1e6])
    assert np.all(X[1:, 1:] > 0)
    np.testing.assert_allclose(Y[:, 1:] / 1e6, X[:, 1:], rtol=1e-6, atol=1e-14)


def test_nodes_within_round_off_of_equal_steps_give_the_classical_coefficients():
    """Times of equal steps carry round-off (t_i = i·0.1 + 1000 in floating point):
    the scaled nodes within that round-off of integers are made integers, so every
    step of a batch has the same coefficients, AB3's (23, −16, 5)/12 for the
    predictor of Adams PC; a grid perturbed by more than round-off (1e-9 of a
    step) keeps the coefficients of its own nodes."""
    sch = get_scheme("adams_pc", 4)
    t = 1000.0 + 0.1 * np.arange(400)
    assert len(np.unique(np.diff(t))) > 1                      # round-off in the steps
    batch = [b for b in sch.batches(t) if b.q == 3][0]
    pred = batch.stages[0]
    assert pred[0] == "y"
    cols = [c for _, c in pred[1]]
    for c, want in zip(cols, (23 / 12, -16 / 12, 5 / 12)):
        assert np.all(c == c[0]) and c[0] == pytest.approx(want, rel=1e-14)
    tp = t + 1e-10 * np.sin(np.arange(400))                   # 1e-9 of a step
    cp = [c for _, c in [b for b in sch.batches(tp) if b.q == 3][0].stages[0][1]]
    assert len(np.unique(cp[0])) > 100
