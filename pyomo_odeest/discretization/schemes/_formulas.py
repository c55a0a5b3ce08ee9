"""A step as data: points, stages and step formulas (:class:`StepFormula`), and batches of
steps that share a formula (:class:`StepBatch`); what the Pyomo renderer, the simulator and
the adjoint consume."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_POINT_KINDS = ("past", "new", "stage")


# ---------------------------------------------------------------------------
# Step description
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PointRef:
    r"""Where an :math:`f` or :math:`\dot f` term of a step is evaluated.

    Parameters
    ----------
    kind : {"past", "new", "stage"}
        ``"past"``: the known state :math:`x_{i-\mathrm{lag}}` at
        :math:`t_{i-\mathrm{lag}}` (``lag = 0`` is :math:`x_i`);
        ``"new"``: the unknown new state :math:`x_{i+1}` at :math:`t_{i+1}`;
        ``"stage"``: an intermediate stage of the same step (e.g. the
        predictor :math:`y_{i+1}`), evaluated at :math:`t_{i+1}`.
    lag : int
        Backward offset for ``kind="past"``; must be 0 otherwise.
    stage : str
        Stage name for ``kind="stage"``; must be empty otherwise.
    """

    kind: str
    lag: int = 0
    stage: str = ""

    def __post_init__(self):
        if self.kind not in _POINT_KINDS:
            raise ValueError(f"PointRef.kind must be one of {_POINT_KINDS}, got {self.kind!r}")
        if not isinstance(self.lag, (int, np.integer)) or isinstance(self.lag, bool):
            raise ValueError(f"PointRef.lag must be an int, got {self.lag!r}")
        if self.kind == "past":
            if self.lag < 0:
                raise ValueError(f"PointRef.lag must be >= 0, got {self.lag}")
            if self.stage:
                raise ValueError("PointRef(kind='past') takes no stage name")
        else:
            if self.lag != 0:
                raise ValueError(f"PointRef(kind={self.kind!r}) takes no lag")
            if self.kind == "stage" and not self.stage:
                raise ValueError("PointRef(kind='stage') needs a stage name")
            if self.kind == "new" and self.stage:
                raise ValueError("PointRef(kind='new') takes no stage name")


def _targets_self(p: PointRef, name: str) -> bool:
    """Whether ``p`` is the value that stage ``name`` defines (an implicit term)."""
    return (p.kind == "stage" and p.stage == name) or (name == "x" and p.kind == "new")


@dataclass(frozen=True)
class Stage:
    r"""One stage equation of a step.

    .. math::

        v = x_i + h_i \sum_{(p, c) \in \text{f\_terms}} c\, f(p)
                + h_i^2 \sum_{(p, d) \in \text{fdot\_terms}} d\, \dot f(p),

    where :math:`\dot f = D_x f\, f + \partial_t f` and every point ``p`` other
    than a past point is evaluated at :math:`t_{i+1}`.

    Parameters
    ----------
    name : str
        ``"y"`` (predictor), ``"yc"`` (corrector) or ``"x"``; the stage
        named ``"x"`` defines the new state :math:`x_{i+1}` and is always the
        last stage of a step.
    f_terms, fdot_terms : tuple of (PointRef, float)
        Coefficients per unit :math:`h_i` and :math:`h_i^2` respectively.
    """

    name: str
    f_terms: tuple[tuple[PointRef, float], ...]
    fdot_terms: tuple[tuple[PointRef, float], ...] = ()

    @property
    def implicit(self) -> bool:
        """True if the stage references its own value (``"new"`` for ``x``)."""
        return any(_targets_self(p, self.name) for p, _ in self.f_terms + self.fdot_terms)

    @property
    def points(self) -> tuple[PointRef, ...]:
        """All points referenced by the stage (f terms first, then fdot terms)."""
        return tuple(p for p, _ in self.f_terms) + tuple(p for p, _ in self.fdot_terms)


@dataclass(frozen=True)
class StepFormula:
    r"""The equations of step :math:`i` [GM-grad, eq. (2)] on a given grid.

    Parameters
    ----------
    i : int
        Step index (the step goes from :math:`t_i` to :math:`t_{i+1}`).
    order_q : int
        :math:`Q_i`, the number of past points used.
    stages : tuple of Stage
        Stage equations in evaluation order; the last one is named ``"x"``.
    """

    i: int
    order_q: int
    stages: tuple[Stage, ...]

    @property
    def structure(self) -> tuple:
        """Hashable structure: stages with coefficients stripped.

        Two steps have equal ``structure`` exactly when their equations differ
        only in coefficient values (so one indexed Pyomo constraint, with
        coefficient parameters, can render all of them).
        """
        return tuple(
            (st.name, tuple(p for p, _ in st.f_terms), tuple(p for p, _ in st.fdot_terms))
            for st in self.stages
        )

    @property
    def coefficients(self) -> tuple[float, ...]:
        """All coefficients, flattened in the order of :attr:`structure`."""
        out: list[float] = []
        for st in self.stages:
            out.extend(c for _, c in st.f_terms)
            out.extend(c for _, c in st.fdot_terms)
        return tuple(out)

    @property
    def max_lag(self) -> int:
        """Largest ``lag`` of a past point (0 if only :math:`x_i` is used)."""
        lags = [p.lag for st in self.stages for p in st.points if p.kind == "past"]
        return max(lags, default=0)

    @property
    def implicit(self) -> bool:
        """True if any stage is implicit."""
        return any(st.implicit for st in self.stages)

    def stage(self, name: str) -> Stage:
        """Return the stage called ``name``."""
        for st in self.stages:
            if st.name == name:
                return st
        raise KeyError(f"step {self.i} has no stage {name!r}")


@dataclass(frozen=True)
class StepBatch:
    r"""Steps of equal order :math:`Q_i` as arrays (see :meth:`MultistepScheme.batches`).

    Parameters
    ----------
    q : int
        :math:`Q_i` of every step of the batch.
    steps : numpy.ndarray
        Step indices ``(B,)``, increasing.
    stages : tuple
        One ``(name, f_terms, fdot_terms)`` per stage, as in
        :class:`Stage`, but every coefficient is an array ``(B,)`` over the
        steps of the batch.
    """

    q: int
    steps: np.ndarray
    stages: tuple

    @property
    def structure(self) -> tuple:
        """As :attr:`StepFormula.structure` (equal for every step of the batch)."""
        return tuple((name, tuple(p for p, _ in ft), tuple(p for p, _ in dt))
                     for name, ft, dt in self.stages)

    def formula(self, r: int) -> StepFormula:
        """The :class:`StepFormula` of the ``r``-th step of the batch."""
        return StepFormula(
            i=int(self.steps[r]), order_q=self.q,
            stages=tuple(Stage(name, tuple((p, float(c[r])) for p, c in ft),
                               tuple((p, float(c[r])) for p, c in dt))
                         for name, ft, dt in self.stages))
