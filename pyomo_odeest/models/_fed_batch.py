"""A fed-batch series reaction A -> B -> C in three experiments with measured feeds.

The reactor volume :math:`V` grows with the feed :math:`F(t)` of A at
concentration :math:`c_{in}`; A and B are measured (20 times each, noise
σ = 0.01), V is not:

.. math::

    \\dot V = F,\\quad \\dot A = \\frac{F}{V}(c_{in} - A) - k_1 A,\\quad
    \\dot B = -\\frac{F}{V}B + k_1 A - k_2 B,\\qquad V(0) = 1,\\ A(0) = 1,\\ B(0) = 0.

Each experiment has its own feed programme (piecewise constant or piecewise
linear, :mod:`pyomo_odeest.problem._inputs`).  The data are simulated with
``scipy.integrate.solve_ivp`` (rtol 1e-10) at :data:`FED_BATCH_TRUE`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem._components import Parameter
from ..problem._declaration import EstimationProblem, Experiment
from ..problem._inputs import PiecewiseConstant, PiecewiseLinear

__all__ = ["FED_BATCH_TRUE", "FED_BATCH_FEEDS", "fed_batch_problem"]

FED_BATCH_TRUE = {"k1": 0.8, "k2": 0.3}
C_IN = 2.0
TIMES = np.linspace(0.5, 10, 20)
FED_BATCH_FEEDS = {"e1": PiecewiseConstant([0, 2, 5], [0.0, 0.3, 0.1]),
                   "e2": PiecewiseLinear([0, 3, 6, 10], [0.1, 0.4, 0.0, 0.2]),
                   "e3": PiecewiseConstant([0, 1, 4, 7], [0.5, 0.0, 0.2, 0.0])}


def _data(feed, rng, observed, noise):
    from scipy.integrate import solve_ivp
    k1, k2 = FED_BATCH_TRUE["k1"], FED_BATCH_TRUE["k2"]

    def rhs(t, z):
        V, A, B = z
        f = float(feed(t))
        return [f, f * (C_IN - A) / V - k1 * A, -f * B / V + k1 * A - k2 * B]
    s = solve_ivp(rhs, (0, TIMES[-1]), [1.0, 1.0, 0.0], t_eval=TIMES, rtol=1e-10, atol=1e-12,
                  max_step=0.02)
    d = pd.DataFrame(s.y.T[:, 1:], index=pd.Index(TIMES, name="time"), columns=["A", "B"])
    return (d + noise * rng.standard_normal(d.shape))[list(observed)]


def fed_batch_problem(start=(0.3, 1.0), observed=("A", "B"), sigma=None, noise=0.01, seed=0):
    """The three-experiment problem; ``start`` = (k1, k2) start values,
    ``observed`` the measured states, ``sigma`` the σ given to the problem
    (None: σ unknown, the uncertainty is scaled by the residual variance)."""
    rng = np.random.default_rng(seed)
    exps = [Experiment(n, _data(f, rng, observed, noise), inputs={"F": f}, sigma=sigma)
            for n, f in FED_BATCH_FEEDS.items()]
    return EstimationProblem(
        ["V", "A", "B"], [Parameter("k1", start[0], lb=0), Parameter("k2", start[1], lb=0)],
        rhs=lambda x, u, t: [u.F, u.F * (C_IN - x.A) / x.V - u.k1 * x.A,
                             -u.F * x.B / x.V + u.k1 * x.A - u.k2 * x.B],
        initial={"V": 1.0, "A": 1.0, "B": 0.0}, data=None, observe=list(observed),
        experiments=exps, name="fed_batch")
