r"""Simultaneous estimation: states and parameters solved together by Ipopt.

The Pyomo block of :func:`~pyomo_odeest.transcription._block.build_block` is solved by the
``odeest_ipopt`` solver.  Multiplier convention: the constraint of step i is
stored with body ``x_{i+1} - x_i - h_i F_i`` (``x_0 - l(u)`` for the initial
condition), which is [GM-grad]'s G; Ipopt's Lagrangian ``J + λᵀ G`` is [GM-grad]'s
``F + pᵀ G``, so the multiplier of the equation defining ``x_i`` *is* the
adjoint ``p_i`` of eq. (52) (objective not scaled: the solver does not rescale
the objective unless the user sets ``nlp_scaling_method``/``obj_scaling_factor``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import sympy

from ..transcription._block import build_block, scheme_constraint
from ..transcription._experiments import build_experiment_blocks
from ..transcription._initial_state import initialize_steady_state, steady_state_mismatch
from ..problem._misfit import misfit_constant, observations
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import EstimationResult
from ..problem._status import Status, demote
from ..discretization._size_guard import validate_estimator
from ._backend import KKTBackend, blocks_of
from ._base import (Approach, Choice, ConfigValue, Outcome, common_config, discretization_config, refinement_config,
                    fit_frames, ipopt_options, ode_states)
from ..discretization.schemes import STIFF_SCHEME, integrate, stiff_switch
from ..symbolic._vectorfn import VectorFn
from ..nlp._plugin import OdeestIpoptSolver, add_scaling_factors
from ..symbolic import lambdify

__all__ = ["SimultaneousApproach", "estimate_simultaneous", "simulate", "numeric_functions",
           "initialize_block"]


def numeric_functions(problem: EstimationProblem, u):
    """``f(x, t)``, ``fdot(x, t)`` and their x-Jacobians at fixed parameters ``u``."""
    u = np.asarray(u, dtype=float)

    def num(expr):
        fn = lambdify((problem.x_sym, problem.u_sym, problem.t_sym), expr, "numpy")
        return lambda x, t: np.array(fn(x, u, t), dtype=float)

    f, fd = list(problem.f_sym), list(problem.fdot_sym())
    jf, jd = (sympy.Matrix(e).jacobian(problem.x_sym) for e in (f, fd))
    return dict(f=num(f), jac=num(jf), fdot=num(fd), fdot_jac=num(jd))


def simulate(problem: EstimationProblem, scheme, t, u=None, restarts=()):
    """States of the discrete scheme on grid ``t`` (restarting the order ramp at
    ``restarts``, or ``t.restarts`` for a Grid) at parameters ``u`` ((k+1, n))."""
    u = problem.u0 if u is None else np.asarray(u, dtype=float)
    fn = numeric_functions(problem, u)
    x0 = problem.initial_state(u)
    return integrate(scheme, fn["f"], t, x0, fdot=fn["fdot"], jac=fn["jac"],
                     fdot_jac=fn["fdot_jac"], restarts=restarts or getattr(t, "restarts", ()))


def _stage_values(b, X, u):
    """Values of the non-x stages of every step given the states X, one
    vectorised evaluation of f (ḟ) per stage term and order batch.

    Returns ``{stage name: (k, n) array}``.
    """
    problem = b.problem
    t = np.asarray(b.grid.t, dtype=float)
    k, n = len(t) - 1, len(problem.states)
    args = (problem.x_sym, problem.u_sym, problem.t_sym)
    fns = {False: VectorFn(problem.f_sym, *args)}
    if b.scheme.needs_fdot:
        fns[True] = VectorFn(problem.fdot_sym(), *args)
    at_grid = {}

    def on_grid(is_dot, idx):
        if is_dot not in at_grid:
            at_grid[is_dot] = fns[is_dot](X, u, t)
        return at_grid[is_dot][idx]

    out = {name: np.full((k, n), np.nan) for name in b.scheme.stage_names if name != "x"}
    for batch in b.scheme.batches(t, b.grid.restarts):
        steps = batch.steps
        h = t[steps + 1] - t[steps]
        vals = {}
        for name, f_terms, d_terms in batch.stages:
            if name == "x":
                break
            v = X[steps].copy()
            for terms, power, is_dot in ((f_terms, 1, False), (d_terms, 2, True)):
                for pref, c in terms:
                    if pref.kind == "past":
                        fz = on_grid(is_dot, steps - pref.lag)
                    elif pref.kind == "new":
                        fz = on_grid(is_dot, steps + 1)
                    else:
                        fz = fns[is_dot](vals[pref.stage], u, t[steps + 1])
                    v += (h ** power * c)[:, None] * fz
            vals[name] = v
            out[name][steps] = v
    return out


def _load(var, values):
    """Values of a (step, state)-indexed Var from an array in that order."""
    datas = list(var.values())
    if len(datas) != values.size:
        raise ValueError(f"{var.name} has {len(datas)} entries, expected {values.size}")
    for vd, val in zip(datas, values.ravel().tolist()):
        vd.set_value(val, skip_validation=True)


def initialize_block(b, u=None, init="auto", ode=None):
    """Set start values of states and stages.

    ``init``: ``'simulate'`` (run the scheme at ``u``), ``'data'`` (interpolate
    the measurements of observed states, x_0 elsewhere), or ``'auto'``: the
    scheme's simulation; where it fails or the values it predicts for the
    measurements leave the data's range by more than a factor 100 (an explicit
    scheme beyond its stability on a stiff problem),
    ``ode(t)``, the ODE's states on the grid by a stiff integrator, when given;
    the data where that fails too.  Returns the strategy used (``'simulate'``,
    ``'ode'`` or ``'data'``).
    """
    problem = b.problem
    u = problem.u0 if u is None else np.asarray(u, dtype=float)
    t = np.asarray(b.grid.t)
    X, used = None, init
    if init not in ("auto", "simulate", "data"):
        raise ValueError(f"init must be 'auto', 'simulate' or 'data', got {init!r}")
    scale = 100 * (1 + np.nanmax(np.abs(problem.data.to_numpy())))
    measured = np.asarray(problem.mask, dtype=bool)

    def plausible(X):
        """Finite, and the measured values it predicts within a factor 100 of the data's
        range (the states themselves may have another scale than the observables:
        PEtab's scaled and offset outputs); the states within 1e6 of that."""
        if X is None or not np.all(np.isfinite(X)):
            return False
        Z = observations(problem, X[np.asarray(b.grid.J, dtype=int)], u).to_numpy(dtype=float)
        z = Z[measured]
        return bool(np.all(np.isfinite(z)) and np.max(np.abs(z), initial=0.0) <= scale
                    and np.max(np.abs(X)) <= 1e6 * (scale + np.max(np.abs(X[0]))))

    if init in ("auto", "simulate"):
        try:
            with np.errstate(all="ignore"):          # a non-finite trajectory falls back below
                X = simulate(problem, b.scheme, t, u, b.grid.restarts)
        except (RuntimeError, FloatingPointError, OverflowError, ValueError):
            if init == "simulate":
                raise
            X = None
        used = "simulate"
        if init == "auto" and not plausible(X):
            X, used = (ode(t) if ode is not None else None), "ode"
            if not plausible(X):
                X = None
    if X is None:
        X, used = problem.interpolate_states(t, u), "data"
    _load(b.x, X)
    initialize_steady_state(b, problem, u)
    with np.errstate(all="ignore"):
        stages = _stage_values(b, X, u)
    for name, v in stages.items():
        _load(b.component(name), np.where(np.isfinite(v), v, X[1:]))
    return used


def _states(b) -> np.ndarray:
    """The block's current state values, (k+1, n)."""
    S = b.problem.states
    return np.array([[b.x[i, s].value for s in S] for i in range(len(b.grid.t))], dtype=float)


class SimultaneousApproach(Approach):
    """States and parameters solved together: the Pyomo block of the scheme
    (:func:`~pyomo_odeest.transcription._block.build_block`; several experiments:
    :func:`~pyomo_odeest.transcription._experiments.build_experiment_blocks`) solved by
    the ``odeest_ipopt`` solver.

    Own options: ``init`` (``'auto'`` | ``'simulate'`` | ``'data'``, the state
    initialization of :func:`initialize_block`) and ``model`` (a ConcreteModel
    that already holds such a block as ``model.est``, with user constraints or
    objective terms; solved as is).  ``scale`` scales each free parameter by
    its start value and every state whose magnitude exceeds 1 on the initial
    trajectory by that magnitude (:func:`scale_states`), through the model's
    ``scaling_factor`` Suffix (factors the user set there are kept).
    """

    name = "simultaneous"
    CONFIG = common_config()
    CONFIG.declare_from(discretization_config())
    CONFIG.declare_from(refinement_config())
    CONFIG.declare("init", ConfigValue(default="auto", domain=Choice(
        "init", "auto", "simulate", "data"), description="state initialization"))
    CONFIG.declare("model", ConfigValue(default=None, description=(
        "a ConcreteModel holding a block of build_block as model.est, solved as is")))

    def advice(self, cfg):
        return ("init='simulate' (states from a simulation at u0; if it fails or leaves the "
                "data's range, a better u0 helps), approach='reduced_space' (each iteration "
                "simulates, so the states are always consistent; see docs/choosing.md) and then "
                "the simultaneous solve from u0=its estimates, multiple_shooting")

    def validate(self, problem, cfg):
        validate_estimator(self.name, problem, needs_free=False,
                           **{k: cfg[k] for k in cfg.keys() if k not in ("u0", "model")})

    def build(self, problem, cfg, u_start):
        multi = bool(problem.experiments)
        if cfg.model is None:
            m = pyo.ConcreteModel(name=problem.name)
            disc = (cfg.scheme, cfg.qmax, cfg.grid, cfg.max_step, cfg.steps_per_interval)
            m.est = (build_experiment_blocks(problem, *disc) if multi
                     else build_block(problem, *disc))
        else:
            m = cfg.model
            kind = "experiment_blocks" if multi else "formulas"
            if getattr(m, "est", None) is None or not hasattr(m.est, kind):
                raise ProblemError("model must hold a block built by "
                                   + ("build_experiment_blocks" if multi else "build_block")
                                   + " as model.est")
            for p in problem.parameters:      # held by the problem (a refit, a profile)
                if p.fixed and p.name in m.est.u:
                    m.est.u[p.name].fix(float(p.value))
        init, switched = self._initialize(m, problem, cfg, u_start)
        if switched:                           # stiff at the start: Enright instead
            m = pyo.ConcreteModel(name=problem.name)
            disc = (switched[0], cfg.qmax, cfg.grid, cfg.max_step, cfg.steps_per_interval)
            m.est = (build_experiment_blocks(problem, *disc) if multi
                     else build_block(problem, *disc))
            init, _ = self._initialize(m, problem, cfg, u_start, check=False)
        b = m.est
        blocks = blocks_of(b)
        # with every experiment's states simulated at the start the point is feasible
        # and its objective comparable with the result's
        j0 = (float(pyo.value(b.objective)) + misfit_constant(problem)
              if all(i == "simulate" for i in init) else float("nan"))
        if cfg.scale:
            scale_parameters(m, b)
            scale_states(m, b, simulated=[i != "data" for i in init])
        if not hasattr(m, "dual"):
            m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
        return m, init, j0, switched

    def _initialize(self, m, problem, cfg, u_start, check=True):
        """Start values of the blocks of ``m`` (:func:`initialize_block`, the ODE's
        states by LSODA where the scheme's simulation fails); with ``check`` and a
        scheme the user did not choose, ``(scheme name, reason)`` when the start's
        trajectory is stiff beyond the scheme's stability and Enright is stable there."""
        b = m.est
        for p, v in zip(problem.parameter_names, u_start):
            if not b.u[p].fixed:
                b.u[p].set_value(float(v))
        u = np.array([pyo.value(b.u[p]) for p in problem.parameter_names])
        init, switched = [], None
        for sb in blocks_of(b):
            init.append(initialize_block(sb, u, cfg.init, ode=ode_states(sb.problem, u)))
            if check and switched is None and "scheme" not in self.given:
                why = stiff_switch(sb.problem, sb.scheme, sb.grid.t, _states(sb), u)
                switched = (STIFF_SCHEME, why) if why else None
        return init, switched

    def solve(self, built, cfg):
        m, _, j0, _ = built
        solver = OdeestIpoptSolver()
        # a simulated start satisfies the scheme: Ipopt starts from its discrete adjoint
        # [GM-grad, eq. (52)], the multipliers of the solution it moves towards
        decisions = list(m.est.u.values()) if np.isfinite(j0) else None
        solver.solve(m, options=ipopt_options(cfg, start=parameter_start(m)), tee=cfg.tee,
                     progress=cfg.progress, adjoint_start=decisions)
        info = solver.last_info
        out = Outcome.from_ipopt(info)
        out.timings = dict(setup_s=info["setup_s"], eval_s=info["eval_s"])
        out.objective_start = j0
        return out

    def parts(self, built):
        return blocks_of(built[0].est)

    def collect(self, problem, built, outcome, cfg):
        m, init, _, switched = built
        b = m.est
        names = problem.experiment_names
        u = np.array([pyo.value(b.u[p]) for p in problem.parameter_names])
        res = EstimationResult(
            approach=self.name, method="ipopt/exact-hessian", scheme=self.parts(built)[0].scheme,
            estimates=pd.Series(u, index=problem.parameter_names, name="estimate"),
            objective=float(pyo.value(b.objective)) + misfit_constant(problem),
            status=outcome.status, iterations=outcome.iterations,
            evaluations=outcome.counts, model=m)
        res.extra["init"] = dict(zip(names, init)) if names else init[0]
        if switched:
            res.warnings.append(switched[1])
        res.backend = KKTBackend(problem, m)
        wrong = [w for blk in self.parts(built) for w in steady_state_mismatch(blk, res.x)]
        if wrong:                             # a root of G = 0 that is not the steady state
            demote(res, Status.FAILED, wrong[0], force=True)
            res.warnings.extend(wrong)
        dual = getattr(m, "dual", None)
        if problem.parameter_constraints and dual is not None:
            res.extra["parameter_constraint_multipliers"] = {
                pc.name: float(dual.get(b.component(f"param_{pc.name}"), np.nan))
                for pc, _ in problem.parameter_constraints}
        return res

    def collect_experiment(self, problem, b, u, solved, outcome):
        return _frames(b, solved[0])


def estimate_simultaneous(problem: EstimationProblem, *args, **options):
    """Estimate the parameters by solving the full discretized NLP with Ipopt:
    ``estimate(problem, 'simultaneous', ...)`` (:class:`SimultaneousApproach`;
    the discretization options may be given positionally: ``scheme, qmax, grid,
    max_step, steps_per_interval``).

    Returns
    -------
    EstimationResult
    """
    return SimultaneousApproach().estimate(problem, *args, **options)


def parameter_start(m):
    """``(x, lb, ub)`` of the free parameters of ``m.est`` in Ipopt's scaled variables
    (``m.scaling_factor``), for :func:`~pyomo_odeest.approaches._base.start_push`."""
    sf = getattr(m, "scaling_factor", None)
    rows = []
    for v in m.est.u.values():
        if v.fixed:
            continue
        d = float(sf.get(v, 1.0)) if isinstance(sf, pyo.Suffix) else 1.0
        rows.append((d * float(v.value), d * (-np.inf if v.lb is None else v.lb),
                     d * (np.inf if v.ub is None else v.ub)))
    return tuple(np.array(c, dtype=float) for c in zip(*rows)) if rows else None


def scale_parameters(m, b):
    """Put ``1/|u_k|`` (1 where u_k = 0) on ``m.scaling_factor`` for every free
    parameter of block ``b`` that has no factor there yet."""
    sf = getattr(m, "scaling_factor", None)
    if sf is not None and not isinstance(sf, pyo.Suffix):
        raise ProblemError("model.scaling_factor exists and is not a Suffix")
    add_scaling_factors(m, [b.u[p] for p in b.problem.parameter_names])


def scale_states(m, b, simulated=None):
    """Put ``1/max_i |x_{i,s}|`` on ``m.scaling_factor`` for the values of every
    state ``s`` (grid points and stages) that exceeds 1 in magnitude on the
    block's current (initial) trajectory, where no factor is set yet; on an
    experiment whose trajectory is simulated (``simulated[e]``: by the scheme or
    the ODE, not interpolated data) also for the states below 1 in magnitude
    (not below 1e-8 times the largest state: Robertson's intermediate of 1e-5
    beside concentrations of 1).

    States of 1e5 next to parameters of 1e-10 (PEtab's Crauste problem) make
    Ipopt's path depend on round-off; with the states O(1) it is not.  States
    of magnitude at most 1 are left alone (scaling up a state that is small
    because it starts at 0 would amplify noise).  ``b`` is a block of
    :func:`build_block` or of :func:`build_experiment_blocks` (each experiment
    scaled on its own trajectory)."""
    sf = add_scaling_factors(m, [])
    blocks = blocks_of(b)
    simulated = [False] * len(blocks) if simulated is None else list(simulated)
    for blk, sim in zip(blocks, simulated):
        S = blk.problem.states
        k = len(blk.t) - 1
        stages = [blk.component(st) for st in blk.scheme.stage_names if st != "x"]
        mags = {s: max((abs(v) for v in (blk.x[i, s].value for i in range(k + 1))
                        if v is not None and np.isfinite(v)), default=0.0) for s in S}
        floor = 1e-8 * max(mags.values(), default=0.0)
        for s in S:
            big = mags[s]
            if not (big > 1.0 or (sim and big > floor and big > 0.0)):
                continue
            for var in [blk.x[i, s] for i in range(k + 1)] + [c[i, s] for c in stages
                                                                if c is not None for i in range(k)]:
                if not var.fixed and var not in sf:
                    sf[var] = 1.0 / big


def _frames(b, m):
    """States, fitted observations, residuals, adjoint and multipliers of a solved block."""
    problem = b.problem
    S = problem.states
    t = np.asarray(b.grid.t)
    X = np.array([[pyo.value(b.x[i, s]) for s in S] for i in range(len(t))])
    u = np.array([pyo.value(b.u[p]) for p in problem.parameter_names])
    out = dict(fit_frames(problem, t, X, X[np.asarray(b.grid.J)], u), adjoint=None,
               multipliers={}, grid=b.grid)
    dual = getattr(m, "dual", None)
    if dual is not None and len(dual):
        k = len(t) - 1
        mults = out["multipliers"]
        for st in b.scheme.stage_names:
            mults[st] = pd.DataFrame(
                [[dual.get(scheme_constraint(b, i, s, st), np.nan) for s in S] for i in range(k)],
                index=pd.Index(range(k), name="step"), columns=S)
        p0 = [dual.get(b.x0_eq[s], np.nan) for s in S]
        out["adjoint"] = pd.DataFrame(np.vstack([p0, mults["x"].to_numpy()]),
                                      index=pd.Index(range(k + 1), name="i"), columns=S)
        for pc, _ in problem.path_constraints:
            con = b.component(f"path_{pc.name}")
            idx = list(con.keys())
            mults[f"path_{pc.name}"] = pd.DataFrame(
                {pc.name: [dual.get(con[i], np.nan) for i in idx]},
                index=pd.Index(t[idx], name="time"))
    return out
