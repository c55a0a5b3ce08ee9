r"""Reduced-space (sequential) estimation over the parameters u alone.

``J_k(u)`` is evaluated by simulating the discrete scheme
(:class:`~pyomo_odeest.discretization.discrete.DiscreteModel`, the same equations as the
Pyomo block), its gradient by the discrete adjoint [GM-grad, eqs. (52),
(54)] or another method, its Hessian by the second-order adjoint, adjoint +
finite differences or Gauss–Newton.  Optimizers:

* ``'ipopt'``: Ipopt through cyipopt, bounds on u, exact Hessian
  (``hessian='soa'|'adjoint_fd'|'gauss_newton'``) or ``hessian=None`` for
  Ipopt's limited-memory quasi-Newton;
* ``'L-BFGS-B'`` and ``'trust-constr'`` from SciPy.

A simulation that fails (non-finite states, Newton divergence) is reported to
Ipopt as an evaluation error, so it shortens the step; at the starting point
it ends the solve with a clear status.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..discretization.discrete import DiscreteModel, SimulationError
from ..nlp._cyipopt_adapter import start_value_scaling
from ..nlp._protocol import EvaluationError, NLPEvaluator, finite
from ..nlp._stationarity import projected_gradient, stationarity_check
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._result import EstimationResult
from ..problem._status import Status, demote
from ..discretization._experiments import experiment_grid, experiment_models, join_experiments
from ._backend import DiscreteBackend, discrete_model
from ._base import (Approach, Choice, ConfigValue, ConstraintRows, Outcome,
                    add_constraint_multipliers, common_config, discretization_config, refinement_config, fit_frames,
                    ipopt_options, region_bounds, run_ipopt, run_scipy, watch_config)
from ._certificate import grid_fits, watch_of, watch_outcome

__all__ = ["ReducedApproach", "ReducedSpaceNLP", "ReducedConstraints", "estimate_reduced",
           "discrete_model"]


class ReducedConstraints(ConstraintRows):
    r"""Path and parameter constraints of a problem as constraints over u
    (:class:`~pyomo_odeest.approaches._base.ConstraintRows`): :math:`c(x_i(u), u,
    t_i) \le 0` at the constrained grid points of each experiment (every point,
    or the measurement times), with the discrete state sensitivities
    :math:`S_i = \partial x_i/\partial u` [GM-grad, eq. (51)], exact for the
    discrete equations."""

    def __init__(self, problem, dm):
        self.models = experiment_models(dm)

        def points(pc, d):
            pts = (np.arange(d.k + 1) if pc.at == "grid"
                   else np.unique(np.asarray(d.grid.J, dtype=int)))
            return pts, d.t[pts]
        super().__init__(problem, self.models, points)

    def values(self, u, traj):
        trajs = traj if isinstance(traj, tuple) else (traj,)
        return super().values(u, lambda e: trajs[e].X)

    def jacobian(self, u, traj):
        """Dense (m, p) Jacobian over all parameters."""
        trajs = traj if isinstance(traj, tuple) else (traj,)
        return super().jacobian(u, lambda e: (trajs[e].X, self.models[e].state_sensitivities(
            trajs[e])), np.arange(len(u)))


class ReducedSpaceNLP(NLPEvaluator):
    """``min J_k(u)`` over the free parameters, as an evaluator; the problem's
    path and parameter constraints (if any) are its constraints ``g(u) <= 0``
    (:class:`ReducedConstraints`).  With constraints the Hessian is that of
    J alone (the constraints' curvature is left out: the KKT point is the same,
    the convergence may be slower).

    ``free`` (optional, a boolean mask or indices) optimizes over a subset of the
    problem's free parameters, the others held at ``u_full`` (profile likelihood).
    """

    def __init__(self, dm: DiscreteModel, gradient="adjoint", hessian="soa", free=None):
        P = dm.problem
        self.dm = dm
        free_mask = P.free_mask if free is None else np.asarray(free)
        self.free = np.flatnonzero(free_mask) if free_mask.dtype == bool else free_mask.astype(int)
        self.u_full = P.u0.copy()
        self.n = len(self.free)
        self.cons = ReducedConstraints(P, dm) if P.has_constraints else None
        self.m = 0 if self.cons is None else self.cons.m
        self.x_lb, self.x_ub = P.bounds(self.free)
        self.x0 = np.clip(self.u_full[self.free], self.x_lb, self.x_ub)
        self.g_lb, self.g_ub = np.full(self.m, -np.inf), np.zeros(self.m)
        self.gradient_method = gradient
        self.hessian_method = hessian
        self._key = self._traj = None
        self.counts = dict(simulations=0, gradients=0, hessians=0, failures=0)
        self._hr, self._hc = np.tril_indices(self.n)

    def full(self, x):
        u = self.u_full.copy()
        u[self.free] = x
        return u

    def _trajectory(self, x):
        x = np.asarray(x, dtype=float)
        if self._key is not None and np.array_equal(x, self._key):
            if isinstance(self._traj, Exception):
                raise EvaluationError(str(self._traj))
            return self._traj
        self._key = x.copy()
        self.counts["simulations"] += 1
        try:
            self._traj = self.dm.simulate(self.full(x))
        except SimulationError as err:
            self._traj = err
            self.counts["failures"] += 1
            raise EvaluationError(str(err)) from None
        return self._traj

    def objective(self, x):
        return finite(self.dm.objective(self.full(x), self._trajectory(x)), "objective")

    def gradient(self, x):
        traj = self._trajectory(x)
        self.counts["gradients"] += 1
        g = self.dm.gradient(self.full(x), self.gradient_method, traj)[self.free]
        return finite(g, "gradient")

    def constraints(self, x):
        if self.cons is None:
            return np.zeros(0)
        return finite(self.cons.values(self.full(x), self._trajectory(x)), "constraint value")

    def jacobian_structure(self):
        r, c = np.meshgrid(np.arange(self.m), np.arange(self.n), indexing="ij")
        return r.ravel(), c.ravel()

    def jacobian(self, x):
        if self.cons is None:
            return np.zeros(0)
        J = self.cons.jacobian(self.full(x), self._trajectory(x))[:, self.free]
        return finite(J, "constraint Jacobian").ravel()

    def hessian_structure(self):
        return self._hr, self._hc

    def hessian_matrix(self, x):
        self._trajectory(x)
        self.counts["hessians"] += 1
        H = self.dm.hessian(self.full(x), self.hessian_method)
        return H[np.ix_(self.free, self.free)]

    def hessian(self, x, lam, obj_factor=1.0):
        return obj_factor * finite(self.hessian_matrix(x), "Hessian")[self._hr, self._hc]


class ReducedApproach(Approach):
    """Single shooting over the parameters: :class:`ReducedSpaceNLP` on the
    :class:`DiscreteModel` of the scheme (the same equations as the Pyomo block).

    Own options: ``optimizer`` (``'ipopt'`` | ``'L-BFGS-B'`` | ``'trust-constr'``),
    ``gradient`` (``'adjoint'`` | ``'transposed_solve'`` | ``'sensitivity'`` |
    ``'recursion'`` | ``'fd'``), ``hessian`` (``'soa'`` | ``'adjoint_fd'`` |
    ``'gauss_newton'`` | None: Ipopt's L-BFGS, trust-constr's BFGS) and ``model``
    (a :class:`DiscreteModel` to reuse).  ``scale`` (Ipopt only): each free
    parameter scaled by its start value (``x_scaling = 1/|u0_k|``, 1 where
    u0_k = 0).  SciPy's ``options``: L-BFGS-B ``gtol=1e-10, ftol=1e-15``,
    trust-constr ``gtol=1e-10, xtol=1e-14`` unless given.
    """

    name = "reduced_space"
    CONFIG = common_config()
    CONFIG.declare_from(discretization_config())
    CONFIG.declare_from(refinement_config())
    CONFIG.declare_from(watch_config())
    CONFIG.declare("optimizer", ConfigValue(default="ipopt", domain=Choice(
        "optimizer", "ipopt", "L-BFGS-B", "trust-constr"), description="the optimizer"))
    CONFIG.declare("gradient", ConfigValue(default="adjoint", domain=Choice(
        "gradient", "adjoint", "transposed_solve", "sensitivity", "recursion", "fd"),
        description="gradient of J_k(u)"))
    CONFIG.declare("hessian", ConfigValue(default="soa", domain=Choice(
        "hessian", "soa", "adjoint_fd", "gauss_newton", None),
        description="Hessian of J_k(u) (None: quasi-Newton)"))
    CONFIG.declare("model", ConfigValue(default=None, description="a DiscreteModel to reuse"))

    def build(self, problem, cfg, u_start):
        return super().build(problem, cfg, u_start) if cfg.model is None else \
            self.combine(problem, None, cfg, u_start)

    def build_experiment(self, problem, name, cfg, u_start):
        return DiscreteModel(problem, cfg.scheme, cfg.qmax, experiment_grid(cfg.grid, name),
                             cfg.max_step, cfg.steps_per_interval)

    def combine(self, problem, parts, cfg, u_start):
        dm = cfg.model or join_experiments(problem, parts)
        nlp = ReducedSpaceNLP(dm, cfg.gradient, cfg.hessian)
        nlp.u_full = u_start.copy()
        if cfg.region:                       # a round of the refinement stage's trust region
            lb, ub = region_bounds(problem, cfg.region)
            nlp.x_lb, nlp.x_ub = lb[nlp.free], ub[nlp.free]
        nlp.x0 = np.clip(nlp.u_full[nlp.free], nlp.x_lb, nlp.x_ub)
        if nlp.m and cfg.optimizer != "ipopt":
            raise ProblemError(f"optimizer {cfg.optimizer!r} does not take the problem's path "
                               f"or parameter constraints; use optimizer='ipopt'")
        return dm, nlp

    def solve(self, built, cfg):
        _, nlp = built
        try:
            j0 = nlp.objective(nlp.x0)
            out = self._ipopt(nlp, cfg) if cfg.optimizer == "ipopt" else self._scipy(nlp, cfg)
        except EvaluationError as err:
            return Outcome.failed_at_start(nlp.x0, err)
        out.objective_start = float(j0)
        return out

    def _ipopt(self, nlp, cfg):
        xs = start_value_scaling(nlp.x0) if cfg.scale else np.ones(nlp.n)
        opts = ipopt_options(cfg, start=(nlp.x0 * xs, nlp.x_lb * xs, nlp.x_ub * xs),
                             **({"hessian_approximation": "limited-memory"}
                                if cfg.hessian is None else {}))
        watch = _FailureWatch(nlp)
        grid = watch_of(cfg, nlp.dm.problem, _trajectory_point(nlp))
        xs = xs if cfg.scale else None
        out = Outcome.from_ipopt(run_ipopt(nlp, cfg, opts, x_scaling=xs,
                                           intermediate=_Watches(watch, grid)))
        if watch.stopped:
            demote(out, Status.EVALUATION_ERRORS,
                   f"{watch.streak} consecutive iterations met a failed simulation", force=True)
        return watch_outcome(out, grid)            # refinement before convergence

    def _scipy(self, nlp, cfg):
        defaults = dict(gtol=1e-10)
        if cfg.optimizer == "trust-constr":
            defaults["xtol"] = 1e-14
        else:
            defaults["ftol"] = 1e-15
        hess = nlp.hessian_matrix if cfg.optimizer == "trust-constr" and cfg.hessian else None
        g0 = nlp.gradient(nlp.x0)
        sol, out = run_scipy(lambda x: (nlp.objective(x), nlp.gradient(x)), nlp.x0,
                             nlp.x_lb, nlp.x_ub, cfg, defaults, hess)
        if out.status is Status.FAILED and "ABNORMAL" in out.message:
            return Outcome(out.x, *_stationary(nlp, sol, out.message), out.iterations)
        if out.status.success:
            # a stop on the relative decrease of J (ftol) or on the step (xtol) is
            # not a minimum unless the projected gradient is small
            st = stationarity_check(nlp.gradient(sol.x), sol.x, nlp.x_lb, nlp.x_ub, g0)
            if st["projected_gradient"] > st["limit"]:
                demote(out, Status.NOT_STATIONARY, f"projected gradient "
                       f"{st['projected_gradient']:.3g} > {st['limit']:.3g}")
        return out

    def advice(self, cfg):
        return "hessian=None (L-BFGS) or optimizer='L-BFGS-B'" if cfg.hessian else ""

    def parts(self, built):
        return experiment_models(built[0])

    def collect(self, problem, built, outcome, cfg):
        dm, nlp = built
        if cfg.optimizer == "ipopt":
            method = f"ipopt/{cfg.gradient}+{cfg.hessian or 'lbfgs'}"
        else:
            method = f"scipy-{cfg.optimizer}/{cfg.gradient}" + (
                f"+{cfg.hessian}" if cfg.optimizer == "trust-constr" and cfg.hessian else "")
        u = nlp.full(outcome.x)
        final = _final(nlp, outcome.x)
        obj = np.nan if isinstance(final, str) else dm.objective(u, final)   # str: said by
        res = EstimationResult(                                               # the frames
            approach=self.name, method=method, scheme=self.parts(built)[0].scheme,
            estimates=pd.Series(u, index=problem.parameter_names, name="estimate"),
            objective=float(obj), status=outcome.status, iterations=outcome.iterations,
            evaluations=dict(nlp.counts))
        res.backend = DiscreteBackend(problem, dm)
        if nlp.cons is not None and outcome.mult_g is not None:
            add_constraint_multipliers(res, problem, nlp.cons.rows,
                                       np.asarray(outcome.mult_g, dtype=float), nlp.cons.names)
        return res

    def collect_experiment(self, problem, dm, u, solved, outcome):
        final = _final(solved[1], outcome.x)
        if isinstance(final, str):
            return dict(grid=dm.grid, failed=final)
        trajs = final if isinstance(final, tuple) else (final,)
        X = trajs[self.parts(solved).index(dm)].X
        return dict(fit_frames(problem, dm.t, X, X[np.asarray(dm.grid.J)], u), grid=dm.grid)


def _final(nlp, x):
    """The trajectory at the optimizer's last point ``x`` (a tuple of the experiments'
    with several; simulated once: the evaluator keeps its last trajectory), or why it
    cannot be simulated."""
    try:
        return nlp._trajectory(x)
    except EvaluationError as err:
        return str(err)


def estimate_reduced(problem: EstimationProblem, *args, **options):
    """Estimate u by optimizing the reduced objective J_k(u) (single shooting):
    ``estimate(problem, 'reduced_space', ...)`` (:class:`ReducedApproach`; the
    discretization options may be given positionally: ``scheme, qmax, grid,
    max_step, steps_per_interval``)."""
    return ReducedApproach().estimate(problem, *args, **options)


class _FailureWatch:
    """Ipopt's intermediate callback: stop after ``streak`` consecutive iterations
    that each met a failed simulation (Ipopt cutting back its step again and
    again, e.g. an exact-Hessian drift into parameters where the model breaks)."""

    def __init__(self, nlp, streak=25):
        self.nlp, self.streak = nlp, streak
        self.history, self.stopped = [], False

    def __call__(self, **_):
        h = self.history
        h.append(self.nlp.counts["failures"])
        if len(h) > self.streak and all(h[-i] > h[-i - 1] for i in range(1, self.streak + 1)):
            self.stopped = True
            return False
        return True


class _Watches:
    """The failure watch, then the grid's (when there is one): Ipopt stops where
    either says so."""

    def __init__(self, failures, grid):
        self.failures, self.grid = failures, grid

    def __call__(self, iter_count, obj_value, inf_pr, inf_du, mu, iterate):
        kw = dict(iter_count=iter_count, obj_value=obj_value, inf_pr=inf_pr,
                  inf_du=inf_du, mu=mu)
        if self.failures(**kw) is False:
            return False
        return True if self.grid is None else self.grid(iterate=iterate, **kw)


def _trajectory_point(nlp):
    """The :class:`~pyomo_odeest.approaches._certificate.GridWatch`'s point of the
    reduced space: at the iterate x (the free parameters), the discrete trajectory
    (the evaluator's last, simulated again only if Ipopt moved since), its fitted
    values and objective."""
    def point(x):
        u = nlp.full(x)
        final = nlp._trajectory(x)
        trajs = final if isinstance(final, tuple) else (final,)
        fitted, resid = grid_fits(
            ((sp, d.t, tr.X, d.grid.J) for sp, d, tr in
             zip(nlp.dm.problem.subproblems, experiment_models(nlp.dm), trajs)), u)
        return u, fitted, resid, float(nlp.dm.objective(u, final))
    return point


def _stationary(nlp, sol, message, rtol=1e-6):
    """L-BFGS-B's ABNORMAL line search at a stationary point is convergence:
    accept it when the projected gradient is below ``rtol`` (1 + |J|)."""
    pg = projected_gradient(sol.jac, sol.x, nlp.x_lb, nlp.x_ub, tol=0.0)
    norm = float(np.max(np.abs(pg))) if pg.size else 0.0
    if np.isfinite(sol.fun) and norm <= rtol * (1 + abs(float(sol.fun))):
        return Status.CONVERGED, f"{message} at a stationary point (projected gradient {norm:.2g})"
    return Status.FAILED, message
