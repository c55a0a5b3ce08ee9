"""The assembled adaptive model (the equations and their corrections: package docstring)."""
from __future__ import annotations

from ._equations import AdaptiveEquations
from ._general_adjoint import GeneralAdjoint
from ._integration import Integration
from ._recursion import Recursion

__all__ = ["AdaptiveModel"]


class AdaptiveModel(Integration, Recursion, GeneralAdjoint, AdaptiveEquations):
    r"""Model (55) of [GM-grad] for one problem, controller and :math:`Q_{\max}`.

    Main methods: :meth:`run` (adaptive integration, or replay of a frozen
    pattern), :meth:`objective` (:math:`J_{h,k}`), :meth:`adjoint`
    (corrected recursion (56)–(58) and gradient (59)),
    :meth:`general_adjoint` (sparse transposed solve of all equations),
    :meth:`gradient`.

    Parameters
    ----------
    problem : EstimationProblem
    controller : StepController
    qmax : int
        2 (Heun: Euler predictor, trapezoidal corrector) or 3 (variable-step
        AB2/AM3 from step 1 on).
    """
