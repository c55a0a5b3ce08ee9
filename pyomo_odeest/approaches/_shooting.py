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
:math:`[\tau_j, \tau_{j+1}]`.  When every measurement time is a node
(Assumption 1, the default node set :math:`\{t_0\} \cup \{\tau_j\} \cup \{T\}`)
the objective depends on the node values only (eq. (7), Remark 2).  A
measurement time that is not a node is evaluated on the interval trajectory
(the classical form (3)); this is what makes multiple shooting with the single
interval ``nodes=(t0, T)`` the single-shooting problem.

Discretization.  Each interval is an :class:`~pyomo_odeest.problem._declaration.EstimationProblem`
without data (``t0 = τ_j``, ``T = τ_{j+1}``, parameters = the problem's
parameters followed by ``n`` node parameters ``s_<state>``, initial state =
those node parameters) rendered as a :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`
on the sub-grid of the full problem's grid between the two nodes: the same
scheme equations as the Pyomo block and the reduced space.  **The multistep
order ramp** :math:`Q_i = \min(i+1, Q_{\max}-1)` **restarts at every node**
(the history of a multistep scheme does not cross a node, whose value is a free
variable), so for ``N > 1`` the discrete interval trajectories are not the
sub-trajectories of the single-shooting simulation even at a continuous point;
with one interval they are, bit for bit.

Derivatives of the continuity constraints [AT, eq. (6)]:

* ``jacobian="sensitivity"``: the forward sensitivities of the interval
  [GM-grad, eq. (51), :meth:`~pyomo_odeest.discretization.discrete.DiscreteModel.state_sensitivities`],
  row block :math:`[\,\partial x_j(\tau_{j+1})/\partial s_j,\ -I,\
  \partial x_j(\tau_{j+1})/\partial p\,]`;
* ``jacobian="adjoint"``: eq. (17) once per component, i.e. ``n`` adjoint
  sweeps per interval (:meth:`~pyomo_odeest.discretization.discrete.DiscreteModel.functional_gradient`
  with ``dFdx[-1] = e_r``), the :math:`d^2` adjoint equations of [AT] §3.

The modified problem (8), ``formulation="scalar"``, replaces the ``n``
constraints of interval ``j`` by :math:`h^{(j)} = \|G_j\|_2^2 = 0`, whose
gradient needs one adjoint sweep (eq. (17)) with terminal value
:math:`\lambda(\tau_{j+1}) = 2 G_j` plus the explicit
:math:`\partial h^{(j)}/\partial s_{j+1} = -2 G_j` (:math:`2n + m` non-zeros).

Scalar form and interior-point solvers.  :math:`\nabla h^{(j)} = 2 J_j^\top G_j`
(:math:`J_j` the Jacobian of :math:`G_j`) vanishes at *every* feasible point:
the constraint Jacobian of (8) is zero at the solution, LICQ (and MFCQ) fail,
and the KKT multipliers of (8) are unbounded — comparing with (4),
:math:`\lambda_j = 2\mu_j G_j`, so :math:`\mu_j = \|\lambda_j\| / (2\|G_j\|)
\to \infty`.  A Newton step on :math:`h = \|G\|^2` roughly halves :math:`\|G\|`
(quadratic constraint with zero derivative at the root), so the feasibility
error decreases linearly at best: Ipopt does not converge on it where the
vector form (4) does (measured in ``docs/multiple_shooting.md``, "The scalar
form (8) in an interior-point method").  The scalar form is kept for the
gradient identity (17), not as a recommended solver setting.

Hessian: Ipopt's limited-memory quasi-Newton approximation
(``hessian_approximation=limited-memory``) of the Lagrangian.
"""
from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import sympy

from ..problem._misfit import misfit_constant, misfit_sym, observations
from ..discretization.discrete import DiscreteModel, SimulationError
from ..discretization._grid import Grid, make_grid, resolve_grid
from ..nlp._cyipopt_adapter import start_value_scaling
from ..nlp._protocol import EvaluationError, NLPEvaluator
from ..problem._declaration import EstimationProblem, Parameter, ProblemError
from ..problem._result import EstimationResult
from ..discretization._experiments import experiment_option
from ..discretization.schemes import get_scheme
from ..symbolic import lambdify
from ..problem._start import start_values
from ._backend import ShootingBackend
from ._base import (Approach, Choice, ConfigValue, Outcome, common_config, discretization_config,
                    ipopt_options, run_ipopt, add_constraint_multipliers)

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
        self.problem = problem
        self.scheme = scheme
        self.grid = grid
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


def _resolve_nodes(problem, nodes):
    if nodes is None:
        pts = np.concatenate([[problem.t0], problem.meas_times, [problem.T]])
    else:
        pts = np.atleast_1d(np.asarray(nodes, dtype=float))
        if pts.ndim != 1 or not np.all(np.isfinite(pts)):
            raise ProblemError("nodes must be a 1-D sequence of finite times")
        if np.any(pts < problem.t0) or np.any(pts > problem.T):
            raise ProblemError(f"nodes must lie in [t0, T] = [{problem.t0}, {problem.T}]")
        pts = np.concatenate([[problem.t0], pts, [problem.T]])
    return np.unique(pts)


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
    im = cache.get(key)
    if im is None:
        im = IntervalModels(problem, sch, grid, node_t)
        cache[key] = im
    return im


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
    x0 = problem.initial_state(u)
    S = problem.interpolate_states(nodes, u)
    S[0] = x0
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
class MultipleShootingNLP(NLPEvaluator):
    r"""Problem (4) (``formulation="vector"``) or (8) (``"scalar"``) of [AT].

    Variables ``x = (s_0, ..., s_N, p_free)`` (node values row by node, then
    the free parameters).  Constraints, in this order:

    * if :math:`x_0 = l(u)` depends on free parameters: :math:`s_0 - l(p) = 0`
      (``n`` rows); otherwise :math:`s_0` is fixed by equal bounds at
      :math:`l(u)`;
    * per interval ``j``: :math:`G_j = x_j(\tau_{j+1}; s_j, p) - s_{j+1} = 0`
      (``n`` rows, eq. (4)) or :math:`h^{(j)} = \|G_j\|^2 = 0` (one row,
      eq. (8)).

    Objective: eq. (7), :math:`\sum_j \varphi_j` with :func:`~pyomo_odeest.problem._misfit.misfit_sym`
    evaluated at the node value of the measurement time (or on the interval
    trajectory for a measurement time that is not a node), plus the problem's
    penalty :math:`R(u)` if it has one.  Its gradient is
    explicit for node measurements (Remark 2) and one adjoint sweep per
    interval holding off-node measurements.  A failing interval simulation
    raises :class:`~pyomo_odeest.nlp._protocol.EvaluationError` (Ipopt cuts
    the step).  No exact Hessian: use ``hessian_approximation=limited-memory``.
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
        l_free = set().union(*[e.free_symbols for e in P.l_sym]) & free_syms
        self.init_rows = bool(l_free)
        self._l = lambdify((P.u_sym,), list(P.l_sym), "numpy")
        self._lu = lambdify((P.u_sym,), sympy.Matrix(P.l_sym).jacobian(P.u_sym), "numpy")
        # bounds
        lb = np.array([-np.inf if p.lb is None else p.lb for p in P.parameters])
        ub = np.array([np.inf if p.ub is None else p.ub for p in P.parameters])
        self.x_lb = np.concatenate([np.full(self.ns, -np.inf), lb[self.free]])
        self.x_ub = np.concatenate([np.full(self.ns, np.inf), ub[self.free]])
        if not self.init_rows:
            l0 = self.l(self.u_full)
            self.x_lb[:nx] = l0
            self.x_ub[:nx] = l0
        S0 = np.tile(self.l(self.u_full), (self.N + 1, 1)) if S0 is None else np.asarray(S0, float)
        if S0.shape != (self.N + 1, nx):
            raise ValueError(f"node start values must have shape {(self.N + 1, nx)}")
        self.x0 = np.concatenate([S0.ravel(), np.clip(self.u_full[self.free], lb[self.free],
                                                      ub[self.free])])
        if not self.init_rows:
            self.x0[:nx] = self.x_lb[:nx]
        # constraints
        per = nx if formulation == "vector" else 1
        self.r_init = nx if self.init_rows else 0
        self.m = self.r_init + self.N * per
        self.g_lb = np.zeros(self.m)
        self.g_ub = np.zeros(self.m)
        self._measurements()
        self._structure()
        self._key = None
        self._trajs = None
        self._jkey = None
        self._D = None
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
            phi = misfit_sym(P, j)
            phi = sympy.sympify(phi)
            self.phi.append(lambdify((xs, us), phi, "numpy"))
            self.phix.append(lambdify((xs, us), [sympy.diff(phi, v) for v in xs], "numpy"))
            self.phiu.append(lambdify((xs, us), [sympy.diff(phi, v) for v in us], "numpy"))
            hit = np.flatnonzero(im.node_index == gi)
            if len(hit):
                self.node_meas.append((j, int(hit[0])))
            else:
                a = int(np.searchsorted(im.node_index, gi)) - 1
                self.off_meas.setdefault(a, []).append((j, int(gi - im.node_index[a])))

    def _structure(self):
        nx, N, ns = self.nx, self.N, self.ns
        pcols = ns + np.arange(len(self.free))
        rows, cols = [], []
        r0 = 0
        if self.init_rows:
            c = np.concatenate([np.arange(nx), pcols])
            rows.append(np.repeat(np.arange(nx), len(c)))
            cols.append(np.tile(c, nx))
            r0 = nx
        per = nx if self.formulation == "vector" else 1
        for j in range(N):
            c = np.concatenate([j * nx + np.arange(nx), (j + 1) * nx + np.arange(nx), pcols])
            rows.append(np.repeat(r0 + j * per + np.arange(per), len(c)))
            cols.append(np.tile(c, per))
        self._jr = np.concatenate(rows).astype(int) if rows else np.zeros(0, int)
        self._jc = np.concatenate(cols).astype(int) if cols else np.zeros(0, int)

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
        if not np.isfinite(v):
            raise EvaluationError("non-finite objective")
        return v

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
        g = np.concatenate([gS.ravel(), gu[self.free]])
        if not np.all(np.isfinite(g)):
            raise EvaluationError("non-finite objective gradient")
        return g

    # -- constraints -----------------------------------------------------------
    def constraints(self, x):
        S, u = self.split(x)
        G = self.defects(x)
        parts = []
        if self.init_rows:
            parts.append(S[0] - self.l(u))
        parts.append(G.ravel() if self.formulation == "vector" else np.sum(G * G, axis=1))
        c = np.concatenate(parts)
        if not np.all(np.isfinite(c)):
            raise EvaluationError("non-finite continuity defect")
        return c

    def jacobian_structure(self):
        return self._jr, self._jc

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
                for r in range(nx):
                    dFdx = np.zeros_like(tr.X)
                    dFdx[-1, r] = 1.0
                    self.counts["adjoint_sweeps"] += 1
                    D[j, r] = dm.functional_gradient(tr, dFdx)
        self._jkey = np.asarray(x, float).copy()
        self._D = D
        return D

    def scalar_gradients(self, x):
        r"""Rows :math:`\nabla_{(u, s_j)} h^{(j)}` by one adjoint sweep each (eq. (17)).

        ``dFdx[-1] = 2 G_j``; returns (N, m + n).  The ``s_{j+1}`` part
        :math:`-2G_j` is explicit.
        """
        trajs = self.trajectories(x)
        G = self.defects(x)
        out = np.zeros((self.N, self.mp + self.nx))
        for j, (dm, tr) in enumerate(zip(self.im.models, trajs)):
            dFdx = np.zeros_like(tr.X)
            dFdx[-1] = 2.0 * G[j]
            self.counts["adjoint_sweeps"] += 1
            out[j] = dm.functional_gradient(tr, dFdx)
        return out

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
                if self.formulation == "vector":
                    vals.append(blk.ravel())
                else:
                    vals.append(2.0 * G[j] @ blk)
        v = np.concatenate(vals) if vals else np.zeros(0)
        if not np.all(np.isfinite(v)):
            raise EvaluationError("non-finite constraint Jacobian")
        return v

    # -- Hessian: limited-memory only -----------------------------------------
    def hessian_structure(self):
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)

    def hessian(self, x, lam, obj_factor=1.0):
        raise NotImplementedError("multiple shooting uses hessian_approximation=limited-memory")


class ShootingNLP(NLPEvaluator):
    r"""Multiple shooting of a whole problem: one :class:`MultipleShootingNLP`
    per experiment, the parameters shared, and the problem's constraints.

    Variables ``x = (S^{(1)}, ..., S^{(E)}, p_free)``: the node values of
    each experiment (its own nodes, grid, initial state and data), then the
    free parameters once (global parameters shared, each experiment's copy of
    a local one among them).  Objective: the sum of the experiments'
    objectives (7) (the problem's penalty :math:`R(u)` once, in the first);
    its gradient the sum of theirs, placed in the experiment's node columns
    and the shared parameter columns.  Constraints, in this order:

    * each experiment's initial-state and continuity rows (eq. (4) or (8));
    * path constraints :math:`c(x, u, t) \le 0` at the grid points (or the
      measurement times) of each experiment, evaluated on the interval
      trajectory that holds the point (at a node: the node value
      :math:`s_j`, which starts interval ``j``; at ``T``: the end of the last
      interval), with the exact Jacobian
      :math:`c_x\,\partial x_i/\partial(u, s_j) + c_u` from the interval's
      forward sensitivities [GM-grad, eq. (51)];
    * parameter constraints :math:`r(u) \le 0`.

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
        nf = len(self.free)
        self.n = self.ns + nf
        self.x_lb = np.concatenate([p.x_lb[:p.ns] for p in self.parts] + [p0.x_lb[p0.ns:]])
        self.x_ub = np.concatenate([p.x_ub[:p.ns] for p in self.parts] + [p0.x_ub[p0.ns:]])
        self.x0 = np.concatenate([p.x0[:p.ns] for p in self.parts] + [p0.x0[p0.ns:]])
        self.row_offsets = np.concatenate([[0], np.cumsum([p.m for p in self.parts])]).astype(int)
        self.m_cont = int(self.row_offsets[-1])
        subs = problem.subproblems
        self.paths = []
        for e, (sp, part) in enumerate(zip(subs, self.parts)):
            im = part.im
            for pc, fn, jx, ju in sp.path_constraint_functions():
                pts = (np.arange(len(im.grid.t)) if pc.at == "grid"
                       else np.unique(np.asarray(im.grid.J, dtype=int)))
                a = np.clip(np.searchsorted(im.node_index, pts, side="right") - 1, 0, im.N - 1)
                self.paths.append(dict(
                    e=e, name=pc.name, pts=pts, interval=a, local=pts - im.node_index[a],
                    t=np.asarray(im.grid.t, dtype=float)[pts], fn=fn, jx=jx, ju=ju))
        pcs = problem.parameter_constraints
        self._r, self._dr = problem.parameter_constraint_functions()
        self.parameter_constraint_names = [pc.name for pc, _ in pcs]
        self.m_path = sum(len(d["pts"]) for d in self.paths)
        self.m = self.m_cont + self.m_path + len(pcs)
        self.g_lb = np.concatenate([p.g_lb for p in self.parts]
                                   + [np.full(self.m - self.m_cont, -np.inf)])
        self.g_ub = np.concatenate([p.g_ub for p in self.parts] + [np.zeros(self.m - self.m_cont)])
        self._structure()

    # -- layout ----------------------------------------------------------------
    def part_x(self, x, e):
        """The point of experiment ``e``'s :class:`MultipleShootingNLP`."""
        x = np.asarray(x, dtype=float)
        return np.concatenate([x[self.offsets[e]:self.offsets[e + 1]], x[self.ns:]])

    def _cols(self, e, c):
        """Columns of experiment ``e``'s NLP in this one."""
        c = np.asarray(c, dtype=int)
        ns_e = self.parts[e].ns
        return np.where(c < ns_e, self.offsets[e] + c, self.ns + (c - ns_e))

    def _structure(self):
        rows, cols = [], []
        for e, part in enumerate(self.parts):
            r, c = part.jacobian_structure()
            rows.append(np.asarray(r, dtype=int) + self.row_offsets[e])
            cols.append(self._cols(e, c))
        pcols = self.ns + np.arange(len(self.free))
        r0 = self.m_cont
        for d in self.paths:
            for a in d["interval"]:
                c = np.concatenate([self.offsets[d["e"]] + a * self.nx + np.arange(self.nx),
                                    pcols])
                rows.append(np.full(len(c), r0))
                cols.append(c)
                r0 += 1
        for _ in self._r:
            rows.append(np.full(len(pcols), r0))
            cols.append(pcols)
            r0 += 1
        self._jr = np.concatenate(rows).astype(int) if rows else np.zeros(0, int)
        self._jc = np.concatenate(cols).astype(int) if cols else np.zeros(0, int)

    def split(self, x):
        """``([S^{(e)}], u_full)`` of an NLP point."""
        x = np.asarray(x, dtype=float)
        S = [x[self.offsets[e]:self.offsets[e + 1]].reshape(-1, self.nx)
             for e in range(len(self.parts))]
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
    def _path_points(self, x, d):
        part = self.parts[d["e"]]
        trajs = part.trajectories(self.part_x(x, d["e"]))
        return np.array([trajs[a].X[i] for a, i in zip(d["interval"], d["local"])])

    def constraints(self, x):
        _, u = self.split(x)
        out = [p.constraints(self.part_x(x, e)) for e, p in enumerate(self.parts)]
        for d in self.paths:
            out.append(d["fn"](self._path_points(x, d), u, d["t"])[:, 0])
        out += [np.atleast_1d(float(r(u))) for r in self._r]
        c = np.concatenate(out) if out else np.zeros(0)
        if not np.all(np.isfinite(c)):
            raise EvaluationError("non-finite constraint value")
        return c

    def jacobian_structure(self):
        return self._jr, self._jc

    def jacobian(self, x):
        _, u = self.split(x)
        vals = [p.jacobian(self.part_x(x, e)) for e, p in enumerate(self.parts)]
        mp, free = self.mp, self.free
        sens = {}
        for d in self.paths:
            part = self.parts[d["e"]]
            trajs = part.trajectories(self.part_x(x, d["e"]))
            X = self._path_points(x, d)
            cx = d["jx"].dense(d["jx"].values(X, u, d["t"]))[:, 0, :]
            cu = d["ju"].dense(d["ju"].values(X, u, d["t"]))[:, 0, :]
            for r, (a, i) in enumerate(zip(d["interval"], d["local"])):
                key = (d["e"], int(a))
                if key not in sens:
                    sens[key] = part.im.models[a].state_sensitivities(trajs[a])
                D = sens[key][i]                              # (n, mp + n)
                row = cx[r] @ D
                vals.append(np.concatenate([row[mp:], row[:mp][free] + cu[r][free]]))
        vals += [np.asarray(dr(u), dtype=float).reshape(-1)[free] for dr in self._dr]
        v = np.concatenate(vals) if vals else np.zeros(0)
        if not np.all(np.isfinite(v)):
            raise EvaluationError("non-finite constraint Jacobian")
        return v

    @property
    def rows(self):
        """``(experiment index, name, times)`` of the path-constraint rows, in order
        (after the ``m_cont`` continuity rows)."""
        return [(d["e"], d["name"], d["t"]) for d in self.paths]

    # -- Hessian: limited-memory only -----------------------------------------
    def hessian_structure(self):
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)

    def hessian(self, x, lam, obj_factor=1.0):
        raise NotImplementedError("multiple shooting uses hessian_approximation=limited-memory")


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
                               inits=[i for _, i in parts], history=[])

    def solve(self, built, cfg):
        nlp, history = built.nlp, built.history

        def record(iter_count, obj_value, inf_pr, inf_du, mu, **_):
            history.append((int(iter_count), float(obj_value), float(inf_pr), float(inf_du),
                            float(mu)))

        try:
            nlp.constraints(nlp.x0)
            nlp.objective(nlp.x0)
        except EvaluationError as err:
            return Outcome.failed_at_start(nlp.x0, err)
        xs = None
        if cfg.scale:
            xs = np.concatenate([np.ones(nlp.ns), start_value_scaling(nlp.x0[nlp.ns:])])
        opts = ipopt_options(cfg, hessian_approximation="limited-memory")
        return Outcome.from_ipopt(run_ipopt(nlp, cfg, opts, intermediate=record, x_scaling=xs))

    def parts(self, built):
        return built.nlp.parts

    def collect(self, problem, built, outcome, cfg):
        nlp, names = built.nlp, problem.experiment_names
        built.x, built.mult = outcome.x, outcome.mult_g
        counts = dict(outcome.counts)
        for p in nlp.parts:
            for k, v in p.counts.items():
                counts[k] = counts.get(k, 0) + v
        _, u = nlp.split(outcome.x)
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
        res.extra.update(init=dict(zip(names, built.inits)) if names else built.inits[0],
                         formulation=cfg.formulation, history=pd.DataFrame(
                             built.history, columns=["iter", "objective", "inf_pr", "inf_du",
                                                     "mu"]))
        if names:
            res.extra["max_defect"] = float(np.max([_max_defect(nlp, outcome.x, e)
                                                    for e in range(len(ims))]))
        res.backend = ShootingBackend(problem, ims, [nlp.split(outcome.x)[0][e] for e in
                                                     range(len(ims))])
        if outcome.mult_g is not None and nlp.m > nlp.m_cont:
            add_constraint_multipliers(res, problem, nlp.rows,
                                       np.asarray(outcome.mult_g)[nlp.m_cont:],
                                       nlp.parameter_constraint_names)
        return res

    def collect_experiment(self, problem, part, u, built):
        nlp = built.nlp
        e = nlp.parts.index(part)
        mult = built.mult
        return _result(problem, part, nlp.part_x(built.x, e), nlp.part_x(nlp.x0, e), None
                       if mult is None else
                       np.asarray(mult)[nlp.row_offsets[e]:nlp.row_offsets[e + 1]])


def _max_defect(nlp, x, e):
    try:
        G = nlp.parts[e].defects(nlp.part_x(x, e))
    except EvaluationError:
        return np.nan
    return float(np.max(np.abs(G))) if G.size else 0.0


def estimate_multiple_shooting(problem: EstimationProblem, *args, **options) -> EstimationResult:
    r"""Estimate the parameters by multiple shooting [AT, problem (4) or (8)] with Ipopt.

    The options, their defaults and domains are declared once, in
    :class:`ShootingApproach`'s configuration (``approach_config('multiple_shooting')``;
    the table in docs/choosing.md).  The discretization options are those of the
    reduced space: each interval integrates on its piece of the grid, the order
    ramp restarting at each node.  The default nodes are
    :math:`\{t_0\} \cup \{\tau_j\} \cup \{T\}` (Assumption 1; ``(t0, T)`` is
    single shooting); ``formulation='scalar'`` imposes :math:`\|G_j\|^2 = 0`
    (eq. (8), degenerate: see the module docstring) instead of :math:`G_j = 0`
    (eq. (4)); ``jacobian`` chooses forward sensitivities (eq. (51)) or adjoint
    sweeps (eq. (17)); ``init='data'`` (:func:`node_start_values`) lets multiple
    shooting start where single shooting cannot simulate ([AT]'s Lotka–Volterra
    start).  Parameter scaling is off by default here: the node values, of the
    states' magnitude, are variables too; on [AT]'s Lotka–Volterra study from
    p0 = (0.5, 0.5, 0.5, −0.2) scaling sent 5 of 10 draws (σ = 0.05) to spurious
    minima, against 0 of 10 without.  Use it when parameters are orders of
    magnitude from 1 (α-pinene: 11 iterations with it, ``Restoration_Failed``
    without).

    Notes
    -----
    Several experiments, inputs and constraints.  Each experiment is shot
    on its own nodes and grid (which contains every switching time of its
    inputs, the order ramp restarting there too), the parameters shared
    (:class:`ShootingNLP`); the problem's path constraints are imposed at the
    grid points (or measurement times) of each experiment on the interval
    trajectories, its parameter constraints on u, both with exact Jacobians;
    the penalty :math:`R(u)` is part of the objective.

    Returns
    -------
    EstimationResult
        ``approach='multiple_shooting'``; ``states`` concatenates the interval
        trajectories on the full grid (row of node :math:`\tau_j` = start
        :math:`s_j` of interval ``j``, the last row = end of the last
        interval) and is discontinuous at the nodes by ``extra['defects']``
        unless converged; ``fitted`` uses the node values (eq. (7)).
        ``extra``: ``nodes``, ``node_values`` / ``node_values_initial``
        (DataFrames), ``defects`` (N × n), ``max_defect``,
        ``node_trajectories`` / ``node_trajectories_initial`` (one DataFrame per
        interval, at the final and initial iterate), ``continuity_multipliers``,
        ``history`` (Ipopt iterations: objective, inf_pr, inf_du),
        ``init``, ``interval_models``.  With several experiments ``states``,
        ``fitted``, ``residuals`` and the node frames are indexed by
        ``(experiment, time)``, ``extra['experiments']`` holds each
        experiment's extras and ``max_defect`` is the largest.  Constraint
        multipliers: ``multipliers['path_<name>']`` and
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


def _result(problem, nlp, x, x_init, mult):
    """Frames and extras of one experiment's shooting NLP at ``x``."""
    im = nlp.im
    S, u = nlp.split(x)
    S_init, _ = nlp.split(x_init)
    cols = problem.states
    node_idx = pd.Index(im.nodes, name="time")
    extra = dict(nodes=im.nodes.copy(), formulation=nlp.formulation,
                 node_values=pd.DataFrame(S, index=node_idx, columns=cols),
                 node_values_initial=pd.DataFrame(S_init, index=node_idx, columns=cols),
                 node_trajectories_initial=_node_trajectories(nlp, x_init),
                 node_trajectories=_node_trajectories(nlp, x))
    out = dict(extra=extra, grid=im.grid)
    try:
        trajs = nlp.trajectories(x)
        G = nlp.defects(x)
        t = np.asarray(im.grid.t)
        X = np.empty((len(t), nlp.nx))
        for j, tr in enumerate(trajs):
            a, b = im.node_index[j], im.node_index[j + 1]
            X[a:b] = tr.X[:-1]
        X[-1] = trajs[-1].X[-1]
        out["states"] = pd.DataFrame(X, index=pd.Index(t, name="time"), columns=cols)
        Xm = np.empty((len(problem.meas_times), nlp.nx))
        for j, a in nlp.node_meas:
            Xm[j] = S[a]
        for a, lst in nlp.off_meas.items():
            for j, i in lst:
                Xm[j] = trajs[a].X[i]
        out["fitted"] = fitted = observations(problem, Xm, u)
        out["residuals"] = (fitted - problem.data).where(problem.mask)
        extra["defects"] = pd.DataFrame(G, index=pd.Index(im.nodes[1:], name="time"), columns=cols)
        extra["max_defect"] = float(np.max(np.abs(G))) if G.size else 0.0
    except EvaluationError as err:
        extra["max_defect"] = np.nan
        out["failed"] = str(err)
    if mult is not None:
        lam = np.asarray(mult)[nlp.r_init:]
        idx = pd.Index(im.nodes[1:], name="time")
        extra["continuity_multipliers"] = (
            pd.DataFrame(lam.reshape(nlp.N, nlp.nx), index=idx, columns=cols)
            if nlp.formulation == "vector" else pd.Series(lam, index=idx))
    return out
