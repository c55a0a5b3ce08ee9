r"""Pieces of the continuous backend below the model: method names, errors, sparse
symbolic arrays lambdified once, and the tolerance and step helpers of the integrations."""
from __future__ import annotations

import numpy as np
import sympy
from ...symbolic import lambdify

ODE_METHODS = ("LSODA", "BDF", "Radau", "DOP853", "RK45")
_IMPLICIT = ("LSODA", "BDF", "Radau")
_SPARSE_OK = ("BDF", "Radau")
GRADIENT_METHODS = ("adjoint", "sensitivity", "fd")
HESSIAN_METHODS = ("soa", "adjoint_fd", "sensitivity_fd", "fd")


class IntegrationError(RuntimeError):
    """The ODE integrator failed (or produced non-finite values)."""


class _Diverged(ArithmeticError):
    pass


_BIG = 1e100


def _check_bounded(y):
    """Stop an integration whose solution leaves [-1e100, 1e100] (finite-time blow-up).

    Without it LSODA keeps stepping on inf/nan values and never returns.
    """
    if not (-_BIG < y.min() and y.max() < _BIG):
        raise _Diverged(f"solution diverged (|x| >= {_BIG:g} or not finite)")


# ---------------------------------------------------------------------------
# sparse symbolic arrays, lambdified once
# ---------------------------------------------------------------------------
class _SymBundle:
    r"""Several sparse symbolic arrays evaluated by one lambdified call.

    Each array is given by its nonzero entries ``[(index_tuple, expr), ...]``
    and its shape.  Constant entries are stored once; all the others (of all
    arrays) are lambdified together with ``cse=True``, so that an ODE
    right-hand side that needs, say, :math:`f_x`, :math:`f_u` and
    :math:`\lambda^\top f_{xx}` costs one Python call.  ``bundle(*args)``
    returns the dense arrays in order.
    """

    def __init__(self, arrays, args):
        exprs = []
        self._parts = []
        for entries, shape in arrays:
            shape = tuple(shape)
            entries = [(tuple(k), sympy.sympify(e)) for k, e in entries]
            entries = [(k, e) for k, e in entries if e != 0]
            cf, cv, vf = [], [], []
            start = len(exprs)
            for k, e in entries:
                flat = int(np.ravel_multi_index(k, shape)) if shape else 0
                if e.free_symbols:
                    vf.append(flat)
                    exprs.append(e)
                else:
                    cf.append(flat)
                    cv.append(float(e))
            self._parts.append((shape, int(np.prod(shape)), np.array(cf, dtype=np.intp),
                                np.array(cv, dtype=float), np.array(vf, dtype=np.intp),
                                start, len(exprs)))
        self._fn = lambdify(args, exprs, "numpy", cse=True) if exprs else None

    def __call__(self, *args):
        vals = None
        if self._fn is not None:
            raw = self._fn(*args)
            try:
                vals = np.asarray(raw, dtype=float)
            except TypeError:       # Python's power of a negative base: a complex value
                raise ValueError("complex value (a negative number to a non-integer "
                                 "power?) in the model's functions") from None
        out = []
        for shape, size, cf, cv, vf, a, b in self._parts:
            d = np.zeros(size)
            d[cf] = cv
            if b > a:
                d[vf] = vals[a:b]
            out.append(d.reshape(shape))
        return out

    def many(self, m, *args):
        """The arrays at ``m`` points at once: array arguments of length ``m``
        (scalars broadcast); returns arrays of shape ``shape + (m,)``."""
        vals = self._fn(*args) if self._fn is not None else []
        out = []
        for shape, size, cf, cv, vf, a, b in self._parts:
            d = np.zeros((size, m))
            d[cf] = cv[:, None]
            for row, k in zip(vf, range(a, b)):
                d[row] = np.broadcast_to(np.asarray(vals[k], dtype=float), (m,))
            out.append(d.reshape(shape + (m,)))
        return out


class _SymArray(_SymBundle):
    """One sparse symbolic array; :meth:`dense` evaluates it."""

    def __init__(self, entries, shape, args):
        super().__init__([(entries, shape)], args)

    def dense(self, *args):
        return self(*args)[0]


def _contract(entries, w):
    r"""Entries of :math:`\sum_i w_i A_{i\ldots}` (symbolic weights ``w``)."""
    acc = {}
    for k, e in entries:
        acc[k[1:]] = acc.get(k[1:], 0) + w[k[0]] * e
    return list(acc.items())


def _diff_entries(base_entries, syms):
    """Entries of the derivative of an array (given by its nonzero entries)."""
    out = []
    for k, e in base_entries:
        fs = e.free_symbols                       # 0 for the others, without asking sympy
        for a, s in enumerate(syms):
            if s not in fs:
                continue
            d = sympy.diff(e, s)
            if d != 0:
                out.append((k + (a,), d))
    return out


def _steps(u, step):
    """Finite-difference steps ``step * |u_k|`` (``step`` where u_k = 0)."""
    a = np.abs(u)
    return step * np.where(a > 0, a, 1.0)


def _segment_atol(atol, rtol, factor, y, parts, quad=None, growth=None):
    r"""Absolute tolerances of one backward segment.

    For each part (slice) of the adjoint state,
    :math:`\max(\text{atol}, \text{factor}\cdot\text{rtol}\cdot s)` with
    :math:`s = \|y_{\text{part}}\|_\infty` at the start of the segment; for
    the quadrature part ``quad`` (which starts at zero) :math:`s` is at least
    ``growth`` = :math:`|t_{hi} - t_{lo}|\,\|\dot y_{\text{quad}}\|_\infty`.

    The adjoint has no natural scale of its own: its components are driven
    by the jumps and by each other (HIV: λ_{T_A} is forced by 634·λ_{V_NI}
    and reaches ~2e5 after a jump of 1e4 in λ_V).  With the states' atol of
    1e-12 the small components that cross zero could not be resolved (BDF
    stopped with "step size too small"); an absolute tolerance relative to
    ‖λ‖ keeps the error at the level of rtol·‖λ‖, which is what enters the
    gradient.
    """
    out = np.empty_like(y)
    for sl in parts:
        s = float(np.max(np.abs(y[sl]), initial=0.0))
        if quad is not None and sl == quad:
            s = max(s, growth)
        out[sl] = max(atol, factor * rtol * s)
    return out


def _dense_values(ode_solution, t):
    r"""Values (n, m) of a SciPy ``OdeSolution`` at the times ``t`` (each inside one step).

    Same numbers as ``ode_solution(t)``, without its Python call per step:
    for the interpolants of LSODA (Nordsieck arrays
    :math:`y = \sum_k yh_k ((t - t_n)/h)^k`) and BDF (modified divided
    differences, :math:`y = D_0 + \sum_k D_k \prod_{i<k}(t - t_{n-i})/(h(i+1))`)
    all steps are evaluated at once from their stored arrays; any other
    interpolant (Radau, RK), or interpolants without these arrays (another
    SciPy version), go through ``ode_solution(t)``.
    """
    t = np.asarray(t, dtype=float)
    kinds = {type(f).__name__ for f in ode_solution.interpolants}
    if kinds in ({"LsodaDenseOutput"}, {"BdfDenseOutput"}) and len(t):
        try:
            return _stacked_values(ode_solution, t, kinds == {"LsodaDenseOutput"})
        except AttributeError:
            pass
    return np.atleast_2d(ode_solution(t))


def _stacked_values(ode_solution, t, lsoda):
    """:func:`_dense_values` for LSODA (``lsoda``) or BDF interpolants."""
    interps = ode_solution.interpolants
    ts = np.asarray(ode_solution.ts, dtype=float)
    nseg = len(interps)
    asc = ts[-1] >= ts[0]
    k = np.clip(np.searchsorted(ts if asc else ts[::-1], t, side="right") - 1, 0, nseg - 1)
    if not asc:
        k = nseg - 1 - k
    used, inv = np.unique(k, return_inverse=True)
    if lsoda:
        K = max(len(interps[i].p) for i in used)
        Y = np.zeros((len(used), K, interps[used[0]].yh.shape[0]))
        tn, h = np.empty(len(used)), np.empty(len(used))
        for a, i in enumerate(used):
            f = interps[i]
            Y[a, :len(f.p)] = f.yh.T
            tn[a], h[a] = f.t, f.h
        x = np.vander((t - tn[inv]) / h[inv], K, increasing=True)
        return np.einsum("mk,mkn->nm", x, Y[inv], optimize=False)
    K = max(interps[i].order for i in used)
    D = np.zeros((len(used), K + 1, interps[used[0]].D.shape[1]))
    shift, denom = np.zeros((len(used), K)), np.ones((len(used), K))
    for a, i in enumerate(used):
        f = interps[i]
        D[a, :f.order + 1] = f.D[:f.order + 1]
        shift[a, :f.order], denom[a, :f.order] = f.t_shift, f.denom
    prod = np.cumprod((t[:, None] - shift[inv]) / denom[inv], axis=1)
    return D[inv, 0].T + np.einsum("mk,mkn->nm", prod, D[inv, 1:])


#: nodes on [-1, 1] and the weights of the 7-point Kronrod rule (exact to degree 11)
#: and of the 3-point Gauss rule on its nodes ±√(3/5), 0 (zeros elsewhere)
_GK7 = (np.array([-0.9604912687080202, -0.7745966692414834, -0.4342437493468026, 0.0,
                  0.4342437493468026, 0.7745966692414834, 0.9604912687080202]),
        np.array([0.1046562260264672, 0.2684880898683334, 0.4013974147759622,
                  0.4509165386584741, 0.4013974147759622, 0.2684880898683334,
                  0.1046562260264672]),
        np.array([0.0, 5.0 / 9.0, 0.0, 8.0 / 9.0, 0.0, 5.0 / 9.0, 0.0]))


def _adaptive_quadrature(fun, edges, rtol, atol, floor, max_panels=None):
    r"""Adaptive Gauss–Kronrod quadrature of a vector integrand over ``[edges[0], edges[-1]]``.

    ``fun(t)`` takes an array of m times and returns the (p, m) values.
    The first panels lie between consecutive ``edges`` (the integrators' accepted
    steps and the switching times: docs/continuous.md, "How the adjoint is
    computed").  Every panel is integrated by the 7-point Kronrod rule and the
    3-point Gauss rule on its nodes, all panels of one pass in one call of
    ``fun``; a panel is accepted when, componentwise,
    :math:`|K_7 - G_3| \le \frac{b-a}{L}\max(\text{atol}, \text{rtol}\cdot
    \max(S_k, \text{floor}\cdot\|S\|_\infty))`, with :math:`S_k` the first
    pass's estimate of :math:`\int|g_k|` over the whole interval and
    :math:`L` its length, and split in halves otherwise.  The Kronrod value
    of every accepted panel is summed (its error is far below the Gauss
    error that is tested).  Raises :class:`IntegrationError` beyond
    ``max_panels`` panel evaluations (default 100 per first panel).
    """
    edges = np.asarray(edges, dtype=float)
    length = abs(edges[-1] - edges[0])
    lo, hi = np.minimum(edges[:-1], edges[1:]), np.maximum(edges[:-1], edges[1:])
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    total, tol, used = None, None, 0
    if max_panels is None:
        max_panels = 100 * len(lo)
    x, wk, wg = _GK7
    while len(lo):
        used += len(lo)
        if used > max_panels:
            raise IntegrationError(f"adaptive quadrature needed more than {max_panels} panels")
        mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
        vals = np.asarray(fun((mid[:, None] + half[:, None] * x).ravel()), dtype=float)
        vals = vals.reshape(vals.shape[0], len(lo), len(x))
        ik = (vals @ wk) * half
        err = np.abs((vals @ wg) * half - ik)
        if total is None:
            total = np.zeros(ik.shape[0])
            scale = ((np.abs(vals) @ wk) * half).sum(axis=1)
            tol = np.maximum(atol, rtol * np.maximum(scale, floor * float(np.max(scale,
                                                                                  initial=0.0))))
        ok = np.all(err <= tol[:, None] * (2.0 * half / length), axis=0)
        total += ik[:, ok].sum(axis=1)
        lo, hi, mid = lo[~ok], hi[~ok], mid[~ok]
        lo, hi = np.concatenate([lo, mid]), np.concatenate([mid, hi])
    return np.zeros(0) if total is None else total


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300))
