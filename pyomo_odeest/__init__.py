"""pyomo_odeest: ODE parameter estimation by full discretization in Pyomo.

The package reads as its data flow (see ``docs/architecture.md``)::

    problem -> discretization -> nlp / pyomo -> approaches -> analysis

Every public name is importable from here.  Importing the package registers
the Pyomo solver ``SolverFactory('odeest_ipopt')`` (Ipopt through cyipopt with
exact derivatives, no AMPL Solver Library) and the pyomo.dae transformations
``odeest.adams`` and ``odeest.enright``.
"""
__version__ = "0.1.0"

from .nlp import (SOLVER_NAME, EvaluationError, NLPEvaluator, OdeestIpoptSolver, PyomoNLPEvaluator,
                  UnsupportedModelError, solve_with_ipopt, use_as_ipopt)
from .problem import (EstimationProblem, EstimationResult, Experiment, GaussianNLL, LeastSquares, Status,
                      Parameter, ParameterConstraint, PathConstraint, PiecewiseConstant,
                      PiecewiseLinear, Preequilibration, ProblemError, SteadyStateError, ProblemTooLargeError, Spline,
                      inputs_from_frame, noise_check)
from .discretization import (SCHEMES, AdaptiveModel, DiscreteModel, Grid, PowerLaw,
                             SimulationError, StepController, estimate_size, get_scheme,
                             make_grid)
from .transcription import (build_adaptive_block, build_block, build_experiment_blocks,
                            problem_from_dae, scheme_constraint)
from .approaches import (APPROACH_NAMES, approach_config, approach_options, dae_result,
                         estimate, estimate_adaptive, estimate_continuous,
                         estimate_multiple_shooting, estimate_reduced, estimate_simultaneous,
                         simulate)
from .analysis import (check_derivatives, compare_approaches, confidence_intervals,
                       convergence_study, covariance, delta_method, identifiability_report,
                       plot_fits, prediction_bands, profile_likelihood, validate_multipliers,
                       diagnose)
from .petab_io import (PetabEstimation, PetabFit, PetabModel, UnsupportedFeatureError, fit_petab,
                       petab_nll, petab_problem, read_petab, write_petab)
from .runner import (BootstrapResult, MultistartResult, RunResult, Runner, bootstrap, multistart,
                     profile_points)

__all__ = [
    "__version__",
    # nlp
    "EvaluationError", "NLPEvaluator", "solve_with_ipopt",
    # problem
    "EstimationProblem", "EstimationResult", "Status", "Experiment", "Preequilibration", "SteadyStateError", "GaussianNLL", "ParameterConstraint",
    "PathConstraint", "PiecewiseConstant", "PiecewiseLinear", "Spline", "inputs_from_frame",
    "LeastSquares", "Parameter", "ProblemError", "ProblemTooLargeError", "estimate_size",
    "noise_check",
    # discretization
    "SCHEMES", "AdaptiveModel", "DiscreteModel", "Grid", "PowerLaw", "SimulationError",
    "StepController", "get_scheme", "make_grid",
    # pyomo
    "SOLVER_NAME", "OdeestIpoptSolver", "PyomoNLPEvaluator", "UnsupportedModelError",
    "build_adaptive_block", "build_block", "build_experiment_blocks", "estimate_adaptive", "problem_from_dae",
    "dae_result", "scheme_constraint", "use_as_ipopt",
    # approaches
    "APPROACH_NAMES", "approach_config", "approach_options", "estimate", "estimate_continuous",
    "estimate_multiple_shooting", "estimate_reduced", "estimate_simultaneous", "simulate",
    # analysis
    "check_derivatives", "compare_approaches", "confidence_intervals", "convergence_study",
    "covariance", "delta_method", "identifiability_report", "plot_fits", "prediction_bands",
    "profile_likelihood", "validate_multipliers", "diagnose",
    # petab (needs the petab extra when called)
    "PetabEstimation", "PetabFit", "PetabModel", "UnsupportedFeatureError", "fit_petab",
    "petab_nll", "petab_problem", "read_petab", "write_petab",
    # runner
    "BootstrapResult", "MultistartResult", "RunResult", "Runner", "bootstrap", "multistart",
    "profile_points",
]
