"""The result object shared by every estimation backend."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["EstimationResult", "stack_experiments"]


#: The analyses offered as methods of :class:`EstimationResult`,
#: ``name -> fn(result, ...)``.  :mod:`pyomo_odeest.analysis` fills it when it is
#: imported (importing ``pyomo_odeest`` does), so this layer imports nothing from
#: the analysis layer above it.
RESULT_ANALYSES = {}


def _analysis(name):
    try:
        return RESULT_ANALYSES[name]
    except KeyError:
        raise RuntimeError(f"EstimationResult.{name} is provided by pyomo_odeest.analysis; "
                           "import pyomo_odeest first") from None


def stack_experiments(names, frames):
    """Per-experiment DataFrames as one frame indexed by ``(experiment, ...)``
    (None if any is None)."""
    frames = list(frames)
    if any(f is None for f in frames):
        return None
    return pd.concat(dict(zip(names, frames)), names=["experiment"])


@dataclass
class EstimationResult:
    """Outcome of one estimation.

    Attributes
    ----------
    approach : str
        ``'simultaneous'``, ``'reduced_space'``, ``'multiple_shooting'``, ...
    method : str
        Solver and derivative method (e.g. ``'ipopt/exact-hessian'``).
    scheme : str
        Discretization scheme and Q_max.
    estimates : pandas.Series
        Parameter values (fixed ones included), indexed by name.
    objective : float
        J_k at the estimates (including any constant term of the loss).
    status : str
        Solver status (Ipopt's return status name for Ipopt backends).
    success : bool
        True if the solver reports convergence to a (local) optimum.
    iterations : int
    evaluations : dict
        Function / gradient / Hessian evaluation counts.
    timings : dict
        Seconds: ``build_s`` (model), ``setup_s`` (evaluator), ``solve_s``
        (solver wall time), ``total_s``.
    states : pandas.DataFrame
        Discrete states x_i on the grid (index: time).  For a problem with
        several experiments, ``states``, ``fitted``, ``residuals`` and
        ``adjoint`` (and each frame of ``multipliers``) are indexed by
        ``(experiment, time)`` (or ``(experiment, step)``): ``res.states.loc['e1']``.
    fitted : pandas.DataFrame
        Observations z(τ_j) at the measurement times.
    residuals : pandas.DataFrame
        fitted − data (NaN where not measured).
    adjoint : pandas.DataFrame or None
        Multiplier of the equation that defines x_i (row i = 0..k; row 0 is
        x_0 = l(u)).  With the block's sign convention this is the adjoint
        p_i of [GM-grad], eq. (52).
    multipliers : dict
        Stage name -> DataFrame of multipliers of that stage's equations,
        indexed by step i (``'x'``: the equation defining x_{i+1}).
    model : object
        The solved Pyomo model (simultaneous approach) or None.
    extra : dict
        Backend-specific information.
    """

    approach: str
    method: str
    scheme: str
    estimates: pd.Series
    objective: float
    status: str
    success: bool
    iterations: int
    evaluations: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    states: pd.DataFrame | None = None
    fitted: pd.DataFrame | None = None
    residuals: pd.DataFrame | None = None
    adjoint: pd.DataFrame | None = None
    multipliers: dict = field(default_factory=dict)
    model: object = None
    extra: dict = field(default_factory=dict)

    def multiplier(self, i, state, stage="x"):
        """Multiplier of the ``stage`` equation of step ``i`` for ``state``."""
        return float(self.multipliers[stage].loc[i, state])

    def summary(self) -> str:
        est = ", ".join(f"{k}={v:.6g}" for k, v in self.estimates.items())
        return (f"{self.approach} [{self.method}; {self.scheme}]: {self.status} after "
                f"{self.iterations} iterations, objective={self.objective:.8g}, {est} "
                f"({self.timings.get('total_s', float('nan')):.2f} s)")

    def __repr__(self):
        return f"EstimationResult({self.summary()})"

    @property
    def x(self) -> np.ndarray:
        """Estimates as an array in parameter order."""
        return self.estimates.to_numpy(dtype=float)

    # -- uncertainty (computed by pyomo_odeest.analysis on request) -----------
    def covariance(self, method="fim", **kw):
        """Covariance of the estimates: ``'fim'``, ``'hessian'`` or ``'residual'``
        (:func:`pyomo_odeest.analysis.uncertainty.covariance`)."""
        return _analysis("covariance")(self, method, **kw)

    def confidence_intervals(self, level=0.95, method="fim", dist=None, **kw):
        """Wald intervals (:func:`pyomo_odeest.analysis.uncertainty.confidence_intervals`)."""
        return _analysis("confidence_intervals")(self, level, method, dist, **kw)

    def profile(self, parameters=None, level=0.95, **kw):
        """Profile likelihood and LR intervals (:func:`pyomo_odeest.analysis.profile.profile_likelihood`)."""
        return _analysis("profile")(self, parameters, level, **kw)

    def identifiability(self, **kw):
        """Identifiability report (:func:`pyomo_odeest.analysis.identifiability.identifiability_report`)."""
        return _analysis("identifiability")(self, **kw)

    def prediction_bands(self, level=0.95, kind="observables", **kw):
        """Delta-method bands over time (:func:`pyomo_odeest.analysis.prediction.prediction_bands`)."""
        return _analysis("prediction_bands")(self, level=level, kind=kind, **kw)
