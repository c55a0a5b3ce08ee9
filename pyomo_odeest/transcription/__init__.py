"""The schemes transcribed into Pyomo: the discrete problem of [GM-grad, eq. (2)]
as a Pyomo block with explicit constraints (:func:`build_block`), one block per
experiment with shared parameters (:func:`build_experiment_blocks`), the
adaptive step-size model (55) as a block (:func:`build_adaptive_block`), the
initial state x(0) = l(u) or a pre-equilibrated steady state as Pyomo
expressions, the start values and scaling of a block (:func:`initialize_block`:
the states from a simulation of the block's scheme, :func:`simulate`), and the
pyomo.dae transformations ``odeest.adams`` and ``odeest.enright`` with
:func:`problem_from_dae`.

Re-exported by :mod:`pyomo_odeest` (the user API): ``build_block``,
``build_experiment_blocks``, ``scheme_constraint``, ``build_adaptive_block``,
``DaeSchemeError``, ``problem_from_dae``, ``initialize_block``, ``simulate``.

Building blocks, importable from here only (``__building_blocks__``): the objective term
of a block, the scaling factors of a block's parameters and states, the pyomo.dae
transformations (registered as ``odeest.adams`` and ``odeest.enright``) and the
solution of a transformed model: ``add_objective_term``, ``scale_parameters``,
``scale_states``, ``AdamsTransformation``, ``EnrightTransformation``, ``dae_solution``.
"""
from ._block import add_objective_term, build_block, scheme_constraint
from ._experiments import build_experiment_blocks
from ._adaptive_block import build_adaptive_block
from ._initialize import initialize_block, scale_parameters, scale_states, simulate
from ._dae import (AdamsTransformation, DaeSchemeError, EnrightTransformation, dae_solution,
                  problem_from_dae)

__all__ = ["add_objective_term", "build_block", "build_experiment_blocks", "scheme_constraint", "build_adaptive_block",
           "AdamsTransformation", "DaeSchemeError", "EnrightTransformation",
           "problem_from_dae", "dae_solution", "initialize_block", "simulate", "scale_parameters",
           "scale_states"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("add_objective_term", "scale_parameters", "scale_states",
                       "AdamsTransformation", "EnrightTransformation", "dae_solution")
