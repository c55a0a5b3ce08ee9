"""Analysis on top of the approaches: side-by-side comparison (:mod:`.compare`),
Ipopt's multipliers against the papers' adjoint recursions
(:mod:`.multipliers`, :mod:`.recursions`), convergence of discrete to
continuous stationary points (:mod:`.convergence`), derivative checks (:mod:`.checks`), and uncertainty:
covariance and Wald intervals (:mod:`.uncertainty`), profile likelihood
(:mod:`.profile`), identifiability (:mod:`.identifiability`), confidence
bands (:mod:`.prediction`) and their plots (:mod:`.plots`)."""
from .checks import DerivativeReport, check_consistency, check_derivatives, check_gradient, check_jacobian
from .recursions import paper_adjoint, paper_gradient, paper_sensitivity_gradient
from .multipliers import MultiplierReport, validate_multipliers
from .convergence import ConvergenceStudy, convergence_study
from .compare import compare_approaches, plot_fits
from .uncertainty import (Covariance, confidence_intervals, covariance, delta_method,
                          kkt_reduced_hessian)
from .profile import ProfileResult, ProfileTask, profile_likelihood, profile_segment, profile_tasks
from .identifiability import IdentifiabilityReport, identifiability_report
from .prediction import PredictionBands, prediction_bands
from .plots import plot_bands, plot_profiles
from .diagnostics import amplification, diagnose, simulation_warning
from ..problem.result import RESULT_ANALYSES

RESULT_ANALYSES.update(covariance=covariance, confidence_intervals=confidence_intervals,
                       profile=profile_likelihood, identifiability=identifiability_report,
                       prediction_bands=prediction_bands, diagnose=diagnose)

__all__ = ["DerivativeReport", "check_consistency", "check_derivatives", "check_gradient",
           "check_jacobian", "paper_adjoint", "paper_gradient", "paper_sensitivity_gradient",
           "MultiplierReport", "validate_multipliers", "ConvergenceStudy", "convergence_study",
           "compare_approaches", "plot_fits", "Covariance", "confidence_intervals", "covariance",
           "delta_method", "kkt_reduced_hessian", "ProfileResult", "ProfileTask",
           "profile_likelihood", "profile_segment", "profile_tasks", "IdentifiabilityReport",
           "identifiability_report", "PredictionBands", "prediction_bands", "plot_bands",
           "plot_profiles", "amplification", "diagnose", "simulation_warning"]
