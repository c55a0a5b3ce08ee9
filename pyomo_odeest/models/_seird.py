r"""SEIRD epidemic test problem [SEIRD, Example 1; Piccolomini & Zama 2020].

.. math::

    \dot S = -\beta \frac{S I}{N}, \qquad
    \dot E = \beta \frac{S I}{N} - \sigma E, \qquad
    \dot I = \sigma E - \gamma I - \mu I, \qquad
    \dot R = \gamma I, \qquad
    \dot D = \mu I.

The right-hand sides sum to zero, so :math:`S + E + I + R + D = N`
[SEIRD, eq. (5)] is a linear invariant, which every scheme of the package
preserves exactly on the grid; the conservation penalty of the cost
[SEIRD, eqs. (3) and (6), reconstructed] is therefore a function of the
parameters only.  The settings (true values, measurement times, noise model,
weights) and the cost are stated in docs/seird.md.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

from ..discretization._grid import make_grid
from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["SEIRD_STATES", "SEIRD_PARAMS", "SEIRD_TRUE", "SEIRD_X0", "SEIRD_N", "SEIRD_U0",
           "seird_rhs", "seird_solution", "seird_data", "seird_problem", "grid_points",
           "conservation_sum", "log_objective", "fit_reduced"]

#: State names, in order.
SEIRD_STATES = ("S", "E", "I", "R", "D")
#: Parameter names, in order.
SEIRD_PARAMS = ("beta", "sigma", "gamma", "mu")
#: Population (states are fractions of a population of 1e6).
SEIRD_N = 1.0
#: True rates per day: beta (R_0 = beta/(gamma+mu) = 3.3), sigma = 1/5 (5-day latent
#: period), gamma = 1/10 (10-day infectious period), mu (infection fatality
#: mu/(gamma+mu) = 4.8 %).
SEIRD_TRUE = {"beta": 0.35, "sigma": 0.2, "gamma": 0.1, "mu": 0.005}
#: True initial state (fractions): 1000 exposed, 500 infected, 100 recovered and
#: 10 dead per 1e6.
SEIRD_X0 = {"S": 1.0 - 1.61e-3, "E": 1.0e-3, "I": 5.0e-4, "R": 1.0e-4, "D": 1.0e-5}
#: Default starting guess of the rates (0.4x - 2x the true values).
SEIRD_U0 = {"beta": 0.5, "sigma": 0.1, "gamma": 0.2, "mu": 0.01}
#: Default measurement times (days).
SEIRD_TIMES = np.arange(2.0, 101.0, 2.0)


def seird_rhs(x, u, t, N=SEIRD_N):
    r"""Right-hand side :math:`f(x, u)` of the SEIRD model.

    Written on Pyomo objects (``x.S``, ``u.beta``, ...); works on any objects
    with these attributes.

    Returns
    -------
    list
        :math:`[-\beta SI/N,\ \beta SI/N - \sigma E,\ \sigma E - (\gamma+\mu) I,\
        \gamma I,\ \mu I]`.
    """
    inf = u.beta * x.S * x.I / N
    return [-inf, inf - u.sigma * x.E, u.sigma * x.E - u.gamma * x.I - u.mu * x.I,
            u.gamma * x.I, u.mu * x.I]


def _rhs_numeric(x, p, N):
    S, E, I, R, D = x
    beta, sigma, gamma, mu = p
    inf = beta * S * I / N
    return [-inf, inf - sigma * E, sigma * E - (gamma + mu) * I, gamma * I, mu * I]


def seird_solution(times, params=None, x0=None, N=SEIRD_N):
    r"""Accurate solution :math:`x(t)` at ``times`` (DOP853, rtol 1e-12).

    Parameters
    ----------
    times : array_like
        Output times (> 0 allowed from 0).
    params, x0 : mapping, optional
        Rates and initial state (default :data:`SEIRD_TRUE`, :data:`SEIRD_X0`).

    Returns
    -------
    pandas.DataFrame
        Index ``time``, columns S, E, I, R, D.
    """
    params = dict(SEIRD_TRUE if params is None else params)
    x0 = dict(SEIRD_X0 if x0 is None else x0)
    times = np.asarray(times, dtype=float)
    p = [params[k] for k in SEIRD_PARAMS]
    sol = solve_ivp(lambda t, x: _rhs_numeric(x, p, N), (0.0, float(times[-1])),
                    [x0[s] for s in SEIRD_STATES], t_eval=times, rtol=1e-12, atol=1e-15,
                    method="DOP853")
    return pd.DataFrame(sol.y.T, index=pd.Index(times, name="time"), columns=list(SEIRD_STATES))


def seird_data(noise=0.05, seed=0, observed=("I", "R", "D"), relative=True, times=None,
               params=None, x0=None, N=SEIRD_N):
    r"""Synthetic SEIRD measurements with Gaussian noise, relative
    :math:`\bar z = z\,(1 + \eta\,\varepsilon)` or absolute
    :math:`\bar z = z + \eta\,\varepsilon`; the initial state of all five
    compartments is "measured" with the same noise model (drawn after the data
    from the same generator).  See docs/seird.md, "The model and the settings".

    Parameters
    ----------
    noise : float
        :math:`\eta` (0.05, 0.1, 0.2 in [SEIRD]).
    seed : int
        Seed of ``numpy.random.default_rng``.
    observed : sequence of str
        Observed compartments (default I, R, D).
    relative : bool
        Relative (default) or absolute noise.
    times : array_like, optional
        Measurement times (default 2, 4, ..., 100 days).
    params, x0 : mapping, optional
        True rates / initial state (default :data:`SEIRD_TRUE`, :data:`SEIRD_X0`).
    N : float
        Population.

    Returns
    -------
    pandas.DataFrame
        Wide data (index ``time``, one column per observed compartment).
        ``attrs`` holds ``x0_measured`` (dict), ``truth`` (rates),
        ``x0_true`` (dict), ``noise``, ``N`` and the noise-free values ``clean``.
    """
    times = SEIRD_TIMES if times is None else np.asarray(times, dtype=float)
    observed = list(observed)
    bad = [o for o in observed if o not in SEIRD_STATES]
    if bad:
        raise ValueError(f"observed compartments {bad} are not SEIRD states {SEIRD_STATES}")
    params = dict(SEIRD_TRUE if params is None else params)
    x0 = dict(SEIRD_X0 if x0 is None else x0)
    clean = seird_solution(times, params, x0, N)[observed]
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal(clean.shape)
    eps0 = rng.standard_normal(len(SEIRD_STATES))
    z = clean.to_numpy()
    x0v = np.array([x0[s] for s in SEIRD_STATES])
    if relative:
        zbar = z * (1.0 + noise * eps)
        x0bar = x0v * (1.0 + noise * eps0)
    else:
        zbar = z + noise * eps
        x0bar = x0v + noise * eps0
    df = pd.DataFrame(zbar, index=pd.Index(times, name="time"), columns=observed)
    df.attrs.update(x0_measured=dict(zip(SEIRD_STATES, map(float, x0bar))), truth=params,
                    x0_true=x0, noise=float(noise), N=float(N), clean=clean)
    return df


def grid_points(data, steps_per_interval=2, t0=0.0):
    """Number k+1 of points of the default integration grid for ``data``.

    The grid is :func:`~pyomo_odeest.discretization._grid.make_grid` of the measurement times
    with ``steps_per_interval`` (what ``DiscreteModel(problem,
    steps_per_interval=...)`` builds).
    """
    return len(make_grid(np.asarray(data.index, dtype=float), t0=t0,
                         steps_per_interval=steps_per_interval).t)


def conservation_sum(X, N=SEIRD_N):
    r""":math:`\sum_i (\mathbf 1^\top x_i - N)^2` over the rows of ``X`` ((k+1, 5))."""
    X = np.asarray(X, dtype=float)
    return float(np.sum((X.sum(axis=1) - N) ** 2))


def seird_problem(data, estimate_initial=False, conservation_weight=1e4, ic_weight=1.0,
                  x0_measured=None, rel_sigma=None, u0=None, x0_guess=None,
                  steps_per_interval=2, n_points=None, N=SEIRD_N, conservation=True):
    r"""The SEIRD estimation problem [SEIRD, eq. (6)]: the weighted misfit and,
    with ``estimate_initial=True``, the initial-state term and the conservation
    penalty :math:`(k+1)\,\frac{\rho}{N^2}(\mathbf 1^\top x_0 - N)^2` (the grid sum
    rewritten by the discrete invariant); see docs/seird.md, "The cost function".

    Parameters
    ----------
    data : pandas.DataFrame
        From :func:`seird_data` (or any wide frame of S/E/I/R/D columns).
    estimate_initial : bool
        Also estimate :math:`S_0, \dots, D_0` (parameters ``S0`` ... ``D0``).
    conservation_weight : float
        :math:`\rho` (dimensionless): per grid point, the conservation residual
        counts like a measurement of the total with relative standard deviation
        :math:`\rho^{-1/2}` (default 1 %).
    ic_weight : float
        :math:`\omega`, weight of the initial-state term.
    x0_measured : mapping, optional
        :math:`\bar x_0` (default ``data.attrs['x0_measured']``).
    rel_sigma : float, optional
        :math:`\eta_w`, the relative standard deviation of the weights
        (default ``data.attrs['noise']``, else 0.05).
    u0 : mapping, optional
        Starting rates (default :data:`SEIRD_U0`).
    x0_guess : mapping, optional
        Starting initial state (default :math:`\bar x_0`, moved onto the
        bounds :math:`[0, N]` where the noise put it outside).  With
        ``estimate_initial=False`` the initial state is *fixed* at
        ``x0_guess`` (default: the true :data:`SEIRD_X0`, as in [SEIRD],
        Example 2, where the exact initial conditions are given).
    steps_per_interval : int
        Grid used to count the :math:`k+1` points (must match the
        ``DiscreteModel`` / ``estimate_simultaneous`` call).
    n_points : int, optional
        :math:`k+1` directly (overrides ``steps_per_interval``).
    N : float
        Population.
    conservation : bool
        Include the conservation term (``False``: same problem without it).

    Returns
    -------
    EstimationProblem
        With attributes ``seird`` (dict of the settings: weights, ``n_points``,
        ``x0_measured``).
    """
    u0 = dict(SEIRD_U0 if u0 is None else u0)
    eta = rel_sigma if rel_sigma is not None else float(data.attrs.get("noise", 0.05))
    zbar = data.to_numpy(dtype=float)
    scale = np.maximum(np.abs(zbar), 1e-3 * np.nanmax(np.abs(zbar), axis=0))
    sigma = pd.DataFrame(eta * scale, index=data.index, columns=data.columns)
    params = [Parameter(p, float(u0[p]), lb=1e-8, ub=10.0) for p in SEIRD_PARAMS]
    info = dict(rel_sigma=eta, N=N, estimate_initial=estimate_initial)
    penalty = None
    if estimate_initial:
        xm = x0_measured if x0_measured is not None else data.attrs.get("x0_measured")
        if xm is None:
            raise ValueError("estimate_initial=True needs x0_measured (or data.attrs['x0_measured'])")
        xm = {s: float(xm[s]) for s in SEIRD_STATES}
        # the measured x0 is noisy and may lie outside [0, N] (S0 = 1.08 > N = 1 at 10 % noise):
        # as start value it is moved onto the bounds; the penalty keeps the measured value
        xg = ({s: min(max(xm[s], 0.0), N) for s in SEIRD_STATES} if x0_guess is None
              else dict(x0_guess))
        params += [Parameter(f"{s}0", float(xg[s]), lb=0.0, ub=N) for s in SEIRD_STATES]
        initial = {s: f"{s}0" for s in SEIRD_STATES}
        w_ic = {s: ic_weight / (eta * abs(xm[s])) ** 2 for s in SEIRD_STATES}
        npts = n_points if n_points is not None else grid_points(data, steps_per_interval)
        rho = conservation_weight / N**2 if conservation else 0.0
        info.update(x0_measured=xm, ic_weights=w_ic, n_points=npts, rho=rho)

        def penalty(u):
            ic = sum(w_ic[s] * (u[f"{s}0"] - xm[s]) ** 2 for s in SEIRD_STATES)
            if rho == 0.0:
                return ic
            tot = sum(u[f"{s}0"] for s in SEIRD_STATES) - N
            return ic + npts * rho * tot**2
    else:
        xg = dict(SEIRD_X0 if x0_guess is None else x0_guess)
        initial = {s: float(xg[s]) for s in SEIRD_STATES}
        info.update(x0=xg)
    prob = EstimationProblem(states=list(SEIRD_STATES), parameters=params,
                             rhs=lambda x, u, t: seird_rhs(x, u, t, N), initial=initial,
                             data=data, sigma=sigma, T=float(data.index[-1]), name="seird",
                             penalty=penalty)
    prob.seird = info
    return prob


# ---------------------------------------------------------------------------
# reduced-space fits with the CG / BFGS optimizers of [SEIRD]
# ---------------------------------------------------------------------------
def log_objective(dm):
    r"""Objective and adjoint gradient in log-parameters,
    :math:`\tilde J(\theta) = J(e^{\theta})`,
    :math:`\nabla_\theta \tilde J = e^{\theta} \odot \nabla_u J(e^{\theta})`, with the
    discrete adjoint gradient of ``dm``; failed simulations return :math:`+\infty`.
    Why log-parameters: docs/seird.md, "Methods".

    Returns
    -------
    fun, grad : callable
        Functions of :math:`\theta`.
    """
    from ..discretization.discrete import SimulationError
    cache = {}

    def traj(th):
        key = th.tobytes()
        if key not in cache:
            cache.clear()
            u = np.exp(th)
            try:
                with np.errstate(all="ignore"):
                    cache[key] = (u, dm.simulate(u))
            except SimulationError:
                cache[key] = (u, None)
        return cache[key]

    def fun(th):
        u, tr = traj(np.asarray(th, dtype=float))
        if tr is None or not np.all(np.isfinite(tr.X)):
            return np.inf
        return dm.objective(u, tr)

    def grad(th):
        u, tr = traj(np.asarray(th, dtype=float))
        if tr is None:
            return np.full(len(u), np.nan)
        return u * dm.gradient(u, "adjoint", tr)

    return fun, grad


def fit_reduced(problem, method="bfgs", line_search="secant", u0=None, gtol=1e-3, ftol=1e-12,
                max_iter=2000, steps_per_interval=2, dm=None):
    r"""Minimize the reduced cost :math:`J(u)` in log-parameters by CG or BFGS.

    Parameters
    ----------
    problem : EstimationProblem
        From :func:`seird_problem`.
    method : {'bfgs', 'cg-fr', 'cg-pr', 'cg-pr+', 'cg-hs', 'cg-dy'}
        :func:`~pyomo_odeest.optimizers.minimize_bfgs` or
        :func:`~pyomo_odeest.optimizers.minimize_cg` with that :math:`\beta`.
    line_search : {'secant', 'wolfe'}
        The secant line search of [SEIRD], eq. (25), or strong Wolfe.
    u0 : array_like, optional
        Starting parameters (default the problem's).
    gtol, ftol, max_iter
        Stopping rules of the optimizers (``gtol`` on
        :math:`\lVert\nabla_\theta \tilde J\rVert_\infty`).
    steps_per_interval : int
        Integration grid (ignored if ``dm`` is given).
    dm : DiscreteModel, optional
        A prebuilt discrete model of ``problem``.

    Returns
    -------
    res : OptimizeResult
        With ``res.u`` (estimates) and ``res.dm`` added.
    """
    from ..discretization.discrete import DiscreteModel
    from ..optimizers import minimize_bfgs, minimize_cg
    dm = DiscreteModel(problem, steps_per_interval=steps_per_interval) if dm is None else dm
    npts = getattr(problem, "seird", {}).get("n_points")
    if npts is not None and npts != dm.k + 1:
        raise ValueError(f"the conservation penalty counts {npts} grid points but the discrete "
                         f"model has {dm.k + 1}: build both with the same steps_per_interval")
    fun, grad = log_objective(dm)
    th0 = np.log(problem.u0 if u0 is None else np.asarray(u0, dtype=float))
    m = method.lower()
    if m == "bfgs":
        res = minimize_bfgs(fun, grad, th0, line_search=line_search, gtol=gtol, ftol=ftol,
                            max_iter=max_iter)
    elif m.startswith("cg-"):
        res = minimize_cg(fun, grad, th0, beta=m[3:].upper(), line_search=line_search,
                          gtol=gtol, ftol=ftol, max_iter=max_iter)
    else:
        raise ValueError(f"unknown method {method!r}")
    res.u = np.exp(res.x)
    res.dm = dm
    return res
