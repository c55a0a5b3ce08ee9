r"""The discrete equations of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`.

Layout of the unknowns in blocks, the residual ``G(w, u)`` [GM-grad, eq. (2)]
with its Jacobians ``∂G/∂w`` and ``∂G/∂u``, and the objective
``F(w, u) = Σ_j φ_j`` (+ ``R(u)``) with its gradient.  Everything the
simulation and the derivative mixins share lives here, once.
"""
from __future__ import annotations

import gc

import numpy as np
import scipy.sparse as sp

from .._grid import resolve_grid
from ...problem._misfit import MeasurementMisfit
from ...problem._declaration import EstimationProblem
from ..schemes import get_scheme
from ...symbolic._vectorfn import VectorFn, second_derivatives, sparse_jacobian
from ._compiled import AUTO_MIN_BLOCKS, ENGINES, NotCompilable, build_simulation_kernel, numba_available

__all__ = ["DiscreteEquations"]


class DiscreteEquations:
    """Blocks, terms and the equations G(w, u) = 0 and F(w, u) of the discrete problem.

    Parameters are those of :func:`~pyomo_odeest.transcription._block.build_block`,
    and ``engine``: ``'auto'`` (default: the compiled engine of :mod:`._compiled`
    when numba is installed, the problem's expressions compile and the model has
    at least :data:`~pyomo_odeest.discretization.discrete._compiled.AUTO_MIN_BLOCKS` blocks — below that numpy's
    sweeps cost less than loading compiled code into a new process — else numpy),
    ``'numba'`` (required; an error otherwise) or ``'numpy'``.  Both engines solve
    the same equations; :attr:`engine` tells which one runs.
    """

    def __init__(self, problem: EstimationProblem, scheme="adams_pc", qmax=None, grid=None,
                 max_step=None, steps_per_interval=None, engine="auto"):
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r}: use one of {ENGINES}")
        if engine == "numba" and not numba_available():
            raise ImportError("engine='numba' needs numba: pip install 'pyomo_odeest[compiled]' "
                              "(or engine='numpy')")
        self._engine_request = engine
        self._kernel = None if engine != "numpy" else False
        self._engine_note = "numpy engine requested" if engine == "numpy" else ""
        self._arrays = None
        self.problem = problem
        self.scheme = get_scheme(scheme, qmax)
        self.grid = resolve_grid(problem, grid, max_step, steps_per_interval)
        t = np.asarray(self.grid.t, dtype=float)
        self.t = t
        self.k = len(t) - 1
        self.n = len(problem.states)
        self.m = len(problem.parameters)
        self.nsim = self.ngrad = self.nhess = 0
        # the step formulas and the layout create a few small objects per step and keep
        # them all: with the cyclic collector on, its repeated passes over the heap cost
        # more than the work itself (2.4 s against 1.0 s for 10 000 steps)
        enabled = gc.isenabled()
        gc.disable()
        try:
            self.formulas = self.scheme.formulas(t, self.grid.restarts)
            self._layout()
        finally:
            if enabled:
                gc.enable()
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
        self.f_by_eq, self.d_by_eq = [[] for _ in range(nb)], [[] for _ in range(nb)]
        for by_eq, eq in ((self.f_by_eq, self.f_eq), (self.d_by_eq, self.d_eq)):
            for e, b in enumerate(eq):
                by_eq[b].append(e)

    def _term_kinds(self, pv=None, *wrt):
        """Per kind of term, f then ḟ (no ḟ terms without ḟ): ``(by_eq, pt, c)`` followed,
        for each ``"x"`` / ``"u"`` in ``wrt``, that Jacobian of f (ḟ) and its values in ``pv``."""
        out = []
        for key, by_eq, pt, c in (("f", self.f_by_eq, self.f_pt, self.f_c),
                                  ("fd", self.d_by_eq, self.d_pt, self.d_c)):
            row = (by_eq, pt, c)
            for v in wrt:
                row += (getattr(self, key + v, None), pv.get(key + v))
            out.append(row)
        return out

    def _symbolic(self):
        """The numeric f, f_x, f_u (ḟ and its Jacobians for the Enright schemes), l, l_u
        and the misfit, built once per problem (a multistart builds a model per start)."""
        P = self.problem
        self.needs_fdot = self.scheme.needs_fdot
        self.__dict__.update(P._numeric(("discrete", P.f_sym, P.l_sym, self.needs_fdot),
                                        self._build_symbolic))
        #: the misfit Σ φ_j and penalty R(u), shared with the continuous backend
        self.misfit = MeasurementMisfit(P)
        self.g, self.gx, self.gu = self.misfit.g, self.misfit.gx, self.misfit.gu
        self._second = None

    def _build_symbolic(self):
        P = self.problem
        xs, us, ts = P.x_sym, P.u_sym, P.t_sym
        d = dict(f=VectorFn(P.f_sym, xs, us, ts), fx=sparse_jacobian(P.f_sym, xs, xs, us, ts),
                 fu=sparse_jacobian(P.f_sym, us, xs, us, ts), l=VectorFn(P.l_sym, (), us, ts),
                 lu=sparse_jacobian(P.l_sym, us, (), us, ts))
        if self.needs_fdot:
            fd = P.fdot_sym()
            d.update(fd=VectorFn(fd, xs, us, ts), fdx=sparse_jacobian(fd, xs, xs, us, ts),
                     fdu=sparse_jacobian(fd, us, xs, us, ts), _fd_sym=fd)
        return d

    def _second_order(self):
        """Second derivatives of λᵀf (and λᵀḟ) and of l (built on first use, once per
        problem)."""
        if self._second is None:
            P = self.problem
            self._second = P._numeric(("discrete_second", P.f_sym, P.l_sym, self.needs_fdot),
                                      self._build_second_order)
        return self._second

    def _build_second_order(self):
        P = self.problem
        xs, us, ts = P.x_sym, P.u_sym, P.t_sym
        d = {"f": second_derivatives(P.f_sym, xs, us, ts)}
        if self.needs_fdot:
            d["fd"] = second_derivatives(self._fd_sym, xs, us, ts)
        d["l"] = P.initial_hessian()
        return d

    def _measurements(self):
        P = self.problem
        self._set_measurement_blocks(self.xblk[np.asarray(self.grid.J)])
        self.meas_t = np.asarray(P.meas_times, dtype=float)
        self.const = self.misfit.const

    def _set_measurement_blocks(self, blocks):
        """The block of each measurement time's states, and the sparse matrix that sums
        the times' rows into their blocks (ten times faster than np.add.at for 1000
        times; times of one block add up)."""
        N = len(blocks)
        self.meas_blk = np.asarray(blocks, dtype=np.int64)
        self._meas_sum = sp.csr_matrix((np.ones(N), (self.meas_blk, np.arange(N))),
                                       shape=(self.nblocks, N))

    # ------------------------------------------------------------------
    # engine
    # ------------------------------------------------------------------
    def __getstate__(self):
        # a compiled kernel lives in a module loaded from the kernel cache: rebuilt
        # (loaded again) on first use after unpickling
        state = self.__dict__.copy()
        if state.get("_kernel"):
            state["_kernel"] = None
        return state

    @property
    def engine(self):
        """``'numba'`` or ``'numpy'``: the engine that runs the simulation and sweeps."""
        return "numba" if self._compiled() is not None else "numpy"

    @property
    def engine_note(self):
        """Why the engine is numpy where it is (empty: numba, or not decided yet)."""
        return self._engine_note

    def _compiled(self):
        """The compiled simulation kernel, built on first use; None on the numpy engine."""
        if self._kernel is None:
            if self._engine_request == "auto" and self.nblocks < AUTO_MIN_BLOCKS:
                self._kernel = False
                self._engine_note = f"{self.nblocks} blocks < {AUTO_MIN_BLOCKS}: numpy is faster"
            elif self._engine_request == "auto" and not numba_available():
                self._kernel = False
                self._engine_note = "numba is not installed"
            else:
                try:
                    self._kernel = build_simulation_kernel(self)
                except NotCompilable as err:
                    if self._engine_request == "numba":
                        raise ValueError(f"engine='numba': {err}; use engine='numpy'") from None
                    self._kernel = False
                    self._engine_note = f"not compiled: {err}"
        return self._kernel or None

    def compiled_arrays(self):
        """The block layout as flat arrays for the compiled sweeps: terms grouped by
        equation block (CSR ``*_ptr``), Jacobian patterns, ``window``, one more
        than the farthest back reference of any block (ring buffers of the
        sweeps), and the misfit's data (:meth:`_misfit_arrays`)."""
        if self._arrays is None:
            nb = self.nblocks
            a = {"base": self.base.astype(np.int64), "implicit": self.implicit.astype(np.bool_),
                 "blk_time": np.ascontiguousarray(self.blk_time, dtype=float)}
            far = np.max(np.arange(1, nb) - self.base[1:]) if nb > 1 else 0
            for key, eq, pt, c in (("f", self.f_eq, self.f_pt, self.f_c),
                                   ("d", self.d_eq, self.d_pt, self.d_c)):
                order = np.argsort(eq, kind="stable")
                a[f"{key}_ptr"] = np.searchsorted(eq[order], np.arange(nb + 1)).astype(np.int64)
                a[f"{key}_pt"] = pt[order].astype(np.int64)
                a[f"{key}_c"] = np.ascontiguousarray(c[order], dtype=float)
                if len(eq):
                    far = max(far, int(np.max(eq - pt)))
            empty = np.zeros(0, dtype=np.int64)
            for key in ("fx", "fu", "fdx", "fdu"):
                J = getattr(self, key, None)
                a[f"{key}_rows"] = empty if J is None else J.rows.astype(np.int64)
                a[f"{key}_cols"] = empty if J is None else J.cols.astype(np.int64)
            a["window"] = int(far) + 1
            a.update(self._misfit_arrays())
            self._arrays = a
        return self._arrays

    def _misfit_arrays(self):
        """The misfit's data for the compiled gradients: times, data, mask, and the
        weights ``A_j = diag(weights_j)`` or (weights without rows) the matrices ``A``,
        and the patterns of g_x, g_u."""
        mf = self.misfit
        C = np.ascontiguousarray
        if mf.weights is not None:
            weights, A = C(mf.weights, dtype=float), np.zeros((0, 0, 0))
        else:
            weights, A = np.zeros((0, 0)), C(mf.A, dtype=float)
        return dict(meas_t=C(mf.t, dtype=float), zbar=C(mf.zbar, dtype=float),
                    mask=C(mf.problem.mask, dtype=np.bool_), weights=weights, A=A,
                    gx_rows=mf.gx.rows, gx_cols=mf.gx.cols, gu_rows=mf.gu.rows,
                    gu_cols=mf.gu.cols)

    # ------------------------------------------------------------------
    # evaluation helpers
    # ------------------------------------------------------------------
    def _check_u(self, u):
        u = np.asarray(u, dtype=float).reshape(-1)
        if u.shape != (self.m,):
            raise ValueError(f"u must have {self.m} entries (parameters {self.problem.parameter_names})")
        return u

    # ------------------------------------------------------------------
    # residual and Jacobians on the whole vector (for checks and transposed solve)
    # ------------------------------------------------------------------
    def _point_values(self, W, u, values=True):
        """f_x, f_u (ḟ_x, ḟ_u) and, with ``values``, f (ḟ) at every block; the
        Jacobians compiled on the compiled engine."""
        tb = self.blk_time
        kernel = self._compiled()
        if kernel is not None:
            out = kernel.jacobians(self, W, u, tb)
        else:
            out = {"fx": self.fx.values(W, u, tb), "fu": self.fu.values(W, u, tb)}
            if self.needs_fdot:
                out.update(fdx=self.fdx.values(W, u, tb), fdu=self.fdu.values(W, u, tb))
        if values:
            out["f"] = self.f(W, u, tb)
            if self.needs_fdot:
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
    def objective(self, u, traj=None):
        """J_k(u) = Σ_j φ_j (same value as the block's objective)."""
        traj = self.simulate(u) if traj is None else traj
        mf = self.misfit
        return mf.value(traj.W[self.meas_blk], traj.u) + self.const + mf.penalty(traj.u)

    def _dF(self, W, u):
        """∇_w F (nblocks, n) and ∇_u F (m,); the misfit's part compiled on the compiled
        engine when the observation function compiles."""
        kernel = self._compiled()
        grads = None if kernel is None else kernel.misfit_gradients(self, W, u)
        if grads is None:
            Fx, Fu = self.misfit.gradients(W[self.meas_blk], u)
            grads = self._meas_sum @ Fx, Fu
        Fw, Fu = grads
        return Fw, Fu + self.misfit.penalty_gradient(u)
