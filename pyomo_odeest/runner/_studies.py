r"""Studies made of independent estimations: multistart, bootstrap, profile points.

Each function builds the tasks and hands them to a :class:`~.core.Runner`
(serial or Dask); the problem is shared (sent once, rebuilt once per worker).

* :func:`multistart` — starts from a Sobol or Latin-hypercube design
  (:mod:`scipy.stats.qmc`) in log or linear space within bounds, plus the
  user's starts; the end points are clustered, the best cluster and the
  number of starts that reached it are reported.
* :func:`bootstrap` — residual resampling (refit to the fitted values plus
  resampled standardized residuals) or case resampling (measurement times
  drawn with replacement, as weight multiplicities).
* :func:`profile_points` — the parameter fixed at each value, the others
  re-estimated: the independent points of a profile likelihood.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..approaches._estimate import estimate
from ..analysis._diagnostics import end_objective
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import EstimationResult
from ._core import CAN_FORK, RunResult, Runner, Task, _root, _row, shared, task_seeds

__all__ = ["multistart", "multistart_starts", "cluster_end_points", "MultistartResult",
           "START_TIME_FACTOR", "START_TIME_FLOOR",
           "bootstrap", "BootstrapResult", "profile_points", "estimate_task"]


def estimate_task(problem, approach="simultaneous", u0=None, options=None):
    """One estimation (the function every study's task runs)."""
    kw = dict(options or {})
    if u0 is not None:
        kw["u0"] = np.asarray(u0, dtype=float)
    return estimate(problem, approach, **kw)


def _runner(runner, problem):
    """The runner (None: serial, here) and ``problem`` as its tasks take it."""
    if runner is None:
        runner = Runner(mode="serial", progress=None)     # shown when stderr is a terminal
    elif not isinstance(runner, Runner):
        raise TypeError(f"runner must be a pyomo_odeest Runner or None (serial), got "
                        f"{type(runner).__name__}")
    return runner, (shared(problem) if runner.mode == "dask" else problem)


def _each(problem, fn):
    """``fn(name, sp)`` per experiment (a dict by name), or ``fn(None, problem)`` without."""
    if not problem.experiments:
        return fn(None, problem)
    return {e: fn(e, sp) for e, sp in zip(problem.experiment_names, problem.experiment_problems)}


# ---------------------------------------------------------------------------
# multistart
# ---------------------------------------------------------------------------
def multistart_starts(problem: EstimationProblem, n, method="sobol", space="log", bounds=None,
                      seed=None, starts=None) -> pd.DataFrame:
    """Start points (one row each, all parameters as columns; fixed ones at their value).

    Parameters
    ----------
    n : int
        Number of generated starts (Sobol: a power of 2 keeps the design balanced).
    method : 'sobol' or 'lhs'
    space : 'log' or 'linear'
        Sample ``log u`` (the bounds must then be positive) or ``u`` uniformly.
    bounds : mapping name -> (lo, hi), optional
        Sampling box of free parameters (default: the parameter's bounds,
        which must then be finite).
    starts : sequence of arrays or mappings, optional
        The user's own starts (placed first; a mapping fills missing
        parameters with their start values).
    seed : int or SeedSequence, optional
        Scrambling seed of the design.
    """
    from scipy.stats import qmc

    names = problem.parameter_names
    free = [p for p in problem.parameters if not p.fixed]
    if method not in ("sobol", "lhs"):
        raise ValueError(f"method must be 'sobol' or 'lhs', got {method!r}")
    if space not in ("log", "linear"):
        raise ValueError(f"space must be 'log' or 'linear', got {space!r}")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    bounds = dict(bounds or {})
    unknown = sorted(set(bounds) - set(names))
    if unknown:
        raise ProblemError(f"bounds name {unknown}, which are not parameters (known: {names})")
    rows = []
    for s in starts or ():
        if isinstance(s, dict):
            bad = sorted(set(s) - set(names))
            if bad:
                raise ProblemError(f"start names {bad}, which are not parameters ({names})")
            rows.append([float(s.get(k, p.value)) for k, p in zip(names, problem.parameters)])
        else:
            v = np.asarray(s, dtype=float).reshape(-1)
            if v.shape != (len(names),):
                raise ProblemError(f"a start needs {len(names)} values ({names}); got {v.shape}")
            rows.append(v.tolist())
    if n:
        lo, hi = [], []
        for p in free:
            a, b = bounds.get(p.name, (p.lb, p.ub))
            if a is None or b is None or not (np.isfinite(a) and np.isfinite(b)) or not a < b:
                raise ProblemError(f"multistart needs finite bounds lo < hi for parameter "
                                   f"'{p.name}' (got ({a}, {b})); pass bounds={{'{p.name}': "
                                   f"(lo, hi)}} or set the parameter's lb/ub")
            if space == "log" and a <= 0:
                raise ProblemError(f"space='log' needs positive bounds; parameter '{p.name}' "
                                   f"has lo = {a} (use space='linear')")
            lo.append(float(a))
            hi.append(float(b))
        lo, hi = np.array(lo), np.array(hi)
        rng = np.random.default_rng(seed)
        if method == "sobol":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)     # balance note for n != 2^k
                U = qmc.Sobol(len(free), scramble=True, seed=rng).random(n)
        else:
            U = qmc.LatinHypercube(len(free), seed=rng).random(n)
        if space == "log":
            X = np.exp(np.log(lo) + U * (np.log(hi) - np.log(lo)))
        else:
            X = lo + U * (hi - lo)
        fmask = problem.free_mask
        for x in X:
            full = problem.u0.copy()
            full[fmask] = x
            rows.append(full.tolist())
    return pd.DataFrame(rows, columns=names)


def cluster_end_points(table, names, obj_tol=1e-6, x_tol=1e-3, fits=None, fit_tol=1e-4):
    """Group converged end points that are the same minimum.

    Objectives are the ODE's where the table has them (:func:`end_objective`), so a
    minimum of a grid that the ODE does not have is not counted as one.

    Two end points are one minimum when their objectives agree to
    ``obj_tol`` (relative, floor 1) and either every parameter agrees to
    ``x_tol`` (relative, floor 1) or — with ``fits`` — they fit the data
    identically: their predictions of the measured values agree to
    ``fit_tol`` relative to the largest prediction.  Two parameter sets with
    the same objective and the same predictions are *equivalent* minima (the
    data cannot tell them apart: a non-identifiable direction, e.g. a
    symmetric parametrisation), not a spurious one.  Greedy in order of
    increasing objective: each point joins the first cluster whose best point
    is that close.  Returns ``(labels, clusters)``: a Series of cluster ids
    (NaN for failed runs; 0 = lowest objective) and a table of the clusters
    (objective, estimates of the best point, ``hits``, and
    ``parameter_sets``: how many distinct parameter sets reached it).

    ``fits``: mapping of the table's index to a 1-d array of predictions
    (e.g. ``result.fitted`` flattened), None where unknown.
    """
    if "objective" not in table:                     # no task returned a result
        table = table.assign(objective=np.nan)
    table = table.assign(objective=end_objective(table))      # the ODE's, where known
    ok = table[table["success"].astype(bool) & np.isfinite(table["objective"].astype(float))]
    order = ok.sort_values("objective", kind="stable")
    cols = [f"p_{k}" for k in names]
    fits = fits or {}

    def same_fit(a, b):
        if a is None or b is None or np.shape(a) != np.shape(b):
            return False
        a, b = np.asarray(a, float), np.asarray(b, float)
        ok_ = np.isfinite(a) & np.isfinite(b)
        if not ok_.any():
            return False
        scale = max(float(np.max(np.abs(b[ok_]))), 1e-300)
        return float(np.max(np.abs(a[ok_] - b[ok_]))) <= fit_tol * scale

    reps, sets, labels = [], [], pd.Series(np.nan, index=table.index)
    for idx, r in order.iterrows():
        x, f, z = r[cols].to_numpy(dtype=float), float(r["objective"]), fits.get(idx)
        for c, (xc, fc, zc) in enumerate(reps):
            if abs(f - fc) > obj_tol * max(1.0, abs(fc)):
                continue
            near = [np.all(np.abs(x - xs) <= x_tol * np.maximum(1.0, np.abs(xs)))
                    for xs in sets[c]]
            if any(near) or same_fit(z, zc):
                labels[idx] = c
                if not any(near):
                    sets[c].append(x)
                break
        else:
            labels[idx] = len(reps)
            reps.append((x, f, z))
            sets.append([x])
    hits = labels.value_counts().sort_index()
    clusters = pd.DataFrame([{"cluster": c, "objective": f, **dict(zip(names, x)),
                              "hits": int(hits.get(c, 0)), "parameter_sets": len(sets[c])}
                             for c, (x, f, _) in enumerate(reps)])
    if clusters.empty:
        clusters = pd.DataFrame(columns=["cluster", "objective", *names, "hits",
                                         "parameter_sets"])
    return labels, clusters.set_index("cluster")


def _flat_fit(res):
    """Predictions of the measured values of a result, flattened (None if absent)."""
    fitted = getattr(res, "fitted", None)
    if fitted is None:
        return None
    return np.asarray(fitted.to_numpy(dtype=float)).ravel()


@dataclass
class MultistartResult:
    """Outcome of :func:`multistart`.

    ``table`` has one row per start (``start_<name>`` columns, estimates
    ``p_<name>``, objective, status, iterations, wall time, approach, worker,
    ``cluster``); ``clusters`` one row per distinct minimum (cluster 0 is the
    best); ``best`` is the result of the best start and ``hits`` how many
    starts reached that minimum.
    """

    table: pd.DataFrame
    clusters: pd.DataFrame
    best: EstimationResult | None
    hits: int
    run: RunResult = field(repr=False, default=None)
    #: seconds each start could run (None: no limit); see :func:`multistart`
    start_time_limit: float | None = None
    #: warnings raised inside the starts (numpy overflow, ...), ``message -> count``
    caught_warnings: dict = field(default_factory=dict)
    #: the first start's objective the later starts stopped at (``stop_at_first``; None:
    #: not asked for, or the first start did not converge)
    known_minimum: float | None = None

    @property
    def spurious(self) -> pd.DataFrame:
        """Converged starts that ended at another (worse) minimum than the best
        (equivalent minima, which fit the data identically, are not spurious)."""
        return self.table[self.table["cluster"].fillna(-1) > 0]

    @property
    def equivalent(self) -> bool:
        """True when the best minimum was reached at several parameter sets that
        fit the data identically (a non-identifiable direction)."""
        return bool(len(self.clusters)) and int(self.clusters["parameter_sets"].iloc[0]) > 1

    def plot(self, ax=None, path=None):
        """Waterfall of the sorted end objectives (see
        :func:`~pyomo_odeest.analysis.plot_waterfall`)."""
        from ..analysis._plots import plot_waterfall
        return plot_waterfall(self, ax=ax, path=path)

    def summary(self) -> str:
        n = len(self.table)
        nok = int(self.table["success"].astype(bool).sum())
        lines = [f"multistart: {n} starts, {nok} converged, {len(self.clusters)} distinct "
                 f"minima; best objective {self.clusters['objective'].iloc[0]:.8g} reached by "
                 f"{self.hits} starts" if len(self.clusters) else
                 f"multistart: {n} starts, none converged"]
        for c, r in self.clusters.iterrows():
            sets = int(r.get("parameter_sets", 1))
            lines.append(f"  minimum {c}: objective {r['objective']:.6g}, hits {int(r['hits'])}"
                         + (f", {sets} distinct parameter sets with the same fit (equivalent "
                            f"minima: the data do not determine the parameters)" if sets > 1
                            else ""))
        if self.best is not None and self.best.warnings:
            lines.append("  best result: " + " | ".join(self.best.warnings))
        stopped = int((self.table["status"] == "time_limit").sum())
        if stopped:
            lines.append(f"  {stopped} start(s) stopped at the per-start time limit of "
                         f"{self.start_time_limit:.3g} s (status 'time_limit')")
        if self.known_minimum is not None:
            from ..approaches._continuous import AT_KNOWN_LEVEL
            outs = [o for o in (self.run.outputs.values() if self.run is not None else ())
                    if isinstance(o, EstimationResult) and AT_KNOWN_LEVEL in (o.message or "")]
            ok = sum(o.success for o in outs)
            lines.append(f"  {len(outs)} start(s) stopped at the level of the first start's "
                         f"minimum {self.known_minimum:.8g} (stop_at_first; {ok} of them "
                         f"converged there)")
        if self.caught_warnings:
            lines.append("  " + _warnings_line(self.caught_warnings))
        return "\n".join(lines)


#: the default per-start time limit of :func:`multistart`:
#: ``max(START_TIME_FACTOR x the first start's wall time, START_TIME_FLOOR)`` seconds
START_TIME_FACTOR = 10.0
START_TIME_FLOOR = 5.0
#: the hard backstop of a serial multistart's per-start limit (the start's process is
#: killed at ``_KILL_FACTOR x limit + _KILL_GRACE`` seconds; see :func:`multistart`)
_KILL_FACTOR, _KILL_GRACE = 1.2, 2.0


def _multistart_task(problem, approach="simultaneous", u0=None, options=None):
    """:func:`estimate_task` with the warnings raised inside it caught and counted in
    ``result.extra['caught_warnings']`` (``'Category: message' -> count``), so that a
    multistart reports them once instead of once per start and worker."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = estimate_task(problem, approach, u0, options)
    counts = {}
    for w in caught:
        key = f"{w.category.__name__}: {w.message}"
        counts[key] = counts.get(key, 0) + 1
    if counts:
        res.extra["caught_warnings"] = counts
    return res


def _warnings_line(counts) -> str:
    total = sum(counts.values())
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    shown = "; ".join(f"{n}x {k[:160]}" for k, n in top[:5])
    more = f"; and {len(top) - 5} other kinds" if len(top) > 5 else ""
    return f"{total} warning(s) inside the starts: {shown}{more}"


def _check_limit(value):
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not float(value) > 0 \
            or not np.isfinite(float(value)):
        raise ValueError(f"start_time_limit must be 'auto', a number of seconds > 0 or None "
                         f"(no limit), got {value!r}")
    return float(value)


def multistart(problem: EstimationProblem, n=16, runner=None, approach="simultaneous",
               method="sobol", space="log", bounds=None, starts=None, seed=0, options=None,
               obj_tol=1e-6, x_tol=1e-3, on_row=None, fit_tol=1e-4, start_time_limit="auto",
               tee=False, stop_at_first=False) -> MultistartResult:
    """Estimate from many starts on ``runner`` (None: serially here).

    Starts come from :func:`multistart_starts` (``n``, ``method``, ``space``,
    ``bounds``, ``starts``, ``seed``); ``approach`` and ``options`` go to
    :func:`~pyomo_odeest.estimate`; end points are grouped by
    :func:`cluster_end_points` (``obj_tol``, ``x_tol``, and ``fit_tol`` on the
    predictions of the measured values, so that equivalent minima are one).

    ``start_time_limit``: seconds each start may run.  ``'auto'`` (default): the
    first start runs alone, without a limit, and every other start gets
    ``max(START_TIME_FACTOR x its wall time, START_TIME_FLOOR)`` (10 x, at least
    5 s); a number: that limit for every start; None: no limit.  The limit is the
    start's ``max_wall_time`` (the smaller one if ``options`` give one too: the
    start stops with its estimates and status ``'time_limit'``).  With a serial
    runner on Linux (and no ``task_timeout`` of its own) each limited start also
    runs in a forked process killed at 1.2 x the limit + 2 s, the backstop of a
    start stuck in one long step (a stiff simulation, a set-up); its row then has
    status ``'time_limit'`` and no estimates.  On Dask, give the runner a
    ``task_timeout`` for that backstop.

    ``stop_at_first``: the first start runs alone, and where it converges the others
    stop once they reach its objective (within the stationarity test's decrement
    limit): their ``known_minimum`` (the continuous approach's least squares,
    ``optimizer='least_squares'``, takes it).  Such a start ends ``converged`` where
    the stationarity test holds at its stop, else ``not_stationary`` (its message
    says it stopped there): the best value the multistart finds moves by at most that
    limit, and the starts do not crawl along the valleys of the first one's minimum.

    The starts are quiet: no optimizer log (``tee=True`` shows it) and no progress
    lines of their own (``options={'progress': True}`` shows them); warnings raised
    inside them (numpy overflow, ...) are caught, counted, and reported once
    (one warning at the end, ``caught_warnings`` of the result).
    """
    if stop_at_first:
        from ..approaches._estimate import approach_options
        if "known_minimum" not in approach_options(approach) or \
                (options or {}).get("optimizer") != "least_squares":
            raise ValueError("stop_at_first needs starts that take known_minimum: "
                             "approach='continuous' with options={'optimizer': "
                             "'least_squares'}")
    S = multistart_starts(problem, n, method, space, bounds, seed, starts)
    if S.empty:
        raise ValueError("no starts: give n > 0 or starts=")
    limit_spec = _check_limit(start_time_limit)
    rn, sp = _runner(runner, problem)
    base = dict(options or {})
    base.setdefault("progress", False)
    if tee:
        base["tee"] = True

    def tasks_for(rows, limit):
        opts = dict(base)
        if limit is not None:
            opts["max_wall_time"] = min(limit, float(opts.get("max_wall_time") or np.inf))
        return [Task(_multistart_task, (sp, approach, row.to_numpy(), opts),
                     columns={f"start_{k}": float(v) for k, v in row.items()})
                for _, row in rows.iterrows()]

    def run_limited(tasks, limit, first_index):
        backstop = (limit is not None and rn.mode == "serial" and CAN_FORK
                    and rn.task_timeout is None)
        if backstop:
            rn.task_timeout = _KILL_FACTOR * limit + _KILL_GRACE
        try:
            return rn.run(tasks, seed=seed, on_row=on_row, desc="multistart",
                          first_index=first_index)
        finally:
            if backstop:
                rn.task_timeout = None

    if (limit_spec == "auto" or stop_at_first) and len(S) > 1:
        limit = None if limit_spec == "auto" else limit_spec
        first = run_limited(tasks_for(S.iloc[:1], limit), limit, 0)
        if limit_spec == "auto":
            wall = float(first.table["wall_s"].iloc[0]) if "wall_s" in first.table else 0.0
            limit = max(START_TIME_FACTOR * wall, START_TIME_FLOOR)
        if stop_at_first:
            row = first.table.iloc[0]
            j1 = float(row.get("objective", np.nan))
            if bool(row.get("success", False)) and np.isfinite(j1):
                base["known_minimum"] = j1
        rest = tasks_for(S.iloc[1:], limit)
        if first.interrupted:
            seeds = task_seeds(_root(seed), len(S))
            cancelled = [_row(t, i, seeds[i], status="cancelled", success=False,
                              error="the run stopped before this task finished")
                         for i, t in enumerate(rest, 1)]
            run = RunResult(table=pd.concat([first.table, pd.DataFrame(cancelled)],
                                            ignore_index=True),
                            outputs=first.outputs, interrupted=True, wall_s=first.wall_s,
                            info=first.info)
        else:
            second = run_limited(rest, limit, 1)
            run = RunResult(table=pd.concat([first.table, second.table], ignore_index=True),
                            outputs={**first.outputs, **second.outputs},
                            interrupted=second.interrupted,
                            wall_s=first.wall_s + second.wall_s, info=first.info)
    else:
        limit = None if limit_spec == "auto" else limit_spec
        run = run_limited(tasks_for(S, limit), limit, 0)
    run.info["start_time_limit"] = limit
    tab = run.table
    fits, caught = {}, {}
    if "task" in tab:
        for idx, task in tab["task"].items():
            out = run.outputs.get(int(task)) if np.isfinite(task) else None
            fits[idx] = _flat_fit(out) if isinstance(out, EstimationResult) else None
    for out in run.outputs.values():
        if isinstance(out, EstimationResult):
            for k, c in out.extra.get("caught_warnings", {}).items():
                caught[k] = caught.get(k, 0) + c
    if caught:
        warnings.warn(f"multistart: {_warnings_line(caught)} (counts in "
                      f"result.caught_warnings)", UserWarning, stacklevel=2)
    labels, clusters = cluster_end_points(tab, problem.parameter_names, obj_tol, x_tol,
                                          fits, fit_tol)
    tab = tab.assign(cluster=labels.astype("Int64"))
    best, hits = None, 0
    if len(clusters):
        hits = int(clusters["hits"].iloc[0])
        first_best = tab[tab["cluster"] == 0].sort_values("objective",
                                                          kind="stable")["task"].iloc[0]
        best = run.outputs.get(int(first_best))
    return MultistartResult(table=tab, clusters=clusters, best=best, hits=hits, run=run,
                            start_time_limit=limit, caught_warnings=caught,
                            known_minimum=base.get("known_minimum") if stop_at_first else None)


# ---------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------
def _resample(sp, kind, fitted, std_resid, rng):
    """Resampled values (``'residual'``) or multiplicities (``'case'``) of one
    single-experiment problem."""
    if kind == "residual":
        w = np.asarray(sp.weights, dtype=float)
        sigma = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
        values = fitted.copy()
        for o in range(values.shape[1]):
            pool = std_resid[o]
            rows = np.flatnonzero(sp.mask[:, o])
            draw = pool[rng.integers(0, len(pool), size=len(rows))]
            values[rows, o] = fitted[rows, o] - sigma[rows, o] * draw
        return values
    N = sp.mask.shape[0]
    return np.bincount(rng.integers(0, N, size=N), minlength=N)


def _bootstrap_task(problem, kind, pools, refit, u0, rng):
    """Refit one sample (``refit``: the reference fit's, a
    :class:`~pyomo_odeest.approaches._base.Refit`); ``pools``: :func:`_fitted_and_pools`
    (per experiment)."""
    key = "values" if kind == "residual" else "multiplicity"
    draws = _each(problem, lambda e, sp: _resample(sp, kind, *(pools if e is None else pools[e]),
                                                   rng))
    return refit(problem.variant(**{key: draws}), u0)


def _fitted_and_pools(sp, fitted, residuals):
    """Fitted values and the per-observable pools of centred standardized residuals."""
    fv = fitted.reindex(index=sp.data.index, columns=sp.obs_names).to_numpy(dtype=float)
    r = residuals.reindex(index=sp.data.index, columns=sp.obs_names).to_numpy(dtype=float)
    w = np.asarray(sp.weights, dtype=float)
    pools = []
    for o in range(r.shape[1]):
        m = sp.mask[:, o] & (w[:, o] > 0)
        e = r[m, o] * np.sqrt(w[m, o])
        pools.append(e - e.mean() if len(e) else e)
    return fv, pools


@dataclass
class BootstrapResult:
    """Outcome of :func:`bootstrap`: per-sample ``table``, the reference ``fit``."""

    table: pd.DataFrame
    fit: EstimationResult
    kind: str
    run: RunResult = field(repr=False, default=None)

    @property
    def estimates(self) -> pd.DataFrame:
        """Estimates of the converged samples (one column per parameter)."""
        ok = self.table[self.table["success"].astype(bool)]
        cols = [c for c in ok.columns if c.startswith("p_")]
        return ok[cols].rename(columns=lambda c: c[2:])

    def std(self) -> pd.Series:
        return self.estimates.std(ddof=1)

    def interval(self, level=0.95) -> pd.DataFrame:
        """Percentile intervals of the bootstrap estimates."""
        a = (1 - level) / 2
        return self.estimates.quantile([a, 1 - a]).T.set_axis(["lower", "upper"], axis=1)


def bootstrap(problem: EstimationProblem, n=100, runner=None, kind="residual",
              approach="simultaneous", fit=None, seed=0, options=None, on_row=None) -> BootstrapResult:
    """Refit ``n`` resampled data sets, each task with its own seed.

    ``kind='residual'``: data* = fitted − σ e*, with e* drawn (per observable,
    with replacement) from the centred standardized residuals
    :math:`(z - \\bar z)/\\sigma` of the fit (σ = 1/√w).  ``kind='case'``:
    measurement times drawn with replacement (a time drawn k times weighs k
    times; least squares only).  With several experiments both resample
    within each experiment (its own residual pools, its own times), so every
    sample keeps the design of the experiments.  ``fit`` is the reference estimate (computed
    here by ``approach`` with ``options`` if None); every sample is a refit of it
    (:meth:`~pyomo_odeest.EstimationResult.refit`: its approach with its options as
    solved, on its grid, from its estimates), in ``approach`` if the fit is another
    approach's, with ``options`` over the fit's when the fit is given.
    """
    if kind not in ("residual", "case"):
        raise ValueError(f"kind must be 'residual' or 'case', got {kind!r}")
    from ..approaches._base import is_pyomo_model, refit_of
    given = fit is not None
    if fit is None:
        fit = estimate_task(problem, approach, None, options)
    if not fit.success:
        raise ValueError(f"the reference fit did not converge ({fit.status}); bootstrap needs one")
    if kind == "case":                                                # loss check, early
        problem.variant(multiplicity=_each(problem, lambda _, sp: np.ones(sp.mask.shape[0])))

    def part(frame, e):
        return frame if e is None else frame.loc[e]
    pools = _each(problem, lambda e, sp: _fitted_and_pools(sp, part(fit.fitted, e),
                                                           part(fit.residuals, e)))
    refit = refit_of(fit).using(approach)
    if given and options:
        refit = refit.updated(**options)
    if is_pyomo_model(refit.options.get("model")):
        raise ProblemError("the fit was solved on your own model (model=...), whose objective "
                           "holds the data it was built with; the bootstrap's resampled data "
                           "cannot be solved on it: bootstrap a fit made without model= (or "
                           "give options={'model': None} to refit the problem as declared)")
    rn, sp = _runner(runner, problem)
    args = (sp, kind, pools, refit, fit.x)
    tasks = [Task(_bootstrap_task, args, columns={"sample": i}, pass_rng=True) for i in range(n)]
    run = rn.run(tasks, seed=seed, on_row=on_row, desc=f"bootstrap ({kind})")
    return BootstrapResult(table=run.table, fit=fit, kind=kind, run=run)


# ---------------------------------------------------------------------------
# profile points
# ---------------------------------------------------------------------------
def _profile_task(problem, name, value, u_start, approach, options):
    from ..approaches._estimate import approach_class
    res = approach_class(approach)().refit(problem, u_start, {name: value}, progress=False,
                                           **({"options": options} if options else {}))
    row = {f"p_{k}": float(v) for k, v in res.estimates.items()}
    row.update(objective=float(res.objective), status=str(res.status),
               success=res.success and bool(np.isfinite(res.objective)),
               iterations=int(res.iterations), approach=res.approach)
    return row


def profile_points(problem: EstimationProblem, parameter, values, runner=None,
                   approach="reduced_space", u_start=None, seed=0, options=None) -> RunResult:
    """The objective with ``parameter`` fixed at each of ``values``, the other
    parameters re-optimized from ``u_start`` (default: the problem's start
    values): independent points of a profile likelihood, one task each, by
    :meth:`~pyomo_odeest.approaches.Approach.refit` of ``approach`` (any approach;
    the default discretization, ``options`` its optimizer options).  Column
    ``profile_value`` holds the fixed value, ``status`` the
    :class:`~pyomo_odeest.Status` of each point.  For whole profiles with adaptive
    steps and intervals, pass the runner to
    :func:`~pyomo_odeest.analysis._profile.profile_likelihood` (``runner=rn``): its
    one-sided paths then run as tasks.
    """
    if parameter not in problem.parameter_names:
        raise ProblemError(f"parameter {parameter!r} unknown (known: {problem.parameter_names})")
    u_start = problem.u0 if u_start is None else np.asarray(u_start, dtype=float)
    rn, sp = _runner(runner, problem)
    tasks = [Task(_profile_task, (sp, parameter, float(v), u_start, approach, options),
                  columns={"profile_parameter": parameter, "profile_value": float(v)})
             for v in np.asarray(values, dtype=float).reshape(-1)]
    return rn.run(tasks, seed=seed, desc=f"profile {parameter}")
