"""One call from a PEtab problem to a checked fit: :func:`fit_petab`.

The workflow (docs/petab.md, "Fitting a problem: fit_petab"):

1. import (SBML + tables) and the objective at the problem's own start (the
   nominal point) by an independent simulation (:func:`petab_nll`, plus the
   priors when the problem has them: the objective the estimation minimizes);
2. per approach, :func:`~pyomo_odeest.runner.multistart`: the nominal point plus
   ``starts - 1`` Sobol starts in the box nominal ± ``spread`` on the
   parameters' scales (log10 units for log10 parameters), clipped to the bounds,
   seeded; the discrete approaches on ``scheme``, on a first grid that follows
   LSODA's steps at the start (``grid='auto'``, :func:`first_grid`) with steps of
   at most horizon/``grid_points``; their grids are certified and
   refined by the approaches' own refinement stage (docs/checks.md, "The grid
   certificate"); the least squares' later starts stop where they reach the
   nominal start's minimum when it converged (``stop_at_first``);
3. the continuous approaches have no grid: when their starts did not converge to
   the best value they found, no worse than the problem's start, the best start
   (by simulation) is refitted with the integration tolerances divided by 100,
   at most ``refine`` times (:func:`tolerance_refit`);
4. problems imported with ``noise='alternate'`` (noise parameters outside the
   estimation; the default states them jointly): the approach's best start is
   refined by :meth:`PetabEstimation.fit` (θ and σ alternately), starting no new
   round after ``NOISE_ROUNDS_BUDGET`` × ``max_wall_time``;
5. every start with finite estimates is evaluated by the independent
   simulation, so a discretization artefact is never reported as a fit
   (:func:`mismatch`, :func:`assess`);
6. the approaches are tried in order until one converges to a point no worse
   than the problem's start and than the reference (``all_approaches``: every
   one); after each, when no fit converged to the best point found and another
   approach than the first found it, or the first stopped there at its iteration
   limit, the first approach runs from that point,
   and again from where it stops while it lowers the best value without
   converging (at most ``POLISH_ROUNDS`` runs, :func:`polish`).

Budgets: every fit stops at ``max_wall_time``; the problem at
``max_problem_time`` (:class:`Budget`); the fits of the approaches other than
the least squares run in a child process killed at ``KILL_FACTOR`` × their
limit + ``KILL_GRACE`` s (the runner's ``task_timeout``).
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["fit_petab", "PetabFit", "FitSettings", "LEAST_SQUARES", "DEFAULT_APPROACHES",
           "CONVERGED", "NOT_STATIONARY", "FAILED"]

#: The continuous approach with the Gauss-Newton trust region (``optimizer='least_squares'``).
LEAST_SQUARES = "continuous_least_squares"
#: The approaches tried by default, in order (the cheapest where it converges first).
DEFAULT_APPROACHES = (LEAST_SQUARES, "reduced_space", "simultaneous")
LEAST_SQUARES_MAX_NFEV = 300
#: the noise refinement starts no new round after this many fits' time limits
NOISE_ROUNDS_BUDGET = 5
#: a fit of the other approaches is killed at KILL_FACTOR x its time limit + KILL_GRACE s
KILL_FACTOR, KILL_GRACE = 2.0, 300.0
#: the first approach restarts from the best point at most this many times (polish)
POLISH_ROUNDS = 3
#: statuses of a fit (see :class:`PetabFit`)
CONVERGED, NOT_STATIONARY, FAILED = "converged", "best_found_not_stationary", "failed"


# ---------------------------------------------------------------------------
# settings
# ---------------------------------------------------------------------------
@dataclass
class FitSettings:
    """The settings of :func:`fit_petab` (each checked when given; see its parameters)."""

    approaches: tuple = DEFAULT_APPROACHES
    starts: int = 4
    spread: float = 0.3
    scheme: str = "enright"
    grid_points: int = 300
    grid: str = "auto"
    refine: int = 2
    max_wall_time: float = 120.0
    max_problem_time: float = 3600.0
    all_approaches: bool = False
    workers: int = 0
    seed: int = 0
    options: dict = field(default_factory=dict)
    noise: str = "joint"

    def __post_init__(self):
        from ..approaches import APPROACH_NAMES
        from ..discretization import SCHEMES
        if isinstance(self.approaches, str):
            self.approaches = [a.strip() for a in self.approaches.split(",") if a.strip()]
        self.approaches = tuple(self.approaches)
        known = (LEAST_SQUARES,) + tuple(APPROACH_NAMES)
        bad = [a for a in self.approaches if a not in known]
        if not self.approaches or bad:
            raise ValueError(f"approaches must name one or more of {list(known)}; got "
                             f"{list(self.approaches) if self.approaches else 'none'}")
        if len(set(self.approaches)) != len(self.approaches):
            raise ValueError(f"approaches lists one twice: {list(self.approaches)}")
        self.starts = _integer(self.starts, "starts", 1,
                               "(the nominal point is the first start; starts - 1 Sobol "
                               "points follow)")
        self.grid_points = _integer(self.grid_points, "grid_points", 1)
        self.refine = _integer(self.refine, "refine", 0)
        self.workers = _integer(self.workers, "workers", 0)
        self.seed = _integer(self.seed, "seed", 0)
        self.spread = _number(self.spread, "spread", positive=True)
        self.max_wall_time = _number(self.max_wall_time or 0.0, "max_wall_time")
        self.max_problem_time = _number(self.max_problem_time or 0.0, "max_problem_time")
        from ._problem import NOISE_FORMS
        if self.noise not in NOISE_FORMS:
            raise ValueError(f"noise must be one of {list(NOISE_FORMS)}, got {self.noise!r}")
        if self.grid not in ("auto", "uniform"):
            raise ValueError(f"grid must be 'auto' or 'uniform', got {self.grid!r}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {self.scheme!r}")
        opts = dict(self.options or {})
        unknown = sorted(set(opts) - set(known))
        if unknown or not all(isinstance(v, dict) for v in opts.values()):
            raise ValueError(f"options maps an approach of {list(known)} to a dict of its "
                             f"options; got {self.options!r}")
        self.options = opts
        self.all_approaches = bool(self.all_approaches)

    def to_dict(self):
        return {f.name: (list(getattr(self, f.name)) if f.name == "approaches"
                         else getattr(self, f.name)) for f in fields(self)}


def _integer(v, name, lo, why=""):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}{' ' + why if why else ''}; "
                         f"got {v!r}")
    return int(v)


def _number(v, name, positive=False):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}"
                         f"{'' if positive else ' (0: no limit)'}; got {v!r}")
    return x


# ---------------------------------------------------------------------------
# the rules
# ---------------------------------------------------------------------------
def start_box(problem, spread):
    """Sampling box nominal ± spread (scaled), clipped to the bounds, per free parameter."""
    box = {}
    for p in problem.parameters:
        if p.fixed:
            continue
        lo = p.value - spread if p.lb is None else max(p.lb, p.value - spread)
        hi = p.value + spread if p.ub is None else min(p.ub, p.value + spread)
        if hi > lo:
            box[p.name] = (lo, hi)
    return box


class _Estimates:
    """The fields of a result that :meth:`PetabEstimation.simulated_nll` reads."""

    def __init__(self, estimates, objective, extra=None):
        self.estimates, self.objective, self.extra = estimates, objective, dict(extra or {})


def integrator_steps(problem, rtol=1e-6):
    """Per experiment, the times of LSODA's accepted steps (``rtol``, ``atol = 1e-3
    rtol``) at the problem's start; None where an experiment cannot be integrated."""
    from scipy.integrate import solve_ivp
    out = []
    for sp in problem.subproblems:
        f, u = sp.numeric_rhs(), sp.u0
        try:
            with np.errstate(all="ignore"):
                sol = solve_ivp(lambda t, x: f(x, u, t), (sp.t0, sp.T), sp.initial_state(u),
                                method="LSODA", rtol=rtol, atol=1e-3 * rtol)
        except (ArithmeticError, ValueError, np.linalg.LinAlgError):
            return None
        if not sol.success:
            return None
        out.append(sol.t)
    return out


def first_grid(problem, settings):
    """The discrete approaches' first grid and its largest step ``(grid, h)``.

    ``grid='uniform'``: no grid, steps of at most h = horizon/``grid_points``.
    ``grid='auto'`` (default): the steps follow LSODA's steps at the start
    (:func:`integrator_steps`, :func:`~pyomo_odeest.discretization.follow_steps`:
    consecutive steps within a factor 2), at most horizon/``grid_points``: fine in
    fast transients, coarse where the solution settles, so the NLP is as small as
    the start's dynamics allow.  A Grid, or a mapping experiment -> Grid; None (uniform steps) when the
    start cannot be integrated.  The approaches certify and refine it."""
    from ..discretization import follow_steps, resolve_grid
    h = (problem.T - problem.t0) / settings.grid_points
    steps = integrator_steps(problem) if settings.grid == "auto" else None
    if steps is None:
        return None, h
    grids = [follow_steps(resolve_grid(sp, steps_per_interval=1), t, max_step=h)
             for sp, t in zip(problem.subproblems, steps)]
    h = max(float(np.max(g.h)) for g in grids)
    if problem.experiment_names:
        return dict(zip(problem.experiment_names, grids)), h
    return grids[0], h


class Budget:
    """The time a problem may take (``seconds`` from the start of its import; None or 0:
    no limit).  No fit starts after it, and a fit started before it gets no more than
    its share of what is left (:meth:`fit_limit`); a fit that has started runs to its
    own limit."""

    def __init__(self, seconds, workers=0, log=None):
        self.start = time.perf_counter()
        self.seconds = float(seconds) if seconds else None
        self.workers = max(1, int(workers or 0))
        self.skipped = []                         # stages not run, in order
        self.log = log

    def left(self):
        if self.seconds is None:
            return np.inf
        return self.seconds - (time.perf_counter() - self.start)

    def allows(self, stage):
        """Whether ``stage`` may start; records it as not run otherwise."""
        if self.left() > 0:
            return True
        self.skipped.append(stage)
        if self.log is not None:
            self.log(f"  not run: {stage} (the problem's time budget of {self.seconds:.0f} s "
                     "is spent)")
        return False

    def fit_limit(self, per_fit, n_starts=1):
        """Wall-time limit of each of ``n_starts`` fits: ``per_fit`` (0: none), and no
        more than their share of the budget left (``workers`` of them at a time)."""
        share = self.left() / np.ceil(n_starts / self.workers)
        limit = min(float(per_fit) if per_fit else np.inf, share)
        return None if not np.isfinite(limit) else max(limit, 1.0)


def tolerance(value):
    """The tolerance of a comparison of objectives: 1e-3·max(1, |value|)."""
    return 1e-3 * max(1.0, abs(value))


def status_token(status):
    """A status as one ``key=value``-safe token: the part before its first ':' with every
    run of other characters than letters, digits, '.' and '_' turned into '_'."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(status).split(":")[0]).strip("_")


def mismatch(row):
    """The start's own NLL (its discretization's, or the continuous engine's) and PEtab's
    independent simulation disagree: the result's "discretization error" warning, or a
    difference beyond 5 % plus half a unit.  Such a start is neither a fit nor a best
    value found: one of the two integrations is wrong there."""
    if "discretization error" in str(row.get("warnings", "")):
        return True
    d, s = float(row.get("nll_discrete", np.nan)), float(row.get("nll_simulated", np.nan))
    return bool(np.isfinite(d) and np.isfinite(s) and abs(d - s) > 0.5 + 0.05 * abs(s))


def assess(tab, start, r):
    """Status from the fits so far: ``(status, best row, best value, flags)``.

    ``start`` is the objective at the problem's own start (by simulation); ``r`` the
    reference on the same objective (or None).  A converged start is one its approach
    reports as successful whose simulation agrees with its discretization; the problem
    is ``converged`` when the best converged start is the best value found and no worse
    than ``start``.  Otherwise the best value found (by a start that did not converge,
    or ``start`` itself) is ``best_found_not_stationary``.  A start whose two
    integrations disagree (:func:`mismatch`) counts for neither.
    """
    fin = tab[np.isfinite(tab["nll_simulated"].astype(float))] if len(tab) else tab
    if not fin.empty:
        fin = fin[~fin.apply(mismatch, axis=1)]
    if fin.empty:
        return FAILED, None, start, []
    conv = fin[fin["success"].astype(bool)]
    best_any = fin.loc[fin["nll_simulated"].astype(float).idxmin()]
    flags = []
    if not conv.empty:
        best = conv.loc[conv["nll_simulated"].astype(float).idxmin()]
        value = float(best["nll_simulated"])
        if value <= start + tolerance(start) and \
                value <= float(best_any["nll_simulated"]) + tolerance(value):
            if r is not None and value > r + tolerance(r):
                flags.append("worse_than_reference")
            return CONVERGED, best, value, flags
    value = min(float(best_any["nll_simulated"]), start)
    if value == start:
        flags.append("no_fit_better_than_its_start")
    return NOT_STATIONARY, best_any, value, flags


def solved(status, flags):
    """No further approach is needed: converged, no worse than the reference."""
    return status == CONVERGED and not flags


def _point(row, names):
    return row[[f"p_{k}" for k in names]].to_numpy(dtype=float)


def tolerance_refit(tab, tol, prob, start):
    """The continuous approaches' refinement (they have no grid): ``None`` when the fits
    at the tolerances ``tol`` (None: the engine's defaults) converged to the best value
    they found, no worse than ``start`` (:func:`assess`), when none has finite
    estimates (refused or failed), or when the best ran out of its evaluations (it was
    still descending): not a matter of tolerances; else ``(tol / 100, [their best start
    by simulation, or the problem's start when that is better])``.

    An objective whose integration error hides its minimum (oscillators) stops every
    optimizer short of it; tighter tolerances move that floor down."""
    from ..discretization.continuous import default_tolerances
    cur = tab if tol is None else tab[tab["rtol"] == tol[0]]
    status, best, _, _ = assess(cur, start, None)
    if status == CONVERGED:
        return None
    r0, a0 = tol if tol is not None else default_tolerances()
    if not np.isfinite(cur["nll_simulated"].astype(float)).any():
        return None                  # refused or failed everywhere: not a tolerance matter
    if best is not None and str(best.get("status", "")) == "max_iterations":
        return None                  # still descending when its budget ran out
    tighter = (r0 / 100.0, a0 / 100.0)
    if best is None or float(best["nll_simulated"]) > start:
        return tighter, [prob.u0]    # nothing better than the start (or nothing trusted)
    return tighter, [_point(best, prob.parameter_names)]


# ---------------------------------------------------------------------------
# the stages
# ---------------------------------------------------------------------------
@dataclass
class _Run:
    """What the stages of one problem share."""

    pe: object
    settings: FitSettings
    runner: object
    budget: Budget
    name: str
    log: object = None
    progress: object = None
    _first: tuple = None          # (grid, h): the discrete approaches' first grid

    def first_grid(self):
        """:func:`first_grid` of the problem, computed when a discrete approach first
        needs it (the continuous approaches, which often fit alone, never do)."""
        if self._first is None:
            self._first = first_grid(self.pe.problem, self.settings)
        return self._first

    def say(self, text):
        if self.log is not None:
            self.log(text)

    def expect(self, n):
        """``n`` more fits will report to the progress bar."""
        if self.progress is not None:
            self.progress.total += n
            if self.progress.bar is not None:
                self.progress.bar.total = self.progress.total
                self.progress.bar.refresh()

    def done(self, ok=True):
        if self.progress is not None:
            self.progress.update(ok)


def _base(approach):
    """The front-door name of an entry of ``approaches`` (the least squares is the
    continuous approach with another optimizer)."""
    return "continuous" if approach == LEAST_SQUARES else approach


def _on_grid(approach) -> bool:
    """True for an approach that solves on a grid (takes the discretization options)."""
    from ..approaches._estimate import approach_options
    return "grid" in approach_options(_base(approach))


def _max_step(run, approach):
    """The ``max_step`` column of an approach's rows: the first grid's largest step, NaN
    for an approach without a grid."""
    return run.first_grid()[1] if _on_grid(_base(approach)) else np.nan


def _approach_options(run, approach):
    base = _base(approach)
    opts = {}
    if _on_grid(base):
        grid, h = run.first_grid()
        opts = (dict(scheme=run.settings.scheme, grid=grid) if grid is not None
                else dict(scheme=run.settings.scheme, max_step=h))
    if approach == LEAST_SQUARES:
        opts.update(optimizer="least_squares", options=dict(max_nfev=LEAST_SQUARES_MAX_NFEV))
    return base, opts


def _user_options(run, approach, opts):
    """The caller's options of ``approach`` over the stage's (``options`` merged)."""
    user = dict(run.settings.options.get(approach, {}))
    if "options" in user and "options" in opts:
        user["options"] = {**opts["options"], **user["options"]}
    return {**opts, **user}


def simulated(pe, result):
    """The objective the estimation minimizes (PEtab's NLL, plus the priors), by simulation
    at a result's estimates; NaN where they cannot be simulated."""
    try:
        return pe.simulated_nll(result, priors=True)
    except Exception:  # noqa: BLE001 - a start whose estimates cannot be simulated
        return np.nan


def fits(run, approach, starts, tol=None, stage="multistart"):
    """Multistart of one approach (``starts``: None for the nominal point and
    ``settings.starts - 1`` Sobol points, else those points); the table with the
    objective by simulation per start and the results (column ``result``).
    ``tol``: the continuous approaches' ``(rtol, atol)`` (None: the engine's defaults)."""
    from ..runner import multistart
    pe, s = run.pe, run.settings
    prob = pe.problem
    base, opts = _approach_options(run, approach)
    if tol is not None:
        opts.update(rtol=tol[0], atol=tol[1])
    n = s.starts if starts is None else len(starts)
    wall = run.budget.fit_limit(s.max_wall_time, n)
    if wall:                        # the whole estimate's deadline, every round included
        opts["max_wall_time"] = wall
    opts = _user_options(run, approach, opts)
    # the backstop of the fits' own limits, which cannot stop a model's set-up or one long
    # Ipopt iteration: the fit runs in a child process killed at KILL_FACTOR x its limit
    # (+ KILL_GRACE s); the least squares keeps its models' set-up in this process
    kill = KILL_FACTOR * wall + KILL_GRACE if wall and approach != LEAST_SQUARES else None
    runner = run.runner
    runner.task_timeout, before = kill, runner.task_timeout
    try:
        ms = multistart(prob, n=s.starts - 1 if starts is None else 0, runner=runner,
                        approach=base, space="linear", bounds=start_box(prob, s.spread),
                        starts=starts if starts is not None else [prob.u0], seed=s.seed,
                        options=opts, stop_at_first=approach == LEAST_SQUARES,
                        on_row=lambda row: run.done(bool(row.get("success", False))))
    finally:
        runner.task_timeout = before
    tab = ms.table.copy()
    tab["approach"] = approach
    tab["stage"] = stage
    names = prob.parameter_names
    nll_d, nll_s, results, messages = [], [], [], []
    for _, r in tab.iterrows():
        task = r.get("task", np.nan)
        res = ms.run.outputs.get(int(task)) if np.isfinite(float(task)) else None
        results.append(res)
        msg = getattr(res, "message", None) or r.get("error")
        messages.append(str(msg) if isinstance(msg, str) else "")
        est = pd.Series([float(r.get(f"p_{k}", np.nan)) for k in names], index=names)
        if not np.isfinite(float(r.get("objective", np.nan))) or not np.all(np.isfinite(est)):
            nll_d.append(np.nan)
            nll_s.append(np.nan)
            continue
        nll_d.append(pe.nll(float(r["objective"])))
        nll_s.append(simulated(pe, _Estimates(est, float(r["objective"]))))
    tab["nll_discrete"], tab["nll_simulated"] = nll_d, nll_s
    tab["message"] = messages
    tab["result"] = pd.Series(results, index=tab.index, dtype=object)
    tab["max_step"] = _max_step(run, approach)
    tab["rtol"], tab["atol"] = (np.nan, np.nan) if tol is None else tol
    return tab


def refine_noise(run, approach, tab):
    """Problems with several noise parameters: :meth:`PetabEstimation.fit` (θ and σ
    alternately) from the approach's best start; one row like those of :func:`fits` (or
    None).  Its rounds stop at ``NOISE_ROUNDS_BUDGET`` × ``max_wall_time`` and at the
    problem's budget."""
    pe, s = run.pe, run.settings
    if not pe.noise_parameters:
        return None
    ok = tab[np.isfinite(tab["nll_simulated"])]
    if ok.empty:
        return None
    best = ok.loc[ok["nll_simulated"].idxmin()]
    names = pe.problem.parameter_names
    base, opts = _approach_options(run, approach)
    if not run.budget.allows(f"{approach} noise refinement"):
        return None
    wall = run.budget.fit_limit(s.max_wall_time)
    rounds = run.budget.left()
    if s.max_wall_time:
        rounds = min(rounds, NOISE_ROUNDS_BUDGET * float(s.max_wall_time))
    if wall:
        opts["max_wall_time"] = wall
    opts = _user_options(run, approach, opts)
    run.expect(1)
    t0 = time.perf_counter()
    row = dict(task=-1, approach=approach + "+noise", stage="noise refinement",
               max_step=_max_step(run, approach), nll_discrete=np.nan,
               nll_simulated=np.nan, warnings="", iterations=0, rtol=np.nan, result=None)
    try:
        res = pe.fit(base, u0=_point(best, names),
                     max_time=rounds if np.isfinite(rounds) else None, **opts)
    except Exception as err:  # noqa: BLE001 - reported as the row's status
        row.update(success=False, status=f"noise fit failed: {type(err).__name__}",
                   message=f"{type(err).__name__}: {err}", wall_s=time.perf_counter() - t0)
        run.done(False)
        return _frame([row])
    row.update(success=bool(res.success), status=str(res.status),
               objective=float(res.objective), message=str(res.message or ""),
               nll_discrete=float(res.extra.get("petab_nll", np.nan)),
               nll_simulated=simulated(pe, res), warnings="; ".join(res.warnings),
               iterations=res.extra.get("petab_rounds", 0), wall_s=time.perf_counter() - t0,
               result=res)
    row.update({f"p_{k}": float(v) for k, v in res.estimates.items()})
    run.done(bool(res.success))
    return _frame([row])


def _frame(rows):
    """A table of rows that may hold results (the ``result`` column stays objects)."""
    res = [r.pop("result", None) for r in rows]
    tab = pd.DataFrame(rows)
    tab["result"] = pd.Series(res, index=tab.index, dtype=object)
    return tab


def polish(run, tables, start, r_obj, polished=None):
    """When no fit converged to the best point found and that point came from another
    approach than the first (the cheapest), or from the first stopped by its iteration
    limit (still descending), the first approach is run from it: a local method started
    where an explorer stopped, or continued where its budget ran out; again from where it
    stops while it lowers the best value without converging (at most ``POLISH_ROUNDS``
    runs).  ``tables`` with its rows added; ``polished``: the points (bytes) already
    polished, not again."""
    polished = set() if polished is None else polished
    first = run.settings.approaches[0]
    for k in range(POLISH_ROUNDS):
        if not tables:
            return tables
        status, best, value, _ = assess(pd.concat(tables, ignore_index=True), start, r_obj)
        at_limit = best is not None and str(best.get("status", "")) == "max_iterations"
        if status == CONVERGED or best is None or (
                k == 0 and best["approach"] == first and not at_limit):
            return tables
        u = _point(best, run.pe.problem.parameter_names)
        if u.tobytes() in polished or not run.budget.allows(f"{first} from the best point"):
            return tables
        polished.add(u.tobytes())
        how = "at its iteration limit" if at_limit else "not converged"
        run.say(f"  {run.name}: best point by {best['approach']} ({how}, "
                f"{float(best['nll_simulated']):.6f}); {first} from it")
        run.expect(1)
        tab = fits(run, first, [u], _row_tolerances(best, first), stage="polish")
        for _, row in tab.iterrows():
            run.say(f"  {run.name} {first} from the best point: {row['status']}, "
                    f"{row.get('iterations', 0)} it, "
                    f"nll(simulated)={row['nll_simulated']:.6f} "
                    f"({row.get('wall_s', np.nan):.1f} s)")
        tables = tables + [tab]
        if not (assess(pd.concat(tables, ignore_index=True), start, r_obj)[2]
                < value - 1e-6 * max(1.0, abs(value))):
            return tables                         # no lower: a restart would not help
    return tables


def _row_tolerances(row, approach):
    """The continuous engine's ``(rtol, atol)`` of a row's fit when ``approach`` is the
    row's and it was refitted at other tolerances than the engine's defaults
    (:func:`tolerance_refit`), else None (the defaults): a fit is continued where it
    was run."""
    tol = (float(row.get("rtol", np.nan)), float(row.get("atol", np.nan)))
    if row.get("approach") != approach or not np.all(np.isfinite(tol)):
        return None
    return tol


def _row_line(name, row):
    step = row.get("max_step", np.nan)
    where = f"max_step={step:.4g}" if np.isfinite(float(step)) else (
        f"rtol={row['rtol']:.0e}" if np.isfinite(float(row.get("rtol", np.nan)))
        else "default tolerances")
    err = row.get("error")
    return (f"  {name} {row['approach']} {where} start {int(row['task'])}: {row['status']}, "
            f"{row.get('iterations', 0)} it, nll(discrete)={row['nll_discrete']:.6f} "
            f"nll(simulated)={row['nll_simulated']:.6f} ({row.get('wall_s', np.nan):.1f} s)"
            + (f" {str(err)[:300]}" if row["status"] in ("error", "time_limit")
               and isinstance(err, str) and err else ""))


def _fit_approaches(run, start, r_obj):
    """Every approach in turn (step 6 of the module's workflow); the tables of its fits."""
    s, prob, name = run.settings, run.pe.problem, run.name
    tables, polished = [], set()
    for approach in s.approaches:
        if not run.budget.allows(approach):
            run.expect(-s.starts)
            continue
        tab = fits(run, approach, None)
        tol = None
        if not _on_grid(approach):
            for _ in range(s.refine):
                refit = tolerance_refit(tab, tol, prob, start)
                if refit is None:
                    break
                tol, starts = refit
                if not run.budget.allows(f"{approach} refit rtol={tol[0]:.0e}"):
                    break
                run.say(f"  {name} {approach}: no fit converged to the best value found; "
                        f"refit with rtol={tol[0]:.0e}, atol={tol[1]:.0e}")
                run.expect(len(starts))
                tab = pd.concat([tab, fits(run, approach, starts, tol,
                                           stage=f"refit rtol={tol[0]:.0e}")],
                                ignore_index=True)
        extra = refine_noise(run, approach, tab)
        if extra is not None:
            tab = pd.concat([tab, extra], ignore_index=True)
        for _, row in tab.iterrows():
            run.say(_row_line(name, row))
        tables.append(tab)
        tables = polish(run, tables, start, r_obj, polished)
        status, best, _, flags = assess(pd.concat(tables, ignore_index=True), start, r_obj)
        if solved(status, flags) and not s.all_approaches and approach != s.approaches[-1]:
            rest = s.approaches[s.approaches.index(approach) + 1:]
            run.say(f"  {name}: converged (by {best['approach']}); not run: {','.join(rest)}")
            if run.progress is not None:
                run.expect(-s.starts * len(rest))
            break
    return tables


# ---------------------------------------------------------------------------
# the result
# ---------------------------------------------------------------------------
#: Columns of :attr:`PetabFit.table`, in order (the estimates ``p_<name>`` follow).
TABLE_COLUMNS = ["start_id", "approach", "stage", "status", "success", "converged", "nll",
                 "nll_simulated", "iterations", "time_s", "max_step", "rtol", "message"]


@dataclass
class PetabFit:
    """The outcome of :func:`fit_petab`.

    Attributes
    ----------
    name : str
        The problem's name (its folder's).
    estimation : PetabEstimation
        The imported problem (``estimation.problem`` is its EstimationProblem).
    status : str
        ``'converged'`` (the best fit converged to a stationary point, its simulation
        agreeing with its discretization, no worse than the problem's start),
        ``'best_found_not_stationary'`` (the best value reached did not converge, or no
        fit beat the start: flag ``no_fit_better_than_its_start``; not a fit) or
        ``'failed'`` (no start gave finite estimates).
    success : bool
        ``status == 'converged'`` and no flag.
    best_nll : float
        The best value by the independent simulation (PEtab's NLL, plus the priors when
        the problem has them: the objective the estimation minimizes).
    nominal_nll : float
        The same objective at the problem's start (the nominal point).
    reference : float or None
        The reference on the same objective, when given.
    best : EstimationResult or None
        The result of the best fit; ``best_row`` its row of :attr:`table`.
    flags : list of str
        ``worse_than_reference``, ``no_fit_better_than_its_start``,
        ``nominal_mismatch``, ``time_budget``.
    skipped : list of str
        The stages not run for the time budget.
    wall_s : float
        Seconds from the start of the call (import included).
    setup_s : float
        Seconds of the import (:attr:`PetabEstimation.setup_s`); each fit's model set-up is
        its result's ``timings['build_s']``.
    settings : FitSettings
    """

    name: str
    estimation: object
    status: str
    best_nll: float
    nominal_nll: float
    reference: float | None
    best: object
    best_row: pd.Series | None
    flags: list
    skipped: list
    wall_s: float
    settings: FitSettings
    raw: pd.DataFrame = field(repr=False)
    setup_s: float = float("nan")

    @property
    def success(self) -> bool:
        return solved(self.status, self.flags)

    @property
    def best_approach(self) -> str:
        return "-" if self.best_row is None else str(self.best_row["approach"])

    @property
    def failures(self) -> str:
        """``approach:status`` tokens of the fits that did not succeed and the stages not
        run (``not_run:stage``), ';'-separated."""
        raw = self.raw
        parts = [f"{a}:{status_token(st)}" for a, st, ok in
                 zip(raw.get("approach", []), raw.get("status", []), raw.get("success", []))
                 if not bool(ok)]
        return ";".join(parts + ["not_run:" + status_token(k) for k in self.skipped])

    @property
    def table(self) -> pd.DataFrame:
        """One row per fit (start and approach, in the order run): ``start_id`` (the start
        within its stage; -1 the noise refinement), ``approach``, ``stage``
        (``multistart``, ``refit rtol=...``, ``noise refinement``, ``polish``),
        ``status``, ``success`` (the approach's), ``converged`` (its success and its
        simulation agreeing with its discretization), ``nll`` (its own: the grid's or
        the engine's), ``nll_simulated`` (by the independent simulation), ``iterations``,
        ``time_s``, ``max_step`` (the first grid's largest step), ``rtol`` (a tolerance
        refit's), ``message``, and the estimates ``p_<name>``."""
        raw = self.raw
        names = self.estimation.problem.parameter_names
        if raw.empty:
            return pd.DataFrame(columns=TABLE_COLUMNS + [f"p_{k}" for k in names])

        def col(k, default=np.nan):
            return raw[k] if k in raw else pd.Series(default, index=raw.index)
        conv = raw["success"].astype(bool) & np.isfinite(col("nll_simulated").astype(float)) & \
            ~raw.apply(mismatch, axis=1)
        out = pd.DataFrame({
            "start_id": col("task").astype("Int64"), "approach": col("approach"),
            "stage": col("stage", "multistart"), "status": col("status"),
            "success": raw["success"].astype(bool), "converged": conv,
            "nll": col("nll_discrete").astype(float),
            "nll_simulated": col("nll_simulated").astype(float),
            "iterations": col("iterations", 0).fillna(0).astype(int),
            "time_s": col("wall_s").astype(float), "max_step": col("max_step").astype(float),
            "rtol": col("rtol").astype(float), "message": col("message", "").fillna("")})
        for k in names:
            out[f"p_{k}"] = col(f"p_{k}").astype(float)
        return out

    @property
    def checks(self) -> dict:
        """The best fit's checks: the two objectives (its own and by the independent
        simulation) and their difference, the gap to the problem's start and to the
        reference, its status and warnings, and (grid approaches) its grid certificate."""
        if self.best_row is None:
            return dict(status=self.status, flags=list(self.flags))
        row = self.best_row
        d, sim = float(row["nll_discrete"]), float(row["nll_simulated"])
        out = dict(status=self.status, flags=list(self.flags), approach=str(row["approach"]),
                   fit_status=str(row["status"]), nll=d, nll_simulated=sim,
                   nll_difference=d - sim, agrees=not mismatch(row),
                   gain_over_start=self.nominal_nll - sim,
                   reference_gap=None if self.reference is None else sim - self.reference,
                   warnings=list(getattr(self.best, "warnings", []) or []))
        extra = getattr(self.best, "extra", None) or {}
        if extra.get("certificate") is not None:
            out["certificate"] = extra["certificate"]
        if extra.get("stationarity") is not None:
            out["stationarity"] = extra["stationarity"]
        return out

    def estimates(self) -> pd.Series:
        """The best fit's PEtab parameters on their scales (the profiled σ and the noise
        parameters included; :meth:`PetabEstimation.scaled_estimates`)."""
        if self.best is None:
            raise ValueError(f"{self.name}: no fit has finite estimates ({self.status})")
        return self.estimation.scaled_estimates(self.best)

    def multistart(self):
        """The fits as a :class:`~pyomo_odeest.runner.MultistartResult` on the objective
        by simulation (converged: :attr:`table`'s ``converged``), its minima clustered
        (:func:`~pyomo_odeest.runner.cluster_end_points`)."""
        from ..runner._studies import MultistartResult, cluster_end_points
        tab = self.table
        names = self.estimation.problem.parameter_names
        ms = tab.assign(task=np.arange(len(tab)), objective=tab["nll_simulated"],
                        success=tab["converged"])
        labels, clusters = cluster_end_points(ms, names)
        ms = ms.assign(cluster=labels.astype("Int64"))
        hits = int(clusters["hits"].iloc[0]) if len(clusters) else 0
        return MultistartResult(table=ms, clusters=clusters, best=self.best, hits=hits)

    def plot_waterfall(self, path=None, ax=None):
        """Waterfall of every fit's NLL by simulation above the best
        (:func:`~pyomo_odeest.analysis.plot_waterfall`); the figure."""
        from ..analysis._plots import plot_waterfall
        return plot_waterfall(self.multistart(), ax=ax, path=path)

    def _problem_of_best(self):
        pe = self.estimation
        noise = (getattr(self.best, "extra", None) or {}).get("petab_noise")
        return pe._stated(noise) if noise else pe.problem

    def profiles(self, parameters=None, level=0.95, **kw):
        """Profile likelihoods at the best fit
        (:func:`~pyomo_odeest.analysis.profile_likelihood`; with several noise
        parameters, of θ at the fitted noise parameters).  Refused unless the fit
        converged: a profile of a point that is not a minimum means nothing."""
        from ..analysis import profile_likelihood
        if self.best is None or self.status != CONVERGED:
            raise ValueError(f"{self.name}: profiles need a converged fit; this one is "
                             f"{self.status}")
        return profile_likelihood(self.best, parameters, level=level,
                                  problem=self._problem_of_best(), **kw)

    def plot_fit(self, path=None):
        """The data and the best fit (:meth:`EstimationResult.plot`); the figure."""
        if self.best is None:
            raise ValueError(f"{self.name}: no fit to plot ({self.status})")
        return self.best.plot(problem=self._problem_of_best(), path=path)

    def to_dict(self) -> dict:
        """The outcome as JSON-ready values (what :meth:`to_folder` writes to
        ``fit.json``)."""
        def num(v):
            return None if v is None or not np.isfinite(float(v)) else float(v)
        best = None
        if self.best_row is not None:
            best = dict(approach=self.best_approach, status=str(self.best_row["status"]),
                        nll=num(self.best_row["nll_discrete"]),
                        nll_simulated=num(self.best_row["nll_simulated"]),
                        estimates={k: float(self.best_row[f"p_{k}"])
                                   for k in self.estimation.problem.parameter_names},
                        petab_estimates={k: float(v) for k, v in self.estimates().items()}
                        if self.best is not None else None)
        return dict(name=self.name, status=self.status, success=self.success,
                    best_nll=num(self.best_nll), nominal_nll=num(self.nominal_nll),
                    reference=num(self.reference), flags=list(self.flags),
                    skipped=list(self.skipped), failures=self.failures,
                    wall_s=float(self.wall_s), setup_s=float(self.setup_s),
                    settings=self.settings.to_dict(), best=best,
                    checks=json.loads(json.dumps(self.checks, default=_jsonable)))

    def to_folder(self, path, figures=True, profiles=None) -> Path:
        """Write ``table.csv`` (:attr:`table`), ``fit.json`` (:meth:`to_dict`),
        ``best_result.json`` (the best result, :meth:`EstimationResult.to_json`) and,
        with ``figures``, ``waterfall.png`` and ``fit.png``; ``profiles`` (a
        :class:`~pyomo_odeest.analysis.ProfileResult`, e.g. from :meth:`profiles`):
        ``profiles.csv`` and ``profiles.png``.  Returns the folder."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.table.to_csv(out / "table.csv", index=False)
        (out / "fit.json").write_text(json.dumps(self.to_dict(), indent=2))
        if self.best is not None:
            self.best.to_json(out / "best_result.json")
        if profiles is not None:
            profiles.intervals.to_csv(out / "profiles.csv", index_label="parameter")
        if figures:
            import matplotlib.pyplot as plt
            figs = [self.plot_waterfall(path=out / "waterfall.png")]
            if self.best is not None:
                figs.append(self.plot_fit(path=out / "fit.png"))
            if profiles is not None:
                figs.append(profiles.plot(path=out / "profiles.png"))
            for f in figs:
                plt.close(getattr(f, "figure", f))
        return out

    def summary(self) -> str:
        """The outcome in a few lines: status, best and nominal NLL, reference gap, the
        fits per approach, the best fit's checks."""
        ref = ("" if self.reference is None else
               f", reference {self.reference:.6f} (gap {self.best_nll - self.reference:+.3g})")
        lines = [f"PEtab fit of {self.name}: {self.status}"
                 + (f" [{', '.join(self.flags)}]" if self.flags else ""),
                 f"  best NLL {self.best_nll:.6f} by {self.best_approach} (independent "
                 f"simulation), nominal {self.nominal_nll:.6f}{ref}; {self.wall_s:.1f} s"]
        tab = self.table
        for a, g in tab.groupby("approach", sort=False):
            fin = g["nll_simulated"][np.isfinite(g["nll_simulated"])]
            lines.append(f"  {a}: {len(g)} fits, {int(g['converged'].sum())} converged"
                         + (f", best NLL {fin.min():.6f}" if len(fin) else ", none finite"))
        if self.skipped:
            lines.append("  not run (time budget): " + ", ".join(self.skipped))
        if self.best_row is not None:
            c = self.checks
            lines.append(f"  best fit: {c['fit_status']}, NLL {c['nll']:.6f} on its own "
                         f"integration, {c['nll_simulated']:.6f} by simulation ("
                         + ("agree" if c["agrees"] else "disagree: not a fit") + ")")
            cert = c.get("certificate")
            if isinstance(cert, dict) and "certified" in cert:
                lines.append(f"  grid certificate: {'certified' if cert['certified'] else 'not certified'}"
                             f" ({cert.get('grid_points', '?')} points)")
            for w in c["warnings"]:
                lines.append(f"  warning: {w}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"PetabFit({self.name}: {self.status}, best_nll={self.best_nll:.6f}, "
                f"best_approach={self.best_approach}, fits={len(self.raw)})")


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if not np.isfinite(v) else float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (pd.Series, pd.DataFrame)):
        return json.loads(v.to_json())
    return str(v)


# ---------------------------------------------------------------------------
# the call
# ---------------------------------------------------------------------------
def _import(problem, noise):
    """``(name, PetabModel, PetabEstimation)`` of a folder, a YAML file, a PetabModel
    (imported with ``noise``, :func:`petab_problem`) or a PetabEstimation."""
    from ._problem import PetabEstimation, petab_problem
    from ._tables import PetabModel, read_petab
    if isinstance(problem, PetabEstimation):
        return problem.model.name, problem.model, problem
    if isinstance(problem, PetabModel):
        return problem.name, problem, petab_problem(problem, noise=noise)
    if not isinstance(problem, (str, os.PathLike)):
        raise TypeError(f"fit_petab takes a PEtab folder, a YAML file, a PetabModel or a "
                        f"PetabEstimation; got {type(problem).__name__}")
    path = Path(problem)
    if not path.exists():
        raise FileNotFoundError(f"PEtab problem {path} not found (a folder holding one "
                                f"PEtab YAML file, or the YAML file)")
    folder = path if path.is_dir() else path.parent
    model = read_petab(str(path))
    return folder.resolve().name, model, petab_problem(model, noise=noise)


def fit_petab(problem, *, approaches=DEFAULT_APPROACHES, starts=4, spread=0.3,
              scheme="enright", grid_points=300, grid="auto", refine=2, max_wall_time=120.0,
              max_problem_time=3600.0, all_approaches=False, workers=0, seed=0,
              options=None, noise="joint", reference=None, runner=None, progress=None,
              log=None) -> PetabFit:
    """Fit a PEtab problem: starts, approaches in order, polish, noise refinement,
    budgets, and a status that says what the result is (module docstring; docs/petab.md,
    "Fitting a problem: fit_petab").

    Parameters
    ----------
    problem : str, path, PetabModel or PetabEstimation
        A folder holding one PEtab YAML file, the YAML file, or an imported problem.
    approaches : sequence of str or comma-separated str
        Tried in order: ``'continuous_least_squares'`` (the continuous approach with
        the Gauss-Newton trust region, at most 300 residual evaluations per start) and
        the approaches of :func:`~pyomo_odeest.estimate`.
    starts : int >= 1
        Starts per approach: the nominal point and ``starts - 1`` Sobol points.
    spread : float > 0
        Half-width of the Sobol box around the nominal point, on the parameters'
        scales.
    scheme, grid_points, grid
        The discrete approaches' scheme and first grid: steps of at most
        horizon/``grid_points``; with ``grid='auto'`` they follow LSODA's steps at the
        start (:func:`first_grid`; ``'uniform'``: horizon/``grid_points`` everywhere).  The
        approaches certify and refine their grids themselves.
    refine : int >= 0
        Tolerance refits (rtol / 100 each) of the continuous approaches.
    max_wall_time : float >= 0
        Seconds of every fit (0: no limit).
    max_problem_time : float >= 0
        Seconds of the whole call from the start of the import (0: no limit): no fit
        starts after it, those started share what is left; the stages not run are
        listed (flag ``time_budget``).
    all_approaches : bool
        Run every approach (default: stop at the first that converges no worse than the
        start and the reference).
    workers : int >= 0
        Dask worker processes of the runner (0: serial); ignored with ``runner``.
    seed : int
        Seed of the Sobol starts.
    options : dict, optional
        Per approach name, more options of :func:`~pyomo_odeest.estimate` (e.g.
        ``{'simultaneous': {'max_refinements': 2}}``); they override the stage's.
    noise : {'joint', 'alternate'}
        How a folder, YAML file or PetabModel is imported
        (:func:`~pyomo_odeest.petab_io.petab_problem`): its estimated noise parameters
        (other than one profiled σ) fitted with θ (``'joint'``), or by the
        alternation after the fits (``'alternate'``).  A PetabEstimation keeps its own.
    reference : float, optional
        A reference NLL (PEtab's, without priors): flags ``worse_than_reference`` and
        ``nominal_mismatch``; an approach that converges above it does not end the
        search.
    runner : Runner, optional
        The runner of the fits (not closed here).
    progress : bool or None
        A bar of the fits done on standard error (None: when it is a terminal).
    log : callable, optional
        Called with one line of text per stage and fit (e.g. ``print``).
    """
    from ..nlp._progress import TaskProgress, progress_enabled
    from ..runner import Runner
    settings = FitSettings(approaches=approaches, starts=starts, spread=spread, scheme=scheme,
                           grid_points=grid_points, grid=grid, refine=refine,
                           max_wall_time=max_wall_time, max_problem_time=max_problem_time,
                           all_approaches=all_approaches, workers=workers, seed=seed,
                           options=options or {}, noise=noise)
    if reference is not None:
        reference = _number_any(reference, "reference")
    if log is not None and not callable(log):
        raise TypeError(f"log must be callable (e.g. print) or None, got {type(log).__name__}")
    progress_on = progress_enabled(progress)
    t0 = time.perf_counter()
    budget = Budget(settings.max_problem_time, settings.workers, log)
    budget.start = t0
    name, model, pe = _import(problem, settings.noise)
    from ._likelihood import petab_nll
    # the estimation's own simulator when it holds every condition: built once, and
    # used again for every fit's objective by simulation
    nominal = pe.simulated_nll() if pe.conditions == model.conditions else petab_nll(model)
    prior = model.prior_nll() if model.has_priors else 0.0
    start = nominal + prior                       # the objective at the problem's start
    r_obj = None if reference is None else reference + prior
    own = runner is None
    if own:
        runner = (Runner(mode="dask", n_workers=settings.workers, progress=False)
                  if settings.workers else Runner(mode="serial", progress=False))
    bar = TaskProgress(settings.starts * len(settings.approaches), progress_on,
                       f"petab {name}")
    run = _Run(pe, settings, runner, budget, name, log, bar)
    try:
        tables = _fit_approaches(run, start, r_obj)
    finally:
        bar.close()
        if own:
            runner.close()
    tab = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=["task", "approach", "stage", "status", "success", "nll_simulated",
                 "nll_discrete", "max_step", "rtol", "atol", "result"])
    status, best, value, flags = assess(tab, start, r_obj)
    if tab.empty:                                 # no fit ran: the start is the best known
        status, flags = NOT_STATIONARY, ["no_fit_better_than_its_start"]
    if reference is not None and abs(nominal - reference) > tolerance(reference):
        flags.append("nominal_mismatch")
    if budget.skipped:
        flags.append("time_budget")
    best_result = None
    if best is not None:
        best_result = best.get("result")
        if not hasattr(best_result, "estimates"):
            best_result = None
        best = best.drop(labels=["result"], errors="ignore")
    return PetabFit(name=name, estimation=pe, status=status, best_nll=float(value),
                    nominal_nll=float(start), reference=r_obj, best=best_result,
                    best_row=best, flags=flags, skipped=list(budget.skipped),
                    wall_s=time.perf_counter() - t0, settings=settings,
                    raw=tab.drop(columns=["result"], errors="ignore"), setup_s=pe.setup_s)


def _number_any(v, name):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return x
