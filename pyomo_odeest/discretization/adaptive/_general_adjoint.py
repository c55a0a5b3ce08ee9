r"""All equations of model (55) [GM-grad, §2.4] for a frozen pattern and their
adjoint by one sparse transposed solve: an independent check of the recursion
(56)–(59)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ._pattern import AdaptiveAdjoint, AdaptiveRun

__all__ = ["GeneralAdjoint"]


class GeneralAdjoint:
    """Mixin of :class:`~pyomo_odeest.discretization.adaptive.AdaptiveModel`: the general-form adjoint."""

    def general_adjoint(self, run: AdaptiveRun, return_system=False):
        r"""All equations of (55) for the frozen pattern, one sparse transposed solve.

        Unknowns :math:`w`: :math:`x_0`; per step :math:`i` and trial
        :math:`j`: :math:`h_{i,j}, e_{i,j}` and the trial predictor/corrector
        :math:`\tilde y_{i,j}, \tilde x^c_{i,j}`; then :math:`h_i, e_i,
        y_{i+1}, x_{i+1}, t_{i+1}`.  Equations (one per unknown, same order):
        the stage equations with explicit coefficients
        :math:`\pi(\rho), K(\rho)`, :math:`e_{i,j} = N(\tilde x^c - \tilde y, x_i)`,
        the controller relations (or clips), the acceptance links and
        :math:`t_{i+1} = t_i + h_i`.  Derivatives are assembled by hand from
        :math:`f, f_x, f_u, f_t`, the coefficient derivatives and the
        controller derivatives, then
        :math:`(\partial G/\partial w)^\top\lambda = -\nabla_wF` is solved
        with SuperLU and :math:`\nabla J = \nabla_uF + (\partial G/\partial u)^\top\lambda`.
        """
        n, m, k = self.n, self.m, run.k
        u = run.u
        pat = run.pattern
        c = self.controller
        idx = {}
        N = 0

        def alloc(key, size):
            nonlocal N
            idx[key] = N
            N += size

        alloc(("x", 0), n)
        for i in range(k):
            for jj in range(pat.j[i]):
                alloc(("H", i, jj), 1)
                alloc(("eta", i, jj), 1)
                alloc(("yt", i, jj), n)
                alloc(("ct", i, jj), n)
            alloc(("h", i), 1)
            alloc(("e", i), 1)
            alloc(("y", i), n)
            alloc(("x", i + 1), n)
            alloc(("t", i + 1), 1)
        rows, cols, vals = [], [], []
        Gu = np.zeros((N, m))

        def put(eq, var, M):
            M = np.atleast_2d(np.asarray(M, float))
            r0, c0 = idx[eq], idx[var]
            rr, cc = np.meshgrid(np.arange(M.shape[0]), np.arange(M.shape[1]), indexing="ij")
            rows.append((r0 + rr).ravel())
            cols.append((c0 + cc).ravel())
            vals.append(M.ravel())

        def fparts(z, tau):
            fv, fx, fu, ft = self._f(z, u, tau)
            return (np.asarray(fv, float).reshape(-1), np.asarray(fx, float).reshape(n, n),
                    np.asarray(fu, float).reshape(n, m), np.asarray(ft, float).reshape(-1))

        I = np.eye(n)

        def stage(eq, i, hkey, hv, coefs, dcoefs, pts, Q):
            ti = run.t[i]
            put(eq, ("x", i), -I)
            dh, dti, dtm = np.zeros(n), np.zeros(n), np.zeros(n)
            du = np.zeros((n, m))
            if Q == 2:
                D = ti - run.t[i - 1]
                rho_h, rho_ti, rho_tm = 1.0 / D, -hv / D**2, hv / D**2
            for (zkey, z, tau, which), cj, dcj in zip(pts, coefs, dcoefs):
                fv, fx, fu, ft = fparts(z, tau)
                put(eq, zkey, -hv * cj * fx)
                du -= hv * cj * fu
                dh -= cj * fv
                if Q == 2:
                    dh -= hv * dcj * rho_h * fv
                    dti -= hv * dcj * rho_ti * fv
                    dtm -= hv * dcj * rho_tm * fv
                if which == "new":         # f at t_i + h: depends on h and t_i
                    dh -= hv * cj * ft
                if which == "m":
                    dtm -= hv * cj * ft
                else:
                    dti -= hv * cj * ft
            put(eq, hkey, dh[:, None])
            if i >= 1:
                put(eq, ("t", i), dti[:, None])
            if Q == 2 and i - 1 >= 1:
                put(eq, ("t", i - 1), dtm[:, None])
            Gu[idx[eq]:idx[eq] + n] += du

        def stages(i, hkey, hv, ykey, ckey, yval):
            Q = int(run.Q[i])
            pi, K, dpi, dK, _ = self._coef_values(Q, None, i, hv, run.t[i],
                                                   run.t[i - 1] if Q == 2 else run.t[i] - 1.0)
            past = [(("x", i), run.x[i], run.t[i], "i")]
            if Q == 2:
                past.append((("x", i - 1), run.x[i - 1], run.t[i - 1], "m"))
            stage(ykey, i, hkey, hv, pi, dpi, past, Q)
            new = [(ykey, yval, run.t[i] + hv, "new")]
            stage(ckey, i, hkey, hv, K, dK, new + past, Q)

        # x0 = l(u); every equation has coefficient 1 on its own unknown (the unit
        # diagonal of Gw, added at the end)
        Gu[0:n] -= np.asarray(self._l(u)[1], float).reshape(n, m)
        a2 = c.scale ** 2
        fl2 = (c.floor * c.eps) ** 2
        for i in range(k):
            ji = pat.j[i]
            for jj in range(ji):
                Hk, ek, ykey, ckey = ("H", i, jj), ("eta", i, jj), ("yt", i, jj), ("ct", i, jj)
                hv = run.H[i][jj]
                stages(i, Hk, hv, ykey, ckey, run.yt[i][jj])
                # e_ij = N(ct - yt, x_i)
                d = run.xc[i][jj] - run.yt[i][jj]
                xi = run.x[i]
                w = a2 + xi**2
                S = np.sum(d**2 / w) / n + fl2
                Nd = c.milne * d / (n * w * np.sqrt(S))
                Nx = -c.milne * d**2 * xi / (n * w**2 * np.sqrt(S))
                put(ek, ckey, -Nd[None, :])
                put(ek, ykey, Nd[None, :])
                put(ek, ("x", i), -Nx[None, :])
                # controller relation of the trial step
                kind = pat.kind(i, jj)
                if kind == "Q":
                    _, Qx, Qu = self.Qfun(run.x[0], u)
                    put(Hk, ("x", 0), -Qx[None, :])
                    Gu[idx[Hk]] -= Qu
                elif kind == "R":
                    Rv, dR = self.ctl("R", run.e[i - 1], pat.levels[i][0])
                    put(Hk, ("e", i - 1), [[-dR * run.h[i - 1]]])
                    put(Hk, ("h", i - 1), [[-Rv]])
                elif kind == "r":
                    rv, dr = self.ctl("r", run.eta[i][jj - 1], pat.levels[i][jj])
                    put(Hk, ("eta", i, jj - 1), [[-dr * run.H[i][jj - 1]]])
                    put(Hk, ("H", i, jj - 1), [[-rv]])
                else:   # clip: h_ij = tau - t_i
                    if i >= 1:
                        put(Hk, ("t", i), [[1.0]])
            # accepted step / error
            put(("h", i), ("H", i, ji - 1), [[-1.0]])
            put(("e", i), ("eta", i, ji - 1), [[-1.0]])
            stages(i, ("h", i), run.h[i], ("y", i), ("x", i + 1), run.y[i])
            put(("t", i + 1), ("h", i), [[-1.0]])
            if i >= 1:
                put(("t", i + 1), ("t", i), [[-1.0]])
        Gw = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(N, N)) + sp.eye(N, format="csr")
        _, Phix, Phiu = self._phi_parts(run)
        Fw = np.zeros(N)
        for i in range(k + 1):
            Fw[idx[("x", i)]:idx[("x", i)] + n] = Phix[i]
        # Gw is lower triangular in this ordering (each equation uses earlier unknowns and
        # its own): natural ordering without pivoting keeps the LU exact-triangular.
        lu = spla.splu(Gw.T.tocsc(), permc_spec="NATURAL", diag_pivot_thresh=0.0,
                       options=dict(SymmetricMode=True))
        lam = lu.solve(-Fw)
        grad = Phiu + Gu.T @ lam

        def get(key, size=1):
            v = lam[idx[key]:idx[key] + size]
            return v if size > 1 else float(v[0])

        adj = AdaptiveAdjoint(
            p=np.array([get(("x", i), n) for i in range(k + 1)]).reshape(k + 1, n),
            q=np.array([get(("y", i), n) for i in range(k)]).reshape(k, n),
            theta=np.array([0.0] + [get(("t", i)) for i in range(1, k + 1)]),
            alpha=[np.array([get(("H", i, jj)) for jj in range(pat.j[i])]) for i in range(k)],
            gamma=[np.array([get(("eta", i, jj)) for jj in range(pat.j[i])]) for i in range(k)],
            beta=np.array([get(("e", i)) for i in range(k)]),
            delta=np.array([get(("h", i)) for i in range(k)]),
            gradient=grad)
        if return_system:
            return adj, dict(Gw=Gw, Gu=Gu, Fw=Fw, index=idx, lam=lam)
        return adj
