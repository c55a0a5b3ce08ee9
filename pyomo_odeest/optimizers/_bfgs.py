"""BFGS with the inverse-Hessian update and bounds [SEIRD, Algorithm 2]."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ._projected import _accept, _check_common, _finish, _initial_step, _Problem, _search, _start
from ._results import OptimizeResult


# ---------------------------------------------------------------------------
# BFGS
# ---------------------------------------------------------------------------
def minimize_bfgs(fun: Callable, grad: Callable, x0, *, line_search: str = "wolfe",
                  bounds: Optional[Sequence] = None, gtol: float = 1e-6, ftol: float = 1e-12,
                  max_iter: int = 1000, callback: Optional[Callable] = None) -> OptimizeResult:
    r"""BFGS quasi-Newton method [SEIRD, Algorithm 2].

    .. math::

        d_k = -H_k g_k, \qquad x_{k+1} = P(x_k + \alpha_k d_k), \qquad
        s_k = x_{k+1} - x_k, \quad y_k = g_{k+1} - g_k, \quad \rho_k = 1/(y_k^\top s_k),

    .. math::

        H_{k+1} = (I - \rho_k s_k y_k^\top)\, H_k\, (I - \rho_k y_k s_k^\top)
                  + \rho_k s_k s_k^\top

    (N&W eq. 6.17), which keeps :math:`H_{k+1}` symmetric positive definite
    when :math:`y_k^\top s_k > 0` (guaranteed by the Wolfe conditions; the
    update is skipped otherwise).  Before the first update
    :math:`H_0 = (y_0^\top s_0 / y_0^\top y_0)\, I` (N&W eq. 6.20); the first
    step uses :math:`\alpha_0 = \min(1, 1/\lVert g_0\rVert_\infty)`, later ones
    :math:`\alpha_0 = 1`.

    With bounds, :math:`H` acts on the free components only; it is reset
    to a scaled identity whenever the binding set changes, and a direction
    that is not a descent direction on the projected path is replaced by
    the reduced steepest-descent direction.

    Parameters
    ----------
    fun, grad, x0, bounds, gtol, ftol, max_iter, callback
        As in :func:`minimize_cg`.
    line_search : {'wolfe', 'secant'}
        Strong Wolfe (:math:`c_1 = 10^{-4}`, :math:`c_2 = 0.9`) or the exact
        secant search of [SEIRD], eqs. (25)–(26).

    Returns
    -------
    OptimizeResult

    Raises
    ------
    ValueError
        Unknown ``line_search``, invalid bounds, non-finite ``fun(x0)`` or
        ``grad(x0)``.
    """
    _check_common(line_search, gtol, ftol, max_iter)
    prob = _Problem(fun, grad, x0, bounds)
    n = prob.n
    method = f"BFGS/{line_search}"

    x, f, g, hist, optimal = _start(prob, gtol)
    if optimal:
        return _finish(prob, x, f, g, 0, True, "projected gradient below gtol", hist, method,
                       np.eye(n))

    eye = np.eye(n)
    H = eye.copy()
    fresh = True                   # H is the (unscaled) identity: scale at the next update
    free = ~prob.binding(x, g)
    k = 0
    success, message = False, "maximum number of iterations reached"
    while k < max_iter:
        gr = np.where(free, g, 0.0)
        d = prob.clean_direction(x, -(H @ gr), free)
        alpha0 = _initial_step(gr) if fresh else 1.0
        res = None
        if float(np.dot(g, d)) < 0.0:
            res = _search(prob, line_search, x, d, f, g, alpha0, 0.9)
        if res is None and not fresh:
            H, fresh = eye.copy(), True
            d = prob.clean_direction(x, -gr, free)
            res = _search(prob, line_search, x, d, f, g, _initial_step(gr), 0.9)
        gn, ended = _accept(prob, res, k + 1, f, hist, gtol, ftol, callback)
        if gn is None:
            success, message = ended
            break
        k += 1
        s = res[1] - x
        x, f = res[1], res[2]
        if ended:
            (success, message), g = ended, gn
            break
        new_free = ~prob.binding(x, gn)
        if not np.array_equal(new_free, free):
            H, fresh = eye.copy(), True           # active set changed: reset
        else:
            s = np.where(free, s, 0.0)
            y = np.where(free, gn - g, 0.0)
            sy = float(np.dot(s, y))
            if sy > 1e-10 * float(np.linalg.norm(s) * np.linalg.norm(y)) and sy > 0:
                if fresh:
                    H = (sy / float(np.dot(y, y))) * eye
                    fresh = False
                rho = 1.0 / sy
                Hy = H @ y
                H = (H - rho * (np.outer(s, Hy) + np.outer(Hy, s))
                     + (rho * rho * float(np.dot(y, Hy)) + rho) * np.outer(s, s))
        free = new_free
        g = gn
    return _finish(prob, x, f, g, k, success, message, hist, method, H)
