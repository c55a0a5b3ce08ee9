r"""Sanity checks on every estimation result, reported as warnings on the result.

A solver's "success" says that a (local) optimum of the *discretized* problem
was found, not that it answers the question.  :func:`diagnose` adds a warning
to :attr:`EstimationResult.warnings` for no convergence, a worse objective than
at the start, a χ² inconsistent with σ, a parameter at a bound, a
stability-limited discretization (:func:`amplification`), rank deficiency and
a discretization error (:func:`simulation_warning`); see docs/checks.md,
"After the solve".
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..discretization.schemes import amplification, stable_schemes, stiff_point
from ..problem._status import Status, demote

__all__ = ["diagnose", "amplification", "stability_warnings", "chi2_warning",
           "bound_warnings", "rank_warnings", "status_warning", "simulation_warning",
           "stationarity_status", "end_objective", "SIMULATION_RTOL"]

#: Relative singular-value threshold (of the scaled Gauss–Newton matrix).
RANK_RTOL = 1e-10
#: Relative disagreement of the discrete and the simulated objective that is flagged.
SIMULATION_RTOL = 0.05


def stability_warnings(problem, scheme, states, u):
    r"""Warnings when :math:`h_i\,\mathrm{eig}(\partial f/\partial x)` leaves the stability region.

    ``states`` is the result's state frame (index = grid times); the search is
    :func:`~pyomo_odeest.discretization.schemes.stiff_point` (see docs/checks.md,
    "stiffness").
    """
    if states is None or scheme is None or len(states) < 2:
        return []
    worst = stiff_point(problem, scheme, states.index.to_numpy(dtype=float),
                        states.to_numpy(dtype=float), u)
    if worst is None:
        return []
    rho, z, ti, hi, beyond = worst
    where = "outside" if beyond else "on the edge of"
    stable = stable_schemes(scheme, z)
    use = (f"use scheme={' or '.join(repr(n) for n in stable)} (stable at this h*lambda), or "
           if stable else "use ")
    return [f"stiff: at t={ti:.4g} the step h={hi:.3g} times an eigenvalue of df/dx gives "
            f"h*lambda={z.real:.3g}{z.imag:+.3g}j, {where} the absolute stability region of "
            f"{scheme.name} (qmax={scheme.qmax}; amplification {rho:.3g}): the estimate may fit a "
            f"discretization artefact; {use}a finer grid (smaller max_step / more "
            f"steps_per_interval)"]


# ---------------------------------------------------------------------------
# noise level, bounds, rank, status
# ---------------------------------------------------------------------------
def chi2_warning(problem, result):
    """The χ² test of :func:`~pyomo_odeest.problem._noise.noise_check` (σ known),
    stored in ``result.extra['noise_check']``; its message when the fit is
    inconsistent with the noise level (χ² and measured values summed over the
    experiments of a problem with several)."""
    from ..problem._noise import noise_check
    chk = noise_check(problem, result)
    result.extra["noise_check"] = chk
    if chk["consistent"] is not False:
        return []
    too_small = chk["p_upper"] >= chk["p_lower"]
    if too_small and not result.success:     # e.g. shooting nodes on the data, not a fit
        return []
    advice = ("sigma is probably too large" if too_small else
              "try another start u0 or approach, check the model and sigma (too small?)")
    return [f"{chk['message']}; {advice}"]


def bound_warnings(problem, result, curv=None, rtol=1e-6):
    """Warnings for parameters at a bound; round-off outside a bound is clipped back.

    A parameter within ``rtol·max(1, |b|, |u|)`` of a bound ``b`` is reported at it
    only where the bound holds it: where the sensitivities ``curv`` are known, the
    Gauss–Newton step without the bounds would carry it across ``b``
    (:func:`_free_step`).  A small parameter near the bound 0 that the data
    determine (k = 4.6e-14 where the optimum is 8e-14) is not "at its bound", nor is
    any parameter of a result that did not converge (its point is not a minimum)."""
    out = []
    _clip_round_off(problem, result, rtol)
    u = result.estimates.to_numpy(dtype=float).copy()
    step = _free_step(curv)
    for k, p in enumerate(problem.parameters):
        if p.fixed:
            continue
        if p.lb is not None and p.lb == p.ub:
            u[k] = p.lb
            out.append(f"parameter '{p.name}' has lb = ub = {p.lb:g}: its bounds fix it, it "
                       f"was not estimated (declare it fixed=True, or widen the bounds)")
            continue
        for b, side in ((p.lb, "lower"), (p.ub, "upper")):
            if b is None or not np.isfinite(u[k]):
                continue
            outside = u[k] < b if side == "lower" else u[k] > b
            if abs(u[k] - b) <= rtol * max(1.0, abs(b), abs(u[k])):
                if not result.success:                  # not a minimum: no claim on the data
                    continue
                if step is not None and k in step and np.isfinite(step[k]) and not (
                        u[k] + step[k] < b if side == "lower" else u[k] + step[k] > b):
                    continue                            # near it, not held by it
                out.append(f"parameter '{p.name}' = {u[k]:.6g} is at its {side} bound {b:g}: the "
                           f"data may prefer a value beyond it; widen the bound if it is not "
                           f"physical, and treat this estimate's uncertainty with care")
            elif outside:
                out.append(f"parameter '{p.name}' = {u[k]:.6g} violates its {side} bound {b:g}")
    return out


def _clip_round_off(problem, result, rtol=1e-6):
    """Round-off of the solver outside a bound (its bound relaxation) clipped back."""
    u = result.estimates.to_numpy(dtype=float).copy()
    for k, p in enumerate(problem.parameters):
        if p.fixed or not np.isfinite(u[k]):
            continue
        for b, below in ((p.lb, True), (p.ub, False)):
            if b is not None and (u[k] < b if below else u[k] > b) and \
                    abs(u[k] - b) <= rtol * max(1.0, abs(b), abs(u[k])):
                u[k] = b
    result.estimates[:] = u


def _free_step(curv):
    """``{parameter index: Gauss–Newton step}`` of the free parameters without their
    bounds, from the sensitivities ``curv`` (columns scaled to unit norm before the
    least squares); None when they are not known."""
    if curv is None:
        return None
    try:
        D, rho = curv.scaled_rows(), curv.scaled_residuals()
    except (ValueError, np.linalg.LinAlgError):
        return None
    if D.size == 0 or not (np.all(np.isfinite(D)) and np.all(np.isfinite(rho))):
        return None
    n = np.linalg.norm(D, axis=0)
    n[n == 0] = 1.0
    s = np.linalg.lstsq(D / n, -rho, rcond=None)[0] / n
    return dict(zip((int(k) for k in curv.free), s))


def _gauss_newton(problem, result):
    """Gauss–Newton matrix of the free parameters at the estimates, from the
    result's backend (or None)."""
    from ..discretization.discrete import SimulationError
    u = result.estimates.to_numpy(dtype=float)
    try:
        return result.backend.gauss_newton(u, np.flatnonzero(problem.free_mask))
    except (SimulationError, ValueError, ArithmeticError, np.linalg.LinAlgError, RuntimeError):
        return None


def _curvature(problem, result):
    """The sensitivities at the estimates from the result's backend (None when they
    cannot be had: no backend, a failed simulation, ...)."""
    if getattr(result, "backend", None) is None or not np.all(np.isfinite(result.x)):
        return None
    try:
        from ._uncertainty import curvature
        return curvature(result, problem=problem)
    except Exception:                        # noqa: BLE001 - the checks that need it skip
        return None


def stationarity_status(problem, result, curv):
    r"""The one stationarity rule (:func:`~pyomo_odeest.nlp.judge_stop`) applied to a
    success that the approach did not judge by it: the decrease of J that the
    Gauss–Newton model predicts within the bounds, from the backend's
    sensitivities at the estimates, must be at most
    :func:`~pyomo_odeest.nlp.decrement_limit` (absolute, in the units of J).
    Otherwise the status becomes ``NOT_STATIONARY`` (numbers in
    ``result.extra['stationarity']``).  Applies where J is a sum of squares (no
    constraints, no penalty) and the backend reproduces the objective that was
    minimized (:math:`\kappa\cdot\tfrac12\lVert\rho\rVert^2 + c = J` to 1e-6: not
    the adaptive approach, whose backend is another discretization)."""
    from ..nlp._stationarity import decrement_limit, gauss_newton_decrement, judge_stop
    from ..problem._misfit import misfit_constant
    st = result.extra.get("stationarity")
    if not result.success or curv is None or (isinstance(st, dict) and st.get("rule")):
        return []
    parts = getattr(curv, "parts", [curv])
    if getattr(problem, "has_constraints", False) or any(c.misfit.has_penalty for c in parts):
        return []
    try:
        rho, D = curv.scaled_residuals(), curv.scaled_rows()
    except (ValueError, np.linalg.LinAlgError):
        return []
    kappa = curv.kappa
    jc = kappa * 0.5 * float(rho @ rho)
    J = float(result.objective) - misfit_constant(problem)
    if not (np.isfinite(jc) and np.isfinite(J)) or abs(jc - J) > 1e-6 * max(1.0, abs(J)):
        return []                            # not the objective the optimizer minimized
    u = curv.u[curv.free]
    lb, ub = problem.bounds(curv.free)
    lo, hi = lb - u, ub - u
    dec, _ = gauss_newton_decrement(D, rho, lo, hi)
    dec = kappa * dec                        # NLL units -> units of J
    ok, rule = judge_stop(dec, jc)
    if rule is None:
        return []
    result.extra["stationarity"] = dict(st or {}, gauss_newton_decrement=dec,
                                        decrement_limit=decrement_limit(jc), rule=rule)
    if ok:
        return []
    demote(result, Status.NOT_STATIONARY, f"not stationary: Gauss-Newton predicted decrease "
           f"{dec:.2g} > {decrement_limit(jc):.2g}")
    return []


def rank_warnings(problem, result, curv=None):
    """Fewer measurements than free parameters, or a numerically singular Gauss–Newton matrix."""
    subs = problem.subproblems
    N = sum(int(sp.mask.sum()) for sp in subs)
    free = problem.free_mask
    p = int(free.sum())
    names = [n for n, f in zip(problem.parameter_names, free) if f]
    if N < p:
        return [f"rank-deficient: {N} measurements for {p} free parameters {names}: the "
                f"estimates are not determined by the data; fix parameters or add data"]
    if p == 0:
        return []
    from ..discretization.continuous import cvodes_failure
    if cvodes_failure(result.message) is not None:
        return []                            # the integrator failed: no sensitivities to judge
    try:                                     # the uncertainty module's report, when it applies
        from ._identifiability import identifiability_report
        rep = identifiability_report(result, problem=problem, curv=curv)
    except Exception:                        # noqa: BLE001 - fall back to the Gauss-Newton check
        rep = None
    if rep is not None:
        keys = ("fewer informative", "rank-deficient", "do not depend on")
        return [f"rank-deficient: {w}" if not w.startswith("rank") else w
                for w in rep.warnings if any(k in w for k in keys)]
    if len(subs) > 1:
        return []
    H = _gauss_newton(problem, result)
    if H is None or not np.all(np.isfinite(H)):
        return []
    u = result.estimates.to_numpy(dtype=float)[free]
    d = np.where(np.abs(u) > 0, np.abs(u), 1.0)
    Hs = d[:, None] * H * d[None, :]
    w, V = np.linalg.eigh(0.5 * (Hs + Hs.T))
    if w[-1] <= 0:
        return [f"rank-deficient: the misfit does not depend on the parameters {names} at the "
                f"estimates (zero sensitivities)"]
    if w[0] <= RANK_RTOL * w[-1]:
        v = V[:, 0]
        combo = " ".join(f"{c:+.2f}*{n}" for c, n in zip(v, names) if abs(c) > 0.1)
        return [f"rank-deficient: the Gauss-Newton matrix is numerically singular (eigenvalue "
                f"ratio {max(w[0], 0) / w[-1]:.2g}); the relative direction {combo} is not "
                f"identifiable from the data; fix a parameter, add data or a penalty"]
    return []


def simulation_warning(problem, result, rtol=SIMULATION_RTOL, sim_rtol=1e-8, sim_atol=1e-10):
    r"""Compare the discrete objective with an independent simulation at the estimates.

    The misfit at the estimates is recomputed by the continuous approach's
    adaptive integrator (:class:`~pyomo_odeest.approaches.ContinuousModel`,
    LSODA at ``sim_rtol``; one per experiment).  The result is flagged when

    .. math:: |J_h(\hat u) - J(\hat u)| > \mathrm{rtol}\cdot\max(|J_h|, |J|) + a,

    with :math:`a = \kappa/2` when σ is known and otherwise
    :math:`a = 10^{-6}\sum_j w_j\bar z_j^2` (see docs/checks.md), or when the
    simulation fails.  Stores ``result.extra['simulated_objective']`` (None
    when the check does not apply: no grid, inputs with switching times, path
    constraints).
    """
    from ..discretization.continuous import ContinuousModel, IntegrationError
    from ..problem._declaration import ProblemError
    from ._uncertainty import nll_factor
    if not np.isfinite(result.objective):
        return []
    cert = result.extra.get("certificate")
    if cert and cert.get("available"):             # the refinement stage simulated already
        from ..approaches._certificate import GridCertificate
        cert = GridCertificate.from_dict(cert)
        result.extra["simulated_objective"] = cert.objective_simulated
        if cert.certified:
            return []
        return [f"discretization error: {cert.describe()}: the estimate may be an optimum of "
                f"the discretization only; raise max_refinements, refine the first grid "
                f"(smaller max_step / more steps_per_interval; for stiff problems "
                f"scheme='enright'), or use the continuous approach"]
    if result.grid is None:        # not the objective of a discretization on a grid
        return []
    u = result.estimates.reindex(problem.parameter_names).to_numpy(dtype=float)
    if not np.all(np.isfinite(u)):
        return []
    subs = problem.subproblems
    try:
        models = [ContinuousModel(sp, method="LSODA", rtol=sim_rtol, atol=sim_atol)
                  for sp in subs]
    except (ProblemError, ValueError, TypeError):
        result.extra["simulated_objective"] = None
        return []
    from ..problem._misfit import misfit_constant
    try:
        J_sim = float(sum(cm.objective(u) - cm.constant for cm in models))
    except (IntegrationError, ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
        result.extra["simulated_objective"] = np.nan
        return [f"the independent simulation (LSODA, rtol={sim_rtol:g}) fails at the estimates "
                f"({err}): the discrete solution the estimate fits may not exist for the ODE; "
                f"use a finer grid (smaller max_step / more steps_per_interval) or another start"]
    result.extra["simulated_objective"] = J_sim + misfit_constant(problem)
    J_d = float(result.objective) - misfit_constant(problem)
    if all(sp.sigma_known for sp in subs):
        atol = 0.5 * nll_factor(problem)
    else:
        atol = 1e-6 * sum(float(np.sum(np.where(sp.mask, np.asarray(sp.weights, float)
                                                 * np.nan_to_num(sp.data.to_numpy(float)) ** 2,
                                                 0.0))) for sp in subs)
    if not np.isfinite(J_sim) or abs(J_d - J_sim) > rtol * max(abs(J_d), abs(J_sim)) + atol:
        return [f"discretization error: the objective at the estimates is {J_d:.6g} on the "
                f"approach's grid but {J_sim:.6g} by an independent simulation (LSODA, "
                f"rtol={sim_rtol:g}): the grid does not resolve the solution at the estimates, "
                f"and the estimate may be an optimum of the discretization only; refit on a "
                f"finer grid (smaller max_step / more steps_per_interval; for stiff problems "
                f"scheme='enright') or with the continuous approach"]
    return []


def end_objective(table) -> pd.Series:
    """The objective of each end point by the independent simulation where the table
    has it (``simulated_objective``: the ODE's, not the grid's), else its objective."""
    obj = table["objective"].astype(float) if "objective" in table else pd.Series(
        np.nan, index=table.index)
    if "simulated_objective" in table:
        sim = table["simulated_objective"].astype(float)
        obj = sim.where(np.isfinite(sim), obj)
    return obj


_ADVICE = {
    Status.MAX_ITERATIONS: "the iteration limit was reached",
    Status.TIME_LIMIT: "the time limit (max_wall_time) was reached",
    Status.EVALUATION_ERRORS: "the optimizer kept stepping where the model cannot be evaluated",
    Status.SIMULATION_FAILED: "the model cannot be simulated",
    Status.NOT_STATIONARY: "the optimizer stopped where the gradient is not small",
    Status.INFEASIBLE: "the constraints cannot be satisfied",
}


#: states all smaller than this (in absolute value) are "tiny": see :func:`_scale_advice`
TINY_STATES = 1e-6


def _scale_advice(result):
    """Advice for a problem whose states are all tiny (max |x| < :data:`TINY_STATES`),
    or '' : there the integrator's absolute tolerance (``atol``, 1e-12 by default) and
    the optimizer's absolute tests are of the size of the solution itself."""
    frame = result.states if result.states is not None else result.fitted
    if frame is None:
        return ""
    x = np.abs(frame.to_numpy(dtype=float))
    x = x[np.isfinite(x)]
    if not x.size or x.max() >= TINY_STATES:
        return ""
    size = float(x.max())
    atol = (result.extra.get("integrator") or {}).get("atol")
    near = (f", near or below the integrator's absolute tolerance atol={atol:g}"
            if atol is not None and size < 1e4 * atol else "")
    return (f"the states are tiny (largest |x| = {size:.3g}{near}), so absolute tolerances "
            f"are of the size of the solution: rescale the model (other units, so that the "
            f"states are of order 1)"
            + (f", or set atol far below the states' size (e.g. atol={size * 1e-8:.0e})"
               if atol is not None else "")
            + "; another start or sigma does not change this")


def status_warning(result):
    """A warning with advice when the estimation did not end at an optimum."""
    if result.success:
        return []
    if result.status is Status.NOT_RESOLVED:      # the grid is why
        watched = result.extra.get("grid_watch")
        what = ("the solve was stopped where its iterate left what the grid resolves, and "
                "no refinement solved on from there" if watched else
                "the optimizer converged, but on a discretization that does not resolve the "
                "ODE at its estimates")
        kind = ("a point of the descent on the discretization, not an optimum" if watched
                else "an optimum of the discretization, not of the ODE problem")
        return [f"not resolved: {what} ({result.message}); the estimates are {kind}: "
                f"refine it (a "
                f"finer grid or more max_refinements; for the adaptive approach a smaller "
                f"fit_tol or eps; scheme='enright' where the model is stiff), or use the "
                f"continuous approach"]
    why = _ADVICE.get(result.status, f"the optimizer ended with status {result.status}")
    from ..discretization.continuous import cvodes_failure
    cvodes = cvodes_failure(result.message)
    if cvodes is not None:                   # the integrator's cause, not the start's
        flag, meaning, remedy = cvodes
        meaning = meaning.format(max_num_steps="max_num_steps")   # the number: in the message
        return [f"not converged: {why} ({result.status}, {result.iterations} iterations): "
                f"the integrator CVODES stopped with {flag}: {meaning}; the estimates are "
                f"not an optimum; {remedy}"]
    scale = _scale_advice(result)
    if scale:                                # the scale is the cause, not the start
        return [f"not converged: {why} ({result.status}: {result.message}, "
                f"{result.iterations} iterations); the estimates are not an optimum; {scale}"]
    advice = "try a start closer to the solution (u0)"
    if result.extra.get("advice"):                       # the approach's own (pipeline)
        advice += ", " + result.extra["advice"]
    advice += ", another approach (multiple_shooting starts from the data)"
    name = getattr(result.scheme, "name", "")
    advice += (", or a finer grid" if name == "enright"
               else ", or for stiff problems scheme='enright' and a finer grid")
    return [f"not converged: {why} ({result.status}: {result.message}, {result.iterations} "
            f"iterations); the estimates are not an optimum; {advice}"]


def start_warning(result):
    """A converged result whose objective is above its value at the start: the
    optimizer left the start (Ipopt first moves a start on or near a bound into the
    interior, by ``bound_push``/``bound_frac``) and ended at a worse stationary point."""
    j0, j = result.extra.get("objective_start", np.nan), result.objective
    if not (result.success and np.isfinite(j0) and np.isfinite(j)):
        return []
    if j <= j0 + 1e-6 * max(1.0, abs(j0)):       # above the integration error of J
        return []
    return [f"worse than the start: the objective at the estimates, {j:.8g}, is above its "
            f"value at the start, {j0:.8g}; the optimizer ended at a stationary point worse "
            f"than where it began, so the estimates are not the best point seen: try a "
            f"smaller bound push (options bound_push=1e-8, bound_frac=1e-8) if the start is "
            f"on or near a bound, another approach, or a multistart"]


def _experiment_rows(frame, name):
    """The rows of experiment ``name`` of a frame indexed by ``(experiment, time)``."""
    if frame is None or "experiment" not in (frame.index.names or ()):
        return None
    try:
        return frame.xs(name, level="experiment")
    except KeyError:
        return None


def diagnose(problem, result):
    """Run every check on ``result`` and append the warnings to ``result.warnings``.

    The estimation pipeline runs it once per result; running it again adds no
    warning the result already carries.  The stability check uses
    ``result.scheme`` (None for the continuous approach: no stability check),
    the rank check the Gauss–Newton matrix of ``result.backend``.  Returns
    ``result``.
    """
    if result.problem is None:                # the analyses find the problem here
        result.extra["problem"] = problem
    scheme = result.scheme
    if scheme is not None and not hasattr(scheme, "stage_names"):    # a SchemeRef
        from ..discretization.schemes import get_scheme
        scheme = get_scheme(scheme.name, scheme.qmax)
    _clip_round_off(problem, result)
    curv = _curvature(problem, result)
    w = bound_warnings(problem, result, curv)
    w += stationarity_status(problem, result, curv)
    w = [m for check in (status_warning, start_warning) for m in check(result)] + w
    w += chi2_warning(problem, result) + rank_warnings(problem, result, curv)
    w += simulation_warning(problem, result)
    if getattr(problem, "experiments", None):
        for name, sp in zip(problem.experiment_names, problem.experiment_problems):
            st = _experiment_rows(result.states, name)
            w += [f"experiment '{name}': {m}"
                  for m in stability_warnings(sp, scheme, st, result.x)]
    else:
        w += stability_warnings(problem, scheme, result.states, result.x)
    result.warnings.extend(m for m in dict.fromkeys(w) if m not in result.warnings)
    return result
