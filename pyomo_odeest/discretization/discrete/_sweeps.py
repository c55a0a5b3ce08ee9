r"""The block sweeps of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` compiled by numba.

Imported only when numba is installed (:mod:`._compiled`).  The sweeps are those
of :mod:`._first_order` and :mod:`._second_order` (Lemma 1 of [GM-grad]) on the
same block layout, written as loops over arrays:

* :func:`adjoint_sweep`: block backward substitution of
  ``(∂G/∂w)ᵀ P = R`` for ``q`` right-hand sides at once, with the contraction
  ``(∂G/∂u)ᵀ P`` — the discrete adjoint and gradient [GM-grad, eqs. (52),
  (54)] (``q = 1``) and the second-order adjoint of [GM-grad, §2.5]
  (``q = m``); every point's Jacobians multiply the weighted sum of the
  adjoints of the terms at that point, once;
* :func:`sensitivity_sweep`: block forward substitution of
  ``(∂G/∂w) M = −∂G/∂u`` [GM-grad, eq. (51)], every block's ``M`` or the
  contraction ``Σ_b ∇_{w_b}Fᵀ M_b`` of eq. (53) through a ring buffer;
* :func:`lu_solve`: the small dense systems of the implicit blocks;
  :func:`add_transposed`: one point's ``Jᵀ x`` (also the misfit's
  ``g_xᵀ A_j r_j`` of the generated kernels, :mod:`._compiled`).

Jacobian values come precomputed at every block (``values``, shape
``(nblocks, nnz)``, on the patterns ``rows``/``cols``); terms are grouped by
equation block in CSR form (``ptr``, ``pt``, ``c``).  See docs/reduced_space.md,
section "Compiled engine".
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["lu_solve", "add_transposed", "adjoint_sweep", "sensitivity_sweep"]

_JIT = dict(cache=True, error_model="numpy", nogil=True)


@njit(**_JIT)
def lu_solve(A, B):
    """Solve ``A X = B`` in place by LU with partial pivoting, as LAPACK's ``gesv`` (``A``
    (n, n) is overwritten by its LU factors, ``B`` (n, q) by ``X``); False if a pivot is zero
    or not finite."""
    n = A.shape[0]
    q = B.shape[1]
    for k in range(n):
        p = k
        big = abs(A[k, k])
        for i in range(k + 1, n):
            if abs(A[i, k]) > big:
                big = abs(A[i, k])
                p = i
        if not (big > 0.0) or not np.isfinite(big):
            return False
        if p != k:
            for j in range(n):
                tmp = A[k, j]
                A[k, j] = A[p, j]
                A[p, j] = tmp
            for j in range(q):
                tmp = B[k, j]
                B[k, j] = B[p, j]
                B[p, j] = tmp
        piv = A[k, k]
        for i in range(k + 1, n):
            lik = A[i, k] / piv
            A[i, k] = lik
            if lik != 0.0:
                for j in range(k + 1, n):
                    A[i, j] -= lik * A[k, j]
                for j in range(q):
                    B[i, j] -= lik * B[k, j]
    for k in range(n - 1, -1, -1):
        piv = A[k, k]
        for j in range(q):
            s = B[k, j]
            for i in range(k + 1, n):
                s -= A[k, i] * B[i, j]
            B[k, j] = s / piv
    return True


@njit(**_JIT)
def _diagonal(D, b, ptr, pt, c, rows, cols, vals, transpose):
    """``D −= Σ c J(w_b)`` over the terms of block ``b`` at its own point (or ``Jᵀ``)."""
    for e in range(ptr[b], ptr[b + 1]):
        if pt[e] != b:
            continue
        ce = c[e]
        for k in range(rows.shape[0]):
            if transpose:
                D[cols[k], rows[k]] -= ce * vals[b, k]
            else:
                D[rows[k], cols[k]] -= ce * vals[b, k]


@njit(**_JIT)
def _block_matrix(D, b, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                  d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv, transpose):
    """``D = I − Σ c f_x(w_b) − Σ d ḟ_x(w_b)`` of implicit block ``b`` (or its transpose)."""
    D[:, :] = 0.0
    for i in range(D.shape[0]):
        D[i, i] = 1.0
    _diagonal(D, b, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv, transpose)
    _diagonal(D, b, d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv, transpose)


@njit(**_JIT)
def add_transposed(y, x, q, rows, cols, vals, scale):
    """``y += scale · Jᵀ x`` for one point's Jacobian ``J`` (``vals`` on ``rows``/``cols``),
    ``x`` and ``y`` holding ``(·, q)`` values in one row."""
    if q == 1:                      # the adjoint: no loop over right-hand sides
        for k in range(rows.shape[0]):
            y[cols[k]] += scale * vals[k] * x[rows[k]]
        return
    for k in range(rows.shape[0]):
        a = scale * vals[k]
        r, s = cols[k] * q, rows[k] * q
        for j in range(q):
            y[r + j] += a * x[s + j]


@njit(**_JIT)
def _weigh(L, P, b, ptr, pt, c, window):
    """``Λ_p += c P_b`` for every term of block ``b`` at a point ``p`` (its own included;
    ``Λ_p`` in row ``p % window``, a block's ``(n, q)`` values in one row)."""
    for e in range(ptr[b], ptr[b + 1]):
        p = pt[e] % window
        ce = c[e]
        for i in range(P.shape[1]):
            L[p, i] += ce * P[b, i]


@njit(**_JIT)
def _gather_forward(rhs, M, window, b, ptr, pt, c, x_rows, x_cols, xv, u_rows, u_cols, uv):
    """``rhs += Σ c (J_u(w_p) + J_x(w_p) M_p)`` over the terms of block ``b`` (the
    ``J_x M`` part only at earlier points ``p``)."""
    m = rhs.shape[1]
    for e in range(ptr[b], ptr[b + 1]):
        p = pt[e]
        ce = c[e]
        for k in range(u_rows.shape[0]):
            rhs[u_rows[k], u_cols[k]] += ce * uv[p, k]
        if p != b:
            Mp = M[p % window]
            for k in range(x_rows.shape[0]):
                a = ce * xv[p, k]
                for j in range(m):
                    rhs[x_rows[k], j] += a * Mp[x_cols[k], j]


@njit(**_JIT)
def adjoint_sweep(R, base, implicit, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                  fu_rows, fu_cols, fuv, d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv,
                  fdu_rows, fdu_cols, fduv, window, PGu):
    """Solve ``(∂G/∂w)ᵀ P = R`` (``R`` (nblocks, n, q) is overwritten by ``P``) by
    block backward substitution.

    The terms at a point ``p`` enter through their weighted sum
    ``Λ_p = Σ_{terms e at p} c_e P_{eq_e}`` (f and ḟ terms apart), so that the
    Jacobians at ``p`` multiply one sum: ``f_x(w_p)ᵀ Λ_p`` is the sum of
    [GM-grad, eq. (52)] and ``f_u(w_p)ᵀ Λ_p`` that of eq. (54), subtracted from
    ``PGu`` (m, q) as the sweep completes ``Λ_p``: the terms' part of
    ``(∂G/∂u)ᵀ P``.  ``Λ`` lives in a ring buffer of ``window`` blocks (larger than
    the farthest back reference of any block).  A singular diagonal block gives NaN
    from there on.
    """
    nb, n, q = R.shape
    nq = n * q
    has_d = d_ptr[nb] > 0
    # a block's (n, q) values as one row: contiguous loops also for q = 1
    P, y = R.reshape((nb, nq)), PGu.reshape(PGu.size)
    Lf = np.zeros((window, nq))
    Ld = np.zeros((window if has_d else 0, nq))
    D = np.empty((n, n))
    for b in range(nb - 1, -1, -1):
        s = b % window
        # the terms of later blocks at point b: R_b += f_x(w_b)ᵀ Λ_f,b + ḟ_x(w_b)ᵀ Λ_d,b,
        # then P_b = R_b, or D_bᵀ P_b = R_b for an implicit block
        add_transposed(P[b], Lf[s], q, fx_rows, fx_cols, fxv[b], 1.0)
        if has_d:
            add_transposed(P[b], Ld[s], q, fdx_rows, fdx_cols, fdxv[b], 1.0)
        if implicit[b]:
            _block_matrix(D, b, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                          d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv, True)
            if not lu_solve(D, R[b]):
                R[b] = np.nan
        _weigh(Lf, P, b, f_ptr, f_pt, f_c, window)
        add_transposed(y, Lf[s], q, fu_rows, fu_cols, fuv[b], -1.0)   # Λ_b is complete
        Lf[s] = 0.0
        if has_d:
            _weigh(Ld, P, b, d_ptr, d_pt, d_c, window)
            add_transposed(y, Ld[s], q, fdu_rows, fdu_cols, fduv[b], -1.0)
            Ld[s] = 0.0
        if b == 0:
            break
        Rb = P[base[b]]
        for i in range(nq):
            Rb[i] += P[b, i]


@njit(**_JIT)
def sensitivity_sweep(M0, base, implicit, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                      fu_rows, fu_cols, fuv, d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv,
                      fdu_rows, fdu_cols, fduv, Fw, window):
    """Block forward substitution of ``(∂G/∂w) M = −∂G/∂u`` from ``M_0 = M0``.

    ``window`` = nblocks keeps every ``M_b`` (returned, shape (nblocks, n, m));
    a smaller window (larger than the farthest back reference of any block)
    keeps a ring buffer and only the contraction ``Σ_b Fw_bᵀ M_b`` is meaningful.
    Returns ``(M, acc)``.
    """
    nb = base.shape[0]
    n, m = M0.shape
    M = np.zeros((window, n, m))
    acc = np.zeros(m)
    D = np.empty((n, n))
    rhs = M0.copy()
    for b in range(nb):
        if b > 0:
            rhs[:, :] = M[base[b] % window]
            _gather_forward(rhs, M, window, b, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                            fu_rows, fu_cols, fuv)
            _gather_forward(rhs, M, window, b, d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv,
                            fdu_rows, fdu_cols, fduv)
            if implicit[b]:
                _block_matrix(D, b, f_ptr, f_pt, f_c, fx_rows, fx_cols, fxv,
                              d_ptr, d_pt, d_c, fdx_rows, fdx_cols, fdxv, False)
                if not lu_solve(D, rhs):
                    rhs[:, :] = np.nan
        M[b % window] = rhs
        for i in range(n):
            if Fw[b, i] != 0.0:
                for j in range(m):
                    acc[j] += Fw[b, i] * rhs[i, j]
    return M, acc


@njit(**_JIT)
def second_order_terms(LwwM, Luu, pt, M, xx_rows, xx_cols, xxv, xu_rows, xu_cols, xuv,
                       uu_rows, uu_cols, uuv):
    """Add the terms ``(λ_tᵀ h)''`` of ``L = F + pᵀG`` at the points ``pt[t]``:
    ``LwwM[p] += h_xx M_p + h_xu`` and ``Luu += h_xuᵀ M_p + h_uu`` (values per term)."""
    m = M.shape[2]
    for t in range(pt.shape[0]):
        p = pt[t]
        for k in range(xx_rows.shape[0]):
            v = xxv[t, k]
            if v != 0.0:
                for j in range(m):
                    LwwM[p, xx_rows[k], j] += v * M[p, xx_cols[k], j]
        for k in range(xu_rows.shape[0]):
            v = xuv[t, k]
            LwwM[p, xu_rows[k], xu_cols[k]] += v
            if v != 0.0:
                for j in range(m):
                    Luu[xu_cols[k], j] += v * M[p, xu_rows[k], j]
        for k in range(uu_rows.shape[0]):
            Luu[uu_rows[k], uu_cols[k]] += uuv[t, k]
