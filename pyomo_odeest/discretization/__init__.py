"""The discrete problem: grids containing every measurement time (:mod:`.grid`),
the multistep schemes defined once (:mod:`.schemes`), the discrete equations
G(x, u) = 0 with their simulation and exact derivatives (:mod:`.discrete`), and
the adaptive step-size model (:mod:`.adaptive`)."""
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
