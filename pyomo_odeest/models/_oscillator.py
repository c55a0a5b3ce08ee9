r"""Harmonic oscillator with an unknown frequency: a small problem with spurious minima.

.. math:: \dot x_1 = x_2,\qquad \dot x_2 = -\omega^2 x_1,\qquad x(0) = (1, 0),

:math:`x_1` measured at ``n`` times in (0, T] with noise σ.  The exact solution
is :math:`x_1 = \cos\omega t`; the least-squares misfit in ω oscillates, with
local minima where the fitted cosine matches the data's phase over part of the
window (aliases of ω).  A single-shooting estimate from a start far from the
true ω stops at such a minimum; its χ² is far above the noise level.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..problem._declaration import EstimationProblem, Parameter

__all__ = ["oscillator_data", "oscillator_problem", "OSC_OMEGA"]

OSC_OMEGA = 1.0


def _osc_rhs(x, u, t):
    return [x.x2, -u.omega ** 2 * x.x1]


def oscillator_data(seed=0, omega=OSC_OMEGA, n=20, T=10.0, sigma=0.05):
    """x1 = cos(ω t) at n equally spaced times in (0, T] plus N(0, σ²) noise."""
    t = np.linspace(T / n, T, n)
    y = np.cos(omega * t) + np.random.default_rng(seed).normal(0.0, sigma, n)
    return pd.DataFrame({"x1": y}, index=pd.Index(t, name="time"))


def oscillator_problem(data=None, omega0=1.0, bounds=(0.1, 10.0), sigma=0.05, seed=0):
    """Estimate ω (start ``omega0``, bounds ``bounds``) with known noise level σ."""
    data = oscillator_data(seed, sigma=sigma) if data is None else data
    return EstimationProblem(states=["x1", "x2"],
                             parameters=[Parameter("omega", float(omega0), *bounds)],
                             rhs=_osc_rhs, initial={"x1": 1.0, "x2": 0.0}, data=data,
                             sigma=sigma, name="oscillator")
