r"""The adaptive approach: model (55) of [GM-grad] (adaptive grid, frozen
accept/reject pattern, :func:`~pyomo_odeest.transcription.build_adaptive_block`)
solved by Ipopt, rebuilt while the pattern at the solution changes."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyomo.environ as pyo

from ..discretization._experiments import experiment_models, join_experiments
from ..discretization.adaptive import AdaptiveError, AdaptiveModel, StepController
from ..discretization.schemes import get_scheme
from ..nlp._plugin import OdeestIpoptSolver
from ..problem._declaration import (EstimationProblem, ProblemError, require_no_constraints,
                                    require_no_inputs)
from ..problem._misfit import observations
from ..problem._result import EstimationResult
from ..problem._status import Status, demote, status_from_ipopt
from ..problem._validation import positive_float, positive_int
from ..transcription._adaptive_block import build_adaptive_block, block_multipliers, run_from_block
from ..transcription._block import set_parameter_vars
from ..transcription._initialize import bounded_start
from ..transcription._experiments import build_experiment_blocks
from ._backend import DiscreteBackend, blocks_of, discrete_model
from ._base import (Approach, Choice, ConfigValue, Outcome, common_config,
                    discretization_config, fit_frames, ipopt_options)
from ._base import _Bool, _Optional
from ._certificate import FIT_TOL

__all__ = ["AdaptiveApproach", "estimate_adaptive"]


def _rebuilds(v):
    return positive_int(v, "max_rebuilds", lo=0)


_rebuilds.domain_name = lambda: "int >= 0"


class AdaptiveApproach(Approach):
    """Model (55): see :func:`estimate_adaptive` for the options (``qmax`` defaults
    to 2; the block is solved unscaled, so there is no ``scale``)."""

    name = "adaptive"
    CONFIG = common_config()
    del CONFIG["scale"]
    CONFIG.declare_from(discretization_config(), skip={"scheme", "grid", "max_step",
                                                       "steps_per_interval"})
    CONFIG.declare("controller", ConfigValue(default=None, description=(
        "the StepController (default: AdaptiveModel's)")))
    CONFIG.declare("max_rebuilds", ConfigValue(default=5, domain=_rebuilds,
        description="rebuilds after a change of the pattern"))
    CONFIG.declare("trust", ConfigValue(default=None, description=(
        "relative trust region of each round (None: none)")))
    CONFIG.declare("model", ConfigValue(default=None, description=(
        "an AdaptiveModel to reuse (a problem without experiments)")))
    CONFIG.declare("h_min", ConfigValue(default=None, domain=_Optional(
        positive_float, "h_min", "float > 0 or None"), description=(
        "smallest step of the adaptive integration (None: the controller's)")))
    CONFIG.declare("max_steps", ConfigValue(default=None, domain=_Optional(
        lambda v, n: positive_int(v, n), "max_steps", "int or None"), description=(
        "most steps of one adaptive integration (None: the controller's)")))
    CONFIG.declare("seed", ConfigValue(default="auto", domain=Choice(
        "seed", "auto", "always", "never"), description=(
        "fixed-grid seed solve where the adaptive integration at the start fails "
        "('auto'), always, or never")))
    CONFIG.declare("fit_tol", ConfigValue(default=FIT_TOL, domain=_Optional(
        positive_float, "fit_tol", "float > 0 or None"), description=(
        "target error of the fitted values in units of sigma (the grid certificate's "
        "fit_tol): the controller's eps is tightened until the estimated error is below "
        "it (None: eps as given; a given model keeps its eps unless fit_tol is given)")))
    CONFIG.declare("certify", ConfigValue(default=True, domain=_Bool("certify"), description=(
        "certify the fitted values at the estimates against an independent simulation "
        "(the grid certificate, with fit_tol or its default; not certified: the status "
        "discretization_not_resolved)")))
    DEFAULTS = {"qmax": 2}
    unresolved_advice = ("the adaptive model tightens its own tolerance with fit_tol "
                         "(default 0.01; None: eps as given)")

    def validate(self, problem, cfg):
        for sp in problem.subproblems:
            require_no_inputs(sp, "the adaptive approach")
        require_no_constraints(problem, "the adaptive approach")
        if cfg.model is not None and problem.experiments:
            raise ProblemError("model: an AdaptiveModel is one experiment's; a problem with "
                               "experiments builds one per experiment (give controller and "
                               "qmax instead)")
        from ..discretization._size_guard import validate_estimator
        validate_estimator(self.name, problem, needs_data=False, options=cfg.options)

    def build_experiment(self, problem, name, cfg, u_start):
        if cfg.model is not None:
            return cfg.model
        return AdaptiveModel(problem, _controller(cfg.controller, cfg), cfg.qmax)

    def combine(self, problem, parts, cfg, u_start):
        # several experiments: the models joined as the reduced space joins its own
        joined = join_experiments(problem, parts)
        return SimpleNamespace(problem=problem, joined=joined, ams=experiment_models(joined),
                               u=u_start)

    def solve(self, built, cfg):
        # a given model keeps its controller's eps unless fit_tol is given too
        fit_tol = cfg.fit_tol if cfg.model is None or "fit_tol" in self.given else None
        # the solve's own state (the models of the tolerances it tightens, the seed, the
        # solved block), returned as ``outcome.model``: the built model stays as built
        built = SimpleNamespace(**vars(built), model=None, seed=None, tolerance=[],
                                fit_tol=fit_tol, rounds=[], stable=False)
        t0 = time.perf_counter()
        try:
            runs = _start_runs(built, cfg)
        except AdaptiveError as err:
            out = Outcome.failed_at_start(built.u, err, model=built)
            out.timings = dict(setup_s=time.perf_counter() - t0, solve_s=0.0)
            return out
        out = _rounds(built, runs, cfg)
        if (cfg.seed == "auto" and built.seed is None and not out.status.success
                and out.status not in (Status.TIME_LIMIT, Status.INTERRUPTED)):
            out = _rounds_from_seed(built, cfg, out)
        while (fit_tol is not None and out.status.success
               and len(built.tolerance) < _TOL_ROUNDS):
            err = _fit_error(built, out.x[3])
            built.tolerance.append(dict(eps=built.ams[0].controller.eps, fit_error=err))
            if err <= fit_tol:
                break
            eps = _next_eps(built.ams[0], err, fit_tol)
            kept = built.ams, built.joined
            built.ams = [AdaptiveModel(am.problem, replace(am.controller, eps=eps), am.qmax)
                         for am in built.ams]
            built.joined = join_experiments(built.problem, built.ams)
            try:
                runs = [am.run(_block_u(out.x[0], built.problem)) for am in built.ams]
            except AdaptiveError as e:
                built.ams, built.joined = kept
                demote(out, Status.SIMULATION_FAILED,
                       f"the adaptive integration fails at eps={eps:.3g}: {e}")
                break
            prev = out
            out = _rounds(built, runs, cfg)
            if not out.status.success:
                # the tighter tolerance did not solve: the estimates of the last one that
                # did, which its fitted values' error does not certify
                failed, out = out, prev
                built.ams, built.joined = kept
                demote(out, Status.NOT_RESOLVED,
                       f"at the tighter tolerance eps={eps:.3g} the solve ended "
                       f"{failed.status} ({failed.message}); the estimates are those of "
                       f"eps={kept[0][0].controller.eps:.3g}, whose fitted values are "
                       f"{err:.3g} sigma from the ODE's, above fit_tol={fit_tol:g}")
                break
            _add_effort(out, prev)
            out.x[1][:0] = prev.x[1]
        else:
            if fit_tol is not None and out.status.success:
                demote(out, Status.MAX_ITERATIONS,
                       f"the estimated error of the fitted values "
                       f"{built.tolerance[-1]['fit_error']:.3g} sigma is above fit_tol="
                       f"{fit_tol:g} after {_TOL_ROUNDS} tolerances")
        if built.seed is not None:
            out.iterations += built.seed["iterations"]
            out.timings["seed_s"] = built.seed["wall_s"]
        built.model, built.rounds, built.stable, _ = out.x
        out.x, out.model = _block_u(built.model, built.problem), built
        return out

    def parts(self, built):
        return blocks_of(built.model.est) if built.model is not None else list(built.ams)

    def collect(self, problem, built, outcome, cfg):
        c = built.ams[0].controller
        if built.model is None:                # the adaptive integration failed at the start
            res = EstimationResult(
                approach=self.name, method=f"ipopt/exact-hessian, adaptive eps={c.eps:g}",
                scheme=get_scheme("adams_pc", built.ams[0].qmax),
                estimates=pd.Series(built.u, index=problem.parameter_names, name="estimate"),
                objective=float("nan"), status=outcome.status, message=outcome.message,
                iterations=outcome.iterations, evaluations=outcome.counts,
                extra=dict(rounds=[], pattern_changes=0, pattern_stable=False,
                           seed=built.seed, controller=c, eps=c.eps))
            res.backend = DiscreteBackend(problem, discrete_model(problem))
            return res
        m, rounds, stable = built.model, built.rounds, built.stable
        b = m.est
        u = np.array([pyo.value(b.u[p]) for p in problem.parameter_names])
        res = EstimationResult(
            approach=self.name, method=f"ipopt/exact-hessian, adaptive eps={c.eps:g}",
            scheme=get_scheme("adams_pc", built.ams[0].qmax),
            estimates=pd.Series(u, index=problem.parameter_names, name="estimate"),
            objective=float(pyo.value(b.objective)) + sum(am.const for am in built.ams),
            status=outcome.status, iterations=outcome.iterations, evaluations=outcome.counts,
            model=m,
            extra=dict(rounds=rounds, pattern_changes=sum(1 for r in rounds
                                                          if r.get("pattern_changed")),
                       pattern_stable=stable, controller=c, eps=c.eps, seed=built.seed))
        if built.fit_tol is not None:
            res.extra.update(fit_tol=built.fit_tol, tolerance_rounds=list(built.tolerance),
                             fit_error=built.tolerance[-1]["fit_error"]
                             if built.tolerance else float("nan"))
        res.backend = DiscreteBackend(problem, discrete_model(problem))
        return res

    def collect_experiment(self, problem, b, u, built, outcome):
        if built.model is None:
            return dict(failed="the adaptive integration fails at the start")
        k = blocks_of(built.model.est).index(b)
        final = built.model.final_runs
        run = run_from_block(b)
        out = _frames(b, built.model)
        out["extra"] = dict(grid=run.summary(), run=final[k] if final else None,
                            block_run=run, adaptive_model=built.ams[k])
        return out


_TOL_ROUNDS = 4


def _controller(controller, cfg):
    """The controller with the approach's step bounds ``h_min`` and ``max_steps``."""
    c = StepController() if controller is None else controller
    bounds = {k: cfg[k] for k in ("h_min", "max_steps") if cfg[k] is not None}
    return replace(c, **bounds) if bounds else c


def _block_u(m, problem):
    return np.array([pyo.value(m.est.u[p]) for p in problem.parameter_names])


def _start_runs(built, cfg):
    """The adaptive runs at the start; where an integration fails (``seed='auto'``) or
    always (``'always'``), the runs at the estimate of the fixed-grid seed
    (:func:`_seed`).  Raises :class:`AdaptiveError` when no start is found."""
    err = None
    if cfg.seed != "always":
        try:
            return [am.run(built.u) for am in built.ams]
        except AdaptiveError as e:
            if cfg.seed == "never":
                raise
            err = e
    u_seed, info = _seed(built, cfg)
    info["start_error"] = None if err is None else str(err)
    built.seed = info
    try:
        return [am.run(u_seed) for am in built.ams]
    except AdaptiveError as e:
        raise AdaptiveError(
            ("the adaptive integration fails at the start (" + str(err) + ") and " if err
             else "the adaptive integration fails ")
            + f"at the fixed-grid seed's estimate ({info['status']}): {e}; bound the steps "
            f"(h_min, max_steps) or start closer (u0)", e.step, e.time) from None


def _rounds_from_seed(built, cfg, first):
    """``seed='auto'``: rounds from the start that did not converge (``first``) are
    followed by rounds from the fixed-grid seed's estimate (:func:`_seed`); their outcome
    where they converge, else the one of the two whose last round ends lower, its message
    saying how the other ended (neither is a success)."""
    u_seed, info = _seed(built, cfg)
    info["start_error"] = None
    info["after"] = f"the rounds from the start ended {first.status}"
    built.seed = info
    try:
        out = _rounds(built, [am.run(u_seed) for am in built.ams], cfg)
    except AdaptiveError as e:
        out = None
        why = f"the adaptive integration fails at the seed's estimate: {e}"
    if out is not None and out.status.success:
        return _add_effort(out, first)
    if out is not None:
        why = f"the rounds from the fixed-grid seed's estimate ended {out.status}"
        if _last_objective(out) < _last_objective(first):
            _add_effort(out, first)
            why = (f"these are the rounds from the fixed-grid seed's estimate (last round "
                   f"J = {_last_objective(out):.6g}); {info['after']} (last round "
                   f"J = {_last_objective(first):.6g})")
            out.message = f"{out.message}; {why}" if out.message else why
            return out
    first.message = f"{first.message}; {why}" if first.message else why
    return first


def _add_effort(out, earlier):
    """``out`` with the iterations, evaluations and times of an ``earlier`` outcome
    added."""
    out.iterations += earlier.iterations
    out.counts = dict(Counter(earlier.counts) + Counter(out.counts))
    out.timings = {k: earlier.timings.get(k, 0.0) + v for k, v in out.timings.items()}
    return out


def _last_objective(outcome):
    """The objective of the last round of an outcome of :func:`_rounds`."""
    rounds = outcome.x[1]
    return float(rounds[-1]["objective"]) if rounds else np.inf


def _seed_states(sp, t, u):
    """States on the times ``t`` from an implicit simulation at ``u`` (the continuous
    engine: CVODES's BDF, or LSODA), or from the data where it fails or leaves the
    data's range by more than a factor 100 (a solution blowing up)."""
    from ..discretization.continuous import IntegrationError, continuous_model
    try:
        with np.errstate(all="ignore"):
            X = continuous_model(sp, rtol=1e-6, atol=1e-9).simulate(u, t).to_numpy()
        scale = 100 * (1 + np.nanmax(np.abs(sp.data.to_numpy())))
        if np.all(np.isfinite(X)) and np.max(np.abs(X)) <= scale:
            return X, "implicit simulation"
    except (IntegrationError, RuntimeError, ValueError, FloatingPointError, OverflowError):
        pass
    return sp.interpolate_states(t, u), "data"


def _seed(built, cfg):
    r"""The seed: the fixed-grid counterpart of model (55) (the Adams PC scheme of the
    same order on the default grid, [GM-grad, eq. (2)]) solved from the start, its
    states initialized by :func:`_seed_states`.  Returns its estimate and a summary."""
    from ..transcription._block import build_block
    from ..transcription._experiments import build_experiment_blocks
    from ..transcription._initialize import load_values, parameter_start, stage_values
    problem, qmax = built.problem, built.ams[0].qmax
    tb = time.perf_counter()
    m = pyo.ConcreteModel(name=problem.name)
    m.est = (build_experiment_blocks(problem, "adams_pc", qmax) if problem.experiments
             else build_block(problem, "adams_pc", qmax))
    for p, v in zip(problem.parameter_names, built.u):
        if not m.est.u[p].fixed:
            m.est.u[p].set_value(float(v))
    init = []
    for sp, b in zip(problem.subproblems, blocks_of(m.est)):
        X, how = _seed_states(sp, np.asarray(b.grid.t, dtype=float), built.u)
        init.append(how)
        load_values(b.x, X)
        with np.errstate(all="ignore"):
            stages = stage_values(b, X, built.u)
        for name, v in stages.items():
            load_values(b.component(name), np.where(np.isfinite(v), v, X[1:]))
    solver = OdeestIpoptSolver()
    solver.solve(m, options=ipopt_options(cfg, start=parameter_start(m)), tee=cfg.tee,
                 progress=cfg.progress)
    info = solver.last_info
    u = _block_u(m, problem)
    return u, dict(status=str(info["status"]), iterations=int(info["iterations"]),
                   init=init, steps=[len(b.grid.t) - 1 for b in blocks_of(m.est)],
                   estimate=u.copy(), wall_s=time.perf_counter() - tb)


def _rounds(built, runs, cfg):
    """Solve model (55) on the patterns of ``runs``, rebuilt while the pattern at the
    solution changes (at most ``max_rebuilds`` times)."""
    ams, problem = built.ams, built.problem
    rounds, evals, stable, final_runs = [], Counter(), False, None
    build_s = solve_s = 0.0
    iterations = 0
    for rnd in range(cfg.max_rebuilds + 1):
        tb = time.perf_counter()
        m, info = _solve_block(problem, ams, runs, cfg, cfg.trust)
        build_s += info["setup_s"]
        solve_s += info["ipopt_s"]
        iterations += int(info["iterations"])
        evals.update(dict(info["counts"]))
        u_new = _block_u(m, problem)
        entry = dict(round=rnd, k=sum(r.k for r in runs),
                     rejected=sum(r.n_rejected for r in runs), status=info["status"],
                     objective=float(pyo.value(m.est.objective)) + sum(a.const for a in ams),
                     wall_s=time.perf_counter() - tb)
        try:
            new = [am.run(u_new) for am in ams]
        except AdaptiveError as err:
            entry.update(pattern_changed=None, error=str(err))
            rounds.append(entry)
            break
        changed = [n.pattern != r.pattern for n, r in zip(new, runs)]
        on_trust = any(_at(m.est.u[p].value, bound) for p, bound in info["trust"])
        entry.update(pattern_changed=any(changed), on_trust_bound=on_trust,
                     diff=_diffs(problem, runs, new, changed))
        rounds.append(entry)
        final_runs = new
        if not any(changed) and not on_trust:
            stable = True
            break
        # a round ending on a small search direction still moved to a usable point
        if not (status_from_ipopt(info["status"]).success
                or info["status"] == "Search_Direction_Becomes_Too_Small"):
            break
        runs = new
    out = Outcome.from_ipopt(info)
    if out.status.success and not stable:       # the model solved is not the one at u
        last = rounds[-1]
        demote(out, *(
            (Status.SIMULATION_FAILED, f"the adaptive integration fails at the solution: "
             f"{last['error']}") if "error" in last else
            (Status.MAX_ITERATIONS, f"after {len(rounds)} rounds the "
             + ("solution is on a trust bound" if last["on_trust_bound"] else
                "pattern at the solution still differs from the one solved")
             + " (raise max_rebuilds, or start closer)")))
    out.iterations, out.counts = iterations, dict(evals)
    out.timings = dict(setup_s=build_s, solve_s=solve_s)
    m.final_runs = final_runs
    out.x = (m, rounds, stable, final_runs)
    return out


def _diffs(problem, runs, new, changed):
    if not any(changed):
        return {}
    d = {name: r.pattern.diff(n.pattern)
         for name, r, n, c in zip(problem.experiment_names or [None], runs, new, changed) if c}
    return d[None] if None in d else d


def _observed(am, run):
    """The fitted values of a run at the measurement times."""
    return observations(am.problem, run.x[run.J], run.u).to_numpy(dtype=float)


def _fit_error(built, final_runs):
    r"""Estimated error of the fitted values of the runs at the estimate, in units of
    their σ (of the residuals' root mean square per observable when σ is not
    given): the largest :math:`|z_\varepsilon - z_{\varepsilon/100}|/\sigma`, divided
    by :math:`1 - 1/100` since the global error is :math:`O(\varepsilon)`
    (:func:`_next_eps`), so the run at :math:`\varepsilon/100` carries 1/100 of it."""
    worst = 0.0
    for am, run in zip(built.ams, final_runs):
        fine = AdaptiveModel(am.problem, replace(am.controller, eps=am.controller.eps / 100,
                                                 max_steps=10 * am.controller.max_steps),
                             am.qmax).run(run.u)
        z, zf = _observed(am, run), _observed(am, fine)
        sp = am.problem
        mask = np.asarray(sp.mask, dtype=bool)
        if sp.sigma_known:
            sigma = 1.0 / np.sqrt(np.where(mask, sp.weights, np.nan))
        else:
            r = np.where(mask, z - sp.data.to_numpy(dtype=float), np.nan)
            sigma = np.broadcast_to(np.sqrt(np.nanmean(r ** 2, axis=0)), r.shape)
        d = np.abs(z - zf)[mask] / sigma[mask]
        worst = max(worst, float(np.max(d)) / (1 - 1 / 100))
    return worst


def _next_eps(am, err, fit_tol):
    r"""The tolerance aiming at half the target, :math:`\varepsilon\,\mathrm{fit\_tol}/(2\,
    \mathrm{err})`.  The error estimate is the predictor's (order q) but the accepted
    values are the corrector's (order q + 1): steps :math:`h \propto
    \varepsilon^{1/(q+1)}` leave a global error :math:`O(h^{q+1}) = O(\varepsilon)`."""
    return am.controller.eps * 0.5 * fit_tol / err


def estimate_adaptive(problem: EstimationProblem, **options):
    r"""Estimate the parameters with model (55): adaptive grid, frozen pattern, Ipopt.

    1. Integrate adaptively at :math:`u_0`; freeze the pattern.  Where that
       integration fails (the solution blows up, a step falls below ``h_min``,
       more than ``max_steps`` steps) and ``seed='auto'`` (or always, with
       ``seed='always'``), first solve the fixed-grid counterpart (the Adams PC
       scheme of the same order on the default grid, states initialized by an
       implicit simulation at :math:`u_0`, or from the data where it fails or
       leaves the data's range) and integrate at its estimate.  A start that
       still fails ends with status ``simulation_failed`` and the integrator's
       message (``seed='never'``: at once).
    2. Build :func:`build_adaptive_block`, one per experiment with the parameters
       shared (:func:`~pyomo_odeest.transcription._experiments.build_experiment_blocks`),
       and solve it with ``odeest_ipopt`` (``dual`` suffix imported).
    3. Integrate adaptively at the solution; if the pattern of any experiment
       changed, rebuild from those runs and re-solve (at most ``max_rebuilds`` times).
    4. With ``fit_tol`` (units of σ, or of the residuals' root mean square per
       observable when σ is not given): estimate the error of the fitted values at
       the solution (against a run at ε/100) and, while it exceeds ``fit_tol``,
       lower ε in proportion (the global error is :math:`O(\varepsilon)`, see
       docs/adaptive.md) and repeat 2–3 from the solution (at most 4 tolerances).

    A frozen pattern is a faithful model only near the parameters it was
    recorded at: far away the steps before a clipped step can overshoot the
    measurement time (the clipped step turns negative).  ``trust`` (e.g.
    0.2) bounds each round's parameters to
    :math:`|u - u_{\text{round}}| \le \text{trust}\cdot\max(|u_{\text{round}}|, 10^{-3})`;
    the bounds act on :math:`u` only, so they do not change the multipliers
    of the equations.  A round ending on a trust bound always triggers a
    rebuild (``max_rebuilds`` must then be large enough to reach the
    optimum).

    Returns
    -------
    EstimationResult
        ``approach='adaptive'``; ``extra`` holds ``rounds``
        (per round: k, rejections, status, objective, whether the pattern at
        the solution differed), ``pattern_changes``, ``pattern_stable``,
        ``grid`` (k, h_min, h_max, ...), ``run`` (the adaptive run at the
        estimate), ``block_run``, ``adaptive_model`` (several experiments: these four per
        experiment under ``extra['experiments']``), ``seed`` (None, or the seed's
        status, iterations, state initialization and estimate), with ``fit_tol``
        also ``fit_error`` and ``tolerance_rounds`` (ε and estimated error per
        tolerance); ``multipliers`` holds ``'x'`` (p_{i+1}),
        ``'y'`` (q_{i+1}), ``'step'`` (β, δ, θ per step) and ``'trial'``
        (α, γ per trial).
    """
    return AdaptiveApproach().estimate(problem, **options)


#: Ipopt's barrier starts small: a round starts from an adaptive run, which satisfies every
#: equation, and a barrier of Ipopt's default 0.1 on errors near eps = 1e-3 above their
#: bound 0 (mu/e ~ 100) pulls the first iterates far from it
BLOCK_IPOPT_DEFAULTS = {"mu_init": 1e-4}


def _solve_block(problem, ams, runs, cfg, trust=None):
    """One block (55) per experiment on the patterns of ``runs``, parameters shared
    (several experiments: :func:`build_experiment_blocks`), solved by Ipopt from the runs'
    values: its bound push leaves the steps and errors, often far below Ipopt's default
    push of 1e-2 above their bound 0, where they are (:func:`start_push`)."""
    m = pyo.ConcreteModel(name=problem.name)
    if problem.experiments:
        m.est = build_experiment_blocks(problem, build=lambda i, sp, params: build_adaptive_block(
            ams[i], runs[i], parameters=params))
        set_parameter_vars(m.est.u, problem.parameters, runs[0].u)
    else:
        m.est = build_adaptive_block(ams[0], runs[0])
    tight = []                                  # (parameter, trust bound tighter than its own)
    for p, v in zip(problem.parameter_names, runs[0].u if trust is not None else ()):
        var = m.est.u[p]
        if var.fixed:
            continue
        r = trust * max(abs(v), 1e-3)
        lo, hi = v - r, v + r
        if var.lb is None or lo > var.lb:
            var.setlb(lo)
            tight.append((p, lo))
        if var.ub is None or hi < var.ub:
            var.setub(hi)
            tight.append((p, hi))
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    solver = OdeestIpoptSolver()
    solver.solve(m, options=ipopt_options(cfg, start=bounded_start(m), **BLOCK_IPOPT_DEFAULTS),
                 tee=cfg.tee, progress=cfg.progress)
    return m, dict(solver.last_info, trust=tight)


def _at(value, bound):
    """``value`` on ``bound`` (relative 1e-7)."""
    return abs(value - bound) <= 1e-7 * max(1.0, abs(bound))


def _frames(b, m):
    """States, fitted observations, residuals, adjoint and multipliers of a solved block."""
    P, run = b.problem, run_from_block(b)
    S = P.states
    mult = block_multipliers(b, m.dual) if len(m.dual) else None
    multipliers, adjoint = {}, None
    if mult is not None:
        steps = pd.Index(range(run.k), name="step")
        multipliers["x"] = pd.DataFrame(mult.p[1:], index=steps, columns=S)
        multipliers["y"] = pd.DataFrame(mult.q, index=steps, columns=S)
        multipliers["step"] = pd.DataFrame(dict(beta=mult.beta, delta=mult.delta,
                                                theta=mult.theta[1:], h=run.h, e=run.e,
                                                j=run.j, clip=run.clip), index=steps)
        tidx = pd.MultiIndex.from_tuples([(i, j + 1) for i in range(run.k)
                                          for j in range(run.pattern.j[i])], names=["step", "trial"])
        multipliers["trial"] = pd.DataFrame(dict(
            alpha=np.concatenate(mult.alpha), gamma=np.concatenate(mult.gamma),
            H=np.concatenate(run.H), eta=np.concatenate(run.eta),
            kind=[run.pattern.kind(i, j) for i in range(run.k) for j in range(run.pattern.j[i])]),
            index=tidx)
        adjoint = pd.DataFrame(mult.p, index=pd.Index(range(run.k + 1), name="i"), columns=S)
    return dict(fit_frames(P, run.t, run.x, run.x[run.J], run.u), adjoint=adjoint,
                multipliers=multipliers)
