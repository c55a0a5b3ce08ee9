"""Analysis on top of the approaches: side-by-side comparison (:mod:`.compare`),
Ipopt's multipliers against the papers' adjoint recursions
(:mod:`.multipliers`, :mod:`.recursions`), convergence of discrete to
continuous stationary points (:mod:`.convergence`), derivative checks (:mod:`.checks`), and uncertainty:
covariance and Wald intervals (:mod:`.uncertainty`), profile likelihood
(:mod:`.profile`), identifiability (:mod:`.identifiability`), confidence
bands (:mod:`.prediction`) and their plots (:mod:`.plots`).

Re-exported by :mod:`pyomo_odeest` (the user API): ``DerivativeReport``,
``check_derivatives``, ``MultiplierReport``, ``validate_multipliers``,
``ConvergenceStudy``, ``convergence_study``, ``compare_approaches``, ``plot_fits``,
``Covariance``, ``confidence_intervals``, ``covariance``, ``delta_method``,
``ProfileResult``, ``profile_likelihood``, ``IdentifiabilityReport``,
``identifiability_report``, ``PredictionBands``, ``prediction_bands``, ``plot_bands``,
``plot_profiles``, ``plot_result``, ``plot_waterfall``, ``diagnose``.

Building blocks, importable from here only (``__building_blocks__``): the lower-level
derivative checks, the papers' adjoint recursions, the KKT reduced Hessian, the
profile's tasks and segments (which the runner distributes) and the diagnostics' pieces:
``check_consistency``, ``check_gradient``, ``check_jacobian``, ``paper_adjoint``,
``paper_gradient``, ``paper_sensitivity_gradient``, ``kkt_reduced_hessian``,
``ProfileTask``, ``profile_segment``, ``profile_tasks``, ``amplification``,
``simulation_warning``.
"""
from ._dercheck import DerivativeReport, check_consistency, check_derivatives, check_gradient, check_jacobian
from ._recursions import paper_adjoint, paper_gradient, paper_sensitivity_gradient
from ._multipliers import MultiplierReport, validate_multipliers
from ._convergence import ConvergenceStudy, convergence_study
from ._compare import compare_approaches, plot_fits
from ._uncertainty import (Covariance, confidence_intervals, covariance, delta_method,
                          kkt_reduced_hessian)
from ._profile import ProfileResult, ProfileTask, profile_likelihood, profile_segment, profile_tasks
from ._identifiability import IdentifiabilityReport, identifiability_report
from ._prediction import PredictionBands, prediction_bands
from ._plots import plot_bands, plot_profiles, plot_result, plot_waterfall
from ._diagnostics import amplification, diagnose, simulation_warning
from ..problem._result import RESULT_ANALYSES

RESULT_ANALYSES.update(covariance=covariance, confidence_intervals=confidence_intervals,
                       profile=profile_likelihood, identifiability=identifiability_report,
                       prediction_bands=prediction_bands, diagnose=diagnose,
                       plot=plot_result)

__all__ = ["DerivativeReport", "check_consistency", "check_derivatives", "check_gradient",
           "check_jacobian", "paper_adjoint", "paper_gradient", "paper_sensitivity_gradient",
           "MultiplierReport", "validate_multipliers", "ConvergenceStudy", "convergence_study",
           "compare_approaches", "plot_fits", "Covariance", "confidence_intervals", "covariance",
           "delta_method", "kkt_reduced_hessian", "ProfileResult", "ProfileTask",
           "profile_likelihood", "profile_segment", "profile_tasks", "IdentifiabilityReport",
           "identifiability_report", "PredictionBands", "prediction_bands", "plot_bands",
           "plot_profiles", "plot_result", "plot_waterfall", "amplification", "diagnose", "simulation_warning"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("check_consistency", "check_gradient", "check_jacobian", "paper_adjoint",
                       "paper_gradient", "paper_sensitivity_gradient", "kkt_reduced_hessian",
                       "ProfileTask", "profile_segment", "profile_tasks", "amplification",
                       "simulation_warning")
