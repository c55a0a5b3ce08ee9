r"""The grid certificate and the refinement stage of the estimation pipeline.

A discrete optimum :math:`\hat u_h` answers the ODE problem only as far as the
grid resolves the ODE there.  After a solve on a grid, :func:`certify` measures
that against an independent adaptive simulation at :math:`\hat u_h` (LSODA,
``rtol=1e-10``; one per experiment):

* the error of every fitted value, :math:`e_j = (z_{h,j} - z_j)/\sigma_j`, in
  units of its σ (σ unknown: of the residual scale
  :math:`s = (\sum_j w_j r_j^2/(N-p))^{1/2}`, :math:`\sigma_j = s/\sqrt{w_j}`; at
  least :data:`RESIDUAL_FLOOR` times the data's weighted RMS, so that exact data are
  certified to a relative accuracy, not to round-off);
* the shift of the estimates that this error causes, in standard errors: the
  discrete optimum satisfies :math:`S^\top W (z_h - \bar z) = 0`, so the
  gradient of the ODE's objective there is :math:`-S^\top W e` and one
  Gauss–Newton step moves the estimates by
  :math:`\delta = (S^\top W S)^{-1} S^\top W (z_h - z)` towards the ODE's
  optimum; with :math:`\mathrm{Cov} = s^2 (S^\top W S)^{-1}` the shift is
  :math:`|\delta_k| / \mathrm{SE}_k` (parameters at a bound excluded; the
  penalty's terms cancel between the two gradients).

The grid is certified when :math:`\max_j |e_j| \le` ``fit_tol`` (default
0.01σ) and :math:`\max_k |\delta_k|/\mathrm{SE}_k \le` ``shift_tol`` (default
0.1).  Otherwise :func:`refine` makes the next grid by equidistributing the
local error estimates of the scheme
(:func:`~pyomo_odeest.discretization.schemes.local_errors`) and
:func:`refine_until_certified`, the pipeline's stage, re-solves warm-started
at the estimates, for at most ``max_refinements`` rounds.  A result whose grid
is not certified in the end is not a success
(:attr:`~pyomo_odeest.Status.NOT_RESOLVED`).  See docs/checks.md, "The grid
certificate".
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pandas as pd

from ..discretization._grid import subdivide
from ..discretization.schemes import STIFF_SCHEME, get_scheme, local_errors, stiff_switch
from ..nlp._progress import time_left
from ..problem._declaration import ProblemError
from ..problem._misfit import misfit_constant
from ..problem._status import Status, demote
from ..symbolic._vectorfn import VectorFn
from ._base import _with, fit_frames, scheme_of

__all__ = ["GridCertificate", "GridWatch", "certify", "fit_errors", "grid_fits", "refine",
           "watch_of", "refine_until_certified", "FIT_TOL", "SHIFT_TOL", "WATCH_TOL", "MAX_REFINEMENTS",
           "MAX_GRID_POINTS"]

#: Default tolerance on the error of the fitted values, in units of their σ.
FIT_TOL = 0.01
#: Default tolerance on the estimates' shift to the ODE's optimum, in standard errors.
SHIFT_TOL = 0.1
#: Default largest number of refinement rounds after the first solve.
MAX_REFINEMENTS = 4
#: No refinement makes an experiment's grid larger than this many points.
MAX_GRID_POINTS = 200_000
#: With σ unknown, the residual scale is at least this fraction of the data's RMS (a fit
#: of exact data is certified to that relative accuracy, not to round-off).
RESIDUAL_FLOOR = 1e-4
#: Refinement before convergence: a solve on a grid stops when its iterate's fitted values
#: are this many σ off the ODE's (:class:`GridWatch`).
WATCH_TOL = 1.0
#: the statuses of a first solve that the stage refines and solves on from (where its
#: grid does not resolve the ODE at the point reached), as it does a watched stop
SALVAGED = (Status.FAILED, Status.EVALUATION_ERRORS)
#: Tolerances of the independent reference simulation.
REFERENCE_RTOL, REFERENCE_ATOL = 1e-10, 1e-12
REFERENCE_METHOD = f"LSODA rtol={REFERENCE_RTOL:g}"


@dataclass
class GridCertificate:
    """How well the grid of a result resolves the ODE at its estimates.

    Attributes
    ----------
    available : bool
        False when no reference simulation could be made (``reason`` says why).
    certified : bool
        ``fit_error <= fit_tol`` and ``max_shift <= shift_tol``.
    fit_error : float
        Largest error of a fitted value, in units of its σ (or of the residual scale).
    shift : dict
        Free parameter -> estimated shift to the ODE's optimum, in standard errors.
    objective, objective_simulated : float
        The discrete objective and the objective of the reference simulation.
    grid_points : int
        Points of the grid (summed over the experiments).
    sigma : str
        ``'known'`` or ``'residual'`` (σ unknown: the residual scale).
    """

    available: bool
    certified: bool = False
    fit_error: float = float("nan")
    fit_tol: float = FIT_TOL
    shift: dict = field(default_factory=dict)
    shift_tol: float = SHIFT_TOL
    objective: float = float("nan")
    objective_simulated: float = float("nan")
    grid_points: int = 0
    sigma: str = "known"
    reference: str = REFERENCE_METHOD
    reason: str = ""

    @property
    def max_shift(self) -> float:
        return max((abs(v) for v in self.shift.values()), default=0.0)

    def describe(self) -> str:
        """One line: the certified bounds, or why not."""
        if not self.available:
            return f"grid not certified: {self.reason}"
        unit = "σ" if self.sigma == "known" else "residual scale"
        verdict = "certified" if self.certified else "NOT certified"
        return (f"grid {verdict} ({self.grid_points} points): fitted values within "
                f"{self.fit_error:.2g} {unit} (tol {self.fit_tol:g}), estimates within "
                f"{self.max_shift:.2g} SE of the ODE's optimum (tol {self.shift_tol:g}); "
                f"objective {self.objective:.8g} on the grid, {self.objective_simulated:.8g} "
                f"by {self.reference}" + (f"; {self.reason}" if self.reason else ""))

    def to_dict(self) -> dict:
        """The fields and ``summary``, :meth:`describe` (what ``result.extra['certificate']``
        holds)."""
        return dict(asdict(self), summary=self.describe())

    @classmethod
    def from_dict(cls, d) -> "GridCertificate":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def reference_models(problem):
    """The independent simulators, one per experiment (LSODA at :data:`REFERENCE_RTOL`)."""
    from ..discretization.continuous import ContinuousModel
    return [ContinuousModel(sp, method="LSODA", rtol=REFERENCE_RTOL, atol=REFERENCE_ATOL)
            for sp in problem.subproblems]


def _rows(frame, name):
    """An experiment's rows of a frame stacked by experiment (the frame itself for one)."""
    if name is None or frame is None:
        return frame
    return frame.xs(name, level="experiment")


def _grid_points(grid) -> int:
    grids = grid.values() if isinstance(grid, dict) else [grid]
    return int(sum(len(g) for g in grids if g is not None))


def _result_points(result) -> int:
    """Grid points of a result; the adaptive model's steps + 1 (it has no grid)."""
    if result.grid is not None:
        return _grid_points(result.grid)
    per = result.extra.get("experiments")
    grids = ([e.get("grid") for e in per.values() if isinstance(e, dict)]
             if isinstance(per, dict) else [result.extra.get("grid")])
    return int(sum(g["k"] + 1 for g in grids if isinstance(g, dict) and "k" in g))


def certify(problem, result, models=None, fit_tol=FIT_TOL, shift_tol=SHIFT_TOL) -> GridCertificate:
    """The :class:`GridCertificate` of ``result`` (see the module docstring).

    ``models``: the reference simulators of :func:`reference_models` (built when
    None).  Never raises for a model the reference cannot simulate: the
    certificate then says so (``available=False`` with the reason, or a failed
    simulation as an infinite error).
    """
    base = dict(fit_tol=fit_tol, shift_tol=shift_tol, objective=float(result.objective),
                grid_points=_result_points(result))
    u = result.estimates.reindex(problem.parameter_names).to_numpy(dtype=float)
    if result.fitted is None or not np.all(np.isfinite(u)):
        return GridCertificate(False, reason="the result has no fitted values", **base)
    try:
        models = reference_models(problem) if models is None else models
    except (ProblemError, ValueError, TypeError, NotImplementedError) as err:
        return GridCertificate(False, reason=f"no reference simulation ({err})", **base)
    names = problem.experiment_names or [None]
    from ..discretization.continuous import IntegrationError
    try:
        e = fit_errors(problem, u, [_rows(result.fitted, n) for n in names],
                       [_rows(result.residuals, n) for n in names], models)
    except (IntegrationError, ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
        return GridCertificate(True, False, float("inf"), reason=(
            f"the reference simulation fails at the estimates ({err}): the discrete "
            f"solution may not exist for the ODE"), objective_simulated=float("nan"),
            **base)
    fit_error, errs, w_all, s = e.fit_error, e.errors, e.weights, e.scale
    free = e.free
    shift = _shift(problem, result, u, free, errs, w_all, s) if np.isfinite(fit_error) else {}
    cert = GridCertificate(True, fit_error=fit_error, shift=shift,
                           objective_simulated=e.objective_simulated,
                           sigma="known" if e.known else "residual", **base)
    cert.certified = bool(fit_error <= fit_tol and cert.max_shift <= shift_tol)
    return cert


@dataclass
class FitErrors:
    """The errors of discrete fitted values against the reference simulation
    (:func:`fit_errors`)."""

    fit_error: float            # largest, in units of σ (or of the residual scale)
    objective_simulated: float  # the objective of the reference simulation
    errors: list                # per experiment: z_h - z, 0 where nothing is measured
    weights: list               # per experiment: the weights, 0 where nothing is measured
    scale: float                # 1 (σ known) or the residual scale
    known: bool                 # σ known in every experiment
    free: list                  # free parameters not on a bound


def fit_errors(problem, u, fitted, residuals, models) -> FitErrors:
    """How far the discrete fitted values ``fitted`` (one frame per experiment, the
    experiment's observables as columns) are from the ODE's at ``u``: the module
    docstring's :math:`e_j` in units of σ, or of the residual scale computed from
    ``residuals`` when σ is unknown.  Raises what the reference simulation raises."""
    errs, w_all, r_all, rows = [], [], [], []
    J_sim = misfit_constant(problem)
    for sp, cm, fit, res in zip(problem.subproblems, models, fitted, residuals):
        with np.errstate(all="ignore"):
            z_ref = cm.observations(u).to_numpy(dtype=float)
            J_sim += cm.objective(u) - cm.constant
        # the experiment's own observables (the frames are stacked over their union)
        cols = list(sp.obs_names)
        z_h = fit[cols].to_numpy(dtype=float)
        mask = np.asarray(sp.mask, dtype=bool)
        w = np.where(mask, np.asarray(sp.weights, dtype=float), 0.0)
        errs.append(np.where(mask, z_h - z_ref, 0.0))
        w_all.append(w)
        r_all.append(np.where(mask, np.nan_to_num(res[cols].to_numpy(dtype=float)), 0.0))
        rows.append(mask)
    E = np.concatenate([e.ravel() for e in errs])
    W = np.concatenate([w.ravel() for w in w_all])
    R = np.concatenate([r.ravel() for r in r_all])
    M = np.concatenate([m.ravel() for m in rows])
    free = [k for k in np.flatnonzero(problem.free_mask) if not _at_bound(problem, k, u[k])]
    known = all(sp.sigma_known for sp in problem.subproblems)
    dof = int(M.sum()) - len(free)
    s = 1.0 if known or dof <= 0 else float(np.sqrt(np.sum(W * R ** 2) / dof))
    if not known:          # exact data: no smaller than 1e-4 of the data's (weighted) size
        Z = np.concatenate([np.where(m, np.nan_to_num(np.asarray(sp.data, dtype=float)), 0.0)
                            .ravel() for sp, m in zip(problem.subproblems, rows)])
        s = max(s, RESIDUAL_FLOOR * float(np.sqrt(np.sum(W * Z ** 2) / max(M.sum(), 1))))
    s = s if s > 0 else 1.0
    scaled = np.sqrt(W) * E / s
    fit_error = float(np.max(np.abs(scaled[M]))) if M.any() else 0.0
    if not np.isfinite(fit_error):
        fit_error = float("inf")
    return FitErrors(fit_error, float(J_sim), errs, w_all, s, known, free)


def _at_bound(problem, k, v, rtol=1e-6):
    p = problem.parameters[k]
    return any(b is not None and abs(v - b) <= rtol * max(1.0, abs(b)) for b in (p.lb, p.ub))


def _shift(problem, result, u, free, errs, w_all, s):
    """Free parameter -> |δ_k| / SE_k (the module docstring); {} without sensitivities."""
    if not free:
        return {}
    from ..discretization.discrete import SimulationError
    every = np.flatnonzero(problem.free_mask)
    cols = np.searchsorted(every, free)
    try:          # the approach's own backend: the post-solve checks reuse its factorization
        parts = result.backend.observation_sensitivities(u, every)
    except (SimulationError, ValueError, ArithmeticError, np.linalg.LinAlgError, RuntimeError):
        return {}
    A, b = [], []
    for (sp, S, _, _), e, w in zip(parts, errs, w_all):
        m = np.asarray(sp.mask, dtype=bool)
        sw = np.sqrt(w)[m]
        A.append(sw[:, None] * np.asarray(S, dtype=float)[:, :, cols][m])
        b.append(sw * e[m])
    A, b = np.vstack(A), np.concatenate(b)
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b))):
        return {}
    Ainv = np.linalg.pinv(A, rcond=1e-12)
    delta = Ainv @ b
    se = s * np.sqrt(np.sum(Ainv ** 2, axis=1))       # diag((AᵀA)⁺) = row norms of A⁺
    names = [problem.parameter_names[k] for k in free]
    return {n: float(abs(d) / v) if v > 0 else 0.0 for n, d, v in zip(names, delta, se)}


# ---------------------------------------------------------------------------
# refinement before convergence
# ---------------------------------------------------------------------------
class GridWatch:
    """Refinement before convergence: an intermediate callback of a solve on a grid
    that stops it where the grid no longer resolves the ODE at the iterate.

    An optimizer on a grid descends on the grid's objective, which may have minima
    the ODE does not have (the scheme's error grows with the parameters: faster
    spikes, stiffer rates).  Every ``every`` iterations or more, at an iterate that
    satisfies the scheme (``inf_pr <= feas_tol``), the watch takes
    the iterate's parameters and fitted values on the grid from ``point(x)`` and
    computes :func:`fit_errors` against the reference simulation there; above
    ``tol`` σ it stops the solve (Ipopt's ``User_Requested_Stop``) and keeps, in
    :attr:`state`, the iteration, the error and both objectives.  The refinement
    stage then refines the grid at that iterate and solves on from it
    (:func:`refine_until_certified`), instead of letting the optimizer run to a
    minimum of the grid, or to its time limit.

    The watch also keeps the best point it has judged: the iterate with the lowest
    simulated objective (the ODE's, not the grid's).  Where the optimizer descended
    on the grid while the ODE's objective rose (a descent into an artefact, from a
    start that was already good), the stage solves on from that point, not from
    where the watch stopped: each round starts from the best point known for the
    ODE problem.

    ``point(x)``: ``(u, fitted, residuals, objective on the grid)`` at the iterate
    ``x`` (the frames one per experiment, as :func:`fit_errors` takes them), or None
    where there is nothing to judge; it may raise where the point cannot be
    evaluated (not judged either: the solve goes on), as may the reference.  The
    watch may run in the isolated process of a solve with a time limit
    (``forkable``): it only reads.
    """

    forkable = True

    def __init__(self, problem, point, models, tol=WATCH_TOL, every=5, feas_tol=1e-5):
        self.problem, self.point, self.models = problem, point, models
        # the schedule counts iterations, not seconds: a result does not depend on
        # the machine's load
        self.tol, self.every, self.feas_tol = tol, every, feas_tol
        #: the record of the check that stopped the solve ({} while none did)
        self.state = {}
        self._last, self._spent, self._checks = None, 0.0, 0
        #: the judged iterate with the lowest simulated objective: ``(objective, u,
        #: iteration)`` (None while none was judged)
        self.best = None

    def __call__(self, iter_count, obj_value, inf_pr, inf_du, mu, iterate):
        now = time.perf_counter()
        if (inf_pr > self.feas_tol
                or (self._last is not None and iter_count - self._last < self.every)):
            return True
        self._last = iter_count
        try:
            e = self.errors(iterate(), iter_count)
        except Exception:                       # noqa: BLE001 - not judged where it cannot be
            return True
        finally:
            self._checks += 1
            self._spent += time.perf_counter() - now
        if e is None or e[0] <= self.tol:
            return True
        self.state = dict(iteration=int(iter_count), fit_error=float(e[0]),
                          objective=float(e[1]), objective_simulated=float(e[2]),
                          tol=float(self.tol), checks=self._checks,
                          seconds=float(self._spent))
        if self.best is not None and self.best[0] < float(e[2]):
            self.state["best"] = dict(objective_simulated=self.best[0],
                                      estimates=list(self.best[1]), iteration=self.best[2])
        return False

    def errors(self, x, iteration=None):
        """(fit error, objective on the grid, simulated objective) at the iterate ``x``,
        or None; the iterate is the :attr:`best` when its simulated objective is the
        lowest so far."""
        got = self.point(x)
        if got is None:
            return None
        u, fitted, resid, objective = got
        if not np.all(np.isfinite(u)):
            return None
        e = fit_errors(self.problem, u, fitted, resid, self.models)
        js = float(e.objective_simulated)
        if np.isfinite(js) and (self.best is None or js < self.best[0]):
            self.best = (js, [float(v) for v in u], None if iteration is None else int(iteration))
        return e.fit_error, float(objective), js

    def describe(self) -> str:
        """One line on the check that stopped the solve."""
        s = self.state
        best = s.get("best")
        return (f"stopped at iteration {s['iteration']}: the grid does not resolve the ODE "
                f"at the iterate (fitted values {s['fit_error']:.3g} σ off the ODE's, "
                f"watch_tol {s['tol']:g}; objective {s['objective']:.8g} on the grid, "
                f"{s['objective_simulated']:.8g} by {REFERENCE_METHOD})"
                + (f"; the best iterate for the ODE was at iteration {best['iteration']} "
                   f"({best['objective_simulated']:.8g} by {REFERENCE_METHOD})" if best else ""))


def grid_fits(parts, u):
    """The fitted values and residuals on a grid, one frame each per experiment, as
    :meth:`GridWatch.errors` takes them: ``parts`` yields ``(experiment problem, grid
    times, states on the grid, measurement indices)``."""
    fitted, resid = [], []
    for sp, t, X, J in parts:
        fr = fit_frames(sp, t, X, X[np.asarray(J)], u)
        fitted.append(fr["fitted"])
        resid.append(fr["residuals"])
    return fitted, resid


def watch_of(cfg, problem, point):
    """The :class:`GridWatch` of a solve on a grid that the stage may refine (``certify``
    on, refinement rounds left, ``watch_tol > 0``, no model given), or None."""
    given = "model" in cfg and cfg["model"] is not None
    if not (cfg["certify"] and cfg["max_refinements"] > 0 and cfg["watch_tol"] > 0
            and not given):
        return None
    try:
        models = reference_models(problem)
    except (ProblemError, ValueError, TypeError, NotImplementedError):
        return None
    return GridWatch(problem, point, models, tol=cfg["watch_tol"])


def watch_outcome(out, watch):
    """The outcome of a solve the watch stopped: the status
    :attr:`Status.NOT_RESOLVED` with the watch's reason, its record in
    ``details['grid_watch']`` (the result's ``extra['grid_watch']``)."""
    if watch is not None and watch.state:
        out.details["grid_watch"] = dict(watch.state)
        demote(out, Status.NOT_RESOLVED, watch.describe(), force=True)
    return out


# ---------------------------------------------------------------------------
# refinement
# ---------------------------------------------------------------------------
def _grids(result, problem):
    g = result.grid
    names = problem.experiment_names or [None]
    return [g[n] if n is not None else g for n in names]


def refine(problem, result, cert, scheme, safety=2.0, max_factor=8, min_factor=0.25):
    """The next grid(s) of ``result``: each interval between required points
    (measurement times, t0, T, switching times) gets equal steps, as many as
    make the local error density :math:`\\hat d_i/h_i` of the scheme's
    :func:`~pyomo_odeest.discretization.schemes.local_errors` (states scaled by
    their largest magnitude) equal across the grid and its sum
    ``ratio * safety`` times smaller, ``ratio = max(fit_error/fit_tol,
    max_shift/shift_tol)`` (equidistribution); an interval's number of steps
    grows by at most ``max_factor`` and shrinks (by at most ``min_factor``) only
    where the error density is below 1 % of the level; the grid grows by at least
    half.  Returns a Grid, or a
    mapping experiment -> Grid; None when a grid would exceed
    :data:`MAX_GRID_POINTS`.
    """
    u = result.estimates.reindex(problem.parameter_names).to_numpy(dtype=float)
    ratio = max(cert.fit_error / cert.fit_tol, cert.max_shift / cert.shift_tol, 1.0)
    p = max(int(scheme.startup_order), 1)
    names = problem.experiment_names or [None]
    out = {}
    for name, sp, grid in zip(names, problem.subproblems, _grids(result, problem)):
        X = _rows(result.states, name).to_numpy(dtype=float)
        F = VectorFn(sp.f_sym, sp.x_sym, sp.u_sym, sp.t_sym)(X, u, grid.t)
        d = local_errors(scheme, grid, X, F)
        scale = np.max(np.abs(X), axis=0) + 1e-300
        eta = np.max(np.abs(d) / scale, axis=1)
        eta = np.where(np.isfinite(eta), eta, np.nanmax(np.where(np.isfinite(eta), eta, 0)) + 1)
        h = grid.h
        span = float(grid.t[-1] - grid.t[0])
        theta = eta.sum() / (ratio * safety * span)
        dens = eta / h
        with np.errstate(divide="ignore", invalid="ignore"):
            h_new = np.where(dens > 0, h * (theta / dens) ** (1.0 / p), np.inf)
        need = h / h_new                                       # new steps per old step
        req = grid.required_indices()
        counts, old = [], []
        for a, b in zip(req[:-1], req[1:]):
            n_old = b - a
            old.append(n_old)
            if grid.t[b] - grid.t[a] <= 1e-12 * span:          # a switching time's twin step
                counts.append(1)
                continue
            n = int(np.ceil(need[a:b].sum()))
            # coarsen only where the error density is far below the level (its estimate
            # may be round-off there); never more than min_factor
            low = (n_old if np.max(dens[a:b]) > 1e-2 * theta
                   else max(1, int(np.ceil(n_old * min_factor))))
            counts.append(int(np.clip(n, low, n_old * max_factor)))
        if sum(counts) < 1.5 * sum(old):      # not certified: the grid must grow
            counts = [c if c == 1 and o == 1 else max(c, int(np.ceil(1.5 * o)))
                      for c, o in zip(counts, old)]
        new = subdivide(grid, counts)
        if len(new) > MAX_GRID_POINTS:
            return None
        out[name] = new
    return out if problem.experiment_names else out[None]


def refine_until_certified(approach, problem, cfg, result, solve):
    """The refinement stage: certify ``result``; while not certified, refine its
    grid (:func:`refine`) and ``solve(cfg)`` again from its estimates, at most
    ``cfg.max_refinements`` times.  Puts the certificate on
    ``result.extra['certificate']`` (a dict) and the rounds on
    ``result.extra['refinement']``; a result whose grid ends uncertified has the
    status :attr:`Status.NOT_RESOLVED` when it had a successful one.  A result
    without a grid (the adaptive model's steps are its own) is certified, not
    refined; options the approach does not have take the module's defaults."""
    t_start = time.perf_counter()
    # an approach without a grid of its own to refine (the adaptive model, which
    # refines its steps by its fit_tol) is certified only; its unresolved_advice says how
    fit_tol = cfg["fit_tol"] if "fit_tol" in cfg and cfg["fit_tol"] is not None else FIT_TOL
    shift_tol = cfg["shift_tol"] if "shift_tol" in cfg else SHIFT_TOL
    max_rounds = cfg["max_refinements"] if "max_refinements" in cfg else 0
    models = None
    try:
        models = reference_models(problem)
    except (ProblemError, ValueError, TypeError, NotImplementedError):
        pass
    rounds = []
    given = "model" in cfg and cfg["model"] is not None
    region = None                # the round's trust region: (centre, radius), _next_region
    while True:
        cert = certify(problem, result, models, fit_tol, shift_tol)
        active = (result.extra.get("region") or {}).get("active") or []
        rounds.append(dict(round=len(rounds), grid_points=cert.grid_points,
                           objective=cert.objective,
                           objective_simulated=cert.objective_simulated,
                           fit_error=cert.fit_error, max_shift=cert.max_shift,
                           status=str(result.status),
                           estimates={k: float(v) for k, v in result.estimates.items()},
                           seconds=float(result.timings.get("total_s", np.nan)),
                           **({"watch": dict(result.extra["grid_watch"])}
                              if result.extra.get("grid_watch") else {}),
                           **({"region": dict(radius=region[1], active=active)}
                              if region else {})))
        if result.grid is None and cert.available and not cert.certified:
            cert.reason = f"no grid to refine: {approach.unresolved_advice}".rstrip(": ")
        # a solve the watch stopped (refinement before convergence) is refined like a
        # successful one: its iterate is where the grid stopped resolving the ODE
        watched = bool(result.extra.get("grid_watch"))
        # a first solve that failed where its grid does not resolve the ODE at the
        # point it reached, or where the scheme is unstable there: the failure may be
        # the grid's, and the next round solves on from that point on a refined grid
        # (on Enright's scheme where it is stiff)
        failed_first = (len(rounds) == 1 and not watched and result.status in SALVAGED
                        and cert.available and result.grid is not None
                        and bool(np.all(np.isfinite(result.x))))
        stiff_failed = (_stiff_at(problem, result, scheme_of(result.scheme),
                                  where=f"where the first solve ended {result.status}")
                        if failed_first and "scheme" not in approach.given else None)
        salvage = failed_first and (cert.fit_error > fit_tol or bool(stiff_failed))
        # certified, but held by the stage's trust region: free on the same grid
        widen = bool(active) and region is not None
        if ((cert.certified and not widen and not salvage) or not cert.available or given
                or not (result.success or watched or salvage)
                or result.grid is None or len(rounds) > max_rounds):
            break
        if "region" in cfg and cfg["region"] is None:  # a region given is kept as given
            region = _next_region(problem, result)
        scheme = scheme_of(result.scheme)
        stiff = (stiff_failed if salvage else
                 None if "scheme" in approach.given else _stiff_at(problem, result, scheme))
        if stiff:                  # unstable at the estimates: Enright on the same grid
            grid, scheme = result.grid, get_scheme(STIFF_SCHEME, scheme.qmax)
        elif cert.certified:       # held by the region only (or failed on a grid that
            # resolves its point): the same grid, free
            grid = result.grid
        else:
            grid = refine(problem, result, cert, scheme)
        if grid is None:
            cert.reason = f"a finer grid would exceed {MAX_GRID_POINTS} points"
            break
        short = _short_of_time(result, grid)
        if short:
            cert.reason = short
            break
        nxt = _with(approach, cfg, grid=grid, max_step=None, steps_per_interval=None,
                    scheme=scheme, qmax=scheme.qmax,       # the scheme solved (maybe switched)
                    u0=_inside_bounds(problem, region[0] if region else result.estimates),
                    **({"region": _box(problem, *region)} if region else {}),
                    # the rounds left after this one (the watch stops a solve only
                    # where a round is left to refine it)
                    **({"max_refinements": max_rounds - len(rounds)}
                       if "max_refinements" in cfg else {}))
        new = solve(nxt)
        if (not new.success and not new.extra.get("grid_watch") and not stiff
                and "scheme" not in approach.given and scheme.name != STIFF_SCHEME):
            # the refined solve did not converge on an explicit scheme: where the
            # optimizer went may be stiff for it; the same round on Enright's scheme
            stiff = (f"the solve on the refined grid ({_grid_points(grid)} points) with "
                     f"{scheme.name} ended {new.status}; solved with scheme="
                     f"{STIFF_SCHEME!r} (give scheme= to choose)")
            new = solve(_with(approach, nxt, scheme=get_scheme(STIFF_SCHEME, scheme.qmax)))
        if stiff and new.success:
            new.warnings.insert(0, stiff)
        if not new.success and new.extra.get("grid_watch"):
            result = new                       # stopped by the watch: refined next round
            continue
        if not new.success:                    # keep the last successful solve
            rounds.append(dict(round=len(rounds), grid_points=_grid_points(grid),
                               status=str(new.status), objective=float(new.objective),
                               seconds=float(new.timings.get("total_s", np.nan)),
                               **({"region": dict(radius=region[1], active=(
                                   new.extra.get("region") or {}).get("active") or [])}
                                  if region else {})))
            if not result.success:             # the watch stopped the one before: the
                result = new                   # newer, on the finer grid, says more
                cert = certify(problem, result, models, fit_tol, shift_tol)
            cert.reason = f"the solve on the refined grid ended {new.status}"
            break
        result = new
    result.extra["certificate"] = cert.to_dict()
    result.extra["refinement"] = rounds
    held = (result.extra.get("region") or {}).get("active")
    if held and result.success:
        whose = ("the region given (region=)" if "region" in cfg and cfg["region"]
                 else "the refinement stage's trust region (the descent on the grid left "
                      "what the grid resolves, and no round was left to solve on from "
                      "there without it)")
        demote(result, Status.NOT_STATIONARY,
               f"the estimates of {', '.join(held)} lie on the bound of {whose}: the best "
               f"point found in it, not a minimum")
    result.timings["certify_s"] = time.perf_counter() - t_start
    result.timings["total_s"] = time.perf_counter() - t_start + rounds[0]["seconds"]
    if not cert.available and result.success:
        result.warnings.append(f"{cert.describe()}; the estimates are those of the grid only")
    elif not cert.certified:
        demote(result, Status.NOT_RESOLVED, cert.describe())
    return result


def _short_of_time(result, grid):
    """Why no round is started on ``grid`` (a reason), or None: the time left to the
    deadline of the estimate (``max_wall_time``) is less than twice what the round's
    set-up would take, the last round's build time scaled by the growth of the grid
    (a round must have as long to solve as to build; a round started without that
    time ends at the limit having only built its model, past the deadline)."""
    left = time_left()
    if left is None:
        return None
    grown = _grid_points(grid) / max(1, _grid_points(result.grid))
    need = 2.0 * float(result.timings.get("build_s", 0.0)) * max(1.0, grown)
    if left > need:
        return None
    return (f"the time limit (max_wall_time) left {left:.1f} s, less than another round "
            f"on {_grid_points(grid)} points needs (about {need:.1f} s to build and solve)")


def _stiff_at(problem, result, scheme, where="at the estimates"):
    """Why the result's grid is unstable for ``scheme`` at its estimates
    (:func:`~pyomo_odeest.discretization.schemes.stiff_switch` along its states, on
    each experiment's grid), or None: the optimizer moved where the scheme it started
    on is not stable, so the stage switches to Enright's scheme instead of refining."""
    if result.states is None or result.grid is None:
        return None
    u = result.estimates.reindex(problem.parameter_names).to_numpy(dtype=float)
    names = problem.experiment_names or [None]
    for name, sp, grid in zip(names, problem.subproblems, _grids(result, problem)):
        X = _rows(result.states, name)
        if X is None or len(X) != len(grid.t):
            return None
        why = stiff_switch(sp, scheme, grid.t, X.to_numpy(dtype=float), u, where=where)
        if why:
            return why
    return None


def _next_region(problem, result):
    """The trust region of the next round, ``(centre, radius)``, or None.

    Where the watch stopped the solve after the ODE's objective rose (its ``best``
    iterate is lower, by simulation, than where it stopped), the grid's descent went
    into an artefact: the next round is confined to a box around that best point
    whose radius is half the distance the solve went from it (the parameters scaled
    by max(1, |centre|), the largest component).  The discrete problem is a model of
    the ODE problem, trusted only where its descent was also the ODE's (trust region
    model management).  A round after one whose solve the watch did not stop so is
    free again, from that round's estimates: the region keeps the optimizer out of one
    artefact, it does not bound the search."""
    best = (result.extra.get("grid_watch") or {}).get("best")
    if best is None:
        return None
    centre = pd.Series(best["estimates"], index=problem.parameter_names, dtype=float)
    u = result.estimates
    radius = 0.5 * max((abs(float(u[k]) - c) / s for k, (c, s) in _metric(problem, centre)),
                       default=0.0)
    return (centre, radius) if radius > 0 else None


def _metric(problem, centre):
    """``(name, (c_k, max(1, |c_k|)))`` of the free parameters: the trust region's
    centre and scale per parameter."""
    return [(p.name, (float(centre[p.name]), max(1.0, abs(float(centre[p.name])))))
            for p in problem.parameters if not p.fixed]


def _box(problem, centre, radius):
    """The trust region as the approaches take it (``region=``): name -> (low, high)."""
    return {k: (c - radius * s, c + radius * s) for k, (c, s) in _metric(problem, centre)}


def _inside_bounds(problem, estimates):
    """The estimates as a start: round-off beyond a bound (Ipopt's bound relaxation)
    moved back onto it."""
    u = estimates.reindex(problem.parameter_names).astype(float).copy()
    for p in problem.parameters:
        if not p.fixed:
            u[p.name] = float(np.clip(u[p.name], *p.bounds))
    return u
