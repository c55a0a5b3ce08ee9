r"""The step-size controller of model (55) [GM-grad, §2.4]: tolerance, :math:`j_{\max}`
and the functions :math:`Q, R, r` (smooth power laws or piecewise-constant tables)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from .._grid import _int_at_least

__all__ = ["QMAX_ADAPTIVE", "AdaptiveError", "PowerLaw", "StepTable", "StepController"]

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
        :math:`a` of the weighted norm: each state's difference is measured relative
        to :math:`\sqrt{a^2 + x_k^2}`, so absolutely below :math:`|x_k| = a` and
        relatively above (CVODES's ``atol``/``rtol``).  The default 0.01 keeps the
        global error at the measurement times proportional to ε for states of
        magnitude 0.01-1 (SEIRD's fractions of a population: ε 1e-3 -> 1e-5 lowers
        it 60-fold, where :math:`a = 1`, an absolute norm there, lowers it 3-fold
        and the tightening of ``fit_tol`` cannot reach its target;
        docs/adaptive.md).
    floor : float
        :math:`\phi`: the estimate is never below :math:`C_M\phi\varepsilon`.
    q : int or None
        Order in the power-law exponent :math:`1/(q+1)`; default
        :math:`Q_{\max}-1`.
    stretch : float
        A first trial leaving less than ``stretch`` times its length before
        the next measurement time is stretched (clipped) onto it.
    max_steps : int
        Safety bound on the number of steps: an integration needing more raises
        :class:`AdaptiveError`.
    h_min : float or None
        Smallest trial step: a smaller one (a solution blowing up, a stiff
        solution at the explicit scheme's stability limit) raises
        :class:`AdaptiveError`.  ``None``: :math:`10^{-14}` times the time span.
    """

    eps: float = 1e-3
    j_max: int = 10
    h0: float | None = None
    h0_factor: float = 0.5
    R: PowerLaw | StepTable = field(default_factory=lambda: PowerLaw(0.9, 0.2, 5.0))
    r: PowerLaw | StepTable = field(default_factory=lambda: PowerLaw(0.9, 0.1, 0.9))
    milne: float = 1.0 / 6.0
    scale: float = 0.01
    floor: float = 1e-6
    q: int | None = None
    stretch: float = 0.1
    max_steps: int = 100_000
    h_min: float | None = None

    def __post_init__(self):
        eps = self.eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) \
                or not np.isfinite(eps) or eps <= 0:
            raise ValueError(f"the tolerance eps must be positive and finite, got {eps!r}")
        if not _int_at_least(self.j_max, 1):
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
        if self.q is not None and not _int_at_least(self.q, 1):
            raise ValueError(f"q must be an int >= 1 or None, got {self.q!r}")
        if not 0 <= self.stretch < 1:
            raise ValueError(f"stretch must be in [0, 1), got {self.stretch!r}")
        if not _int_at_least(self.max_steps, 1):
            raise ValueError(f"max_steps must be a positive int, got {self.max_steps!r}")
        if self.h_min is not None and not (np.isfinite(self.h_min) and self.h_min > 0):
            raise ValueError(f"h_min must be positive and finite or None, got {self.h_min!r}")

    @property
    def piecewise_constant(self) -> bool:
        """Theorem 3 setting: constant Q and piecewise-constant R, r."""
        return self.h0 is not None and not self.R.smooth and not self.r.smooth
