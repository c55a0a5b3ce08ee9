"""Nonlinear conjugate gradients with bounds [SEIRD, Algorithm 1]."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ._projected import (CG_BETAS, _accept, _check_common, _finish, _initial_step, _Problem,
                         _search, _start)
from ._results import OptimizeResult


# ---------------------------------------------------------------------------
# nonlinear conjugate gradients
# ---------------------------------------------------------------------------
def minimize_cg(fun: Callable, grad: Callable, x0, *, beta: str = "PR", line_search: str = "wolfe",
                bounds: Optional[Sequence] = None, gtol: float = 1e-6, ftol: float = 1e-12,
                max_iter: int = 1000, restart: Optional[int] = None,
                callback: Optional[Callable] = None) -> OptimizeResult:
    r"""Nonlinear conjugate-gradient method [SEIRD, Algorithm 1].

    .. math::

        d_0 = -g_0, \qquad x_{k+1} = P(x_k + \alpha_k d_k), \qquad
        d_{k+1} = -g_{k+1} + \beta_{k+1} d_k,

    with :math:`y_k = g_{k+1} - g_k` and

    .. math::

        \beta^{FR}_{k+1} = \frac{g_{k+1}^\top g_{k+1}}{g_k^\top g_k}, \quad
        \beta^{PR}_{k+1} = \frac{g_{k+1}^\top y_k}{g_k^\top g_k}, \quad
        \beta^{PR+}_{k+1} = \max(\beta^{PR}_{k+1}, 0),

    .. math::

        \beta^{HS}_{k+1} = \frac{g_{k+1}^\top y_k}{d_k^\top y_k}, \quad
        \beta^{DY}_{k+1} = \frac{g_{k+1}^\top g_{k+1}}{d_k^\top y_k}

    (Fletcher–Reeves 1964, Polak–Ribière 1969 / Gilbert–Nocedal 1992,
    Hestenes–Stiefel 1952, Dai–Yuan 1999).  With an exact line search on a
    strictly convex quadratic all five coincide with linear CG and
    terminate in at most *n* iterations.

    The method restarts (:math:`d = -g`) every ``restart`` iterations, when
    :math:`d_{k+1}` is not a descent direction
    (:math:`g_{k+1}^\top d_{k+1} \ge 0`), when the β denominator vanishes,
    when the binding set of the bounds changes, and, once, after a failed
    line search.  With bounds the gradients in the formulas are restricted
    to the free components (see the module docstring).

    Parameters
    ----------
    fun : callable
        ``fun(x) -> float``.  Non-finite values at trial points are treated
        as :math:`+\infty`.
    grad : callable
        ``grad(x) -> ndarray`` of shape ``(n,)``.
    x0 : array_like
        Starting point (projected onto the bounds with a warning if outside).
    beta : {'FR', 'PR', 'PR+', 'HS', 'DY'}
        β formula.
    line_search : {'wolfe', 'secant'}
        Strong Wolfe (:func:`line_search_wolfe`, :math:`c_1 = 10^{-4}`,
        :math:`c_2 = 0.1`) or the exact secant search of [SEIRD],
        eqs. (25)–(26) (:func:`line_search_secant`).
    bounds : sequence of (lb, ub) or None
        Per-component bounds, ``None`` for an infinite bound.
    gtol : float
        Stop when :math:`\lVert P(x - g) - x\rVert_\infty \le` ``gtol``.
    ftol : float
        Stop when :math:`f_k - f_{k+1} \le \texttt{ftol}\,\max(|f_k|, |f_{k+1}|, 1)` (``ftol = 0`` switches this test off).
    max_iter : int
        Maximum number of iterations.
    restart : int or None
        Restart period; ``None`` means *n* = ``len(x0)``, ``0`` disables
        periodic restarts.
    callback : callable, optional
        ``callback(x)`` after every iteration; returning ``True`` stops.

    Returns
    -------
    OptimizeResult

    Raises
    ------
    ValueError
        Unknown ``beta`` / ``line_search``, invalid bounds, non-finite
        ``fun(x0)`` or ``grad(x0)``.
    """
    key = str(beta).upper()
    if key not in CG_BETAS:
        raise ValueError(f"unknown beta {beta!r}; choose one of {CG_BETAS}")
    _check_common(line_search, gtol, ftol, max_iter)
    prob = _Problem(fun, grad, x0, bounds)
    n = prob.n
    period = n if restart is None else int(restart)
    if period < 0:
        raise ValueError(f"restart must be >= 0 or None (got {restart})")
    method = f"CG-{key}/{line_search}"

    x, f, g, hist, optimal = _start(prob, gtol)
    if optimal:
        return _finish(prob, x, f, g, 0, True, "projected gradient below gtol", hist, method)

    free = ~prob.binding(x, g)
    gr = np.where(free, g, 0.0)
    d = prob.clean_direction(x, -gr, free)
    since_restart = 0
    alpha0 = _initial_step(g)
    k = 0
    success, message = False, "maximum number of iterations reached"
    while k < max_iter:
        res = _search(prob, line_search, x, d, f, g, alpha0, 0.1)
        if res is None and since_restart > 0:
            # retry once along the steepest (reduced) descent direction
            d = prob.clean_direction(x, -gr, free)
            since_restart = 0
            res = _search(prob, line_search, x, d, f, g, _initial_step(gr), 0.1)
        gn, ended = _accept(prob, res, k + 1, f, hist, gtol, ftol, callback)
        if gn is None:
            success, message = ended
            break
        alpha, x, f, slope = res
        k += 1
        since_restart += 1
        x_old_free = free
        if ended:
            (success, message), g = ended, gn
            break
        # ---- new direction
        free = ~prob.binding(x, gn)
        grn = np.where(free, gn, 0.0)
        do_restart = (period > 0 and since_restart >= period) or not np.array_equal(free, x_old_free)
        b = 0.0
        if not do_restart:
            dm = np.where(free, d, 0.0)
            y = grn - np.where(free, g, 0.0)
            gg_old = float(np.dot(gr, gr))
            dy = float(np.dot(dm, y))
            if key == "FR":
                num, den = float(np.dot(grn, grn)), gg_old
            elif key in ("PR", "PR+"):
                num, den = float(np.dot(grn, y)), gg_old
            elif key == "HS":
                num, den = float(np.dot(grn, y)), dy
            else:  # DY
                num, den = float(np.dot(grn, grn)), dy
            if den == 0.0 or not np.isfinite(num / den):
                do_restart = True
            else:
                b = num / den
                if key == "PR+":
                    b = max(b, 0.0)
        if do_restart:
            dn = -grn
            since_restart = 0
        else:
            dn = -grn + b * np.where(free, d, 0.0)
        dn = prob.clean_direction(x, dn, free)
        if not float(np.dot(gn, dn)) < 0.0:          # not a descent direction: restart
            dn = prob.clean_direction(x, -grn, free)
            since_restart = 0
        new_slope = float(np.dot(gn, dn))
        # initial step (N&W §3.5): keep α·φ'(0) of the previous iteration
        alpha0 = alpha * slope / new_slope if new_slope < 0 else _initial_step(grn)
        if not (np.isfinite(alpha0) and alpha0 > 0):
            alpha0 = _initial_step(grn)
        g, gr, d = gn, grn, dn
    return _finish(prob, x, f, g, k, success, message, hist, method)
