r"""Confidence bands of states and observables over time (delta method).

:math:`\operatorname{Var} y(t) \approx \nabla_u y(t)^\top C\,\nabla_u y(t)` with
:math:`\nabla_u x(t_i) = M_i` (discrete sensitivities, [GM-grad, eq. (51)]) and
:math:`\nabla_u g = g_x M_i + g_u`: pointwise bands of the *mean* trajectory, not
prediction intervals of new measurements (see docs/uncertainty.md, "Confidence bands").
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..discretization._experiments import experiment_models
from ..problem._result import stack_experiments

from ._uncertainty import Covariance, _problem_of, covariance

__all__ = ["PredictionBands", "prediction_bands"]


@dataclass
class PredictionBands:
    """Pointwise bands; every frame is indexed by time with one column per quantity."""

    value: pd.DataFrame
    se: pd.DataFrame
    lower: pd.DataFrame
    upper: pd.DataFrame
    level: float
    kind: str

    def plot(self, data=None, ax=None, path=None):
        """Curves with shaded bands (and the data, if given); matplotlib needed."""
        from ._plots import plot_bands
        return plot_bands(self, data=data, ax=ax, path=path)


def prediction_bands(result, cov: Covariance | None = None, level=0.95, kind="observables",
                     method="fim", dist=None, problem=None, scale="auto") -> PredictionBands:
    """Delta-method confidence bands over the grid of the result's discretization.

    Parameters
    ----------
    result : EstimationResult
    cov : Covariance, optional
        Default ``covariance(result, method, scale=scale)`` (σ unknown: scaled by
        the residual variance, Student t; see
        :func:`~pyomo_odeest.analysis._uncertainty.covariance`).
    kind : 'observables' | 'states'

    Notes
    -----
    With several experiments the frames are indexed by ``(experiment, time)``,
    each experiment on its own grid.
    """
    if kind not in ("observables", "states"):
        raise ValueError(f"kind must be 'observables' or 'states', got {kind!r}")
    P = _problem_of(result, problem)
    cov = cov if cov is not None else covariance(result, method, problem=P, scale=scale)
    dm = result.backend.discrete_model
    u = cov.estimates.reindex(P.parameter_names).to_numpy(dtype=float)
    cols = [P.parameter_names.index(n) for n in cov.names]
    q = cov.quantile(level, dist)
    parts = [_bands(sp, m, u, cols, cov, kind)
             for sp, m in zip(P.subproblems, experiment_models(dm))]
    Y, se = (stack_experiments(P.experiment_names, list(f)) for f in zip(*parts))
    _warn_inestimable(se, cov)
    return PredictionBands(Y, se, Y - q * se, Y + q * se, level, kind)


def _warn_inestimable(se, cov):
    """A warning naming the quantities whose band is infinite: they depend on a
    direction of the parameters that the data do not determine."""
    if not cov.non_identifiable:
        return
    bad = [c for c in se.columns if not np.all(np.isfinite(se[c].to_numpy()))]
    if bad:
        warnings.warn(f"prediction bands: {bad} depend on parameters the data do not "
                      f"determine ({cov.non_identifiable}), so their bands are infinite "
                      f"where they do; quantities that depend only on identifiable "
                      f"combinations have finite bands. Fix or reparametrize those "
                      f"parameters, or use profile likelihoods", RuntimeWarning, stacklevel=3)


def _bands(P, dm, u, cols, cov, kind):
    """Values and delta-method standard errors on one experiment's grid."""
    traj = dm.simulate(u)
    M = dm.state_sensitivities(traj)                        # (k+1, n, m)
    X, t = traj.X, dm.t
    if kind == "states":
        Y, G, names = X, M, P.states
    else:
        mf = dm.misfit
        Y = mf.g(X, u, t)
        G = mf.gx.matmat(mf.gx.values(X, u, t), M) + mf.gu.dense(mf.gu.values(X, u, t))
        names = P.obs_names
    G = G[:, :, cols]
    var = cov.variance_of(G)
    se = np.sqrt(np.clip(var, 0, None))
    idx = pd.Index(t, name="time")
    return pd.DataFrame(Y, index=idx, columns=names), pd.DataFrame(se, index=idx, columns=names)
