r"""Multiple shooting [AT] on the discrete schemes of the block.

Nodes :math:`t_0 = \tau_0 < \tau_1 < \dots < \tau_N = T` split the horizon;
the node values :math:`s_j \in \mathbb R^n` and the parameters :math:`p` are
the variables :math:`q = (s_0, \dots, s_N, p)` of the NLP [AT, eq. (4)]

.. math::

    \min_q\; L(q) = \sum_{j} \varphi_j\big(g(s_{J(j)}, p, \tau_j), \bar z_j\big)
    \quad\text{s.t.}\quad
    G_j(q) = x_j(\tau_{j+1}; \tau_j, s_j, p) - s_{j+1} = 0,\; j = 0..N-1,

where :math:`x_j` solves the interval problem [AT, eq. (2)]
:math:`\dot x_j = f(x_j, p, t)`, :math:`x_j(\tau_j) = s_j` on
:math:`[\tau_j, \tau_{j+1}]`.  The objective is eq. (7) in the node values
(Remark 2); a measurement time that is not a node is evaluated on the interval
trajectory (the classical form (3)), so ``nodes=(t0, T)`` is single shooting.
Each interval is a :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`
on the sub-grid between its nodes, its multistep order ramp restarting at the
node.  Derivatives of the continuity constraints [AT, eq. (6)]: forward
sensitivities [GM-grad, eq. (51)] (``jacobian="sensitivity"``) or ``n``
adjoint sweeps per interval, eq. (17) (``jacobian="adjoint"``).  The scalar
form (8), ``formulation="scalar"``, imposes :math:`h^{(j)} = \|G_j\|_2^2 = 0`
(one adjoint sweep per interval with :math:`\lambda(\tau_{j+1}) = 2 G_j`); its
constraint Jacobian vanishes at every feasible point, so Ipopt converges
linearly at best on it: it is kept for the gradient identity (17), not as a
recommended setting.  Hessian: Ipopt's limited-memory approximation.

See docs/multiple_shooting.md ("Equations and functions", "Order ramp", "The
scalar form (8) in an interior-point method") for the details and measurements.
"""
from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import sympy

from ..problem._misfit import misfit_constant, misfit_sym
from ..discretization.discrete import DiscreteModel, SimulationError
from ..discretization._grid import Grid, make_grid, resolve_grid
from ..nlp._cyipopt_adapter import start_value_scaling
from ..nlp._protocol import EvaluationError, NLPEvaluator, finite
from ..problem._declaration import EstimationProblem, Parameter, ProblemError
from ..problem._result import EstimationResult
from ..discretization._experiments import experiment_option
from ..discretization.schemes import get_scheme
from ..symbolic import lambdify
from ..problem._start import start_values
from ._backend import ShootingBackend
from ._base import (Approach, Choice, ConfigValue, ConstraintRows, Outcome, common_config,
                    discretization_config, refinement_config, fit_frames, ipopt_options, run_ipopt,
                    add_constraint_multipliers)

__all__ = ["IntervalModels", "interval_models", "MultipleShootingNLP", "ShootingNLP",
           "ShootingApproach", "estimate_multiple_shooting", "node_start_values", "shooting_nlp"]

# DiscreteModels of interval problems keyed by the dynamics, scheme and sub-grid: problems
# that differ only in their data (e.g. noise draws) share them.
_MODEL_CACHE: "OrderedDict[tuple, DiscreteModel]" = OrderedDict()
_MODEL_CACHE_SIZE = 1024


# ---------------------------------------------------------------------------
# interval models
# ---------------------------------------------------------------------------
def _node_param_names(problem):
    taken = set(problem.states) | set(problem.parameter_names)
    prefix = "s_"
    while any(prefix + s in taken for s in problem.states):
        prefix = prefix + "_"
    return [prefix + s for s in problem.states]


def _interval_problem(problem, names, t0, T):
    """Dynamics of ``problem`` on [t0, T] with x(t0) = node parameters ``names``."""
    x0 = problem.initial_state(problem.u0)
    params = [Parameter(p.name, float(p.value)) for p in problem.parameters]
    params += [Parameter(nm, float(v)) for nm, v in zip(names, x0)]
    f_sym = tuple(problem.f_sym)
    return EstimationProblem(states=problem.states, parameters=params,
                             rhs=lambda x, u, t: list(f_sym),
                             initial={s: nm for s, nm in zip(problem.states, names)},
                             data=None, t0=float(t0), T=float(T), name=f"{problem.name}_interval")


class IntervalModels:
    r"""The interval problems of multiple shooting [AT, eq. (2)] on one grid.

    Attributes
    ----------
    problem : EstimationProblem
    scheme : MultistepScheme
    grid : Grid
        The full problem's grid (it contains every node).
    nodes : ndarray
        :math:`\tau_0 = t_0 < \dots < \tau_N = T`.
    node_index : ndarray of int
        Grid index of each node.
    models : list of DiscreteModel
        ``models[j]`` integrates :math:`[\tau_j, \tau_{j+1}]` on
        ``grid.t[node_index[j]:node_index[j+1]+1]`` with parameters
        ``(u, s_j)`` (problem parameters first, then the node values); its
        order ramp starts afresh at :math:`\tau_j`.
    node_params : list of str
        Names of the node parameters in the interval problems.
    """

    def __init__(self, problem, scheme, grid, nodes):
        self.problem, self.scheme, self.grid = problem, scheme, grid
        t = np.asarray(grid.t, dtype=float)
        self.nodes = np.asarray(nodes, dtype=float)
        idx = np.searchsorted(t, self.nodes)
        if np.any(idx >= len(t)) or not np.array_equal(t[np.minimum(idx, len(t) - 1)], self.nodes):
            raise ProblemError("every shooting node must be a grid point")
        self.node_index = idx
        self.node_params = _node_param_names(problem)
        self.models = []
        for a, b in zip(idx[:-1], idx[1:]):
            sub = t[a:b + 1]
            # the order ramp also restarts at the switching times of the inputs inside
            restarts = tuple(int(r - a) for r in grid.restarts if a < r < b)
            key = (tuple(problem.states), tuple(problem.parameter_names), tuple(problem.f_sym),
                   scheme, tuple(sub.tolist()), restarts)
            dm = _MODEL_CACHE.get(key)
            if dm is None:
                ip = _interval_problem(problem, self.node_params, sub[0], sub[-1])
                g = Grid(t=sub, meas_times=np.zeros(0), I=np.zeros(len(sub), dtype=int),
                         J=np.zeros(0, dtype=int), restarts=restarts)
                dm = DiscreteModel(ip, scheme, grid=g)
                _MODEL_CACHE[key] = dm
                while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
                    _MODEL_CACHE.popitem(last=False)
            else:
                _MODEL_CACHE.move_to_end(key)
            self.models.append(dm)

    @property
    def N(self):
        """Number of intervals."""
        return len(self.models)

    def locate(self, pts):
        """Interval holding each grid index of ``pts`` (a node starts its interval, ``T``
        ends the last) and the index within it."""
        a = np.clip(np.searchsorted(self.node_index, pts, side="right") - 1, 0, self.N - 1)
        return a, pts - self.node_index[a]


def _resolve_nodes(problem, nodes):
    pts = problem.meas_times if nodes is None else np.atleast_1d(np.asarray(nodes, dtype=float))
    if nodes is not None:
        if pts.ndim != 1 or not np.all(np.isfinite(pts)):
            raise ProblemError("nodes must be a 1-D sequence of finite times")
        if np.any(pts < problem.t0) or np.any(pts > problem.T):
            raise ProblemError(f"nodes must lie in [t0, T] = [{problem.t0}, {problem.T}]")
    return np.unique(np.concatenate([[problem.t0], pts, [problem.T]]))


def interval_models(problem, scheme="adams_pc", qmax=None, grid=None, max_step=None,
                    steps_per_interval=None, nodes=None) -> IntervalModels:
    r"""The (cached) interval problems (2) of [AT] for ``problem``.

    Parameters
    ----------
    problem : EstimationProblem
    scheme, qmax : str or MultistepScheme, int
        The discretization scheme, as for the block.
    grid : Grid, optional
        Full grid; must contain every node.  Default:
        :func:`~pyomo_odeest.discretization._grid.make_grid` of the measurement times with the
        nodes as extra required points (with the default nodes: the grid of
        the block and of the reduced space).
    max_step, steps_per_interval
        Passed to ``make_grid`` (default 10 steps per measurement interval).
    nodes : sequence of float, optional
        Shooting nodes; default :math:`\{t_0\} \cup \{\tau_j\} \cup \{T\}`
        (Assumption 1); ``t0`` and ``T`` are always added.

    Returns
    -------
    IntervalModels
        Built once per problem and arguments (stored on the problem); the
        interval ``DiscreteModel`` objects are shared between problems with
        the same dynamics, scheme and sub-grids.
    """
    sch = get_scheme(scheme, qmax)
    node_t = _resolve_nodes(problem, nodes)
    if grid is None:
        if max_step is None and steps_per_interval is None:
            steps_per_interval = 10
        grid = make_grid(problem.meas_times, t0=problem.t0, T=problem.T, max_step=max_step,
                         steps_per_interval=steps_per_interval, extra_times=node_t,
                         switches=problem.switch_times)
    else:
        grid = resolve_grid(problem, grid)
    cache = problem.__dict__.setdefault("_multiple_shooting_models", {})
    key = (sch, tuple(np.asarray(grid.t).tolist()), tuple(node_t.tolist()))
    if key not in cache:
        cache[key] = IntervalModels(problem, sch, grid, node_t)
    return cache[key]


def node_start_values(problem, nodes, u, init="data", im=None):
    r"""Start values of the node states :math:`s_0, \dots, s_N`.

    Parameters
    ----------
    problem : EstimationProblem
    nodes : array
        Node times.
    u : array
        Parameters (all of them, fixed included).
    init : 'data' | 'simulate'
        ``'data'``: measurements of the observed states interpolated linearly
        in time (with :math:`x_0 = l(u)` at :math:`t_0`), :math:`x_0` for
        unobserved states; ``'simulate'``: :math:`s_{j+1} = x_j(\tau_{j+1};
        s_j, u)` successively from :math:`s_0 = l(u)` (a continuous start);
        the nodes after a failing interval keep the ``'data'`` values.
    im : IntervalModels
        Required for ``'simulate'``.

    Returns
    -------
    S : ndarray, shape (N+1, n)
    used : str
        The strategy actually used.
    """
    u = np.asarray(u, dtype=float)
    nodes = np.asarray(nodes, dtype=float)
    S = problem.interpolate_states(nodes, u)
    S[0] = problem.initial_state(u)
    if init == "data":
        return S, "data"
    if init != "simulate":
        raise ValueError(f"init must be 'data' or 'simulate', got {init!r}")
    if im is None:
        raise ValueError("init='simulate' needs the interval models")
    used = "simulate"
    for j, dm in enumerate(im.models):
        try:
            traj = dm.simulate(np.concatenate([u, S[j]]))
        except SimulationError:
            used = f"simulate, data from node {j + 1} (t = {nodes[j + 1]:g})"
            break
        S[j + 1] = traj.X[-1]
    return S, used


# ---------------------------------------------------------------------------
# the NLP
# ---------------------------------------------------------------------------
class _ShootingEvaluator(NLPEvaluator):
    """What the shooting NLPs share: the Jacobian structure set once, no exact Hessian."""

    def _set_structure(self, blocks, rows=(), cols=()):
        """The Jacobian structure: ``rows``, ``cols``, then each block ``(row indices,
        node columns)`` over its node columns and every parameter column."""
        pcols = self.ns + np.arange(len(self.free))
        rows, cols = list(rows), list(cols)
        for r, c in blocks:
            c = np.concatenate([c, pcols])
            rows.append(np.repeat(r, len(c)))
            cols.append(np.tile(c, len(r)))
        self._jr = np.concatenate(rows).astype(int) if rows else np.zeros(0, int)
        self._jc = np.concatenate(cols).astype(int) if cols else np.zeros(0, int)

    def jacobian_structure(self):
        return self._jr, self._jc

    def hessian_structure(self):
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)

    def hessian(self, x, lam, obj_factor=1.0):
        raise NotImplementedError("multiple shooting uses hessian_approximation=limited-memory")


class MultipleShootingNLP(_ShootingEvaluator):
    r"""Problem (4) (``formulation="vector"``) or (8) (``"scalar"``) of [AT].

    Variables ``x = (s_0, ..., s_N, p_free)`` (node values row by node, then
    the free parameters).  Constraints, in this order: :math:`s_0 - l(p) = 0`
    (``n`` rows) if :math:`x_0 = l(u)` depends on free parameters (otherwise
    :math:`s_0` is fixed at :math:`l(u)` by equal bounds); per interval ``j``
    :math:`G_j = x_j(\tau_{j+1}; s_j, p) - s_{j+1} = 0` (``n`` rows, eq. (4))
    or :math:`h^{(j)} = \|G_j\|^2 = 0` (one row, eq. (8)).  Objective: eq. (7)
    (:func:`~pyomo_odeest.problem._misfit.misfit_sym` at the node values, on the
    interval trajectory for a measurement time that is not a node) plus the
    penalty :math:`R(u)`; gradient explicit for node measurements (Remark 2), one
    adjoint sweep per interval holding off-node measurements.  A failing interval
    simulation raises :class:`~pyomo_odeest.nlp._protocol.EvaluationError` (Ipopt
    cuts the step).  No exact Hessian: use ``hessian_approximation=limited-memory``.
    """

    def __init__(self, problem: EstimationProblem, im: IntervalModels, formulation="vector",
                 jacobian="sensitivity", u_full=None, S0=None):
        if formulation not in ("vector", "scalar"):
            raise ValueError(f"formulation must be 'vector' or 'scalar', got {formulation!r}")
        if jacobian not in ("sensitivity", "adjoint"):
            raise ValueError(f"jacobian must be 'sensitivity' or 'adjoint', got {jacobian!r}")
        P = problem
        self.problem, self.im = P, im
        pen = sympy.sympify(P.penalty_sym)
        self._pen = None if pen == 0 else lambdify((P.u_sym,), pen, "numpy")
        self._dpen = None if pen == 0 else lambdify(
            (P.u_sym,), [sympy.diff(pen, v) for v in P.u_sym], "numpy")
        self.formulation, self.jacobian_method = formulation, jacobian
        self.nx = nx = len(P.states)
        self.mp = len(P.parameters)
        self.N = im.N
        self.free = np.flatnonzero(P.free_mask)
        self.u_full = (P.u0 if u_full is None else np.asarray(u_full, dtype=float)).copy()
        self.ns = (self.N + 1) * nx
        self.n = self.ns + len(self.free)
        # initial state: constraint if it depends on free parameters
        free_syms = {P.u_sym[k] for k in self.free}
        self.init_rows = bool(set().union(*[e.free_symbols for e in P.l_sym]) & free_syms)
        self._l = lambdify((P.u_sym,), list(P.l_sym), "numpy")
        self._lu = lambdify((P.u_sym,), sympy.Matrix(P.l_sym).jacobian(P.u_sym), "numpy")
        # bounds
        lb, ub = P.bounds(self.free)
        self.x_lb = np.concatenate([np.full(self.ns, -np.inf), lb])
        self.x_ub = np.concatenate([np.full(self.ns, np.inf), ub])
        l0 = self.l(self.u_full)
        S0 = np.tile(l0, (self.N + 1, 1)) if S0 is None else np.asarray(S0, float)
        if S0.shape != (self.N + 1, nx):
            raise ValueError(f"node start values must have shape {(self.N + 1, nx)}")
        self.x0 = np.concatenate([S0.ravel(), np.clip(self.u_full[self.free], lb[self.free],
                                                      ub[self.free])])
        if not self.init_rows:                  # s_0 fixed at l(u) by equal bounds
            self.x_lb[:nx] = self.x_ub[:nx] = self.x0[:nx] = l0
        # constraints
        per = nx if formulation == "vector" else 1
        self.r_init = nx if self.init_rows else 0
        self.m = self.r_init + self.N * per
        self.g_lb = np.zeros(self.m)
        self.g_ub = np.zeros(self.m)
        self._measurements()
        self._structure()
        self._key = self._trajs = self._jkey = self._D = None
        self.counts = dict(simulations=0, failures=0, sensitivity_sweeps=0, adjoint_sweeps=0)

    # -- helpers ---------------------------------------------------------------
    def l(self, u):
        return np.array(self._l(np.asarray(u, dtype=float)), dtype=float).reshape(-1)

    def split(self, x):
        """``(S (N+1, n), u_full)`` of an NLP point."""
        x = np.asarray(x, dtype=float)
        S = x[:self.ns].reshape(self.N + 1, self.nx)
        u = self.u_full.copy()
        u[self.free] = x[self.ns:]
        return S, u

    def point(self, S, u=None):
        """NLP point of node values ``S`` and parameters ``u`` (default: the start)."""
        u = self.u_full if u is None else np.asarray(u, dtype=float)
        return np.concatenate([np.asarray(S, dtype=float).ravel(), u[self.free]])

    def _measurements(self):
        P, im = self.problem, self.im
        J = np.asarray(im.grid.J)
        xs, us = P.x_sym, P.u_sym
        self.node_meas = []                       # (meas j, node a)
        self.off_meas = {}                        # interval -> [(meas j, local grid index)]
        self.phi, self.phix, self.phiu = [], [], []
        for j, gi in enumerate(J):
            phi = sympy.sympify(misfit_sym(P, j))
            self.phi.append(lambdify((xs, us), phi, "numpy"))
            self.phix.append(lambdify((xs, us), [sympy.diff(phi, v) for v in xs], "numpy"))
            self.phiu.append(lambdify((xs, us), [sympy.diff(phi, v) for v in us], "numpy"))
            hit = np.flatnonzero(im.node_index == gi)
            if len(hit):
                self.node_meas.append((j, int(hit[0])))
            else:
                a, i = im.locate(gi)
                self.off_meas.setdefault(int(a), []).append((j, int(i)))

    def _structure(self):
        nx, per = self.nx, (self.nx if self.formulation == "vector" else 1)
        # s_0 - l(p) over s_0, then G_j (or h^(j)) over (s_j, s_{j+1})
        blocks = [(np.arange(nx), np.arange(nx))] if self.init_rows else []
        blocks += [(self.r_init + j * per + np.arange(per), np.arange(j * nx, (j + 2) * nx))
                   for j in range(self.N)]
        self._set_structure(blocks)

    # -- simulation ------------------------------------------------------------
    def trajectories(self, x):
        """Interval trajectories at ``x`` (cached); EvaluationError on failure."""
        x = np.asarray(x, dtype=float)
        if self._key is not None and np.array_equal(x, self._key):
            if isinstance(self._trajs, Exception):
                raise EvaluationError(str(self._trajs))
            return self._trajs
        self._key = x.copy()
        self._jkey = None
        S, u = self.split(x)
        out = []
        try:
            for j, dm in enumerate(self.im.models):
                self.counts["simulations"] += 1
                out.append(dm.simulate(np.concatenate([u, S[j]])))
        except SimulationError as err:
            self.counts["failures"] += 1
            self._trajs = SimulationError(f"interval {j} [{self.im.nodes[j]:g}, "
                                          f"{self.im.nodes[j + 1]:g}]: {err}")
            raise EvaluationError(str(self._trajs)) from None
        self._trajs = out
        return out

    def defects(self, x):
        """:math:`G_j = x_j(\\tau_{j+1}) - s_{j+1}`, shape (N, n)."""
        S, _ = self.split(x)
        trajs = self.trajectories(x)
        return np.array([tr.X[-1] for tr in trajs]) - S[1:]

    def max_defect(self, x):
        """:math:`\\max_j |G_j|` (NaN when an interval cannot be simulated)."""
        try:
            G = self.defects(x)
        except EvaluationError:
            return np.nan
        return float(np.max(np.abs(G))) if G.size else 0.0

    def grid_states(self, x):
        """The interval trajectories on the full grid, shape (len(grid.t), n): the row of
        node :math:`\\tau_j` is the start :math:`s_j` of interval ``j``, the last row the
        end of the last interval."""
        trajs = self.trajectories(x)
        return np.vstack([tr.X[:-1] for tr in trajs] + [trajs[-1].X[-1:]])

    # -- objective -------------------------------------------------------------
    def objective(self, x):
        S, u = self.split(x)
        v = 0.0
        for j, a in self.node_meas:
            v += float(self.phi[j](S[a], u))
        if self.off_meas:
            trajs = self.trajectories(x)
            for a, lst in self.off_meas.items():
                for j, i in lst:
                    v += float(self.phi[j](trajs[a].X[i], u))
        if self._pen is not None:
            v += float(self._pen(u))
        return finite(v, "objective")

    def gradient(self, x):
        S, u = self.split(x)
        mp = self.mp
        gS = np.zeros_like(S)
        gu = np.zeros(mp)
        for j, a in self.node_meas:
            gS[a] += np.asarray(self.phix[j](S[a], u), dtype=float)
            gu += np.asarray(self.phiu[j](S[a], u), dtype=float)
        if self.off_meas:
            trajs = self.trajectories(x)
            for a, lst in self.off_meas.items():
                tr = trajs[a]
                dFdx = np.zeros_like(tr.X)
                for j, i in lst:
                    dFdx[i] += np.asarray(self.phix[j](tr.X[i], u), dtype=float)
                    gu += np.asarray(self.phiu[j](tr.X[i], u), dtype=float)
                self.counts["adjoint_sweeps"] += 1
                gi = self.im.models[a].functional_gradient(tr, dFdx)
                gu += gi[:mp]
                gS[a] += gi[mp:]
        if self._dpen is not None:
            gu += np.asarray(self._dpen(u), dtype=float)
        return finite(np.concatenate([gS.ravel(), gu[self.free]]), "objective gradient")

    # -- constraints -----------------------------------------------------------
    def constraints(self, x):
        S, u = self.split(x)
        G = self.defects(x)
        parts = []
        if self.init_rows:
            parts.append(S[0] - self.l(u))
        parts.append(G.ravel() if self.formulation == "vector" else np.sum(G * G, axis=1))
        return finite(np.concatenate(parts), "continuity defect")

    def _end_adjoint(self, j, tr, w):
        """Gradient of :math:`w^\\top x_j(\\tau_{j+1})` over ``(u, s_j)``: one adjoint sweep
        (eq. (17)) on trajectory ``tr`` of interval ``j`` with ``dFdx[-1] = w``."""
        dFdx = np.zeros_like(tr.X)
        dFdx[-1] = w
        self.counts["adjoint_sweeps"] += 1
        return self.im.models[j].functional_gradient(tr, dFdx)

    def end_sensitivities(self, x):
        r"""``D_j = ∂x_j(τ_{j+1})/∂(u, s_j)``, shape (N, n, m + n) (eq. (6)).

        By forward sensitivities (eq. (51)) or ``n`` adjoint sweeps (eq. (17)
        with ``dFdx[-1] = e_r``), per ``jacobian``.
        """
        trajs = self.trajectories(x)
        if self._jkey is not None and np.array_equal(np.asarray(x, float), self._jkey):
            return self._D
        nx = self.nx
        D = np.zeros((self.N, nx, self.mp + nx))
        for j, (dm, tr) in enumerate(zip(self.im.models, trajs)):
            if self.jacobian_method == "sensitivity":
                self.counts["sensitivity_sweeps"] += 1
                D[j] = dm.state_sensitivities(tr)[-1]
            else:
                D[j] = [self._end_adjoint(j, tr, e_r) for e_r in np.eye(nx)]
        self._jkey = np.asarray(x, float).copy()
        self._D = D
        return D

    def scalar_gradients(self, x):
        r"""Rows :math:`\nabla_{(u, s_j)} h^{(j)}` by one adjoint sweep each (eq. (17)).

        ``dFdx[-1] = 2 G_j``; returns (N, m + n).  The ``s_{j+1}`` part
        :math:`-2G_j` is explicit.
        """
        G = self.defects(x)
        return np.array([self._end_adjoint(j, tr, 2.0 * G[j])
                         for j, tr in enumerate(self.trajectories(x))])

    def jacobian(self, x):
        S, u = self.split(x)
        nx, mp, free = self.nx, self.mp, self.free
        vals = []
        if self.init_rows:
            lu = np.array(self._lu(u), dtype=float).reshape(nx, mp)
            vals.append(np.hstack([np.eye(nx), -lu[:, free]]).ravel())
        G = self.defects(x)
        if self.formulation == "scalar" and self.jacobian_method == "adjoint":
            H = self.scalar_gradients(x)
            for j in range(self.N):
                vals.append(np.concatenate([H[j, mp:], -2.0 * G[j], H[j, :mp][free]]))
        else:
            D = self.end_sensitivities(x)
            for j in range(self.N):
                blk = np.hstack([D[j][:, mp:], -np.eye(nx), D[j][:, :mp][:, free]])
                vals.append(blk.ravel() if self.formulation == "vector" else 2.0 * G[j] @ blk)
        return finite(np.concatenate(vals) if vals else np.zeros(0), "constraint Jacobian")


class ShootingNLP(_ShootingEvaluator):
    r"""Multiple shooting of a whole problem: one :class:`MultipleShootingNLP`
    per experiment, the parameters shared, and the problem's constraints.

    Variables ``x = (S^{(1)}, ..., S^{(E)}, p_free)``: the node values of
    each experiment (its own nodes, grid, initial state and data), then the
    free parameters once.  Objective and gradient: the sums of the
    experiments' (eq. (7); the penalty :math:`R(u)` once, in the first).
    Constraints, in this order: each experiment's initial-state and continuity
    rows (eq. (4) or (8)), then ``cons``
    (:class:`~pyomo_odeest.approaches._base.ConstraintRows`): path constraints
    :math:`c(x, u, t) \le 0` at the grid points (or measurement times) of each
    experiment on the interval trajectory that holds the point
    (:meth:`MultipleShootingNLP.grid_states`), Jacobian
    :math:`c_x\,\partial x_i/\partial(u, s_j) + c_u` from the interval's forward
    sensitivities [GM-grad, eq. (51)], and parameter constraints
    :math:`r(u) \le 0` (docs/experiments.md).

    With one experiment and no constraints it is the :class:`MultipleShootingNLP`
    itself (same variables, rows and values).
    """

    def __init__(self, problem, parts):
        self.problem, self.parts = problem, list(parts)
        p0 = self.parts[0]
        self.free, self.mp, self.nx = p0.free, p0.mp, p0.nx
        self.u_full = p0.u_full.copy()
        self.offsets = np.concatenate([[0], np.cumsum([p.ns for p in self.parts])]).astype(int)
        self.ns = int(self.offsets[-1])
        self.n = self.ns + len(self.free)
        self.x_lb = np.concatenate([p.x_lb[:p.ns] for p in self.parts] + [p0.x_lb[p0.ns:]])
        self.x_ub = np.concatenate([p.x_ub[:p.ns] for p in self.parts] + [p0.x_ub[p0.ns:]])
        self.x0 = np.concatenate([p.x0[:p.ns] for p in self.parts] + [p0.x0[p0.ns:]])
        self.row_offsets = np.concatenate([[0], np.cumsum([p.m for p in self.parts])]).astype(int)
        self.m_cont = int(self.row_offsets[-1])

        def points(pc, im):
            pts = (np.arange(len(im.grid.t)) if pc.at == "grid"
                   else np.unique(np.asarray(im.grid.J, dtype=int)))
            return pts, np.asarray(im.grid.t, dtype=float)[pts]
        self.cons = ConstraintRows(problem, [p.im for p in self.parts], points)
        self.m_path = self.cons.m - len(self.cons.names)
        self.m = self.m_cont + self.cons.m
        self.g_lb = np.concatenate([p.g_lb for p in self.parts] + [np.full(self.cons.m, -np.inf)])
        self.g_ub = np.concatenate([p.g_ub for p in self.parts] + [np.zeros(self.cons.m)])
        self._structure()

    # -- layout ----------------------------------------------------------------
    def part_x(self, x, e):
        """The point of experiment ``e``'s :class:`MultipleShootingNLP`."""
        x = np.asarray(x, dtype=float)
        return np.concatenate([x[self.offsets[e]:self.offsets[e + 1]], x[self.ns:]])

    def _structure(self):
        rows, cols = [], []
        for e, part in enumerate(self.parts):       # the part's columns in this NLP
            r, c = part.jacobian_structure()
            rows.append(r + self.row_offsets[e])
            cols.append(np.where(c < part.ns, self.offsets[e] + c, self.ns + (c - part.ns)))
        # a path row over the node values of the interval holding its point; parameter rows
        node_cols = [self.offsets[e] + a * self.nx + np.arange(self.nx)
                     for e, _, pts, *_ in self.cons.parts for a in self.parts[e].im.locate(pts)[0]]
        node_cols += [np.zeros(0, int)] * len(self.cons.names)
        self._set_structure([([r], c) for r, c in enumerate(node_cols, self.m_cont)], rows, cols)

    def split(self, x):
        """``([S^{(e)}], u_full)`` of an NLP point."""
        x = np.asarray(x, dtype=float)
        S = [s.reshape(-1, self.nx) for s in np.split(x[:self.ns], self.offsets[1:-1])]
        u = self.u_full.copy()
        u[self.free] = x[self.ns:]
        return S, u

    # -- objective -------------------------------------------------------------
    def objective(self, x):
        return float(sum(p.objective(self.part_x(x, e)) for e, p in enumerate(self.parts)))

    def gradient(self, x):
        g = np.zeros(self.n)
        for e, p in enumerate(self.parts):
            ge = p.gradient(self.part_x(x, e))
            g[self.offsets[e]:self.offsets[e + 1]] = ge[:p.ns]
            g[self.ns:] += ge[p.ns:]
        return g

    # -- constraints -----------------------------------------------------------
    def constraints(self, x):
        _, u = self.split(x)
        out = [p.constraints(self.part_x(x, e)) for e, p in enumerate(self.parts)]
        out.append(self.cons.values(u, lambda e: self.parts[e].grid_states(self.part_x(x, e))))
        return finite(np.concatenate(out), "constraint value")

    def jacobian(self, x):
        _, u = self.split(x)
        vals = [p.jacobian(self.part_x(x, e)) for e, p in enumerate(self.parts)]
        mp, free = self.mp, self.free
        sens = {}
        for e, _, pts, t, fn, jx, ju in self.cons.parts:
            part, xe = self.parts[e], self.part_x(x, e)
            trajs, X = part.trajectories(xe), part.grid_states(xe)[pts]
            cx = jx.dense(jx.values(X, u, t))[:, 0, :]
            cu = ju.dense(ju.values(X, u, t))[:, 0, :]
            for r, (a, i) in enumerate(zip(*part.im.locate(pts))):
                if (e, a) not in sens:
                    sens[e, a] = part.im.models[a].state_sensitivities(trajs[a])
                row = cx[r] @ sens[e, a][i]                   # over (u, s_a)
                vals.append(np.concatenate([row[mp:], row[:mp][free] + cu[r][free]]))
        vals += [np.asarray(dr(u), dtype=float).reshape(-1)[free] for dr in self.cons._dr]
        return finite(np.concatenate(vals), "constraint Jacobian")


# ---------------------------------------------------------------------------
# estimation
# ---------------------------------------------------------------------------
class ShootingApproach(Approach):
    r"""Multiple shooting [AT, problem (4) or (8)] with Ipopt (L-BFGS Hessian).

    Own options: ``nodes``, ``formulation`` (``'vector'`` | ``'scalar'``),
    ``jacobian`` (``'sensitivity'`` | ``'adjoint'``) and ``init`` (``'data'`` |
    ``'simulate'``), see :func:`estimate_multiple_shooting`.  ``scale`` is off
    by default here (see there).
    """

    name = "multiple_shooting"
    CONFIG = common_config()
    CONFIG.declare_from(discretization_config())
    CONFIG.declare_from(refinement_config())
    CONFIG.declare("nodes", ConfigValue(default=None, description=(
        "shooting nodes; t0 and T are always added (None: t0, the measurement times and T; "
        "several experiments: a mapping experiment -> nodes)")))
    CONFIG.declare("formulation", ConfigValue(default="vector", domain=Choice(
        "formulation", "vector", "scalar"), description=(
        "continuity constraints G_j = 0 [AT, (4)] or ‖G_j‖² = 0 [AT, (8)]")))
    CONFIG.declare("jacobian", ConfigValue(default="sensitivity", domain=Choice(
        "jacobian", "sensitivity", "adjoint"), description=(
        "derivatives of the constraints: forward sensitivities or adjoint sweeps")))
    CONFIG.declare("init", ConfigValue(default="data", domain=Choice(
        "init", "data", "simulate"), description=(
        "start values of the nodes: from the data or from a simulation at u0")))
    DEFAULTS = {"scale": False}

    def build_experiment(self, problem, name, cfg, u_start):
        im = interval_models(problem, cfg.scheme, cfg.qmax, experiment_option(cfg.grid, name),
                             cfg.max_step, cfg.steps_per_interval,
                             experiment_option(cfg.nodes, name, "nodes"))
        S0, used = node_start_values(problem, im.nodes, u_start, cfg.init, im)
        return MultipleShootingNLP(problem, im, cfg.formulation, cfg.jacobian, u_start, S0), used

    def combine(self, problem, parts, cfg, u_start):
        return SimpleNamespace(nlp=ShootingNLP(problem, [p for p, _ in parts]),
                               inits=[i for _, i in parts])

    def solve(self, built, cfg):
        nlp, history = built.nlp, []

        def record(iter_count, obj_value, inf_pr, inf_du, mu, **_):
            history.append((int(iter_count), float(obj_value), float(inf_pr), float(inf_du),
                            float(mu)))

        try:
            nlp.constraints(nlp.x0)
            nlp.objective(nlp.x0)
        except EvaluationError as err:
            return Outcome.failed_at_start(nlp.x0, err)
        xs = (np.concatenate([np.ones(nlp.ns), start_value_scaling(nlp.x0[nlp.ns:])])
              if cfg.scale else None)
        d = np.ones(nlp.n) if xs is None else xs
        opts = ipopt_options(cfg, start=(nlp.x0 * d, nlp.x_lb * d, nlp.x_ub * d),
                             hessian_approximation="limited-memory")
        out = Outcome.from_ipopt(run_ipopt(nlp, cfg, opts, intermediate=record, x_scaling=xs))
        out.details["history"] = history
        return out

    def parts(self, built):
        return built.nlp.parts

    def collect(self, problem, built, outcome, cfg):
        nlp, names = built.nlp, problem.experiment_names
        counts = dict(outcome.counts)
        for p in nlp.parts:
            for k, v in p.counts.items():
                counts[k] = counts.get(k, 0) + v
        S, u = nlp.split(outcome.x)
        ims = [p.im for p in nlp.parts]
        try:
            obj = nlp.objective(outcome.x) + misfit_constant(problem)
        except EvaluationError:
            obj = np.nan
        res = EstimationResult(
            approach=self.name, method=f"ipopt/{cfg.formulation}-{cfg.jacobian}+lbfgs",
            scheme=ims[0].scheme,
            estimates=pd.Series(u, index=problem.parameter_names, name="estimate"),
            objective=float(obj), status=outcome.status, iterations=outcome.iterations,
            evaluations=counts)
        history = pd.DataFrame(outcome.details.get("history", []),
                               columns=["iter", "objective", "inf_pr", "inf_du", "mu"])
        res.extra.update(init=dict(zip(names, built.inits)) if names else built.inits[0],
                         formulation=cfg.formulation, history=history)
        if names:
            res.extra["max_defect"] = float(np.max([p.max_defect(nlp.part_x(outcome.x, e))
                                                    for e, p in enumerate(nlp.parts)]))
        res.backend = ShootingBackend(problem, ims, S)
        if outcome.mult_g is not None and nlp.m > nlp.m_cont:
            add_constraint_multipliers(res, problem, nlp.cons.rows,
                                       np.asarray(outcome.mult_g)[nlp.m_cont:], nlp.cons.names)
        return res

    def collect_experiment(self, problem, part, u, built, outcome):
        """Frames and extras of one experiment's shooting NLP at the solution."""
        nlp, im, cols = built.nlp, part.im, problem.states
        e = nlp.parts.index(part)
        x, x_init = nlp.part_x(outcome.x, e), nlp.part_x(nlp.x0, e)
        S, u = part.split(x)
        S_init = part.split(x_init)[0]
        node_idx = pd.Index(im.nodes, name="time")
        extra = dict(nodes=im.nodes.copy(), formulation=part.formulation,
                     node_values=pd.DataFrame(S, index=node_idx, columns=cols),
                     node_values_initial=pd.DataFrame(S_init, index=node_idx, columns=cols),
                     node_trajectories_initial=_node_trajectories(part, x_init),
                     node_trajectories=_node_trajectories(part, x))
        out = dict(extra=extra, grid=im.grid)
        try:
            trajs = part.trajectories(x)
            Xm = np.empty((len(problem.meas_times), part.nx))
            for j, a in part.node_meas:
                Xm[j] = S[a]
            for a, lst in part.off_meas.items():
                for j, i in lst:
                    Xm[j] = trajs[a].X[i]
            out.update(fit_frames(problem, im.grid.t, part.grid_states(x), Xm, u))
            extra["defects"] = pd.DataFrame(part.defects(x), index=node_idx[1:], columns=cols)
        except EvaluationError as err:
            out["failed"] = str(err)
        extra["max_defect"] = part.max_defect(x)
        if outcome.mult_g is not None:
            lam = np.asarray(outcome.mult_g)[nlp.row_offsets[e] + part.r_init:nlp.row_offsets[e + 1]]
            extra["continuity_multipliers"] = (
                pd.DataFrame(lam.reshape(part.N, part.nx), index=node_idx[1:], columns=cols)
                if part.formulation == "vector" else pd.Series(lam, index=node_idx[1:]))
        return out


def estimate_multiple_shooting(problem: EstimationProblem, *args, **options) -> EstimationResult:
    r"""Estimate the parameters by multiple shooting [AT, problem (4) or (8)] with Ipopt.

    The options, their defaults and domains are declared once, in
    :class:`ShootingApproach`'s configuration (``approach_config('multiple_shooting')``;
    the table in docs/choosing.md).  The nodes (default
    :math:`\{t_0\} \cup \{\tau_j\} \cup \{T\}`, Assumption 1; ``(t0, T)`` is single
    shooting), the forms (4) and (8) (degenerate), the Jacobians (eq. (51) or
    eq. (17)), ``init`` (:func:`node_start_values`) and several experiments with
    inputs and constraints (:class:`ShootingNLP`) are described in
    docs/multiple_shooting.md.  Parameter scaling is off by default here: the
    node values, of the states' magnitude, are variables too; on [AT]'s
    Lotka–Volterra study from p0 = (0.5, 0.5, 0.5, −0.2) scaling sent 5 of 10
    draws (σ = 0.05) to spurious minima, against 0 of 10 without.  Use it when
    parameters are orders of magnitude from 1 (α-pinene: 11 iterations with it,
    ``Restoration_Failed`` without).

    Returns
    -------
    EstimationResult
        ``approach='multiple_shooting'``; ``states`` (the interval trajectories
        on the full grid), ``fitted`` (from the node values, eq. (7)) and
        ``extra`` (``nodes``, ``node_values(_initial)``,
        ``node_trajectories(_initial)``, ``defects``, ``max_defect``,
        ``continuity_multipliers``, ``history``, ``init``) as in
        docs/multiple_shooting.md, "Result".  With several experiments the
        frames are indexed by ``(experiment, time)``, ``extra['experiments']``
        holds each experiment's extras and ``max_defect`` is the largest.
        Constraint multipliers: ``multipliers['path_<name>']`` and
        ``extra['parameter_constraint_multipliers']`` (as the reduced space).
    """
    return ShootingApproach().estimate(problem, *args, **options)


def shooting_nlp(problem, scheme="adams_pc", qmax=None, grid=None, max_step=None,
                 steps_per_interval=None, nodes=None, formulation="vector",
                 jacobian="sensitivity", u0=None, init="data"):
    """The :class:`ShootingNLP` of ``problem`` (arguments as for
    :func:`estimate_multiple_shooting`) and the node initialization used per
    experiment."""
    a = ShootingApproach()
    cfg = a.configure(dict(scheme=scheme, qmax=qmax, grid=grid, max_step=max_step,
                           steps_per_interval=steps_per_interval, nodes=nodes,
                           formulation=formulation, jacobian=jacobian, u0=u0, init=init))
    built = a.build(problem, cfg, start_values(problem, u0))
    return built.nlp, built.inits


def _node_trajectories(nlp, x):
    """One DataFrame per interval (index: time), NaN rows for a failing interval."""
    S, u = nlp.split(x)
    out = []
    for j, dm in enumerate(nlp.im.models):
        try:
            X = dm.simulate(np.concatenate([u, S[j]])).X
        except SimulationError:
            X = np.full((len(dm.t), nlp.nx), np.nan)
        out.append(pd.DataFrame(X, index=pd.Index(dm.t, name="time"), columns=nlp.problem.states))
    return out
