"""First-order stationarity of a bound-constrained result: the check that keeps an
optimizer's stop on a relative decrease (or on an inexact gradient, or on Ipopt's
"acceptable" level) from being reported as a minimum.

One rule for every optimizer's ``converged`` and ``acceptable`` on a sum of
squares: the decrease of J that the Gauss–Newton model predicts within the
bounds (:func:`gauss_newton_decrement`) must be at most
:func:`decrement_limit` — absolute, in the units of J, whatever the start or
the parameters' scaling (:func:`judge_stop`).  Where J is not a sum of squares
(constraints, a penalty that is not one), the projected gradient test
(:func:`stationarity_check`) decides.  See docs/checks.md, "One stationarity rule".
"""
from __future__ import annotations

import numpy as np

__all__ = ["DECREMENT_TOL", "STATIONARITY_TOL", "projected_gradient", "stationarity_check",
           "gauss_newton_decrement", "decrement_limit", "judge_stop"]

#: Where J is not a sum of squares, a success is kept only if the projected
#: gradient (in the optimizer's variables) is below ``STATIONARITY_TOL · max(1, ‖∇J(x₀)‖∞ / 100)``: Ipopt's
#: acceptable level (1e-2) under its gradient-based objective scaling (which
#: divides J by ‖∇J(x₀)‖∞/100 when that exceeds 1).
STATIONARITY_TOL = 1e-2

#: A sum of squares J is stationary where the Gauss–Newton model predicts a
#: decrease of J within the bounds of at most ``DECREMENT_TOL · max(1, J - c)``
#: (the Newton decrement in the Gauss–Newton metric, invariant to the
#: parameters' scaling and conditioning), whatever its projected gradient.
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


def decrement_limit(jc):
    """The largest Gauss–Newton decrement of a stationary point, in the units of J:
    ``DECREMENT_TOL · max(1, J − c)`` (``jc``: J − c)."""
    return DECREMENT_TOL * max(1.0, float(jc))


def gauss_newton_decrement(D, r, lo, hi):
    r"""``(decrease, ½‖r‖²)`` of the sum of squares :math:`\tfrac12\lVert r\rVert^2` with
    residual Jacobian ``D`` at a point whose step ``s`` may move by ``lo ≤ s ≤ hi``
    (the bounds minus the point): the decrease predicted by the Gauss–Newton
    model, :math:`\tfrac12\lVert r\rVert^2 - \min_{lo \le s \le hi}\tfrac12\lVert r + D s\rVert^2`
    (the Newton decrement of the Gauss–Newton metric: 0 exactly at a stationary
    point, invariant to the parameters' scaling and conditioning, in the units
    of the sum).  ``inf`` when the model's minimum is not found."""
    from scipy.optimize import lsq_linear
    D, r = np.asarray(D, dtype=float), np.asarray(r, dtype=float)
    lo, hi = np.minimum(np.asarray(lo, dtype=float), 0.0), np.maximum(np.asarray(hi, dtype=float), 0.0)
    jc = 0.5 * float(r @ r)
    if D.shape[1] == 0:
        return 0.0, jc
    if not (np.all(np.isfinite(D)) and np.all(np.isfinite(r))):
        return np.inf, jc
    move = lo < hi                         # a direction held by lb = ub (or two active
    if not move.any():                     # bounds) takes no step
        return 0.0, jc
    sol = lsq_linear(D[:, move], -r, bounds=(lo[move], hi[move]), method="trf", tol=1e-14)
    dec = jc - 0.5 * float(np.sum((D[:, move] @ sol.x + r) ** 2))
    # the model's minimum not found (iteration limit, or worse than no step): unknown
    return (dec if sol.status > 0 and dec >= -1e-12 * (1 + 2 * jc) else np.inf), jc


def judge_stop(decrement, jc, projected_gradient=None, limit=None):
    """``(stationary, rule)`` of an optimizer's successful stop: by the Gauss–Newton
    ``decrement`` (in the units of J; ``jc`` = J − c) where it is known (finite), else
    by the projected gradient against its ``limit`` (:func:`stationarity_check`), else
    ``(True, None)`` (nothing to judge by)."""
    if decrement is not None and np.isfinite(decrement):
        return bool(decrement <= decrement_limit(jc)), "decrement"
    if projected_gradient is not None and limit is not None:
        return bool(projected_gradient <= limit), "gradient"
    return True, None
