r"""The discrete problem of the block in numpy: simulation, gradients, Hessians.

The unknowns of the Pyomo block are ordered in *blocks* of n values:
``w = (x_0, [stages of step 0 ..., x_1], [stages of step 1 ..., x_2], ...)``.
Every block has one residual [GM-grad, eq. (2) and the stage equations of
:mod:`pyomo_odeest.discretization.schemes`]:

.. math::

    G_0 = x_0 - l(u), \qquad
    G_b = v_b - x_i - \sum_{\text{f-terms}} c\, f(w_{P}, u, t_P)
                    - \sum_{\text{ḟ-terms}} d\, \dot f(w_P, u, t_P),

with ``c = h_i × coefficient`` and ``d = h_i² × coefficient``.  ``∂G/∂w`` is
block lower triangular: diagonal blocks are ``I`` for explicit stages and
``I - c f_x - d ḟ_x`` (own point) for implicit ones.  This module implements
Lemma 1 of [GM-grad] on exactly these equations:

* forward simulation = block forward substitution (Newton on implicit blocks);
* discrete adjoint = block backward substitution of
  ``(∂G/∂w)ᵀ p = -∇_w F`` (the stage-wise form of eq. (52)), gradient (13)/(54);
* discrete sensitivity = block forward substitution of
  ``(∂G/∂w) M = -∂G/∂u`` (eq. (51)), gradient (53);
* the same adjoint by one sparse LU solve of the assembled transposed
  Jacobian (``transposed_solve``), an independent check;
* Hessians: second-order adjoint [GM-grad, §2.5], adjoint + finite
  differences [MHV, eq. (21)], Gauss–Newton.

The objective is ``F(w, u) = Σ_j φ_j``, ``φ_j = r_jᵀ A_j r_j`` with
``r_j = g(x_{J(j)}, u, τ_j) − z̄_j`` and ``A_j = diag(w_j)`` (least squares) or
``½ Σ_oo⁻¹`` (Gaussian NLL), the same J_k as ``b.misfit`` of the block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .grid import resolve_grid
from ..problem.misfit import MeasurementMisfit
from ..problem.declaration import EstimationProblem
from .schemes import get_scheme
from ..symbolic.vectorfn import VectorFn, second_derivatives, sparse_jacobian

__all__ = ["DiscreteModel", "Trajectory", "SimulationError"]


class SimulationError(RuntimeError):
    """A step of the discrete simulation failed (non-finite values, Newton divergence)."""

    def __init__(self, message, step=None, time=None):
        super().__init__(message)
        self.step = step
        self.time = time


@dataclass
class Trajectory:
    """Solution w of G(w, u) = 0 at parameters u."""

    u: np.ndarray
    W: np.ndarray            # (nblocks, n)
    X: np.ndarray            # (k+1, n) view of the x blocks
    newton_iterations: int = 0


class DiscreteModel:
    """Numeric twin of :func:`~pyomo_odeest.pyomo.block.build_block` (same scheme, same grid).

    Parameters are those of ``build_block``.  Counters ``nsim``, ``ngrad``,
    ``nhess`` count simulations, gradients and Hessians.
    """

    def __init__(self, problem: EstimationProblem, scheme="adams_pc", qmax=None, grid=None,
                 max_step=None, steps_per_interval=None):
        self.problem = problem
        self.scheme = get_scheme(scheme, qmax)
        self.grid = resolve_grid(problem, grid, max_step, steps_per_interval)
        t = np.asarray(self.grid.t, dtype=float)
        self.t = t
        self.k = k = len(t) - 1
        self.n = n = len(problem.states)
        self.m = len(problem.parameters)
        self.formulas = self.scheme.formulas(t, self.grid.restarts)
        self.nsim = self.ngrad = self.nhess = 0
        self._layout()
        self._symbolic()
        self._measurements()

    # ------------------------------------------------------------------
    # layout: blocks and terms
    # ------------------------------------------------------------------
    def _layout(self):
        t = self.t
        xblk = np.zeros(self.k + 1, dtype=np.int64)
        blk_time, blk_step, blk_stage = [t[0]], [-1], ["x0"]
        base, fterms, dterms, implicit = [-1], [], [], [False]
        stage_blk = {}
        nb = 1
        for sf in self.formulas:
            i = sf.i
            h = t[i + 1] - t[i]
            local = {}
            blocks_of_step = []
            for st in sf.stages:
                b = nb
                nb += 1
                local[st.name] = b
                blocks_of_step.append(b)
            for st in sf.stages:
                b = local[st.name]
                blk_time.append(t[i + 1])
                blk_step.append(i)
                blk_stage.append(st.name)
                base.append(xblk[i])
                impl = False
                for (terms, out, scale) in ((st.f_terms, fterms, h), (st.fdot_terms, dterms, h * h)):
                    for pref, c in terms:
                        if pref.kind == "past":
                            pb, pt = xblk[i - pref.lag], t[i - pref.lag]
                        elif pref.kind == "new":
                            pb, pt = local["x"], t[i + 1]
                        else:
                            pb, pt = local[pref.stage], t[i + 1]
                        if pb == b:
                            impl = True
                        out.append((b, pb, pt, scale * c))
                implicit.append(impl)
                stage_blk[(st.name, i)] = b
            xblk[i + 1] = local["x"]
        self.nblocks = nb
        self.xblk = xblk
        self.blk_time = np.array(blk_time)
        self.blk_step = np.array(blk_step)
        self.blk_stage = blk_stage
        self.base = np.array(base)
        self.implicit = np.array(implicit)
        self.stage_blk = stage_blk
        ft = np.array(fterms, dtype=float).reshape(-1, 4)
        dt = np.array(dterms, dtype=float).reshape(-1, 4)
        self.f_eq, self.f_pt, self.f_t, self.f_c = ft[:, 0].astype(int), ft[:, 1].astype(int), ft[:, 2], ft[:, 3]
        self.d_eq, self.d_pt, self.d_t, self.d_c = dt[:, 0].astype(int), dt[:, 1].astype(int), dt[:, 2], dt[:, 3]
        # per-block term lists (for the sequential sweeps)
        self.f_by_eq = [[] for _ in range(nb)]
        self.d_by_eq = [[] for _ in range(nb)]
        for e, b in enumerate(self.f_eq):
            self.f_by_eq[b].append(e)
        for e, b in enumerate(self.d_eq):
            self.d_by_eq[b].append(e)
        self.f_points = np.unique(self.f_pt)          # blocks where f is evaluated
        self.d_points = np.unique(self.d_pt)

    def _symbolic(self):
        P = self.problem
        xs, us, ts = P.x_sym, P.u_sym, P.t_sym
        self.f = VectorFn(P.f_sym, xs, us, ts)
        self.fx = sparse_jacobian(P.f_sym, xs, xs, us, ts)
        self.fu = sparse_jacobian(P.f_sym, us, xs, us, ts)
        self.needs_fdot = self.scheme.needs_fdot
        if self.needs_fdot:
            fd = P.fdot_sym()
            self.fd = VectorFn(fd, xs, us, ts)
            self.fdx = sparse_jacobian(fd, xs, xs, us, ts)
            self.fdu = sparse_jacobian(fd, us, xs, us, ts)
            self._fd_sym = fd
        self.l = VectorFn(P.l_sym, (), us, ts)
        self.lu = sparse_jacobian(P.l_sym, us, (), us, ts)
        #: the misfit Σ φ_j and penalty R(u), shared with the continuous backend
        self.misfit = MeasurementMisfit(P)
        self.g, self.gx, self.gu = self.misfit.g, self.misfit.gx, self.misfit.gu
        self._second = None

    def _second_order(self):
        if self._second is None:
            P = self.problem
            xs, us, ts = P.x_sym, P.u_sym, P.t_sym
            d = {"f": second_derivatives(P.f_sym, xs, us, ts)}
            if self.needs_fdot:
                d["fd"] = second_derivatives(self._fd_sym, xs, us, ts)
            d["l"] = second_derivatives(P.l_sym, (), us, ts)
            self._second = d
        return self._second

    def _measurements(self):
        P = self.problem
        J = np.asarray(self.grid.J)
        self.meas_blk = self.xblk[J]
        self.meas_t = np.asarray(P.meas_times, dtype=float)
        mf = self.misfit
        self.zbar, self.A, self.A_diag, self.const = mf.zbar, mf.A, mf.A_diag, mf.const
        self._has_penalty = mf.has_penalty
        self._R, self._dR, self._d2R = mf._R, mf._dR, mf._d2R

    # ------------------------------------------------------------------
    # evaluation helpers
    # ------------------------------------------------------------------
    def _Ar(self, r):
        """A_j r_j for all measurements (r: (s, no))."""
        return self.misfit.Ar(r)

    def _check_u(self, u):
        u = np.asarray(u, dtype=float).reshape(-1)
        if u.shape != (self.m,):
            raise ValueError(f"u must have {self.m} entries (parameters {self.problem.parameter_names})")
        return u

    # ------------------------------------------------------------------
    # forward simulation (block forward substitution)
    # ------------------------------------------------------------------
    def simulate(self, u, newton_tol=1e-13, max_newton=30) -> Trajectory:
        """Solve G(w, u) = 0 block by block; raise :class:`SimulationError` on failure."""
        u = self._check_u(u)
        self.nsim += 1
        n = self.n
        W = np.full((self.nblocks, n), np.nan)
        W[0] = self.l.point(np.zeros(0), u, self.t[0])
        if not np.all(np.isfinite(W[0])):
            raise SimulationError(f"initial state l(u) is not finite: {W[0]}", 0, self.t[0])
        Fv = {}
        Dv = {}
        f, fd = self.f, (self.fd if self.needs_fdot else None)
        newton_total = 0
        ul = u.tolist()      # the lambdified code runs 2-3x faster on Python floats

        def fval(b):
            v = Fv.get(b)
            if v is None:
                v = f.point(W[b].tolist(), ul, float(self.blk_time[b]))
                Fv[b] = v
            return v

        def dval(b):
            v = Dv.get(b)
            if v is None:
                v = fd.point(W[b].tolist(), ul, float(self.blk_time[b]))
                Dv[b] = v
            return v

        with np.errstate(all="ignore"):
            for b in range(1, self.nblocks):
                fe, de = self.f_by_eq[b], self.d_by_eq[b]
                rhs = W[self.base[b]].copy()
                own_f, own_d = [], []
                for e in fe:
                    if self.f_pt[e] == b:
                        own_f.append(self.f_c[e])
                    else:
                        rhs += self.f_c[e] * fval(self.f_pt[e])
                for e in de:
                    if self.d_pt[e] == b:
                        own_d.append(self.d_c[e])
                    else:
                        rhs += self.d_c[e] * dval(self.d_pt[e])
                if not self.implicit[b]:
                    W[b] = rhs
                else:
                    W[b], it = self._newton(b, rhs, sum(own_f), sum(own_d), u, newton_tol,
                                            max_newton)
                    newton_total += it
                if not np.all(np.isfinite(W[b])):
                    i = self.blk_step[b]
                    raise SimulationError(
                        f"non-finite state in step {i} (stage {self.blk_stage[b]}, "
                        f"t = {self.blk_time[b]:.6g}) at u = {u}", i, self.blk_time[b])
        return Trajectory(u=u, W=W, X=W[self.xblk], newton_iterations=newton_total)

    def _newton(self, b, rhs, c, d, u, tol, max_it):
        """Solve v = rhs + c f(v) + d ḟ(v) by Newton's method."""
        tb = self.blk_time[b]
        v = self._newton_start(b, rhs)
        n = self.n
        for it in range(1, max_it + 1):
            r = v - rhs - c * self.f.point(v, u, tb)
            Jm = np.eye(n) - c * self.fx.dense(self.fx.point(v, u, tb))[0]
            if d:
                r -= d * self.fd.point(v, u, tb)
                Jm -= d * self.fdx.dense(self.fdx.point(v, u, tb))[0]
            if not np.all(np.isfinite(r)) or not np.all(np.isfinite(Jm)):
                break
            try:
                dv = np.linalg.solve(Jm, -r)
            except np.linalg.LinAlgError:
                break
            v = v + dv
            if np.max(np.abs(dv)) <= tol * (1 + np.max(np.abs(v))):
                return v, it
        i = self.blk_step[b]
        raise SimulationError(f"Newton did not converge in step {i} (stage {self.blk_stage[b]}, "
                              f"t = {tb:.6g}) at u = {u}", i, tb)

    def _newton_start(self, b, rhs):
        return rhs.copy()

    # ------------------------------------------------------------------
    # residual and Jacobians on the whole vector (for checks and transposed solve)
    # ------------------------------------------------------------------
    def _point_values(self, W, u, values=True):
        """f_x, f_u (ḟ_x, ḟ_u) and, with ``values``, f (ḟ) at every block."""
        tb = self.blk_time
        out = {"fx": self.fx.values(W, u, tb), "fu": self.fu.values(W, u, tb)}
        if values:
            out["f"] = self.f(W, u, tb)
        if self.needs_fdot:
            out.update(fdx=self.fdx.values(W, u, tb), fdu=self.fdu.values(W, u, tb))
            if values:
                out["fd"] = self.fd(W, u, tb)
        return out

    def residual(self, W, u):
        """G(w, u), shape (nblocks, n)."""
        u = self._check_u(u)
        pv = self._point_values(W, u)
        R = W - W[self.base]
        R[0] = W[0] - self.l.point(np.zeros(0), u, self.t[0])
        np.add.at(R, self.f_eq, -self.f_c[:, None] * pv["f"][self.f_pt])
        if self.needs_fdot:
            np.add.at(R, self.d_eq, -self.d_c[:, None] * pv["fd"][self.d_pt])
        return R

    def jacobian_w(self, W, u, pv=None):
        """Sparse ∂G/∂w (N×N, N = nblocks·n)."""
        n = self.n
        pv = self._point_values(W, u) if pv is None else pv
        rows, cols, vals = [np.arange(self.nblocks * n)], [np.arange(self.nblocks * n)], [np.ones(self.nblocks * n)]
        bb = np.arange(1, self.nblocks)
        rows.append((bb[:, None] * n + np.arange(n)).ravel())
        cols.append((self.base[bb][:, None] * n + np.arange(n)).ravel())
        vals.append(-np.ones(len(bb) * n))
        for eq, pt, c, key, J in ((self.f_eq, self.f_pt, self.f_c, "fx", self.fx),
                                  (self.d_eq, self.d_pt, self.d_c, "fdx", getattr(self, "fdx", None))):
            if len(eq) == 0 or J is None:
                continue
            v = pv[key][pt]                                   # (nterms, nnz)
            rows.append((eq[:, None] * n + J.rows[None, :]).ravel())
            cols.append((pt[:, None] * n + J.cols[None, :]).ravel())
            vals.append((-c[:, None] * v).ravel())
        N = self.nblocks * n
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(N, N))

    def jacobian_u(self, W, u, pv=None):
        """Dense ∂G/∂u, shape (nblocks, n, m)."""
        pv = self._point_values(W, u) if pv is None else pv
        Gu = np.zeros((self.nblocks, self.n, self.m))
        Gu[0] = -self.lu.dense(self.lu.point(np.zeros(0), u, self.t[0]))[0]
        fu = self.fu.dense(pv["fu"][self.f_pt]) * self.f_c[:, None, None]
        np.add.at(Gu, self.f_eq, -fu)
        if self.needs_fdot:
            du = self.fdu.dense(pv["fdu"][self.d_pt]) * self.d_c[:, None, None]
            np.add.at(Gu, self.d_eq, -du)
        return Gu

    # ------------------------------------------------------------------
    # objective
    # ------------------------------------------------------------------
    def _obs(self, W, u):
        Xm = W[self.meas_blk]
        return self.g(Xm, u, self.meas_t) - self.zbar, Xm

    def objective(self, u, traj=None):
        """J_k(u) = Σ_j φ_j (same value as the block's objective)."""
        traj = self.simulate(u) if traj is None else traj
        r, _ = self._obs(traj.W, traj.u)
        pen = float(self._R(traj.u)) if self._has_penalty else 0.0
        return float(np.sum(r * self._Ar(r))) + self.const + pen

    def _dF(self, W, u):
        """∇_w F (nblocks, n) and ∇_u F (m,)."""
        r, Xm = self._obs(W, u)
        Ar2 = 2 * self._Ar(r)
        gxv = self.gx.values(Xm, u, self.meas_t)
        guv = self.gu.values(Xm, u, self.meas_t)
        Fw = np.zeros((self.nblocks, self.n))
        np.add.at(Fw, self.meas_blk, self.gx.matvec_T(gxv, Ar2))
        Fu = self.gu.matvec_T(guv, Ar2).sum(axis=0)
        if self._has_penalty:
            Fu = Fu + np.asarray(self._dR(u), dtype=float)
        return Fw, Fu

    # ------------------------------------------------------------------
    # gradients
    # ------------------------------------------------------------------
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
        n = self.n
        rhs = -Fw.copy()
        P = np.zeros_like(W)
        fx, fxv = self.fx, pv["fx"]
        fdx = getattr(self, "fdx", None)
        fdxv = pv.get("fdx")
        for b in range(self.nblocks - 1, -1, -1):
            if self.implicit[b]:
                D = np.eye(n)
                for e in self.f_by_eq[b]:
                    if self.f_pt[e] == b:
                        D -= self.f_c[e] * fx.dense(fxv[b])[0]
                for e in self.d_by_eq[b]:
                    if self.d_pt[e] == b:
                        D -= self.d_c[e] * fdx.dense(fdxv[b])[0]
                p = np.linalg.solve(D.T, rhs[b])
            else:
                p = rhs[b]
            P[b] = p
            if b == 0:
                break
            rhs[self.base[b]] += p
            for e in self.f_by_eq[b]:
                pt = self.f_pt[e]
                if pt == b:
                    continue
                rhs[pt] += self.f_c[e] * fx.rmatvec_point(fxv[pt], p)
            for e in self.d_by_eq[b]:
                pt = self.d_pt[e]
                if pt == b:
                    continue
                rhs[pt] += self.d_c[e] * fdx.rmatvec_point(fdxv[pt], p)
        return P

    def adjoint_transposed_solve(self, traj, Fw=None, pv=None):
        """Same adjoint by one sparse LU solve of the assembled (∂G/∂w)ᵀ."""
        W, u = traj.W, traj.u
        pv = self._point_values(W, u) if pv is None else pv
        if Fw is None:
            Fw, _ = self._dF(W, u)
        Gw = self.jacobian_w(W, u, pv)
        p = spla.splu(Gw.T.tocsc()).solve(-Fw.ravel())
        return p.reshape(W.shape)

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
        fx, fxv = self.fx, pv["fx"]
        fdx, fdxv = getattr(self, "fdx", None), pv.get("fdx")
        stream = Fw is not None
        last_use = self._last_use()
        M = {} if stream else np.zeros((self.nblocks, n, m))
        acc = np.zeros(m)
        luv = self.lu.point(np.zeros(0), u, self.t[0])
        M0 = self.lu.dense(luv[None])[0]
        M[0] = M0
        if stream:
            acc += Fw[0] @ M0
        fuv = pv["fu"]
        fduv = pv.get("fdu")
        for b in range(1, self.nblocks):
            rhs = M[self.base[b]].copy()
            D = np.eye(n) if self.implicit[b] else None
            for e in self.f_by_eq[b]:
                pt = self.f_pt[e]
                rhs += self.f_c[e] * self.fu.dense(fuv[pt][None])[0]
                if pt == b:
                    D -= self.f_c[e] * fx.dense(fxv[b][None])[0]
                else:
                    rhs += self.f_c[e] * fx.apply(fxv[pt], M[pt])
            for e in self.d_by_eq[b]:
                pt = self.d_pt[e]
                rhs += self.d_c[e] * self.fdu.dense(fduv[pt][None])[0]
                if pt == b:
                    D -= self.d_c[e] * fdx.dense(fdxv[b][None])[0]
                else:
                    rhs += self.d_c[e] * fdx.apply(fdxv[pt], M[pt])
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
        formulas as printed, :mod:`pyomo_odeest.analysis.recursions`) or ``'fd'``
        (central differences of J_k).
        """
        u = self._check_u(u)
        self.ngrad += 1
        if method == "fd":
            g = np.zeros(self.m)
            for a in range(self.m):
                e = np.zeros(self.m)
                hstep = fd_step * max(1.0, abs(u[a]))
                e[a] = hstep
                g[a] = (self.objective(u + e) - self.objective(u - e)) / (2 * hstep)
            return g
        traj = self.simulate(u) if traj is None else traj
        if method == "recursion":
            from ..analysis.recursions import paper_gradient
            return paper_gradient(self, traj)
        pv = self._point_values(traj.W, u, values=False)
        Fw, Fu = self._dF(traj.W, u)
        if method == "adjoint":
            P = self.adjoint(traj, Fw, pv)
            return self._gradient_from_adjoint(P, traj, Fu, pv)
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
        P = self.adjoint(traj, Fw, pv)
        Fu = np.zeros(self.m) if dFdu is None else np.asarray(dFdu, dtype=float)
        return self._gradient_from_adjoint(P, traj, Fu, pv)

    def state_sensitivities(self, traj):
        """∂x_i/∂u on the grid, shape (k+1, n, m) (eq. (51))."""
        return self.sensitivities(traj)[self.xblk]

    def value_and_gradient(self, u, method="adjoint"):
        traj = self.simulate(u)
        return self.objective(u, traj), self.gradient(u, method, traj)

    # ------------------------------------------------------------------
    # Hessians
    # ------------------------------------------------------------------
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
            H = np.zeros((self.m, self.m))
            for a in range(self.m):
                e = np.zeros(self.m)
                hstep = fd_step * max(1.0, abs(u[a]))
                e[a] = hstep
                H[:, a] = (self.gradient(u + e, gradient_method)
                           - self.gradient(u - e, gradient_method)) / (2 * hstep)
            return 0.5 * (H + H.T)
        traj = self.simulate(u)
        W = traj.W
        pv = self._point_values(W, u)
        M = self.sensitivities(traj, pv)
        r, Xm = self._obs(W, u)
        gxv = self.gx.values(Xm, u, self.meas_t)
        guv = self.gu.values(Xm, u, self.meas_t)
        Sm = self.gx.matmat(gxv, M[self.meas_blk]) + self.gu.dense(guv)      # (s, no, m)
        if method == "gauss_newton":
            if self.A is None:
                AS = self.A_diag[:, :, None] * Sm
            else:
                AS = np.einsum("jab,jbm->jam", self.A, Sm)
            H = 2 * np.einsum("jam,jan->mn", Sm, AS)
            if self._has_penalty:
                H += np.asarray(self._d2R(u), dtype=float).reshape(self.m, self.m)
            return H
        if method != "soa":
            raise ValueError(f"unknown Hessian method {method!r}; use 'soa', 'adjoint_fd' or 'gauss_newton'")
        Fw, Fu = self._dF(W, u)
        P = self.adjoint(traj, Fw, pv)
        sec = self._second_order()
        n, m, nb = self.n, self.m, self.nblocks
        # second derivatives of L = F + pᵀG, as Lww·M + Lwu  (nb, n, m), Luw·M + Luu (m, m)
        LwwM_Lwu = np.zeros((nb, n, m))
        Lu_tot = np.zeros((m, m))
        tb = self.blk_time
        # objective part: φ_j = rᵀ A r → ∇²φ = 2 (r_x)ᵀ A r_x + Σ_o 2(Ar)_o ∇²g_o
        Ar2 = 2 * self._Ar(r)
        _, gxx, gxu, guu = self.misfit.second_order()
        gxxv = gxx.values(Xm, u, self.meas_t, Ar2)
        gxuv = gxu.values(Xm, u, self.meas_t, Ar2)
        guuv = guu.values(Xm, u, self.meas_t, Ar2)
        if self.A is None:
            ASm = self.A_diag[:, :, None] * Sm
        else:
            ASm = np.einsum("jab,jbm->jam", self.A, Sm)
        Mm = M[self.meas_blk]
        # ∂/∂w (∇_wφ) applied to direction (M, I): g_xᵀ 2A S + (Σ Ar2 g_xx) M + Σ Ar2 g_xu
        term_w = 2 * self.gx.matmat_T(gxv, ASm) + gxx.matmat(gxxv, Mm) + gxu.dense(gxuv)
        np.add.at(LwwM_Lwu, self.meas_blk, term_w)
        Lu_tot += np.einsum("jam,jan->mn", self.gu.dense(guv), 2 * ASm).T  # g_uᵀ 2A S
        Lu_tot += np.einsum("jxm,jxn->mn", gxu.dense(gxuv), Mm) + guu.dense(guuv).sum(axis=0)
        if self._has_penalty:
            Lu_tot += np.asarray(self._d2R(u), dtype=float).reshape(m, m)
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
            contrib = hxx.matmat(hxxv, M[pt]) + hxu.dense(hxuv)      # (nterms, n, m)
            np.add.at(LwwM_Lwu, pt, contrib)
            Lu_tot += np.einsum("txm,txn->mn", hxu.dense(hxuv), M[pt]) + huu.dense(huuv).sum(axis=0)
        # initial condition G_0 = x_0 − l(u): −(p_0ᵀ l)_uu
        _, _, _, luu = sec["l"]
        luuv = luu.values(np.zeros((1, 0)), u, np.array([self.t[0]]), -P[0][None, :])
        Lu_tot += luu.dense(luuv)[0]
        # second-order adjoint 𝓜: (∂G/∂w)ᵀ 𝓜 = −(L_ww M + L_wu), one column per parameter
        Gw = self.jacobian_w(W, u, pv)
        lu = spla.splu(Gw.T.tocsc())
        Madj = lu.solve(-LwwM_Lwu.reshape(nb * n, m)).reshape(nb, n, m)
        Gu = self.jacobian_u(W, u, pv)
        H = Lu_tot + np.einsum("bnm,bnq->mq", Gu, Madj)
        return 0.5 * (H + H.T)
