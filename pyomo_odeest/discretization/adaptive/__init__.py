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

Scheme and error estimate (fixed order, documented choice)
----------------------------------------------------------
The scheme is the Adams predictor–corrector (PECE) of
:class:`~pyomo_odeest.discretization.schemes.AdamsPC` with the order ramp
:math:`Q_i = \min(i+1, Q_{\max}-1)`, :math:`Q_{\max} \in \{2, 3\}`:

.. math::

    y_{i+1} = x_i + h \sum_{j=1}^{Q_i} \pi_j(\rho) f(x_{i-j+1}, u, t_{i-j+1}),\quad
    x^c_{i+1} = x_i + h\Big[K_0(\rho) f(y_{i+1}, u, t_i + h)
                + \sum_{j=1}^{Q_i} K_j(\rho) f(x_{i-j+1}, u, t_{i-j+1})\Big],

so :math:`F_i = K_0 f(y_{i+1}) + \sum_j K_j f(x_{i-j+1})` depends on
:math:`h_i` (through :math:`y_{i+1}`, the time :math:`t_i + h_i` and the
coefficients) and on :math:`t_i, t_{i-1}`.  :math:`Q_{\max}=2` is Euler's
predictor with the trapezoidal corrector (Heun); :math:`Q_{\max}=3` uses
from step 1 on the variable-step AB2 / AM3 pair whose coefficients are
rational functions of the step ratio :math:`\rho = h_i/(t_i - t_{i-1})`,
derived once with sympy (:func:`adams_pc_coefficients`).

The error estimate is Milne's device, the scaled predictor–corrector
difference, in a smooth weighted RMS norm:

.. math::

    E(\mathbf x_i, u, h) = C_M \Big(\frac1n \sum_{k=1}^n
        \frac{(x^c_{k} - y_{k})^2}{a^2 + x_{i,k}^2} + (\phi\varepsilon)^2\Big)^{1/2},

with :math:`x^c - y = h\,[K_0 f(y) + \sum_j (K_j - \pi_j) f(x_{i-j+1})]`
evaluated without cancellation, :math:`C_M` = ``milne`` (default 1/6, the
Milne constant :math:`|C^{AM2}/(C^{AB2} - C^{AM2})|` of the second-order
pair), :math:`a` = ``scale`` (absolute/relative switch) and the floor
:math:`\phi\varepsilon` (``floor``) that keeps :math:`E` differentiable where
the difference vanishes.  Because the predictor is one order below the
corrector, :math:`x^c - y = O(h^{Q_i+1})` estimates the predictor's local
error: a conservative estimate for the corrector, and the power laws below
use the exponent :math:`1/(q+1)`, :math:`q = Q_{\max}-1`.

Controller
----------
:class:`StepController` holds :math:`\varepsilon`, :math:`j_{\max}` and the
functions :math:`Q, R, r` of (55): :class:`PowerLaw` (smooth, saturated
:math:`\mathrm{fac}\,(\varepsilon/e)^{1/(q+1)}`) or :class:`StepTable`
(piecewise constant in :math:`e/\varepsilon`, derivative 0).  Trial steps
that would overshoot the next measurement time :math:`\tau` (or leave less
than ``stretch`` times the step before it) are *clipped*:
:math:`h_{i,j} = \tau - t_i` replaces the controller relation of that trial,
and :math:`t_{i+1} = \tau` exactly.  The clip flags, :math:`j_i` and the
table levels form the frozen :class:`AdaptivePattern`.

Adjoint [GM-grad, eqs. (56)–(59)], corrected
----------------------------------------------
:meth:`AdaptiveModel.adjoint` implements the backward recursion from the
printed Lagrangian of §2.4 with multipliers :math:`p_i` (state equations),
:math:`\alpha_{i,j}` (trial-step equations), :math:`\gamma_{i,j}` (trial
errors), :math:`\beta_i` (:math:`e_i = e_{i,j_i}`), :math:`\delta_i`
(:math:`h_i = h_{i,j_i}`) and, for the time variables that clipping and
variable-step coefficients introduce, :math:`\theta_i`
(:math:`t_{i} = t_{i-1} + h_{i-1}`):

.. math::

    p_k &= -D_x\Phi_k,\qquad
    p_t = p_{t+1} + \sum_{i} h_i D_{x_t}F_i^\top p_{i+1}
          + \sum_{i,j} \gamma_{i,j} D_{x_t}E_{i,j} - D_x\Phi_t
          + \alpha_{0,1} D_xQ\,\mathbf 1_{\{t=0\}} \quad (56)\\
    \beta_t &= \alpha_{t+1,1} R'(e_t)\, h_t, \qquad \beta_{k-1} = 0\\
    \delta_t &= p_{t+1}^\top\big(F_t + h_t \partial_h F_t\big)
                + \alpha_{t+1,1} R(e_t) + \theta_{t+1}\\
    \gamma_{t,j_t} &= \beta_t, \qquad
    \alpha_{t,j_t} = \gamma_{t,j_t} D_hE_{t,j_t} + \delta_t\\
    \gamma_{t,s} &= \alpha_{t,s+1} r'(e_{t,s})\, h_{t,s}, \qquad
    \alpha_{t,s} = \alpha_{t,s+1} r(e_{t,s}) + \gamma_{t,s} D_hE_{t,s},
    \quad s = j_t-1, \dots, 1\\
    \theta_t &= \theta_{t+1} + \sum_i h_i \partial_{t_t}F_i^\top p_{i+1}
               + \sum_{i,j}\gamma_{i,j}\partial_{t_t}E_{i,j}
               - \sum_{j:\,(t,j)\ \text{clipped}} \alpha_{t,j},
    \qquad \theta_k = 0,

(terms of an :math:`\alpha` whose relation is replaced by a clip are
absent), and the gradient (59)

.. math::

    \nabla J_{h,k} = \sum_i D_u\Phi_i - \sum_i h_i D_uF_i^\top p_{i+1}
      - D_ul^\top p_0 - \alpha_{0,1} D_uQ - \sum_{i,j} \gamma_{i,j} D_uE_{i,j}.

Deviations from the print (eqs. (57)/(58) contain typos):

1. :math:`\beta` and :math:`\delta` are swapped in the print: by the
   Lagrangian, :math:`\beta_t` multiplies :math:`e_t = e_{t,j_t}` and
   :math:`\delta_t` multiplies :math:`h_t = h_{t,j_t}`, hence
   :math:`\gamma_{t,j_t} = \beta_t` (print: :math:`\delta_t`) and
   :math:`\alpha_{t,j_t} = \gamma_{t,j_t} D_hE + \delta_t` (print:
   :math:`+\beta_t`).
2. :math:`\partial\mathcal L/\partial e_t = 0` gives
   :math:`\beta_t = \alpha_{t+1,1} R'(e_t) h_t`; the print has
   :math:`D_eR(e_{t+1})` (wrong index) and drops the factor :math:`h_t`.
   The terminal value is :math:`\beta_{k-1} = 0` (printed as
   :math:`\delta_{k-1} = 0`).
3. :math:`\partial\mathcal L/\partial h_t = 0` gives
   :math:`\delta_t = p_{t+1}^\top(F_t + h_t\partial_hF_t) + \alpha_{t+1,1}R(e_t) + \theta_{t+1}`;
   the print has :math:`p_t^\top F_t + \alpha_{t+1,1}R(e_{t+1})` (index
   shifts of :math:`p` and :math:`e`, and it ignores that :math:`F_t`
   depends on :math:`h_t`).  The terminal value is
   :math:`\delta_{k-1} = p_k^\top(F_{k-1} + h_{k-1}\partial_hF_{k-1}) + \theta_k`
   (printed as :math:`\beta_{k-1} = p_k^\top F_{k-1}`).
4. The printed Lagrangian sums :math:`\alpha_{i,1}[h_{i,1} - R(e_{i-1})h_{i-1}]`
   from :math:`i = 0` although (55) defines :math:`h_{0,1}` by :math:`Q`
   only; the :math:`i = 0` term is absent here.
5. Extensions (not typos): the time multipliers :math:`\theta` (needed
   because clipped steps :math:`h_{i,j} = \tau - t_i` and the
   variable-step coefficients depend on :math:`t_i`), the clip rule, and
   the dependence of :math:`F` and :math:`E` on :math:`h` and past times.
   Remark 3's ":math:`D_uR, D_ur = 0`" should read :math:`D_eR, D_er = 0`.

With :math:`Q` independent of :math:`(x_0, u)` and piecewise-constant
:math:`R, r` every :math:`\gamma` vanishes and (56), (59) reduce to the
fixed-grid adjoint on the accepted grid (Theorem 3).  The same multipliers
are obtained independently by :meth:`AdaptiveModel.general_adjoint`, one
sparse LU solve of :math:`(\partial G/\partial w)^\top\lambda = -\nabla_w F`
for all equations of (55) with explicit stage variables.

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
