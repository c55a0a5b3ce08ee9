"""The general NLP solver, with nothing ODE-specific in it: the evaluator
protocol (fixed sparsity, values on demand), the ASL-free compiler of Pyomo
models into that protocol (:class:`PyomoNLPEvaluator`: constraint families
templatized, differentiated symbolically once and evaluated vectorised), the
thin cyipopt adapter that drives Ipopt from any evaluator, the Pyomo solver
plugin ``SolverFactory('odeest_ipopt')``, the stationarity rule that every
approach applies to a reported success, and a build of PyNumero's ASL interface
against a system ASL (``python -m pyomo_odeest.nlp._pynumero_asl``).

Re-exported by :mod:`pyomo_odeest` (the user API): ``EvaluationError``,
``NLPEvaluator``, ``IpoptResult``, ``solve_with_ipopt``, ``PyomoNLPEvaluator``,
``UnsupportedModelError``, ``SOLVER_NAME``, ``OdeestIpoptSolver``, ``use_as_ipopt``.

Building blocks, importable from here only (``__building_blocks__``): the linear
solver's defaults and the stationarity rule that the approaches apply:
``MUMPS_DEFAULTS``, ``DECREMENT_TOL``, ``STATIONARITY_TOL``, ``projected_gradient``,
``stationarity_check``, ``gauss_newton_decrement``, ``decrement_limit``, ``judge_stop``.
"""
from ._protocol import EvaluationError, NLPEvaluator
from ._cyipopt_adapter import MUMPS_DEFAULTS, IpoptResult, solve_with_ipopt
from ._stationarity import (DECREMENT_TOL, STATIONARITY_TOL, decrement_limit,
                            gauss_newton_decrement, judge_stop, projected_gradient,
                            stationarity_check)
from ._evaluator import PyomoNLPEvaluator, UnsupportedModelError
from ._plugin import SOLVER_NAME, OdeestIpoptSolver, use_as_ipopt

__all__ = ["EvaluationError", "NLPEvaluator", "IpoptResult", "solve_with_ipopt", "MUMPS_DEFAULTS",
           "DECREMENT_TOL", "STATIONARITY_TOL", "projected_gradient", "stationarity_check",
           "gauss_newton_decrement", "decrement_limit", "judge_stop",
           "PyomoNLPEvaluator", "UnsupportedModelError", "SOLVER_NAME", "OdeestIpoptSolver",
           "use_as_ipopt"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("MUMPS_DEFAULTS", "DECREMENT_TOL", "STATIONARITY_TOL", "projected_gradient",
                       "stationarity_check", "gauss_newton_decrement", "decrement_limit",
                       "judge_stop")
