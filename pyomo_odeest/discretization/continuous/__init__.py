r"""The continuous model family: the misfit on the ODE's solution and its continuous-time
derivatives [MHV], beside the discrete (:mod:`..discrete`) and adaptive
(:mod:`..adaptive`) models.

The objective is the same :math:`J` that every backend of the package
minimizes, evaluated on the exact (adaptively integrated) ODE solution:

.. math::

    J(u) = \sum_{j=1}^{N} \varphi_j\big(x(\tau_j), u\big) + c, \qquad
    \dot x = f(x, u, t),\quad x(t_0) = l(u),

plus the problem's penalty :math:`R(u)` if it has one, with :math:`\varphi_j`
(the same as :func:`~pyomo_odeest.problem._misfit.misfit_sym`) evaluated by
:class:`~pyomo_odeest.problem._misfit.MeasurementMisfit` and the
constant :math:`c` from :func:`~pyomo_odeest.problem._misfit.misfit_constant` [MHV,
eqs. (2)–(5)].  :class:`ContinuousModel` computes

* the gradient by forward sensitivities [MHV, eq. (8)], by the continuous
  adjoint with jumps at the measurement times (eqs. (15)–(16), (32)), or by
  central finite differences;
* the Hessian by the second-order adjoint (eqs. (18)–(20)), by finite
  differences of adjoint gradients (eq. (21)), or by finite differences.

:func:`~pyomo_odeest.approaches.estimate_continuous` (the approach, in
:mod:`pyomo_odeest.approaches`) minimizes :math:`J` over the free parameters with
Ipopt (through cyipopt) or SciPy.

The adjoint :math:`\lambda` used here is :math:`\partial J/\partial x = -v` of
[MHV] (sign convention and the jump at :math:`\tau_j`, [MHV, eqs. (15), (32)]:
docs/continuous.md, "Sign convention").

:class:`ContinuousModel` is assembled from one module per responsibility:
``_functions`` (sparse lambdified arrays, integration helpers), ``_forward``
(symbolic set-up, forward solves, :math:`J`), ``_first_order`` (sensitivities,
adjoint, gradients) and ``_second_order`` (Hessians); ``_cvodes`` holds
:class:`CvodesModel` (SUNDIALS CVODES through CasADi, the default engine when
CasADi is installed).
"""
from ._cvodes import (ENGINES, CvodesModel, CvodesUnavailable, continuous_model,
                      cvodes_available, cvodes_failure, default_tolerances, integrator_name)
from ._functions import GRADIENT_METHODS, HESSIAN_METHODS, ODE_METHODS, IntegrationError
from ._model import ContinuousModel

__all__ = ["ContinuousModel", "IntegrationError",
           "GRADIENT_METHODS", "HESSIAN_METHODS", "ODE_METHODS", "ENGINES", "CvodesModel",
           "CvodesUnavailable", "continuous_model", "cvodes_available", "cvodes_failure",
           "default_tolerances", "integrator_name"]
