"""The result of a user's pyomo.dae model transformed by ``odeest.adams`` /
``odeest.enright`` and solved by any solver: :func:`dae_result`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..discretization._grid import Grid
from ..problem._declaration import EstimationProblem
from ..problem._misfit import MeasurementMisfit, misfit_constant
from ..problem._result import EstimationResult, post_solve_checks
from ..problem._status import Status
from ..transcription._dae import DaeSchemeError, dae_solution
from ._backend import DiscreteBackend, discrete_model
from ._base import fit_frames

__all__ = ["dae_result"]


def dae_result(model, data, results=None, sigma=None, weights=None):
    """The estimate of a transformed, solved pyomo.dae model as an
    :class:`~pyomo_odeest.problem._result.EstimationResult`, with the post-solve
    checks of every approach (:func:`~pyomo_odeest.analysis._diagnostics.diagnose`:
    status, parameters at bounds, χ² when ``sigma`` is given, rank, stability of the
    scheme along the solution) in its ``warnings``.

    Parameters
    ----------
    model
        A model transformed by ``odeest.adams`` / ``odeest.enright`` and solved.
        Its ODEs must be an ODE in the states and parameters (no algebraic
        variables, autonomous), as for :func:`problem_from_dae`.
    data : pandas.DataFrame
        The measurements the objective fits (columns named like the states of
        :func:`problem_from_dae`), for the fitted values, residuals and the χ²
        test.
    results : pyomo SolverResults, optional
        What ``SolverFactory(...).solve`` returned (status and iterations);
        without it the result's status is ``FAILED`` with the message ``'unknown'``.
    sigma, weights
        Noise level or weights of the measurements, as for
        :class:`~pyomo_odeest.problem._declaration.EstimationProblem`.

    Returns
    -------
    EstimationResult
        ``approach='pyomo_dae'`` (a model built by the user, not one of
        :data:`~pyomo_odeest.APPROACH_NAMES`).
    """
    parts, t, X, u = dae_solution(model)
    f = tuple(parts["problem"].f_sym)
    P = EstimationProblem(states=parts["names"], parameters=parts["params"],
                          rhs=lambda x, u, t: list(f), initial=parts["initial"], data=data,
                          sigma=sigma, weights=weights, t0=parts["t0"], T=parts["T"],
                          name="pyomo_dae")
    idx = np.searchsorted(t, P.meas_times)
    if np.any(idx >= len(t)) or not np.allclose(t[np.minimum(idx, len(t) - 1)], P.meas_times):
        raise DaeSchemeError("every measurement time of data must be a point of the ContinuousSet")
    obj = float(MeasurementMisfit(P).value(X[idx], u)) + misfit_constant(P)
    status, message, iters = Status.FAILED, "unknown", 0
    if results is not None:
        tc = str(results.solver.termination_condition)
        message = str(getattr(results.solver, "message", None) or tc)
        status = Status.CONVERGED if tc in ("optimal", "locallyOptimal") else Status.FAILED
        iters = int(getattr(results.solver, "iterations", 0) or 0)
    J = idx.astype(int)
    I = np.zeros(len(t), dtype=int)
    I[J] = np.arange(1, len(J) + 1)
    grid = Grid(t=t, meas_times=np.asarray(P.meas_times, dtype=float), I=I, J=J, restarts=())
    scheme = model._odeest_scheme
    res = EstimationResult(
        approach="pyomo_dae", method=model._odeest_initialization, scheme=scheme, grid=grid,
        estimates=pd.Series(u, index=P.parameter_names, name="estimate"), objective=obj,
        status=status, message=message, iterations=iters,
        **fit_frames(P, t, X, X[idx], u), extra={"problem": P})
    res.backend = DiscreteBackend(P, discrete_model(P, scheme.name, scheme.qmax, grid))
    return post_solve_checks(P, res)
