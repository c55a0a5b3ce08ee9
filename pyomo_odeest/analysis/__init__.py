"""Analysis on top of the approaches: side-by-side comparison (:mod:`.compare`),
Ipopt's multipliers against the papers' adjoint recursions
(:mod:`.multipliers`, :mod:`.recursions`), convergence of discrete to
continuous stationary points (:mod:`.convergence`), and derivative checks
(:mod:`.checks`)."""
from .checks import DerivativeReport, check_consistency, check_derivatives, check_gradient, check_jacobian
from .recursions import paper_adjoint, paper_gradient, paper_sensitivity_gradient
from .multipliers import MultiplierReport, validate_multipliers
from .convergence import ConvergenceStudy, convergence_study
from .compare import compare_approaches, plot_fits

__all__ = ["DerivativeReport", "check_consistency", "check_derivatives", "check_gradient",
           "check_jacobian", "paper_adjoint", "paper_gradient", "paper_sensitivity_gradient",
           "MultiplierReport", "validate_multipliers", "ConvergenceStudy", "convergence_study",
           "compare_approaches", "plot_fits"]
