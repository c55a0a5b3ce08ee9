"""The discrete problem: grids containing every measurement time (:mod:`.grid`),
the multistep schemes defined once (:mod:`.schemes`), the discrete equations
G(x, u) = 0 with their simulation and exact derivatives (:mod:`.discrete`), and
the adaptive step-size model (:mod:`.adaptive`).

Re-exported by :mod:`pyomo_odeest` (the user API): ``Grid``, ``make_grid``, ``SCHEMES``,
``get_scheme``, ``DiscreteModel``, ``SimulationError``, ``Trajectory``,
``AdaptiveError``, ``AdaptiveModel``, ``AdaptiveRun``, ``PowerLaw``, ``StepController``,
``SizeEstimate``, ``estimate_size``.

Building blocks, importable from here only (``__building_blocks__``): grid construction,
the scheme integrator, several experiments' models and the size guard's check of an
estimator: ``STARTUP_MODES``, ``resolve_grid``, ``subdivide``, ``follow_steps``,
``integrate``, ``ExperimentModels``, ``experiment_grid``, ``validate_estimator``.
"""
from ._grid import STARTUP_MODES, Grid, make_grid, resolve_grid, subdivide, follow_steps
from .schemes import SCHEMES, get_scheme, integrate
from .discrete import DiscreteModel, SimulationError, Trajectory
from ._experiments import ExperimentModels, experiment_grid
from ._size_guard import SizeEstimate, estimate_size, validate_estimator
from .adaptive import AdaptiveError, AdaptiveModel, AdaptiveRun, PowerLaw, StepController

__all__ = ["STARTUP_MODES", "Grid", "make_grid", "resolve_grid", "subdivide", "follow_steps", "SCHEMES", "get_scheme",
           "integrate", "DiscreteModel", "SimulationError", "Trajectory", "ExperimentModels", "experiment_grid", "AdaptiveError",
           "AdaptiveModel", "AdaptiveRun", "PowerLaw", "StepController", "SizeEstimate",
           "estimate_size", "validate_estimator"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("STARTUP_MODES", "resolve_grid", "subdivide", "follow_steps", "integrate",
                       "ExperimentModels", "experiment_grid", "validate_estimator")
