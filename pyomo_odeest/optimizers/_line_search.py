"""One-dimensional searches on φ(α) = f(x(α)) along the projected path:
the exact secant search of [SEIRD, eqs. (25)–(26)] and strong-Wolfe bracketing + zoom
(Nocedal & Wright, Alg. 3.5/3.6)."""
from __future__ import annotations

import math

import numpy as np

_EPS = np.finfo(float).eps


# ---------------------------------------------------------------------------
# 1-D interpolation helpers
# ---------------------------------------------------------------------------
def _cubic_min(a, fa, ga, b, fb, gb):
    """Minimizer of the cubic interpolating (a, fa, ga), (b, fb, gb) (N&W eq. 3.59)."""
    if a == b:
        return None
    d1 = ga + gb - 3.0 * (fa - fb) / (a - b)
    rad = d1 * d1 - ga * gb
    if not np.isfinite(rad) or rad < 0.0:
        return None
    d2 = math.copysign(math.sqrt(rad), b - a)
    den = gb - ga + 2.0 * d2
    if den == 0.0 or not np.isfinite(den):
        return None
    x = b - (b - a) * (gb + d2 - d1) / den
    return x if np.isfinite(x) else None


def _quad_min(a, fa, ga, b, fb):
    """Minimizer of the quadratic interpolating (a, fa, ga) and (b, fb)."""
    h = b - a
    den = 2.0 * (fb - fa - ga * h)
    if den <= 0.0 or not np.isfinite(den):
        return None
    x = a - ga * h * h / den
    return x if np.isfinite(x) else None


def _finite(v) -> bool:
    return v is not None and bool(np.isfinite(v))


# ---------------------------------------------------------------------------
# line searches
# ---------------------------------------------------------------------------
def line_search_secant(phi, dphi, alpha0=1.0, *, tol=1e-10, max_iter=50,
                       phi0=None, dphi0=None, alpha_max=np.inf):
    r"""Exact line search by the secant method [SEIRD, eqs. (25)–(26)].

    Solves :math:`\varphi'(\alpha) = 0` for :math:`\alpha > 0` with the
    secant iteration of [SEIRD], eq. (25),

    .. math::

        \alpha_{j+1} = \alpha_j - \varphi'(\alpha_j)\,
            \frac{\alpha_j - \alpha_{j-1}}{\varphi'(\alpha_j) - \varphi'(\alpha_{j-1})},
        \qquad \alpha_{-1} = 0,\ \alpha_0 = \texttt{alpha0},

    where :math:`\varphi'(\alpha) = \nabla f(x + \alpha d)^\top d` is the
    directional derivative of [SEIRD], eq. (26).  On a quadratic
    :math:`\varphi` the first secant step is exact.

    Safeguards (the bracketing enhancement suggested in [SEIRD], Remark 6):

    * a bracket :math:`[\alpha_{lo}, \alpha_{hi}]` is kept with
      :math:`\varphi'(\alpha_{lo}) < 0`, :math:`\varphi(\alpha_{lo}) \le \varphi(0)`,
      and :math:`\alpha_{hi}` either :math:`\varphi'(\alpha_{hi}) > 0`,
      :math:`\varphi(\alpha_{hi}) > \varphi(\alpha_{lo})` or a non-finite
      :math:`\varphi`/:math:`\varphi'` (treated as :math:`+\infty`: the step shrinks);
    * before a bracket exists, the secant extrapolation is limited to a
      factor ``1e3`` (and to ``alpha_max``); if it is not increasing the step is
      multiplied by 4;
    * inside a bracket a secant step that leaves the open bracket, or a
      bracket that fails to halve in three steps, is replaced by regula
      falsi or bisection;
    * the returned step is always positive and decreases :math:`\varphi`.

    Parameters
    ----------
    phi, dphi : callable
        :math:`\varphi(\alpha)` and :math:`\varphi'(\alpha)`.
    alpha0 : float
        First trial step (> 0).
    tol : float
        Stop when :math:`|\varphi'(\alpha)| \le \texttt{tol}\,|\varphi'(0)|`, when the
        secant correction satisfies :math:`|\alpha_{j+1}-\alpha_j| \le \texttt{tol}\,\alpha_j`,
        or when the bracket is narrower than ``tol`` relative.
    max_iter : int
        Maximum number of trial steps.
    phi0, dphi0 : float, optional
        :math:`\varphi(0)`, :math:`\varphi'(0)` if already known (otherwise evaluated
        and counted).  :math:`\varphi'(0)` must be negative.
    alpha_max : float
        Largest admissible step.

    Returns
    -------
    alpha : float or None
        The step; ``None`` if no trial step decreased :math:`\varphi`.  If
        ``max_iter`` is exhausted the best decreasing step found is returned.
    nfev, ngev : int
        Numbers of ``phi`` and ``dphi`` calls.

    Raises
    ------
    ValueError
        If ``alpha0 <= 0``, :math:`\varphi(0)`/:math:`\varphi'(0)` are not finite, or
        :math:`\varphi'(0) \ge 0` (not a descent direction).
    """
    nfev = ngev = 0
    if phi0 is None:
        phi0 = float(phi(0.0)); nfev += 1
    if dphi0 is None:
        dphi0 = float(dphi(0.0)); ngev += 1
    if not (_finite(phi0) and _finite(dphi0)):
        raise ValueError(f"line_search_secant: phi(0)={phi0!r}, dphi(0)={dphi0!r} must be finite")
    if dphi0 >= 0.0:
        raise ValueError(f"line_search_secant: dphi(0)={dphi0!r} >= 0, not a descent direction")
    if not (_finite(alpha0) and alpha0 > 0.0):
        raise ValueError(f"line_search_secant: alpha0={alpha0!r} must be positive and finite")
    if not alpha_max > 0.0:
        raise ValueError(f"line_search_secant: alpha_max={alpha_max!r} must be positive")

    gtol = tol * abs(dphi0)
    lo, f_lo, g_lo = 0.0, float(phi0), float(dphi0)
    hi, g_hi = np.inf, np.nan
    prev_a, prev_g = 0.0, float(dphi0)          # previous point with a finite derivative
    best_a, best_f = None, float(phi0)
    widths = []                                 # bracket widths, to detect stagnation
    a = min(float(alpha0), float(alpha_max))

    for _ in range(max_iter):
        f = float(phi(a)); nfev += 1
        g = np.nan
        if np.isfinite(f):
            g = float(dphi(a)); ngev += 1
        valid = np.isfinite(f) and np.isfinite(g)
        if valid and f < best_f:
            best_a, best_f = a, f
        if valid and f <= phi0 and abs(g) <= gtol:
            return a, nfev, ngev                                   # φ'(α) ≈ 0
        # --- update the bracket
        if not valid or f > f_lo:
            hi, g_hi = a, (g if valid else np.nan)
        elif g > 0.0:
            hi, g_hi = a, g
        else:
            lo, f_lo, g_lo = a, f, g
        # --- secant step (25) from the two most recent points with finite φ'
        cand = None
        if valid:
            den = g - prev_g
            if den != 0.0 and np.isfinite(den):
                cand = a - g * (a - prev_a) / den
            prev_a, prev_g = a, g
        if not np.isfinite(hi):
            # no bracket yet: extrapolate beyond lo
            if lo >= alpha_max:
                return lo, nfev, ngev
            if cand is None or not np.isfinite(cand) or cand <= lo:
                nxt = 4.0 * lo
            else:
                nxt = min(cand, 1e3 * lo)
            nxt = min(nxt, alpha_max)
            if not np.isfinite(nxt):
                return lo, nfev, ngev                              # step overflow
        else:
            w = hi - lo
            if w <= max(tol, 4 * _EPS) * hi:
                break
            widths.append(w)
            stalled = len(widths) >= 4 and w > 0.5 * widths[-4]
            if stalled:
                widths.clear()
            margin = 4 * _EPS * hi
            inside = (cand is not None and np.isfinite(cand)
                      and lo + margin < cand < hi - margin)
            if inside and not stalled:
                nxt = cand
            else:
                nxt = None
                if not stalled and np.isfinite(g_hi) and g_hi > 0.0:
                    rf = lo - g_lo * (hi - lo) / (g_hi - g_lo)     # regula falsi
                    if lo + 0.01 * w < rf < hi - 0.01 * w:
                        nxt = rf
                if nxt is None:
                    nxt = 0.5 * (lo + hi)
        if valid and abs(nxt - a) <= tol * a and f <= phi0:       # secant correction tiny
            return (a if (f <= f_lo or lo == 0.0) else lo), nfev, ngev
        a = nxt

    if lo > 0.0:
        return lo, nfev, ngev
    return best_a, nfev, ngev


def line_search_wolfe(phi, dphi, phi0, dphi0, alpha0=1.0, c1=1e-4, c2=0.9, max_iter=50,
                      *, alpha_max=np.inf):
    r"""Strong-Wolfe line search (Nocedal & Wright, Alg. 3.5 + 3.6).

    Finds :math:`\alpha > 0` with

    .. math::

        \varphi(\alpha) \le \varphi(0) + c_1 \alpha \varphi'(0)
        \quad\text{(sufficient decrease)}, \qquad
        |\varphi'(\alpha)| \le c_2 |\varphi'(0)|
        \quad\text{(strong curvature)},

    :math:`0 < c_1 < c_2 < 1`.  Phase 1 increases the trial step
    (cubic extrapolation, clamped to :math:`[2\alpha_i, 10\alpha_i]` and to
    ``alpha_max``) until an interval containing acceptable steps is
    bracketed; phase 2 (*zoom*) shrinks it with safeguarded cubic
    interpolation (N&W eq. 3.59), quadratic interpolation when only
    :math:`\varphi(\alpha_{hi})` is known, and bisection as a fallback.  A
    non-finite :math:`\varphi(\alpha)` or :math:`\varphi'(\alpha)` is treated as
    :math:`+\infty`, so the step shrinks.

    Use :math:`c_2 = 0.9` for quasi-Newton methods and :math:`c_2 = 0.1` for
    nonlinear CG (Fletcher–Reeves needs :math:`c_2 < 1/2` for descent).

    Parameters
    ----------
    phi, dphi : callable
        :math:`\varphi(\alpha)`, :math:`\varphi'(\alpha)`.
    phi0, dphi0 : float
        :math:`\varphi(0)` and :math:`\varphi'(0) < 0`.
    alpha0 : float
        First trial step (> 0).
    c1, c2 : float
        Wolfe constants.
    max_iter : int
        Maximum number of trial steps (both phases together).
    alpha_max : float
        Largest admissible step.

    Returns
    -------
    alpha : float or None
        A strong-Wolfe step.  If ``max_iter`` is exhausted (or the bracket
        collapses to rounding level) the best step satisfying sufficient
        decrease is returned; ``None`` if there is none.
    nfev, ngev : int
        Numbers of ``phi`` and ``dphi`` calls.

    Raises
    ------
    ValueError
        For inconsistent constants, a non-positive ``alpha0``, non-finite
        :math:`\varphi(0), \varphi'(0)`, or :math:`\varphi'(0) \ge 0`.
    """
    if not (0.0 < c1 < c2 < 1.0):
        raise ValueError(f"line_search_wolfe: need 0 < c1 < c2 < 1 (got c1={c1}, c2={c2})")
    phi0, dphi0 = float(phi0), float(dphi0)
    if not (_finite(phi0) and _finite(dphi0)):
        raise ValueError(f"line_search_wolfe: phi0={phi0!r}, dphi0={dphi0!r} must be finite")
    if dphi0 >= 0.0:
        raise ValueError(f"line_search_wolfe: dphi0={dphi0!r} >= 0, not a descent direction")
    if not (_finite(alpha0) and alpha0 > 0.0):
        raise ValueError(f"line_search_wolfe: alpha0={alpha0!r} must be positive and finite")
    if not alpha_max > 0.0:
        raise ValueError(f"line_search_wolfe: alpha_max={alpha_max!r} must be positive")

    nfev = ngev = 0
    curv = -c2 * dphi0

    def armijo(a, f):
        return np.isfinite(f) and f <= phi0 + c1 * a * dphi0

    # ---- phase 1: bracketing (Alg. 3.5)
    a_prev, f_prev, g_prev = 0.0, phi0, dphi0
    a = min(float(alpha0), float(alpha_max))
    lo = hi = None
    it = 0
    while it < max_iter:
        it += 1
        f = float(phi(a)); nfev += 1
        if not armijo(a, f) or (a_prev > 0.0 and f >= f_prev):
            lo, hi = (a_prev, f_prev, g_prev), (a, f, np.nan)
            break
        g = float(dphi(a)); ngev += 1
        if not np.isfinite(g):
            lo, hi = (a_prev, f_prev, g_prev), (a, np.inf, np.nan)
            break
        if abs(g) <= curv:
            return a, nfev, ngev
        if g >= 0.0:
            lo, hi = (a, f, g), (a_prev, f_prev, g_prev)
            break
        if a >= alpha_max:
            return a, nfev, ngev                  # sufficient decrease at the end of the range
        c = _cubic_min(a_prev, f_prev, g_prev, a, f, g)
        nxt = 4.0 * a if (c is None or c <= a) else min(max(c, 2.0 * a), 10.0 * a)
        a_prev, f_prev, g_prev = a, f, g
        a = min(nxt, float(alpha_max))
        if not np.isfinite(a):
            return a_prev, nfev, ngev            # step overflow (objective unbounded below?)
    else:
        return (a_prev if a_prev > 0.0 else None), nfev, ngev

    # ---- phase 2: zoom (Alg. 3.6); lo satisfies sufficient decrease, lowest φ so far
    (a_lo, f_lo, g_lo), (a_hi, f_hi, g_hi) = lo, hi
    while it < max_iter:
        it += 1
        left, right = min(a_lo, a_hi), max(a_lo, a_hi)
        w = right - left
        if w <= 4 * _EPS * right:
            break
        trial = None
        if np.isfinite(f_hi) and np.isfinite(g_hi):
            trial = _cubic_min(a_lo, f_lo, g_lo, a_hi, f_hi, g_hi)
        if (trial is None or not left + 0.1 * w <= trial <= right - 0.1 * w) and np.isfinite(f_hi):
            trial = _quad_min(a_lo, f_lo, g_lo, a_hi, f_hi)
        if trial is None or not left + 0.1 * w <= trial <= right - 0.1 * w:
            trial = 0.5 * (a_lo + a_hi)
        f = float(phi(trial)); nfev += 1
        if not armijo(trial, f) or f >= f_lo:
            a_hi, f_hi, g_hi = trial, (f if np.isfinite(f) else np.inf), np.nan
            continue
        g = float(dphi(trial)); ngev += 1
        if not np.isfinite(g):
            a_hi, f_hi, g_hi = trial, np.inf, np.nan
            continue
        if abs(g) <= curv:
            return trial, nfev, ngev
        if g * (a_hi - a_lo) >= 0.0:
            a_hi, f_hi, g_hi = a_lo, f_lo, g_lo
        a_lo, f_lo, g_lo = trial, f, g
    return (a_lo if a_lo > 0.0 else None), nfev, ngev
