"""First-order stationarity of a bound-constrained result: the check that keeps an
optimizer's stop on a relative decrease (or on an inexact gradient) from being
reported as a minimum."""
from __future__ import annotations

import numpy as np

__all__ = ["DECREMENT_TOL", "STATIONARITY_TOL", "projected_gradient", "stationarity_check"]

#: A success is kept only if the projected gradient (in the optimizer's
#: variables) is below ``STATIONARITY_TOL · max(1, ‖∇J(x₀)‖∞ / 100)``: Ipopt's
#: acceptable level (1e-2) under its gradient-based objective scaling (which
#: divides J by ‖∇J(x₀)‖∞/100 when that exceeds 1).
STATIONARITY_TOL = 1e-2

#: A sum of squares J whose projected gradient fails that test is still
#: stationary where the Gauss–Newton model predicts a decrease of J within the
#: bounds below ``DECREMENT_TOL · max(1, J - c)`` (the Newton decrement in the
#: Gauss–Newton metric, invariant to the parameters' scaling and conditioning).
#: For a likelihood (J - c = ½χ²) that is a step shorter than 0.0014 standard
#: errors while J - c ≤ 1.
DECREMENT_TOL = 1e-6


def projected_gradient(g, x, lb, ub, tol=1e-6):
    """The gradient with the components that push against an active bound set to 0
    (a bound is active within ``tol·(1 + |bound|)``: interior-point iterates stay
    strictly inside)."""
    g, x = np.asarray(g, dtype=float), np.asarray(x, dtype=float)
    lb, ub = np.asarray(lb, dtype=float), np.asarray(ub, dtype=float)
    with np.errstate(invalid="ignore"):
        at_lb = np.isfinite(lb) & (x <= lb + tol * (1 + np.abs(lb)))
        at_ub = np.isfinite(ub) & (x >= ub - tol * (1 + np.abs(ub)))
    return np.where((at_lb & (g > 0)) | (at_ub & (g < 0)), 0.0, g)


def stationarity_check(g, x, lb, ub, g0):
    """``dict(projected_gradient=‖P g‖∞, limit=...)`` of the gradient ``g`` at ``x``
    (``g0``: the gradient at the start); stationary when the first is at most the
    second."""
    pg = float(np.max(np.abs(projected_gradient(g, x, lb, ub)), initial=0.0))
    limit = STATIONARITY_TOL * max(1.0, float(np.max(np.abs(g0), initial=0.0)) / 100)
    return dict(projected_gradient=pg, limit=limit)
