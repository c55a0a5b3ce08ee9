r"""Two published estimation problems with known optima (COPS 3.0 collection).

E. D. Dolan, J. J. Moré and T. S. Munson, *Benchmarking optimization software
with COPS 3.0*, Argonne report ANL/MCS-TM-273 (2004), problems "pinene" and
"gasoil"; the data are those of the original studies.

**Isomerization of α-pinene** (Box, Hunter, MacGregor & Erjavec, 1973):
five states, five first-order rate constants of order 1e-5–1e-4 s⁻¹, all
states measured at eight times up to 36 420 s; unweighted least squares.

.. math::

    \dot y_1 = -(\theta_1 + \theta_2) y_1,\quad
    \dot y_2 = \theta_1 y_1,\quad
    \dot y_3 = \theta_2 y_1 - (\theta_3 + \theta_4) y_3 + \theta_5 y_5,\quad
    \dot y_4 = \theta_3 y_3,\quad
    \dot y_5 = \theta_4 y_3 - \theta_5 y_5,

:math:`y(0) = (100, 0, 0, 0, 0)`. Published optimum
:math:`f^* = 19.872` at
:math:`\theta^* = (5.9256, 2.9632, 2.0450, 27.473, 4.0073)\cdot 10^{-5}`.
The parameters are four to five orders of magnitude below the states: a test
of scaling.

**Catalytic cracking of gas oil** (Tjoa & Biegler, 1991): two states, three
rate constants, both states measured at 21 times in [0, 0.95]; unweighted
least squares,

.. math::

    \dot y_1 = -(\theta_1 + \theta_3) y_1^2,\qquad
    \dot y_2 = \theta_1 y_1^2 - \theta_2 y_2,\qquad y(0) = (1, 0).

Published optimum :math:`f^* = 5.2366\cdot 10^{-3}` (COPS); the minimizer is
near (11.85, 8.34, 1.00).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem.declaration import EstimationProblem, Parameter

__all__ = ["pinene_problem", "gasoil_problem", "PINENE_OPTIMUM", "GASOIL_OPTIMUM"]

#: published optimal objective values (COPS 3.0)
PINENE_OPTIMUM = 19.872
GASOIL_OPTIMUM = 5.2366e-3

_PINENE_T = [1230.0, 3060.0, 4920.0, 7800.0, 10680.0, 15030.0, 22620.0, 36420.0]
_PINENE_Y = [[88.35, 76.4, 65.1, 50.4, 37.5, 25.9, 14.0, 4.5],
             [7.3, 15.6, 23.1, 32.9, 42.7, 49.1, 57.4, 63.1],
             [2.3, 4.5, 5.3, 6.0, 6.0, 5.9, 5.1, 3.8],
             [0.4, 0.7, 1.1, 1.5, 1.9, 2.2, 2.6, 2.9],
             [1.75, 2.8, 5.8, 9.3, 12.0, 17.0, 21.0, 25.7]]

_GASOIL_T = [0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225, 0.25, 0.3,
             0.35, 0.4, 0.45, 0.5, 0.55, 0.65, 0.75, 0.85, 0.95]
_GASOIL_Y = [[1.0, 0.8105, 0.6208, 0.5258, 0.4345, 0.3903, 0.3342, 0.3034, 0.2735, 0.2405,
              0.2283, 0.2071, 0.1669, 0.1530, 0.1339, 0.1265, 0.1200, 0.0990, 0.0870, 0.0770,
              0.0690],
             [0.0, 0.2, 0.2886, 0.301, 0.3215, 0.3123, 0.2716, 0.2551, 0.2258, 0.1959, 0.1789,
              0.1457, 0.1198, 0.0909, 0.0719, 0.0561, 0.0460, 0.0280, 0.0190, 0.0140, 0.0100]]


def pinene_problem(theta0=(1e-5, 1e-5, 1e-5, 1e-4, 1e-5)):
    """The α-pinene problem (module docstring); parameters θ1..θ5 ≥ 0."""
    names = [f"y{i}" for i in range(1, 6)]
    data = pd.DataFrame(np.array(_PINENE_Y).T, index=pd.Index(_PINENE_T, name="time"),
                        columns=names)
    return EstimationProblem(
        states=names,
        parameters=[Parameter(f"theta{i}", float(v), lb=0.0) for i, v in enumerate(theta0, 1)],
        rhs=lambda y, u, t: [-(u.theta1 + u.theta2) * y.y1,
                             u.theta1 * y.y1,
                             u.theta2 * y.y1 - (u.theta3 + u.theta4) * y.y3 + u.theta5 * y.y5,
                             u.theta3 * y.y3,
                             u.theta4 * y.y3 - u.theta5 * y.y5],
        initial={"y1": 100.0, "y2": 0.0, "y3": 0.0, "y4": 0.0, "y5": 0.0},
        data=data, name="pinene")


def gasoil_problem(theta0=(0.0, 0.0, 0.0)):
    """The gas-oil cracking problem (module docstring); parameters θ1..θ3 ≥ 0."""
    data = pd.DataFrame(np.array(_GASOIL_Y).T, index=pd.Index(_GASOIL_T, name="time"),
                        columns=["y1", "y2"])
    return EstimationProblem(
        states=["y1", "y2"],
        parameters=[Parameter(f"theta{i}", float(v), lb=0.0) for i, v in enumerate(theta0, 1)],
        rhs=lambda y, u, t: [-(u.theta1 + u.theta3) * y.y1 ** 2,
                             u.theta1 * y.y1 ** 2 - u.theta2 * y.y2],
        initial={"y1": 1.0, "y2": 0.0},
        data=data, name="gasoil")
