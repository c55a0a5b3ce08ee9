"""The frozen decisions of one adaptive integration (:class:`AdaptivePattern`),
its values (:class:`AdaptiveRun`) and the multipliers of model (55) (:class:`AdaptiveAdjoint`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._grid import Grid

__all__ = ["AdaptivePattern", "AdaptiveRun", "AdaptiveAdjoint", "max_relative_discrepancy"]


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
        """The accepted grid as a :class:`~pyomo_odeest.discretization._grid.Grid`."""
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
        out[name] = (float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300))
                     if x.size else 0.0)
    out["max"] = max(out.values())
    return out
