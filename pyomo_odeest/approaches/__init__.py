"""The estimation approaches, each driving Ipopt (or another optimizer) on the
same discrete problem: :mod:`.simultaneous` (the Pyomo block, states and
parameters together), :mod:`.reduced` (simulate, discrete adjoint gradient),
:mod:`.shooting` (multiple shooting), :mod:`._continuous` (on the ODE's solution,
continuous-time adjoint; its models in :mod:`pyomo_odeest.discretization.continuous`)
and :mod:`._adaptive` (the step-size model (55)), all behind one front door,
:func:`.estimate` (which also runs an approach of the user's: an
:class:`._base.Approach` subclass or instance), and one pipeline,
:class:`._base.Approach`.

Re-exported by :mod:`pyomo_odeest` (the user API): ``estimate_adaptive``,
``dae_result``, ``approach_config``, ``estimate_simultaneous``, ``estimate_reduced``,
``estimate_multiple_shooting``, ``IntegrationError``, ``estimate_continuous``, ``APPROACH_NAMES``, ``approach_options``,
``estimate``.

Building blocks, importable from here only (``__building_blocks__``): the pipeline an
approach of one's own subclasses (``Approach``, ``Outcome``, ``IPOPT_DEFAULTS``,
``option_table``, ``approach_class``), the approaches' classes, their NLPs and models,
and the backends that the analyses work on: ``AdaptiveApproach``, ``Approach``,
``Outcome``, ``IPOPT_DEFAULTS``, ``option_table``, ``ContinuousBackend``,
``DiscreteBackend``, ``KKTBackend``, ``ShootingBackend``, ``ReducedSpaceNLP``,
``MultipleShootingNLP``, ``ContinuousModel``, ``approach_class``.
"""
from ._simultaneous import estimate_simultaneous
from ._reduced import ReducedSpaceNLP, estimate_reduced
from ._shooting import MultipleShootingNLP, estimate_multiple_shooting
from ..discretization.continuous import ContinuousModel, IntegrationError
from ._continuous import estimate_continuous
from ._adaptive import AdaptiveApproach, estimate_adaptive
from ._dae_result import dae_result
from ._base import Approach, IPOPT_DEFAULTS, Outcome, option_table
from ._backend import ContinuousBackend, DiscreteBackend, KKTBackend, ShootingBackend
from ._estimate import (APPROACH_NAMES, approach_class, approach_config, approach_options,
                        estimate)

__all__ = ["estimate_adaptive", "AdaptiveApproach", "dae_result", "Approach", "Outcome",
           "IPOPT_DEFAULTS", "option_table", "ContinuousBackend", "DiscreteBackend", "KKTBackend",
           "ShootingBackend",
           "approach_config", "estimate_simultaneous", "ReducedSpaceNLP",
           "estimate_reduced", "MultipleShootingNLP", "estimate_multiple_shooting",
           "ContinuousModel", "IntegrationError", "estimate_continuous", "APPROACH_NAMES",
           "approach_options", "approach_class", "estimate"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("AdaptiveApproach", "Approach", "Outcome", "IPOPT_DEFAULTS", "option_table",
                       "ContinuousBackend", "DiscreteBackend", "KKTBackend", "ShootingBackend",
                       "ReducedSpaceNLP", "MultipleShootingNLP", "ContinuousModel",
                       "approach_class")
