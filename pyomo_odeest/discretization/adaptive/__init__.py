r"""Discrete models with automatic step-length control [GM-grad, §2.4].

Model (55)
----------
An adaptive integrator is itself a discrete model.  With trial steps
:math:`h_{i,j}`, trial error estimates :math:`e_{i,j}`, accepted steps
:math:`h_i` and accepted errors :math:`e_i`, [GM-grad], eq. (55) reads

.. math::

    \min\; & J_{h,k}(u) = \sum_{i} \tilde\varphi_i(z_i, \bar z_i)\\
    \text{s.t.}\; & x_{i+1} = x_i + h_i F_i(\mathbf x_i; u), \quad x_0 = l(u),\\
    & h_{0,1} = Q(x_0, u), \quad h_{i,1} = R(e_{i-1})\, h_{i-1},
      \quad h_{i,j+1} = r(e_{i,j})\, h_{i,j},\\
    & e_{i,j} = E(\mathbf x_i, u, h_{i,j}),
      \quad h_i = h_{i,j_i}, \quad e_i = e_{i,j_i},

where :math:`\mathbf x_i = (x_i, \dots, x_{i-Q_i+1})` and :math:`j_i` is the
first trial with :math:`e_{i,j} \le \varepsilon`.  For a fixed
*accept/reject pattern* :math:`(j_i)` the indicator sums of (55) are
constants and the model is a smooth system of equations in
:math:`w = (x, y, t, \mathbf H, \boldsymbol\eta, \mathbf h, \mathbf e)`.

The scheme is the Adams predictor–corrector (PECE) with the order ramp
:math:`Q_i = \min(i+1, Q_{\max}-1)`, :math:`Q_{\max} \in \{2, 3\}`, its
variable-step coefficients rational functions of :math:`\rho = h_i/(t_i - t_{i-1})`
(:func:`adams_pc_coefficients`); the error estimate is Milne's device in a smooth
weighted RMS norm; :class:`StepController` holds :math:`\varepsilon`,
:math:`j_{\max}` and :math:`Q, R, r` (:class:`PowerLaw` or :class:`StepTable`);
clip flags, :math:`j_i` and table levels form the frozen :class:`AdaptivePattern`.
See docs/adaptive.md, section "What is modelled".

:meth:`AdaptiveModel.adjoint` implements the backward recursion
[GM-grad, eqs. (56)–(59)] from the printed Lagrangian of §2.4, corrected and
extended by the time multipliers :math:`\theta` of :math:`t_{i+1} = t_i + h_i`
(docs/adaptive.md, section "The adjoint, corrected", lists every deviation from
the print).  With :math:`Q` independent of :math:`(x_0, u)` and piecewise-constant
:math:`R, r` it reduces to the fixed-grid adjoint on the accepted grid (Theorem 3).
:meth:`AdaptiveModel.general_adjoint` obtains the same multipliers independently,
by one sparse LU solve of :math:`(\partial G/\partial w)^\top\lambda = -\nabla_w F`
for all equations of (55).

:class:`AdaptiveModel` is assembled from one module per responsibility:
:mod:`.controller` (the functions :math:`Q, R, r` and the tolerance),
:mod:`.pattern` (frozen pattern, run and multiplier containers),
:mod:`.equations` (the symbolic scheme, error estimate and misfit, step
derivatives), :mod:`.integration` (adaptive integration and
:math:`J_{h,k}`), :mod:`.recursion` (the corrected recursion (56)–(59) and
the gradients) and :mod:`.general_adjoint` (the sparse transposed solve).
"""
from ._controller import QMAX_ADAPTIVE, AdaptiveError, PowerLaw, StepController, StepTable
from ._equations import RHO, adams_pc_coefficients  # noqa: F401  (RHO: the step ratio symbol)
from ._model import AdaptiveModel
from ._pattern import AdaptiveAdjoint, AdaptivePattern, AdaptiveRun, max_relative_discrepancy

__all__ = ["PowerLaw", "StepTable", "StepController", "AdaptiveError", "AdaptivePattern",
           "AdaptiveRun", "AdaptiveAdjoint", "AdaptiveModel", "adams_pc_coefficients",
           "QMAX_ADAPTIVE", "max_relative_discrepancy"]
