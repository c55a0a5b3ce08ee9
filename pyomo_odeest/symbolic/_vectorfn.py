"""Vectorised numeric functions generated from the problem's sympy expressions.

All simulators and derivative methods evaluate f, its Jacobians and the
observation function through these objects, built once from the symbolic
problem (one source of truth).  Arguments are a point array ``X`` of shape
``(npts, n)``, the parameter vector ``u`` and times ``t`` of shape ``(npts,)``;
Jacobians are returned in sparse form (values ``(npts, nnz)`` on a fixed
pattern ``rows, cols``) because ODE Jacobians are usually sparse.
"""
from __future__ import annotations

import numpy as np
import sympy

from ._lambdify import lambdify

__all__ = ["VectorFn", "SparseJacobian", "sparse_jacobian", "second_derivatives"]


def _lambdify(args, exprs):
    return lambdify(args, exprs, modules="numpy", cse=True)


def _stack(vals, npts):
    out = np.empty((len(vals), npts))
    for r, v in enumerate(vals):
        out[r] = v
    return out


class VectorFn:
    """``F(X, u, t, *extra) -> (npts, len(exprs))`` for a list of expressions."""

    def __init__(self, exprs, x_sym, u_sym, t_sym, extra=()):
        self.size = len(exprs)
        self.extra = tuple(extra)
        self._fn = _lambdify((tuple(x_sym), tuple(u_sym), t_sym) + tuple(tuple(e) for e in extra),
                             list(exprs)) if exprs else None

    def __call__(self, X, u, t, *extra):
        X = np.atleast_2d(X)
        npts = X.shape[0]
        if self._fn is None:
            return np.zeros((npts, 0))
        vals = self._fn(X.T, u, t, *[np.asarray(e).T for e in extra])
        return _stack(vals, npts).T

    def point(self, x, u, t, *extra):
        """Single point, returns (len(exprs),).

        ``x`` and ``u`` may be arrays or lists of Python floats (faster).  On
        Python floats a failed operation raises instead of giving inf/nan
        (a fractional power of a negative number is complex, 1/0 raises); such
        a point is returned as NaN, like its numpy evaluation.
        """
        if self._fn is None:
            return np.zeros(0)
        try:
            return np.array(self._fn(x, u, t, *extra), dtype=float).reshape(-1)
        except (TypeError, ArithmeticError, ValueError):
            return np.full(self.size, np.nan)


class SparseJacobian:
    """Sparse matrix-valued function on a fixed pattern.

    ``values(X, u, t)`` -> ``(npts, nnz)``; ``dense(vals)`` -> ``(npts, r, c)``.
    """

    def __init__(self, rows, cols, exprs, shape, x_sym, u_sym, t_sym, extra=()):
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        self.shape = shape
        self.nnz = len(exprs)
        #: the entries' expressions (for code generation)
        self.exprs = list(exprs)
        self._vf = VectorFn(exprs, x_sym, u_sym, t_sym, extra)

    def values(self, X, u, t, *extra):
        return self._vf(X, u, t, *extra)

    def point(self, x, u, t, *extra):
        return self._vf.point(x, u, t, *extra)

    def dense(self, vals):
        vals = np.atleast_2d(vals)
        out = np.zeros((vals.shape[0],) + self.shape)
        out[:, self.rows, self.cols] = vals
        return out

    def matvec_T(self, vals, v):
        """Row-wise ``A_kᵀ v_k`` for values (npts, nnz) and v (npts, r) -> (npts, c)."""
        npts, c = vals.shape[0], self.shape[1]
        flat = (np.arange(npts)[:, None] * c + self.cols[None, :]).ravel()
        w = (vals * v[:, self.rows]).ravel()
        return np.bincount(flat, weights=w, minlength=npts * c).astype(float).reshape(npts, c)

    def sum_matvec_T(self, vals, v):
        """``Σ_k A_kᵀ v_k`` (c,) without forming the per-point products."""
        e = np.einsum("ke,ke->e", vals, v[:, self.rows])
        return np.bincount(self.cols, weights=e, minlength=self.shape[1]).astype(float)

    def matmat(self, vals, M):
        """Row-wise ``A_k M_k`` for M (npts, c, q) -> (npts, r, q)."""
        npts = vals.shape[0]
        out = np.zeros((npts, self.shape[0], M.shape[2]))
        if self.nnz > 4 * npts:            # few points, many entries: sparse products
            for k in range(npts):
                out[k] = self.csr(vals[k]) @ M[k]
            return out
        for e in range(self.nnz):
            out[:, self.rows[e], :] += vals[:, e, None] * M[:, self.cols[e], :]
        return out

    def matmat_T(self, vals, M):
        """Row-wise ``A_kᵀ M_k`` for M (npts, r, q) -> (npts, c, q)."""
        npts = vals.shape[0]
        out = np.zeros((npts, self.shape[1], M.shape[2]))
        if self.nnz > 4 * npts:
            for k in range(npts):
                out[k] = self.csr(vals[k]).T @ M[k]
            return out
        for e in range(self.nnz):
            out[:, self.cols[e], :] += vals[:, e, None] * M[:, self.rows[e], :]
        return out

    def csr(self, vals_k):
        """One point's matrix as scipy CSR."""
        import scipy.sparse as sp
        return sp.csr_matrix((vals_k, (self.rows, self.cols)), shape=self.shape)

    def apply(self, vals_k, M):
        """``A_k @ M`` for one point: dense product for small matrices, sparse otherwise."""
        if self.shape[0] * self.shape[1] <= 2500:
            A = np.zeros(self.shape)
            A[self.rows, self.cols] = vals_k
            return A @ M
        return self.csr(vals_k) @ M

    def rmatvec_point(self, vals_k, v):
        """``A_kᵀ v`` for one point (fast path of the adjoint sweep)."""
        return np.bincount(self.cols, weights=vals_k * v[self.rows],
                           minlength=self.shape[1]).astype(float)


def sparse_jacobian(exprs, wrt, x_sym, u_sym, t_sym, extra=()):
    """Sparse Jacobian of ``exprs`` with respect to the symbols ``wrt``."""
    rows, cols, ents = [], [], []
    for r, e in enumerate(exprs):
        fs = e.free_symbols
        for c, s in enumerate(wrt):
            if s not in fs:
                continue
            d = sympy.diff(e, s)
            if d != 0:
                rows.append(r)
                cols.append(c)
                ents.append(d)
    return SparseJacobian(rows, cols, ents, (len(exprs), len(wrt)), x_sym, u_sym, t_sym, extra)


def second_derivatives(exprs, x_sym, u_sym, t_sym):
    """Hessians of the contraction ``λᵀ exprs`` with respect to (x, u).

    Returns ``(lam_sym, Hxx, Hxu, Huu)``: sparse functions of
    ``(X, u, t, lam)`` (``lam`` passed as extra argument of shape
    ``(npts, len(exprs))``).
    """
    lam = sympy.symbols(f"lam0:{len(exprs)}", real=True, cls=sympy.Dummy)   # never a user name
    lam = (lam,) if isinstance(lam, sympy.Symbol) else tuple(lam)
    s = sum(l * e for l, e in zip(lam, exprs))
    gx = [sympy.diff(s, v) for v in x_sym]
    gu = [sympy.diff(s, v) for v in u_sym]
    Hxx = sparse_jacobian(gx, x_sym, x_sym, u_sym, t_sym, (lam,))
    Hxu = sparse_jacobian(gx, u_sym, x_sym, u_sym, t_sym, (lam,))
    Huu = sparse_jacobian(gu, u_sym, x_sym, u_sym, t_sym, (lam,))
    return lam, Hxx, Hxu, Huu
