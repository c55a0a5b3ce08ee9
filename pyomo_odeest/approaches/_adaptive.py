r"""The adaptive approach: model (55) of [GM-grad] (adaptive grid, frozen
accept/reject pattern, :func:`~pyomo_odeest.transcription.build_adaptive_block`)
solved by Ipopt, rebuilt while the pattern at the solution changes."""
from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyomo.environ as pyo

from ..discretization.adaptive import AdaptiveError, AdaptiveModel
from ..discretization.schemes import get_scheme
from ..nlp._plugin import OdeestIpoptSolver
from ..problem._declaration import (EstimationProblem, require_no_constraints, require_no_inputs,
                                    require_single_experiment)
from ..problem._result import EstimationResult
from ..problem._status import Status, status_from_ipopt
from ..problem._validation import positive_int
from ..transcription._adaptive_block import build_adaptive_block, block_multipliers, run_from_block
from ._backend import DiscreteBackend, discrete_model
from ._base import (Approach, ConfigValue, Outcome, common_config, discretization_config,
                    fit_frames, ipopt_options)

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
    CONFIG.declare("model", ConfigValue(default=None, description="an AdaptiveModel to reuse"))
    DEFAULTS = {"qmax": 2}

    def validate(self, problem, cfg):
        require_single_experiment(problem, "the adaptive approach")
        require_no_inputs(problem, "the adaptive approach")
        require_no_constraints(problem, "the adaptive approach")
        from ..discretization._size_guard import validate_estimator
        validate_estimator(self.name, problem, needs_data=False, options=cfg.options)

    def build_experiment(self, problem, name, cfg, u_start):
        return cfg.model if cfg.model is not None else AdaptiveModel(problem, cfg.controller,
                                                                     cfg.qmax)

    def combine(self, problem, parts, cfg, u_start):
        return SimpleNamespace(am=parts[0], u=u_start, model=None)

    def solve(self, built, cfg):
        am, opts = built.am, ipopt_options(cfg)
        run = am.run(built.u)
        rounds, evals, stable, final_run = [], Counter(), False, None
        build_s = solve_s = 0.0
        iterations = 0
        for rnd in range(cfg.max_rebuilds + 1):
            tb = time.perf_counter()
            m, info = _solve_block(am, run, opts, cfg.tee, cfg.trust, cfg.progress)
            build_s += info["setup_s"]
            solve_s += info["ipopt_s"]
            iterations += int(info["iterations"])
            evals.update(dict(info["counts"]))
            b = m.est
            u_new = np.array([pyo.value(b.u[p]) for p in am.problem.parameter_names])
            entry = dict(round=rnd, k=run.k, rejected=run.n_rejected, status=info["status"],
                         objective=float(pyo.value(b.objective)) + am.const,
                         wall_s=time.perf_counter() - tb)
            try:
                new = am.run(u_new)
            except AdaptiveError as err:
                entry.update(pattern_changed=None, error=str(err))
                rounds.append(entry)
                break
            changed = new.pattern != run.pattern
            on_trust = any(_at(b.u[p].value, bound) for p, bound in info["trust"])
            entry.update(pattern_changed=changed, on_trust_bound=on_trust,
                         diff=run.pattern.diff(new.pattern) if changed else {})
            rounds.append(entry)
            final_run = new
            if not changed and not on_trust:
                stable = True
                break
            # a round ending on a small search direction still moved to a usable point
            if not (status_from_ipopt(info["status"]).success
                    or info["status"] == "Search_Direction_Becomes_Too_Small"):
                break
            run = new
        out = Outcome.from_ipopt(info)
        if out.status.success and not stable:       # the model solved is not the one at u
            last = rounds[-1]
            out.status, out.message = (
                (Status.SIMULATION_FAILED, f"{out.message}; the adaptive integration fails at "
                 f"the solution: {last['error']}") if "error" in last else
                (Status.MAX_ITERATIONS, f"{out.message}; after {len(rounds)} rounds the "
                 + ("solution is on a trust bound" if last["on_trust_bound"] else
                    "pattern at the solution still differs from the one solved")
                 + " (raise max_rebuilds, or start closer)"))
        out.iterations, out.counts = iterations, dict(evals)
        out.timings = dict(setup_s=build_s, solve_s=solve_s)
        out.x = (m, rounds, stable, final_run)
        return out

    def parts(self, built):
        return [built.model.est]

    def collect(self, problem, built, outcome, cfg):
        am = built.am
        m, rounds, stable, final_run = outcome.x
        built.model = m
        run, c = run_from_block(m.est), am.controller
        res = EstimationResult(
            approach=self.name, method=f"ipopt/exact-hessian, adaptive eps={c.eps:g}",
            scheme=get_scheme("adams_pc", am.qmax),
            estimates=pd.Series(run.u, index=problem.parameter_names, name="estimate"),
            objective=float(pyo.value(m.est.objective)) + am.const, status=outcome.status,
            iterations=outcome.iterations, evaluations=outcome.counts, model=m,
            extra=dict(rounds=rounds, pattern_changes=sum(1 for r in rounds
                                                          if r.get("pattern_changed")),
                       pattern_stable=stable, grid=run.summary(), run=final_run,
                       block_run=run, adaptive_model=am, controller=c, eps=c.eps))
        res.backend = DiscreteBackend(problem, discrete_model(problem))
        return res

    def collect_experiment(self, problem, b, u, built):
        return _frames(b, built.model)


def estimate_adaptive(problem: EstimationProblem, **options):
    r"""Estimate the parameters with model (55): adaptive grid, frozen pattern, Ipopt.

    1. Integrate adaptively at :math:`u_0`; freeze the pattern.
    2. Build :func:`build_adaptive_block`, solve it with ``odeest_ipopt``
       (``dual`` suffix imported).
    3. Integrate adaptively at the solution; if the pattern changed, rebuild
       from that run and re-solve (at most ``max_rebuilds`` times).

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
        estimate), ``adaptive_model``; ``multipliers`` holds ``'x'`` (p_{i+1}),
        ``'y'`` (q_{i+1}), ``'step'`` (β, δ, θ per step) and ``'trial'``
        (α, γ per trial).
    """
    return AdaptiveApproach().estimate(problem, **options)


def _solve_block(am, run, options, tee, trust=None, progress=None):
    m = pyo.ConcreteModel(name=am.problem.name)
    m.est = build_adaptive_block(am, run)
    tight = []                                  # (parameter, trust bound tighter than its own)
    for p, v in zip(am.problem.parameter_names, run.u if trust is not None else ()):
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
    solver.solve(m, options=options, tee=tee, progress=progress)
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
