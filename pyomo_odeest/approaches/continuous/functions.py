r"""Pieces of the continuous backend below the model: method names, errors, sparse
symbolic arrays lambdified once, and the tolerance and step helpers of the integrations."""
from __future__ import annotations

import numpy as np
import sympy

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
        self._fn = sympy.lambdify(args, exprs, "numpy", cse=True) if exprs else None

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
        for a, s in enumerate(syms):
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


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300))
