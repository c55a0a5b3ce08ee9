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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import sympy

from ..problem.misfit import misfit_constant, misfit_sym
from .grid import Grid
from ..problem.declaration import EstimationProblem

__all__ = ["PowerLaw", "StepTable", "StepController", "AdaptiveError", "AdaptivePattern",
           "AdaptiveRun", "AdaptiveAdjoint", "AdaptiveModel", "adams_pc_coefficients",
           "QMAX_ADAPTIVE", "max_relative_discrepancy"]

#: Supported values of Q_max for the adaptive model.
QMAX_ADAPTIVE = (2, 3)


class AdaptiveError(RuntimeError):
    """The adaptive integration failed (no accepted trial within j_max, step underflow)."""

    def __init__(self, message, step=None, time=None):
        super().__init__(message)
        self.step = step
        self.time = time


# ---------------------------------------------------------------------------
# controller functions R, r
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerLaw:
    r"""Smooth, saturated power law :math:`\mathrm{fac}\,(\varepsilon/e)^{1/(q+1)}`.

    .. math::

        z = \log\mathrm{fac} + \tfrac{1}{q+1}\log(\varepsilon/e),\qquad
        R(e) = \exp\big(c + w\tanh((z - c)/w)\big),

    :math:`c = (\log\mathrm{lo} + \log\mathrm{hi})/2`,
    :math:`w = (\log\mathrm{hi} - \log\mathrm{lo})/2`: the identity in
    :math:`z` near :math:`c` (slope 1), saturating smoothly in
    :math:`(\mathrm{lo}, \mathrm{hi})`; :math:`C^\infty` in :math:`e > 0`.
    """

    fac: float = 0.9
    lo: float = 0.2
    hi: float = 5.0

    def __post_init__(self):
        for name in ("fac", "lo", "hi"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"PowerLaw.{name} must be positive and finite, got {v}")
        if not self.lo < self.hi:
            raise ValueError(f"PowerLaw needs lo < hi, got lo={self.lo}, hi={self.hi}")

    smooth = True

    @property
    def upper(self) -> float:
        return self.hi

    def _cw(self):
        L, U = np.log(self.lo), np.log(self.hi)
        return 0.5 * (L + U), 0.5 * (U - L)

    def value(self, e, eps, q):
        c, w = self._cw()
        z = np.log(self.fac) + (np.log(eps) - np.log(e)) / (q + 1)
        return float(np.exp(c + w * np.tanh((z - c) / w)))

    def deriv(self, e, eps, q):
        c, w = self._cw()
        z = np.log(self.fac) + (np.log(eps) - np.log(e)) / (q + 1)
        th = np.tanh((z - c) / w)
        return float(np.exp(c + w * th) * (1 - th * th) * (-1.0 / ((q + 1) * e)))

    def sym(self, e, eps, q, level=None):
        """Sympy expression in the symbol (or expression) ``e``."""
        c, w = self._cw()
        z = (sympy.log(sympy.Float(self.fac, 17))
             + (sympy.log(sympy.Float(eps, 17)) - sympy.log(e)) / (q + 1))
        return sympy.exp(sympy.Float(c, 17) + sympy.Float(w, 17)
                         * sympy.tanh((z - sympy.Float(c, 17)) / sympy.Float(w, 17)))

    def level(self, e, eps):
        return -1


@dataclass(frozen=True)
class StepTable:
    r"""Piecewise-constant factor: ``values[l]`` for :math:`e/\varepsilon` in
    ``[breaks[l-1], breaks[l])`` (derivative 0, [GM-grad] Remark 3).

    Example: ``StepTable((0.1, 0.5, 1.0), (2.0, 1.5, 1.0, 0.5))``.
    The level :math:`l` is part of the frozen pattern.
    """

    breaks: tuple
    values: tuple

    def __post_init__(self):
        b = np.asarray(self.breaks, dtype=float)
        v = np.asarray(self.values, dtype=float)
        if b.ndim != 1 or v.ndim != 1 or v.size != b.size + 1:
            raise ValueError("StepTable needs len(values) == len(breaks) + 1")
        if np.any(~np.isfinite(b)) or np.any(np.diff(b) <= 0) or np.any(b <= 0):
            raise ValueError("StepTable.breaks must be positive and strictly increasing")
        if np.any(~np.isfinite(v)) or np.any(v <= 0):
            raise ValueError("StepTable.values must be positive and finite")
        object.__setattr__(self, "breaks", tuple(float(x) for x in b))
        object.__setattr__(self, "values", tuple(float(x) for x in v))

    smooth = False

    @property
    def upper(self) -> float:
        return max(self.values)

    def level(self, e, eps):
        return int(np.searchsorted(self.breaks, e / eps, side="right"))

    def value(self, e, eps, q, level=None):
        return self.values[self.level(e, eps) if level is None else level]

    def deriv(self, e, eps, q):
        return 0.0

    def sym(self, e, eps, q, level=None):
        return sympy.Float(self.values[level], 17)


def _check_func(f, what):
    if not isinstance(f, (PowerLaw, StepTable)):
        raise ValueError(f"{what} must be a PowerLaw or a StepTable, got {type(f).__name__}")


@dataclass(frozen=True)
class StepController:
    r"""Step-length control of [GM-grad], eq. (55).

    Parameters
    ----------
    eps : float
        Tolerance :math:`\varepsilon > 0`: trial :math:`j` is accepted if
        :math:`e_{i,j} \le \varepsilon`.
    j_max : int
        Maximal number of trials per step (:math:`\ge 1`).
    h0 : float or None
        Constant :math:`Q` (independent of :math:`x_0, u`).  ``None``: the
        smooth :math:`Q(x_0,u) = c\,\varepsilon^{1/(q+1)} / (1 + \frac1n
        \sum_k f_k(x_0,u,t_0)^2/(a^2+x_{0,k}^2))^{1/2}` with
        :math:`c` = ``h0_factor``.
    R, r : PowerLaw or StepTable
        Growth after an accepted step, reduction after a rejected trial
        (``r`` must stay below 1).
    milne : float
        :math:`C_M` of the error estimate (default 1/6).
    scale : float
        :math:`a` of the weighted norm (absolute below, relative above).
    floor : float
        :math:`\phi`: the estimate is never below :math:`C_M\phi\varepsilon`.
    q : int or None
        Order in the power-law exponent :math:`1/(q+1)`; default
        :math:`Q_{\max}-1`.
    stretch : float
        A first trial leaving less than ``stretch`` times its length before
        the next measurement time is stretched (clipped) onto it.
    max_steps : int
        Safety bound on the number of steps.
    """

    eps: float = 1e-3
    j_max: int = 10
    h0: float | None = None
    h0_factor: float = 0.5
    R: PowerLaw | StepTable = field(default_factory=lambda: PowerLaw(0.9, 0.2, 5.0))
    r: PowerLaw | StepTable = field(default_factory=lambda: PowerLaw(0.9, 0.1, 0.9))
    milne: float = 1.0 / 6.0
    scale: float = 1.0
    floor: float = 1e-6
    q: int | None = None
    stretch: float = 0.1
    max_steps: int = 100_000

    def __post_init__(self):
        eps = self.eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) \
                or not np.isfinite(eps) or eps <= 0:
            raise ValueError(f"the tolerance eps must be positive and finite, got {eps!r}")
        if isinstance(self.j_max, bool) or not isinstance(self.j_max, (int, np.integer)) \
                or self.j_max < 1:
            raise ValueError(f"j_max must be an int >= 1, got {self.j_max!r}")
        if self.h0 is not None and not (np.isfinite(self.h0) and self.h0 > 0):
            raise ValueError(f"h0 must be positive and finite or None, got {self.h0!r}")
        for name in ("h0_factor", "milne", "scale", "floor"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be positive and finite, got {v!r}")
        _check_func(self.R, "R")
        _check_func(self.r, "r")
        if not self.r.upper < 1:
            raise ValueError("r must reduce the step after a rejection (all values < 1)")
        if self.q is not None and (isinstance(self.q, bool) or not isinstance(self.q, (int, np.integer))
                                   or self.q < 1):
            raise ValueError(f"q must be an int >= 1 or None, got {self.q!r}")
        if not 0 <= self.stretch < 1:
            raise ValueError(f"stretch must be in [0, 1), got {self.stretch!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, (int, np.integer)) \
                or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {self.max_steps!r}")

    @property
    def piecewise_constant(self) -> bool:
        """Theorem 3 setting: constant Q and piecewise-constant R, r."""
        return self.h0 is not None and not self.R.smooth and not self.r.smooth


# ---------------------------------------------------------------------------
# variable-step Adams coefficients as rational functions of the step ratio
# ---------------------------------------------------------------------------
RHO = sympy.Symbol("rho", positive=True)


@lru_cache(maxsize=None)
def adams_pc_coefficients(Q: int):
    r"""Adams–Bashforth :math:`(\pi_1..\pi_Q)` and Adams–Moulton
    :math:`(K_0, K_1..K_Q)` coefficients as sympy functions of
    :math:`\rho = h_i/(t_i - t_{i-1})`.

    Derived from the order conditions of :mod:`pyomo_odeest.discretization.schemes`
    (scaled nodes :math:`s = 0, -1/\rho` and :math:`s = 1` for the new point):
    :math:`\sum_j \pi_j s_j^m = 1/(m+1)`, :math:`m < Q`, and
    :math:`\sum_j K_j s_j^m = 1/(m+1)`, :math:`m \le Q`.  For :math:`Q = 2`:
    :math:`\pi = (1 + \rho/2, -\rho/2)`,
    :math:`K = \big(\tfrac{2\rho+3}{6(\rho+1)}, \tfrac{\rho+3}{6}, -\tfrac{\rho^2}{6(\rho+1)}\big)`.
    """
    if Q not in (1, 2):
        raise ValueError(f"adaptive model supports Q in (1, 2), got {Q}")
    past = [sympy.Integer(0), -1 / RHO][:Q]
    a = sympy.symbols(f"a0:{Q}")
    eqs = [sum(a[j] * past[j] ** m for j in range(Q)) - sympy.Rational(1, m + 1) for m in range(Q)]
    sol = sympy.solve(eqs, a, dict=True)[0]
    pi = tuple(sympy.simplify(sol[a[j]]) for j in range(Q))
    nodes = [sympy.Integer(1)] + past
    b = sympy.symbols(f"b0:{Q + 1}")
    eqs = [sum(b[j] * nodes[j] ** m for j in range(Q + 1)) - sympy.Rational(1, m + 1)
           for m in range(Q + 1)]
    sol = sympy.solve(eqs, b, dict=True)[0]
    K = tuple(sympy.factor(sympy.simplify(sol[b[j]])) for j in range(Q + 1))
    return pi, K


# ---------------------------------------------------------------------------
# pattern and run
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaptivePattern:
    """The frozen discrete decisions of one adaptive integration.

    Attributes
    ----------
    j : tuple of int
        Accepted trial index :math:`j_i` (1-based) of every step.
    clip : tuple of int
        Index of the clipped trial of every step (0: none).
    levels : tuple of tuple of int
        Table level of the controller function that produced each trial
        (-1 for Q, smooth functions and clipped trials).
    """

    j: tuple
    clip: tuple
    levels: tuple

    @property
    def k(self) -> int:
        return len(self.j)

    def kind(self, i, jj):
        """How trial ``jj`` (0-based) of step ``i`` is defined: 'Q', 'R', 'r' or 'clip'."""
        if self.clip[i] == jj + 1:
            return "clip"
        if jj == 0:
            return "Q" if i == 0 else "R"
        return "r"

    def diff(self, other) -> dict:
        """Summary of the differences to another pattern."""
        if other is None:
            return {"k": (self.k, None)}
        out = {"k": (self.k, other.k)}
        m = min(self.k, other.k)
        out["first_step_differing"] = next(
            (i for i in range(m) if (self.j[i], self.clip[i], self.levels[i])
             != (other.j[i], other.clip[i], other.levels[i])), None if self.k == other.k else m)
        out["rejections"] = (sum(self.j) - self.k, sum(other.j) - other.k)
        return out


@dataclass
class AdaptiveRun:
    """Values of all unknowns of model (55) for one parameter vector.

    ``x`` (k+1, n) states, ``y`` (k, n) accepted predictors
    :math:`y_{i+1}`, ``t`` (k+1) times, ``h``/``e`` (k) accepted steps and
    errors, ``H[i]``/``eta[i]`` (arrays of length :math:`j_i`) trial steps and
    errors, ``yt[i]``/``xc[i]`` (:math:`j_i`, n) trial predictors and
    correctors, ``Q`` (k) orders, ``pattern``, ``J`` grid indices of the
    measurement times.
    """

    u: np.ndarray
    t: np.ndarray
    x: np.ndarray
    y: np.ndarray
    h: np.ndarray
    e: np.ndarray
    H: list
    eta: list
    yt: list
    xc: list
    Q: np.ndarray
    pattern: AdaptivePattern
    J: np.ndarray

    @property
    def k(self) -> int:
        return len(self.h)

    @property
    def j(self) -> np.ndarray:
        return np.asarray(self.pattern.j, dtype=int)

    @property
    def clip(self) -> np.ndarray:
        return np.asarray(self.pattern.clip, dtype=int)

    @property
    def clipped_steps(self) -> np.ndarray:
        """Steps whose accepted step was clipped onto a measurement time."""
        return np.flatnonzero(self.clip == self.j)

    @property
    def n_trials(self) -> int:
        return int(self.j.sum())

    @property
    def n_rejected(self) -> int:
        return int(self.j.sum() - self.k)

    def grid(self, meas_times) -> Grid:
        """The accepted grid as a :class:`~pyomo_odeest.discretization.grid.Grid`."""
        I = np.zeros(len(self.t), dtype=int)
        I[self.J] = np.arange(1, len(self.J) + 1)
        return Grid(t=self.t.copy(), meas_times=np.asarray(meas_times, float), I=I, J=self.J.copy())

    def summary(self) -> dict:
        return dict(k=self.k, h_min=float(self.h.min()), h_max=float(self.h.max()),
                    trials=self.n_trials, rejected=self.n_rejected,
                    clipped=len(self.clipped_steps))


@dataclass
class AdaptiveAdjoint:
    r"""Multipliers of model (55) (names of [GM-grad], §2.4).

    ``p`` (k+1, n): state equations (row 0: :math:`x_0 = l(u)`); ``q``
    (k, n): predictor equations (only from :meth:`AdaptiveModel.general_adjoint`,
    otherwise :math:`q_{i+1} = h_i K_0 D_xf(y_{i+1})^\top p_{i+1}`); ``theta``
    (k+1): time equations :math:`t_i = t_{i-1} + h_{i-1}` (entry 0 unused);
    ``alpha[i]``, ``gamma[i]`` (length :math:`j_i`): trial-step and
    trial-error equations; ``beta``, ``delta`` (k): :math:`e_i = e_{i,j_i}`,
    :math:`h_i = h_{i,j_i}`; ``gradient``: eq. (59).
    """

    p: np.ndarray
    q: np.ndarray
    theta: np.ndarray
    alpha: list
    gamma: list
    beta: np.ndarray
    delta: np.ndarray
    gradient: np.ndarray

    def families(self) -> dict:
        """Flat arrays per multiplier family (for comparisons)."""
        return dict(p=self.p.ravel(), q=self.q.ravel(), theta=self.theta[1:],
                    alpha=np.concatenate(self.alpha), gamma=np.concatenate(self.gamma),
                    beta=self.beta, delta=self.delta)


def max_relative_discrepancy(a: AdaptiveAdjoint, b: AdaptiveAdjoint, families=None) -> dict:
    r"""Per family :math:`\max|a - b| / \max(\|b\|_\infty, 10^{-300})` and the overall maximum."""
    fa, fb = a.families(), b.families()
    out = {}
    for name in families or fa:
        x, y = fa[name], fb[name]
        if x.size == 0:
            out[name] = 0.0
            continue
        out[name] = float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300))
    out["max"] = max(out.values())
    return out


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
def _lamb(args, exprs):
    return sympy.lambdify(args, exprs, modules="numpy", cse=True)


class AdaptiveModel:
    r"""Model (55) of [GM-grad] for one problem, controller and :math:`Q_{\max}`.

    Parameters
    ----------
    problem : EstimationProblem
    controller : StepController
    qmax : int
        2 (Heun: Euler predictor, trapezoidal corrector) or 3 (variable-step
        AB2/AM3 from step 1 on).

    Main methods: :meth:`run` (adaptive integration, or replay of a frozen
    pattern), :meth:`objective` (:math:`J_{h,k}`), :meth:`adjoint`
    (corrected recursion (56)–(58) and gradient (59)),
    :meth:`general_adjoint` (sparse transposed solve of all equations),
    :meth:`gradient`.
    """

    def __init__(self, problem: EstimationProblem, controller: StepController | None = None,
                 qmax: int = 2):
        if not isinstance(problem, EstimationProblem):
            raise TypeError("AdaptiveModel needs an EstimationProblem")
        if controller is None:
            controller = StepController()
        if not isinstance(controller, StepController):
            raise TypeError("controller must be a StepController")
        if isinstance(qmax, bool) or qmax not in QMAX_ADAPTIVE:
            raise ValueError(f"qmax must be one of {QMAX_ADAPTIVE}, got {qmax!r}")
        if len(problem.meas_times) == 0:
            raise ValueError("the adaptive model needs measurement times (data)")
        self.problem = problem
        self.controller = controller
        self.qmax = int(qmax)
        self.q = int(controller.q) if controller.q is not None else self.qmax - 1
        self.n = len(problem.states)
        self.m = len(problem.parameters)
        self.t0 = float(problem.t0)
        meas = np.asarray(problem.meas_times, dtype=float)
        self.targets = np.unique(np.concatenate([meas[meas > self.t0], [float(problem.T)]]))
        self._symbolic()

    # -- symbolic pieces --------------------------------------------------
    def _symbolic(self):
        P, c = self.problem, self.controller
        n = self.n
        xi = sympy.symbols(f"_xi0:{n}", real=True, cls=sympy.Dummy)
        xm = sympy.symbols(f"_xm0:{n}", real=True, cls=sympy.Dummy)
        yv = sympy.symbols(f"_yv0:{n}", real=True, cls=sympy.Dummy)
        xcv = sympy.symbols(f"_xcv0:{n}", real=True, cls=sympy.Dummy)
        h, ti, tm = sympy.symbols("_h _ti _tm", real=True, cls=sympy.Dummy)
        u = tuple(P.u_sym)
        self.sym = dict(xi=xi, xm=xm, yv=yv, xcv=xcv, h=h, ti=ti, tm=tm, u=u)

        def f_at(z, tau):
            sub = dict(zip(P.x_sym, z))
            sub[P.t_sym] = tau
            return [fk.xreplace(sub) for fk in P.f_sym]

        floor2 = sympy.Float((c.floor * c.eps) ** 2, 17)
        a2 = sympy.Float(c.scale ** 2, 17)
        milne = sympy.Float(c.milne, 17)
        self.exprs = {}
        self._fn = {}
        args = (xi, xm, u, h, ti, tm)
        for Q in range(1, self.qmax):
            pi, K = adams_pc_coefficients(Q)
            rho = h / (ti - tm)
            pi = [sympy.sympify(v).subs(RHO, rho) for v in pi]
            K = [sympy.sympify(v).subs(RHO, rho) for v in K]
            pts = [(xi, ti), (xm, tm)][:Q]
            fp = [f_at(z, tau) for z, tau in pts]
            Y = [xi[s] + h * sum(pi[j] * fp[j][s] for j in range(Q)) for s in range(n)]
            fy = f_at(Y, ti + h)
            F = [K[0] * fy[s] + sum(K[j + 1] * fp[j][s] for j in range(Q)) for s in range(n)]
            fyv = f_at(yv, ti + h)
            Fv = [K[0] * fyv[s] + sum(K[j + 1] * fp[j][s] for j in range(Q)) for s in range(n)]
            XC = [xi[s] + h * F[s] for s in range(n)]
            d = [h * (K[0] * fy[s] + sum((K[j + 1] - pi[j]) * fp[j][s] for j in range(Q)))
                 for s in range(n)]
            E = milne * sympy.sqrt(sum(d[s] ** 2 / (a2 + xi[s] ** 2) for s in range(n)) / n + floor2)
            self.exprs[Q] = dict(Y=Y, F=F, Fv=Fv, XC=XC, E=E)
            # the same estimate on explicit trial stage values (used by the Pyomo block)
            self.exprs["Ed"] = milne * sympy.sqrt(
                sum((xcv[s] - yv[s]) ** 2 / (a2 + xi[s] ** 2) for s in range(n)) / n + floor2)
            Fm = sympy.Matrix(F)
            Em = sympy.Matrix([E])
            groups = [sympy.Matrix(xi), sympy.Matrix(xm), sympy.Matrix(u), sympy.Matrix([h]),
                      sympy.Matrix([ti]), sympy.Matrix([tm])]
            dF = [Fm.jacobian(g) if len(g) else sympy.zeros(n, 0) for g in groups]
            dE = [Em.jacobian(g) if len(g) else sympy.zeros(1, 0) for g in groups]
            self._fn[Q] = dict(
                Y=_lamb(args, Y), XC=_lamb(args, XC), E=_lamb(args, E),
                dF=_lamb(args, [Fm] + dF), dE=_lamb(args, [E] + dE))
        # Q(x0, u)
        x0s = tuple(P.x_sym)
        if c.h0 is not None:
            Qe = sympy.Float(c.h0, 17)
        else:
            f0 = f_at(x0s, sympy.Float(self.t0, 17))
            Qe = (sympy.Float(c.h0_factor * c.eps ** (1.0 / (self.q + 1)), 17)
                  / sympy.sqrt(1 + sum(f0[s] ** 2 / (a2 + x0s[s] ** 2) for s in range(n)) / n))
        self.Q_expr = Qe
        Qm = sympy.Matrix([Qe])
        self._Q = _lamb((x0s, u), [Qe, Qm.jacobian(sympy.Matrix(x0s)),
                                   Qm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(1, 0)])
        # l(u)
        lm = sympy.Matrix(P.l_sym)
        self._l = _lamb((u,), [lm, lm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(n, 0)])
        # f and its partials (general form)
        fm = sympy.Matrix(P.f_sym)
        xs = sympy.Matrix(x0s)
        self._f = _lamb((x0s, u, P.t_sym), [fm, fm.jacobian(xs),
                                            fm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(n, 0),
                                            fm.diff(P.t_sym)])
        self._coef = {}
        for Q in range(1, self.qmax):
            pi, K = adams_pc_coefficients(Q)
            c_all = list(pi) + list(K)
            self._coef[Q] = (_lamb((RHO,), [sympy.sympify(v) for v in c_all]),
                             _lamb((RHO,), [sympy.diff(v, RHO) for v in c_all]), Q)
        # misfit φ_j(x, u)
        self._phi = []
        for j in range(len(P.meas_times)):
            phi = sympy.sympify(misfit_sym(P, j))
            pm = sympy.Matrix([phi])
            self._phi.append(_lamb((x0s, u), [phi, pm.jacobian(xs),
                                              pm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(1, 0)]))
        self.const = misfit_constant(P)

    # -- numeric helpers ---------------------------------------------------
    def _check_u(self, u):
        u = np.asarray(self.problem.u0 if u is None else u, dtype=float).reshape(-1)
        if u.shape != (self.m,):
            raise ValueError(f"u must have {self.m} entries (parameters {self.problem.parameter_names})")
        return u

    def Qfun(self, x0, u):
        """:math:`Q(x_0, u)`, :math:`D_xQ`, :math:`D_uQ`."""
        v, qx, qu = self._Q(x0, u)
        return float(v), np.asarray(qx, float).reshape(-1), np.asarray(qu, float).reshape(-1)

    def ctl(self, which, e, level):
        """Value and derivative of the controller function ``which`` ('R' or 'r') at ``e``.

        ``level`` is the frozen table level (ignored by smooth functions).
        """
        fn = self.controller.R if which == "R" else self.controller.r
        eps = self.controller.eps
        if fn.smooth:
            return fn.value(e, eps, self.q), fn.deriv(e, eps, self.q)
        return fn.value(e, eps, self.q, level), 0.0

    def _hist(self, X, T, i, Q):
        xm = X[i - 1] if Q == 2 else X[i]
        tm = T[i - 1] if Q == 2 else T[i] - 1.0
        return xm, tm

    def initial_state(self, u):
        return np.asarray(self._l(u)[0], dtype=float).reshape(-1)

    # -- integration ---------------------------------------------------------
    def run(self, u=None, pattern: AdaptivePattern | None = None) -> AdaptiveRun:
        r"""Adaptive integration at ``u`` (or replay of a frozen ``pattern``).

        Free mode follows (55): trial :math:`h_{i,1} = R(e_{i-1})h_{i-1}`
        (:math:`Q(x_0,u)` for :math:`i = 0`), after a rejection
        :math:`h_{i,j+1} = r(e_{i,j})h_{i,j}`, accept the first
        :math:`e_{i,j} \le \varepsilon`; trials overshooting the next
        measurement time :math:`\tau` (first trials also when they would
        leave less than ``stretch`` × the step) are clipped to
        :math:`\tau - t_i`.  With ``pattern`` the accept indices, clips and
        table levels are imposed instead of decided (the frozen model).

        Raises
        ------
        AdaptiveError
            No trial accepted within ``j_max`` (the "always successful"
            assumption fails), step underflow, or too many steps.
        """
        u = self._check_u(u)
        c = self.controller
        eps, n = c.eps, self.n
        x0 = self.initial_state(u)
        if not np.all(np.isfinite(x0)):
            raise AdaptiveError(f"initial state l(u) is not finite: {x0}", 0, self.t0)
        X, T = [x0], [self.t0]
        Ys, Hs, Es, Hl, El, YT, XC, Qs = [], [], [], [], [], [], [], []
        jl, cl, lev = [], [], []
        tgt = 0
        span = float(self.targets[-1] - self.t0)
        i = 0
        while tgt < len(self.targets):
            if pattern is not None and i >= pattern.k:
                raise AdaptiveError(f"replayed pattern ends after {pattern.k} steps before T", i, T[-1])
            if i >= c.max_steps:
                raise AdaptiveError(f"more than max_steps={c.max_steps} steps", i, T[-1])
            tau = float(self.targets[tgt])
            Q = min(i + 1, self.qmax - 1)
            ti = T[i]
            xm, tm = self._hist(X, T, i, Q)
            fn = self._fn[Q]
            Htr, Etr, Ytr, Ctr, Ltr = [], [], [], [], []
            clip_at = 0
            jmax = c.j_max if pattern is None else pattern.j[i]
            accepted = None
            for jj in range(jmax):
                level = -1
                if jj == 0:
                    if i == 0:
                        h = self.Qfun(x0, u)[0]
                    else:
                        fnR = c.R
                        level = fnR.level(El[-1], eps) if pattern is None else pattern.levels[i][0]
                        h = self.ctl("R", El[-1], level)[0] * Hl[-1]
                else:
                    fnr = c.r
                    level = fnr.level(Etr[-1], eps) if pattern is None else pattern.levels[i][jj]
                    h = self.ctl("r", Etr[-1], level)[0] * Htr[-1]
                if pattern is None:
                    over = ti + h > tau
                    near = jj == 0 and tau - (ti + h) < c.stretch * h
                    clipped = bool(over or near)
                else:
                    clipped = pattern.clip[i] == jj + 1
                if clipped:
                    h = tau - ti
                    level = -1
                    clip_at = jj + 1
                if not (np.isfinite(h) and h > 1e-14 * span):
                    raise AdaptiveError(f"step size underflow/invalid (h={h:.3g}) in step {i} "
                                        f"at t={ti:.6g}", i, ti)
                args = (X[i], xm, u, h, ti, tm)
                with np.errstate(all="ignore"):
                    y = np.asarray(fn["Y"](*args), float).reshape(-1)
                    xc = np.asarray(fn["XC"](*args), float).reshape(-1)
                    e = float(fn["E"](*args))
                if not (np.all(np.isfinite(xc)) and np.isfinite(e)):
                    e = np.inf
                Htr.append(h)
                Etr.append(e)
                Ytr.append(y)
                Ctr.append(xc)
                Ltr.append(int(level))
                if pattern is None and e <= eps:
                    accepted = jj
                    break
            if pattern is not None:
                accepted = jmax - 1
            if accepted is None:
                raise AdaptiveError(
                    f"no trial of step {i} (t={ti:.6g}) accepted within j_max={c.j_max} trials "
                    f"(last estimate {Etr[-1]:.3g} > eps={eps:.3g})", i, ti)
            if not np.all(np.isfinite(Ctr[accepted])):
                raise AdaptiveError(f"non-finite state in step {i} at t={ti:.6g}", i, ti)
            h = Htr[accepted]
            land = clip_at == accepted + 1
            T.append(tau if land else ti + h)
            if land:
                tgt += 1
            X.append(Ctr[accepted])
            Ys.append(Ytr[accepted])
            Hl.append(h)
            El.append(Etr[accepted])
            Hs.append(np.array(Htr))
            Es.append(np.array(Etr))
            YT.append(np.array(Ytr))
            XC.append(np.array(Ctr))
            Qs.append(Q)
            jl.append(accepted + 1)
            cl.append(clip_at)
            lev.append(tuple(Ltr))
            i += 1
        if pattern is not None and i != pattern.k:
            raise AdaptiveError(f"replayed pattern has {pattern.k} steps; T reached after {i}", i, T[-1])
        t = np.array(T)
        pos = {v: ix for ix, v in enumerate(t)}
        try:
            J = np.array([pos[float(tau)] for tau in self.problem.meas_times], dtype=int)
        except KeyError as err:       # pragma: no cover - landing is exact by construction
            raise AdaptiveError(f"measurement time {err} is not a grid point") from None
        pat = AdaptivePattern(j=tuple(jl), clip=tuple(cl), levels=tuple(lev))
        return AdaptiveRun(u=u, t=t, x=np.array(X), y=np.array(Ys).reshape(-1, n), h=np.array(Hl),
                           e=np.array(El), H=Hs, eta=Es, yt=YT, xc=XC, Q=np.array(Qs, dtype=int),
                           pattern=pat, J=J)

    # -- objective -----------------------------------------------------------
    def _phi_parts(self, run):
        Phix = np.zeros((run.k + 1, self.n))
        Phiu = np.zeros(self.m)
        val = self.const
        for j, gi in enumerate(run.J):
            v, dx, du = self._phi[j](run.x[gi], run.u)
            val += float(v)
            Phix[gi] += np.asarray(dx, float).reshape(-1)
            Phiu += np.asarray(du, float).reshape(-1)
        return val, Phix, Phiu

    def objective(self, u=None, pattern=None, run=None) -> float:
        r""":math:`J_{h,k}(u)` (adaptive integration; frozen ``pattern`` if given)."""
        run = self.run(u, pattern) if run is None else run
        return self._phi_parts(run)[0]

    # -- adjoint: corrected recursion (56)-(59) -------------------------------------
    def _step_derivs(self, run, i):
        Q = int(run.Q[i])
        xm, tm = self._hist(run.x, run.t, i, Q)
        out = self._fn[Q]["dF"](run.x[i], xm, run.u, run.h[i], run.t[i], tm)
        F, Fxi, Fxm, Fu, Fh, Fti, Ftm = [np.asarray(a, float) for a in out]
        return Q, F.reshape(-1), Fxi, Fxm, Fu, Fh.reshape(-1), Fti.reshape(-1), Ftm.reshape(-1)

    def _trial_derivs(self, run, i, jj):
        Q = int(run.Q[i])
        xm, tm = self._hist(run.x, run.t, i, Q)
        out = self._fn[Q]["dE"](run.x[i], xm, run.u, run.H[i][jj], run.t[i], tm)
        return [np.asarray(a, float).reshape(-1) for a in out]

    def adjoint(self, run: AdaptiveRun) -> AdaptiveAdjoint:
        r"""Multipliers by the corrected backward recursion (56)–(58) and gradient (59).

        See the module docstring for the relations and the list of
        corrections to the print.  Runs backwards over the steps; within a
        step: :math:`\beta_t`, :math:`\delta_t`, then trials
        :math:`s = j_t, \dots, 1` (:math:`\gamma_{t,s}`, :math:`\alpha_{t,s}`),
        then :math:`p_t` and :math:`\theta_t`.
        """
        k, n, m = run.k, self.n, self.m
        pat = run.pattern
        _, Phix, Phiu = self._phi_parts(run)
        p = np.zeros((k + 1, n))
        theta = np.zeros(k + 1)
        accp = -Phix
        acct = np.zeros(k + 1)
        alpha = [np.zeros(len(run.H[i])) for i in range(k)]
        gamma = [np.zeros(len(run.H[i])) for i in range(k)]
        beta = np.zeros(k)
        delta = np.zeros(k)
        q = np.zeros((k, n))
        grad = Phiu.copy()
        p[k] = accp[k]
        theta[k] = 0.0
        for i in range(k - 1, -1, -1):
            Q, F, Fxi, Fxm, Fu, Fh, Fti, Ftm = self._step_derivs(run, i)
            hi = run.h[i]
            if i + 1 <= k - 1 and pat.kind(i + 1, 0) == "R":
                a1 = alpha[i + 1][0]
                Rv, dRv = self.ctl("R", run.e[i], pat.levels[i + 1][0])
            else:
                a1, Rv, dRv = 0.0, 0.0, 0.0
            beta[i] = a1 * dRv * hi                                  # corrected (57)/(58)
            delta[i] = p[i + 1] @ (F + hi * Fh) + a1 * Rv + theta[i + 1]
            ji = pat.j[i]
            dE = [self._trial_derivs(run, i, jj) for jj in range(ji)]
            gamma[i][ji - 1] = beta[i]
            alpha[i][ji - 1] = gamma[i][ji - 1] * dE[ji - 1][4][0] + delta[i]
            for jj in range(ji - 2, -1, -1):
                if pat.kind(i, jj + 1) == "r":
                    rv, drv = self.ctl("r", run.eta[i][jj], pat.levels[i][jj + 1])
                    gamma[i][jj] = alpha[i][jj + 1] * drv * run.H[i][jj]
                    alpha[i][jj] = alpha[i][jj + 1] * rv + gamma[i][jj] * dE[jj][4][0]
                else:       # trial jj+1 clipped: it does not depend on trial jj
                    gamma[i][jj] = 0.0
                    alpha[i][jj] = 0.0
            # contributions of step i to p_i, p_{i-1}, θ_i, θ_{i-1} and to the gradient
            accp[i] += hi * Fxi.T @ p[i + 1]
            acct[i] += hi * Fti @ p[i + 1]
            grad -= hi * Fu.T @ p[i + 1]
            for jj in range(ji):
                _, Exi, Exm, Eu, Eh, Eti, Etm = dE[jj]
                g = gamma[i][jj]
                accp[i] += g * Exi
                acct[i] += g * Eti[0]
                grad -= g * Eu
                if Q == 2:
                    accp[i - 1] += g * Exm
                    acct[i - 1] += g * Etm[0]
                if pat.kind(i, jj) == "clip":
                    acct[i] -= alpha[i][jj]
            if Q == 2:
                accp[i - 1] += hi * Fxm.T @ p[i + 1]
                acct[i - 1] += hi * Ftm @ p[i + 1]
            if i == 0 and pat.kind(0, 0) == "Q":
                _, Qx, Qu = self.Qfun(run.x[0], run.u)
                accp[0] += alpha[0][0] * Qx
                grad -= alpha[0][0] * Qu
            p[i] = p[i + 1] + accp[i]
            theta[i] = theta[i + 1] + acct[i] if i >= 1 else 0.0
            # predictor multiplier (y eliminated here): q_{i+1} = h K0 f_x(y)ᵀ p_{i+1}
            K0 = self._coef_values(Q, run, i)[1][0]
            fx = np.asarray(self._f(run.y[i], run.u, run.t[i] + hi)[1], float)
            q[i] = hi * K0 * fx.T @ p[i + 1]
        lu = np.asarray(self._l(run.u)[1], float).reshape(n, m)
        grad -= lu.T @ p[0]
        return AdaptiveAdjoint(p=p, q=q, theta=theta, alpha=alpha, gamma=gamma, beta=beta,
                               delta=delta, gradient=grad)

    def _coef_values(self, Q, run_or_none, i, h=None, ti=None, tm=None):
        """(π, K, dπ/dρ, dK/dρ, ρ) of step i (or of the given h, t_i, t_{i-1})."""
        cf, dcf, _ = self._coef[Q]
        if run_or_none is not None:
            h = run_or_none.h[i]
            ti = run_or_none.t[i]
            tm = run_or_none.t[i - 1] if Q == 2 else ti - 1.0
        rho = h / (ti - tm)
        cv = np.array(cf(rho), dtype=float).reshape(-1)
        dv = np.array(dcf(rho), dtype=float).reshape(-1)
        return cv[:Q], cv[Q:], dv[:Q], dv[Q:], rho

    # -- adjoint: general form -------------------------------------------------------
    def general_adjoint(self, run: AdaptiveRun, return_system=False):
        r"""All equations of (55) for the frozen pattern, one sparse transposed solve.

        Unknowns :math:`w`: :math:`x_0`; per step :math:`i` and trial
        :math:`j`: :math:`h_{i,j}, e_{i,j}` and the trial predictor/corrector
        :math:`\tilde y_{i,j}, \tilde x^c_{i,j}`; then :math:`h_i, e_i,
        y_{i+1}, x_{i+1}, t_{i+1}`.  Equations (one per unknown, same order):
        the stage equations with explicit coefficients
        :math:`\pi(\rho), K(\rho)`, :math:`e_{i,j} = N(\tilde x^c - \tilde y, x_i)`,
        the controller relations (or clips), the acceptance links and
        :math:`t_{i+1} = t_i + h_i`.  Derivatives are assembled by hand from
        :math:`f, f_x, f_u, f_t`, the coefficient derivatives and the
        controller derivatives, then
        :math:`(\partial G/\partial w)^\top\lambda = -\nabla_wF` is solved
        with SuperLU and :math:`\nabla J = \nabla_uF + (\partial G/\partial u)^\top\lambda`.
        """
        n, m, k = self.n, self.m, run.k
        u = run.u
        pat = run.pattern
        c = self.controller
        idx = {}
        N = 0

        def alloc(key, size):
            nonlocal N
            idx[key] = N
            N += size

        alloc(("x", 0), n)
        for i in range(k):
            for jj in range(pat.j[i]):
                alloc(("H", i, jj), 1)
                alloc(("eta", i, jj), 1)
                alloc(("yt", i, jj), n)
                alloc(("ct", i, jj), n)
            alloc(("h", i), 1)
            alloc(("e", i), 1)
            alloc(("y", i), n)
            alloc(("x", i + 1), n)
            alloc(("t", i + 1), 1)
        rows, cols, vals = [], [], []
        Gu = np.zeros((N, m))

        def put(eq, var, M):
            M = np.atleast_2d(np.asarray(M, float))
            r0, c0 = idx[eq], idx[var]
            rr, cc = np.meshgrid(np.arange(M.shape[0]), np.arange(M.shape[1]), indexing="ij")
            rows.append((r0 + rr).ravel())
            cols.append((c0 + cc).ravel())
            vals.append(M.ravel())

        def fparts(z, tau):
            fv, fx, fu, ft = self._f(z, u, tau)
            return (np.asarray(fv, float).reshape(-1), np.asarray(fx, float).reshape(n, n),
                    np.asarray(fu, float).reshape(n, m), np.asarray(ft, float).reshape(-1))

        I = np.eye(n)

        def stage(eq, v, i, hkey, hv, coefs, dcoefs, pts, Q):
            ti = run.t[i]
            put(eq, v, I)
            put(eq, ("x", i), -I)
            dh, dti, dtm = np.zeros(n), np.zeros(n), np.zeros(n)
            du = np.zeros((n, m))
            if Q == 2:
                D = ti - run.t[i - 1]
                rho_h, rho_ti, rho_tm = 1.0 / D, -hv / D**2, hv / D**2
            for (zkey, z, tau, which), cj, dcj in zip(pts, coefs, dcoefs):
                fv, fx, fu, ft = fparts(z, tau)
                put(eq, zkey, -hv * cj * fx)
                du -= hv * cj * fu
                dh -= cj * fv
                if Q == 2:
                    dh -= hv * dcj * rho_h * fv
                    dti -= hv * dcj * rho_ti * fv
                    dtm -= hv * dcj * rho_tm * fv
                if which == "new":
                    dh -= hv * cj * ft
                    dti -= hv * cj * ft
                elif which == "i":
                    dti -= hv * cj * ft
                else:
                    dtm -= hv * cj * ft
            put(eq, hkey, dh[:, None])
            if i >= 1:
                put(eq, ("t", i), dti[:, None])
            if Q == 2 and i - 1 >= 1:
                put(eq, ("t", i - 1), dtm[:, None])
            Gu[idx[eq]:idx[eq] + n] += du

        def stages(i, hkey, hv, ykey, ckey, yval):
            Q = int(run.Q[i])
            pi, K, dpi, dK, _ = self._coef_values(Q, None, i, hv, run.t[i],
                                                   run.t[i - 1] if Q == 2 else run.t[i] - 1.0)
            past = [(("x", i), run.x[i], run.t[i], "i")]
            if Q == 2:
                past.append((("x", i - 1), run.x[i - 1], run.t[i - 1], "m"))
            stage(ykey, ykey, i, hkey, hv, pi, dpi, past, Q)
            new = [(ykey, yval, run.t[i] + hv, "new")]
            stage(ckey, ckey, i, hkey, hv, K, dK, new + past, Q)

        # x0 = l(u)
        put(("x", 0), ("x", 0), I)
        Gu[0:n] -= np.asarray(self._l(u)[1], float).reshape(n, m)
        a2 = c.scale ** 2
        fl2 = (c.floor * c.eps) ** 2
        for i in range(k):
            ji = pat.j[i]
            for jj in range(ji):
                Hk, ek, ykey, ckey = ("H", i, jj), ("eta", i, jj), ("yt", i, jj), ("ct", i, jj)
                hv = run.H[i][jj]
                stages(i, Hk, hv, ykey, ckey, run.yt[i][jj])
                # e_ij = N(ct - yt, x_i)
                d = run.xc[i][jj] - run.yt[i][jj]
                xi = run.x[i]
                w = a2 + xi**2
                S = np.sum(d**2 / w) / n + fl2
                Nd = c.milne * d / (n * w * np.sqrt(S))
                Nx = -c.milne * d**2 * xi / (n * w**2 * np.sqrt(S))
                put(ek, ek, [[1.0]])
                put(ek, ckey, -Nd[None, :])
                put(ek, ykey, Nd[None, :])
                put(ek, ("x", i), -Nx[None, :])
                # controller relation of the trial step
                put(Hk, Hk, [[1.0]])
                kind = pat.kind(i, jj)
                if kind == "Q":
                    _, Qx, Qu = self.Qfun(run.x[0], u)
                    put(Hk, ("x", 0), -Qx[None, :])
                    Gu[idx[Hk]] -= Qu
                elif kind == "R":
                    Rv, dR = self.ctl("R", run.e[i - 1], pat.levels[i][0])
                    put(Hk, ("e", i - 1), [[-dR * run.h[i - 1]]])
                    put(Hk, ("h", i - 1), [[-Rv]])
                elif kind == "r":
                    rv, dr = self.ctl("r", run.eta[i][jj - 1], pat.levels[i][jj])
                    put(Hk, ("eta", i, jj - 1), [[-dr * run.H[i][jj - 1]]])
                    put(Hk, ("H", i, jj - 1), [[-rv]])
                else:   # clip: h_ij = tau - t_i
                    if i >= 1:
                        put(Hk, ("t", i), [[1.0]])
            # accepted step / error
            put(("h", i), ("h", i), [[1.0]])
            put(("h", i), ("H", i, ji - 1), [[-1.0]])
            put(("e", i), ("e", i), [[1.0]])
            put(("e", i), ("eta", i, ji - 1), [[-1.0]])
            stages(i, ("h", i), run.h[i], ("y", i), ("x", i + 1), run.y[i])
            put(("t", i + 1), ("t", i + 1), [[1.0]])
            put(("t", i + 1), ("h", i), [[-1.0]])
            if i >= 1:
                put(("t", i + 1), ("t", i), [[-1.0]])
        Gw = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=(N, N))
        _, Phix, Phiu = self._phi_parts(run)
        Fw = np.zeros(N)
        for i in range(k + 1):
            Fw[idx[("x", i)]:idx[("x", i)] + n] = Phix[i]
        # Gw is lower triangular in this ordering (each equation uses earlier unknowns and
        # its own): natural ordering without pivoting keeps the LU exact-triangular.
        lu = spla.splu(Gw.T.tocsc(), permc_spec="NATURAL", diag_pivot_thresh=0.0,
                       options=dict(SymmetricMode=True))
        lam = lu.solve(-Fw)
        grad = Phiu + Gu.T @ lam

        def get(key, size=1):
            v = lam[idx[key]:idx[key] + size]
            return v if size > 1 else float(v[0])

        adj = AdaptiveAdjoint(
            p=np.array([get(("x", i), n) for i in range(k + 1)]).reshape(k + 1, n),
            q=np.array([get(("y", i), n) for i in range(k)]).reshape(k, n),
            theta=np.array([0.0] + [get(("t", i)) for i in range(1, k + 1)]),
            alpha=[np.array([get(("H", i, jj)) for jj in range(pat.j[i])]) for i in range(k)],
            gamma=[np.array([get(("eta", i, jj)) for jj in range(pat.j[i])]) for i in range(k)],
            beta=np.array([get(("e", i)) for i in range(k)]),
            delta=np.array([get(("h", i)) for i in range(k)]),
            gradient=grad)
        if return_system:
            return adj, dict(Gw=Gw, Gu=Gu, Fw=Fw, index=idx, lam=lam)
        return adj

    def step_targets(self, pattern: AdaptivePattern) -> np.ndarray:
        r"""Landing target :math:`\tau` (next measurement time or T) of every step."""
        out = np.empty(pattern.k)
        tgt = 0
        for i in range(pattern.k):
            out[i] = self.targets[tgt]
            if pattern.clip[i] == pattern.j[i]:
                tgt += 1
        return out

    def gradient_from_multipliers(self, run: AdaptiveRun, p, alpha, gamma) -> np.ndarray:
        r"""Eq. (59) for given multipliers (e.g. Ipopt's duals of the block):
        :math:`\sum D_u\Phi - \sum h_i D_uF_i^\top p_{i+1} - D_ul^\top p_0
        - \alpha_{0,1}D_uQ - \sum\gamma_{i,j}D_uE_{i,j}`."""
        _, _, grad = self._phi_parts(run)
        grad = grad.copy()
        for i in range(run.k):
            Fu = self._step_derivs(run, i)[4]
            grad -= run.h[i] * Fu.T @ p[i + 1]
            for jj in range(run.pattern.j[i]):
                grad -= gamma[i][jj] * self._trial_derivs(run, i, jj)[3]
        if run.pattern.kind(0, 0) == "Q":
            grad -= alpha[0][0] * self.Qfun(run.x[0], run.u)[2]
        lu = np.asarray(self._l(run.u)[1], float).reshape(self.n, self.m)
        return grad - lu.T @ p[0]

    # -- gradients -------------------------------------------------------------------
    def fixed_grid_model(self, run: AdaptiveRun):
        """The fixed-step :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` on the accepted grid."""
        from .discrete import DiscreteModel
        return DiscreteModel(self.problem, "adams_pc", self.qmax, grid=run.grid(self.problem.meas_times))

    def gradient(self, u=None, method="adjoint", run=None, fd_step=1e-6, pattern=None):
        r""":math:`\nabla J_{h,k}(u)` for the pattern of the run at ``u``.

        method : ``'adjoint'`` (corrected (56)–(59)), ``'general'`` (sparse
        transposed solve), ``'fd'`` (central differences of the frozen-pattern
        :math:`J_{h,k}`), ``'frozen_grid'`` (gradient of the fixed-step
        :math:`J_k` on the accepted grid, i.e. the step-size sensitivities
        dropped).
        """
        u = self._check_u(u)
        if run is None:
            run = self.run(u, pattern)
        if method == "adjoint":
            return self.adjoint(run).gradient
        if method == "general":
            return self.general_adjoint(run).gradient
        if method == "frozen_grid":
            return self.fixed_grid_model(run).gradient(u)
        if method == "fd":
            g = np.zeros(self.m)
            for a in range(self.m):
                du = np.zeros(self.m)
                du[a] = fd_step * max(1.0, abs(u[a]))
                g[a] = (self.objective(u + du, run.pattern)
                        - self.objective(u - du, run.pattern)) / (2 * du[a])
            return g
        raise ValueError(f"unknown gradient method {method!r}; use 'adjoint', 'general', 'fd' "
                         "or 'frozen_grid'")

    def pattern_stable(self, u, du_list) -> bool:
        """True if free adaptive integration at every ``u + du`` reproduces the pattern at ``u``."""
        base = self.run(u).pattern
        return all(self.run(np.asarray(u) + np.asarray(du)).pattern == base for du in du_list)
