"""The assembled discrete model (see the package docstring for the equations)."""
from __future__ import annotations

from ._equations import DiscreteEquations
from ._first_order import FirstOrder
from ._second_order import SecondOrder
from ._simulation import Simulation

__all__ = ["DiscreteModel"]


class DiscreteModel(Simulation, FirstOrder, SecondOrder, DiscreteEquations):
    """Numeric twin of :func:`~pyomo_odeest.transcription._block.build_block` (same scheme, same grid).

    Parameters are those of ``build_block``.  Counters ``nsim``, ``ngrad``,
    ``nhess`` count simulations, gradients and Hessians.
    """
