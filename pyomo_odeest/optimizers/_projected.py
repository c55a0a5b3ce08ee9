"""The bound-constrained problem shared by both methods: projection, binding set,
projected gradient, argument checks, the line search of one iteration."""
from __future__ import annotations

import warnings

import numpy as np

from ._line_search import line_search_secant, line_search_wolfe
from ._results import OptimizeHistory, OptimizeResult

#: Supported conjugate-gradient β formulas.
CG_BETAS = ("FR", "PR", "PR+", "HS", "DY")
#: Supported line searches.
LINE_SEARCHES = ("wolfe", "secant")



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


def _start(prob, gtol):
    """``x0, f(x0), g(x0)`` (checked), the history holding iteration 0 and whether x0 is optimal."""
    x = prob.x0
    f = prob.f(x)
    if not np.isfinite(f):
        raw = prob._cache[x.tobytes()]["raw"]
        raise ValueError(f"fun(x0) is not finite (fun(x0) = {raw!r}); "
                         "choose a starting point where the objective is defined")
    g = prob.g(x)
    if not np.all(np.isfinite(g)):
        raise ValueError(f"grad(x0) is not finite: {g}")
    hist = OptimizeHistory()
    pg = prob.pg_norm(x, g)
    hist.append(0, f, pg, x, np.nan, prob.nfev, prob.ngev)
    return x, f, g, hist, pg <= gtol


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
        return _search_at_roundoff(prob, xa, phi, dphi, f, dphi0, alpha0, amax, c2)
    xn = xa(a)
    fn = prob.f(xn)
    if not (np.isfinite(fn) and fn <= f):
        return _search_at_roundoff(prob, xa, phi, dphi, f, dphi0, alpha0, amax, c2)
    return a, xn, fn, dphi0


#: Relative size of the objective's round-off allowed by the approximate Wolfe test.
_F_ROUNDOFF = 64 * np.finfo(float).eps


def _search_at_roundoff(prob, xa, phi, dphi, f, dphi0, alpha0, amax, c2, max_iter=30):
    r"""Near a minimizer the decrease of f along d falls below f's round-off and
    no step satisfies the sufficient-decrease test, although the gradient still
    carries information.  Hager and Zhang's *approximate Wolfe* conditions
    (SIAM J. Optim. 16 (2005), eq. (4.1)) then accept a step by its derivative,
    :math:`(2\delta - 1)\,\varphi'(0) \ge \varphi'(\alpha) \ge c_2\,\varphi'(0)`,
    (here in the strong form, :math:`|\varphi'(\alpha)| \le c_2 |\varphi'(0)|`),
    provided :math:`\varphi(\alpha) \le \varphi(0) + \epsilon_f |\varphi(0)|` with
    :math:`\epsilon_f` a small multiple of the machine epsilon.  The step is found by the
    secant iteration on :math:`\varphi'` alone; None if no such step exists (a
    genuine failure: the objective and its gradient disagree)."""
    slack = _F_ROUNDOFF * max(abs(f), 1.0)
    hi = min(1.0 - 2e-4, c2) * -dphi0   # (2δ - 1) φ'(0), δ = 1e-4; strong Wolfe's c2 |φ'(0)|
    a_prev, d_prev = 0.0, dphi0
    a = min(alpha0, amax)
    for _ in range(max_iter):
        if not a > 0.0:
            return None
        da = dphi(a)
        if not np.isfinite(da):
            a = 0.5 * (a_prev + a)
            continue
        if c2 * dphi0 <= da <= hi:
            fn = phi(a)
            if np.isfinite(fn) and fn <= f + slack:
                return a, xa(a), fn, dphi0
            return None
        if da == d_prev:
            return None
        a_next = a - da * (a - a_prev) / (da - d_prev)
        a_prev, d_prev = a, da
        a = min(a_next, amax) if np.isfinite(a_next) else 0.5 * a
    return None


def _accept(prob, res, k, f, hist, gtol, ftol, callback):
    """Iteration ``k`` ending at the line-search result ``res`` (from f = ``f``): the gradient
    there, a history entry and the stopping tests.  Returns ``(g_new, ended)``: ``ended`` is
    a ``(success, message)`` pair when the iteration stops, else None; ``g_new`` is None
    when the iteration failed (no new iterate)."""
    if res is None:
        return None, (False, "line search failed to decrease the objective")
    alpha, xn, fn, _ = res
    gn = prob.g(xn)
    if not np.all(np.isfinite(gn)):
        return None, (False, "gradient is not finite at the new iterate")
    prob.clear_cache(keep=xn)
    pg = prob.pg_norm(xn, gn)
    hist.append(k, fn, pg, xn, alpha, prob.nfev, prob.ngev)
    stop = callback(xn.copy()) if callback is not None else False
    return gn, _stop_test(pg, gtol, f, fn, ftol, stop)


def _finish(prob, x, f, g, nit, success, message, hist, method, hess_inv=None):
    return OptimizeResult(x=x.copy(), fun=float(f), grad=g.copy(), nit=nit, nfev=prob.nfev,
                          ngev=prob.ngev, success=bool(success), message=message,
                          history=hist, method=method,
                          hess_inv=None if hess_inv is None else hess_inv.copy())


def _stop_test(pg, gtol, f_old, f, ftol, stop):
    """``(success, message)`` if one of the stopping tests shared by CG and BFGS holds
    (the projected gradient, the relative reduction of f, the user's callback), else None."""
    if pg <= gtol:
        return True, "projected gradient below gtol"
    if ftol > 0 and f_old - f <= ftol * max(abs(f_old), abs(f), 1.0):
        return True, "relative reduction of f below ftol"
    if stop:
        return False, "stopped by callback"
    return None


def _initial_step(g):
    gn = float(np.max(np.abs(g)))
    return min(1.0, 1.0 / gn) if gn > 0 else 1.0
