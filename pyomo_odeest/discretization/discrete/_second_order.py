r"""Second-order derivatives of J_k(u): second-order adjoint [GM-grad, §2.5],
adjoint + finite differences [MHV, eq. (21)] and Gauss–Newton."""
from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

from ._first_order import _fd_steps, central_differences

__all__ = ["SecondOrder"]


class SecondOrder:
    """Mixin of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`: Hessians."""

    def hessian(self, u, method="soa", fd_step=1e-5, gradient_method="adjoint"):
        """∇²J_k(u).

        ``'soa'``: discrete second-order adjoint [GM-grad, §2.5]:
        ``H = L_uu + L_uw M + ∂G/∂uᵀ 𝓜`` with ``M`` the sensitivities and
        ``(∂G/∂w)ᵀ 𝓜 = −(L_ww M + L_wu)``, ``L = F + pᵀG``.
        ``'adjoint_fd'``: central differences of the adjoint gradient
        [MHV, eq. (21)].  ``'gauss_newton'``: ``2 Σ_j S_jᵀ A_j S_j`` with
        ``S_j = ∂r_j/∂u``.
        """
        u = self._check_u(u)
        self.nhess += 1
        if method == "adjoint_fd":
            H = central_differences(lambda v: self.gradient(v, gradient_method), u,
                                    _fd_steps(u, fd_step))
            return 0.5 * (H + H.T)
        traj = self.simulate(u)
        W = traj.W
        pv = self._point_values(W, u)
        M = self.sensitivities(traj, pv)
        mf, Xm, Mm = self.misfit, W[self.meas_blk], M[self.meas_blk]
        if method == "gauss_newton":
            Sm = mf.observation_sensitivities(Xm, u, Mm)                    # (s, no, m)
            return 2 * np.einsum("jam,jan->mn", Sm, mf.AS(Sm)) + mf.penalty_hessian(u)
        if method != "soa":
            raise ValueError(f"unknown Hessian method {method!r}; use 'soa', 'adjoint_fd' or 'gauss_newton'")
        Fw, Fu = self._dF(W, u)
        P = self.adjoint(traj, Fw, pv)
        sec = self._second_order()
        compiled = self._compiled() is not None
        n, m, nb = self.n, self.m, self.nblocks
        # second derivatives of L = F + pᵀG, as Lww·M + Lwu  (nb, n, m), Luw·M + Luu (m, m);
        # the objective's part, φ_j applied to the direction (M, I), from the misfit
        term_w, Lu_tot = mf.directional_second(Xm, u, Mm, np.eye(m))
        LwwM_Lwu = np.zeros((nb, n, m))
        np.add.at(LwwM_Lwu, self.meas_blk, term_w)
        Lu_tot = Lu_tot + mf.penalty_hessian(u)
        tb = self.blk_time
        # constraint part: G_b = ... − Σ c f(w_P) → pᵀG second derivatives −c (p_bᵀ f)''
        for key, eq, pt, c in (("f", self.f_eq, self.f_pt, self.f_c),
                               ("fd", self.d_eq, self.d_pt, self.d_c)):
            if key == "fd" and not self.needs_fdot:
                continue
            if len(eq) == 0:
                continue
            _, hxx, hxu, huu = sec[key]
            lam = -c[:, None] * P[eq]                               # (nterms, n)
            Xp, Tp = W[pt], tb[pt]
            hxxv = hxx.values(Xp, u, Tp, lam)
            hxuv = hxu.values(Xp, u, Tp, lam)
            huuv = huu.values(Xp, u, Tp, lam)
            if compiled:
                from ._sweeps import second_order_terms
                C = np.ascontiguousarray
                second_order_terms(LwwM_Lwu, Lu_tot, pt.astype(np.int64), C(M),
                                   hxx.rows, hxx.cols, C(hxxv), hxu.rows, hxu.cols, C(hxuv),
                                   huu.rows, huu.cols, C(huuv))
                continue
            contrib = hxx.matmat(hxxv, M[pt]) + hxu.dense(hxuv)      # (nterms, n, m)
            np.add.at(LwwM_Lwu, pt, contrib)
            Lu_tot += np.einsum("txm,txn->mn", hxu.dense(hxuv), M[pt]) + huu.dense(huuv).sum(axis=0)
        # initial condition G_0 = x_0 − l(u): −(p_0ᵀ l)_uu
        Lu_tot -= np.tensordot(P[0], sec["l"](u), axes=1)
        # second-order adjoint 𝓜: (∂G/∂w)ᵀ 𝓜 = −(L_ww M + L_wu), one column per parameter
        if compiled:            # block backward substitution with (∂G/∂u)ᵀ 𝓜
            H = Lu_tot + self.block_backward_solve(-LwwM_Lwu, u, pv)[1]
            return 0.5 * (H + H.T)
        Gw = self.jacobian_w(W, u, pv)
        lu = spla.splu(Gw.T.tocsc())
        Madj = lu.solve(-LwwM_Lwu.reshape(nb * n, m)).reshape(nb, n, m)
        Gu = self.jacobian_u(W, u, pv)
        H = Lu_tot + np.einsum("bnm,bnq->mq", Gu, Madj)
        return 0.5 * (H + H.T)
