"""Local error estimates of the schemes (the defect in a higher-order quadrature) and
the subdivision of grids that the refinement stage uses, and grids that follow an
integrator's steps."""
import numpy as np
import pytest

from pyomo_odeest.discretization import follow_steps, make_grid, subdivide
from pyomo_odeest.discretization.schemes import (SCHEMES, get_scheme, integrate, local_errors,
                                                 predictor_difference)

LAM = -1.3


def f(x, t):
    return LAM * x + np.sin(t)


def jac(x, t):
    return np.array([[LAM]])


def fdot(x, t):
    return LAM * f(x, t) + np.cos(t)


def fdot_jac(x, t):
    return np.array([[LAM * LAM]])


def exact(t):
    """x' = λx + sin t, x(0) = 1."""
    a = 1.0 / (LAM ** 2 + 1.0)
    A, B = -LAM * a, -a
    return (1.0 - B) * np.exp(LAM * t) + A * np.sin(t) + B * np.cos(t)


def true_local_errors(scheme, t):
    """One step of the scheme from the exact history, minus the exact solution."""
    xe = exact(t)[:, None]
    out = np.empty(len(t) - 1)
    for i in range(len(t) - 1):
        X = integrate(scheme, f, t[:i + 2], xe[0], fdot=fdot, jac=jac, fdot_jac=fdot_jac,
                      start_values=xe[:i + 1])
        out[i] = X[-1, 0] - xe[i + 1, 0]
    return out


def _estimate(scheme, grid):
    X = integrate(scheme, f, grid.t, np.array([1.0]), fdot=fdot, jac=jac, fdot_jac=fdot_jac)
    F = np.array([f(x, s) for x, s in zip(X, grid.t)])
    return X, local_errors(scheme, grid, X, F)[:, 0]


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_defect_estimates_the_local_error_on_a_non_uniform_grid(name):
    """On a jittered grid the estimate agrees with the true local error of each step
    (median relative error 13-21 % at 20 steps, 6-8 % at 40: the estimate is of higher
    order; at finer grids the implicit schemes' Newton tolerance limits the comparison)."""
    sc = get_scheme(name, 4)
    rel = []
    for n in (20, 40):
        g = make_grid(np.linspace(0.5, 5.0, 10), max_step=5.0 / n, jitter=0.3, seed=2)
        _, d = _estimate(sc, g)
        true = true_local_errors(sc, g.t)
        big = np.abs(true) > 1e-3 * np.abs(true).max()
        rel.append(np.median(np.abs(d[big] - true[big]) / np.abs(true[big])))
    assert rel[0] < 0.25 and rel[1] < 0.1, rel


def test_defect_sums_track_the_global_error_at_the_order_of_the_scheme():
    """Σ|d_i| and the global error fall at the same rate under refinement."""
    sc = get_scheme("adams_pc", 4)
    sums, glob = [], []
    for n in (20, 40, 80):
        g = make_grid(np.linspace(0.5, 5.0, 10), max_step=5.0 / n)
        X, d = _estimate(sc, g)
        sums.append(np.abs(d).sum())
        glob.append(np.abs(X[:, 0] - exact(g.t)).max())
    ratio = np.array(sums) / np.array(glob)
    assert np.all((ratio > 0.3) & (ratio < 3.0)), ratio
    order = np.log2(sums[1] / sums[2])
    assert order > 2.5, order


def test_predictor_difference_overstates_the_local_error_of_the_pc_scheme():
    """Milne's device estimates the predictor's error, one order below the scheme's."""
    sc = get_scheme("adams_pc", 4)
    over = []
    for n in (40, 80):
        g = make_grid(np.linspace(0.5, 5.0, 10), max_step=5.0 / n)
        xe = exact(g.t)[:, None]
        # predictor values y_{i+1} of the PC scheme: its stage "y", recomputed from x
        X = integrate(sc, f, g.t, np.array([1.0]), fdot=fdot, jac=jac, fdot_jac=fdot_jac)
        Y = np.empty((g.k, 1))
        for batch in sc.batches(g.t):
            for r, i in enumerate(batch.steps.tolist()):
                name, f_terms, _ = batch.stages[0]
                h = g.t[i + 1] - g.t[i]
                Y[i] = X[i] + h * sum(c[r] * f(X[i - p.lag], g.t[i - p.lag]) for p, c in f_terms)
        pc = predictor_difference({"x": X, "y": Y})[:, 0]
        true = true_local_errors(sc, g.t)
        tail = slice(g.k // 2, None)                  # past the start-up steps
        over.append(np.median(np.abs(pc[tail]) / np.abs(true[tail])))
        assert np.all(np.isfinite(xe))
    assert over[0] > 3.0 and over[1] > 1.6 * over[0], over


def test_subdivide_keeps_measurements_switches_and_restarts():
    g = make_grid([1.0, 2.0, 4.0], max_step=0.5, switches=[1.5, 3.0])
    req = g.required_indices()
    assert set(g.J) <= set(req) and set(g.restarts) <= set(req) and {0, g.k} <= set(req)
    counts = [3] * (len(req) - 1)
    new = subdivide(g, counts)
    assert np.array_equal(new.meas_times, g.meas_times)
    assert np.array_equal(new.t[new.J], g.meas_times)
    assert np.array_equal(new.t[list(new.restarts)], g.t[list(g.restarts)])
    twins = int(np.sum(np.diff(g.t[req]) < 1e-9))     # the step into a switch stays one
    assert twins == 2 and new.k == 3 * (len(req) - 1 - twins) + twins
    with pytest.raises(ValueError, match="counts"):
        subdivide(g, counts[:-1])
    with pytest.raises(ValueError, match="counts"):
        subdivide(g, [0] + counts[1:])


def test_follow_steps_follows_the_integrator_with_bounded_step_ratios():
    from scipy.integrate import solve_ivp
    # a fast transient (rate 1e3) after t0 and after the switch at 3, slow elsewhere
    g = make_grid([1.0, 2.0, 5.0], t0=0.0, T=5.0, steps_per_interval=1, switches=[3.0])

    def rhs(t, x):
        return -1e3 * (x - (1.0 if t >= 3.0 else 0.0))
    ends = np.concatenate([solve_ivp(rhs, (a, b), [2.0], method="LSODA", rtol=1e-6).t
                           for a, b in ((0.0, 3.0), (3.0, 5.0))])
    new = follow_steps(g, ends, max_step=0.25)
    assert np.array_equal(new.t[new.J], g.meas_times)
    assert np.array_equal(new.t[list(new.restarts)], g.t[list(g.restarts)])
    h = new.h
    assert h.max() <= 0.25 * 1.2 + 1e-12
    # fine in the transients (steps of the integrator's size, 1e-3 or less), coarse after
    assert h[0] < 1e-3 and new.t[np.argmax(new.t >= 3.0) + 1] - 3.0 < 1e-3
    assert h[(new.t[:-1] > 0.5) & (new.t[:-1] < 2.5)].min() > 0.05
    # consecutive steps change by a bounded factor, except into and out of a restart
    ok = np.array([i for i in range(1, h.size)
                   if i not in new.restarts and i - 1 not in new.restarts])
    r = h[ok] / h[ok - 1]
    assert r.max() < 3.0 and r.min() > 1 / 3.0
    # far fewer steps than a uniform grid at the transient's step size
    assert new.k < 5.0 / 1e-3 / 20
    with pytest.raises(ValueError, match="ratio"):
        follow_steps(g, ends, ratio=1.0)
    with pytest.raises(ValueError, match="max_step"):
        follow_steps(g, ends, max_step=0.0)
