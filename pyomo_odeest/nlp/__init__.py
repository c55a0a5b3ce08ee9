"""Solver-agnostic NLP layer: the evaluator protocol (fixed sparsity, values
on demand) and the thin cyipopt adapter that drives Ipopt from any evaluator.
The Pyomo evaluator lives in :mod:`pyomo_odeest.pyomo`; the reduced-space and
shooting evaluators in :mod:`pyomo_odeest.approaches`."""
from .protocol import EvaluationError, NLPEvaluator
from .cyipopt_adapter import MUMPS_DEFAULTS, IpoptResult, solve_with_ipopt
from .stationarity import STATIONARITY_TOL, projected_gradient, stationarity_check

__all__ = ["EvaluationError", "NLPEvaluator", "IpoptResult", "solve_with_ipopt", "MUMPS_DEFAULTS",
           "STATIONARITY_TOL", "projected_gradient", "stationarity_check"]
