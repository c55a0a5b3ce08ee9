r"""Latent dynamic HIV model of [MHV] (eq. (30), Table 1; Lavielle et al., 2011).

.. math::

    \dot T_{NI} &= \lambda - (1-\eta_{NRTI})\gamma T_{NI}V_I - \mu_{NI}T_{NI},\\
    \dot T_L &= (1-\pi)(1-\eta_{NRTI})\gamma T_{NI}V_I - \alpha_L T_L - \mu_L T_L,\\
    \dot T_A &= \pi(1-\eta_{NRTI})\gamma T_{NI}V_I + \alpha_L T_L - \mu_A T_A,\\
    \dot V_I &= (1-\eta_{PI})\,p\,T_A - \mu_V V_I,\\
    \dot V_{NI} &= \eta_{PI}\,p\,T_A - \mu_V V_{NI},

observed through :math:`V = V_I + V_{NI}` (``V``) and
:math:`T = T_{NI} + T_L + T_A` (``T``); 11 parameters, 5 states, 2
observables.  Parameter names: ``lam`` (λ), ``gamma``, ``mu_NI``, ``mu_L``,
``mu_A``, ``mu_V``, ``p``, ``alpha_L``, ``pi`` (π), ``eta_NRTI``, ``eta_PI``.

Initial state
-------------
[MHV] does not state x(0).  Here treatment starts at t = 0 from the
untreated (η = 0) steady state, a function of the parameters, x(0) = l(u):

.. math::

    c = \pi + (1-\pi)\frac{\alpha_L}{\alpha_L+\mu_L},\quad
    T_{NI}^0 = \frac{\mu_A\mu_V}{\gamma p c},\quad
    F = \lambda - \mu_{NI}T_{NI}^0,\quad
    V_I^0 = \frac{F}{\gamma T_{NI}^0},\quad
    T_L^0 = \frac{(1-\pi)F}{\alpha_L+\mu_L},\quad
    T_A^0 = \frac{\pi F + \alpha_L T_L^0}{\mu_A},\quad V_{NI}^0 = 0.

With Table 1 this is T ≈ 168.5, V ≈ 81.7 at t = 0 (units of the source);
under therapy V falls by about three decades in the first month while T
recovers slowly (time scales from 1/μ_V ≈ 0.03 to 1/(α_L+μ_L) ≈ 108 days: a
mildly stiff system).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["HIV_PARAMETERS", "HIV_TIMES", "HIV_ESTIMATED", "HIV_STATES", "hiv_rhs",
           "hiv_initial", "hiv_simulate", "hiv_problem"]

#: Table 1 of [MHV] (ϕ_0), in the order of the table.
HIV_PARAMETERS = {
    "lam": 2.61, "gamma": 0.0021, "mu_NI": 0.0085, "mu_L": 0.0092, "mu_A": 0.289,
    "mu_V": 30.0, "p": 641.0, "alpha_L": 1.6e-5, "pi": 0.443, "eta_NRTI": 0.90,
    "eta_PI": 0.99,
}
HIV_STATES = ["T_NI", "T_L", "T_A", "V_I", "V_NI"]

#: Default measurement times (days after the start of therapy).
HIV_TIMES = (0.0, 1.0, 2.0, 4.0, 7.0, 14.0, 28.0, 56.0, 84.0, 112.0, 140.0, 168.0)

#: Parameters estimated by default; the others are fixed at their Table 1 value.
HIV_ESTIMATED = ("lam", "mu_NI", "mu_L", "mu_A", "mu_V", "pi")


def hiv_rhs(x, u, t):
    """Right-hand side [MHV, eq. (30)] on Pyomo objects or floats."""
    infection = (1 - u.eta_NRTI) * u.gamma * x.T_NI * x.V_I
    return [u.lam - infection - u.mu_NI * x.T_NI,
            (1 - u.pi) * infection - u.alpha_L * x.T_L - u.mu_L * x.T_L,
            u.pi * infection + u.alpha_L * x.T_L - u.mu_A * x.T_A,
            (1 - u.eta_PI) * u.p * x.T_A - u.mu_V * x.V_I,
            u.eta_PI * u.p * x.T_A - u.mu_V * x.V_NI]


def hiv_initial(u):
    """Untreated steady state (see the module docstring) as a dict state -> expression."""
    c = u.pi + (1 - u.pi) * u.alpha_L / (u.alpha_L + u.mu_L)
    T_NI = u.mu_A * u.mu_V / (u.gamma * u.p * c)
    F = u.lam - u.mu_NI * T_NI
    T_L = (1 - u.pi) * F / (u.alpha_L + u.mu_L)
    return {"T_NI": T_NI, "T_L": T_L, "T_A": (u.pi * F + u.alpha_L * T_L) / u.mu_A,
            "V_I": F / (u.gamma * T_NI), "V_NI": 0.0}


def hiv_simulate(params=None, times=HIV_TIMES):
    """Observations ``V`` and ``T`` at ``times`` (tight tolerances, Radau)."""
    u = SimpleNamespace(**dict(HIV_PARAMETERS, **(params or {})))
    x0 = hiv_initial(u)
    x0 = [float(x0[s]) for s in HIV_STATES]

    def f(t, y):
        return hiv_rhs(SimpleNamespace(**dict(zip(HIV_STATES, y))), u, t)
    times = np.asarray(times, dtype=float)
    sol = solve_ivp(f, (0.0, float(times[-1])), x0, method="Radau", t_eval=times,
                    rtol=1e-12, atol=1e-12)
    X = sol.y.T
    return pd.DataFrame({"V": X[:, 3] + X[:, 4], "T": X[:, 0] + X[:, 1] + X[:, 2]},
                        index=pd.Index(times, name="time"))


def hiv_problem(seed=0, noise=0.05, times=HIV_TIMES, estimate=HIV_ESTIMATED, start=0.3,
                sigma_rel=None, params=None):
    r"""The HIV estimation problem with synthetic data.

    Data: :math:`V` and :math:`T` at ``times`` (default 0, 1, 2, 4, 7, 14, 28,
    56, 84, 112, 140, 168 days) simulated from Table 1 (or ``params``), with
    multiplicative Gaussian noise :math:`\bar z = z\,(1 + \text{noise}\,\epsilon)`,
    :math:`\epsilon\sim N(0,1)`, drawn with ``seed``.  Least squares weighted
    by :math:`\sigma = \sigma_{rel}|z|`, z the noise-free observation
    (relative errors, so that the viral load counts over its three decades),
    :math:`\sigma_{rel}` = ``sigma_rel`` or, by default, ``noise`` (0.05 when
    ``noise`` is 0).  With the defaults J at the truth is a χ² with 24
    degrees of freedom.

    Estimated (default ``HIV_ESTIMATED``): λ, μ_NI, μ_L, μ_A, μ_V, π.  The
    other five (γ, p, α_L, η_NRTI, η_PI) are fixed at their Table 1 values
    because the two observables do not determine them: the Fisher information
    of all 11 log-parameters has condition number 2.7e12 (smallest eigenvalue
    1.6e-8, almost pure γ), that of the six chosen 352 (smallest eigenvalue 99;
    checked in ``tests/approaches/test_continuous.py``; docs/continuous.md,
    "The latent HIV model").  Any subset can be estimated with ``estimate``.

    Start values: the truth times :math:`\exp(\text{start}\cdot\xi)`,
    :math:`\xi\sim U[-1, 1]` (same ``seed``) for the estimated parameters.
    Bounds: [truth/20, truth·20] for the rates, [0, 1] for π, η_NRTI, η_PI.

    Returns
    -------
    EstimationProblem (name ``'hiv'``); the true parameter vector is in
    ``problem.true_values`` (a dict).
    """
    truth = dict(HIV_PARAMETERS, **(params or {}))
    unknown = [e for e in estimate if e not in truth]
    if unknown:
        raise ValueError(f"unknown HIV parameters {unknown}; known: {list(truth)}")
    rng = np.random.default_rng(seed)
    clean = hiv_simulate(truth, times)
    eps = rng.standard_normal(clean.shape)
    data = clean * (1 + noise * eps)
    srel = sigma_rel if sigma_rel is not None else (noise if noise > 0 else 0.05)
    sigma = srel * clean.abs()
    factors = np.exp(start * rng.uniform(-1, 1, len(truth)))
    params_list = []
    for (name, val), fac in zip(truth.items(), factors):
        if name in estimate:
            if name in ("pi", "eta_NRTI", "eta_PI"):
                lb, ub = 0.0, 1.0
                v0 = float(np.clip(val * fac, 0.01, 0.99))
            else:
                lb, ub = val / 20, val * 20
                v0 = val * fac
            params_list.append(Parameter(name, v0, lb=lb, ub=ub))
        else:
            params_list.append(Parameter(name, val, fixed=True))
    prob = EstimationProblem(
        states=HIV_STATES, parameters=params_list, rhs=hiv_rhs,
        initial={s: (lambda u, s=s: hiv_initial(u)[s]) for s in HIV_STATES}, data=data,
        observe=lambda x, u, t: {"V": x.V_I + x.V_NI, "T": x.T_NI + x.T_L + x.T_A},
        sigma=sigma, name="hiv")
    prob.true_values = truth
    return prob

