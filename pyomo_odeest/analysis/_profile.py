r"""Profile likelihood and likelihood-ratio intervals (see docs/uncertainty.md,
"Profile likelihood").

For :math:`\theta = u_k`, :math:`\mathrm{PL}(\theta) = \min_{u:\,u_k=\theta} J(u)` and
:math:`\lambda(\theta) = \frac{2}{\kappa}(\mathrm{PL}(\theta) - J(\hat u))`; the
interval is :math:`\{\theta: \lambda(\theta) \le \chi^2_{1,\alpha}\}`, or with σ
unknown (``scale='residual'``) :math:`\lambda/s^2` against the :math:`F_{1,m-p}`
quantile.  Every re-optimization is a refit of the result
(:meth:`~pyomo_odeest.EstimationResult.refit`: its approach with its options as
solved, on its grid) with the parameter fixed.  The profile of a named combination
:math:`\theta = \sum_k a_k u_k` (``combination={'lk3': 1, 'lk2': -0.5}``) is that of
a parameter of the problem reparametrized by :func:`_pivoted`: one parameter of the
combination (the pivot, the largest :math:`|a_k|`) stands for θ,
:math:`u_k = (\theta - \sum_{j \ne k} a_j u_j)/a_k` in every expression, and its
bounds become parameter constraints.  Each side of a profile is a path from
:math:`\hat\theta` outwards with steps adapted to the signed root :math:`\pm\sqrt{\lambda}`;
the crossing of the threshold is refined by :func:`_illinois`.
:func:`profile_tasks`, :func:`profile_segment` and :func:`assemble_profiles` split
the work for a ``runner(fn, tasks)``; :func:`profile_likelihood` does the three steps.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import sympy
from scipy import stats

from ..problem._components import ParameterConstraint
from ..problem._status import Status
from ..problem._validation import ProblemError
from ._uncertainty import Covariance, _problem_of, covariance, nll_factor, resolve_scale

__all__ = ["ProfileTask", "ProfileResult", "profile_tasks", "profile_segment",
           "assemble_profiles", "profile_likelihood", "combination_name"]


@dataclass
class ProfileTask:
    r"""One side of one profile: everything a worker needs (picklable).

    Attributes
    ----------
    problem : EstimationProblem
    parameter : str
        The profiled parameter, or the name of ``combination``.
    direction : +1 or -1
    u_hat : array
        Estimates (all parameters): the start of the path.
    se : float
        Standard error of the parameter (sets the first step).
    refit : Refit
        How each point is re-optimized: the result's approach with its options as
        solved (:func:`~pyomo_odeest.approaches._base.refit_of`; ``approach`` is its name).
    tangent : array, optional
        d u / d θ along the profile at the estimate (all parameters; from the
        covariance, ``C[:, k] / C[k, k]``): predicts the start of the first
        point; later points extrapolate the last two (secant predictor).
    threshold : float
        Value of λ at which the side stops (after refining the crossing).
    scale : float
        λ = 2ΔJ/(κ·scale) (1 for σ known, s² for σ unknown).
    target_step, max_points, max_range, refine_tol, max_refine, flat_tol : float, int
        Growth of the signed root per point, points per side, range explored (in
        standard errors), tolerance on the signed root at the crossing (relative),
        re-optimizations allowed to locate it, and the level (relative to the
        threshold) below which a profile counts as flat.
    combination : dict, optional
        ``{name: coefficient}``: the profile is that of :math:`\sum_k a_k u_k`
        (``parameter`` is then its name, :func:`combination_name`).
    """

    problem: object
    parameter: str
    direction: int
    u_hat: np.ndarray
    se: float
    refit: object
    tangent: np.ndarray | None = None
    threshold: float = 3.841458820694124
    scale: float = 1.0
    target_step: float = 0.5
    max_points: int = 30
    max_range: float = 50.0
    refine_tol: float = 1e-3
    max_refine: int = 30
    flat_tol: float = 1e-3
    combination: dict | None = None

    @property
    def approach(self) -> str:
        return self.refit.name


def combination_name(coef) -> str:
    """``'lk3 − 0.5·lk2'`` of ``{name: coefficient}`` (in the given order)."""
    out = []
    for i, (n, c) in enumerate(coef.items()):
        c = float(c)
        sign = ("" if c > 0 else "−") if i == 0 else (" + " if c > 0 else " − ")
        out.append(f"{sign}{'' if abs(c) == 1 else f'{abs(c):g}·'}{n}")
    return "".join(out)


def _coefficients(problem, parameter, combination=None):
    """``(a, pivot)``: the profiled quantity is ``a @ u`` (all parameters), with the
    parameter ``pivot`` standing for it (the profiled parameter itself, or the
    combination's parameter of largest |a_k|, the first of equals)."""
    names = problem.parameter_names
    a = np.zeros(len(names))
    if combination is None:
        k = names.index(parameter)
        a[k] = 1.0
        return a, k
    for n, c in combination.items():
        a[names.index(n)] = float(c)
    return a, int(np.argmax(np.abs(a)))


def _quantity_bounds(problem, a):
    """Bounds of ``a @ u`` over the box of the parameters' bounds (None: none)."""
    lo = hi = 0.0
    for p, c in zip(problem.parameters, a):
        if c == 0:
            continue
        lb, ub = p.bounds
        lo += c * (lb if c > 0 else ub)
        hi += c * (ub if c > 0 else lb)
    return (float(lo) if np.isfinite(lo) else None), (float(hi) if np.isfinite(hi) else None)


# ---------------------------------------------------------------------------
# the profile of a combination: a parameter of the reparametrized problem
# ---------------------------------------------------------------------------
def _pivoted(problem, a, k):
    r"""``problem`` with its parameter ``k`` standing for :math:`\theta = a^\top u`
    (``a[k] != 0``): :math:`u_k = (\theta - \sum_{j \ne k} a_j u_j)/a_k` in the
    dynamics, initial state, observations, penalty and constraints of every
    experiment (a pre-equilibration's steady state is formed again from its
    reparametrized equations); its bounds are those of θ over the parameters' box
    and the bounds of :math:`u_k` become parameter constraints.  The other
    parameters are unchanged, so fixing parameter ``k`` at θ
    (:meth:`~pyomo_odeest.EstimationProblem.variant`) minimizes over them with
    :math:`a^\top u = \theta`."""
    from ..problem._steady_state import SteadyState
    u = [sympy.Symbol(n, real=True) for n in problem.parameter_names]
    expr = (u[k] - sum(float(c) * s for j, (c, s) in enumerate(zip(a, u))
                       if j != k and c != 0)) / float(a[k])
    sub = {u[k]: expr}
    pivot = problem.parameters[k]
    lo, hi = _quantity_bounds(problem, a)
    theta = float(np.clip(a @ problem.u0, -np.inf if lo is None else lo,
                          np.inf if hi is None else hi))
    params = list(problem.parameters)
    params[k] = dataclasses.replace(pivot, value=theta, lb=lo, ub=hi)
    u_ref = np.array([p.value for p in params], dtype=float)
    lb, ub = pivot.bounds
    rows = [(ParameterConstraint(f"{pivot.name}_{what}_bound", _no_rule), ex)
            for what, bound, ex in (("lower", lb, lb - expr), ("upper", ub, expr - ub))
            if np.isfinite(bound)]

    def moved(e):
        return sympy.sympify(e).xreplace(sub)

    def one(q, own_rows):
        out = copy.copy(q)                    # without its caches (rebuilt for the new one)
        for name in ("f_sym", "l_sym", "g_sym"):
            v = q.__dict__.get(name)
            if v is not None:
                out.__dict__[name] = tuple(moved(e) for e in v)
        out.penalty_sym = moved(q.penalty_sym)
        out.path_constraints = [(c, moved(ex)) for c, ex in q.path_constraints]
        out.parameter_constraints = [(c, moved(ex)) for c, ex in q.parameter_constraints] + own_rows
        out.parameters = params
        out._numeric_cache = {}
        ss = q.__dict__.get("steady_state")
        if ss is not None:
            out.steady_state = SteadyState([moved(e) for e in ss.f_sym],
                                           [moved(e) for e in ss.x0_sym],
                                           q.x_sym, q.u_sym, u_ref, q.name)
            reset = set(q.preequilibration.reset or ())
            out.l_sym = tuple(v if s in reset else w for s, v, w in
                              zip(q.states, out.l_sym, out.steady_state.expressions()))
        return out

    if not problem.experiments:
        return one(problem, rows)
    out = one(problem, rows)
    out.experiment_problems = [one(sp, []) for sp in problem.experiment_problems]
    return out


def _no_rule(u):
    """The rule of a parameter constraint stated by its expression."""
    return 0


# ---------------------------------------------------------------------------
# one point of a profile
# ---------------------------------------------------------------------------
#: what a re-optimization may raise where the model breaks down (a configuration
#: error, :class:`ProblemError`, is raised on)
_BREAKDOWNS = (ArithmeticError, RuntimeError, ValueError, np.linalg.LinAlgError)


def _point(task, problem, a, k, u_start, theta):
    """``(u, J, status, iterations)`` of the refit at θ from ``u_start``: the parameter
    ``k`` of ``problem`` (the reparametrized problem of a combination) fixed at θ; ``u``
    in the original parameters."""
    v = np.asarray(u_start, dtype=float).copy()
    v[k] = theta
    try:
        res = task.refit(problem, v, {problem.parameter_names[k]: float(theta)})
    except ProblemError as err:
        if task.combination is None or not np.isfinite(task.problem.parameters[k].bounds).any():
            raise
        raise ProblemError(f"profile of {task.parameter}: {err} (the bounds of "
                           f"{problem.parameter_names[k]} are parameter constraints of the "
                           f"profile of a combination)") from None
    except _BREAKDOWNS:
        return np.asarray(u_start, dtype=float), np.nan, Status.FAILED, 0
    u = res.x.copy()
    if task.combination is not None:
        u[k] = (theta - (a @ u - a[k] * u[k])) / a[k]
    return u, float(res.objective), res.status, int(res.iterations)


# ---------------------------------------------------------------------------
# one side of one profile
# ---------------------------------------------------------------------------
def profile_segment(task: ProfileTask) -> pd.DataFrame:
    """Walk one side of one profile (see the module docstring).

    Returns a DataFrame with one row per point (the estimate first):
    ``parameter``, ``side``, ``value``, ``objective``, ``status`` (the refit's
    :class:`~pyomo_odeest.Status`), ``success``, ``iterations``, ``seconds`` and the
    re-optimized parameters ``u:<name>``;
    ``attrs['end']`` says how the side ended: ``'crossed'``, ``'bound'``,
    ``'not reached'``, ``'not refined'`` (the threshold is bracketed but was not
    located to ``refine_tol`` within ``max_refine`` re-optimizations) or ``'failed'``.
    """
    P = task.problem
    names = P.parameter_names
    a, k = _coefficients(P, task.parameter, task.combination)
    kappa = nll_factor(P)
    d = 1 if task.direction > 0 else -1
    bound = _quantity_bounds(P, a)[1 if d > 0 else 0]
    Q = P if task.combination is None else _pivoted(P, a, k)
    rows = []

    def solve(u_start, theta):
        return _point(task, Q, a, k, u_start, theta)

    def record(theta, u, J, status, iters, sec):
        rows.append(dict(parameter=task.parameter, side=d, value=float(theta), objective=J,
                         status=status, success=status.success and bool(np.isfinite(J)),
                         iterations=iters, seconds=sec,
                         **{f"u:{n}": float(v) for n, v in zip(names, u)}))

    t = time.perf_counter()
    theta0 = float(a @ task.u_hat)
    u0, J0, st0, it0 = solve(task.u_hat, theta0)
    record(theta0, u0, J0, st0, it0, time.perf_counter() - t)
    if not np.isfinite(J0):
        out = pd.DataFrame(rows)
        out.attrs["end"] = "failed"
        return out

    def root(J):
        return np.sqrt(max(2.0 * (J - J0) / (kappa * task.scale), 0.0))

    target = np.sqrt(task.threshold)
    se = task.se if np.isfinite(task.se) and task.se > 0 else 0.1 * max(1.0, abs(theta0))
    h = task.target_step * target * se
    max_dist = task.max_range * se
    theta_prev, s_prev, u_prev = theta0, 0.0, u0
    tangent = (np.zeros(len(names)) if task.tangent is None
               else np.where(np.isfinite(task.tangent), task.tangent, 0.0))
    end = "not reached"
    fails = 0
    while len(rows) < task.max_points:
        theta = theta_prev + d * h
        at_bound = False
        if bound is not None and (theta - bound) * d >= 0:
            theta, at_bound = float(bound), True
        t = time.perf_counter()
        u, J, st, it = solve(_predict(P, u_prev, tangent, theta - theta_prev), theta)
        ok = st.success and np.isfinite(J)
        if not ok:
            fails += 1
            if fails > 4:
                end = "failed"
                break
            h *= 0.4
            continue
        record(theta, u, J, st, it, time.perf_counter() - t)
        s = root(J)
        if s >= target:
            # the crossing is bracketed: refine it on the signed root (Illinois)
            def point(tc, start):
                t = time.perf_counter()
                uc, Jc, stc, itc = solve(start, tc)
                if not (stc.success and np.isfinite(Jc)):
                    return None
                record(tc, uc, Jc, stc, itc, time.perf_counter() - t)
                return uc, root(Jc) - target
            ok = _illinois(point, (theta_prev, s_prev - target, u_prev),
                           (theta, s - target, u), task.refine_tol * target, task.max_refine)
            end = "crossed" if ok else "not refined"
            break
        if at_bound:
            end = "bound"
            break
        if abs(theta - theta0) > max_dist:
            break
        slope = (s - s_prev) / h
        want = task.target_step * target
        h_new = want / slope if slope > 0 else 4 * h
        h = float(np.clip(h_new, 0.5 * h, 4 * h))
        tangent = (u - u_prev) / (theta - theta_prev)
        theta_prev, s_prev, u_prev = theta, s, u
    out = pd.DataFrame(rows)
    out.attrs["end"] = end
    return out


def _illinois(point, inside, outside, ftol, max_iter):
    """Locate f(θ) = 0 in the bracket ``inside = (θ, f < 0, u)``, ``outside = (θ, f ≥ 0, u)``
    by the Illinois variant of regula falsi (superlinear, never leaves the bracket, and
    unlike plain regula falsi does not creep when f is strongly convex, as the signed
    root is near a singularity of the model).  ``point(θ, start) -> (u, f) | None``
    re-optimizes at θ; a failed point is retried at the bracket's midpoint.  True when
    a point with ``|f| <= ftol`` was found within ``max_iter`` re-optimizations."""
    (a, fa, ua), (b, fb, ub) = inside, outside
    ga, gb = fa, fb                        # the (possibly halved) values of the secant
    side = 0
    for _ in range(max_iter):
        if min(abs(fa), abs(fb)) <= ftol:
            return True
        if abs(b - a) <= 1e-12 * max(1.0, abs(a), abs(b)):
            return False
        frac = ga / (ga - gb) if gb != ga else 0.5
        frac = min(max(frac, 1e-6), 1 - 1e-6)
        got = point(a + frac * (b - a), ua + frac * (ub - ua))
        if got is None:
            frac = 0.5
            got = point(a + frac * (b - a), ua + frac * (ub - ua))
            if got is None:
                return False
        tc = a + frac * (b - a)
        uc, fc = got
        if fc >= 0:
            b, fb, gb, ub = tc, fc, fc, uc
            if side == 1:
                ga *= 0.5
            side = 1
        else:
            a, fa, ga, ua = tc, fc, fc, uc
            if side == -1:
                gb *= 0.5
            side = -1
    return min(abs(fa), abs(fb)) <= ftol


def _predict(problem, u, tangent, dtheta):
    """Start of the next point: ``u + tangent·Δθ``, clipped into the bounds."""
    v = u + tangent * dtheta
    return np.clip(v, *problem.bounds())


# ---------------------------------------------------------------------------
# tasks, assembly, the front function
# ---------------------------------------------------------------------------
def profile_tasks(result, parameters=None, level=0.95, approach=None, scale="auto",
                  options=None, cov: Covariance | None = None, problem=None,
                  combination=None, **kw):
    r"""One :class:`ProfileTask` per (parameter or combination, side) for ``result``.

    Every point is a refit of ``result`` (:func:`~pyomo_odeest.approaches._base.refit_of`:
    its approach with its options as solved, on its grid); ``approach`` (a name, an
    Approach subclass or instance) re-optimizes in another approach instead, on the
    result's scheme and grid where it takes them, and ``options`` are optimizer
    options over the refit's.  ``scale``: ``'known'`` (σ known: χ²₁ threshold)
    ``'residual'`` (σ unknown: λ/s² against F₁,ₘ₋ₚ) or ``'auto'`` (known when the
    data give σ).  ``combination``: ``{name: coefficient}`` of free parameters,
    or a list of them: the profile of each :math:`\sum_k a_k u_k` too (named by
    :func:`combination_name`; with ``parameters=None``, only the combinations).
    Other keywords go to
    :class:`ProfileTask` (``target_step``, ``max_points``, ``max_range``, ...).
    """
    from ..approaches._base import refit_of
    P = _problem_of(result, problem)
    refit = refit_of(result) if approach is None else refit_of(result).using(approach)
    if options:
        refit = refit.updated(options=dict(options))
    scale = cov.scale if cov is not None else resolve_scale(P, scale)
    free = [p.name for p in P.parameters if not p.fixed]
    combos = _combinations(combination, free)
    parameters = (([] if combos else free) if parameters is None
                  else [parameters] if isinstance(parameters, str) else list(parameters))
    bad = [p for p in parameters if p not in free]
    if bad:
        raise ValueError(f"cannot profile {bad}: not free parameters of the problem ({free})")
    cov = cov if cov is not None else covariance(result, "fim", problem=P, scale=scale)
    scale = cov.scale
    thr = float(stats.f.ppf(level, 1, cov.dof) if scale == "residual" else stats.chi2.ppf(level, 1))
    sc = cov.s2 if scale == "residual" else 1.0
    u_hat = np.asarray(result.estimates.reindex(P.parameter_names), dtype=float)
    se = cov.se
    C = cov.matrix
    tasks = []
    for name in parameters:
        s = float(se.get(name, np.nan))
        tangent = np.zeros(len(u_hat))
        if name in C.index and np.isfinite(C.loc[name, name]) and C.loc[name, name] > 0:
            col = (C[name] / C.loc[name, name]).reindex(P.parameter_names).fillna(0.0)
            tangent = col.to_numpy(dtype=float)
        for d in (-1, 1):
            tasks.append(ProfileTask(P, name, d, u_hat, s, refit, tangent, thr, sc, **kw))
    for coef in combos:
        name = combination_name(coef)
        a = np.array([coef.get(n, 0.0) for n in cov.names])
        var = float(cov.variance_of(a))
        s = np.sqrt(var) if np.isfinite(var) else np.nan
        # d u / d θ at the estimate: C a / (aᵀ C a) (the pseudo-inverse where singular)
        Cm = C.to_numpy() if cov.estimable is None else cov.estimable[0]
        tangent = np.zeros(len(u_hat))
        if np.isfinite(var) and var > 0:
            col = pd.Series(Cm @ a / var, index=cov.names)
            tangent = col.reindex(P.parameter_names).fillna(0.0).to_numpy(dtype=float)
        for d in (-1, 1):
            tasks.append(ProfileTask(P, name, d, u_hat, s, refit, tangent, thr, sc,
                                     combination=dict(coef), **kw))
    return tasks


def _combinations(combination, free):
    """The checked list of ``{name: coefficient}`` of ``combination`` (a dict or a
    list of them; None: none)."""
    if combination is None:
        return []
    combos = [combination] if isinstance(combination, dict) else list(combination)
    out = []
    for c in combos:
        if not isinstance(c, dict) or not c:
            raise ValueError(f"a combination is a non-empty dict {{parameter: coefficient}}, "
                             f"got {c!r}")
        bad = [n for n in c if n not in free]
        if bad:
            raise ValueError(f"combination {c}: {bad} are not free parameters of the problem "
                             f"({free})")
        try:
            coef = {n: float(v) for n, v in c.items()}
        except (TypeError, ValueError):
            raise ValueError(f"combination {c}: the coefficients must be numbers") from None
        if not all(np.isfinite(v) for v in coef.values()) or all(v == 0 for v in coef.values()):
            raise ValueError(f"combination {c}: the coefficients must be finite and not all 0")
        out.append({n: v for n, v in coef.items() if v != 0})
    return out


@dataclass
class ProfileResult:
    r"""Profiles and likelihood-ratio intervals.

    Attributes
    ----------
    curves : dict name -> DataFrame
        Points sorted by value with the statistic ``lr`` (λ) and ``signed_root``
        (for a combination, ``value`` is that of :math:`\sum_k a_k u_k`); the
        columns of :func:`profile_segment` (``status``: each refit's
        :class:`~pyomo_odeest.Status`).
    intervals : DataFrame
        Per parameter: ``estimate``, ``lower``, ``upper`` (NaN when open),
        ``lower_end`` / ``upper_end`` (``'crossed'``, ``'bound'``, ``'not reached'``,
        ``'not refined'``, ``'failed'``), ``shape`` (``'ok'``, ``'one-sided'``, ``'flat'``,
        ``'unbounded'``), ``wald_lower``, ``wald_upper`` (same level; for a
        combination :math:`\hat\theta \pm q\sqrt{a^\top C a}`, on its own,
        linear scale).
    level, threshold : float
    approach : str
        The approach of the re-optimizations (the name of the result's refit).
    warnings : list of str
    scale : str
        ``'known'`` (λ against χ²₁) or ``'residual'`` (λ/s² against F₁,ₘ₋ₚ; ``lr``
        is then the scaled statistic).
    """

    curves: dict
    intervals: pd.DataFrame
    level: float
    threshold: float
    approach: str
    seconds: float = 0.0
    warnings: list = field(default_factory=list)
    scale: str = "known"
    #: name -> {parameter: coefficient} of the profiled combinations
    combinations: dict = field(default_factory=dict)

    def plot(self, parameters=None, ax=None, wald=True, path=None):
        """Plot λ(θ) per parameter with the threshold (and the Wald parabola)."""
        from ._plots import plot_profiles
        return plot_profiles(self, parameters=parameters, ax=ax, wald=wald, path=path)


def assemble_profiles(segments, tasks, level=0.95, cov: Covariance | None = None) -> ProfileResult:
    """Combine the segments returned by :func:`profile_segment` for ``tasks``."""
    kappa = nll_factor(tasks[0].problem)
    thr = tasks[0].threshold
    curves, rows, notes = {}, [], []
    by_name = OrderedDict()
    for t, seg in zip(tasks, segments):
        by_name.setdefault(t.parameter, []).append((t, seg))
    for name, parts in by_name.items():
        t0 = parts[0][0]
        J0s = [seg["objective"].iloc[0] for _, seg in parts if len(seg)]
        J0 = float(np.nanmin(J0s)) if J0s else np.nan
        df = pd.concat([seg for _, seg in parts], ignore_index=True)
        df = df[df["success"]].sort_values("value").drop_duplicates("value").reset_index(drop=True)
        lr = 2.0 * (df["objective"] - J0) / (kappa * t0.scale)
        if np.any(lr < -1e-6 * max(1.0, thr)):
            notes.append(f"profile of {name} found a lower objective than the estimate "
                         f"(by {-lr.min():.3g} in λ): the estimate is not the optimum")
        df["lr"] = lr.clip(lower=0.0)
        theta_hat = float(_coefficients(t0.problem, name, t0.combination)[0] @ t0.u_hat)
        df["signed_root"] = np.sign(df["value"] - theta_hat) * np.sqrt(df["lr"])
        curves[name] = df
        end = {t.direction: (seg.attrs.get("end", "failed") if len(seg) else "failed")
               for t, seg in parts}
        lo = _crossing(df, theta_hat, -1, thr) if end.get(-1) == "crossed" else np.nan
        hi = _crossing(df, theta_hat, 1, thr) if end.get(1) == "crossed" else np.nan
        closed = [e == "crossed" for e in (end.get(-1), end.get(1))]
        for dd, e in end.items():
            if e == "not refined":
                notes.append(f"the {'upper' if dd > 0 else 'lower'} limit of {name} is "
                             f"bracketed but was not located within {t0.max_refine} "
                             f"re-optimizations: reported as NaN; see the profile curve")
        flat = len(df) > 1 and float(df["lr"].max()) < t0.flat_tol * thr
        shape = ("flat" if flat else "ok" if all(closed) else
                 "one-sided" if any(closed) else "unbounded")
        rows.append(dict(parameter=name, estimate=theta_hat, lower=lo, upper=hi,
                         lower_end=end.get(-1), upper_end=end.get(1), shape=shape,
                         points=len(df)))
    iv = pd.DataFrame(rows).set_index("parameter")
    combos = {t.parameter: dict(t.combination) for t in tasks if t.combination is not None}
    if cov is not None:
        w = cov.intervals(level)
        iv["wald_lower"] = w["lower"].reindex(iv.index)
        iv["wald_upper"] = w["upper"].reindex(iv.index)
        q = cov.quantile(level)
        for name, coef in combos.items():
            a = np.array([coef.get(n, 0.0) for n in cov.names])
            se = float(np.sqrt(max(float(cov.variance_of(a)), 0.0)))
            th = iv.loc[name, "estimate"]
            iv.loc[name, ["wald_lower", "wald_upper"]] = th - q * se, th + q * se
    return ProfileResult(curves, iv, level, thr, tasks[0].approach, warnings=notes,
                         scale=cov.scale if cov is not None else
                         "residual" if tasks[0].scale != 1.0 else "known",
                         combinations=combos)


def _crossing(df, theta_hat, d, thr):
    """θ where λ = thr on side d, by linear interpolation of the signed root."""
    side = df[(df["value"] - theta_hat) * d >= 0].copy()
    side["dist"] = (side["value"] - theta_hat) * d
    side = side.sort_values("dist")
    s = np.sqrt(side["lr"].to_numpy())
    v = side["value"].to_numpy()
    target = np.sqrt(thr)
    above = np.flatnonzero(s >= target)
    if len(above) == 0:
        return np.nan
    i = above[0]
    if i == 0:
        return float(v[0])
    s0, s1 = s[i - 1], s[i]
    frac = (target - s0) / (s1 - s0) if s1 > s0 else 1.0
    return float(v[i - 1] + frac * (v[i] - v[i - 1]))


def profile_likelihood(result, parameters=None, level=0.95, approach=None, scale="auto",
                       runner=None, options=None, problem=None, progress=None,
                       combination=None, **kw) -> ProfileResult:
    r"""Profile likelihood of ``result``'s parameters and likelihood-ratio intervals.

    Parameters
    ----------
    result : EstimationResult
        Of any approach (the profile re-optimizes through its refit, see
        :meth:`~pyomo_odeest.EstimationResult.refit`).
    parameters : list of str, optional
        Default: every free parameter (none when ``combination`` is given).
    level : float
        Confidence level of the intervals (threshold χ²₁ or F₁,ₘ₋ₚ quantile).
    approach : str, Approach subclass or instance, optional
        The approach of the re-optimizations (default: the result's own, with its
        options as solved: :meth:`~pyomo_odeest.EstimationResult.refit`).
    scale : 'auto' | 'known' | 'residual'
        σ known (χ²₁ threshold), unknown (λ/s² against F₁,ₘ₋ₚ), or decided by
        whether the data give σ (default).
    runner : callable ``runner(fn, tasks) -> list``, optional
        Maps :func:`profile_segment` over the tasks (default serial).
    options : dict
        Optimizer options of every re-optimization, over the result's own.
    combination : dict or list of dict, optional
        ``{name: coefficient}``: profile :math:`\theta = \sum_k a_k u_k` too (e.g.
        ``{'lk3': 1, 'lk2': -0.5}``, the log of :math:`k_3/\sqrt{k_2}` for
        log-rates), named ``'lk3 − 0.5·lk2'`` in the result; the other parameters
        are re-optimized with θ fixed (see the module docstring).
    progress : bool or None
        One line per finished side of a profile (parameter, side, points, how it
        ended, seconds) on standard error; None (default): when standard error
        is a terminal.  (A Runner shows its own progress.)
    **kw
        :class:`ProfileTask` settings (``target_step``, ``max_points``, ...).
    """
    t = time.perf_counter()
    P = _problem_of(result, problem)
    cov = covariance(result, "fim", problem=P, scale=scale)
    tasks = profile_tasks(result, parameters, level, approach, scale, options, cov, P,
                          combination, **kw)
    if runner is not None:
        segments = runner(profile_segment, tasks)
    else:
        from ..nlp._progress import TaskProgress, progress_enabled
        prog = TaskProgress(len(tasks), progress_enabled(progress), "profile")
        segments = []
        try:
            for task in tasks:
                seg = profile_segment(task)
                segments.append(seg)
                prog.update(seg.attrs.get("end") != "failed",
                            f"{task.parameter} {'+' if task.direction > 0 else '-'}: "
                            f"{len(seg)} points, {seg.attrs.get('end')}")
        finally:
            prog.close()
    out = assemble_profiles(segments, tasks, level, cov)
    out.seconds = time.perf_counter() - t
    return out
