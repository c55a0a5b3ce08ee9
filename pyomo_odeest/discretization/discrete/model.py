"""The assembled discrete model (see the package docstring for the equations)."""
from __future__ import annotations

from .equations import DiscreteEquations
from .first_order import FirstOrder
from .second_order import SecondOrder
from .simulation import Simulation

__all__ = ["DiscreteModel"]


class DiscreteModel(Simulation, FirstOrder, SecondOrder, DiscreteEquations):
    """Numeric twin of :func:`~pyomo_odeest.pyomo.block.build_block` (same scheme, same grid).

    Parameters are those of ``build_block``.  Counters ``nsim``, ``ngrad``,
    ``nhess`` count simulations, gradients and Hessians.
    """
