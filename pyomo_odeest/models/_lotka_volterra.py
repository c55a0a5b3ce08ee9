r"""Lotka–Volterra test problem of [AT] (eqs. (18)–(19)).

.. math::

    \dot x_1 = -p_1 x_1 + p_2 x_1 x_2, \qquad \dot x_2 = p_3 x_2 - p_4 x_1 x_2,
    \qquad x(0) = (0.4, 1).

[AT]'s eq. (18) prints ``p4 x1 x1``; the classical model and that paper's
own adjoint Jacobian use ``p4 x1 x2``, which is used here.  Data: both states
at t = 1, ..., 10, simulated from p = (1, 1, 1, 1) with Gaussian noise of
variance 0.05; [AT]'s hard start is p0 = (0.5, 0.5, 0.5, -0.2).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["lotka_volterra_data", "lotka_volterra_problem", "LV_P0", "LV_TRUE", "lv_rhs"]

LV_TRUE = (1.0, 1.0, 1.0, 1.0)
LV_P0 = (0.5, 0.5, 0.5, -0.2)
LV_X0 = (0.4, 1.0)


def lv_rhs(x, u, t):
    """Right-hand side, written on Pyomo objects (works on floats too)."""
    return [-u.p1 * x.x1 + u.p2 * x.x1 * x.x2,
            u.p3 * x.x2 - u.p4 * x.x1 * x.x2]


def lotka_volterra_data(seed=1, p=LV_TRUE, times=None, variance=0.05, noise=True):
    """Synthetic data (wide DataFrame, columns x1, x2) as in [AT], §4."""
    times = np.arange(1.0, 11.0) if times is None else np.asarray(times, dtype=float)
    p1, p2, p3, p4 = p
    sol = solve_ivp(lambda t, x: [-p1 * x[0] + p2 * x[0] * x[1], p3 * x[1] - p4 * x[0] * x[1]],
                    (0.0, float(times[-1])), LV_X0, t_eval=times, rtol=1e-11, atol=1e-12,
                    method="DOP853")
    y = sol.y.T.copy()
    if noise:
        y += np.random.default_rng(seed).normal(0.0, np.sqrt(variance), y.shape)
    return pd.DataFrame(y, index=pd.Index(times, name="time"), columns=["x1", "x2"])


def lotka_volterra_problem(data=None, p0=LV_P0, bounds=None, seed=1, sigma=None):
    """The [AT] estimation problem (least squares on both states; weights 1/σ²
    when the noise level ``sigma`` is given)."""
    data = lotka_volterra_data(seed) if data is None else data
    bounds = bounds or {}
    params = [Parameter(f"p{k}", float(v), *bounds.get(f"p{k}", (None, None)))
              for k, v in zip(range(1, 5), p0)]
    return EstimationProblem(states=["x1", "x2"], parameters=params, rhs=lv_rhs,
                             initial={"x1": LV_X0[0], "x2": LV_X0[1]}, data=data,
                             sigma=sigma, name="lotka_volterra")
