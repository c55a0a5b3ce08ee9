r"""Bellman's reaction-kinetics problem, a published estimation problem with a known global
optimum.

Data: R. Bellman, J. Jacquez, R. Kalaba and S. Schwimmer, *Quasilinearization
and the estimation of chemical rate constants from raw kinetic data*,
Mathematical Biosciences 1 (1967); posed as a global-optimization test by
W. R. Esposito and C. A. Floudas, *Global optimization for the parameter
estimation of differential-algebraic systems*, Ind. Eng. Chem. Res. 39 (2000),
who report the global minimum

.. math::

    \dot y = k_1 (126.2 - y)(91.9 - y)^2 - k_2 y^2,\qquad y(0) = 0,

:math:`f^* = 22.03094` at :math:`k^* = (4.5704\cdot 10^{-6}, 2.7845\cdot 10^{-4})`,
unweighted least squares over 14 measurements in [1, 39], :math:`0 \le k_i \le 0.1`.
The two rate constants differ by two orders of magnitude and the right-hand side
is stiff far from the optimum.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["bellman_problem", "BELLMAN_OPTIMUM", "BELLMAN_K"]

#: the published global minimum and minimizer [Esposito & Floudas 2000]
BELLMAN_OPTIMUM = 22.03094
BELLMAN_K = (4.5704e-6, 2.7845e-4)

_T = [1, 2, 3, 4, 5, 6, 7, 9, 11, 14, 19, 24, 29, 39]
_Y = [1.4, 6.3, 10.4, 14.2, 17.6, 21.4, 23.0, 27.0, 30.4, 34.4, 38.8, 41.6, 43.5, 45.3]


def bellman_problem(k0=(1e-5, 1e-3)):
    """Bellman's problem (module docstring); parameters k1, k2 in [0, 0.1]."""
    data = pd.DataFrame({"y": _Y}, index=pd.Index(np.array(_T, dtype=float), name="time"))
    return EstimationProblem(
        states=["y"],
        parameters=[Parameter("k1", float(k0[0]), lb=0.0, ub=0.1),
                    Parameter("k2", float(k0[1]), lb=0.0, ub=0.1)],
        rhs=lambda x, u, t: [u.k1 * (126.2 - x.y) * (91.9 - x.y) ** 2 - u.k2 * x.y ** 2],
        initial={"y": 0.0}, data=data, name="bellman")
