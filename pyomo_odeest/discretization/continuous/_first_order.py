r"""First-order derivatives of :math:`J(u)`: forward sensitivities [MHV, eq. (8)], the
continuous adjoint with jumps at the measurement times [MHV, eqs. (15)–(16), (32)]
and central finite differences."""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ._forward import _values
from ..discrete._first_order import central_differences
from ._functions import (_IMPLICIT, GRADIENT_METHODS, _adaptive_quadrature, _check_bounded,
                         _rel, _segment_atol, _steps)

__all__ = ["FirstOrder"]


class FirstOrder:
    """Mixin of :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`: gradients."""

    # -- gradient ------------------------------------------------------------
    def gradient(self, u=None, method="adjoint", index=None):
        r"""Gradient :math:`\nabla J(u)` (length ``p``, or ``len(index)``).

        Parameters
        ----------
        u : array (p,), optional
            All parameters (default: the problem's start values).
        method : {'adjoint', 'sensitivity', 'fd'}
            ``'adjoint'`` [MHV, eqs. (15)–(16), (32)]: one forward solve with
            dense output and one backward sweep of the adjoint with jumps at the
            :math:`\tau_j` (:meth:`adjoint`), then
            :math:`\nabla J = l_u^\top\lambda(t_0) + \int_{t_0}^{T} f_u^\top\lambda\,dt
            + \sum_j \nabla_u\varphi_j`.  The backward system has n unknowns
            whatever p; use it when p is large and N moderate.

            ``'sensitivity'`` [MHV, eq. (8)]: the augmented forward system
            (:meth:`sensitivities`, n·p extra states), and
            :math:`\nabla J = \sum_j S(\tau_j)^\top\nabla_x\varphi_j + \nabla_u\varphi_j`.
            Preferable for small p and many measurement times.

            ``'fd'``: central differences of :math:`J - c` with steps
            ``fd_step·|u_k|``; a baseline only: its error is the integration
            error divided by the step (with LSODA, whose switching between
            Adams and BDF makes J rough at the 1e-10 level, use
            ``fd_step=1e-4``).
        index : array of int, optional
            Return only these components (the sensitivity and fd methods
            compute only these).
        """
        u = self._u(u)
        idx = np.arange(self.p) if index is None else np.asarray(index, dtype=int)
        if method == "adjoint":
            return self.adjoint(u)["gradient"][idx]
        if method == "sensitivity":
            _, Xm, Sm = self.sensitivities(u, np.eye(self.p)[:, idx])
            Fx, Fu = self.misfit.gradients(Xm, u)
            return np.einsum("jnk,jn->k", Sm, Fx) + (Fu + self.misfit.penalty_gradient(u))[idx]
        if method == "fd":
            return central_differences(self._misfit, u, _steps(u, self.fd_step), idx)
        raise ValueError(f"gradient method must be one of {GRADIENT_METHODS}, got {method!r}")

    # forward sensitivities -------------------------------------------------
    def sensitivities(self, u=None, V=None):
        r"""Forward directional sensitivities :math:`S = (\partial x/\partial u)V` [MHV, (8)].

        .. math:: \dot S = f_x S + f_u V,\qquad S(t_0) = l_u V.

        Returns
        -------
        sol : OdeSolution-like
            Dense output of the augmented state :math:`(x, \mathrm{vec}(S))`
            (S stored row-major, shape (n, k)).
        Xm : (N, n)
            States at the measurement times.
        Sm : (N, n, k)
            Sensitivities at the measurement times.
        """
        u = self._u(u)
        V = np.eye(self.p) if V is None else np.asarray(V, dtype=float).reshape(self.p, -1)
        n, k = self.n, V.shape[1]
        sens = self._sens
        ul = u.tolist()
        sparse = self._jac_format(n + n * k)
        need_jac = self.method in _IMPLICIT
        if need_jac:
            sens_jac = self._second_derivatives()["sens_jac"]

        def rhs(t, y):
            _check_bounded(y)
            x = y[:n]
            S = y[n:].reshape(n, k)
            fv, A, B = sens(x.tolist(), ul, t)
            return np.concatenate([fv, (A @ S + B @ V).ravel()])

        def jac(t, y):
            x = y[:n]
            S = y[n:].reshape(n, k)
            A, T3, B3 = sens_jac(x.tolist(), ul, t)
            dSdx = (np.einsum("iml,mc->icl", T3, S) + np.einsum("ilr,rc->icl", B3, V)
                    ).reshape(n * k, n)
            if sparse:
                return sp.bmat([[sp.csr_matrix(A), None],
                                [sp.csr_matrix(dSdx), sp.kron(sp.csr_matrix(A), sp.eye(k))]],
                               format="csc")
            J = np.zeros((n + n * k, n + n * k))
            J[:n, :n] = A
            J[n:, :n] = dSdx
            J[n:, n:] = np.kron(A, np.eye(k))
            return J

        y0 = np.concatenate([self.l.dense(u), (self.l_u.dense(u) @ V).ravel()])
        sol = self._solve(rhs, jac if need_jac else None, (self.t0, self.T), y0)
        Y = np.atleast_2d(sol.sol(self.tau).T).reshape(len(self.tau), n + n * k)
        Y[self.tau == self.t0] = y0
        self.counts["sensitivity"] += 1
        return sol, Y[:, :n], Y[:, n:].reshape(len(self.tau), n, k)

    # adjoint ----------------------------------------------------------------
    def adjoint(self, u=None, times=None):
        r"""Backward sweep of the continuous adjoint [MHV, eqs. (15)–(16), (32)].

        Solves :math:`\dot\lambda = -f_x^\top\lambda` backward from
        :math:`\lambda(T^+) = 0` with jumps
        :math:`\lambda(\tau_j^-) = \lambda(\tau_j^+) + \nabla_x\varphi_j`, using the
        forward dense output for :math:`x(t)`: n unknowns, whatever p.  The
        quadrature :math:`q = \int_{t_0}^T f_u^\top\lambda\,dt` is computed segment
        by segment afterwards from the two dense outputs by adaptive Gauss–Kronrod
        quadrature (:func:`_adaptive_quadrature`; why: docs/continuous.md, "How the
        adjoint is computed").  :class:`CvodesModel` sweeps by CVODES instead.

        Parameters
        ----------
        u : array (p,), optional
        times : array, optional
            Times at which to report :math:`\lambda` (left limits
            :math:`\lambda(t^-)`, i.e. after the jump at a measurement time).

        Returns
        -------
        dict with ``gradient`` (p,), ``lambda0`` (:math:`\lambda(t_0)`),
        ``quadrature`` (:math:`q(t_0)`) and, with ``times``, ``lambda`` (a
        DataFrame).
        """
        u = self._u(u)
        sol, Xm = self._forward(u)
        jumps, gu = self.misfit.gradients(Xm, u)
        gu = gu + self.misfit.penalty_gradient(u)
        lam, q, lambda_at = self._adjoint_sweep(u, sol, jumps)
        self.counts["adjoint"] += 1
        out = dict(gradient=self.l_u.dense(u).T @ lam + q + gu, lambda0=lam, quadrature=q)
        if times is not None:
            times = np.asarray(times, dtype=float)
            out["lambda"] = pd.DataFrame(lambda_at(times), index=pd.Index(times, name="time"),
                                         columns=self.problem.states)
        return out

    def _adjoint_sweep(self, u, sol, jumps):
        """λ(t0), q and a function of the times giving λ(t⁻) there, (m, n), from the
        backward sweep with the ``jumps`` on the forward solution ``sol``."""
        n, p = self.n, self.p
        adj_x, adj_u, fx = self._adj_x, self._adj_u, self.f_x
        xs = sol.sol
        ul = u.tolist()
        sparse = self._jac_format(n)
        # f_x free of x (a linear ODE): the backward system needs no x(t); free of
        # x and t as well: it is λ' = -Aᵀλ with one matrix A = f_x(u)
        xt = (lambda t: xs(t).tolist()) if self._fx_has_x else (lambda t, z=[0.0] * n: z)
        if self._fx_const:
            mAT = -fx.dense(xt(self.t0), ul, self.t0).T
            mAT_jac = sp.csc_matrix(mAT) if sparse else mAT

            def rhs(t, y):
                return mAT @ y

            def jac(t, y):
                return mAT_jac
        else:
            def rhs(t, y):
                return -adj_x.dense(xt(t), ul, t, y.tolist())

            def jac(t, y):
                J = -fx.dense(xt(t), ul, t).T
                return sp.csc_matrix(J) if sparse else J

        q = np.zeros(p)
        lam = np.zeros(n)
        segments = []

        def sweep(t_hi, t_lo, lam):
            s = self._solve(rhs, jac, (t_hi, t_lo), lam,
                            atol=_segment_atol(self.atol, self.rtol, self.adjoint_atol, lam,
                                               (slice(0, n),)))
            if p:
                def integrand(t):
                    return adj_u.many(len(t), list(_values(sol, t)), ul, t, list(_values(s, t)))[0]
                inner = np.concatenate([self.switches, s.t, sol.t])
                edges = np.unique(np.concatenate([[t_lo, t_hi],
                                                  inner[(inner > t_lo) & (inner < t_hi)]]))
                return s, _adaptive_quadrature(integrand, edges, self.rtol, self.atol,
                                               self.adjoint_atol)
            return s, np.zeros(0)

        t_hi = self.T
        for j in range(len(self.tau) - 1, -2, -1):          # j = -1: down to t0, no jump
            t_lo = self.tau[j] if j >= 0 else self.t0
            if t_lo < t_hi:
                s, dq = sweep(t_hi, t_lo, lam)
                lam, q = s.y[:, -1].copy(), q + dq
                segments.append((t_lo, t_hi, s))
            if j >= 0:
                lam = lam + jumps[j]
            t_hi = t_lo

        def lambda_at(times):
            L = np.zeros((len(times), n))
            for i, tt in enumerate(times):
                if tt <= self.t0:
                    L[i] = lam
                    continue
                for lo, hi, s in segments:
                    if lo < tt <= hi:
                        L[i] = s.sol(tt)
                        break
            return L
        return lam, q, lambda_at

    def check(self, u=None):
        """Relative differences between the gradient methods (a diagnostic).

        Returns a dict ``{'adjoint_vs_sensitivity': ..., 'adjoint_vs_fd': ...}``
        of norm-wise relative differences.
        """
        u = self._u(u)
        ga, gs, gf = (self.gradient(u, m) for m in GRADIENT_METHODS)
        return dict(adjoint_vs_sensitivity=_rel(ga, gs), adjoint_vs_fd=_rel(ga, gf),
                    sensitivity_vs_fd=_rel(gs, gf))
