r"""Two problems of the kind users bring: Robertson's stiff kinetics measured in
several experiments with log-rates, and a two-compartment pharmacokinetic model
with a one-hour infusion.

Robertson (1966), the classical stiff test problem:

.. math::

    \dot A = -k_1 A + k_3 B C,\quad \dot B = k_1 A - k_3 B C - k_2 B^2,\quad
    \dot C = k_2 B^2,

with :math:`k = (0.04, 3\cdot 10^7, 10^4)`, estimated as :math:`\log k`; A and
C measured (σ = 0.005) in three experiments that start from different mixtures,
and the intermediate B (of size :math:`10^{-5}`, σ = :math:`10^{-7}`) in the
first.  The Jacobian's eigenvalues reach :math:`-10^4` (stiff: an explicit
scheme on a grid of steps 0.1–2 is far outside its stability region).  With
``measure_b=False`` B is never measured and the data determine
:math:`k_3/\sqrt{k_2}` far better than :math:`k_2` and :math:`k_3` apart (a
practically non-identifiable direction).

Pharmacokinetics: a depot filled by an infusion :math:`R(t)` (100 mg/h for one
hour, a :class:`~pyomo_odeest.PiecewiseConstant` input), first-order absorption
:math:`k_a`, central volume V, clearance CL, inter-compartmental clearance Q to
a peripheral volume of 20 L; the concentration :math:`A_c/V` measured with 5 %
proportional noise, σ not given (estimated by the residual scale).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyomo.environ as pyo
from scipy.integrate import solve_ivp

from ..problem._declaration import EstimationProblem, Experiment, Parameter
from ..problem._inputs import PiecewiseConstant

__all__ = ["robertson_problem", "ROBERTSON_LOG_K", "pk_infusion_problem", "PK_TRUE"]

#: log k of the data of :func:`robertson_problem`
ROBERTSON_LOG_K = {"lk1": float(np.log(0.04)), "lk2": float(np.log(3e7)),
                   "lk3": float(np.log(1e4))}
ROBERTSON_X0 = ((1.0, 0.0, 0.0), (0.6, 0.0, 0.4), (0.8, 0.0, 0.1))
ROBERTSON_TIMES = (0.1, 0.4, 1.0, 2.0, 4.0, 7.0, 10.0, 20.0, 40.0)

#: parameters of the data of :func:`pk_infusion_problem`
PK_TRUE = {"ka": 1.5, "CL": 2.0, "V": 10.0, "Q": 1.0}
PK_VP = 20.0
PK_TIMES = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 24.0)


def _robertson(t, x, k):
    k1, k2, k3 = k
    return [-k1 * x[0] + k3 * x[1] * x[2], k1 * x[0] - k3 * x[1] * x[2] - k2 * x[1] ** 2,
            k2 * x[1] ** 2]


def robertson_problem(start_factor=(2.0, 0.5, 2.0), sigma=0.005, seed=0, measure_b=True,
                      sigma_b=1e-7) -> EstimationProblem:
    """Robertson's kinetics in three experiments (module docstring), parameters
    ``lk1, lk2, lk3`` (log rates) started at the data's rates times ``start_factor``."""
    t = np.asarray(ROBERTSON_TIMES)
    k = [np.exp(ROBERTSON_LOG_K[n]) for n in ("lk1", "lk2", "lk3")]
    rng = np.random.default_rng(seed)
    exps = []
    for e, x0 in enumerate(ROBERTSON_X0):
        s = solve_ivp(_robertson, (0.0, t[-1]), x0, method="Radau", t_eval=t, args=(k,),
                      rtol=1e-12, atol=1e-14)
        d = pd.DataFrame({"A": s.y[0], "C": s.y[2]}, index=pd.Index(t, name="time"))
        d = d + sigma * rng.standard_normal(d.shape)
        sig = {"A": sigma, "C": sigma}
        if measure_b:
            d["B"] = (s.y[1] + sigma_b * rng.standard_normal(t.size)) if e == 0 else np.nan
            sig["B"] = sigma_b
        exps.append(Experiment(f"e{e + 1}", d, initial={"A": x0[0], "B": x0[1], "C": x0[2]},
                               sigma=sig))
    start = {n: ROBERTSON_LOG_K[n] + float(np.log(f))
             for n, f in zip(("lk1", "lk2", "lk3"), start_factor)}
    return EstimationProblem(
        states=["A", "B", "C"],
        parameters=[Parameter(n, start[n]) for n in ("lk1", "lk2", "lk3")],
        rhs=lambda x, u, t: [-pyo.exp(u.lk1) * x.A + pyo.exp(u.lk3) * x.B * x.C,
                             pyo.exp(u.lk1) * x.A - pyo.exp(u.lk3) * x.B * x.C
                             - pyo.exp(u.lk2) * x.B ** 2,
                             pyo.exp(u.lk2) * x.B ** 2],
        initial={"A": 1.0, "B": 0.0, "C": 0.0}, data=None, experiments=exps,
        name="robertson")


def _pk(t, x, p):
    R = 100.0 if t < 1.0 else 0.0
    Ad, Ac, Ap = x
    return [R - p["ka"] * Ad,
            p["ka"] * Ad - (p["CL"] + p["Q"]) / p["V"] * Ac + p["Q"] / PK_VP * Ap,
            p["Q"] / p["V"] * Ac - p["Q"] / PK_VP * Ap]


def pk_infusion_problem(start=None, noise=0.05, seed=3) -> EstimationProblem:
    """The pharmacokinetic problem of the module docstring; ``start``: a mapping of
    start values (default ka=1, CL=1, V=5, Q=0.5); bounds ka, CL, Q in [1e-3, 100],
    V in [1e-2, 1000]."""
    t = np.asarray(PK_TIMES)
    s1 = solve_ivp(_pk, (0.0, 1.0), [0.0, 0.0, 0.0], args=(PK_TRUE,), rtol=1e-12, atol=1e-12)
    s2 = solve_ivp(_pk, (1.0, t[-1]), s1.y[:, -1], args=(PK_TRUE,), t_eval=t[t >= 1.0],
                   rtol=1e-12, atol=1e-12)
    s0 = solve_ivp(_pk, (0.0, 1.0), [0.0, 0.0, 0.0], args=(PK_TRUE,), t_eval=t[t < 1.0],
                   rtol=1e-12, atol=1e-12)
    C = np.concatenate([s0.y[1], s2.y[1]]) / PK_TRUE["V"]
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({"C": C * (1.0 + noise * rng.standard_normal(C.size))},
                        index=pd.Index(t, name="time"))
    v = dict(ka=1.0, CL=1.0, V=5.0, Q=0.5, **(start or {}))
    return EstimationProblem(
        states=["Ad", "Ac", "Ap"],
        parameters=[Parameter("ka", v["ka"], lb=1e-3, ub=100), Parameter("CL", v["CL"], lb=1e-3, ub=100),
                    Parameter("V", v["V"], lb=1e-2, ub=1000), Parameter("Q", v["Q"], lb=1e-3, ub=100)],
        rhs=lambda x, u, t: [u.R - u.ka * x.Ad,
                             u.ka * x.Ad - (u.CL + u.Q) / u.V * x.Ac + u.Q / PK_VP * x.Ap,
                             u.Q / u.V * x.Ac - u.Q / PK_VP * x.Ap],
        initial={"Ad": 0.0, "Ac": 0.0, "Ap": 0.0},
        observe=lambda x, u, t: {"C": x.Ac / u.V},
        inputs={"R": PiecewiseConstant([0.0, 1.0], [100.0, 0.0])},
        data=data, name="pk_infusion")
