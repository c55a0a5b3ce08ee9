r"""First-order derivatives of the reduced objective J_k(u) = F(w(u), u).

Discrete adjoint [GM-grad, eqs. (52), (54)] by block backward substitution,
the same adjoint by one sparse LU solve of the assembled transposed Jacobian,
and discrete sensitivities [GM-grad, eqs. (51), (53)] by block forward
substitution (Lemma 1 of [GM-grad]).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

__all__ = ["FirstOrder", "GRADIENT_METHODS", "central_differences"]

#: Gradient methods contributed by the layers above, ``name -> fn(model, traj)``.
#: :mod:`pyomo_odeest.analysis._recursions` registers ``'recursion'`` (the papers'
#: formulas as printed) when it is imported, which importing ``pyomo_odeest`` does;
#: this keeps the discretization layer free of imports from the analysis layer.
GRADIENT_METHODS = {}


def central_differences(fun, u, steps, idx=None, out=None):
    """Central differences of ``fun`` at ``u`` with the steps ``steps[k]`` along the
    components ``k`` of ``idx`` (default: all), each divided by the step as represented,
    ``(u + h) - (u - h)``: ``out[..., a]`` is the one along ``idx[a]`` (the gradient of a
    scalar ``fun``, the Jacobian columns of a vector one)."""
    u = np.asarray(u, dtype=float)
    idx = range(len(u)) if idx is None else idx
    out = np.zeros(len(idx)) if out is None and len(idx) == 0 else out
    for a, k in enumerate(idx):
        up, um = u.copy(), u.copy()
        up[k] += steps[k]
        um[k] -= steps[k]
        d = (fun(up) - fun(um)) / (up[k] - um[k])
        if out is None:
            out = np.empty(np.shape(d) + (len(idx),))
        out[..., a] = d
    return out


def _fd_steps(u, fd_step):
    """The discrete models' steps ``fd_step * max(1, |u_k|)``."""
    return fd_step * np.maximum(1.0, np.abs(np.asarray(u, dtype=float)))


class FirstOrder:
    """Mixin of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`: adjoint, sensitivities, gradients."""

    def adjoint(self, traj, Fw=None, pv=None):
        r"""Solve (∂G/∂w)ᵀ p = −∇_w F by block backward substitution.

        The stage-wise form of [GM-grad], eq. (52): for blocks in reverse order,
        ``D_bᵀ p_b = −∇_{w_b}F + p_{b'}`` contributions of later blocks that use
        ``w_b`` (as base point ``x_i`` or in an f/ḟ term).
        """
        W, u = traj.W, traj.u
        pv = self._point_values(W, u) if pv is None else pv
        if Fw is None:
            Fw, _ = self._dF(W, u)
        if self._compiled() is not None:
            return self.block_backward_solve(-Fw[:, :, None], u, pv)[0][:, :, 0]
        rhs = -Fw.copy()
        P = np.zeros_like(W)
        kinds = self._term_kinds(pv, "x")
        for b in range(self.nblocks - 1, -1, -1):
            if self.implicit[b]:
                D = np.eye(self.n)
                for by_eq, pts, cs, J, Jv in kinds:
                    for e in by_eq[b]:
                        if pts[e] == b:
                            D -= cs[e] * J.dense(Jv[b])[0]
                p = np.linalg.solve(D.T, rhs[b])
            else:
                p = rhs[b]
            P[b] = p
            if b == 0:
                break
            rhs[self.base[b]] += p
            for by_eq, pts, cs, J, Jv in kinds:
                for e in by_eq[b]:
                    if pts[e] != b:
                        rhs[pts[e]] += cs[e] * J.rmatvec_point(Jv[pts[e]], p)
        return P

    def block_backward_solve(self, R, u, pv):
        """Solve ``(∂G/∂w)ᵀ P = R`` at the parameters ``u`` for ``R`` of shape
        (nblocks, n, q) by the compiled block backward substitution
        (:func:`._sweeps.adjoint_sweep`).

        Returns ``P`` (nblocks, n, q) and ``(∂G/∂u)ᵀ P`` (m, q), the latter without
        forming ∂G/∂u: ``−l_uᵀ P_0 − Σ_p (f_u(w_p)ᵀ Λ_{f,p} + ḟ_u(w_p)ᵀ Λ_{d,p})``.
        """
        from ._sweeps import adjoint_sweep
        a = self.compiled_arrays()
        nb = self.nblocks
        P = np.array(R, dtype=float, order="C")
        PGu = np.zeros((self.m, P.shape[2]))
        none = np.zeros((nb, 0))
        C = np.ascontiguousarray
        adjoint_sweep(
            P, a["base"], a["implicit"], a["f_ptr"], a["f_pt"], a["f_c"], a["fx_rows"],
            a["fx_cols"], C(pv["fx"]), a["fu_rows"], a["fu_cols"], C(pv["fu"]),
            a["d_ptr"], a["d_pt"], a["d_c"], a["fdx_rows"], a["fdx_cols"],
            C(pv.get("fdx", none)), a["fdu_rows"], a["fdu_cols"], C(pv.get("fdu", none)),
            min(a["window"], nb), PGu)
        lu = self.lu.dense(self.lu.point(np.zeros(0), u, self.t[0])[None])[0]
        return P, PGu - lu.T @ P[0]

    def _sensitivities_compiled(self, M0, pv, Fw):
        """The block forward substitution of :meth:`sensitivities`, compiled."""
        from ._sweeps import sensitivity_sweep
        a = self.compiled_arrays()
        nb = self.nblocks
        stream = Fw is not None
        zeros = np.zeros((nb, 0))
        fdxv, fduv = pv.get("fdx"), pv.get("fdu")
        M, acc = sensitivity_sweep(
            np.ascontiguousarray(M0, dtype=float), a["base"], a["implicit"],
            a["f_ptr"], a["f_pt"], a["f_c"], a["fx_rows"], a["fx_cols"],
            np.ascontiguousarray(pv["fx"]), a["fu_rows"], a["fu_cols"],
            np.ascontiguousarray(pv["fu"]), a["d_ptr"], a["d_pt"], a["d_c"],
            a["fdx_rows"], a["fdx_cols"], zeros if fdxv is None else np.ascontiguousarray(fdxv),
            a["fdu_rows"], a["fdu_cols"], zeros if fduv is None else np.ascontiguousarray(fduv),
            np.ascontiguousarray(Fw, dtype=float) if stream else np.zeros((nb, self.n)),
            min(a["window"], nb) if stream else nb)
        return acc if stream else M

    def adjoint_transposed_solve(self, traj, Fw=None, pv=None):
        """Same adjoint by one sparse LU solve of the assembled (∂G/∂w)ᵀ."""
        W, u = traj.W, traj.u
        pv = self._point_values(W, u) if pv is None else pv
        if Fw is None:
            Fw, _ = self._dF(W, u)
        Gw = self.jacobian_w(W, u, pv)
        p = spla.splu(Gw.T.tocsc()).solve(-Fw.ravel())
        return p.reshape(W.shape)

    def _adjoint_gradient(self, traj, Fw, Fu, pv):
        """∇J from the discrete adjoint [GM-grad, eqs. (52), (54)]: one backward sweep,
        compiled or in numpy."""
        if self._compiled() is not None:
            return Fu + self.block_backward_solve(-Fw[:, :, None], traj.u, pv)[1][:, 0]
        return self._gradient_from_adjoint(self.adjoint(traj, Fw, pv), traj, Fu, pv)

    def _gradient_from_adjoint(self, P, traj, Fu, pv):
        """∇J = ∇_u F + pᵀ ∂G/∂u [GM-grad, eq. (13)/(54)], without forming ∂G/∂u."""
        u = traj.u
        g = Fu.copy()
        luv = self.lu.point(np.zeros(0), u, self.t[0])
        g -= self.lu.matvec_T(luv[None, :], P[0][None, :])[0]
        wf = self.f_c[:, None] * P[self.f_eq]                   # (nterms, n)
        g -= self.fu.sum_matvec_T(pv["fu"][self.f_pt], wf)
        if self.needs_fdot and len(self.d_eq):
            wd = self.d_c[:, None] * P[self.d_eq]
            g -= self.fdu.sum_matvec_T(pv["fdu"][self.d_pt], wd)
        return g

    def sensitivities(self, traj, pv=None, Fw=None):
        """M = ∂w/∂u by block forward substitution of (∂G/∂w) M = −∂G/∂u (eq. (51)).

        Returns M for every block, shape (nblocks, n, m).  With ``Fw`` given,
        returns instead the contraction ``Σ_b Fw_bᵀ M_b`` (the gradient term of
        eq. (53)) keeping only the blocks still referenced by later steps, so
        memory stays O(Q·n·m).
        """
        W, u = traj.W, traj.u
        pv = self._point_values(W, u) if pv is None else pv
        n, m = self.n, self.m
        stream = Fw is not None
        last_use = self._last_use()
        M = {} if stream else np.zeros((self.nblocks, n, m))
        acc = np.zeros(m)
        luv = self.lu.point(np.zeros(0), u, self.t[0])
        M0 = self.lu.dense(luv[None])[0]
        if self._compiled() is not None:
            return self._sensitivities_compiled(M0, pv, Fw)
        M[0] = M0
        if stream:
            acc += Fw[0] @ M0
        kinds = self._term_kinds(pv, "x", "u")
        for b in range(1, self.nblocks):
            rhs = M[self.base[b]].copy()
            D = np.eye(n) if self.implicit[b] else None
            for by_eq, pts, cs, Jx, Jxv, Ju, Juv in kinds:
                for e in by_eq[b]:
                    pt = pts[e]
                    rhs += cs[e] * Ju.dense(Juv[pt][None])[0]
                    if pt == b:
                        D -= cs[e] * Jx.dense(Jxv[b][None])[0]
                    else:
                        rhs += cs[e] * Jx.apply(Jxv[pt], M[pt])
            M[b] = rhs if D is None else np.linalg.solve(D, rhs)
            if stream:
                if np.any(Fw[b]):
                    acc += Fw[b] @ M[b]
                for old in [kb for kb in M if last_use[kb] <= b]:
                    del M[old]
        return acc if stream else M

    def _last_use(self):
        """Last block whose equation references each block (for streaming)."""
        last = np.arange(self.nblocks)
        for arr_eq, arr_pt in ((self.f_eq, self.f_pt), (self.d_eq, self.d_pt)):
            np.maximum.at(last, arr_pt, arr_eq)
        np.maximum.at(last, self.base[1:], np.arange(1, self.nblocks))
        return last

    def gradient(self, u, method="adjoint", traj=None, fd_step=1e-6):
        """∇J_k(u).

        method : ``'adjoint'`` (block backward sweep, eqs. (52), (54)),
        ``'transposed_solve'`` (sparse LU of (∂G/∂w)ᵀ, eq. (13)),
        ``'sensitivity'`` (eqs. (51), (53)), ``'recursion'`` (the papers'
        formulas as printed, :mod:`pyomo_odeest.analysis._recursions`) or ``'fd'``
        (central differences of J_k).
        """
        u = self._check_u(u)
        self.ngrad += 1
        if method == "fd":
            return central_differences(self.objective, u, _fd_steps(u, fd_step))
        traj = self.simulate(u) if traj is None else traj
        if method in GRADIENT_METHODS:
            return GRADIENT_METHODS[method](self, traj)
        pv = self._point_values(traj.W, u, values=False)
        Fw, Fu = self._dF(traj.W, u)
        if method == "adjoint":
            return self._adjoint_gradient(traj, Fw, Fu, pv)
        if method == "transposed_solve":
            P = self.adjoint_transposed_solve(traj, Fw, pv)
            return self._gradient_from_adjoint(P, traj, Fu, pv)
        if method == "sensitivity":
            return Fu + self.sensitivities(traj, pv, Fw=Fw)
        raise ValueError(f"unknown gradient method {method!r}; use 'adjoint', 'transposed_solve', "
                         "'sensitivity', 'recursion' or 'fd'")

    def functional_gradient(self, traj, dFdx, dFdu=None):
        """Gradient of a functional F(x_0, ..., x_k, u) of the grid states (Lemma 1).

        ``dFdx`` (k+1, n) is ∂F/∂x_i at the trajectory, ``dFdu`` (m,) the
        explicit part.  One adjoint sweep; e.g. the gradient of one component
        of the final state (multiple shooting, [AT] eq. (17)) uses
        ``dFdx[k] = e_r``.
        """
        Fw = np.zeros((self.nblocks, self.n))
        np.add.at(Fw, self.xblk, np.asarray(dFdx, dtype=float))
        pv = self._point_values(traj.W, traj.u, values=False)
        Fu = np.zeros(self.m) if dFdu is None else np.asarray(dFdu, dtype=float)
        return self._adjoint_gradient(traj, Fw, Fu, pv)

    def state_sensitivities(self, traj):
        """∂x_i/∂u on the grid, shape (k+1, n, m) (eq. (51))."""
        return self.sensitivities(traj)[self.xblk]

    def value_and_gradient(self, u, method="adjoint"):
        traj = self.simulate(u)
        return self.objective(u, traj), self.gradient(u, method, traj)
