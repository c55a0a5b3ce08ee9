"""PEtab benchmark suite: import, nominal likelihood, multistart fits on the runner.

    python benchmarks/petab_suite.py [FOLDER ...] [--approaches continuous_least_squares,reduced_space,simultaneous]
                                     [--starts 4] [--spread 0.3] [--scheme enright]
                                     [--grid-points 300] [--grid auto|uniform] [--refine 2] [--workers 0]
                                     [--max-wall-time 120] [--all-approaches]

Every FOLDER holding one PEtab YAML file is a problem (a folder holding
problem folders is searched one level down); default: the problems shipped
with the tests (``tests/data/petab``).  Per problem:

1. import (SBML + tables) and the nominal NLL by an independent simulation
   (:func:`pyomo_odeest.petab_io.petab_nll`), compared with ``references.tsv``
   beside the problems when it lists them;
2. per approach, :func:`pyomo_odeest.runner.multistart` on the runner: the
   nominal point plus ``starts - 1`` Sobol starts in the box nominal ±
   ``spread`` on the parameters' scales (log10 units for log10 parameters),
   clipped to the bounds, seeded; discrete approaches on ``--scheme`` with
   largest step horizon/``grid-points``, and (``--grid auto``, the default) no
   more than the median step of LSODA at the start (:func:`largest_step`);
3. when the best converged start's discrete and simulated objectives
   disagree (the result's "discretization error" warning), the approach is
   rerun from that start and the nominal point on a grid three times finer;
   when no start converged, from the nominal point on a grid three times
   finer; at most ``--refine`` times;
   the continuous approaches have no grid: when their starts did not converge
   to the best value they found, no worse than the problem's start, the best
   start (by simulation) is refitted with the integration tolerances
   divided by 100 (from the engine's defaults,
   :func:`~pyomo_odeest.approaches.continuous.default_tolerances`), at most
   ``--refine`` times;
4. problems with several estimated noise parameters (σ estimated by
   alternation, :meth:`~pyomo_odeest.petab_io.PetabEstimation.fit`): the best
   start of the approach is refined by ``fit`` (θ and σ jointly), starting no
   new round after 5 × ``--max-wall-time`` (an alternation that stops before
   the noise parameters settle is not converged);
5. every start with finite estimates is evaluated by simulation (PEtab's NLL
   by :class:`~pyomo_odeest.petab_io.PetabSimulator`, plus the priors when
   the problem has them: the objective the estimation minimizes), so a
   discretization artefact cannot be reported as a fit;
6. the approaches are tried in the order given until one converges to a point
   no worse than the problem's start and than the reference
   (``--all-approaches``: every one); after each, when no fit converged to the
   best point found and another approach than the first found it, the first
   approach (the cheapest) is run from that point, and again from where it
   stops while it lowers the best value without converging (at most 3 runs,
   :func:`polish`).  ``continuous_least_squares`` is the
   continuous approach with the Gauss–Newton trust region
   (``optimizer='least_squares'``, at most 300 residual evaluations per
   start), first by default: it is the cheapest where it converges.

Every fit (Ipopt's, and the least squares', checked once per iterate) stops at
``max_wall_time`` from ``--max-wall-time`` (default 120 s per fit, so that a
run over the collection ends; 0: no limit).  Ipopt options: when a start puts a
free parameter on one of its bounds, ``bound_push = bound_frac = 1e-8``
(:func:`ipopt_options`), so the fit starts where the user's start is.  Those
limits are checked between iterations; as a backstop for what they cannot stop
(a model's set-up, the compilation of kernels, one Ipopt iteration of minutes),
the fits of the approaches other than the least squares run in a child process
(the runner's ``task_timeout``) killed at 2 × their limit + 300 s: such a start
is reported ``time_limit`` without estimates.

Prints one line per problem,
``petab_problem: name=... nominal_nll=... best_nll=... best_approach=... wall_s=... status=...``
(values are the objective the estimation minimizes: PEtab's NLL, plus the
priors when the problem has them), followed by ``reference_nll`` (the
reference on the same objective) and ``ref_gap`` (best − reference), the
discrete NLL of the best start and its grid, ``flags`` and the approaches'
failures, and ends with ``petab_suite: problems=... imported=... median_wall_s=...``;
``--out`` (default ``benchmarks/results/petab_suite.tsv``) keeps one row per
problem with its best estimates (JSON), updated by each run.
``status`` is

* ``converged`` — converged to a stationary point (the approach's success,
  its simulation agreeing with its discretization), no worse than the
  problem's own start (the nominal point);
* ``best_found_not_stationary`` — no converged start reaches the best value
  found; ``best_nll`` is the best value reached (by a start that did not
  converge, or the start itself when every converged fit is worse: flag
  ``no_fit_better_than_its_start``): not a fit;
* ``failed`` — no start gives finite estimates; ``import_failed`` (with the
  exception's name).

Flags: ``worse_than_reference`` (``ref_gap`` > 1e-3·max(1, |ref|)),
``nominal_mismatch`` (the nominal NLL differs from the reference by more).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "data", "petab")


def problem_folders(paths):
    out = []
    for p in paths:
        p = os.path.abspath(p)
        if any(f.endswith((".yaml", ".yml")) for f in os.listdir(p)):
            out.append(p)
        else:
            out += sorted(os.path.join(p, d) for d in os.listdir(p)
                          if os.path.isdir(os.path.join(p, d)))
    return out


def references(folders):
    ref = {}
    for parent in {os.path.dirname(f) for f in folders} | set(folders):
        f = os.path.join(parent, "references.tsv")
        if os.path.exists(f):
            ref.update(pd.read_csv(f, sep="\t", index_col="problem")["reference_nll"].to_dict())
    return ref


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
    """The two fields of a result that :meth:`PetabEstimation.simulated_nll` reads."""

    def __init__(self, estimates, objective):
        self.estimates, self.objective, self.extra = estimates, objective, {}


def simulation_step(problem, rtol=1e-6):
    """Median step of LSODA (``rtol``, ``atol = 1e-3 rtol``) at the start, over the
    experiments: the time scale on which the solution changes."""
    from scipy.integrate import solve_ivp
    steps = []
    for sp in (problem.experiment_problems if problem.experiments else [problem]):
        f, u = sp.numeric_rhs(), sp.u0
        sol = solve_ivp(lambda t, x: f(x, u, t), (sp.t0, sp.T), sp.initial_state(u),
                        method="LSODA", rtol=rtol, atol=1e-3 * rtol)
        steps.append(np.diff(sol.t))
    return float(np.median(np.concatenate(steps)))


def largest_step(problem, args):
    """Largest step of the discrete approaches: horizon/``grid-points``, and with
    ``--grid auto`` no more than the median step of an adaptive integrator at the
    start (:func:`simulation_step`), so fast dynamics get a grid that resolves them."""
    h = (problem.T - problem.t0) / args.grid_points
    if args.grid == "auto":
        h = min(h, simulation_step(problem))
    return h


def on_bound(problem, u, rtol=1e-8):
    """Names of the free parameters that ``u`` (all parameters) puts on one of their bounds."""
    out = []
    for p, v in zip(problem.parameters, np.asarray(u, dtype=float)):
        if p.fixed:
            continue
        for b in (p.lb, p.ub):
            if b is not None and abs(v - b) <= rtol * max(1.0, abs(b)):
                out.append(p.name)
                break
    return out


def ipopt_options(problem, starts, args, wall=None):
    """Ipopt options of one multistart call.

    ``max_wall_time`` from ``--max-wall-time`` (``wall``: the limit to use instead, from the
    problem's :class:`Budget`); when a start puts a free
    parameter on its bound, ``bound_push = bound_frac = 1e-8``: Ipopt would
    otherwise move it into the interior by up to 1e-2 of the bound's magnitude
    before the first iteration (0.01 of an initial concentration in [0, 1],
    0.11 log10 units of a rate on its bound), far from the start the user gave.
    Starts inside the box by more than 1e-8 are not affected by either option.
    """
    opts = {}
    if wall is None and args.max_wall_time:
        wall = float(args.max_wall_time)
    if wall:
        opts["max_wall_time"] = float(wall)
    if any(on_bound(problem, u) for u in starts):
        opts.update(bound_push=1e-8, bound_frac=1e-8)
    return opts


#: The continuous approach with the Gauss-Newton trust region (``optimizer='least_squares'``).
LEAST_SQUARES = "continuous_least_squares"
LEAST_SQUARES_MAX_NFEV = 300
#: the noise refinement starts no new round after this many fits' time limits
NOISE_ROUNDS_BUDGET = 5
#: a fit of the other approaches is killed at KILL_FACTOR x its time limit + KILL_GRACE s
KILL_FACTOR, KILL_GRACE = 2.0, 300.0
#: the first approach restarts from the best point at most this many times (polish)
POLISH_ROUNDS = 3


class Budget:
    """The time a problem may take (``--max-problem-time``, seconds from the start of its
    import; None: no limit).  No fit starts after it, and a fit started before it gets
    no more than its share of what is left (:meth:`fit_limit`); a fit that has started
    runs to its own limit (Ipopt's ``max_wall_time`` counts from Ipopt's start: the
    model's set-up is not interrupted)."""

    def __init__(self, seconds, workers=0):
        self.start = time.perf_counter()
        self.seconds = float(seconds) if seconds else None
        self.workers = max(1, int(workers or 0))
        self.skipped = []                         # stages not run, in order

    def left(self):
        if self.seconds is None:
            return np.inf
        return self.seconds - (time.perf_counter() - self.start)

    def allows(self, stage):
        """Whether ``stage`` may start; records it as not run otherwise."""
        if self.left() > 0:
            return True
        self.skipped.append(stage)
        print(f"  not run: {stage} (the problem's time budget of {self.seconds:.0f} s is "
              "spent)", flush=True)
        return False

    def fit_limit(self, per_fit, n_starts=1):
        """Wall-time limit of each of ``n_starts`` fits: ``per_fit`` (``--max-wall-time``,
        0: none), and no more than their share of the budget left (the runner runs
        ``workers`` of them at a time)."""
        share = self.left() / np.ceil(n_starts / self.workers)
        limit = min(float(per_fit) if per_fit else np.inf, share)
        return None if not np.isfinite(limit) else max(limit, 1.0)


def fits(pe, approach, args, runner, h, starts, tol=None, budget=None):
    """Multistart of one approach; the table with the objective by simulation per start.
    ``tol``: the continuous approaches' ``(rtol, atol)`` (None: the engine's defaults);
    ``budget``: the problem's :class:`Budget`."""
    from pyomo_odeest.runner import multistart
    prob = pe.problem
    base = "continuous" if approach == LEAST_SQUARES else approach
    opts = {} if base.startswith("continuous") else dict(scheme=args.scheme, max_step=h)
    if tol is not None:
        opts.update(rtol=tol[0], atol=tol[1])
    budget = budget or Budget(None, args.workers)
    wall = budget.fit_limit(args.max_wall_time, args.starts if starts is None else len(starts))
    if approach == LEAST_SQUARES:
        opts.update(optimizer="least_squares", options=dict(max_nfev=LEAST_SQUARES_MAX_NFEV))
        if wall:
            opts["max_wall_time"] = wall
    else:
        ipopt = ipopt_options(prob, [prob.u0] if starts is None else starts, args, wall)
        if ipopt:
            opts["options"] = ipopt
    # the backstop of the fits' own limits, which cannot stop a model's set-up or one long
    # Ipopt iteration: the fit runs in a child process killed at KILL_FACTOR x its limit
    # (+ KILL_GRACE s); the least squares keeps its models' set-up in this process
    kill = KILL_FACTOR * wall + KILL_GRACE if wall and approach != LEAST_SQUARES else None
    runner.task_timeout, before = kill, runner.task_timeout
    try:
        ms = multistart(prob, n=args.starts - 1 if starts is None else 0, runner=runner,
                        approach=base, space="linear", bounds=start_box(prob, args.spread),
                        starts=starts if starts is not None else [prob.u0], seed=args.seed,
                        options=opts)
    finally:
        runner.task_timeout = before
    tab = ms.table.copy()
    tab["approach"] = approach
    names = prob.parameter_names
    nll_d, nll_s = [], []
    for _, r in tab.iterrows():
        est = pd.Series([float(r.get(f"p_{k}", np.nan)) for k in names], index=names)
        if not np.isfinite(float(r.get("objective", np.nan))) or not np.all(np.isfinite(est)):
            nll_d.append(np.nan)
            nll_s.append(np.nan)
            continue
        nll_d.append(pe.nll(float(r["objective"])))
        nll_s.append(simulated(pe, _Estimates(est, float(r["objective"]))))
    tab["nll_discrete"], tab["nll_simulated"] = nll_d, nll_s
    tab["max_step"] = h
    tab["rtol"] = np.nan if tol is None else tol[0]
    return tab


def simulated(pe, result):
    """The objective the estimation minimizes (PEtab's NLL, plus the priors), by simulation
    at a result's estimates; NaN where they cannot be simulated."""
    try:
        return pe.simulated_nll(result, priors=True)
    except Exception:  # noqa: BLE001 - a start whose estimates cannot be simulated
        return np.nan


def refine_noise(pe, approach, args, tab, h, budget=None):
    """Problems with several noise parameters: ``fit`` (θ and σ alternately) from the
    approach's best start; one row like those of :func:`fits` (or None).  Its rounds
    stop at 5 × ``--max-wall-time`` and at the problem's ``budget``."""
    if not pe.noise_parameters:
        return None
    ok = tab[np.isfinite(tab["nll_simulated"])]
    if ok.empty:
        return None
    best = ok.loc[ok["nll_simulated"].idxmin()]
    names = pe.problem.parameter_names
    base = "continuous" if approach == LEAST_SQUARES else approach
    opts = {} if base.startswith("continuous") else dict(scheme=args.scheme, max_step=h)
    if approach == LEAST_SQUARES:
        opts.update(optimizer="least_squares", options=dict(max_nfev=LEAST_SQUARES_MAX_NFEV))
    budget = budget or Budget(None, args.workers)
    if not budget.allows(f"{approach} noise refinement"):
        return None
    wall = budget.fit_limit(args.max_wall_time)
    rounds = budget.left()
    if args.max_wall_time:
        rounds = min(rounds, NOISE_ROUNDS_BUDGET * float(args.max_wall_time))
    if wall:
        opts["max_wall_time"] = wall
    t0 = time.perf_counter()
    row = dict(task=-1, approach=approach + "+noise", max_step=h, nll_discrete=np.nan,
               nll_simulated=np.nan, warnings="", iterations=0)
    try:
        res = pe.fit(base, u0=best[[f"p_{k}" for k in names]].to_numpy(dtype=float),
                     max_time=rounds if np.isfinite(rounds) else None, **opts)
    except Exception as err:  # noqa: BLE001 - reported as the row's status
        row.update(success=False, status=f"noise fit failed: {type(err).__name__}",
                   wall_s=time.perf_counter() - t0)
        return pd.DataFrame([row])
    row.update(success=bool(res.success), status=str(res.status),
               objective=float(res.objective),
               nll_discrete=float(res.extra.get("petab_nll", np.nan)),
               nll_simulated=simulated(pe, res), warnings="; ".join(res.warnings),
               iterations=res.extra.get("petab_rounds", 0), wall_s=time.perf_counter() - t0)
    row.update({f"p_{k}": float(v) for k, v in res.estimates.items()})
    return pd.DataFrame([row])


def status_token(status):
    """A status as one ``key=value``-safe token: the part before its first ':' with every
    run of other characters than letters, digits, '.' and '_' turned into '_'
    (``"`xtol` termination ...; not stationary: ..."`` ->
    ``xtol_termination_..._not_stationary``)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", str(status).split(":")[0]).strip("_")


def mismatch(row):
    """The start's own NLL (its discretization's, or the continuous engine's) and PEtab's
    independent simulation disagree: the result's "discretization error" warning, or a
    difference beyond the package's rule for it (5 % plus half a unit).  Such a start is
    neither a fit nor a best value found: one of the two integrations is wrong there."""
    if "discretization error" in str(row.get("warnings", "")):
        return True
    d, s = float(row.get("nll_discrete", np.nan)), float(row.get("nll_simulated", np.nan))
    return bool(np.isfinite(d) and np.isfinite(s) and abs(d - s) > 0.5 + 0.05 * abs(s))


#: statuses of a problem (see the module docstring)
CONVERGED, NOT_STATIONARY, FAILED = "converged", "best_found_not_stationary", "failed"


def tolerance_refit(tab, tol, prob, start):
    """The continuous approaches' refinement (they have no grid): ``None`` when the fits
    at the tolerances ``tol`` (None: the engine's defaults) converged to the best value
    they found, no worse than ``start`` (:func:`assess`), when none has finite
    estimates (refused or failed), or when the best ran out of its evaluations (it was
    still descending): not a matter of tolerances; else ``(tol / 100,
    [their best start by simulation, or the problem's start when that is better])``.

    An objective whose integration error hides its minimum (oscillators: Borghans)
    stops every optimizer short of it; tighter tolerances move that floor down."""
    from pyomo_odeest.approaches.continuous import default_tolerances
    cur = tab if tol is None else tab[tab["rtol"] == tol[0]]
    status, best, _, _ = assess(cur, start, None)
    if status == CONVERGED:
        return None
    r0, a0 = tol if tol is not None else default_tolerances()
    if not np.isfinite(cur["nll_simulated"].astype(float)).any():
        return None                  # refused or failed everywhere: not a tolerance matter
    if best is not None and str(best.get("status", "")) == "max_iterations":
        return None                  # still descending when its budget ran out (Fujita)
    tighter = (r0 / 100.0, a0 / 100.0)
    if best is None or float(best["nll_simulated"]) > start:
        return tighter, [prob.u0]    # nothing better than the start (or nothing trusted)
    return tighter, [best[[f"p_{k}" for k in prob.parameter_names]].to_numpy(dtype=float)]


def tolerance(value):
    return 1e-3 * max(1.0, abs(value))


def assess(tab, start, r):
    """Status of a problem from its fits so far: ``(status, best row, best value, flags)``.

    ``start`` is the objective at the problem's own start (the nominal point, by
    simulation); ``r`` the reference on the same objective (or None).  A converged start
    is one its approach reports as successful (stationary) whose simulation agrees with
    its discretization; the problem is ``converged`` when the best converged start is the
    best value found and no worse than ``start``.  Otherwise the best value found (by a
    start that did not converge, or ``start`` itself) is ``best_found_not_stationary``.
    A start whose two integrations disagree (:func:`mismatch`) counts for neither.
    """
    fin = tab[np.isfinite(tab["nll_simulated"].astype(float))]
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
    """A problem needs no further approach: converged, no worse than its reference."""
    return status == CONVERGED and not flags


def run_problem(folder, args, ref, runner):
    from pyomo_odeest.petab_io import petab_problem, read_petab, petab_nll
    name = os.path.basename(folder)
    t0 = time.perf_counter()
    budget = Budget(args.max_problem_time, args.workers)
    try:
        model = read_petab(folder)
        pe = petab_problem(model)
    except Exception as err:  # noqa: BLE001 - reported as the status
        return dict(name=name, nominal_nll=np.nan, best_nll=np.nan, best_approach="-",
                    wall_s=time.perf_counter() - t0, status=f"import_failed:{type(err).__name__}",
                    imported=False, detail=str(err)[:200], flags=[], reference=None)
    nominal = petab_nll(model)
    prior = model.prior_nll() if model.has_priors else 0.0
    start = nominal + prior                       # the objective at the problem's start
    r = ref.get(name)
    r_obj = None if r is None else r + prior      # the reference on the same objective
    prob = pe.problem
    tables, polished = [], set()
    h0 = largest_step(prob, args)
    for approach in args.approaches:
        h, tol = h0, None
        if not budget.allows(approach):
            continue
        tab = fits(pe, approach, args, runner, h, None, budget=budget)
        for _ in range(args.refine):
            if approach.startswith("continuous"):
                refit = tolerance_refit(tab, tol, prob, start)
                if refit is None:
                    break
                tol, starts = refit
                if not budget.allows(f"{approach} refit rtol={tol[0]:.0e}"):
                    break
                print(f"  {name} {approach}: no fit converged to the best value found; refit "
                      f"with rtol={tol[0]:.0e}, atol={tol[1]:.0e}", flush=True)
                tab = pd.concat([tab, fits(pe, approach, args, runner, h, starts, tol,
                                           budget=budget)], ignore_index=True)
                continue
            cur = tab[tab["max_step"] == h]
            ok = cur[np.isfinite(cur["nll_simulated"]) & cur["success"].astype(bool)]
            if ok.empty:                  # every start failed on this grid: refine, restart
                starts = [prob.u0]
                why = "no start converged"
            else:
                best = ok.loc[ok["nll_discrete"].idxmin()]
                if not mismatch(best):
                    break
                starts = [prob.u0, best[[f"p_{k}" for k in prob.parameter_names]]
                          .to_numpy(dtype=float)]
                why = (f"discrete NLL {best['nll_discrete']:.6f} but "
                       f"{best['nll_simulated']:.6f} by simulation")
            h /= 3.0
            if not budget.allows(f"{approach} refit max_step={h:.4g}"):
                break
            print(f"  {name} {approach}: {why}; refit on max_step={h:.4g}", flush=True)
            tab = pd.concat([tab, fits(pe, approach, args, runner, h, starts, budget=budget)],
                            ignore_index=True)
        extra = refine_noise(pe, approach, args, tab, h, budget)
        if extra is not None:
            tab = pd.concat([tab, extra], ignore_index=True)
        for _, row in tab.iterrows():
            print(f"  {name} {row['approach']} max_step={row['max_step']:.4g} start "
                  f"{int(row['task'])}: {row['status']}, {row.get('iterations', 0)} it, "
                  f"nll(discrete)={row['nll_discrete']:.6f} "
                  f"nll(simulated)={row['nll_simulated']:.6f} "
                  f"({row.get('wall_s', np.nan):.1f} s)"
                  + (f" {str(row.get('error'))[:300]}"
                     if row["status"] in ("error", "time_limit") and isinstance(
                         row.get("error"), str) else ""),
                  flush=True)
        tables.append(tab)
        tables = polish(pe, args, runner, h0, tables, start, r_obj, budget, name, polished)
        status, best, value, flags = assess(pd.concat(tables, ignore_index=True), start, r_obj)
        if solved(status, flags) and not args.all_approaches and \
                approach != args.approaches[-1]:
            rest = args.approaches[args.approaches.index(approach) + 1:]
            print(f"  {name}: converged (by {best['approach']}); not run: {','.join(rest)}",
                  flush=True)
            break
    if not tables:                                # the import took the whole budget
        tables.append(pd.DataFrame(columns=["approach", "status", "success", "nll_simulated",
                                            "nll_discrete", "max_step"]))
    tab = pd.concat(tables, ignore_index=True)
    detail = ";".join(f"{a}:{status_token(s)}" for a, s, ok in
                      zip(tab["approach"], tab["status"], tab["success"]) if not bool(ok))
    status, best, value, flags = assess(tab, start, r_obj)
    if tab.empty:                                 # no fit ran: the start is the best known
        status, flags = NOT_STATIONARY, ["no_fit_better_than_its_start"]
    if r is not None and abs(nominal - r) > tolerance(r):
        flags.append("nominal_mismatch")
    if budget.skipped:
        flags.append("time_budget")
        detail = ";".join([detail] * bool(detail) + ["not_run:" + status_token(k) for k in
                                                   budget.skipped])
    out = dict(name=name, nominal_nll=start, best_nll=value, wall_s=time.perf_counter() - t0,
               status=status, flags=flags, imported=True, detail=detail,
               best_approach="-" if best is None else best["approach"], reference=r_obj)
    if best is not None:
        out.update(best_discrete=float(best["nll_discrete"]), best_step=float(best["max_step"]),
                   best_rtol=float(best.get("rtol", np.nan)),
                   estimates={k: float(best[f"p_{k}"]) for k in prob.parameter_names})
    return out


def polish(pe, args, runner, h, tables, start, r_obj, budget, name, polished=None):
    """When no fit converged to the best point found and that point came from another
    approach than the first (the cheapest), the first approach is run from it: a local
    method started where an explorer stopped; again from where it stops while it lowers
    the best value without converging (at most ``POLISH_ROUNDS`` runs).  ``tables`` with
    its rows added; ``polished``: the points (bytes) already polished, not again."""
    polished = set() if polished is None else polished
    first = args.approaches[0]
    for k in range(POLISH_ROUNDS):
        if not tables:
            return tables
        status, best, value, _ = assess(pd.concat(tables, ignore_index=True), start, r_obj)
        if status == CONVERGED or best is None or (k == 0 and best["approach"] == first):
            return tables
        u = best[[f"p_{n}" for n in pe.problem.parameter_names]].to_numpy(dtype=float)
        if u.tobytes() in polished or not budget.allows(f"{first} from the best point"):
            return tables
        polished.add(u.tobytes())
        print(f"  {name}: best point by {best['approach']} (not converged, "
              f"{float(best['nll_simulated']):.6f}); {first} from it", flush=True)
        tab = fits(pe, first, args, runner, h, [u], budget=budget)
        for _, row in tab.iterrows():
            print(f"  {name} {first} from the best point: {row['status']}, "
                  f"{row.get('iterations', 0)} it, nll(simulated)={row['nll_simulated']:.6f} "
                  f"({row.get('wall_s', np.nan):.1f} s)", flush=True)
        tables = tables + [tab]
        if not (assess(pd.concat(tables, ignore_index=True), start, r_obj)[2]
                < value - 1e-6 * max(1.0, abs(value))):
            return tables                         # no lower: a restart would not help
    return tables


def write_results(path, rows):
    """Update the TSV ``path``: one row per problem (replacing an earlier row of the same
    name), with the best estimates as JSON, so the fits can be checked or restarted."""
    import json
    cols = ["name", "status", "best_nll", "reference", "nominal_nll", "best_approach",
            "wall_s", "best_rtol", "best_step", "flags", "estimates"]
    new = pd.DataFrame([{**{k: r.get(k) for k in cols}, "flags": ",".join(r["flags"]),
                         "estimates": json.dumps(r.get("estimates"))} for r in rows],
                       columns=cols)
    if os.path.exists(path):
        old = pd.read_csv(path, sep="\t")
        new = pd.concat([old[~old["name"].isin(new["name"])], new], ignore_index=True)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new.sort_values("name").to_csv(path, sep="\t", index=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=[DEFAULT])
    ap.add_argument("--approaches", default=f"{LEAST_SQUARES},reduced_space,simultaneous",
                    type=lambda s: [a.strip() for a in s.split(",") if a.strip()])
    ap.add_argument("--starts", type=int, default=4,
                    help="starts per approach: the nominal point and starts-1 Sobol points")
    ap.add_argument("--spread", type=float, default=0.3)
    ap.add_argument("--scheme", default="enright",
                    help="scheme of the discrete approaches (Enright's implicit scheme copes "
                         "with the stiff problems of the collection)")
    ap.add_argument("--grid-points", type=int, default=300,
                    help="largest step = horizon / grid-points")
    ap.add_argument("--grid", choices=("auto", "uniform"), default="auto",
                    help="auto: largest step no more than the median step of LSODA "
                         "(rtol 1e-6) at the start; uniform: horizon/grid-points")
    ap.add_argument("--refine", type=int, default=2,
                    help="grid refinements (step / 3 each) when the best start disagrees "
                         "with its simulation")
    ap.add_argument("--max-wall-time", type=float, default=120.0,
                    help="max_wall_time (seconds) of every fit (Ipopt's, and the least "
                         "squares'), so that the suite ends; a fit that hits it is not "
                         "converged (0: no limit)")
    ap.add_argument("--max-problem-time", type=float, default=3600.0,
                    help="seconds a problem may take, from the start of its import: no fit "
                         "starts after it, the fits started before it share what is left, "
                         "and the stages not run are listed (flag time_budget) (0: no limit)")
    ap.add_argument("--all-approaches", action="store_true",
                    help="run every approach (default: stop at the first that converges to "
                         "a point no worse than the start and the reference)")
    ap.add_argument("--workers", type=int, default=0,
                    help="Dask worker processes of the runner (0: serial)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "petab_suite.tsv"),
                    help="TSV updated with one row per problem and its best estimates "
                         "('' : none)")
    args = ap.parse_args(argv)
    for name, value, least in (("--starts", args.starts, 1), ("--grid-points", args.grid_points, 1),
                               ("--refine", args.refine, 0), ("--workers", args.workers, 0),
                               ("--spread", args.spread, 0), ("--max-wall-time",
                                                              args.max_wall_time, 0),
                               ("--max-problem-time", args.max_problem_time, 0)):
        if not value >= least:                   # NaN too
            ap.error(f"{name} must be >= {least}, got {value}"
                     + (" (the nominal start counts as one)" if name == "--starts" else ""))
    for f in args.folders:
        if not os.path.isdir(f):
            ap.error(f"no such folder: {f!r} (give folders of PEtab problems, each with its "
                     "YAML file, or a folder of such folders)")
    from pyomo_odeest.runner import Runner
    folders = problem_folders(args.folders)
    if not folders:
        ap.error(f"no PEtab problem (a folder with a .yaml file) in {args.folders}")
    ref = references(folders)
    rows = []
    runner = (Runner(mode="dask", n_workers=args.workers, progress=False) if args.workers
              else Runner(mode="serial", progress=False))
    try:
        for f in folders:
            row = run_problem(f, args, ref, runner)
            rows.append(row)
            extra = ""
            if row.get("reference") is not None:
                extra = (f" reference_nll={row['reference']:.6f} "
                         f"ref_gap={row['best_nll'] - row['reference']:+.6f}")
            if row["flags"]:
                extra += " flags=" + ",".join(row["flags"])
            if "best_discrete" in row:
                extra += (f" best_discrete_nll={row['best_discrete']:.6f} "
                          f"best_max_step={row['best_step']:.4g}")
            print(f"petab_problem: name={row['name']} nominal_nll={row['nominal_nll']:.6f} "
                  f"best_nll={row['best_nll']:.6f} best_approach={row['best_approach']} "
                  f"wall_s={row['wall_s']:.1f} status={row['status']}{extra}"
                  + (f" failures={row['detail']}" if row["detail"] else ""), flush=True)
    finally:
        runner.close()
    if args.out:
        write_results(args.out, rows)
    walls = [r["wall_s"] for r in rows]
    print(f"petab_suite: problems={len(rows)} imported={sum(r['imported'] for r in rows)} "
          f"median_wall_s={np.median(walls) if walls else float('nan'):.1f}")
    return 0 if all(solved(r["status"], r["flags"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
