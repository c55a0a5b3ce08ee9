r"""Profile likelihood and likelihood-ratio intervals (see docs/uncertainty.md,
"Profile likelihood").

For :math:`\theta = u_k`, :math:`\mathrm{PL}(\theta) = \min_{u:\,u_k=\theta} J(u)` and
:math:`\lambda(\theta) = \frac{2}{\kappa}(\mathrm{PL}(\theta) - J(\hat u))`; the
interval is :math:`\{\theta: \lambda(\theta) \le \chi^2_{1,\alpha}\}`, or with σ
unknown (``scale='residual'``) :math:`\lambda/s^2` against the :math:`F_{1,m-p}`
quantile.  The profile of a named combination :math:`\theta = \sum_k a_k u_k`
(``combination={'lk3': 1, 'lk2': -0.5}``) minimizes over the other parameters
with the combination fixed: one of its parameters (the pivot, the largest
:math:`|a_k|`) is substituted, :math:`u_k = (\theta - \sum_{j \ne k} a_j u_j)/a_k`
(reduced space; its bounds become a linear constraint), or the equality
:math:`a^\top u = \theta` is a constraint of the block (simultaneous).  Each side of a profile is a path from :math:`\hat\theta` outwards
with steps adapted to the signed root :math:`\pm\sqrt{\lambda}`; the crossing of
the threshold is refined by :func:`_illinois`.  :func:`profile_tasks`,
:func:`profile_segment` and :func:`assemble_profiles` split the work for a
``runner(fn, tasks)``; :func:`profile_likelihood` does the three steps.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..problem._status import status_from_ipopt
from ._uncertainty import Covariance, _problem_of, covariance, nll_factor, resolve_scale

__all__ = ["ProfileTask", "ProfileResult", "profile_tasks", "profile_segment", "profile_point",
           "assemble_profiles", "profile_likelihood", "combination_name", "PROFILE_APPROACHES"]

PROFILE_APPROACHES = ("reduced_space", "simultaneous")


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
    tangent : array, optional
        d u / d θ along the profile at the estimate (all parameters; from the
        covariance, ``C[:, k] / C[k, k]``): predicts the start of the first
        point; later points extrapolate the last two (secant predictor).
    approach : 'reduced_space' | 'simultaneous'
    discretization : dict
        ``scheme``, ``qmax``, ``grid`` (the estimate's discretization).
    threshold : float
        Value of λ at which the side stops (after refining the crossing).
    scale : float
        λ = 2ΔJ/(κ·scale) (1 for σ known, s² for σ unknown).
    options : dict
        Ipopt options of each re-optimization.
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
    approach: str = "reduced_space"
    tangent: np.ndarray | None = None
    discretization: dict = field(default_factory=dict)
    threshold: float = 3.841458820694124
    scale: float = 1.0
    options: dict = field(default_factory=dict)
    target_step: float = 0.5
    max_points: int = 30
    max_range: float = 50.0
    refine_tol: float = 1e-3
    max_refine: int = 30
    flat_tol: float = 1e-3
    combination: dict | None = None


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
    parameter ``pivot`` substituted (the profiled parameter itself, or the
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
# one profile point in each backend
# ---------------------------------------------------------------------------
_MODELS: "OrderedDict[str, object]" = OrderedDict()


def _discrete_model(problem, disc):
    """The discrete model of (problem, discretization) — for several experiments the
    sum of one per experiment — cached per process by object identity (the tasks
    of one process that share a problem share the model)."""
    from ..approaches._reduced import discrete_model
    k = (id(problem), disc.get("scheme"), disc.get("qmax"), id(disc.get("grid")),
         disc.get("max_step"), disc.get("steps_per_interval"))
    hit = _MODELS.get(k)
    dm = hit[0] if hit is not None and hit[1] is problem and hit[2] is disc.get("grid") else None
    if dm is None:
        dm = discrete_model(problem, disc.get("scheme", "adams_pc"), disc.get("qmax"),
                            disc.get("grid"), disc.get("max_step"), disc.get("steps_per_interval"))
        _MODELS[k] = (dm, problem, disc.get("grid"))
        while len(_MODELS) > 16:
            _MODELS.popitem(last=False)
    return dm


def _combination_nlp(dm, a, pivot):
    """The reduced-space NLP over the free parameters but ``pivot``, with
    ``u[pivot] = (theta - Σ_{j≠pivot} a_j u_j)/a_pivot`` (``theta`` an attribute):
    gradient Bᵀg, Hessian BᵀHB with B = du/dx; the pivot's bounds are one more
    (linear) constraint."""
    from ..approaches._reduced import ReducedSpaceNLP
    from ..nlp._protocol import finite

    class CombinationNLP(ReducedSpaceNLP):
        def __init__(self):
            P = dm.problem
            free = P.free_mask.copy()
            free[pivot] = False
            super().__init__(dm, "adjoint", "soa", free=free)
            self.a, self.k, self.theta = a, pivot, float(a @ P.u0)
            self.B = np.zeros((len(a), self.n))
            self.B[self.free, np.arange(self.n)] = 1.0
            self.B[pivot] = -a[self.free] / a[pivot]
            p = P.parameters[pivot]
            self.pivot_row = p.lb is not None or p.ub is not None
            if self.pivot_row:
                self.m += 1
                self.g_lb = np.append(self.g_lb, p.bounds[0])
                self.g_ub = np.append(self.g_ub, p.bounds[1])

        def full(self, x):
            u = super().full(x)
            rest = self.a @ u - self.a[self.k] * u[self.k]
            u[self.k] = (self.theta - rest) / self.a[self.k]
            return u

        def gradient(self, x):
            traj = self._trajectory(x)
            self.counts["gradients"] += 1
            g = self.dm.gradient(self.full(x), self.gradient_method, traj)
            return finite(self.B.T @ g, "gradient")

        def hessian_matrix(self, x):
            self._trajectory(x)
            self.counts["hessians"] += 1
            return self.B.T @ self.dm.hessian(self.full(x), self.hessian_method) @ self.B

        def constraints(self, x):
            g = np.zeros(0) if self.cons is None else \
                self.cons.values(self.full(x), self._trajectory(x))
            if self.pivot_row:
                g = np.append(g, self.full(x)[self.k])
            return finite(g, "constraint value")

        def jacobian(self, x):
            J = np.zeros((0, self.n)) if self.cons is None else \
                self.cons.jacobian(self.full(x), self._trajectory(x)) @ self.B
            if self.pivot_row:
                J = np.vstack([J, self.B[self.k]])
            return finite(J, "constraint Jacobian").ravel()

    return CombinationNLP()


class _ReducedProfiler:
    """Re-optimize J_k over all free parameters but one (reduced space, Ipopt);
    for a combination, the pivot is substituted (:func:`_combination_nlp`)."""

    def __init__(self, problem, disc, parameter, options, u_hat=None, combination=None):
        from ..approaches._reduced import ReducedSpaceNLP
        self.dm = _discrete_model(problem, disc)
        a, self.k = _coefficients(problem, parameter, combination)
        self.combination = combination is not None
        if self.combination:
            self.nlp = _combination_nlp(self.dm, a, self.k)
        else:
            free = problem.free_mask.copy()
            free[self.k] = False
            self.nlp = ReducedSpaceNLP(self.dm, "adjoint", "soa", free=free)
        self.options = {"tol": 1e-10, **(options or {})}

    def solve(self, u_start, theta):
        from ..nlp._cyipopt_adapter import solve_with_ipopt, start_value_scaling
        from ..nlp._protocol import EvaluationError
        nlp = self.nlp
        u = np.asarray(u_start, dtype=float).copy()
        if self.combination:
            nlp.theta = float(theta)
        else:
            u[self.k] = theta
        nlp.u_full = u
        x0 = np.clip(u[nlp.free], nlp.x_lb, nlp.x_ub)
        nlp.x0 = x0
        if nlp.n == 0:
            u = nlp.full(x0)
            try:
                return u, self.dm.objective(u), "Solve_Succeeded", 0
            except Exception as err:                   # SimulationError
                return u, np.nan, f"Simulation_Failed: {err}", 0
        try:
            nlp.objective(x0)
            r = solve_with_ipopt(nlp, options=self.options, x_scaling=start_value_scaling(x0),
                                 progress=False)          # the profile reports its own
        except EvaluationError as err:
            return u, np.nan, f"Simulation_Failed: {err}", 0
        u_new = nlp.full(r.x)
        try:
            J = self.dm.objective(u_new)
        except Exception as err:
            return u_new, np.nan, f"{r.status_name}; simulation failed: {err}", r.iterations
        return u_new, J, r.status_name, r.iterations


class _BlockProfiler:
    """Re-optimize the simultaneous Pyomo block with one parameter fixed (or a
    combination: the constraint ``Σ a_k u_k = θ``); the states of the previous
    point are the start of the next (warm start)."""

    def __init__(self, problem, disc, parameter, options, u_hat, combination=None):
        import pyomo.environ as pyo
        from ..approaches._simultaneous import initialize_block, scale_parameters
        from ..transcription._block import build_block
        from ..transcription._experiments import build_experiment_blocks
        m = pyo.ConcreteModel()
        build = build_experiment_blocks if problem.experiments else build_block
        m.est = build(problem, disc.get("scheme", "adams_pc"), disc.get("qmax"),
                      disc.get("grid"), disc.get("max_step"), disc.get("steps_per_interval"))
        b = m.est
        for p, v in zip(problem.parameter_names, u_hat):
            b.u[p].set_value(float(v))
        for sb in getattr(b, "experiment_blocks", [b]):
            initialize_block(sb, np.asarray(u_hat, dtype=float), "auto")
        scale_parameters(m, b)
        self.m, self.b, self.problem = m, b, problem
        self.parameter = parameter
        if combination is None:
            self.var = b.u[parameter]
            self.var.fix()
        else:
            self.var = None
            m.profile_value = pyo.Param(mutable=True, initialize=0.0)
            m.profile_combination = pyo.Constraint(
                expr=sum(float(c) * b.u[n] for n, c in combination.items()) == m.profile_value)
        self.options = {"tol": 1e-10, **(options or {})}

    def solve(self, u_start, theta):
        import pyomo.environ as pyo
        from ..nlp._plugin import OdeestIpoptSolver
        b = self.b
        if self.var is not None:
            self.var.fix(float(theta))
        else:
            self.m.profile_value.set_value(float(theta))
            for p, v in zip(self.problem.parameter_names, u_start):
                if not b.u[p].fixed:
                    b.u[p].set_value(float(v))
        solver = OdeestIpoptSolver()
        try:
            solver.solve(self.m, options=self.options, progress=False)
        except Exception as err:                      # evaluation failures at the start
            return np.asarray(u_start, float), np.nan, f"Failed: {err}", 0
        info = solver.last_info
        u = np.array([pyo.value(b.u[p]) for p in self.problem.parameter_names])
        return u, float(pyo.value(b.objective)), info["status"], int(info["iterations"])


_PROFILERS = dict(zip(PROFILE_APPROACHES, (_ReducedProfiler, _BlockProfiler)))


def _profiler(task):
    cls = _PROFILERS.get(task.approach)
    if cls is None:
        raise ValueError(f"profile approach must be one of {PROFILE_APPROACHES}, got "
                         f"{task.approach!r}")
    return cls(task.problem, task.discretization, task.parameter, task.options, task.u_hat,
               task.combination)


def profile_point(problem, parameter, value, u_start, approach="reduced_space",
                  discretization=None, options=None):
    """Minimize J with ``parameter`` fixed at ``value``, starting from ``u_start``.

    Returns ``(u, J, status, iterations)``.  Picklable inputs only: usable as a
    task on its own (the discrete model is cached per process).
    """
    task = ProfileTask(problem, parameter, 1, np.asarray(u_start, dtype=float), 1.0, approach,
                       dict(discretization or {}), options=dict(options or {}))
    return _profiler(task).solve(task.u_hat, float(value))


# ---------------------------------------------------------------------------
# one side of one profile
# ---------------------------------------------------------------------------
def profile_segment(task: ProfileTask) -> pd.DataFrame:
    """Walk one side of one profile (see the module docstring).

    Returns a DataFrame with one row per point (the estimate first):
    ``parameter``, ``side``, ``value``, ``objective``, ``status``, ``success``,
    ``iterations``, ``seconds`` and the re-optimized parameters ``u:<name>``;
    ``attrs['end']`` says how the side ended: ``'crossed'``, ``'bound'``,
    ``'not reached'``, ``'not refined'`` (the threshold is bracketed but was not
    located to ``refine_tol`` within ``max_refine`` re-optimizations) or ``'failed'``.
    """
    P = task.problem
    names = P.parameter_names
    a, _ = _coefficients(P, task.parameter, task.combination)
    kappa = nll_factor(P)
    d = 1 if task.direction > 0 else -1
    bound = _quantity_bounds(P, a)[1 if d > 0 else 0]
    prof = _profiler(task)
    rows = []

    def record(theta, u, J, status, iters, sec):
        rows.append(dict(parameter=task.parameter, side=d, value=float(theta), objective=J,
                         status=status, success=status_from_ipopt(status).success and np.isfinite(J),
                         iterations=iters, seconds=sec,
                         **{f"u:{n}": float(v) for n, v in zip(names, u)}))

    t = time.perf_counter()
    theta0 = float(a @ task.u_hat)
    u0, J0, st0, it0 = prof.solve(task.u_hat, theta0)
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
        u, J, st, it = prof.solve(_predict(P, u_prev, tangent, theta - theta_prev), theta)
        ok = status_from_ipopt(st).success and np.isfinite(J)
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
                uc, Jc, stc, itc = prof.solve(start, tc)
                if not (status_from_ipopt(stc).success and np.isfinite(Jc)):
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

    ``approach``: ``'reduced_space'`` or ``'simultaneous'`` (default: the one
    that re-optimizes the result's objective, ``result.backend.refit``: the
    simultaneous block for a simultaneous result, else the reduced space on
    the result's discretization).  ``scale``: ``'known'`` (σ known: χ²₁ threshold)
    ``'residual'`` (σ unknown: λ/s² against F₁,ₘ₋ₚ) or ``'auto'`` (known when the
    data give σ).  ``combination``: ``{name: coefficient}`` of free parameters,
    or a list of them: the profile of each :math:`\sum_k a_k u_k` too (named by
    :func:`combination_name`; with ``parameters=None``, only the combinations).
    Other keywords go to
    :class:`ProfileTask` (``target_step``, ``max_points``, ``max_range``, ...).
    """
    P = _problem_of(result, problem)
    if approach is None:
        approach = result.backend.refit
    if approach not in PROFILE_APPROACHES:
        raise ValueError(f"approach must be one of {PROFILE_APPROACHES}, got {approach!r}")
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
    disc = result.backend.discretization
    C = cov.matrix
    tasks = []
    for name in parameters:
        s = float(se.get(name, np.nan))
        tangent = np.zeros(len(u_hat))
        if name in C.index and np.isfinite(C.loc[name, name]) and C.loc[name, name] > 0:
            col = (C[name] / C.loc[name, name]).reindex(P.parameter_names).fillna(0.0)
            tangent = col.to_numpy(dtype=float)
        for d in (-1, 1):
            tasks.append(ProfileTask(P, name, d, u_hat, s, approach, tangent, disc, thr, sc,
                                     dict(options or {}), **kw))
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
            tasks.append(ProfileTask(P, name, d, u_hat, s, approach, tangent, disc, thr, sc,
                                     dict(options or {}), combination=dict(coef), **kw))
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
        (for a combination, ``value`` is that of :math:`\sum_k a_k u_k`).
    intervals : DataFrame
        Per parameter: ``estimate``, ``lower``, ``upper`` (NaN when open),
        ``lower_end`` / ``upper_end`` (``'crossed'``, ``'bound'``, ``'not reached'``,
        ``'not refined'``, ``'failed'``), ``shape`` (``'ok'``, ``'one-sided'``, ``'flat'``,
        ``'unbounded'``), ``wald_lower``, ``wald_upper`` (same level; for a
        combination :math:`\hat\theta \pm q\sqrt{a^\top C a}`, on its own,
        linear scale).
    level, threshold : float
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
        Of any approach (the profile runs in ``approach``).
    parameters : list of str, optional
        Default: every free parameter (none when ``combination`` is given).
    level : float
        Confidence level of the intervals (threshold χ²₁ or F₁,ₘ₋ₚ quantile).
    approach : 'reduced_space' | 'simultaneous', optional
    scale : 'auto' | 'known' | 'residual'
        σ known (χ²₁ threshold), unknown (λ/s² against F₁,ₘ₋ₚ), or decided by
        whether the data give σ (default).
    runner : callable ``runner(fn, tasks) -> list``, optional
        Maps :func:`profile_segment` over the tasks (default serial).
    options : dict
        Ipopt options of every re-optimization.
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
