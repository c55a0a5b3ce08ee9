"""The estimation approaches, each driving Ipopt (or another optimizer) on the
same discrete problem: :mod:`.simultaneous` (the Pyomo block, states and
parameters together), :mod:`.reduced` (simulate, discrete adjoint gradient),
:mod:`.shooting` (multiple shooting) and :mod:`.continuous` (continuous-time
adjoint), :mod:`._adaptive` (the step-size model (55)), all behind one front door,
:func:`.estimate` (which also runs an approach of the user's: an
:class:`._base.Approach` subclass or instance), and one pipeline,
:class:`._base.Approach`."""
from ._simultaneous import estimate_simultaneous, initialize_block, simulate
from ._reduced import ReducedSpaceNLP, estimate_reduced
from ._shooting import MultipleShootingNLP, estimate_multiple_shooting
from .continuous import ContinuousModel, IntegrationError, estimate_continuous
from ._adaptive import AdaptiveApproach, estimate_adaptive
from ._dae_result import dae_result
from ._base import Approach, IPOPT_DEFAULTS, Outcome, option_table
from ._backend import ContinuousBackend, DiscreteBackend, KKTBackend, ShootingBackend
from ._estimate import (APPROACH_NAMES, approach_class, approach_config, approach_options,
                        estimate)

__all__ = ["estimate_adaptive", "AdaptiveApproach", "dae_result", "Approach", "Outcome",
           "IPOPT_DEFAULTS", "option_table", "ContinuousBackend", "DiscreteBackend", "KKTBackend",
           "ShootingBackend",
           "approach_config", "estimate_simultaneous", "initialize_block", "simulate", "ReducedSpaceNLP",
           "estimate_reduced", "MultipleShootingNLP", "estimate_multiple_shooting",
           "ContinuousModel", "IntegrationError", "estimate_continuous", "APPROACH_NAMES",
           "approach_options", "approach_class", "estimate"]
