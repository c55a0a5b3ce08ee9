r"""Local error estimates of a discrete solution: the defect in a higher-order quadrature.

A discrete solution :math:`x_0, \dots, x_k` of any scheme of global order
:math:`p` satisfies :math:`x_{i+1} - x_i = \int_{t_i}^{t_{i+1}} f\,dt + d_i`
with a local error :math:`d_i = O(h_i^{p+1})`.  Replacing the integral by the
quadrature of the polynomial that interpolates :math:`f(x_j, t_j)` at
:math:`m = p + 2` grid points around the step (the same restart segment, so no
window crosses a switching time of an input),

.. math::

    \hat d_i = x_{i+1} - x_i - h_i \sum_{l} w_{il}\, f(x_{j_l}, t_{j_l}),
    \qquad \int_0^1 P(s)\,ds = \sum_l w_{il} P(s_{il}) \ \text{for}\ \deg P < m,

estimates :math:`d_i` to higher order: the quadrature's own error is
:math:`O(h^{p+3})`, and the global error that :math:`x_j` carries enters
:math:`x_{i+1} - x_i` and the quadrature alike, so it cancels to first order
(the classical defect estimate).  One formula serves every scheme of
:mod:`~pyomo_odeest.discretization.schemes`; it needs the solution on the whole
grid, which a solved discretization has.

Milne's device, the predictor–corrector difference :math:`x_{i+1} - y_{i+1}`
of :class:`~pyomo_odeest.discretization.schemes.AdamsPC`, estimates the error
of the *predictor* (one order below the corrector's), so it overstates the
scheme's local error by a factor :math:`O(h^{-1})`; :func:`predictor_difference`
returns it for comparison (docs/schemes.md, "Local error estimates").
"""
from __future__ import annotations

import numpy as np

from ._coefficients import _quadrature_weights

__all__ = ["local_errors", "predictor_difference", "segments"]


def segments(k, restarts=()) -> list:
    """Grid index ranges ``(a, b)`` of the restart segments of a grid with ``k``
    steps: no multistep history, and no window of :func:`local_errors`, crosses a
    restart."""
    cuts = [0] + sorted({int(r) for r in restarts if 0 < int(r) < k}) + [k]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def local_errors(scheme, t, X, F, restarts=()) -> np.ndarray:
    r"""Estimates :math:`\hat d_i` of the local errors of the discrete solution ``X``.

    Parameters
    ----------
    scheme : MultistepScheme
        The scheme that produced ``X`` (its :attr:`~MultistepScheme.order` sets
        the quadrature's number of points, ``order + 2``).
    t : array_like, shape (k+1,)
        The grid (a :class:`~pyomo_odeest.Grid` or its times).
    X : array_like, shape (k+1, n)
        The discrete states on the grid.
    F : array_like, shape (k+1, n)
        :math:`f(x_i, u, t_i)` at the grid points (with the inputs' left piece at
        a switching time's twin, as the scheme evaluates them).
    restarts : sequence of int
        Restart indices (default ``t.restarts`` of a Grid).

    Returns
    -------
    numpy.ndarray, shape (k, n)
        Row i: the estimated local error of step i, in the states' units.
    """
    restarts = tuple(restarts) or tuple(getattr(t, "restarts", ()))
    t = np.asarray(getattr(t, "t", t), dtype=float)
    X = np.asarray(X, dtype=float)
    F = np.asarray(F, dtype=float)
    k = t.size - 1
    out = np.zeros((k, X.shape[1]))
    m_full = int(scheme.order) + 2
    for a, b in segments(k, restarts):
        m = min(m_full, b - a + 1)
        steps = np.arange(a, b)
        j0 = np.clip(steps - (m - 2) // 2, a, b - m + 1)
        idx = j0[:, None] + np.arange(m)[None, :]                  # (B, m) window points
        h = t[steps + 1] - t[steps]
        s = (t[idx] - t[steps, None]) / h[:, None]
        w = _quadrature_weights(s)                                  # (B, m)
        quad = np.einsum("bl,bln->bn", w, F[idx])
        out[steps] = X[steps + 1] - X[steps] - h[:, None] * quad
    return out


def predictor_difference(block_values) -> np.ndarray:
    """Milne's device for a predictor–corrector scheme: ``x_{i+1} - y_{i+1}`` from the
    stage values ``{'x': (k+1, n), 'y': (k, n)}`` (the predictor's error estimate)."""
    X, Y = np.asarray(block_values["x"], float), np.asarray(block_values["y"], float)
    return X[1:] - Y
