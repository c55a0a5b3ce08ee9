r"""Variable-step, variable-order multistep schemes for the discrete problem.

The continuous dynamics :math:`\dot x = f(x, u, t)` are replaced by the
discrete equations of [GM-grad], eq. (2),

.. math::

    x_{i+1} = x_i + h_i F_i(x_i, x_{i-1}, \dots, x_{i-Q_i+1}; u),
    \qquad i = 0, \dots, k-1,

on a grid :math:`t_0 < t_1 < \dots < t_k` with steps :math:`h_i = t_{i+1} - t_i`
that are *not* uniform in general.  The order policy is the one of [GM-grad]
(after eq. (5)),

.. math::

    Q_i = \min\{i + 1, Q_{\max} - 1\},

so step 0 uses the initial state only and the number of past points grows by
one per step until :math:`Q_{\max} - 1` is reached.

Four schemes are provided, one object each:

``AdamsPC``
    Adams–Bashforth predictor / Adams–Moulton corrector [GM-grad, eqs. (4)–(5)].
``AdamsMoulton``
    Fully implicit Adams–Moulton of the same orders.
``Enright``
    Enright's implicit second-derivative scheme [GM-grad, eq. (6)].
``SemiImplicitEnright``
    Predictor–corrector–recorrector of [GM-grad], §2.3.2.

Every coefficient is derived for the actual step history from order
conditions (exactness on polynomials), see :func:`adams_bashforth_coefficients`,
:func:`adams_moulton_coefficients` and :func:`enright_coefficients`; on uniform
grids they reduce to the classical tables.  A step is described by a
:class:`StepFormula` (a sequence of :class:`Stage` objects, each a linear
combination of :math:`f` and :math:`\dot f` values at named points), which is
what the Pyomo renderer, the simulator and the adjoint consume.  The function
:func:`integrate` is the plain-numpy reference implementation of those
formulas.

The low-order start-up steps of the ramp limit the order observed on a plain
uniform grid to :attr:`MultistepScheme.startup_order`; a refined start-up grid
(``make_grid(..., startup="refined")``) or exact start values
(``integrate(..., start_values=...)``) recover :attr:`MultistepScheme.order`.
See docs/schemes.md, "The start-up ramp limits the order".
"""

from ._coefficients import (adams_bashforth_coefficients, adams_moulton_coefficients,
                           enright_coefficients)
from ._families import (DEFAULT_QMAX, QMAX_RANGE, SCHEMES, AdamsMoulton, AdamsPC, Enright,
                       MultistepScheme, SemiImplicitEnright, get_scheme)
from ._formulas import PointRef, Stage, StepBatch, StepFormula
from ._integration import integrate
from ._error import local_errors, predictor_difference
from ._stability import (STABILITY_POINTS, STIFF_SCHEME, amplification, stable_schemes,
                         stiff_point, stiff_switch)

__all__ = [
    "PointRef",
    "Stage",
    "StepFormula",
    "StepBatch",
    "MultistepScheme",
    "AdamsPC",
    "AdamsMoulton",
    "Enright",
    "SemiImplicitEnright",
    "SCHEMES",
    "QMAX_RANGE",
    "DEFAULT_QMAX",
    "get_scheme",
    "adams_bashforth_coefficients",
    "adams_moulton_coefficients",
    "enright_coefficients",
    "integrate",
    "local_errors",
    "predictor_difference",
    "amplification",
    "stiff_point",
    "stiff_switch",
    "STIFF_SCHEME",
    "stable_schemes",
    "STABILITY_POINTS",
]
