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

from ..transcription._block import build_block, scheme_constraint
from ..transcription._experiments import build_experiment_blocks
from ..transcription._initial_state import steady_state_mismatch
from ..problem._misfit import misfit_constant
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import EstimationResult
from ..problem._status import Status, demote
from ..discretization._size_guard import validate_estimator
from ._backend import KKTBackend
from ._base import (Approach, Choice, ConfigValue, Outcome, common_config,
                    discretization_config, fit_frames, ipopt_options, ode_states,
                    refinement_config, region_bounds, watch_config)
from ._certificate import grid_fits, watch_of, watch_outcome
from ..discretization.schemes import STIFF_SCHEME, stiff_switch
from ..nlp._plugin import OdeestIpoptSolver
from ..transcription._initialize import (block_states, blocks_of, initialize_block,
                                         parameter_start, scale_parameters, scale_states)

__all__ = ["SimultaneousApproach", "estimate_simultaneous"]


def _set_bounds(m, problem, region):
    """The bounds of the model's free parameters: the problem's, within the refinement
    stage's trust ``region`` where one is given."""
    lb, ub = region_bounds(problem, region)
    for p, lo, hi in zip(problem.parameter_names, lb, ub):
        v = m.est.u[p]
        if not v.fixed:
            v.setlb(None if np.isinf(lo) else float(lo))
            v.setub(None if np.isinf(hi) else float(hi))


def _block_point(m):
    """The :class:`~pyomo_odeest.approaches._certificate.GridWatch`'s point of a
    simultaneous model: parameters, fitted values and objective on the grid from its
    variables (the solver's ``iterate()`` has loaded the iterate into them)."""
    def point(_x):
        b = m.est
        problem = b.problem
        u = np.array([pyo.value(b.u[p]) for p in problem.parameter_names], dtype=float)
        fitted, resid = grid_fits(((sb.problem, sb.grid.t, block_states(sb), sb.grid.J)
                                   for sb in blocks_of(b)), u)
        return u, fitted, resid, float(pyo.value(b.objective)) + misfit_constant(problem)
    return point


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
    trajectory by that magnitude (:func:`scale_states`: the parameters' factors on
    the model's ``scaling_factor`` Suffix, the states' one per state on the block;
    factors the user set on the Suffix are kept).
    """

    name = "simultaneous"
    #: Ipopt options of the approach's solve, below the user's ``options``: MUMPS's pivot
    #: tolerance 1e-4 (Ipopt's is 1e-6, with which MUMPS's inertia of a stiff problem's
    #: KKT system can be wrong, and Ipopt then raises its regularization to 1e15 and
    #: MUMPS its memory many times over; see docs/solver.md, "Pivot tolerance")
    IPOPT_DEFAULTS = {"mumps_pivtol": 1e-4}
    CONFIG = common_config()
    CONFIG.declare_from(discretization_config())
    CONFIG.declare_from(refinement_config())
    CONFIG.declare("init", ConfigValue(default="auto", domain=Choice(
        "init", "auto", "simulate", "data"), description="state initialization"))
    CONFIG.declare("model", ConfigValue(default=None, description=(
        "a ConcreteModel holding a block of build_block as model.est, solved as is")))
    CONFIG.declare_from(watch_config())

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
        if cfg.region:                         # a round of the stage's trust region
            _set_bounds(m, problem, cfg.region)
        init, switched = self._initialize(m, problem, cfg, u_start)
        if switched:                           # stiff at the start: Enright instead
            m = pyo.ConcreteModel(name=problem.name)
            disc = (switched[0], cfg.qmax, cfg.grid, cfg.max_step, cfg.steps_per_interval)
            m.est = (build_experiment_blocks(problem, *disc) if multi
                     else build_block(problem, *disc))
            if cfg.region:
                _set_bounds(m, problem, cfg.region)
            init, _ = self._initialize(m, problem, cfg, u_start, check=False)
        b = m.est
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
                why = stiff_switch(sb.problem, sb.scheme, sb.grid.t, block_states(sb), u)
                switched = (STIFF_SCHEME, why) if why else None
        return init, switched

    def solve(self, built, cfg):
        m, _, j0, _ = built
        solver = OdeestIpoptSolver()
        # a simulated start satisfies the scheme: Ipopt starts from its discrete adjoint
        # [GM-grad, eq. (52)], the multipliers of the solution it moves towards
        decisions = list(m.est.u.values()) if np.isfinite(j0) else None
        watch = watch_of(cfg, m.est.problem, _block_point(m))
        options = ipopt_options(cfg, start=parameter_start(m), **self.IPOPT_DEFAULTS)
        solver.solve(m, options=options, tee=cfg.tee, progress=cfg.progress,
                     adjoint_start=decisions, intermediate_callback=watch)
        info = solver.last_info
        out = Outcome.from_ipopt(info)
        out.timings = dict(setup_s=info["setup_s"], eval_s=info["eval_s"])
        out.objective_start = j0
        # the solve's evaluator forms the KKT system of the solution (one set-up, not two)
        out.details["evaluator"] = getattr(solver, "evaluator", None)
        return watch_outcome(out, watch)           # refinement before convergence

    def parts(self, built):
        return blocks_of(built[0].est)

    def collect(self, problem, built, outcome, cfg):
        m, init, _, switched = built
        b = m.est
        if cfg.region:                        # the model keeps the problem's bounds
            _set_bounds(m, problem, None)
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
        res.backend = KKTBackend(problem, m, evaluator=outcome.details.get("evaluator"))
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
