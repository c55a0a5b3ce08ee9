r"""One estimation pipeline for every approach (template method).

An approach is an :class:`Approach` subclass that declares its options as a
Pyomo ``ConfigDict`` (:attr:`Approach.CONFIG`: :func:`common_config`, for the
approaches that discretize :func:`discretization_config`, then its own) and
fills the hooks :meth:`~Approach.validate`, :meth:`~Approach.build_experiment`
and :meth:`~Approach.combine` (or :meth:`~Approach.build`),
:meth:`~Approach.solve`, :meth:`~Approach.parts`, :meth:`~Approach.collect` and
:meth:`~Approach.collect_experiment`; :meth:`Approach.estimate` runs them once.
See docs/architecture.md, section "One estimation pipeline".

The pipeline owns the progress lines and the time limit: it runs the solves
inside a :func:`~pyomo_odeest.nlp._progress.solve_scope` (``progress`` and a
deadline ``max_wall_time`` seconds from the start of :meth:`Approach.estimate`),
which every optimizer call in it obeys without being told (Ipopt's
``max_wall_time``, the SciPy optimizers' :class:`SolveClock`, ``least_squares``
where its Jacobian is evaluated), and writes a line before and after each solve.

Every result remembers how it was solved: its approach and options as solved (the
scheme and grid of the last pass, the refined grid after the refinement stage), a
:class:`Refit` (:func:`refit_of`).  :meth:`Approach.refit` estimates again through
that pipeline with some parameters held fixed, on that discretization: the
re-optimizations of the profiles and the samples of the bootstrap
(:meth:`~pyomo_odeest.EstimationResult.refit`).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd
from pyomo.common.config import ConfigDict, ConfigValue

from ..discretization._size_guard import validate_estimator
from ..discretization._experiments import experiment_grid
from ..discretization._grid import resolve_grid
from ..discretization.schemes import QMAX_RANGE, STIFF_SCHEME, get_scheme, stiff_switch
from ..nlp._cyipopt_adapter import IpoptResult, solve_with_ipopt
from ..nlp._progress import current_scope, solve_scope
from ..nlp._protocol import EvaluationError
from ..optimizers._clock import SolveClock
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._misfit import observations
from ..problem._result import (BY_BACKEND, RESULT_ANALYSES, post_solve_checks,
                               stack_experiments)
from ..problem._start import start_values
from ..problem._status import Status, demote, status_from_ipopt, status_from_scipy
from ..problem._validation import DEFAULT_MAX_ITER, check_options, positive_float, positive_int

__all__ = ["Approach", "Outcome", "IPOPT_DEFAULTS", "Choice", "ConfigValue", "common_config",
           "discretization_config", "refinement_config", "option_table", "ipopt_options", "start_push", "run_ipopt", "SolveClock",
           "add_constraint_multipliers", "ConstraintRows", "fit_frames", "Refit", "refit_of"]

#: Ipopt options every approach starts from (``options`` override them).
IPOPT_DEFAULTS = {"tol": 1e-8, "max_iter": DEFAULT_MAX_ITER}


class Choice:
    """Domain of an option with a fixed set of values; a refusal names the option."""

    def __init__(self, name, *values):
        self.name, self.values = name, values

    def __call__(self, v):
        if v not in self.values:
            raise ProblemError(f"unknown {self.name} {v!r}; valid: {list(self.values)}")
        return v

    def domain_name(self):
        return " | ".join(repr(v) for v in self.values)


class _Bool:
    def __init__(self, name, optional=False):
        self.name, self.optional = name, optional

    def __call__(self, v):
        if v is None and self.optional:
            return None
        if not isinstance(v, (bool, np.bool_, int)) or isinstance(v, float):
            raise ProblemError(f"{self.name} must be True or False"
                               + (" (or None)" if self.optional else "") + f", got {v!r}")
        return bool(v)

    def domain_name(self):
        return "bool or None" if self.optional else "bool"


class _Optional:
    def __init__(self, check, name, text):
        self.check, self.name, self.text = check, name, text

    def __call__(self, v):
        return None if v is None else self.check(v, self.name)

    def domain_name(self):
        return self.text


class _Required(_Optional):
    def __call__(self, v):
        return self.check(v, self.name)


def _options(v):
    check_options(v)
    return None if v is None else dict(v)


_options.domain_name = lambda: "dict"


def common_config() -> ConfigDict:
    """The options every approach takes, with their domains and defaults."""
    c = ConfigDict()
    c.declare("u0", ConfigValue(default=None, description=(
        "start values: a vector (one per parameter), a mapping or Series name -> value "
        "(default: the declared values)")))
    c.declare("options", ConfigValue(default=None, domain=_options, description=(
        "optimizer options (Ipopt: tol=1e-8, max_iter=500 unless given)")))
    c.declare("tee", ConfigValue(default=False, domain=_Bool("tee"),
                                 description="show the optimizer's log"))
    c.declare("scale", ConfigValue(default=True, domain=_Bool("scale"), description=(
        "scale each free parameter by its start value inside the optimizer")))
    c.declare("max_wall_time", ConfigValue(
        default=None, domain=_Optional(positive_float, "max_wall_time", "float > 0 or None"),
        description=("stop the solves this many seconds after the estimation started "
                     "(refinement rounds included; None: no limit)")))
    c.declare("progress", ConfigValue(default=None, domain=_Bool("progress", optional=True),
                                      description=("lines on stderr: each solve's start and "
                                                   "outcome, a line per block of iterations "
                                                   "(None: when stderr is a terminal)")))
    return c


def discretization_config() -> ConfigDict:
    """The options of the approaches that solve a discretization of the ODE."""
    c = ConfigDict()
    c.declare("scheme", ConfigValue(default="adams_pc", description=(
        "multistep scheme (name or scheme object)")))
    c.declare("qmax", ConfigValue(default=None, domain=_Optional(
        lambda v, n: positive_int(v, n, *QMAX_RANGE), "qmax",
        f"int in [{QMAX_RANGE[0]}, {QMAX_RANGE[1]}] or None"),
        description="maximum order of the scheme (None: the scheme's default)"))
    c.declare("grid", ConfigValue(default=None, description=(
        "an explicit Grid (several experiments: a mapping experiment -> Grid)")))
    c.declare("max_step", ConfigValue(default=None, domain=_Optional(
        positive_float, "max_step", "float > 0 or None"),
        description="largest step of the generated grid"))
    c.declare("steps_per_interval", ConfigValue(default=None, domain=_Optional(
        lambda v, n: positive_int(v, n), "steps_per_interval", "int or None"),
        description="steps between consecutive measurement times (default 10)"))
    return c


def refinement_config() -> ConfigDict:
    """The options of the grid certificate and the refinement stage (the approaches
    that solve on a grid: simultaneous, reduced space, multiple shooting)."""
    from ._certificate import FIT_TOL, MAX_REFINEMENTS, SHIFT_TOL
    c = ConfigDict()
    c.declare("certify", ConfigValue(default=True, domain=_Bool("certify"), description=(
        "certify the grid at the estimates against an independent simulation and refine "
        "it until certified (False: solve on the first grid only)")))
    c.declare("fit_tol", ConfigValue(default=FIT_TOL, domain=_Required(
        positive_float, "fit_tol", "float > 0"), description=(
        "largest error of a fitted value the grid may cause, in units of its sigma")))
    c.declare("shift_tol", ConfigValue(default=SHIFT_TOL, domain=_Required(
        positive_float, "shift_tol", "float > 0"), description=(
        "largest shift of an estimate the grid may cause, in standard errors")))
    c.declare("max_refinements", ConfigValue(default=MAX_REFINEMENTS, domain=_Required(
        lambda v, n: positive_int(v, n, 0), "max_refinements", "int >= 0"), description=(
        "most refinement rounds after the first solve")))
    return c


def watch_config() -> ConfigDict:
    """The option of refinement before convergence (the approaches whose solve on a
    grid the :class:`~pyomo_odeest.approaches._certificate.GridWatch` can stop:
    simultaneous, reduced space with Ipopt)."""
    from ._certificate import WATCH_TOL
    c = ConfigDict()
    c.declare("watch_tol", ConfigValue(default=WATCH_TOL, domain=_Required(
        _nonnegative, "watch_tol", "float >= 0"), description=(
        "refinement before convergence: an Ipopt solve stops, and its grid is refined at "
        "the iterate, where the iterate's fitted values are more than this many sigma off "
        "the ODE's (0: never; only while refinement rounds are left)")))
    c.declare("region", ConfigValue(default=None, domain=_region, description=(
        "the refinement stage's trust region (set by the stage, docs/checks.md): a mapping "
        "parameter name -> (low, high) that narrows the parameters' bounds for one solve")))
    return c


def _region(v):
    """None, or a mapping parameter name -> (low, high) with low <= high."""
    if v is None:
        return None
    try:
        out = {str(k): (float(lo), float(hi)) for k, (lo, hi) in dict(v).items()}
    except (TypeError, ValueError):
        raise ValueError(f"region must map parameter names to (low, high); got {v!r}") from None
    bad = [k for k, (lo, hi) in out.items() if not lo <= hi]
    if bad:
        raise ValueError(f"region: low > high for {bad}")
    return out


def region_bounds(problem, region):
    """The bounds ``(lb, ub)`` of every parameter, in order, within the stage's trust
    ``region`` (:func:`watch_config`; None: the problem's)."""
    lb, ub = problem.bounds()
    for i, n in enumerate(problem.parameter_names):
        if region and n in region:
            lo, hi = region[n]
            lb[i], ub[i] = max(lb[i], lo), min(ub[i], hi)
            if lb[i] > ub[i]:                  # outside the bounds: on the nearer one
                lb[i] = ub[i] = min(max(lo, lb[i]), ub[i])
    return lb, ub


def region_active(problem, region, estimates, rtol=1e-3):
    """The parameters whose estimate lies on a bound of the trust ``region`` that is
    inside the problem's own bounds (the region, not the problem, holds them): within
    ``rtol`` times the region's width of it.  An interior-point solve ends a distance
    of about μ/z inside a bound whose multiplier z is small (Fujita's
    ``init_EGFR``: 2e-4 of the width), so the tolerance is relative to the region."""
    if not region:
        return []
    out = []
    for p in problem.parameters:
        if p.fixed or p.name not in region:
            continue
        lo, hi = region[p.name]
        v = float(estimates[p.name])
        tol = max(1e-6 * max(1.0, abs(v)), rtol * (hi - lo))
        lb, ub = p.bounds
        if (lo > lb + tol and v <= lo + tol) or (hi < ub - tol and v >= hi - tol):
            out.append(p.name)
    return out


def _nonnegative(v, what):
    """0, or a positive finite number (:func:`positive_float`)."""
    return 0.0 if (not isinstance(v, str) and v == 0) else positive_float(v, what)


#: the discretization options in the order the estimators take them positionally
_POSITIONAL = ("scheme", "qmax", "grid", "max_step", "steps_per_interval")


@dataclass
class Outcome:
    """What an optimizer returned: the point, the :class:`Status`, its own message."""

    x: np.ndarray
    status: Status
    message: str
    iterations: int = 0
    counts: dict = field(default_factory=dict)
    mult_g: np.ndarray | None = None
    timings: dict = field(default_factory=dict)
    #: the objective at the start, on the scale of ``result.objective`` (NaN: not known)
    objective_start: float = float("nan")
    #: the model could not be evaluated at the start (nothing was solved)
    at_start: bool = False
    #: the model as the solve left it, where the solve makes a new one (the adaptive
    #: approach rebuilds its blocks); None: the built model
    model: object = None
    #: what the solve found besides the point, for :meth:`Approach.collect` (the
    #: method's name, a stationarity check, the final simulation, ...)
    details: dict = field(default_factory=dict)

    @classmethod
    def from_ipopt(cls, r):
        """From an :class:`~pyomo_odeest.nlp.IpoptResult` (or the plugin's ``last_info``)."""
        if isinstance(r, dict):
            return cls(None, status_from_ipopt(r["status"]), str(r["status"]),
                       int(r["iterations"]), dict(r.get("counts", {})))
        return cls(r.x, status_from_ipopt(r.status_name), r.status_name, int(r.iterations),
                   dict(r.counts), r.mult_g, dict(eval_s=r.eval_s))

    @classmethod
    def failed_at_start(cls, x, err, model=None):
        return cls(np.asarray(x, dtype=float), Status.SIMULATION_FAILED,
                   f"the model cannot be simulated at the start: {err}", at_start=True,
                   model=model)


#: Ipopt's default ``bound_push``, and the smallest push :func:`start_push` gives
IPOPT_BOUND_PUSH, MIN_BOUND_PUSH = 1e-2, 1e-8


def start_push(x, lb, ub) -> dict:
    """Ipopt's ``bound_push`` that leaves the start ``x`` where it is.

    Ipopt moves every variable closer to a bound ``b`` than
    ``bound_push·max(1, |b|)`` (default 1e-2) into the interior before its first
    iteration: a rate started at 1e-13 above its bound 0 becomes 1e-2, and a
    simulated start no longer satisfies its scheme.  Where some component of ``x``
    (in Ipopt's own, scaled, variables) is that close, the push becomes half the
    smallest relative distance (nothing moves), and at most 1e-8 where a component
    is on its bound (it moves by that); ``{}`` where nothing would move."""
    x, lb, ub = (np.asarray(v, dtype=float).reshape(-1) for v in (x, lb, ub))
    rel = np.full(x.shape, np.inf)
    with np.errstate(invalid="ignore"):
        for b, d in ((lb, x - lb), (ub, ub - x)):
            fin = np.isfinite(b)
            rel[fin] = np.minimum(rel[fin], d[fin] / np.maximum(1.0, np.abs(b[fin])))
    rel = rel[np.isfinite(rel)]
    if rel.size == 0 or rel.min() >= IPOPT_BOUND_PUSH:
        return {}
    inside = rel[rel > 0]
    push = 0.5 * inside.min() if inside.size else IPOPT_BOUND_PUSH
    if inside.size < rel.size:                    # on a bound: moved by the least push
        push = min(push, MIN_BOUND_PUSH)
    return {"bound_push": float(max(push, 1e-300))}


def ipopt_options(cfg, start=None, **defaults) -> dict:
    """Ipopt's options of a configuration: :data:`IPOPT_DEFAULTS`, the approach's
    ``defaults``, the bound push that keeps ``start`` (``(x, lb, ub)`` in Ipopt's
    scaled variables; :func:`start_push`), ``max_wall_time``, then the user's
    ``options``."""
    opts = dict(IPOPT_DEFAULTS, **defaults)
    if start is not None:
        opts.update(start_push(*start))
    if cfg.max_wall_time is not None:
        opts["max_wall_time"] = float(cfg.max_wall_time)
    opts.update(cfg.options or {})
    return opts


def run_ipopt(nlp, cfg, options, **kw):
    """:func:`~pyomo_odeest.nlp.solve_with_ipopt` with the configuration's ``tee`` and
    ``progress`` (inside the pipeline its solve scope decides either way).  Without a
    variable (every parameter held fixed: a profile of a one-parameter problem) the
    model is evaluated at its point: converged where its constraints hold."""
    if nlp.n == 0:
        return _evaluated(nlp)
    return solve_with_ipopt(nlp, options=options, tee=cfg.tee, progress=cfg.progress, **kw)


def run_scipy(fun, x0, lb, ub, cfg, defaults, hess=None):
    """The approaches' SciPy driver: ``scipy.optimize.minimize`` with ``cfg.optimizer``
    on ``fun(x) -> (J, gradient)`` (an :class:`~pyomo_odeest.nlp.EvaluationError` is
    an infinite J: the line search backs off), the bounds where any is finite, the
    approach's ``defaults`` below the user's ``options``, ``cfg.tee`` as ``disp``, and
    ``cfg``'s wall-time limit and progress lines (:class:`SolveClock`).  Returns
    ``(OptimizeResult, Outcome)``, the status ``time_limit`` where the clock stopped
    it, else :func:`~pyomo_odeest.problem._status.status_from_scipy`'s."""
    from scipy.optimize import Bounds, minimize

    def guarded(x):
        try:
            return fun(x)
        except EvaluationError:
            return np.inf, np.zeros_like(x)
    options = dict(defaults, **(cfg.options or {}))
    if cfg.tee:
        options.setdefault("disp", True)
    clock = SolveClock(cfg.max_wall_time, cfg.progress)
    kw = {} if hess is None else dict(hess=hess)
    if np.any(np.isfinite(lb)) or np.any(np.isfinite(ub)):
        kw["bounds"] = Bounds(lb, ub)
    with warnings.catch_warnings():          # overflow in trial points the search rejects
        warnings.simplefilter("ignore", RuntimeWarning)
        sol = minimize(guarded, x0, jac=True, method=cfg.optimizer, options=options,
                       callback=clock, **kw)
    status = Status.TIME_LIMIT if clock.exceeded else status_from_scipy(sol, cfg.optimizer)
    return sol, Outcome(sol.x, status, str(sol.message),
                        int(getattr(sol, "nit", 0) or getattr(sol, "niter", 0) or 0))


def _evaluated(nlp):
    """The :class:`~pyomo_odeest.nlp.IpoptResult` of an NLP without variables."""
    x = np.zeros(0)
    obj, g = float(nlp.objective(x)), np.asarray(nlp.constraints(x), dtype=float)
    ok = bool(np.all((g >= nlp.g_lb - 1e-8) & (g <= nlp.g_ub + 1e-8)))
    name = "Solve_Succeeded" if ok else "Infeasible_Problem_Detected"
    return IpoptResult(x=x, obj=obj, mult_g=np.zeros(len(g)), mult_x_L=x, mult_x_U=x, g=g,
                       status=0 if ok else 2, status_name=name,
                       message="no free variable: the model evaluated at its point",
                       iterations=0, eval_s=0.0, ipopt_s=0.0)


class NotAProblemError(ProblemError, TypeError):
    """Something other than an :class:`~pyomo_odeest.EstimationProblem` was given
    (a :class:`ProblemError` and, as for any argument of the wrong type, a
    :class:`TypeError`)."""


class Approach:
    """Base of the estimation approaches: the pipeline :meth:`estimate` and its hooks
    (see docs/architecture.md, section "One estimation pipeline").

    ``Approach(**options)``: an instance with ``options`` preset (validated here);
    each :meth:`estimate` starts from them and the call's own options override
    them.  A subclass that does not set :attr:`name` takes its parent's, or its
    class name when the parent is :class:`Approach`.
    """

    #: the front-door name, ``result.approach``
    name: str = ""
    #: the options preset on this instance (``Approach(**options)``)
    preset: dict = MappingProxyType({})
    #: the approach's options; subclasses extend :func:`common_config`
    CONFIG: ConfigDict = common_config()
    #: option defaults of this approach that differ from the common ones (documented there)
    DEFAULTS: dict = {}
    #: the options given to the last :meth:`configure`
    given: set = frozenset()
    #: what resolves the ODE when a result without a grid of its own (nothing for the
    #: refinement stage to refine) is not certified
    unresolved_advice: str = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if not cls.name:
            cls.name = cls.__name__

    def __init__(self, **options):
        self._parse(options)
        self.preset = dict(options)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.preset.items())})"

    @classmethod
    def config(cls) -> ConfigDict:
        """A fresh configuration with this approach's defaults."""
        cfg = cls.CONFIG()
        for k, v in cls.DEFAULTS.items():
            cfg[k] = v
        return cfg

    @classmethod
    def option_names(cls) -> tuple:
        return tuple(cls.CONFIG.keys())

    def configure(self, options, args=()) -> ConfigDict:
        """``options`` (and positional ``args``, the discretization options in order) over
        the instance's :attr:`preset` options, parsed and validated; an option the
        approach does not take is a :class:`TypeError`."""
        pos = [n for n in _POSITIONAL if n in self.option_names()][:len(args)]
        preset = {k: v for k, v in self.preset.items() if k not in pos}
        cfg, given = self._parse({**preset, **options}, args)
        #: the options the user gave (an option not given may be chosen by the approach)
        self.given = given
        return cfg

    def _parse(self, options, args=()):
        """The configuration of ``options`` and positional ``args``, and the names given."""
        cfg = self.config()
        names = self.option_names()
        if args:
            pos = [n for n in _POSITIONAL if n in names]
            if len(args) > len(pos):
                raise TypeError(f"approach {self.name!r} takes at most {len(pos)} positional "
                                f"options {pos}, got {len(args)}")
            dup = sorted(set(pos[:len(args)]) & set(options))
            if dup:
                raise TypeError(f"option(s) {dup} given twice")
            options = dict(zip(pos, args), **options)
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(f"approach {self.name!r} does not take option(s) {unknown}; "
                            f"it takes {list(names)}")
        for k, v in options.items():
            try:
                cfg[k] = v
            except ValueError as err:
                cause = err.__context__
                if isinstance(cause, (ProblemError, TypeError)):
                    raise cause from None
                raise ProblemError(f"option {k}={v!r}: {cause or err}") from None
        return cfg, set(options)

    # -- hooks -----------------------------------------------------------------
    def validate(self, problem, cfg):
        """Checks before anything is built: the problem, and the size of the
        discretization (skipped for a given ``model``)."""
        given = "model" in cfg and cfg["model"] is not None
        validate_estimator(self.name, problem, **{
            k: cfg[k] for k in cfg.keys()
            if k not in ("u0", "model") and not (given and k in _POSITIONAL)})

    def build(self, problem, cfg, u_start):
        """The optimizer's model of ``problem``: one part per experiment
        (:meth:`build_experiment`; a problem without experiments is one experiment)
        joined by :meth:`combine`.  The simultaneous approach overrides it: its
        transcription renders the experiments as blocks of one Pyomo model."""
        names = problem.experiment_names or [None]
        parts = [self.build_experiment(sp, name, cfg, u_start)
                 for name, sp in zip(names, problem.subproblems)]
        return self.combine(problem, parts, cfg, u_start)

    def build_experiment(self, problem, name, cfg, u_start):
        """The model of one experiment: ``problem`` is its single-experiment problem,
        ``name`` its name (None for a problem without experiments)."""
        raise NotImplementedError

    def combine(self, problem, parts, cfg, u_start):
        """The optimizer's model of the whole problem from its experiments' parts."""
        raise NotImplementedError

    def solve(self, built, cfg) -> Outcome:
        """The optimizer's run on the built model: an :class:`Outcome` (what the
        approach's :meth:`collect` needs besides the point goes in its ``details``; a
        model made by the solve, in its ``model``).  It changes neither ``built``
        nor ``cfg``."""
        raise NotImplementedError

    def parts(self, built) -> list:
        """The experiments' parts of a (solved) model, in experiment order."""
        raise NotImplementedError

    def collect(self, problem, solved, outcome, cfg):
        """The :class:`~pyomo_odeest.EstimationResult` of the outcome, without the
        experiments' frames (:meth:`collect_experiment` adds them).  ``solved``: the
        model as solved (``outcome.model``, or the built one)."""
        raise NotImplementedError

    def collect_experiment(self, problem, part, u, solved, outcome) -> dict:
        """Frames of one experiment at the estimates ``u``: ``states``, ``fitted``,
        ``residuals`` and, where the approach has them, ``adjoint``,
        ``multipliers`` (a dict of frames) and ``extra`` (a dict); ``grid``; and
        ``failed``, the reason, when the model cannot be simulated there."""
        raise NotImplementedError

    def advice(self, cfg) -> str:
        """Advice added to the warning of a result that did not converge."""
        return ""

    # -- the pipeline ----------------------------------------------------------
    def estimate(self, problem, *args, **options):
        """Run the pipeline on ``problem``; return an :class:`~pyomo_odeest.EstimationResult`.

        The solves run inside one :func:`~pyomo_odeest.nlp._progress.solve_scope`:
        ``progress`` and the deadline ``max_wall_time`` seconds from here hold for
        every optimizer called in them, refinement rounds included."""
        if not isinstance(problem, EstimationProblem):
            raise NotAProblemError(f"problem must be an EstimationProblem, got "
                                   f"{type(problem).__name__}")
        cfg = self.configure(options, args)
        self.validate(problem, cfg)
        with solve_scope(cfg.progress, cfg.max_wall_time):
            res = self._run(problem, cfg)
            if "certify" in cfg and cfg["certify"]:
                from ._certificate import refine_until_certified
                res = refine_until_certified(self, problem, cfg, res,
                                             lambda c: self._run(problem, c))
        return post_solve_checks(problem, res)

    def refit(self, problem, u_start, fixed=None, **options):
        """Estimate ``problem`` again from ``u_start`` with the parameters ``fixed``
        (a mapping name -> value) held at those values
        (:meth:`~pyomo_odeest.EstimationProblem.variant`), on ``options`` over the
        instance's presets: the pipeline of :meth:`estimate` without the refinement
        stage (the discretization is the one the options give: the points of a
        profile and the samples of a bootstrap are solved on one grid), post-solve
        checks included.  ``u_start``: one value per parameter (or a Series by name);
        a start beyond a bound of a free parameter (round-off of a solution) is moved
        onto it.  Returns an :class:`~pyomo_odeest.EstimationResult`."""
        from ._certificate import _inside_bounds
        if not isinstance(problem, EstimationProblem):
            raise NotAProblemError(f"problem must be an EstimationProblem, got "
                                   f"{type(problem).__name__}")
        cfg = self.configure(options)
        self.validate(problem, cfg)          # before fixing: a parameter may be all there is
        fixed = {k: float(v) for k, v in (fixed or {}).items()}
        P = problem.variant(fix=fixed) if fixed else problem
        names = problem.parameter_names
        u = (u_start.reindex(names) if isinstance(u_start, pd.Series)
             else pd.Series(np.asarray(u_start, dtype=float), index=names))
        u = _inside_bounds(problem, u.astype(float))
        u.update(pd.Series(fixed, dtype=float))
        cfg = _with(self, cfg, u0=u.to_numpy(dtype=float),   # no refinement stage here
                    **({"max_refinements": 0} if "max_refinements" in cfg else {}))
        model = _option(cfg, "model")
        if is_pyomo_model(model):            # a user's model: its own constraints kept,
            own = getattr(getattr(model, "est", None), "problem", None)   # the original
            if own is not None and not _same_data(problem, own):          # untouched
                raise ProblemError(
                    "this result was solved on your own model (model=...), whose objective "
                    "holds the data it was built with; a refit on other data (a bootstrap "
                    "sample, a variant) cannot reuse it: pass options model=<a model built "
                    "on those data>, or refit a fit made without model=")
            cfg = _with(self, cfg, model=model.clone())
        with solve_scope(cfg.progress, cfg.max_wall_time):
            res = self._run(P, cfg)
        return post_solve_checks(P, res)

    def _run(self, problem, cfg):
        """One pass of the pipeline (build, solve, collect) on ``cfg``'s discretization."""
        u_start = start_values(problem, cfg.u0)
        t0 = time.perf_counter()
        built = self.build(problem, cfg, u_start)
        t1 = time.perf_counter()
        outcome = self._solve(problem, built, cfg, t1 - t0)
        if outcome.at_start:
            why = self._stiff_start(problem, cfg, u_start)
            if why:                            # the same pass on the stiff scheme
                res = self._run(problem, _with(self, cfg, scheme=STIFF_SCHEME))
                res.warnings.insert(0, why)
                return res
        build_s, solve_s = t1 - t0, time.perf_counter() - t1
        solved = built if outcome.model is None else outcome.model
        res = self.collect(problem, solved, outcome, cfg)
        res.approach = self.name
        if res.status.success and not outcome.status.success:
            res.status = outcome.status
        if not res.message:
            res.message = outcome.message
        if outcome.details.get("grid_watch"):        # stopped by the watch: the stage refines
            res.extra["grid_watch"] = dict(outcome.details["grid_watch"])
        region = _option(cfg, "region")
        if region:                            # a round of the stage's trust region
            res.extra["region"] = dict(bounds={k: list(v) for k, v in region.items()},
                                       active=region_active(problem, region, res.estimates))
        _add_experiments(problem, res, self._frames(problem, solved, outcome, res))
        res.timings = dict(dict(build_s=build_s, setup_s=0.0, solve_s=solve_s),
                           **outcome.timings, **res.timings,
                           total_s=time.perf_counter() - t0)
        if np.isfinite(outcome.objective_start):
            res.extra.setdefault("objective_start", float(outcome.objective_start))
        advice = self.advice(cfg)
        if advice:
            res.extra["advice"] = advice
        res.__dict__["_refit"] = Refit(type(self), self._as_solved(cfg, res))
        return res

    def _as_solved(self, cfg, res) -> dict:
        """The options of ``cfg`` that solve ``res`` again: its scheme and grid (the
        scheme solved, which a stiff start may have switched, and the grid of this
        pass), without the start and the output settings.  A given Pyomo model is kept
        (a refit solves a copy of it, with the user's constraints and objective terms);
        another given model is built again from the problem."""
        opts = {k: cfg[k] for k in cfg.keys()
                if k not in ("u0", "model", "tee", "progress", "region")}
        if is_pyomo_model(_option(cfg, "model")):
            opts["model"] = cfg.model
        if res.scheme is not None and hasattr(res.scheme, "order"):
            opts.update({k: v for k, v in (("scheme", res.scheme), ("qmax", res.scheme.qmax))
                         if k in opts})
        if "grid" in opts and res.grid is not None:
            opts.update(grid=res.grid, max_step=None, steps_per_interval=None)
        return opts

    def _solve(self, problem, built, cfg, build_s):
        """The :meth:`solve` hook inside the pipeline's solve scope (opened by
        :meth:`estimate`; here when a pass runs on its own), with a line before and
        after it when progress is on."""
        scope = current_scope()
        if scope is None:
            with solve_scope(cfg.progress, cfg.max_wall_time):
                return self._solve(problem, built, cfg, build_s)
        free = sum(not p.fixed for p in problem.parameters)
        scope.note(f"{self.name}: solving for {free} parameter{'s' * (free != 1)} "
                   f"(built in {build_s:.1f} s)")
        t = time.perf_counter()
        outcome = self.solve(built, cfg)
        scope.note(f"{self.name}: {outcome.status} after {outcome.iterations} iterations "
                   f"in {time.perf_counter() - t:.1f} s")
        return outcome

    def _stiff_start(self, problem, cfg, u_start):
        """Why the scheme cannot start (:func:`~pyomo_odeest.discretization.schemes.stiff_switch`
        on every experiment's grid, states by a stiff integrator at the start), or None;
        only for a scheme the user did not choose, on a model the approach builds."""
        if ("scheme" not in cfg or "scheme" in self.given
                or ("model" in cfg and cfg["model"] is not None)):
            return None
        scheme = cfg.scheme if hasattr(cfg.scheme, "order") else get_scheme(cfg.scheme,
                                                                             cfg.qmax)
        for name, sp in zip(problem.experiment_names or [None], problem.subproblems):
            grid = resolve_grid(sp, experiment_grid(cfg.grid, name), cfg.max_step,
                                cfg.steps_per_interval)
            X = ode_states(sp, u_start)(grid.t)
            why = None if X is None else stiff_switch(sp, scheme, grid.t, X, u_start)
            if why:
                return why
        return None

    def _frames(self, problem, solved, outcome, res):
        """The experiments' frames at the estimates; a failed final simulation makes
        the status :attr:`Status.SIMULATION_FAILED`."""
        per = [self.collect_experiment(sp, part, res.x, solved, outcome)
               for sp, part in zip(problem.subproblems, self.parts(solved))]
        failed = [p["failed"] for p in per if p.get("failed")]
        if failed:
            demote(res, Status.SIMULATION_FAILED, f"final simulation failed: {failed[0]}",
                   force=True)
        return per


def _option(cfg, name):
    """``cfg[name]``, None where the configuration has no such option (``ConfigDict.get``
    returns the declaration, not the value)."""
    return cfg[name] if name in cfg else None


def _same_data(a, b) -> bool:
    """True when two problems have the same measurements and weights, experiment by
    experiment (what a model's objective holds)."""
    pa, pb = a.subproblems, b.subproblems
    return len(pa) == len(pb) and all(
        x.data.equals(y.data) and np.array_equal(np.asarray(x.weights, dtype=float),
                                                 np.asarray(y.weights, dtype=float),
                                                 equal_nan=True)
        for x, y in zip(pa, pb))


def is_pyomo_model(obj) -> bool:
    """True for a Pyomo model or block (a user's model of the simultaneous approach)."""
    from pyomo.core.base.block import BlockData
    return isinstance(obj, BlockData)


def ode_states(problem, u):
    """``t -> x(t)`` on a grid by a stiff integrator (LSODA) at ``u``, or None where it
    fails; the integrator is built on the first call only (most starts never need it)."""
    from ..discretization.continuous import ContinuousModel, IntegrationError

    def states(t):
        try:
            cm = ContinuousModel(problem, method="LSODA", rtol=1e-8, atol=1e-12)
            with np.errstate(all="ignore"):
                return cm.simulate(u, t).to_numpy(dtype=float)
        except (ProblemError, TypeError, IntegrationError, ValueError, ArithmeticError,
                np.linalg.LinAlgError):
            return None
    return states


def scheme_of(ref):
    """The scheme object of a result's ``scheme``: the object itself, or the scheme of a
    reference by name and Q_max (a result read back from a file)."""
    return ref if hasattr(ref, "order") else get_scheme(ref.name, ref.qmax)


def _with(approach, cfg, **values):
    """A copy of the configuration ``cfg`` of ``approach`` with ``values`` set."""
    out = approach.config()
    for k in cfg.keys():
        out[k] = cfg[k]
    for k, v in values.items():
        out[k] = v
    return out


class Refit:
    """How a result was solved: its approach (an :class:`Approach` subclass) and the
    options of its last pass (:meth:`Approach._as_solved`: scheme, grid,
    tolerances, scaling, optimizer, ...).  Calling it estimates again through that
    approach on those options (:meth:`Approach.refit`); the only record of how a
    result is re-estimated (profiles, bootstrap)."""

    #: the discretization options that define a grid (giving one replaces the grid)
    _GRID = ("grid", "max_step", "steps_per_interval")

    def __init__(self, approach, options):
        self.approach, self.options = approach, dict(options)

    @property
    def name(self) -> str:
        return self.approach.name

    def __repr__(self):
        return f"Refit({self.approach.__name__}, {sorted(self.options)})"

    def __call__(self, problem, u_start, fixed=None):
        """The :class:`~pyomo_odeest.EstimationResult` of :meth:`Approach.refit` (without
        progress lines and the optimizer's log)."""
        return self.approach().refit(problem, u_start, fixed,
                                     **dict(self.options, progress=False, tee=False))

    def updated(self, **options) -> "Refit":
        """A copy with ``options`` over these (optimizer ``options`` merged with the
        recorded ones; a grid option given replaces the recorded grid)."""
        out = dict(self.options)
        options.pop("u0", None)
        if options.get("options") is not None:
            options["options"] = {**(out.get("options") or {}), **options["options"]}
        if any(options.get(k) is not None for k in self._GRID):
            out.update(dict.fromkeys([k for k in self._GRID if k in out]))
        out.update(options)
        return Refit(self.approach, out)

    def using(self, approach) -> "Refit":
        """The refit of another ``approach`` (a name, an Approach subclass or instance):
        the common options and the discretization (scheme, grid) carried over where it
        takes them, its presets, else its defaults."""
        from ._estimate import approach_class
        cls = approach_class(approach)
        if cls is self.approach and not isinstance(approach, Approach):
            return self
        keep = set(common_config().keys()) | {"scheme", "qmax", "grid"}
        names = set(cls.option_names())
        opts = {k: v for k, v in self.options.items() if k in keep and k in names}
        if isinstance(approach, Approach):
            opts.update(approach.preset)
        return Refit(cls, opts)

    @classmethod
    def of_fields(cls, result) -> "Refit":
        """The refit of a result that does not carry one (read from JSON, made outside
        the pipeline): its approach by name, scheme and grid, and the continuous
        approach's integrator settings; the other options take their defaults."""
        from ._estimate import approach_class
        approach = approach_class(result.approach)
        names = set(approach.option_names())
        opts = {}
        if result.scheme is not None:
            s = scheme_of(result.scheme)
            opts.update({k: v for k, v in (("scheme", s), ("qmax", s.qmax)) if k in names})
        if "grid" in names and result.grid is not None:
            opts["grid"] = result.grid
        integrator = result.extra.get("integrator") or {}
        for k in ("engine", "method", "rtol", "atol"):
            v = integrator.get(k)
            if k in names and v is not None and (k != "engine" or v in ("cvodes", "scipy")):
                opts[k] = v
        return cls(approach, opts)


def refit_of(result) -> Refit:
    """The :class:`Refit` of ``result``: the one the pipeline recorded (kept by pickling),
    else :meth:`Refit.of_fields`."""
    rf = result.__dict__.get("_refit")
    return rf if rf is not None else Refit.of_fields(result)


def _refit_result(result, u_start=None, fixed=None, problem=None, **options):
    """:meth:`~pyomo_odeest.EstimationResult.refit`."""
    P = result.problem if problem is None else problem
    if P is None:
        raise ValueError(f"cannot find the EstimationProblem of this {result.approach!r} "
                         f"result; pass problem=... explicitly")
    rf = refit_of(result)
    rf = rf.updated(**options) if options else rf
    return rf(P, result.estimates if u_start is None else u_start, fixed)


RESULT_ANALYSES["refit"] = _refit_result


def _add_experiments(problem, res, per):
    """Put the experiments' frames ``per`` (:meth:`Approach.collect_experiment`) on
    ``res``: one experiment's as they are, several stacked with an ``experiment``
    index level (multipliers and grids too; ``extra`` per experiment under
    ``extra['experiments']``, its frames stacked)."""
    names = problem.experiment_names
    for k in ("states", "fitted", "residuals", "adjoint"):
        frames = [p.get(k) for p in per]
        deferred = [f is BY_BACKEND for f in frames]
        if k == "adjoint" and deferred and all(deferred):        # the backend's
            setattr(res, k, BY_BACKEND)
        else:
            setattr(res, k, stack_experiments(names, [None if d else f
                                                      for f, d in zip(frames, deferred)]))
    mults = [p.get("multipliers") or {} for p in per]
    res.multipliers.update({k: stack_experiments(names, [m.get(k) for m in mults])
                            for k in mults[0]})
    grids = [p.get("grid") for p in per]
    if not names or all(g is None for g in grids):   # no grid (continuous, adaptive)
        res.grid = grids[0]
    else:
        res.grid = dict(zip(names, grids))
    extras = [p.get("extra") or {} for p in per]
    if not names:
        res.extra.update(extras[0])
    elif any(extras):
        res.extra["experiments"] = dict(zip(names, extras))
        for k in extras[0]:
            frames = [x.get(k) for x in extras]
            if all(isinstance(f, pd.DataFrame) for f in frames):
                res.extra[k] = stack_experiments(names, frames)


class ConstraintRows:
    r"""The problem's path constraints :math:`c(x(t), u, t) \le 0` at points of each
    experiment, then its parameter constraints :math:`r(u) \le 0`, as rows over u.

    ``points(pc, model)`` gives the indices into the experiment's states and the
    times of path constraint ``pc`` on the experiment's ``model``.  Values from
    the states at those points; the Jacobian :math:`c_x S + c_u` from their
    sensitivities :math:`S = \partial x/\partial u` in the directions ``cols``
    [GM-grad, eq. (51)] (one forward sweep for all rows, where the adjoint would
    need one sweep per row).
    """

    def __init__(self, problem, models, points):
        self.parts = []
        for e, (sp, m) in enumerate(zip(problem.subproblems, models)):
            for pc, fn, jx, ju in sp.path_constraint_functions():
                self.parts.append((e, pc.name, *points(pc, m), fn, jx, ju))
        pcs = problem.parameter_constraints
        self._r, self._dr = problem.parameter_constraint_functions()
        self.names = [pc.name for pc, _ in pcs]
        self.m = sum(len(p[2]) for p in self.parts) + len(pcs)

    @property
    def rows(self):
        """``(experiment index, name, times)`` of the path-constraint rows, in order."""
        return [(e, name, t) for e, name, _, t, *_ in self.parts]

    def values(self, u, states):
        """The rows' values; ``states(e)``: experiment e's states, indexed by the points."""
        out = [fn(states(e)[pts], u, t)[:, 0] for e, _, pts, t, fn, _, _ in self.parts]
        out += [np.atleast_1d(float(r(u))) for r in self._r]
        return np.concatenate(out) if out else np.zeros(0)

    def jacobian(self, u, sensitivities, cols):
        """Dense (m, len(cols)) Jacobian; ``sensitivities(e)``: experiment e's states and
        their sensitivities in the directions ``cols``, ``(X, S)``."""
        rows, sens = [], {}
        for e, _, pts, t, fn, jx, ju in self.parts:
            if e not in sens:
                sens[e] = sensitivities(e)
            X, S = sens[e][0][pts], sens[e][1][pts]
            cx = jx.dense(jx.values(X, u, t))[:, 0, :]
            cu = ju.dense(ju.values(X, u, t))[:, 0, :]
            rows.append(np.einsum("jn,jnk->jk", cx, S) + cu[:, cols])
        rows += [np.asarray(dr(u), dtype=float).reshape(1, -1)[:, cols] for dr in self._dr]
        return np.vstack(rows) if rows else np.zeros((0, len(cols)))


def fit_frames(problem, t, X, Xm, u) -> dict:
    """``states`` (the rows of ``X`` at times ``t``), ``fitted`` (the observations of
    the states ``Xm`` at the measurement times) and ``residuals`` of one experiment."""
    fitted = observations(problem, Xm, u)
    return dict(states=pd.DataFrame(X, index=pd.Index(t, name="time"), columns=problem.states),
                fitted=fitted, residuals=(fitted - problem.data).where(problem.mask))


def add_constraint_multipliers(res, problem, rows, lam, names):
    """Put the optimizer's multipliers ``lam`` of the problem's constraints on ``res``:
    ``rows`` lists the path-constraint rows in order, ``(experiment index, name,
    times)``, ``names`` the parameter constraints after them.  Each path constraint
    becomes ``res.multipliers['path_<name>']`` (indexed by time, and by experiment
    first for several experiments), the parameter constraints
    ``res.extra['parameter_constraint_multipliers']``."""
    lam = np.asarray(lam, dtype=float)
    per, a = {}, 0
    for e, name, t in rows:
        fr = pd.DataFrame({name: lam[a:a + len(t)]}, index=pd.Index(t, name="time"))
        per.setdefault(f"path_{name}", []).append((e, fr))
        a += len(t)
    exp = problem.experiment_names
    for key, lst in per.items():
        res.multipliers[key] = stack_experiments([exp[e] for e, _ in lst] if exp else [],
                                                 [f for _, f in lst])
    if len(names):
        res.extra["parameter_constraint_multipliers"] = {
            n: float(v) for n, v in zip(names, lam[a:])}


def option_table(approach_cls) -> str:
    """The Markdown table of an approach's options (name, default, domain, description),
    generated from its configuration (the docs' option tables)."""
    cfg = approach_cls.config()
    rows = ["| option | default | values | meaning |", "|---|---|---|---|"]
    for k in cfg.keys():
        cv = cfg.get(k)
        dom = (cv.domain_name() if cv._domain is not None else "any").replace("|", "\\|")
        rows.append(f"| `{k}` | `{cfg[k]!r}` | {dom} | {cv._description or ''} |")
    return "\n".join(rows)
