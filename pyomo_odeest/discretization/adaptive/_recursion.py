r"""The corrected backward recursion [GM-grad, eqs. (56)–(58)], the gradient (59)
and the gradient methods of the adaptive model (see the package docstring for the
relations and the corrections to the print)."""
from __future__ import annotations

import numpy as np

from ..discrete._first_order import _fd_steps, central_differences
from ._pattern import AdaptiveAdjoint, AdaptivePattern, AdaptiveRun

__all__ = ["Recursion"]


class Recursion:
    """Mixin of :class:`~pyomo_odeest.discretization.adaptive.AdaptiveModel`: adjoint (56)–(59), gradients."""

    def adjoint(self, run: AdaptiveRun) -> AdaptiveAdjoint:
        r"""Multipliers by the corrected backward recursion (56)–(58) and gradient (59).

        See the module docstring for the relations and the list of
        corrections to the print.  Runs backwards over the steps; within a
        step: :math:`\beta_t`, :math:`\delta_t`, then trials
        :math:`s = j_t, \dots, 1` (:math:`\gamma_{t,s}`, :math:`\alpha_{t,s}`),
        then :math:`p_t` and :math:`\theta_t`.
        """
        k, n, m = run.k, self.n, self.m
        pat = run.pattern
        _, Phix, Phiu = self._phi_parts(run)
        p = np.zeros((k + 1, n))
        theta = np.zeros(k + 1)
        accp = -Phix
        acct = np.zeros(k + 1)
        alpha = [np.zeros(len(run.H[i])) for i in range(k)]
        gamma = [np.zeros(len(run.H[i])) for i in range(k)]
        beta = np.zeros(k)
        delta = np.zeros(k)
        q = np.zeros((k, n))
        grad = Phiu.copy()
        p[k] = accp[k]
        theta[k] = 0.0
        for i in range(k - 1, -1, -1):
            Q, F, Fxi, Fxm, Fu, Fh, Fti, Ftm = self._step_derivs(run, i)
            hi = run.h[i]
            if i + 1 <= k - 1 and pat.kind(i + 1, 0) == "R":
                a1 = alpha[i + 1][0]
                Rv, dRv = self.ctl("R", run.e[i], pat.levels[i + 1][0])
            else:
                a1, Rv, dRv = 0.0, 0.0, 0.0
            beta[i] = a1 * dRv * hi                                  # corrected (57)/(58)
            delta[i] = p[i + 1] @ (F + hi * Fh) + a1 * Rv + theta[i + 1]
            ji = pat.j[i]
            dE = [self._trial_derivs(run, i, jj) for jj in range(ji)]
            gamma[i][ji - 1] = beta[i]
            alpha[i][ji - 1] = gamma[i][ji - 1] * dE[ji - 1][4][0] + delta[i]
            for jj in range(ji - 2, -1, -1):
                if pat.kind(i, jj + 1) == "r":
                    rv, drv = self.ctl("r", run.eta[i][jj], pat.levels[i][jj + 1])
                    gamma[i][jj] = alpha[i][jj + 1] * drv * run.H[i][jj]
                    alpha[i][jj] = alpha[i][jj + 1] * rv + gamma[i][jj] * dE[jj][4][0]
                else:       # trial jj+1 clipped: it does not depend on trial jj
                    gamma[i][jj] = 0.0
                    alpha[i][jj] = 0.0
            # contributions of step i to p_i, p_{i-1}, θ_i, θ_{i-1} and to the gradient
            accp[i] += hi * Fxi.T @ p[i + 1]
            acct[i] += hi * Fti @ p[i + 1]
            grad -= hi * Fu.T @ p[i + 1]
            for jj in range(ji):
                _, Exi, Exm, Eu, Eh, Eti, Etm = dE[jj]
                g = gamma[i][jj]
                accp[i] += g * Exi
                acct[i] += g * Eti[0]
                grad -= g * Eu
                if Q == 2:
                    accp[i - 1] += g * Exm
                    acct[i - 1] += g * Etm[0]
                if pat.kind(i, jj) == "clip":
                    acct[i] -= alpha[i][jj]
            if Q == 2:
                accp[i - 1] += hi * Fxm.T @ p[i + 1]
                acct[i - 1] += hi * Ftm @ p[i + 1]
            if i == 0 and pat.kind(0, 0) == "Q":
                _, Qx, Qu = self.Qfun(run.x[0], run.u)
                accp[0] += alpha[0][0] * Qx
                grad -= alpha[0][0] * Qu
            p[i] = p[i + 1] + accp[i]
            theta[i] = theta[i + 1] + acct[i] if i >= 1 else 0.0
            # predictor multiplier (y eliminated here): q_{i+1} = h K0 f_x(y)ᵀ p_{i+1}
            K0 = self._coef_values(Q, run, i)[1][0]
            fx = np.asarray(self._f(run.y[i], run.u, run.t[i] + hi)[1], float)
            q[i] = hi * K0 * fx.T @ p[i + 1]
        lu = np.asarray(self._l(run.u)[1], float).reshape(n, m)
        grad -= lu.T @ p[0]
        return AdaptiveAdjoint(p=p, q=q, theta=theta, alpha=alpha, gamma=gamma, beta=beta,
                               delta=delta, gradient=grad)

    def step_targets(self, pattern: AdaptivePattern) -> np.ndarray:
        r"""Landing target :math:`\tau` (next measurement time or T) of every step."""
        out = np.empty(pattern.k)
        tgt = 0
        for i in range(pattern.k):
            out[i] = self.targets[tgt]
            if pattern.clip[i] == pattern.j[i]:
                tgt += 1
        return out

    def gradient_from_multipliers(self, run: AdaptiveRun, p, alpha, gamma) -> np.ndarray:
        r"""Eq. (59) for given multipliers (e.g. Ipopt's duals of the block):
        :math:`\sum D_u\Phi - \sum h_i D_uF_i^\top p_{i+1} - D_ul^\top p_0
        - \alpha_{0,1}D_uQ - \sum\gamma_{i,j}D_uE_{i,j}`."""
        _, _, grad = self._phi_parts(run)
        grad = grad.copy()
        for i in range(run.k):
            Fu = self._step_derivs(run, i)[4]
            grad -= run.h[i] * Fu.T @ p[i + 1]
            for jj in range(run.pattern.j[i]):
                grad -= gamma[i][jj] * self._trial_derivs(run, i, jj)[3]
        if run.pattern.kind(0, 0) == "Q":
            grad -= alpha[0][0] * self.Qfun(run.x[0], run.u)[2]
        lu = np.asarray(self._l(run.u)[1], float).reshape(self.n, self.m)
        return grad - lu.T @ p[0]

    def fixed_grid_model(self, run: AdaptiveRun):
        """The fixed-step :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` on the accepted grid."""
        from ..discrete import DiscreteModel
        return DiscreteModel(self.problem, "adams_pc", self.qmax, grid=run.grid(self.problem.meas_times))

    def gradient(self, u=None, method="adjoint", run=None, fd_step=1e-6, pattern=None):
        r""":math:`\nabla J_{h,k}(u)` for the pattern of the run at ``u``.

        method : ``'adjoint'`` (corrected (56)–(59)), ``'general'`` (sparse
        transposed solve), ``'fd'`` (central differences of the frozen-pattern
        :math:`J_{h,k}`), ``'frozen_grid'`` (gradient of the fixed-step
        :math:`J_k` on the accepted grid, i.e. the step-size sensitivities
        dropped).
        """
        u = self._check_u(u)
        if run is None:
            run = self.run(u, pattern)
        if method == "adjoint":
            return self.adjoint(run).gradient
        if method == "general":
            return self.general_adjoint(run).gradient
        if method == "frozen_grid":
            return self.fixed_grid_model(run).gradient(u)
        if method == "fd":
            return central_differences(lambda v: self.objective(v, run.pattern), u,
                                       _fd_steps(u, fd_step))
        raise ValueError(f"unknown gradient method {method!r}; use 'adjoint', 'general', 'fd' "
                         "or 'frozen_grid'")

    def pattern_stable(self, u, du_list) -> bool:
        """True if free adaptive integration at every ``u + du`` reproduces the pattern at ``u``."""
        base = self.run(u).pattern
        return all(self.run(np.asarray(u) + np.asarray(du)).pattern == base for du in du_list)
