r"""Three published estimation problems with known optima (COPS 3.0 collection).

E. D. Dolan, J. J. Moré and T. S. Munson, *Benchmarking optimization software
with COPS 3.0*, Argonne report ANL/MCS-TM-273 (2004), problems "pinene",
"gasoil" and "marine"; the data are those of the original studies (for
"marine", the COPS data set).

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

**Marine population dynamics** (Rothschild et al.; COPS problem 6): eight
stages of a marine species, stage-specific mortality rates
:math:`m_1..m_8 \ge 0` and growth rates :math:`g_1..g_7 \ge 0`,

.. math::

    \dot y_1 = -(m_1 + g_1) y_1,\quad
    \dot y_j = g_{j-1} y_{j-1} - (m_j + g_j) y_j\ (j = 2..7),\quad
    \dot y_8 = g_7 y_7 - m_8 y_8,

with the initial abundances :math:`y(0)` estimated too (23 parameters);
all stages counted at 21 times in [0, 10] (counts up to 2·10⁴); unweighted
least squares. Published optimum :math:`f^* = 1.97465\cdot 10^{7}` (COPS,
every mesh). One mortality rate (:math:`m_6`) sits at its bound 0 at the
optimum.

**Methanol to hydrocarbons** (Maria, 1989; COPS problem 12): three states,
five rate constants :math:`\theta \ge 0`, a rational right-hand side,

.. math::

    \dot y_1 = -\Big(2\theta_2 - \frac{\theta_1 y_2}{D} + \theta_3 + \theta_4\Big) y_1,\quad
    \dot y_2 = \frac{\theta_1 y_1 (\theta_2 y_1 - y_2)}{D} + \theta_3 y_1,\quad
    \dot y_3 = \frac{\theta_1 y_1 (y_2 + \theta_5 y_1)}{D} + \theta_4 y_1,

:math:`D = (\theta_2 + \theta_5) y_1 + y_2`, :math:`y(0) = (1, 0, 0)`, all
states measured at 17 times in [0, 1.122]; unweighted least squares, start
:math:`\theta = 1`. Published optimum :math:`f^* = 9.02229\cdot 10^{-3}` (COPS).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["pinene_problem", "gasoil_problem", "marine_problem", "methanol_problem",
           "PINENE_OPTIMUM", "GASOIL_OPTIMUM", "MARINE_OPTIMUM", "METHANOL_OPTIMUM"]

#: published optimal objective values (COPS 3.0)
PINENE_OPTIMUM = 19.872
GASOIL_OPTIMUM = 5.2366e-3
MARINE_OPTIMUM = 1.97465e7
METHANOL_OPTIMUM = 9.02229e-3

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


def _theta_problem(name, times, columns, theta0, rhs, initial):
    """States y1, y2, ... measured as ``columns`` (one list per state) at ``times``,
    initial state ``initial``; rate constants theta1, theta2, ... ≥ 0 starting at ``theta0``."""
    names = [f"y{i}" for i in range(1, len(columns) + 1)]
    data = pd.DataFrame(np.array(columns).T, index=pd.Index(times, name="time"), columns=names)
    return EstimationProblem(
        states=names,
        parameters=[Parameter(f"theta{i}", float(v), lb=0.0) for i, v in enumerate(theta0, 1)],
        rhs=rhs, initial=dict(zip(names, initial)), data=data, name=name)


def pinene_problem(theta0=(1e-5, 1e-5, 1e-5, 1e-4, 1e-5)):
    """The α-pinene problem (module docstring); parameters θ1..θ5 ≥ 0."""
    return _theta_problem(
        "pinene", _PINENE_T, _PINENE_Y, theta0,
        lambda y, u, t: [-(u.theta1 + u.theta2) * y.y1,
                         u.theta1 * y.y1,
                         u.theta2 * y.y1 - (u.theta3 + u.theta4) * y.y3 + u.theta5 * y.y5,
                         u.theta3 * y.y3,
                         u.theta4 * y.y3 - u.theta5 * y.y5],
        (100.0, 0.0, 0.0, 0.0, 0.0))


def gasoil_problem(theta0=(0.0, 0.0, 0.0)):
    """The gas-oil cracking problem (module docstring); parameters θ1..θ3 ≥ 0."""
    return _theta_problem(
        "gasoil", _GASOIL_T, _GASOIL_Y, theta0,
        lambda y, u, t: [-(u.theta1 + u.theta3) * y.y1 ** 2,
                         u.theta1 * y.y1 ** 2 - u.theta2 * y.y2],
        (1.0, 0.0))


_MARINE_Z = [
    [20000, 17000, 10000, 15000, 12000, 9000, 7000, 3000],
    [12445, 15411, 13040, 13338, 13484, 8426, 6615, 4022],
    [7705, 13074, 14623, 11976, 12453, 9272, 6891, 5020],
    [4664, 8579, 12434, 12603, 11738, 9710, 6821, 5722],
    [2977, 7053, 11219, 11340, 13665, 8534, 6242, 5695],
    [1769, 5054, 10065, 11232, 12112, 9600, 6647, 7034],
    [943, 3907, 9473, 10334, 11115, 8826, 6842, 7348],
    [581, 2624, 7421, 10297, 12427, 8747, 7199, 7684],
    [355, 1744, 5369, 7748, 10057, 8698, 6542, 7410],
    [223, 1272, 4713, 6869, 9564, 8766, 6810, 6961],
    [137, 821, 3451, 6050, 8671, 8291, 6827, 7525],
    [87, 577, 2649, 5454, 8430, 7411, 6423, 8388],
    [49, 337, 2058, 4115, 7435, 7627, 6268, 7189],
    [32, 228, 1440, 3790, 6474, 6658, 5859, 7467],
    [17, 168, 1178, 3087, 6524, 5880, 5562, 7144],
    [11, 99, 919, 2596, 5360, 5762, 4480, 7256],
    [7, 65, 647, 1873, 4556, 5058, 4944, 7538],
    [4, 44, 509, 1571, 4009, 4527, 4233, 6649],
    [2, 27, 345, 1227, 3677, 4229, 3805, 6378],
    [1, 20, 231, 934, 3197, 3695, 3159, 6454],
    [1, 12, 198, 707, 2562, 3163, 3232, 5566]]


def marine_problem(rate0=0.5):
    """The marine population dynamics problem (module docstring): rates m1..m8, g1..g7
    ≥ 0 starting at ``rate0``, initial abundances y0_1..y0_8 starting at the first counts."""
    stages = [f"y{i}" for i in range(1, 9)]
    z = np.array(_MARINE_Z, dtype=float)
    data = pd.DataFrame(z, index=pd.Index(0.5 * np.arange(len(z)), name="time"),
                        columns=stages)

    def rhs(y, u, t):
        x = [y[s] for s in stages]
        m = [u[f"m{i}"] for i in range(1, 9)]
        g = [u[f"g{i}"] for i in range(1, 8)]
        return ([-(m[0] + g[0]) * x[0]]
                + [g[j - 1] * x[j - 1] - (m[j] + g[j]) * x[j] for j in range(1, 7)]
                + [g[6] * x[6] - m[7] * x[7]])

    params = ([Parameter(f"m{i}", rate0, lb=0.0) for i in range(1, 9)]
              + [Parameter(f"g{i}", rate0, lb=0.0) for i in range(1, 8)]
              + [Parameter(f"y0_{i}", float(z[0, i - 1])) for i in range(1, 9)])
    return EstimationProblem(states=stages, parameters=params, rhs=rhs,
                             initial={s: f"y0_{i}" for i, s in enumerate(stages, 1)},
                             data=data, name="marine")


_METHANOL_T = [0.0, 0.050, 0.065, 0.080, 0.123, 0.233, 0.273, 0.354, 0.397, 0.418, 0.502,
               0.553, 0.681, 0.750, 0.916, 0.937, 1.122]
_METHANOL_Y = [[1.0000, 0.7085, 0.5971, 0.5537, 0.3684, 0.1712, 0.1198, 0.0747, 0.0529,
                0.0415, 0.0261, 0.0208, 0.0085, 0.0053, 0.0019, 0.0018, 0.0006],
               [0.0000, 0.1621, 0.1855, 0.1989, 0.2845, 0.3491, 0.3098, 0.3576, 0.3347,
                0.3388, 0.3557, 0.3483, 0.3836, 0.3611, 0.3609, 0.3485, 0.3698],
               [0.0000, 0.0811, 0.0965, 0.1198, 0.1535, 0.2097, 0.2628, 0.2467, 0.2884,
                0.2757, 0.3167, 0.2954, 0.2950, 0.2937, 0.2831, 0.2846, 0.2899]]


def methanol_problem(theta0=(1.0, 1.0, 1.0, 1.0, 1.0)):
    """The methanol-to-hydrocarbons problem (module docstring); θ1..θ5 ≥ 0."""
    def rhs(y, u, t):
        d = (u.theta2 + u.theta5) * y.y1 + y.y2
        return [-(2 * u.theta2 - u.theta1 * y.y2 / d + u.theta3 + u.theta4) * y.y1,
                u.theta1 * y.y1 * (u.theta2 * y.y1 - y.y2) / d + u.theta3 * y.y1,
                u.theta1 * y.y1 * (y.y2 + u.theta5 * y.y1) / d + u.theta4 * y.y1]

    return _theta_problem("methanol", _METHANOL_T, _METHANOL_Y, theta0, rhs, (1.0, 0.0, 0.0))
