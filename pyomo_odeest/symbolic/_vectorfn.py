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
from sympy.core.function import AppliedUndef

from ._lambdify import from_code, generated_code, lambdify
from ._store import stored

__all__ = ["VectorFn", "SparseJacobian", "sparse_jacobian", "second_derivatives",
           "observation_functions", "canonical_form"]


class VectorFn:
    """``F(X, u, t, *extra) -> (npts, len(exprs))`` for a list of expressions."""

    def __init__(self, exprs, x_sym, u_sym, t_sym, extra=()):
        self.size = len(exprs)
        self.extra = tuple(extra)
        args = (tuple(x_sym), tuple(u_sym), t_sym) + tuple(tuple(e) for e in extra)
        self._fn = lambdify(args, list(exprs), modules="numpy", cse=True) if exprs else None

    def code(self) -> dict:
        """The function as JSON-serializable data (:meth:`from_code` makes it again)."""
        return {"size": self.size, "fn": None if self._fn is None else generated_code(self._fn)}

    @classmethod
    def from_code(cls, code, fn=None):
        """The function of :meth:`code`'s data (without extra arguments); ``fn``: its
        generated function when already made from that code."""
        out = cls.__new__(cls)
        out.size, out.extra = code["size"], ()
        out._fn = (None if code["fn"] is None else
                   fn if fn is not None else from_code(code["fn"]))
        return out

    def __call__(self, X, u, t, *extra):
        X = np.atleast_2d(X)
        npts = X.shape[0]
        if self._fn is None:
            return np.zeros((npts, 0))
        out = np.empty((self.size, npts))
        for r, v in enumerate(self._fn(X.T, u, t, *[np.asarray(e).T for e in extra])):
            out[r] = v                      # constant entries broadcast
        return out.T

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


class SparseJacobian(VectorFn):
    """Sparse matrix-valued function on a fixed pattern: a :class:`VectorFn` of
    its ``nnz`` entries.

    ``values(X, u, t)`` -> ``(npts, nnz)``; ``dense(vals)`` -> ``(npts, r, c)``.
    """

    def __init__(self, rows, cols, exprs, shape, x_sym, u_sym, t_sym, extra=()):
        super().__init__(exprs, x_sym, u_sym, t_sym, extra)
        self.rows = np.asarray(rows, dtype=np.int64)
        self.cols = np.asarray(cols, dtype=np.int64)
        self.shape = shape
        self.nnz = len(exprs)
        self._exprs, self._of = list(exprs), None
        #: every column holds one entry at most (then ``matvec_T`` sums nothing)
        self.distinct_cols = len(np.unique(self.cols)) == self.nnz

    @property
    def exprs(self):
        """The entries' expressions (for code generation)."""
        if self._exprs is None:                     # made from code: differentiated again
            of, wrt = self._of
            self._exprs = [sympy.diff(of[r], wrt[c]) for r, c in zip(self.rows, self.cols)]
        return self._exprs

    def code(self) -> dict:
        return dict(super().code(), rows=self.rows.tolist(), cols=self.cols.tolist(),
                    shape=list(self.shape))

    @classmethod
    def from_code(cls, code, of, wrt, fn=None):
        """The Jacobian of ``of`` in ``wrt`` from :meth:`code`'s data (``fn``: as for
        :meth:`VectorFn.from_code`)."""
        out = super().from_code(code, fn)
        out.rows = np.asarray(code["rows"], dtype=np.int64)
        out.cols = np.asarray(code["cols"], dtype=np.int64)
        out.shape, out.nnz = tuple(code["shape"]), len(code["rows"])
        out.distinct_cols = len(np.unique(out.cols)) == out.nnz
        out._exprs, out._of = None, (list(of), list(wrt))
        return out

    values = VectorFn.__call__

    def dense(self, vals):
        vals = np.atleast_2d(vals)
        out = np.zeros((vals.shape[0],) + self.shape)
        out[:, self.rows, self.cols] = vals
        return out

    def matvec_T(self, vals, v):
        """Row-wise ``A_kᵀ v_k`` for values (npts, nnz) and v (npts, r) -> (npts, c)."""
        npts, c = vals.shape[0], self.shape[1]
        w = vals * v[:, self.rows]
        if self.distinct_cols:
            out = np.zeros((npts, c))
            out[:, self.cols] = w
            return out
        flat = (np.arange(npts)[:, None] * c + self.cols[None, :]).ravel()
        return np.bincount(flat, weights=w.ravel(), minlength=npts * c).astype(float).reshape(
            npts, c)

    def sum_matvec_T(self, vals, v):
        """``Σ_k A_kᵀ v_k`` (c,) without forming the per-point products."""
        e = np.einsum("ke,ke->e", vals, v[:, self.rows])
        return np.bincount(self.cols, weights=e, minlength=self.shape[1]).astype(float)

    def matmat(self, vals, M):
        """Row-wise ``A_k M_k`` for M (npts, c, q) -> (npts, r, q)."""
        return self._rowwise(vals, M, False)

    def matmat_T(self, vals, M):
        """Row-wise ``A_kᵀ M_k`` for M (npts, r, q) -> (npts, c, q)."""
        return self._rowwise(vals, M, True)

    def _rowwise(self, vals, M, transpose):
        npts = vals.shape[0]
        rows, cols = (self.cols, self.rows) if transpose else (self.rows, self.cols)
        out = np.zeros((npts, self.shape[1 if transpose else 0], M.shape[2]))
        if self.nnz > 4 * npts:            # few points, many entries: sparse products
            for k in range(npts):
                A = self.csr(vals[k])
                out[k] = (A.T if transpose else A) @ M[k]
            return out
        for e in range(self.nnz):
            out[:, rows[e], :] += vals[:, e, None] * M[:, cols[e], :]
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
    lam = tuple(sympy.symbols(f"lam0:{len(exprs)}", real=True, cls=sympy.Dummy))  # no user name
    s = sum(l * e for l, e in zip(lam, exprs))
    gx = [sympy.diff(s, v) for v in x_sym]
    gu = [sympy.diff(s, v) for v in u_sym]
    Hxx = sparse_jacobian(gx, x_sym, x_sym, u_sym, t_sym, (lam,))
    Hxu = sparse_jacobian(gx, u_sym, x_sym, u_sym, t_sym, (lam,))
    Huu = sparse_jacobian(gu, u_sym, x_sym, u_sym, t_sym, (lam,))
    return lam, Hxx, Hxu, Huu


def observation_functions(exprs, x_sym, u_sym, t_sym):
    """``(g, g_x, g_u)``: :class:`VectorFn` of ``exprs`` and their :func:`sparse_jacobian`
    in ``x_sym`` and ``u_sym``.  Their code is kept on disk between runs (the store of
    :mod:`._store`), unless an expression calls an undefined function or one
    implemented in Python (an input given as data), whose implementation is not code.

    The code is generated for the expressions' canonical form (:func:`canonical_form`:
    the parameters they use and their floating-point numbers as the entries of one
    argument vector), so that experiments whose observations differ only in which
    parameters they read and in their numbers (a PEtab problem's conditions: the
    overrides of observable parameters, the data inside a noise formula) share one
    generated function, built once per process and once on disk."""
    exprs = [sympy.sympify(e) for e in exprs]
    if any(isinstance(f, AppliedUndef) or hasattr(type(f), "_imp_")
           for e in exprs for f in e.atoms(sympy.Function)):
        # a function given as data, or implemented in Python
        return (VectorFn(exprs, x_sym, u_sym, t_sym),
                sparse_jacobian(exprs, x_sym, x_sym, u_sym, t_sym),
                sparse_jacobian(exprs, u_sym, x_sym, u_sym, t_sym))
    cexprs, used, q_sym, consts = canonical_form(exprs, u_sym)
    x_sym = tuple(x_sym)
    key = sympy.srepr((tuple(cexprs), x_sym, tuple(q_sym), t_sym))
    fns = _CANONICAL.get(key)
    if fns is None:
        def build():
            return [VectorFn(cexprs, x_sym, q_sym, t_sym).code(),
                    sparse_jacobian(cexprs, x_sym, x_sym, q_sym, t_sym).code(),
                    sparse_jacobian(cexprs, q_sym[:len(used)], x_sym, q_sym, t_sym).code()]
        g, gx, gu = stored("observations", key, build)
        fns = (tuple(None if c["fn"] is None else from_code(c["fn"]) for c in (g, gx, gu)),
               (g, gx, gu))
        if len(_CANONICAL) >= _CANONICAL_SIZE:
            _CANONICAL.pop(next(iter(_CANONICAL)))
        _CANONICAL[key] = fns
    (fg, fgx, fgu), (g, gx, gu) = fns
    used = np.asarray(used, dtype=np.int64)

    def wrapped(fn):
        return None if fn is None else _Canonical(fn, used, consts)
    g = VectorFn.from_code(g, wrapped(fg))
    gx = SparseJacobian.from_code(gx, exprs, x_sym, wrapped(fgx))
    gu = SparseJacobian.from_code(gu, exprs, u_sym, wrapped(fgu))
    # its columns were the parameters used: their positions in u
    gu.cols, gu.shape = used[gu.cols], (len(exprs), len(u_sym))
    return g, gx, gu


#: generated observation functions of this process by canonical key (:func:`observation_functions`)
_CANONICAL: dict = {}
_CANONICAL_SIZE = 256


def canonical_form(exprs, u_sym):
    """``(canonical expressions, used, q_sym, consts)``: ``exprs`` with the parameters of
    ``u_sym`` they use (positions ``used`` in ``u_sym``) and their floating-point numbers
    (values ``consts``) replaced by the symbols ``q_sym`` (the parameters first), each
    numbered in the order of its first appearance in a pre-order traversal of the
    expressions.  Two lists of expressions that differ only in which parameters they read
    and in their numbers have the same canonical expressions when these orders agree;
    they are evaluated with ``q = (u[used], consts)``.  Numbers that are exponents stay
    in the expressions (their derivatives keep their form)."""
    position = {s: k for k, s in enumerate(u_sym)}
    order, numbers = [], []
    # a number in an exponent stays a number: sympy differentiates x**q as q*x**q/x,
    # which is NaN at x = 0 where x**2.0's derivative 2.0*x is 0
    seen = set()
    seen_numbers = {p.exp for e in exprs for p in e.atoms(sympy.Pow) if p.exp.is_Float}
    for e in exprs:
        for a in sympy.preorder_traversal(e):
            if a.is_Symbol:
                if a in position and a not in seen:
                    seen.add(a)
                    order.append(a)
            elif isinstance(a, sympy.Float) and a not in seen_numbers:
                seen_numbers.add(a)
                numbers.append(a)
    q_sym = ([sympy.Symbol(f"q{k}", **s.assumptions0) for k, s in enumerate(order)]
             + [sympy.Symbol(f"q{len(order) + k}", real=True) for k in range(len(numbers))])
    table = dict(zip(order + numbers, q_sym))
    cexprs = [e.xreplace(table) for e in exprs]
    return (cexprs, [position[s] for s in order], tuple(q_sym),
            np.array([float(v) for v in numbers], dtype=float))


class _Canonical:
    """A generated function of ``(x, q, t, *extra)`` called as one of ``(x, u, t, *extra)``:
    ``q`` is ``u[used]`` followed by ``consts`` (:func:`canonical_form`)."""

    __slots__ = ("fn", "used", "consts", "_used_list", "_consts_list")

    def __init__(self, fn, used, consts):
        self.fn, self.used, self.consts = fn, used, consts
        self._used_list, self._consts_list = used.tolist(), consts.tolist()

    def __call__(self, x, u, t, *extra):
        if isinstance(u, (list, tuple)):              # Python floats (the point path)
            q = [u[i] for i in self._used_list] + self._consts_list
        else:
            u = np.asarray(u, dtype=float)
            if u.ndim == 1:
                q = np.concatenate([u[self.used], self.consts])
            else:                                     # a column of parameters per point
                q = np.concatenate([u[self.used], np.broadcast_to(
                    self.consts[:, None], (len(self.consts),) + u.shape[1:])])
        return self.fn(x, q, t, *extra)

    def __getstate__(self):
        return (self.fn, self.used, self.consts)

    def __setstate__(self, state):
        self.__init__(*state)
