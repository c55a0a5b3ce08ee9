"""pyomo_odeest: ODE parameter estimation by full discretization in Pyomo.

The package reads as its data flow (see ``docs/architecture.md``)::

    problem -> discretization -> nlp / pyomo -> approaches -> analysis

The user API is importable from here: ``__all__`` lists it.  Each subpackage's
``__all__`` is the user API it contributes (re-exported here) plus its building
blocks for extension authors (its ``__building_blocks__``, documented in its
docstring and importable from the subpackage only).  Importing the package registers
the Pyomo solver ``SolverFactory('odeest_ipopt')`` (Ipopt through cyipopt with
exact derivatives, no AMPL Solver Library) and the pyomo.dae transformations
``odeest.adams`` and ``odeest.enright``.
"""
__version__ = "0.1.0"

from .nlp import (SOLVER_NAME, EvaluationError, IpoptResult, NLPEvaluator, OdeestIpoptSolver,
                  PyomoNLPEvaluator, UnsupportedModelError, solve_with_ipopt, use_as_ipopt)
from .problem import (EstimationProblem, EstimationResult, Experiment, GaussianNLL, LeastSquares, Status,
                      Parameter, ParameterConstraint, PathConstraint, PiecewiseConstant,
                      PiecewiseLinear, Preequilibration, ProblemError, SteadyStateError, ProblemTooLargeError, Spline,
                      inputs_from_frame, noise_check)
from .discretization import (SCHEMES, AdaptiveError, AdaptiveModel, AdaptiveRun, DiscreteModel, Grid,
                             PowerLaw, SimulationError, SizeEstimate, StepController, Trajectory,
                             estimate_size, get_scheme, make_grid)
from .transcription import (DaeSchemeError, build_adaptive_block, build_block,
                            build_experiment_blocks, initialize_block, problem_from_dae,
                            scheme_constraint, simulate)
from .approaches import (APPROACH_NAMES, IntegrationError, approach_config, approach_options,
                         dae_result, estimate, estimate_adaptive, estimate_continuous,
                         estimate_multiple_shooting, estimate_reduced, estimate_simultaneous)
from .analysis import (ConvergenceStudy, Covariance, DerivativeReport, IdentifiabilityReport,
                       MultiplierReport, PredictionBands, ProfileResult, check_derivatives,
                       compare_approaches, confidence_intervals, convergence_study, covariance,
                       delta_method, identifiability_report, plot_bands, plot_fits,
                       plot_profiles, plot_result, plot_waterfall, prediction_bands,
                       profile_likelihood, validate_multipliers, diagnose)
from .petab_io import (PetabEstimation, PetabFit, PetabModel, UnsupportedFeatureError, fit_petab,
                       petab_nll, petab_problem, read_petab, write_petab)
from .runner import (BootstrapResult, MultistartResult, RunInterruptedWarning, RunResult, Runner,
                     Task, bootstrap, multistart, profile_points)

__all__ = [
    "__version__",
    # nlp
    "EvaluationError", "NLPEvaluator", "IpoptResult", "solve_with_ipopt",
    # problem
    "EstimationProblem", "EstimationResult", "Status", "Experiment", "Preequilibration", "SteadyStateError", "GaussianNLL", "ParameterConstraint",
    "PathConstraint", "PiecewiseConstant", "PiecewiseLinear", "Spline", "inputs_from_frame",
    "LeastSquares", "Parameter", "ProblemError", "ProblemTooLargeError", "estimate_size",
    "noise_check",
    # discretization
    "SCHEMES", "AdaptiveModel", "DiscreteModel", "Grid", "PowerLaw", "SimulationError",
    "StepController", "get_scheme", "make_grid", "Trajectory", "AdaptiveError", "AdaptiveRun",
    "SizeEstimate",
    # pyomo
    "SOLVER_NAME", "OdeestIpoptSolver", "PyomoNLPEvaluator", "UnsupportedModelError",
    "build_adaptive_block", "build_block", "build_experiment_blocks", "estimate_adaptive", "problem_from_dae",
    "dae_result", "scheme_constraint", "use_as_ipopt", "DaeSchemeError",
    # approaches
    "APPROACH_NAMES", "approach_config", "approach_options", "estimate", "estimate_continuous",
    "estimate_multiple_shooting", "estimate_reduced", "estimate_simultaneous", "simulate",
    "initialize_block", "IntegrationError",
    # analysis
    "check_derivatives", "compare_approaches", "confidence_intervals", "convergence_study",
    "covariance", "delta_method", "identifiability_report", "plot_fits", "prediction_bands",
    "profile_likelihood", "validate_multipliers", "diagnose", "Covariance", "ConvergenceStudy",
    "DerivativeReport", "IdentifiabilityReport", "MultiplierReport", "PredictionBands",
    "ProfileResult", "plot_bands", "plot_profiles", "plot_result", "plot_waterfall",
    # petab (needs the petab extra when called)
    "PetabEstimation", "PetabFit", "PetabModel", "UnsupportedFeatureError", "fit_petab",
    "petab_nll", "petab_problem", "read_petab", "write_petab",
    # runner
    "BootstrapResult", "MultistartResult", "RunResult", "Runner", "bootstrap", "multistart",
    "profile_points", "RunInterruptedWarning", "Task",
]
