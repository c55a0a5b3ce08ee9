"""What the user states: states, parameters, f, g, l, losses and data
(:mod:`.declaration`); the measurement misfit shared by every approach
(:mod:`.misfit`); the result type every approach returns (:mod:`.result`); and
the χ² test of a fit against the noise level (:mod:`.noise`).

Re-exported by :mod:`pyomo_odeest` (the user API): ``EstimationProblem``,
``Experiment``, ``Preequilibration``, ``SteadyStateError``, ``ParameterConstraint``,
``PathConstraint``, ``PiecewiseConstant``, ``PiecewiseLinear``, ``Spline``,
``inputs_from_frame``, ``GaussianNLL``, ``LeastSquares``, ``Parameter``,
``ProblemError``, ``EstimationResult``, ``Status``, ``ProblemTooLargeError``,
``noise_check``.

Building blocks, importable from here only (``__building_blocks__``): the steady state
of a pre-equilibration, the misfit and its observations, start values, the checks that
approaches apply to a problem, and the reference to a scheme that a result read from
JSON keeps: ``SteadyState``, ``conservation_laws``, ``require_single_experiment``,
``require_no_constraints``, ``require_no_inputs``, ``MeasurementMisfit``,
``misfit_constant``, ``misfit_sym``, ``observations``, ``SchemeRef``, ``start_values``.
"""
from ._declaration import (EstimationProblem, Experiment, GaussianNLL, LeastSquares, Parameter,
                          ParameterConstraint, PathConstraint, Preequilibration, ProblemError,
                          require_no_constraints, require_no_inputs, require_single_experiment)
from ._inputs import PiecewiseConstant, PiecewiseLinear, Spline, inputs_from_frame
from ._misfit import MeasurementMisfit, misfit_constant, misfit_sym, observations
from ._noise import noise_check
from ._steady_state import SteadyState, SteadyStateError, conservation_laws
from ._result import EstimationResult, SchemeRef
from ._start import start_values
from ._status import Status
from ._validation import ProblemTooLargeError

__all__ = ["EstimationProblem", "Experiment", "Preequilibration", "SteadyState",
           "SteadyStateError", "conservation_laws", "require_single_experiment", "ParameterConstraint",
           "PathConstraint", "require_no_constraints", "require_no_inputs", "PiecewiseConstant",
           "PiecewiseLinear", "Spline", "inputs_from_frame", "GaussianNLL", "LeastSquares", "Parameter", "ProblemError",
           "MeasurementMisfit", "misfit_constant", "misfit_sym", "observations",
           "EstimationResult", "SchemeRef", "Status", "start_values", "ProblemTooLargeError",
           "noise_check"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("SteadyState", "conservation_laws", "require_single_experiment",
                       "require_no_constraints", "require_no_inputs", "MeasurementMisfit",
                       "misfit_constant", "misfit_sym", "observations", "SchemeRef", "start_values")
