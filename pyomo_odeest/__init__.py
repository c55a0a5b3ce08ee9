"""pyomo_odeest: ODE parameter estimation by full discretization in Pyomo.

Importing the package registers the Pyomo solver ``SolverFactory('odeest_ipopt')``
(Ipopt through cyipopt with exact derivatives, no AMPL Solver Library).
"""
from .nlp import (EvaluationError, NLPEvaluator, PyomoNLPEvaluator,
                  UnsupportedModelError, solve_with_ipopt)
from .solver import SOLVER_NAME, OdeestIpoptSolver

__version__ = "0.1.0"

__all__ = ["EvaluationError", "NLPEvaluator", "PyomoNLPEvaluator", "UnsupportedModelError",
           "solve_with_ipopt", "SOLVER_NAME", "OdeestIpoptSolver", "__version__"]
