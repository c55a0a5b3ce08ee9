r"""Estimation on the continuous objective: :func:`estimate_continuous` (Ipopt through
cyipopt, or SciPy) on the scaled free parameters."""
from __future__ import annotations

import inspect
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd

from ...discretization._size_guard import validate_estimator
from ...nlp._cyipopt_adapter import solve_with_ipopt, start_value_magnitude
from ...nlp._protocol import EvaluationError
from ...nlp._stationarity import stationarity_check
from ...problem._declaration import EstimationProblem, ProblemError
from ...problem._result import EstimationResult, stack_experiments
from ...discretization._experiments import ExperimentModels
from ._functions import GRADIENT_METHODS, HESSIAN_METHODS, IntegrationError
from ._cvodes import continuous_model, integrator_name

__all__ = ["estimate_continuous", "ContinuousConstraints"]

_SUCCESS = ("Solve_Succeeded", "Solved_To_Acceptable_Level")
OPTIMIZERS = ("ipopt", "L-BFGS-B", "trust-constr", "least_squares")


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
            g = self.model.gradient(self.u(w), self.gmethod, np.flatnonzero(self.free))
            self._gkey, self._g = key, g * self.s
        return self._g.copy()

    def hessian(self, w):
        self.counts["hessian"] += 1
        H = self.model.hessian(self.u(w), self.hmethod, index=np.flatnonzero(self.free))
        return H * np.outer(self.s, self.s)


class ContinuousConstraints:
    r"""The problem's constraints on the continuous solution, as constraints over u.

    Rows: :math:`c(x_e(\tau_{e,j}), u, \tau_{e,j}) \le 0` at the measurement
    times of each experiment e (path constraints declared
    ``at='measurements'``), then :math:`r(u) \le 0`.  Jacobian
    :math:`c_x S(\tau_j) + c_u` with the forward sensitivities
    :math:`S = \partial x/\partial u` [MHV, eq. (8)] of the free parameters
    (one augmented solve per experiment).  A path constraint declared
    ``at='grid'`` has no meaning here (the integration is adaptive, there is
    no grid): it raises a :class:`ProblemError`.
    """

    def __init__(self, problem, cm, free):
        subs = problem.experiment_problems or [problem]
        models = cm.models if problem.experiments else [cm]
        self.free = np.flatnonzero(free)
        self.parts = []
        for e, (sp, m) in enumerate(zip(subs, models)):
            for pc, fn, jx, ju in sp.path_constraint_functions():
                if pc.at != "measurements":
                    raise ProblemError(
                        f"the continuous approach imposes path constraints at the measurement "
                        f"times only (it integrates adaptively, without a grid); path "
                        f"constraint '{pc.name}' has at={pc.at!r}: declare it with "
                        f"at='measurements', or use the simultaneous, reduced_space or "
                        f"multiple_shooting approach")
                tau, pts = np.unique(m.tau, return_index=True)
                self.parts.append((e, pc.name, pts, tau, m, fn, jx, ju))
        pcs = problem.parameter_constraints
        self._r, self._dr = problem.parameter_constraint_functions()
        self.names = [pc.name for pc, _ in pcs]
        self.m = sum(len(p[2]) for p in self.parts) + len(pcs)

    def values(self, u):
        out = []
        for e, _, pts, tau, m, fn, _, _ in self.parts:
            _, Xm = m._forward(m._u(u))
            out.append(fn(Xm[pts], u, tau)[:, 0])
        out += [np.atleast_1d(float(r(u))) for r in self._r]
        return np.concatenate(out) if out else np.zeros(0)

    def jacobian(self, u):
        """Dense (m, free) Jacobian over the free parameters."""
        rows, sens = [], {}
        V = np.eye(len(u))[:, self.free]
        for e, _, pts, tau, m, fn, jx, ju in self.parts:
            if e not in sens:
                _, Xm, Sm = m.sensitivities(u, V)
                sens[e] = (Xm, Sm)
            Xm, Sm = sens[e]
            X = Xm[pts]
            cx = jx.dense(jx.values(X, u, tau))[:, 0, :]
            cu = ju.dense(ju.values(X, u, tau))[:, 0, :]
            rows.append(np.einsum("jn,jnk->jk", cx, Sm[pts]) + cu[:, self.free])
        rows += [np.asarray(dr(u), dtype=float).reshape(1, -1)[:, self.free] for dr in self._dr]
        return np.vstack(rows) if rows else np.zeros((0, len(self.free)))

    def multipliers(self, problem, lam):
        """``({'path_<name>': DataFrame}, {name: float})`` (as the reduced space)."""
        per, a = {}, 0
        for e, name, pts, tau, *_ in self.parts:
            fr = pd.DataFrame({name: lam[a:a + len(pts)]}, index=pd.Index(tau, name="time"))
            per.setdefault(f"path_{name}", []).append((e, fr))
            a += len(pts)
        frames = {}
        for key, lst in per.items():
            frames[key] = (stack_experiments([problem.experiment_names[e] for e, _ in lst],
                                             [f for _, f in lst])
                           if problem.experiments else lst[0][1])
        return frames, {n: float(v) for n, v in zip(self.names, lam[a:])}


def _guarded(fn, *args):
    """``fn(*args)``; a failed integration or a non-finite value becomes an
    :class:`~pyomo_odeest.nlp._protocol.EvaluationError` (the optimizer backs off)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            v = fn(*args)
    except (IntegrationError, ArithmeticError, ValueError, np.linalg.LinAlgError) as err:
        raise EvaluationError(str(err)) from None
    if not np.all(np.isfinite(v)):
        raise EvaluationError("non-finite value")
    return v


def _gradient_at_tighter_tolerance(cm, u, method, index, factor=100.0, floor=1e-13):
    """∇J(u) integrated with ``rtol/factor`` and ``atol/factor`` (not below ``floor``)."""
    models = getattr(cm, "models", [cm])
    saved = [(m.rtol, m.atol) for m in models]
    try:
        for m in models:
            m.rtol, m.atol = max(m.rtol / factor, floor), max(m.atol / factor, floor * 1e-2)
            m._fwd_key = None
        return _guarded(cm.gradient, u, method, index)
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
        r, c = np.meshgrid(np.arange(self.m), np.arange(self.n), indexing="ij")
        return r.ravel(), c.ravel()

    def hessian_structure(self):
        return self._rows, self._cols

    def hessian(self, w, lagrange, obj_factor):
        H = _guarded(self.obj.hessian, w)
        return obj_factor * H[self._rows, self._cols]


def estimate_continuous(problem: EstimationProblem, optimizer="ipopt", gradient="adjoint",
                        hessian=None, u0=None, method=None, rtol=None, atol=None,
                        options=None, tee=False, scale=True, n_grid=201, model=None,
                        engine=None):
    r"""Estimate the free parameters by minimizing :math:`J(u)` on the continuous ODE solution.

    .. math::

        \min_{u_F}\; J(u) = \sum_j\varphi_j(x(\tau_j), u) + c
        \quad\text{s.t.}\quad \mathrm{lb} \le u_F \le \mathrm{ub},

    a reduced-space (single-shooting) problem whose gradient comes from the
    continuous adjoint [MHV, eqs. (15)–(16)] or the alternatives of
    :meth:`ContinuousModel.gradient`.  The optimizer sees :math:`J - c` (the
    loss constant would only blur relative stopping tests); the result
    reports :math:`J`.

    Stopping.  J and its gradient carry the integration error (relative
    ~rtol of the terms that make them up, which cancel at the optimum), so
    the gradient cannot be driven to Ipopt's ``tol`` in general.  Besides
    ``tol=1e-8`` the Ipopt defaults therefore accept a point
    (``Solved_To_Acceptable_Level``, counted as success) after
    ``acceptable_iter=5`` iterations with scaled NLP error below
    ``acceptable_tol=1e-2`` and relative objective change below
    ``acceptable_obj_change_tol=10·rtol``; L-BFGS-B uses ``ftol=10·rtol``.
    A success is kept only if the projected gradient (of the Lagrangian with
    constraints) in the scaled parameters, recomputed with the integration
    tolerances divided by 100, is below :data:`~pyomo_odeest.nlp.STATIONARITY_TOL` ·
    max(1, ‖∇J(w₀)‖∞/100); otherwise the status says ``not stationary``
    (numbers in ``extra['stationarity']``).  A start that cannot be
    simulated gives a failed result (``Simulation_Failed_At_Start``); SciPy
    trial points that cannot be simulated count as J = ∞.

    Parameters
    ----------
    problem : EstimationProblem
    optimizer : {'ipopt', 'L-BFGS-B', 'trust-constr', 'least_squares'}
        ``'ipopt'``: Ipopt through ``cyipopt.Problem(n, m=0, ...)`` with the
        parameter bounds; ``hessian_approximation=limited-memory`` unless
        ``hessian`` is given.  ``'L-BFGS-B'``, ``'trust-constr'``:
        :func:`scipy.optimize.minimize` (trust-constr uses the exact Hessian
        when ``hessian`` is given, BFGS updates otherwise).
        ``'least_squares'``: the Gauss–Newton trust region of
        :func:`scipy.optimize.least_squares` (``'trf'``, bounds,
        ``x_scale='jac'``) on the weighted residuals
        :math:`W_j r_j` (:math:`W_j^\top W_j = 2A_j`, so J − c is half their
        squared norm), with their Jacobian from the forward sensitivities;
        not with a penalty R(u) or constraints.
    gradient : {'adjoint', 'sensitivity', 'fd'}
    hessian : None or {'soa', 'adjoint_fd', 'sensitivity_fd', 'fd'}
        Exact (or finite-difference) Hessian for Ipopt / trust-constr.
    u0 : array, optional
        Start (all parameters); default: the problem's values.
    method, rtol, atol
        SciPy integrator (see :class:`ContinuousModel`; default ``'LSODA'``,
        rtol 1e-10, atol 1e-12) or CVODES tolerances (default rtol 1e-8,
        atol 1e-12, see :class:`~pyomo_odeest.approaches.continuous.CvodesModel`).
    engine : {None, 'cvodes', 'scipy'}
        ``'cvodes'``: SUNDIALS CVODES through CasADi
        (:class:`~pyomo_odeest.approaches.continuous.CvodesModel`), compiled
        right-hand sides, CVODES's forward sensitivities, adjoint and
        forward-over-adjoint Hessian; ``'scipy'``: :class:`ContinuousModel`
        on :func:`scipy.integrate.solve_ivp`.  Default: ``'cvodes'`` when
        CasADi is installed and no SciPy ``method`` is named, else ``'scipy'``.
    options : dict
        Ipopt options (defaults: see "Stopping", ``max_iter=500``) or
        ``scipy.optimize.minimize`` options (L-BFGS-B: ``ftol=10·rtol``,
        ``gtol=1e-8``; trust-constr: ``gtol=1e-10``, ``xtol=1e-12``) or
        keyword arguments of ``least_squares`` (``ftol=10·rtol``,
        ``xtol=gtol=1e-10``, ``x_scale='jac'``, ``max_nfev``).
    tee : bool
        Show Ipopt's log (``disp`` for SciPy).
    scale : bool
        Optimize over :math:`w_k = u_k / s_k` with :math:`s_k = |u_{0,k}|`
        (1 where :math:`u_{0,k} = 0`): parameters of very different
        magnitudes (the HIV model spans 1.6e-5 … 641) become O(1).
    n_grid : int
        Number of uniform times in :math:`[t_0, T]` (plus the measurement
        times) for the reported states.
    model : ContinuousModel, optional
        Reuse a model (its integrator settings win).

    Returns
    -------
    EstimationResult
        ``approach='continuous_adjoint'``; ``states`` on the fine grid,
        ``fitted``/``residuals`` at the measurement times; ``extra`` holds
        the gradient at the estimates (``'gradient'``), the adjoint
        :math:`\lambda(t^-)` on the grid (``'adjoint'``), the start and its
        objective, the integrator counters and the model.
    """
    validate_estimator("continuous", problem, u0=u0, options=options, tee=tee,
                       optimizer=optimizer, gradient=gradient, hessian=hessian,
                       **({} if model is not None or method is None else dict(method=method)))
    t_start = time.perf_counter()
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if gradient not in GRADIENT_METHODS:
        raise ValueError(f"gradient must be one of {GRADIENT_METHODS}")
    if hessian is not None and hessian not in HESSIAN_METHODS:
        raise ValueError(f"hessian must be None or one of {HESSIAN_METHODS}")
    if optimizer == "least_squares" and hessian is not None:
        raise ValueError("optimizer 'least_squares' uses the Gauss-Newton matrix of the "
                         "residuals; leave hessian=None")
    if model is not None:
        cm = model
    elif problem.experiments:
        cm = ContinuousExperiments(problem, [
            continuous_model(sp, engine, method=method, rtol=rtol, atol=atol)
            for sp in problem.experiment_problems])
    else:
        cm = continuous_model(problem, engine, method=method, rtol=rtol, atol=atol)
    u_start = cm._u(u0)
    free = problem.free_mask
    if not free.any():
        raise ProblemError("no free parameter to estimate")
    lb = np.array([-np.inf if p.lb is None else p.lb for p in problem.parameters])[free]
    ub = np.array([np.inf if p.ub is None else p.ub for p in problem.parameters])[free]
    uf = np.clip(u_start[free], lb, ub)
    s = start_value_magnitude(uf) if scale else np.ones(free.sum())     # w = u/s is O(1)
    obj = _ScaledObjective(cm, u_start, free, s, gradient, hessian)
    w0 = uf / s
    wl, wu = lb / s, ub / s
    cons = ContinuousConstraints(problem, cm, free) if problem.has_constraints else None
    if cons is not None and optimizer != "ipopt":
        raise ProblemError(f"optimizer {optimizer!r} does not take the problem's path or "
                           f"parameter constraints; use optimizer='ipopt'")
    try:
        J_start = _guarded(cm.objective, obj.u(w0))
        g0 = _guarded(obj.gradient, w0)
    except EvaluationError as err:
        return _failed_at_start(problem, obj.u(w0), f"Simulation_Failed_At_Start: {err}",
                                time.perf_counter() - t_start)
    build_s = time.perf_counter() - t_start

    t_solve = time.perf_counter()
    mult_g = None
    if optimizer == "ipopt":
        opts = dict(tol=1e-8, acceptable_tol=1e-2, acceptable_iter=5,
                    acceptable_obj_change_tol=max(1e-12, 10 * cm.rtol), max_iter=500)
        if hessian is None:
            opts["hessian_approximation"] = "limited-memory"
        opts.update(options or {})
        # exceptions other than failed evaluations (and Ctrl-C) stop Ipopt and are re-raised
        r = solve_with_ipopt(_IpoptProblem(obj, w0, wl, wu, cons), options=opts, tee=tee)
        w, status, iterations = r.x, r.status_name, r.iterations
        mult_g = np.asarray(r.mult_g, dtype=float) if cons is not None else None
        success = status in _SUCCESS
        mname = f"ipopt/{'limited-memory' if hessian is None else 'exact-hessian:' + hessian}"
    elif optimizer == "least_squares":
        r = _least_squares(cm, obj, w0, wl, wu, options, tee)
        w, success, status, iterations = r.x, bool(r.status > 0), str(r.message), int(r.njev)
        mname = "scipy/least_squares(trf), Jacobian from forward sensitivities"
    else:
        from scipy.optimize import Bounds, minimize
        bounds = Bounds(wl, wu)
        opts = dict(maxiter=1000)
        if optimizer == "L-BFGS-B":
            opts.update(ftol=max(1e-14, 10 * cm.rtol), gtol=1e-8)
        else:
            opts.update(gtol=1e-10, xtol=1e-12)
        opts.update(options or {})
        if tee:
            opts.setdefault("disp", True)
        kw = {}
        if optimizer == "trust-constr":
            from scipy.optimize import BFGS
            kw["hess"] = obj.hessian if hessian is not None else BFGS()
        def fun(w):
            try:
                return _guarded(obj.objective, w), _guarded(obj.gradient, w)
            except EvaluationError:                      # the line search backs off
                return np.inf, np.zeros_like(w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            r = minimize(fun, w0, jac=True, method=optimizer, bounds=bounds,
                         options=opts, **kw)
        w = r.x
        success = bool(r.success)
        status = str(r.message)
        iterations = int(getattr(r, "nit", 0))
        mname = f"scipy/{optimizer}" + ("" if hessian is None or optimizer == "L-BFGS-B"
                                        else f"/hessian:{hessian}")
    solve_s = time.perf_counter() - t_solve

    u_hat = obj.u(w)
    stationary = None
    if success:
        # An f-tolerance stop in a steep valley, or a gradient the integration
        # tolerance does not resolve, is not a minimum: check stationarity with
        # the gradient at tighter tolerances.
        gm = "adjoint" if gradient == "fd" else gradient
        try:
            g_check = _gradient_at_tighter_tolerance(cm, u_hat, gm, np.flatnonzero(free)) * s
            if mult_g is not None and len(mult_g):       # the Lagrangian's gradient
                g_check = g_check + (_guarded(cons.jacobian, u_hat) * s[None, :]).T @ mult_g
        except EvaluationError:
            g_check = np.full(len(w), np.inf)
        stationary = stationarity_check(g_check, w, wl, wu, g0)
        pg, limit = stationary["projected_gradient"], stationary["limit"]
        if pg > limit:
            success = False
            status = (f"{status}; not stationary: projected gradient {pg:.3g} > {limit:.3g} "
                      f"(scaled parameters, integration tolerances / 100)")
    J = cm.objective(u_hat)
    try:                          # the optimizer may stop where the derivatives fail
        g = _guarded(cm.gradient, u_hat, "adjoint" if gradient == "fd" else gradient)
    except EvaluationError:
        g = np.full(len(u_hat), np.nan)
    if problem.experiments:
        parts = [_frames(sp, m, u_hat, n_grid) for sp, m in
                 zip(problem.experiment_problems, cm.models)]
        states, fitted, residuals, lam = (
            stack_experiments(problem.experiment_names, [p[a] for p in parts]) for a in range(4))
    else:
        states, fitted, residuals, lam = _frames(problem, cm, u_hat, n_grid)
    res = EstimationResult(
        approach="continuous_adjoint", method=f"{mname}, gradient={gradient}",
        scheme=f"{integrator_name(cm)} (rtol={cm.rtol:g}, atol={cm.atol:g})",
        estimates=pd.Series(u_hat, index=problem.parameter_names, name="estimate"),
        objective=J, status=status, success=success, iterations=int(iterations),
        evaluations=dict(obj.counts, **{f"ode_{k}": v for k, v in cm.counts.items()}),
        timings=dict(build_s=build_s, setup_s=0.0, solve_s=solve_s,
                     total_s=time.perf_counter() - t_start),
        states=states, fitted=fitted, residuals=residuals,
        extra=dict(gradient=pd.Series(g, index=problem.parameter_names), adjoint=lam,
                   start=pd.Series(u_start, index=problem.parameter_names),
                   objective_start=J_start, scale=s, continuous_model=cm,
                   stationarity=stationary))
    if mult_g is not None:
        frames, pmult = cons.multipliers(problem, mult_g)
        res.multipliers.update(frames)
        if pmult:
            res.extra["parameter_constraint_multipliers"] = pmult
    from ...problem._result import post_solve_checks
    return post_solve_checks(problem, res)


def _least_squares(cm, obj, w0, wl, wu, options, tee):
    r"""Gauss–Newton trust region (SciPy's ``least_squares``, ``'trf'``) on
    :math:`J - c = \tfrac12\sum_j\lVert W_j r_j\rVert^2` over the scaled free
    parameters; the Jacobian of the weighted residuals from the forward
    sensitivities [MHV, eq. (8)] (one augmented solve per experiment)."""
    from scipy.optimize import least_squares
    models = getattr(cm, "models", [cm])
    if any(m.misfit.has_penalty for m in models):
        raise ProblemError("optimizer 'least_squares' needs J as a sum of squares; the "
                           "problem's penalty R(u) is not one: use optimizer='ipopt'")
    cols = np.flatnonzero(obj.free)
    V = np.eye(len(obj.u_full))[:, cols]
    size = sum(m.misfit.zbar.size for m in models)

    def residuals(w):
        obj.counts["objective"] += 1
        u = obj.u(w)

        def stacked():
            return np.concatenate([m.misfit.weighted_residuals(m._forward(u)[1], u).ravel()
                                   for m in models])
        try:
            return _guarded(stacked)
        except EvaluationError:                          # the trust region shrinks
            return np.full(size, np.inf)

    njev = [0]

    def jacobian(w):
        obj.counts["gradient"] += 1
        u = obj.u(w)

        def stacked():
            blocks = []
            for m in models:
                _, Xm, Sm = m.sensitivities(u, V)
                blocks.append(m.misfit.weighted_jacobian(Xm, u, Sm, cols).reshape(-1, len(cols)))
            return np.vstack(blocks)
        try:
            J = _guarded(stacked) * obj.s[None, :]
            njev[0] += 1
            return J
        except EvaluationError as err:    # at a point whose residuals were finite
            raise _JacobianFailed(np.array(w, dtype=float), str(err)) from None

    opts = dict(ftol=max(1e-14, 10 * models[0].rtol), xtol=1e-10, gtol=1e-10,
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
        except _JacobianFailed as stop:
            return SimpleNamespace(x=stop.w, status=-100, njev=njev[0],
                                   message=f"Jacobian_Failed: the forward sensitivities "
                                           f"failed at an accepted point ({stop.reason})")


class _JacobianFailed(Exception):
    """The residual Jacobian could not be computed at ``w`` (its residuals were finite)."""

    def __init__(self, w, reason):
        super().__init__(reason)
        self.w, self.reason = w, reason


def _failed_at_start(problem, u, status, elapsed):
    """The result of a fit whose start cannot be simulated (no optimizer step taken)."""
    res = EstimationResult(
        approach="continuous_adjoint", method="-", scheme="solve_ivp",
        estimates=pd.Series(u, index=problem.parameter_names, name="estimate"),
        objective=float("nan"), status=status, success=False, iterations=0,
        evaluations={}, timings=dict(build_s=elapsed, setup_s=0.0, solve_s=0.0,
                                     total_s=elapsed))
    from ...problem._result import post_solve_checks
    return post_solve_checks(problem, res)


def _frames(problem, cm, u, n_grid):
    """States on a fine grid, fitted observations, residuals and adjoint of one experiment."""
    times = np.union1d(np.linspace(cm.t0, cm.T, n_grid), cm.tau)
    states = cm.simulate(u, times)
    fitted = cm.observations(u)
    residuals = (fitted - problem.data).where(problem.mask)
    try:
        lam = _guarded(lambda: cm.adjoint(u, times=times)["lambda"])
    except EvaluationError:
        lam = None
    return states, fitted, residuals, lam


class ContinuousExperiments(ExperimentModels):
    """:class:`ContinuousModel` of each experiment, summed (with the continuous
    models' signatures: ``gradient(u, method, index)``, ``hessian(u, method, index)``)."""

    def _u(self, u):
        return self.models[0]._u(u)

    def _misfit(self, u):
        return float(sum(m._misfit(u) for m in self.models))

    def objective(self, u=None, traj=None):
        return float(sum(m.objective(u) for m in self.models))

    def gradient(self, u=None, method="adjoint", index=None):
        return sum(np.asarray(m.gradient(u, method, index), dtype=float) for m in self.models)

    def hessian(self, u=None, method="soa", index=None, block=None):
        return sum(np.asarray(m.hessian(u, method, index=index), dtype=float)
                   for m in self.models)

    @property
    def counts(self):
        out = {}
        for m in self.models:
            for k, v in m.counts.items():
                out[k] = out.get(k, 0) + v
        return out
