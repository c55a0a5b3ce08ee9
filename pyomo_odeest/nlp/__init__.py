"""NLP layer: the evaluator protocol, the ASL-free Pyomo evaluator, and the cyipopt adapter."""
from .protocol import EvaluationError, NLPEvaluator
from .pyomo_evaluator import PyomoNLPEvaluator, UnsupportedModelError
from .cyipopt_adapter import IpoptResult, solve_with_ipopt

__all__ = ["EvaluationError", "NLPEvaluator", "PyomoNLPEvaluator", "UnsupportedModelError",
           "IpoptResult", "solve_with_ipopt"]
