r"""Reduced-space optimizers driven by exact gradients [SEIRD, Section 4].

The problem is

.. math::

    \min_{x \in \mathbb{R}^n} f(x) \quad \text{s.t.} \quad \ell \le x \le u
    \qquad (\ell_i \in \mathbb{R}\cup\{-\infty\},\ u_i \in \mathbb{R}\cup\{+\infty\}),

where :math:`f` and :math:`g = \nabla f` are supplied as callables (in
the reduced-space approach :math:`g` comes from an adjoint or sensitivity
computation).  Both methods iterate

.. math::

    x_{k+1} = x(\alpha_k), \qquad x(\alpha) = P(x_k + \alpha d_k),
    \qquad P(z) = \min(\max(z, \ell), u),

with a descent direction :math:`d_k` and a step :math:`\alpha_k > 0`
from a one-dimensional search on :math:`\varphi(\alpha) = f(x(\alpha))`,
:math:`\varphi'(\alpha) = g(x(\alpha))^\top \dot x(\alpha)` [SEIRD,
eq. (26); :math:`\dot x_i(\alpha) = d_{k,i}` while component *i* moves
freely, 0 once it is clipped].

* :func:`minimize_cg` -- nonlinear conjugate gradients
  :math:`d_{k+1} = -g_{k+1} + \beta_{k+1} d_k` with the Fletcher--Reeves,
  Polak--Ribière(+), Hestenes--Stiefel or Dai--Yuan :math:`\beta`
  [SEIRD, Algorithm 1].
* :func:`minimize_bfgs` -- BFGS with the inverse-Hessian update
  [SEIRD, Algorithm 2].
* :func:`line_search_secant` -- the exact line search of [SEIRD],
  eqs. (25)--(26): secant iteration on :math:`\varphi'(\alpha) = 0`, with
  bracketing safeguards.
* :func:`line_search_wolfe` -- strong-Wolfe bracketing + zoom
  (Nocedal & Wright, *Numerical Optimization*, 2nd ed., Alg. 3.5/3.6).

Bounds are handled by projection (a simple projected / reduced-gradient
scheme, cf. Bertsekas 1982; Nocedal & Wright §16.7): a component is
*binding* at :math:`x` if it sits on a bound and :math:`-g_i` points out
of the box; binding components are frozen (direction component 0), the
search runs along the projected path :math:`P(x + \alpha d)`, CG restarts
and BFGS resets its inverse-Hessian approximation whenever the binding
set changes.  Convergence is declared when the projected gradient
satisfies :math:`\lVert P(x - g) - x\rVert_\infty \le` ``gtol``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

__all__ = ["OptimizeHistory", "OptimizeResult", "minimize_cg", "minimize_bfgs",
           "line_search_secant", "line_search_wolfe", "CG_BETAS", "LINE_SEARCHES"]

#: Supported conjugate-gradient β formulas.
CG_BETAS = ("FR", "PR", "PR+", "HS", "DY")
#: Supported line searches.
LINE_SEARCHES = ("wolfe", "secant")

_EPS = np.finfo(float).eps


# ---------------------------------------------------------------------------
# result containers
# ---------------------------------------------------------------------------
@dataclass
class OptimizeHistory:
    """Iteration record, one row per iterate.

    Row 0 is the (projected) starting point with ``step = nan``; row *k*
    (k ≥ 1) is the iterate after the *k*-th line search.

    Attributes
    ----------
    it : list of int
        Iteration number *k*.
    f : list of float
        :math:`f(x_k)`.
    gnorm : list of float
        Projected-gradient norm :math:`\\lVert P(x_k - g_k) - x_k\\rVert_\\infty`
        (equals :math:`\\lVert g_k\\rVert_\\infty` without bounds).
    x : list of numpy.ndarray
        Copies of :math:`x_k`.
    step : list of float
        Accepted step :math:`\\alpha_{k-1}` that produced :math:`x_k`.
    nfev, ngev : list of int
        Cumulative numbers of ``fun`` / ``grad`` calls after iteration *k*.
    """

    it: list = field(default_factory=list)
    f: list = field(default_factory=list)
    gnorm: list = field(default_factory=list)
    x: list = field(default_factory=list)
    step: list = field(default_factory=list)
    nfev: list = field(default_factory=list)
    ngev: list = field(default_factory=list)

    def append(self, it, f, gnorm, x, step, nfev, ngev) -> None:
        """Record one iterate (``x`` is copied)."""
        self.it.append(int(it))
        self.f.append(float(f))
        self.gnorm.append(float(gnorm))
        self.x.append(np.array(x, dtype=float, copy=True))
        self.step.append(float(step))
        self.nfev.append(int(nfev))
        self.ngev.append(int(ngev))

    def __len__(self) -> int:
        return len(self.it)

    def to_frame(self) -> pd.DataFrame:
        """Return the history as a DataFrame indexed by ``it``.

        Columns ``f, gnorm, step, nfev, ngev`` and ``x0 .. x{n-1}``.
        """
        df = pd.DataFrame({"f": self.f, "gnorm": self.gnorm, "step": self.step,
                           "nfev": self.nfev, "ngev": self.ngev},
                          index=pd.Index(self.it, name="it"))
        if self.x:
            X = np.vstack(self.x)
            for j in range(X.shape[1]):
                df[f"x{j}"] = X[:, j]
        return df


@dataclass
class OptimizeResult:
    """Outcome of :func:`minimize_cg` / :func:`minimize_bfgs`.

    Attributes
    ----------
    x : numpy.ndarray
        Final iterate.
    fun : float
        :math:`f(x)`.
    grad : numpy.ndarray
        :math:`g(x)` (the full gradient, not projected).
    nit : int
        Number of iterations (accepted line searches).
    nfev, ngev : int
        Number of calls of ``fun`` and ``grad``.
    success : bool
        True if a stopping test (``gtol`` or ``ftol``) was met.
    message : str
        Why the iteration stopped.
    history : OptimizeHistory
    method : str
        e.g. ``'CG-PR/wolfe'`` or ``'BFGS/secant'``.
    hess_inv : numpy.ndarray or None
        BFGS only: the final inverse-Hessian approximation :math:`H`
        (acting on the free components when bounds are binding); ``None``
        for CG.
    """

    x: np.ndarray
    fun: float
    grad: np.ndarray
    nit: int
    nfev: int
    ngev: int
    success: bool
    message: str
    history: OptimizeHistory
    method: str
    hess_inv: Optional[np.ndarray] = None


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


# ---------------------------------------------------------------------------
# shared machinery
# ---------------------------------------------------------------------------
class _Problem:
    """Counted, cached evaluation of f and g, bounds and projection."""

    def __init__(self, fun, grad, x0, bounds):
        if not callable(fun) or not callable(grad):
            raise TypeError("fun and grad must be callable")
        self.fun, self.grad = fun, grad
        x0 = np.array(x0, dtype=float).ravel()
        if x0.size == 0:
            raise ValueError("x0 is empty")
        if not np.all(np.isfinite(x0)):
            raise ValueError(f"x0 contains non-finite entries: {x0}")
        n = x0.size
        self.n = n
        lb = np.full(n, -np.inf)
        ub = np.full(n, np.inf)
        self.bounded = False
        if bounds is not None:
            bounds = list(bounds)
            if len(bounds) != n:
                raise ValueError(f"bounds has {len(bounds)} entries, x0 has {n}")
            for i, b in enumerate(bounds):
                if b is None:
                    continue
                try:
                    l, u = b
                except (TypeError, ValueError):
                    raise ValueError(f"bounds[{i}]={b!r} is not a (lb, ub) pair") from None
                lb[i] = -np.inf if l is None else float(l)
                ub[i] = np.inf if u is None else float(u)
                if np.isnan(lb[i]) or np.isnan(ub[i]) or lb[i] > ub[i]:
                    raise ValueError(f"bounds[{i}]=({l}, {u}) is invalid (need lb <= ub)")
            self.bounded = bool(np.any(np.isfinite(lb)) or np.any(np.isfinite(ub)))
        self.lb, self.ub = lb, ub
        xp = self.project(x0)
        if not np.array_equal(xp, x0):
            warnings.warn("x0 is outside the bounds; it was projected onto the box",
                          UserWarning, stacklevel=3)
        self.x0 = xp
        self.nfev = self.ngev = 0
        self._cache = {}

    def project(self, x):
        return np.minimum(np.maximum(x, self.lb), self.ub) if self.bounded else x

    def f(self, x):
        key = x.tobytes()
        e = self._cache.setdefault(key, {})
        if "f" not in e:
            self.nfev += 1
            v = self.fun(x.copy())
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = float(np.asarray(v).reshape(()))
            e["raw"] = v
            e["f"] = v if np.isfinite(v) else np.inf
        return e["f"]

    def g(self, x):
        key = x.tobytes()
        e = self._cache.setdefault(key, {})
        if "g" not in e:
            self.ngev += 1
            v = np.array(self.grad(x.copy()), dtype=float).ravel()
            if v.shape != (self.n,):
                raise ValueError(f"grad returned shape {v.shape}, expected ({self.n},)")
            e["g"] = v
        return e["g"]

    def clear_cache(self, keep=None):
        if keep is None:
            self._cache = {}
        else:
            k = keep.tobytes()
            self._cache = {k: self._cache[k]} if k in self._cache else {}

    # --- bound handling
    def binding(self, x, g):
        """Components on a bound with -g pointing out of the box."""
        if not self.bounded:
            return np.zeros(self.n, dtype=bool)
        return ((x <= self.lb) & (g > 0)) | ((x >= self.ub) & (g < 0))

    def pg_norm(self, x, g):
        """‖P(x − g) − x‖∞, computed as ‖clip(−g, ℓ − x, u − x)‖∞ (no absorption for large x)."""
        if not self.bounded:
            return float(np.max(np.abs(g)))
        return float(np.max(np.abs(np.minimum(np.maximum(-g, self.lb - x), self.ub - x))))

    def clean_direction(self, x, d, free):
        """Zero frozen components and components pointing out of the box at a bound."""
        d = np.where(free, d, 0.0)
        if self.bounded:
            d = np.where(((x <= self.lb) & (d < 0)) | ((x >= self.ub) & (d > 0)), 0.0, d)
        return d

    def alpha_max(self, x, d):
        """Step after which every moving component is clipped (path is constant)."""
        if not self.bounded:
            return np.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(d > 0, (self.ub - x) / d, np.where(d < 0, (self.lb - x) / d, 0.0))
        t = np.where(d != 0, t, 0.0)
        m = float(np.max(t)) if t.size else 0.0
        return m if m > 0 else np.inf

    def path(self, x, d):
        """φ, φ' along the projected path x(α) = P(x + α d)."""
        def xa(a):
            with np.errstate(over="ignore", invalid="ignore"):
                return self.project(x + a * d)

        def phi(a):
            z = xa(a)
            return self.f(z) if np.all(np.isfinite(z)) else np.inf   # overflow: treat as +inf

        def dphi(a):
            with np.errstate(over="ignore", invalid="ignore"):
                z = x + a * d
            xz = xa(a)
            if not np.all(np.isfinite(xz)):
                return np.nan
            g = self.g(xz)
            if self.bounded:   # right derivative of the projected path
                moving = ((d > 0) & (z < self.ub)) | ((d < 0) & (z > self.lb))
                return float(np.dot(g[moving], d[moving]))
            return float(np.dot(g, d))
        return xa, phi, dphi


def _check_common(line_search, gtol, ftol, max_iter):
    if line_search not in LINE_SEARCHES:
        raise ValueError(f"unknown line_search {line_search!r}; choose one of {LINE_SEARCHES}")
    if not (gtol >= 0 and ftol >= 0):
        raise ValueError(f"gtol and ftol must be non-negative (got {gtol}, {ftol})")
    if int(max_iter) < 0:
        raise ValueError(f"max_iter must be >= 0 (got {max_iter})")


def _start(prob):
    x = prob.x0
    f = prob.f(x)
    if not np.isfinite(f):
        raw = prob._cache[x.tobytes()]["raw"]
        raise ValueError(f"fun(x0) is not finite (fun(x0) = {raw!r}); "
                         "choose a starting point where the objective is defined")
    g = prob.g(x)
    if not np.all(np.isfinite(g)):
        raise ValueError(f"grad(x0) is not finite: {g}")
    return x, f, g


def _search(prob, ls, x, d, f, g, alpha0, c2):
    """One line search along P(x + α d); return (α, x_new, f_new, φ'(0)) or None on failure."""
    xa, phi, dphi = prob.path(x, d)
    dphi0 = dphi(0.0)
    if not dphi0 < 0.0:
        return None
    amax = prob.alpha_max(x, d)
    alpha0 = min(alpha0, amax)
    if ls == "wolfe":
        a, _, _ = line_search_wolfe(phi, dphi, f, dphi0, alpha0=alpha0, c2=c2, alpha_max=amax)
    else:
        a, _, _ = line_search_secant(phi, dphi, alpha0=alpha0, phi0=f, dphi0=dphi0, alpha_max=amax)
    if a is None or not a > 0.0:
        return None
    xn = xa(a)
    fn = prob.f(xn)
    if not (np.isfinite(fn) and fn <= f):
        return None
    return a, xn, fn, dphi0


def _finish(prob, x, f, g, nit, success, message, hist, method, hess_inv=None):
    return OptimizeResult(x=x.copy(), fun=float(f), grad=g.copy(), nit=nit, nfev=prob.nfev,
                          ngev=prob.ngev, success=bool(success), message=message,
                          history=hist, method=method,
                          hess_inv=None if hess_inv is None else hess_inv.copy())


def _initial_step(g):
    gn = float(np.max(np.abs(g)))
    return min(1.0, 1.0 / gn) if gn > 0 else 1.0


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
        Stop when :math:`f_k - f_{k+1} \le \texttt{ftol}\,\max(|f_k|, |f_{k+1}|, 1)`.
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

    x, f, g = _start(prob)
    hist = OptimizeHistory()
    pg = prob.pg_norm(x, g)
    hist.append(0, f, pg, x, np.nan, prob.nfev, prob.ngev)
    if pg <= gtol:
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
        if res is None:
            message = "line search failed to decrease the objective"
            break
        alpha, xn, fn, slope = res
        gn = prob.g(xn)
        if not np.all(np.isfinite(gn)):
            message = "gradient is not finite at the new iterate"
            break
        prob.clear_cache(keep=xn)
        k += 1
        since_restart += 1
        pg = prob.pg_norm(xn, gn)
        hist.append(k, fn, pg, xn, alpha, prob.nfev, prob.ngev)
        f_old = f
        x_old_free = free
        x, f = xn, fn
        stop = callback(x.copy()) if callback is not None else False
        if pg <= gtol:
            g = gn
            success, message = True, "projected gradient below gtol"
            break
        if f_old - f <= ftol * max(abs(f_old), abs(f), 1.0):
            g = gn
            success, message = True, "relative reduction of f below ftol"
            break
        if stop:
            g = gn
            message = "stopped by callback"
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

    x, f, g = _start(prob)
    hist = OptimizeHistory()
    pg = prob.pg_norm(x, g)
    hist.append(0, f, pg, x, np.nan, prob.nfev, prob.ngev)
    if pg <= gtol:
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
        if res is None:
            message = "line search failed to decrease the objective"
            break
        alpha, xn, fn, _ = res
        gn = prob.g(xn)
        if not np.all(np.isfinite(gn)):
            message = "gradient is not finite at the new iterate"
            break
        prob.clear_cache(keep=xn)
        k += 1
        pg = prob.pg_norm(xn, gn)
        hist.append(k, fn, pg, xn, alpha, prob.nfev, prob.ngev)
        f_old = f
        s = xn - x
        x, f = xn, fn
        stop = callback(x.copy()) if callback is not None else False
        if pg <= gtol:
            g = gn
            success, message = True, "projected gradient below gtol"
            break
        if f_old - f <= ftol * max(abs(f_old), abs(f), 1.0):
            g = gn
            success, message = True, "relative reduction of f below ftol"
            break
        if stop:
            g = gn
            message = "stopped by callback"
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
