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

from .problem import EstimationProblem, GaussianNLL, LeastSquares, Parameter, ProblemError
from .grid import Grid, make_grid
from .schemes import SCHEMES, get_scheme
from .block import build_block, scheme_constraint
from .simultaneous import estimate_simultaneous, simulate
from .result import EstimationResult

__all__ += ["EstimationProblem", "GaussianNLL", "LeastSquares", "Parameter", "ProblemError",
            "Grid", "make_grid", "SCHEMES", "get_scheme", "build_block", "scheme_constraint",
            "estimate_simultaneous", "simulate", "EstimationResult"]

from . import dae as _dae  # noqa: F401,E402  (registers the odeest.* transformations)
