"""The estimation approaches, each driving Ipopt (or another optimizer) on the
same discrete problem: :mod:`.simultaneous` (the Pyomo block, states and
parameters together), :mod:`.reduced` (simulate, discrete adjoint gradient),
:mod:`.shooting` (multiple shooting) and :mod:`.continuous` (continuous-time
adjoint), all behind one front door, :func:`.estimate`."""
from ._simultaneous import estimate_simultaneous, initialize_block, simulate
from ._reduced import ReducedSpaceNLP, estimate_reduced
from ._shooting import MultipleShootingNLP, estimate_multiple_shooting
from .continuous import ContinuousModel, IntegrationError, estimate_continuous
from ._estimate import APPROACH_NAMES, approach_options, estimate

__all__ = ["estimate_simultaneous", "initialize_block", "simulate", "ReducedSpaceNLP",
           "estimate_reduced", "MultipleShootingNLP", "estimate_multiple_shooting",
           "ContinuousModel", "IntegrationError", "estimate_continuous", "APPROACH_NAMES",
           "approach_options", "estimate"]
