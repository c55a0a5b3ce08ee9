r"""Second-order derivatives of :math:`J(u)`: the second-order adjoint [MHV, eqs. (18)–(20)],
finite differences of adjoint gradients [MHV, eq. (21)] and finite differences."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..discrete._first_order import central_differences
from ._functions import HESSIAN_METHODS, _segment_atol, _steps

__all__ = ["SecondOrder"]


class SecondOrder:
    """Mixin of :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`: Hessians."""

    # -- Hessian -------------------------------------------------------------
    def hessian_vector(self, u=None, V=None):
        r"""Hessian–vector products :math:`HV` by the second-order adjoint [MHV, (18)–(20)]

        For each direction :math:`v` (a column of ``V``) the forward
        sensitivity :math:`s` solves (8) with :math:`h = v`; backward, with
        the Hamiltonian :math:`h(x,u,\lambda) = \lambda^\top f`,

        .. math::

            \dot\lambda &= -f_x^\top\lambda, \\
            \dot\mu &= -f_x^\top\mu - h_{xx}s - h_{xu}v, \\
            \dot Q &= -\big(f_u^\top\mu + h_{ux}s + h_{uu}v\big),

        from :math:`\lambda = \mu = Q = 0` at :math:`T^+`, with jumps at each
        :math:`\tau_j`: :math:`\lambda \mathrel{+}= \nabla_x\varphi_j`,
        :math:`\mu \mathrel{+}= \varphi_{xx}s(\tau_j) + \varphi_{xu}v`.  Then

        .. math::

            Hv = l_u^\top\mu(t_0) + \Big(\sum_i\lambda_i(t_0)\,l_{i,uu}\Big)v + Q(t_0)
                 + \sum_j\big(\varphi_{ux}s(\tau_j) + \varphi_{uu}v\big).

        :math:`\mu` is the directional derivative of :math:`\lambda`; the
        integral terms are the inner products of (20)
        (:math:`(f_{uu}h_1h_2, v)`, :math:`(f_{u x}h_1 s_2, v)`, ...)
        re-associated so that no second sensitivity (18) is needed.  All
        columns of ``V`` are integrated together (one forward and one backward
        solve); pass one column at a time for the column-by-column variant.
        :class:`CvodesModel` obtains :math:`\mu(t_0)` and :math:`Q` by forward-over-adjoint.

        Returns
        -------
        ndarray (p, k), or (p,) for a vector ``v``.
        """
        u = self._u(u)
        vec = V is not None and np.ndim(V) == 1
        V = np.eye(self.p) if V is None else np.asarray(V, dtype=float).reshape(self.p, -1)
        fsol, Xm, Sm = self.sensitivities(u, V)
        jl, _ = self.misfit.gradients(Xm, u)
        jM, Hm = self.misfit.directional_second(Xm, u, Sm, V)
        Hm = Hm + self.misfit.penalty_hessian(u) @ V
        lam, M, Q = self._second_order_sweep(u, V, fsol, jl, jM)
        self.counts["soa"] += 1
        Luu = np.tensordot(lam, self._l_uu().dense(u), axes=1)       # Σ_i λ_i l_{i,uu}
        HV = self.l_u.dense(u).T @ M + Luu @ V + Q + Hm
        return HV[:, 0] if vec else HV

    def _l_uu(self):
        return self._second_derivatives()["l_uu"]

    def _second_order_sweep(self, u, V, fsol, jl, jM):
        """λ(t0), μ(t0) and Q(t0) of the backward sweep on the sensitivity solution
        ``fsol`` with the jumps ``jl`` of λ and ``jM`` of μ."""
        n, p, k = self.n, self.p, V.shape[1]
        sec = self._second_derivatives()
        soa, soa_jac = sec["soa"], sec["soa_jac"]
        ys = fsol.sol
        ul = u.tolist()
        dim = n + n * k + p * k
        sparse = self._jac_format(dim)

        def rhs(t, y):
            z = ys(t)
            x, S = z[:n], z[n:].reshape(n, k)
            lam, M = y[:n], y[n:n + n * k].reshape(n, k)
            A, B, hxx, hxu, huu = soa(x.tolist(), ul, t, lam.tolist())
            dlam = -A.T @ lam
            dM = -(A.T @ M + hxx @ S + hxu @ V)
            dQ = -(B.T @ M + hxu.T @ S + huu @ V)
            return np.concatenate([dlam, dM.ravel(), dQ.ravel()])

        def jac(t, y):
            z = ys(t)
            x, S = z[:n], z[n:].reshape(n, k)
            A, B, T3, B3, C3 = soa_jac(x.tolist(), ul, t)
            dM_dlam = -(np.einsum("iml,lc->mci", T3, S)
                        + np.einsum("imr,rc->mci", B3, V)).reshape(n * k, n)
            dQ_dlam = -(np.einsum("ilr,lc->rci", B3, S)
                        + np.einsum("irs,sc->rci", C3, V)).reshape(p * k, n)
            if sparse:
                Ik = sp.eye(k)
                return sp.bmat([
                    [sp.csr_matrix(-A.T), None, None],
                    [sp.csr_matrix(dM_dlam), sp.kron(sp.csr_matrix(-A.T), Ik), None],
                    [sp.csr_matrix(dQ_dlam), sp.kron(sp.csr_matrix(-B.T), Ik),
                     sp.csr_matrix((p * k, p * k))]], format="csc")
            J = np.zeros((dim, dim))
            J[:n, :n] = -A.T
            J[n:n + n * k, :n] = dM_dlam
            J[n:n + n * k, n:n + n * k] = np.kron(-A.T, np.eye(k))
            J[n + n * k:, :n] = dQ_dlam
            J[n + n * k:, n:n + n * k] = np.kron(-B.T, np.eye(k))
            return J

        N = len(self.tau)
        jM = jM.reshape(N, n * k)
        parts = (slice(0, n), slice(n, n + n * k), slice(n + n * k, dim))

        def atol(y, t_hi, t_lo):
            growth = abs(t_hi - t_lo) * float(np.max(np.abs(rhs(t_hi, y)[n + n * k:]),
                                                     initial=0.0))
            return _segment_atol(self.atol, self.rtol, self.adjoint_atol, y, parts,
                                 parts[2], growth)
        y = np.zeros(dim)
        t_hi = self.T
        for j in range(N - 1, -2, -1):                      # j = -1: down to t0, no jump
            t_lo = self.tau[j] if j >= 0 else self.t0
            if t_lo < t_hi:
                y = self._solve(rhs, jac, (t_hi, t_lo), y, dense=False,
                                atol=atol(y, t_hi, t_lo)).y[:, -1].copy()
            if j >= 0:
                y[:n] += jl[j]
                y[n:n + n * k] += jM[j]
            t_hi = t_lo
        return y[:n], y[n:n + n * k].reshape(n, k), y[n + n * k:].reshape(p, k)

    def hessian(self, u=None, method="soa", index=None, block=None):
        r"""Hessian :math:`\nabla^2 J(u)`.

        Parameters
        ----------
        u : array (p,), optional
        method : {'soa', 'adjoint_fd', 'sensitivity_fd', 'fd'}
            ``'soa'``: second-order adjoint, columns :math:`H e_k` from
            :meth:`hessian_vector` [MHV, eqs. (19)–(20)]; exact up to the
            integration tolerances and not symmetrized.
            ``'adjoint_fd'``: central differences of adjoint gradients
            [MHV, eq. (21), central form],
            :math:`H e_k \approx (\nabla J(u+\epsilon e_k) - \nabla J(u-\epsilon e_k))/(2\epsilon)`;
            ``'sensitivity_fd'``: the same with forward-sensitivity gradients;
            ``'fd'``: second central differences of :math:`J` (2p² + 1 solves).
            The finite-difference variants use steps ``hessian_fd_step·|u_k|``
            and are returned symmetrized, :math:`(H + H^\top)/2`.
        index : array of int, optional
            Only these rows and columns (e.g. the free parameters).
        block : int, optional
            For ``'soa'``: number of directions integrated together (default:
            all; ``block=1`` is strictly column by column).

        Returns
        -------
        ndarray (len(index), len(index))
        """
        u = self._u(u)
        idx = np.arange(self.p) if index is None else np.asarray(index, dtype=int)
        m = len(idx)
        E = np.eye(self.p)[:, idx]
        if method == "soa":
            block = m if block is None else max(1, int(block))
            cols = [self.hessian_vector(u, E[:, a:a + block]) for a in range(0, m, block)]
            return np.hstack(cols)[idx] if cols else np.zeros((0, 0))
        h = _steps(u, self.hessian_fd_step)
        if method in ("adjoint_fd", "sensitivity_fd"):
            gm = "adjoint" if method == "adjoint_fd" else "sensitivity"
            H = central_differences(lambda w: self.gradient(w, gm, idx), u, h, idx,
                                    np.zeros((m, m)))
            return 0.5 * (H + H.T)
        if method == "fd":
            J0 = self._misfit(u)
            H = np.zeros((m, m))

            def J(da, db, a, b):
                w = u.copy()
                w[a] += da
                w[b] += db
                return self._misfit(w)
            for a, ka in enumerate(idx):
                H[a, a] = (J(h[ka], 0, ka, ka) - 2 * J0 + J(-h[ka], 0, ka, ka)) / h[ka] ** 2
                for b in range(a):
                    kb = idx[b]
                    H[a, b] = H[b, a] = (J(h[ka], h[kb], ka, kb) - J(h[ka], -h[kb], ka, kb)
                                         - J(-h[ka], h[kb], ka, kb)
                                         + J(-h[ka], -h[kb], ka, kb)) / (4 * h[ka] * h[kb])
            return H
        raise ValueError(f"hessian method must be one of {HESSIAN_METHODS}, got {method!r}")
