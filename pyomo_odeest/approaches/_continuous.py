r"""Estimation on the continuous objective: :func:`estimate_continuous` (Ipopt through
cyipopt, or SciPy) on the scaled free parameters."""
from __future__ import annotations

import inspect
import warnings
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pandas as pd

from ..nlp._cyipopt_adapter import start_value_magnitude
from ..nlp._protocol import EvaluationError, finite
from ..nlp._stationarity import (decrement_limit, gauss_newton_decrement, judge_stop,
                                  stationarity_check)
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import BY_BACKEND, EstimationResult
from ..problem._status import Status, demote, status_from_scipy
from ._backend import ContinuousBackend
from ._base import (Approach, Choice, ConfigValue, ConstraintRows, Outcome, SolveClock,
                     common_config,
                     ipopt_options, run_ipopt, run_scipy, add_constraint_multipliers)
from ..discretization._experiments import experiment_models, join_experiments
from ..discretization.continuous import (ENGINES, GRADIENT_METHODS, HESSIAN_METHODS, ODE_METHODS,
                                         IntegrationError, continuous_model, integrator_name)

__all__ = ["ContinuousApproach", "estimate_continuous", "ContinuousConstraints"]

OPTIMIZERS = ("ipopt", "L-BFGS-B", "trust-constr", "least_squares")
#: the fewest iterations Ipopt is continued for from an acceptable stop that is not
#: stationary (:meth:`ContinuousApproach._continue_ipopt`)
CONTINUE_MIN_ITERATIONS = 100


class _ScaledObjective:
    r"""J as a function of the scaled free parameters :math:`w = u_F / s`.

    Caches the last objective and gradient; counts evaluations.
    """

    def __init__(self, model, u_full, free, scale, gradient, hessian):
        self.model = model
        self.u_full = np.array(u_full, dtype=float)
        self.free = free
        self.s = scale
        self.gmethod = gradient
        self.hmethod = hessian
        self.counts = dict(objective=0, gradient=0, hessian=0)
        self._gkey = None
        self._g = None

    def u(self, w):
        u = self.u_full.copy()
        u[self.free] = self.s * np.asarray(w, dtype=float)
        return u

    def objective(self, w):
        """Σ_j φ_j (without the loss constant, which would blur relative stopping tests)."""
        self.counts["objective"] += 1
        return self.model._misfit(self.model._u(self.u(w)))

    def gradient(self, w):
        key = np.asarray(w, dtype=float).tobytes()
        if key != self._gkey:
            self.counts["gradient"] += 1
            g = self.model.gradient(self.u(w), self.gmethod, index=np.flatnonzero(self.free))
            self._gkey, self._g = key, g * self.s
        return self._g.copy()

    def hessian(self, w):
        self.counts["hessian"] += 1
        H = self.model.hessian(self.u(w), self.hmethod, index=np.flatnonzero(self.free))
        return H * np.outer(self.s, self.s)


def _finite_or_none(v):
    """Domain of ``known_minimum``: a finite number or None."""
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = np.nan
    if not np.isfinite(x) or isinstance(v, bool):
        raise ProblemError(f"known_minimum must be a finite number or None, got {v!r}")
    return x


_finite_or_none.domain_name = lambda: "float or None"


class ContinuousConstraints(ConstraintRows):
    r"""The problem's constraints on the continuous solution, as constraints over u
    (:class:`~pyomo_odeest.approaches._base.ConstraintRows`): :math:`c(x_e(\tau_{e,j}),
    u, \tau_{e,j}) \le 0` at the measurement times of each experiment e (path
    constraints declared ``at='measurements'``), with the forward sensitivities
    :math:`S = \partial x/\partial u` [MHV, eq. (8)] of the free parameters (one
    augmented solve per experiment).  A path constraint declared ``at='grid'``
    has no meaning here (the integration is adaptive, there is no grid): it
    raises a :class:`ProblemError`.
    """

    def __init__(self, problem, cm, free):
        self.free, self.models = np.flatnonzero(free), experiment_models(cm)
        super().__init__(problem, self.models, self._points)

    @staticmethod
    def _points(pc, m):
        if pc.at != "measurements":
            raise ProblemError(
                f"the continuous approach imposes path constraints at the measurement "
                f"times only (it integrates adaptively, without a grid); path "
                f"constraint '{pc.name}' has at={pc.at!r}: declare it with "
                f"at='measurements', or use the simultaneous, reduced_space or "
                f"multiple_shooting approach")
        tau, pts = np.unique(m.tau, return_index=True)
        return pts, tau

    def values(self, u):
        return super().values(u, lambda e: self.models[e]._forward(self.models[e]._u(u))[1])

    def jacobian(self, u):
        """Dense (m, free) Jacobian over the free parameters."""
        V = np.eye(len(u))[:, self.free]
        return super().jacobian(u, lambda e: self.models[e].sensitivities(u, V)[1:], self.free)


def _guarded(fn, *args, **kw):
    """``fn(*args, **kw)``; a failed integration or a non-finite value becomes an
    :class:`~pyomo_odeest.nlp._protocol.EvaluationError` (the optimizer backs off)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            v = fn(*args, **kw)
    except (IntegrationError, ArithmeticError, ValueError, np.linalg.LinAlgError) as err:
        raise EvaluationError(str(err)) from None
    return finite(v, "value")


#: the tightest rtol the stationarity check and the advice of a rough stop go to
#: (atol: 1e-2 of it)
TOLERANCE_FLOOR = 1e-13


def _tightened(rtol, atol, factor=100.0, floor=TOLERANCE_FLOOR):
    """``(rtol/factor, atol/factor)``, not below ``floor`` (atol: ``floor``/100)."""
    return max(rtol / factor, floor), max(atol / factor, floor * 1e-2)


@contextmanager
def _tighter(cm, factor=100.0, floor=TOLERANCE_FLOOR):
    """The models of ``cm`` integrate with :func:`_tightened` tolerances inside the
    block."""
    models = experiment_models(cm)
    saved = [(m.rtol, m.atol) for m in models]
    try:
        for m in models:
            m.rtol, m.atol = _tightened(m.rtol, m.atol, factor, floor)
            m._fwd_key = None
        yield
    finally:
        for m, (r, a) in zip(models, saved):
            m.rtol, m.atol = r, a
            m._fwd_key = None


class _IpoptProblem:
    """The problem over the scaled free parameters as an evaluator for
    :func:`~pyomo_odeest.nlp._cyipopt_adapter.solve_with_ipopt`: bounds, and the
    problem's constraints (:class:`ContinuousConstraints`, ``g(w) <= 0``) if any;
    with constraints the exact Hessian is that of J alone (same KKT point)."""

    def __init__(self, obj, w0, wl, wu, cons=None):
        self.obj = obj
        self.n = len(w0)
        self.x0, self.x_lb, self.x_ub = w0, wl, wu
        self._rows, self._cols = np.tril_indices(self.n)
        self.cons = cons
        self.m = 0 if cons is None else cons.m
        self.g_lb, self.g_ub = np.full(self.m, -np.inf), np.zeros(self.m)

    def objective(self, w):
        return _guarded(self.obj.objective, w)

    def gradient(self, w):
        return _guarded(self.obj.gradient, w)

    def constraints(self, w):
        if self.cons is None:
            return np.zeros(0)
        return _guarded(self.cons.values, self.obj.u(w))

    def jacobian(self, w):
        if self.cons is None:
            return np.zeros(0)
        return (_guarded(self.cons.jacobian, self.obj.u(w)) * self.obj.s[None, :]).ravel()

    def jacobian_structure(self):
        return np.repeat(np.arange(self.m), self.n), np.tile(np.arange(self.n), self.m)

    def hessian_structure(self):
        return self._rows, self._cols

    def hessian(self, w, lagrange, obj_factor):
        H = _guarded(self.obj.hessian, w)
        return obj_factor * H[self._rows, self._cols]


class ContinuousApproach(Approach):
    """The continuous ODE, integrated adaptively, with continuous-time derivatives
    [MHV]; see :func:`estimate_continuous` for the options."""

    name = "continuous"
    CONFIG = common_config()
    CONFIG.declare("optimizer", ConfigValue(default="ipopt", domain=Choice(
        "optimizer", *OPTIMIZERS), description="the optimizer"))
    CONFIG.declare("gradient", ConfigValue(default="adjoint", domain=Choice(
        "gradient", *GRADIENT_METHODS), description="gradient of J(u)"))
    CONFIG.declare("hessian", ConfigValue(default=None, domain=Choice(
        "hessian", *HESSIAN_METHODS, None), description="Hessian of J(u) (None: quasi-Newton)"))
    CONFIG.declare("engine", ConfigValue(default=None, domain=Choice(
        "engine", *ENGINES, None), description="the integration engine (None: "
        "'cvodes' when CasADi imports and no SciPy method is named, else 'scipy')"))
    CONFIG.declare("method", ConfigValue(default=None, domain=Choice(
        "method", *ODE_METHODS, "Adams", None),
        description="the integrator's method: SciPy's (None: LSODA on the SciPy engine), or "
        "on CVODES 'BDF' (None) or 'Adams' (non-stiff problems)"))
    CONFIG.declare("rtol", ConfigValue(default=None, domain=float, description=(
        "relative integration tolerance (None: 1e-8 on CVODES, 1e-10 on SciPy)")))
    CONFIG.declare("atol", ConfigValue(default=None, domain=float, description=(
        "absolute integration tolerance (None: 1e-12)")))
    CONFIG.declare("n_grid", ConfigValue(default=201, domain=int,
                                         description="uniform times of the reported states"))
    CONFIG.declare("model", ConfigValue(default=None, description="a ContinuousModel to reuse"))
    CONFIG.declare("known_minimum", ConfigValue(default=None, domain=_finite_or_none,
        description="optimizer 'least_squares': J at a minimum found already (e.g. by "
        "another start); the solve stops where J is within the stationarity test's "
        "decrement limit of it"))

    def validate(self, problem, cfg):
        super().validate(problem, cfg)
        if cfg.optimizer == "least_squares" and cfg.hessian is not None:
            raise ValueError("optimizer 'least_squares' uses the Gauss-Newton matrix of the "
                             "residuals; leave hessian=None")
        if cfg.optimizer == "least_squares" and not _penalty_as_squares(problem):
            raise ProblemError(_NOT_SQUARES)          # before the models are built
        if cfg.known_minimum is not None and cfg.optimizer != "least_squares":
            raise ValueError(f"known_minimum is an option of optimizer 'least_squares', "
                             f"not of {cfg.optimizer!r}")

    def advice(self, cfg):
        return "hessian=None (L-BFGS)" if cfg.hessian else ""

    def _as_solved(self, cfg, res):
        # a known minimum belongs to the multistart the fit was a start of: a refit
        # (a profile point, a bootstrap sample) has another minimum
        opts = super()._as_solved(cfg, res)
        opts.pop("known_minimum", None)
        return opts

    def build(self, problem, cfg, u_start):
        return super().build(problem, cfg, u_start) if cfg.model is None else \
            self.combine(problem, None, cfg, u_start)

    def build_experiment(self, problem, name, cfg, u_start):
        return continuous_model(problem, cfg.engine, method=cfg.method, rtol=cfg.rtol,
                                atol=cfg.atol)

    def combine(self, problem, parts, cfg, u_start):
        cm = cfg.model or join_experiments(problem, parts)
        free = problem.free_mask
        lb, ub = problem.bounds(free)
        uf = np.clip(u_start[free], lb, ub)
        s = start_value_magnitude(uf) if cfg.scale else np.ones(free.sum())   # w = u/s is O(1)
        gm = cfg.gradient
        if cfg.optimizer == "least_squares" and "gradient" not in getattr(self, "given", ()):
            # the trust region's Jacobian is the forward sensitivities: its start and
            # stationarity checks use them too, so no backward (adjoint) solve, which can
            # exhaust CVODES's steps where the forward ones do not, refuses a start
            gm = "sensitivity"
        obj = _ScaledObjective(cm, u_start, free, s, gm, cfg.hessian)
        cons = ContinuousConstraints(problem, cm, free) if problem.has_constraints else None
        if cons is not None and cfg.optimizer != "ipopt":
            raise ProblemError(f"optimizer {cfg.optimizer!r} does not take the problem's path "
                               f"or parameter constraints; use optimizer='ipopt'")
        return SimpleNamespace(problem=problem, cm=cm, obj=obj, cons=cons, s=s, w0=uf / s,
                               wl=lb / s, wu=ub / s, u_start=u_start, n_grid=cfg.n_grid,
                               gradient=gm)

    def solve(self, b, cfg):
        cm, obj = b.cm, b.obj
        try:
            j0 = _guarded(cm.objective, obj.u(b.w0))
            g0 = _guarded(obj.gradient, b.w0)
        except EvaluationError as err:
            return Outcome.failed_at_start(b.w0, err)
        if cfg.optimizer == "ipopt":
            def opts(w, change):
                return ipopt_options(cfg, start=(w, b.wl, b.wu), acceptable_tol=1e-2,
                                     acceptable_iter=5, acceptable_obj_change_tol=change,
                                     **({"hessian_approximation": "limited-memory"}
                                        if cfg.hessian is None else {}))
            method = "ipopt/" + ("limited-memory" if cfg.hessian is None
                                 else "exact-hessian:" + cfg.hessian)
            # exceptions other than failed evaluations (and Ctrl-C) stop Ipopt and are re-raised
            out = self._ipopt(b, cfg, opts(b.w0, max(1e-12, 10 * cm.rtol)), b.w0, method)
            # the acceptable stop on J's relative change (10·rtol over 5 iterations) short of
            # the Gauss–Newton limit: continue from there with that change at 1e-12, unless
            # the user set it (the least squares' continuation below does the same)
            if (out.status is Status.ACCEPTABLE and "acceptable_obj_change_tol" not in
                    (cfg.options or {})):
                out = _stationarity(b, out, b.gradient, g0)
                if (out.status is Status.NOT_STATIONARY
                        and out.details["stationarity"].get("rule") == "decrement"):
                    out = self._continue_ipopt(b, cfg, out, opts(out.x, 1e-12), method, g0)
        elif cfg.optimizer == "least_squares":
            clock = SolveClock(cfg.max_wall_time, cfg.progress, label="least_squares")
            level = None if cfg.known_minimum is None else \
                _known_level(b, float(cfg.known_minimum), j0)
            r = _least_squares(cm, obj, b.w0, b.wl, b.wu, cfg.options, cfg.tee, clock,
                               level=level)
            clock.finish()
            status = _least_squares_status(r, clock)
            method = "scipy/least_squares(trf), Jacobian from forward sensitivities"
            out = Outcome(r.x, status, str(r.message), int(r.njev), details=dict(method=method))
            if out.status.success:
                out = _stationarity(b, out, b.gradient, g0)
            # a stop on the relative decrease of J (ftol = 10·rtol) or of the step (xtol)
            # short of the Gauss-Newton limit: continue from there without that test
            # (first without ftol, then with xtol 1e-15 too), unless the user set them
            user = cfg.options or {}
            njev, message = int(r.njev), str(r.message)
            for drop in ({"ftol": None}, {"ftol": None, "xtol": 1e-15}):
                if not (out.status is Status.NOT_STATIONARY and r.status in (2, 3, 4)
                        and out.details["stationarity"].get("rule") == "decrement"
                        and not set(drop) & set(user)):
                    break
                # the time left to the pipeline's deadline (its solve scope); without ftol
                # the continuation stops where STALL_WINDOW iterations gain less than a
                # small fraction of the decrease the stationarity test counts
                clock = SolveClock(cfg.max_wall_time, cfg.progress, label="least_squares")
                stall = STALL_FRACTION * out.details["stationarity"]["decrement_limit"]
                r = _least_squares(cm, obj, r.x, b.wl, b.wu, {**user, **drop}, cfg.tee, clock,
                                   stall=stall, level=level)
                clock.finish()
                status = _least_squares_status(r, clock)
                njev, message = njev + int(r.njev), f"{message}; continued: {r.message}"
                out = Outcome(r.x, status, message, njev, details=dict(method=method))
                if out.status.success or r.status == STALLED:
                    out = _stationarity(b, out, b.gradient, g0)
            _say_if_collapsed(out, r, cm)
            out.objective_start = float(j0)
            return out
        else:
            out = self._minimize(b, cfg)
        if out.status.success and "stationarity" not in out.details:
            out = _stationarity(b, out, b.gradient, g0)
        out.objective_start = float(j0)
        return out

    def _continue_ipopt(self, b, cfg, first, options, method, g0):
        """Ipopt continued from an acceptable stop ``first`` that is not stationary, for
        at most ``max(CONTINUE_MIN_ITERATIONS, 2 × its iterations)`` more iterations (and
        the user's ``max_iter`` in all).  Its result where it converges or realizes half
        the Gauss–Newton decrease ``first`` was refused for; otherwise ``first`` (not
        stationary, the point no worse), its message saying how the continuation ended;
        either way with the stationarity check at the point returned."""
        cap = max(CONTINUE_MIN_ITERATIONS, 2 * first.iterations)
        user = (cfg.options or {}).get("max_iter")
        if user is not None:
            cap = min(cap, int(user) - first.iterations)
        if cap <= 0:
            return first
        more = self._ipopt(b, cfg, {**options, "max_iter": cap}, first.x, method)
        more.iterations += first.iterations
        more.message = f"{first.message}; continued: {more.message}"
        if more.status.success:
            return more
        dec = first.details["stationarity"].get("gauss_newton_decrement", np.inf)
        try:
            j0, j1 = (float(b.cm.objective(b.obj.u(w))) for w in (first.x, more.x))
        except EvaluationError:
            j0, j1 = 0.0, np.inf
        if np.isfinite(j1) and j0 - j1 >= 0.5 * dec:
            # not a success: the check keeps the status and records the numbers
            return _stationarity(b, more, b.gradient, g0)
        first.message = (f"{first.message}; continued for {more.iterations - first.iterations} "
                         f"iterations ({more.message.rsplit('continued: ', 1)[-1]}) without "
                         f"the predicted decrease of {dec:.3g} (J lower by {j0 - j1:.3g})")
        first.iterations = more.iterations
        return first

    @staticmethod
    def _ipopt(b, cfg, options, w0, method):
        """One Ipopt solve of the scaled objective from ``w0``."""
        nlp = _IpoptProblem(b.obj, w0, b.wl, b.wu, b.cons)
        out = Outcome.from_ipopt(run_ipopt(nlp, cfg, options))
        out.mult_g = np.asarray(out.mult_g, dtype=float) if b.cons is not None else None
        out.details["method"] = method
        return out

    def _minimize(self, b, cfg):
        obj, optimizer = b.obj, cfg.optimizer
        defaults = dict(maxiter=1000)
        if optimizer == "L-BFGS-B":
            defaults.update(ftol=max(1e-14, 10 * b.cm.rtol), gtol=1e-8)
        else:
            defaults.update(gtol=1e-10, xtol=1e-12)
        hess = None
        if optimizer == "trust-constr":
            from scipy.optimize import BFGS
            hess = obj.hessian if cfg.hessian is not None else BFGS()
        _, out = run_scipy(lambda w: (_guarded(obj.objective, w), _guarded(obj.gradient, w)),
                           b.w0, b.wl, b.wu, cfg, defaults, hess)
        out.details["method"] = f"scipy/{optimizer}" + (
            "" if cfg.hessian is None or optimizer == "L-BFGS-B" else f"/hessian:{cfg.hessian}")
        return out

    def parts(self, b):
        return experiment_models(b.cm)

    def collect(self, problem, b, outcome, cfg):
        cm, obj = b.cm, b.obj
        u_hat = obj.u(outcome.x)
        J, g = np.nan, np.full(len(u_hat), np.nan)
        if outcome.status is not Status.SIMULATION_FAILED:
            J = cm.objective(u_hat)
            try:                          # the optimizer may stop where the derivatives fail
                g = _guarded(cm.gradient, u_hat, "adjoint" if b.gradient == "fd"
                             else b.gradient)
            except EvaluationError:
                pass
        res = EstimationResult(
            approach=self.name, method=f"{outcome.details.get('method', '-')}, gradient={b.gradient}",
            scheme=None, estimates=pd.Series(u_hat, index=problem.parameter_names,
                                             name="estimate"),
            objective=J, status=outcome.status, iterations=outcome.iterations,
            evaluations=dict(obj.counts, **{f"ode_{k}": v for k, v in cm.counts.items()}))
        res.extra.update(gradient=pd.Series(g, index=problem.parameter_names),
                         start=pd.Series(b.u_start, index=problem.parameter_names),
                         objective_start=outcome.objective_start, scale=b.s,
                         stationarity=outcome.details.get("stationarity"),
                         integrator=dict(name=integrator_name(cm), engine=getattr(cm, "engine", "scipy"),
                                         method=cm.settings["method"], rtol=cm.rtol,
                                         atol=cm.atol))
        res.backend = ContinuousBackend(problem, cm)
        if outcome.mult_g is not None:
            add_constraint_multipliers(res, problem, b.cons.rows, outcome.mult_g, b.cons.names)
        return res

    def collect_experiment(self, problem, m, u, b, outcome):
        """States on a fine grid, fitted observations and residuals of one experiment;
        its adjoint is the backend's, swept on first use (:meth:`ContinuousBackend.adjoint_frame`:
        on small problems the sweep costs as much as the fit)."""
        if outcome.at_start:                            # failed at the start: said there
            return dict(failed="the model cannot be simulated at the start")
        try:
            times = np.union1d(np.linspace(m.t0, m.T, b.n_grid), m.tau)
            states, fitted = m.simulate(u, times), m.observations(u)
            residuals = (fitted - problem.data).where(problem.mask)
        except (IntegrationError, ArithmeticError, ValueError) as err:
            return dict(failed=str(err))
        return dict(states=states, fitted=fitted, residuals=residuals, adjoint=BY_BACKEND,
                    grid=None)


def _stationarity(b, out, gradient, g0):
    """An optimizer's success (``converged`` or ``acceptable``) is kept only at a
    stationary point, judged by one rule (:func:`~pyomo_odeest.nlp.judge_stop`):
    on a sum of squares, the decrease of J that the Gauss–Newton model predicts
    within the bounds (:meth:`_SumOfSquares.decrement`) must be at most
    :func:`~pyomo_odeest.nlp.decrement_limit` (``DECREMENT_TOL · max(1, J − c)``,
    absolute in the units of J: ``gauss_newton_decrement``, ``decrement_limit``),
    whatever the projected gradient; otherwise (constraints, a penalty that is
    not a sum of squares, a decrement that cannot be computed) the projected
    gradient must be below its limit.  Both are evaluated at the tolerances
    divided by 100, or by 10, or 1 (the first the integrator meets:
    ``stationarity['tolerance_factor']``); a gradient that cannot be evaluated
    gives an infinite projected gradient.  Why: docs/continuous.md, "Stopping"."""
    gm = "adjoint" if gradient == "fd" else gradient
    u_hat, free = b.obj.u(out.x), b.problem.free_mask
    g_check, factor, why = None, None, ""
    constrained = out.mult_g is not None and len(out.mult_g)
    for factor in (100.0, 10.0, 1.0):
        try:
            with _tighter(b.cm, factor):
                g_check = _guarded(b.cm.gradient, u_hat, gm, index=np.flatnonzero(free)) * b.s
            if constrained:                                  # the Lagrangian's gradient
                g_check = g_check + (_guarded(b.cons.jacobian, u_hat)
                                     * b.s[None, :]).T @ out.mult_g
            break
        except EvaluationError as err:
            g_check, why = None, str(err)
    if g_check is None:
        g_check = np.full(len(out.x), np.inf)
    out.details["stationarity"] = st = stationarity_check(g_check, out.x, b.wl, b.wu, g0)
    st["tolerance_factor"] = factor
    pg, limit = st["projected_gradient"], st["limit"]
    squares = None if not np.isfinite(pg) or constrained else \
        _SumOfSquares(b.cm, b.obj, b.wl, b.wu)
    dec, jc = None, 0.0
    if squares:
        try:
            with _tighter(b.cm, factor):
                dec, jc = squares.decrement(out.x, b.wl, b.wu)
        except EvaluationError:                  # unknown: the gradient test decides
            dec, jc = np.inf, 0.0
        st.update(gauss_newton_decrement=dec, decrement_limit=decrement_limit(jc))
    ok, rule = judge_stop(dec, jc, pg, limit)
    st["rule"] = rule
    if rule == "decrement":
        if not ok:
            demote(out, Status.NOT_STATIONARY,
                   f"not stationary: Gauss-Newton predicted decrease {dec:.2g} > "
                   f"{st['decrement_limit']:.2g} (projected gradient {pg:.3g}, scaled "
                   f"parameters, integration tolerances / {factor:g})")
        elif pg > limit:
            out.message = (f"{out.message}; stationary in the Gauss-Newton metric (predicted "
                           f"decrease {dec:.2g} <= {st['decrement_limit']:.2g}; projected "
                           f"gradient {pg:.3g}, ill-conditioned, at integration tolerances "
                           f"/ {factor:g})")
        return out
    note = ("; Gauss-Newton predicted decrease not found (the model's minimum not reached)"
            if squares else "")
    if not ok:
        where = (f"integration tolerances / {factor:g}" if np.isfinite(pg) else
                 f"the gradient cannot be evaluated there: {why}")
        demote(out, Status.NOT_STATIONARY,
               f"projected gradient {pg:.3g} > {limit:.3g} (scaled parameters, {where})" + note)
    return out


def estimate_continuous(problem: EstimationProblem, **options):
    r"""Estimate the free parameters by minimizing :math:`J(u)` on the continuous ODE solution.

    .. math::

        \min_{u_F}\; J(u) = \sum_j\varphi_j(x(\tau_j), u) + c
        \quad\text{s.t.}\quad \mathrm{lb} \le u_F \le \mathrm{ub},

    a reduced-space (single-shooting) problem whose gradient comes from the
    continuous adjoint [MHV, eqs. (15)–(16)] or the alternatives of
    :meth:`ContinuousModel.gradient`.  The optimizer sees :math:`J - c` (the
    loss constant would only blur relative stopping tests); the result
    reports :math:`J`.

    Stopping.  J and its gradient carry the integration error, so Ipopt also
    accepts its "acceptable" level (``acceptable_tol=1e-2`` for
    ``acceptable_iter=5`` iterations, ``acceptable_obj_change_tol=10·rtol``);
    L-BFGS-B uses ``ftol=10·rtol``.  A success of any optimizer is kept only at a
    stationary point (:func:`_stationarity`): on a sum of squares the
    Gauss–Newton decrement at the integration tolerances / 100 (or / 10, or / 1,
    when the integrator cannot meet them) is at most
    :data:`~pyomo_odeest.nlp.DECREMENT_TOL` · max(1, J − c); with constraints
    the projected gradient of the Lagrangian is below
    :data:`~pyomo_odeest.nlp.STATIONARITY_TOL` · max(1, ‖∇J(w₀)‖∞/100); otherwise the
    status is ``NOT_STATIONARY`` (numbers in ``extra['stationarity']``).  A start
    that cannot be simulated gives the status ``SIMULATION_FAILED``; SciPy trial
    points that cannot be simulated count as J = ∞.  See docs/continuous.md,
    "Stopping".

    Options.  Declared, with defaults and meanings, in
    :class:`ContinuousApproach`'s configuration (the table in docs/choosing.md).
    ``optimizer``: ``'ipopt'`` (limited-memory unless ``hessian`` is given),
    ``'L-BFGS-B'`` or ``'trust-constr'`` (:func:`scipy.optimize.minimize`),
    ``'least_squares'`` (:func:`scipy.optimize.least_squares` on the weighted
    residuals, Jacobian from the forward sensitivities; docs/continuous.md,
    "Gauss–Newton trust region"; a quadratic or bounded-below penalty, no
    constraints); ``options`` are the optimizer's own, with the defaults L-BFGS-B
    ``ftol=10·rtol``, ``gtol=1e-8``; trust-constr ``gtol=1e-10``, ``xtol=1e-12``;
    least_squares ``'trf'``, ``x_scale='jac'``, ``ftol=10·rtol``,
    ``xtol=gtol=1e-10`` (a stop on ``ftol`` or ``xtol`` that the Gauss–Newton
    decrement rejects is continued without ``ftol``, then with ``xtol=1e-15``,
    unless the user gave them).  ``engine``: ``'cvodes'``
    (:class:`~pyomo_odeest.discretization.continuous.CvodesModel`) or ``'scipy'``
    (:class:`ContinuousModel`); default tolerances from
    :func:`~pyomo_odeest.discretization.continuous.default_tolerances`.  ``scale``
    optimizes over :math:`w_k = u_k / s_k` with :math:`s_k = |u_{0,k}|` (1 where
    :math:`u_{0,k} = 0`).  A ``model`` given is reused (its integrator settings win).

    Returns
    -------
    EstimationResult
        ``approach='continuous'``; ``states`` on the fine grid,
        ``fitted``/``residuals`` at the measurement times; ``extra`` holds
        the gradient at the estimates (``'gradient'``), the adjoint
        :math:`\lambda(t^-)` on the grid (``'adjoint'``; with the CVODES
        engine at :math:`t_0` and the measurement times), the start and its
        objective, the integrator counters and the model.
    """
    return ContinuousApproach().estimate(problem, **options)


_NOT_SQUARES = ("optimizer 'least_squares' needs J as a sum of squares; the problem's "
                "penalty R(u) has a term that is not bounded below within the bounds of the "
                "free parameters (or not provably so): give them bounds, or use "
                "optimizer='ipopt'")


def _penalty_as_squares(problem):
    """Whether the penalty R(u) of ``problem`` and of its experiments is a sum of squares
    of the free parameters within their bounds, the others at their start values
    (:func:`~pyomo_odeest.problem._misfit.penalty_squares`)."""
    import sympy
    from ..problem._misfit import penalty_squares
    free = problem.free_mask
    cols = np.flatnonzero(free)
    lb, ub = problem.bounds(free)
    pens = {(sympy.sympify(getattr(sp, "penalty_sym", 0) or 0), tuple(sp.u_sym))
            for sp in [problem, *problem.subproblems]}      # each penalty once
    return all(penalty_squares(pen, us, cols, problem.u0, lb, ub) is not None
               for pen, us in pens if pen != 0)


#: a continuation of the least squares (without ``ftol``) stops where this many
#: accepted iterations lower J by less than ``STALL_FRACTION`` times the Gauss–Newton
#: decrement limit: a trust region crawling along a valley (PEtab's Weber problem:
#: 2.4e-8 per iteration against a limit of 1.2e-4, for 272 iterations) gains nothing
#: the stationarity test counts.  Elowitz's continuation gains 6.7e-7 over ten
#: iterations (limit 1e-6) on its way to a stationary point 30 iterations later.
STALL_WINDOW = 10
STALL_FRACTION = 1e-2
#: ``status`` of such a stop (the fit is then ``not_stationary``)
STALLED = -102
#: ``status`` of a stop at the option ``known_minimum`` (a fit where the stationarity
#: test holds there, else ``not_stationary``)
REACHED = -103
#: how the message of such a stop begins
AT_KNOWN_LEVEL = "stopped at the level of a known minimum"


def _least_squares(cm, obj, w0, wl, wu, options, tee, clock, stall=None, level=None):
    r"""Gauss–Newton trust region (SciPy's ``least_squares``, ``'trf'``) on
    :math:`J - c = \tfrac12\sum_j\lVert W_j r_j\rVert^2` over the scaled free
    parameters; the Jacobian of the weighted residuals from the forward
    sensitivities [MHV, eq. (8)] (one augmented solve per experiment).

    ``least_squares`` has no callback: the :class:`SolveClock` ``clock`` is ticked
    where the Jacobian is evaluated (once per accepted iterate); at its wall-time
    limit the solve stops there and returns that iterate.  With ``stall`` (a decrease of
    J), it also stops there, with the status :data:`STALLED`, where the last
    :data:`STALL_WINDOW` accepted iterations lowered J by less than ``stall``.  With
    ``level`` (:func:`_known_level`), it stops there with the status :data:`REACHED`
    where J is at most the level of a minimum found already (another start's)."""
    from scipy.optimize import least_squares
    squares = _SumOfSquares(cm, obj, wl, wu)
    if not squares:
        raise ProblemError(_NOT_SQUARES)
    cost, njev = {}, [0]                 # cost: the last residuals, for the progress line
    accepted = []                        # J - c at the accepted iterates

    def residuals(w):
        obj.counts["objective"] += 1
        try:
            r = squares.residuals(w)
        except EvaluationError:                          # the trust region shrinks
            return np.full(squares.size, np.inf)
        cost.clear()
        cost[np.asarray(w, dtype=float).tobytes()] = r
        return r

    def jacobian(w):
        r = cost.get(np.asarray(w, dtype=float).tobytes())
        if clock._tick(w, None if r is None else 0.5 * float(r @ r)):
            raise _Stopped(w, -101, f"stopped at max_wall_time after {clock.elapsed:.1f} s")
        if level is not None and r is not None and 0.5 * float(r @ r) <= level.squares:
            raise _Stopped(w, REACHED, (
                f"{AT_KNOWN_LEVEL}: J = "
                f"{level.offset + 0.5 * float(r @ r):.10g} <= {level.known:.10g} + "
                f"{level.limit:.2g}"))
        if stall is not None and r is not None:
            accepted.append(0.5 * float(r @ r))
            if len(accepted) > STALL_WINDOW and \
                    accepted[-STALL_WINDOW - 1] - accepted[-1] < stall:
                raise _Stopped(w, STALLED, (
                    f"stalled: J decreased by {accepted[-STALL_WINDOW - 1] - accepted[-1]:.2g} "
                    f"over the last {STALL_WINDOW} iterations, less than {stall:.2g} "
                    f"({STALL_FRACTION:g} of the stationarity test's decrement limit)"))
        obj.counts["gradient"] += 1
        try:
            J = squares.jacobian(w)
            njev[0] += 1
            return J
        except EvaluationError as err:    # at a point whose residuals were finite
            raise _Stopped(w, -100, f"Jacobian_Failed: the forward sensitivities failed "
                                    f"at an accepted point ({err})") from None

    opts = dict(ftol=max(1e-14, 10 * squares.models[0].rtol), xtol=1e-10, gtol=1e-10,
                x_scale="jac", max_nfev=None)
    # a robust loss (loss=, f_scale=) would minimize another function than J
    known = set(inspect.signature(least_squares).parameters) - {
        "fun", "x0", "jac", "bounds", "method", "args", "kwargs", "verbose", "loss",
        "f_scale", "diff_step", "jac_sparsity"}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise ValueError(f"optimizer 'least_squares' does not take the options {unknown} "
                         f"(Ipopt options?); it takes {sorted(known)}")
    opts.update(options or {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return least_squares(residuals, w0, jac=jacobian, bounds=(wl, wu), method="trf",
                                 verbose=2 if tee else 0, **opts)
        except _Stopped as stop:
            return SimpleNamespace(x=stop.w, status=stop.status, njev=njev[0],
                                   message=str(stop))


def _least_squares_status(r, clock):
    """The status of a :func:`_least_squares` stop: the wall-time limit, a stall (not
    stationary), a stop at a known minimum's level (a fit where the stationarity test
    holds there: the caller checks), or SciPy's own."""
    return (Status.TIME_LIMIT if clock.exceeded
            else Status.NOT_STATIONARY if r.status == STALLED
            else Status.CONVERGED if r.status == REACHED
            else status_from_scipy(r, "least_squares"))


#: SciPy's ``least_squares`` statuses of a stop on the step size (``xtol``, or both
#: ``ftol`` and ``xtol``)
XTOL_STOPS = (3, 4)


def _say_if_collapsed(out, r, cm):
    """Where the least squares' last stop was its trust region shrinking to ``xtol`` at
    a point the stationarity test (at tighter tolerances) finds not stationary, the
    model of J and its values disagree at every step length the trust region tried,
    down to steps where a smooth J would follow its derivatives: J is not smooth there
    at the fit's integration tolerances (the integration error, amplified by large
    sensitivities, makes its values jump from step to step: an oscillator's late
    residuals) or not differentiable.  The message says so and names the tolerances
    to refit at; the status (``not_stationary``) already says it is not a fit."""
    st = out.details.get("stationarity", {})
    if not (out.status is Status.NOT_STATIONARY and "rule" in st
            and getattr(r, "status", None) in XTOL_STOPS):
        return
    rtol, atol = cm.rtol, cm.atol
    tight = _tightened(rtol, atol)
    remedy = (f"refit from these estimates at tighter ones (e.g. rtol={tight[0]:g}, "
              f"atol={tight[1]:g})" if tight[0] < rtol else
              "the tolerances are at their floor: try another start")
    out.message = (
        f"{out.message}; the trust region shrank to its step tolerance (xtol) at this "
        f"point that is not stationary: the values of J disagree with its derivatives at "
        f"every step length tried, so J is not smooth there at the integration "
        f"tolerances of the fit (rtol={rtol:g}, atol={atol:g}; large sensitivities "
        f"amplify the integration error) or not differentiable; {remedy}")
    st["collapsed"] = True


def _known_level(b, known, j0):
    """Where a least squares from ``b.w0`` (J = ``j0`` there) has reached a minimum found
    already, at J = ``known`` (as reported: loss constant and penalty included): J at
    most ``known`` + the stationarity test's decrement limit
    (:func:`~pyomo_odeest.nlp.decrement_limit`), in the units of ½‖ρ‖²
    (``squares``; J − ½‖ρ‖² is one constant, ``offset``); further crawling along the
    minimum's valley gains at most what that test ignores.  None when the start's
    residuals cannot be evaluated (the solve reports that itself)."""
    try:
        r0 = _SumOfSquares(b.cm, b.obj, b.wl, b.wu).residuals(b.w0)
    except EvaluationError:
        return None
    offset = j0 - 0.5 * float(r0 @ r0)
    limit = decrement_limit(known - offset)
    return SimpleNamespace(squares=known - offset + limit, offset=offset, known=known,
                           limit=limit)


class _SumOfSquares:
    r""":math:`J - c = \tfrac12\lVert\rho(w)\rVert^2` over the scaled free parameters
    ``w`` of ``obj`` within the bounds ``wl``, ``wu``: the weighted residuals of every
    experiment and the penalty's squares
    (:class:`~pyomo_odeest.problem._misfit.PenaltySquares`: Gaussian priors as linear
    rows, the log σ of estimated σ and other terms bounded below as square roots); the
    Jacobian from the forward sensitivities [MHV, eq. (8)].  False (``bool``) when the
    penalty is not bounded below there."""

    def __init__(self, cm, obj, wl, wu):
        self.models, self.obj = experiment_models(cm), obj
        self.cols = np.flatnonzero(obj.free)
        lb, ub = np.asarray(wl) * obj.s, np.asarray(wu) * obj.s
        self.rows = [m.misfit.penalty_residuals(self.cols, obj.u_full, lb, ub)
                     for m in self.models if m.misfit.has_penalty]
        self.size = sum(m.misfit.zbar.size for m in self.models) + \
            sum(r.size for r in self.rows if r is not None)

    def __bool__(self):
        return all(r is not None for r in self.rows)

    def residuals(self, w):
        u, cols = self.obj.u(w), self.cols
        return _guarded(lambda: np.concatenate(
            [m.misfit.weighted_residuals(m._forward(u)[1], u).ravel() for m in self.models]
            + [r.residuals(u[cols]) for r in self.rows]))

    def jacobian(self, w):
        u, cols = self.obj.u(w), self.cols
        V = np.eye(len(u))[:, cols]

        def stacked():
            blocks = []
            for m in self.models:
                _, Xm, Sm = m.sensitivities(u, V)
                blocks.append(m.misfit.weighted_jacobian(Xm, u, Sm, cols).reshape(-1, len(cols)))
            return np.vstack(blocks + [r.jacobian(u[cols]) for r in self.rows])
        return _guarded(stacked) * self.obj.s[None, :]

    def decrement(self, w, lb, ub):
        r"""``(decrease, J - c)`` at ``w``: the decrease of :math:`J` predicted by the
        Gauss–Newton model within the bounds, :math:`\tfrac12\lVert\rho\rVert^2 -
        \min_{lb \le w + s \le ub}\tfrac12\lVert\rho + D\rho\, s\rVert^2` (the Newton
        decrement of the Gauss–Newton metric, 0 exactly at a stationary point, and in
        likelihood units: invariant to the parameters' scaling and conditioning;
        ``inf`` when the model's minimum is not found), and
        :math:`\tfrac12\lVert\rho\rVert^2`."""
        r, D = self.residuals(w), self.jacobian(w)
        return gauss_newton_decrement(D, r, np.asarray(lb, dtype=float) - w,
                                      np.asarray(ub, dtype=float) - w)


class _Stopped(Exception):
    """The solve ends at the accepted iterate ``w`` with ``status`` (-101: the wall-time
    limit; -100: the residual Jacobian failed there, its residuals being finite;
    :data:`STALLED`: the continuation gains less than the decrement limit)."""

    def __init__(self, w, status, message):
        super().__init__(message)
        self.w, self.status = np.array(w, dtype=float), status
