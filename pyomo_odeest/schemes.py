r"""Variable-step, variable-order multistep schemes for the discrete problem.

The continuous dynamics :math:`\dot x = f(x, u, t)` are replaced by the
discrete equations of seed 000, eq. (2),

.. math::

    x_{i+1} = x_i + h_i F_i(x_i, x_{i-1}, \dots, x_{i-Q_i+1}; u),
    \qquad i = 0, \dots, k-1,

on a grid :math:`t_0 < t_1 < \dots < t_k` with steps :math:`h_i = t_{i+1} - t_i`
that are *not* uniform in general.  The order policy is the one of seed 000
(after eq. (5)),

.. math::

    Q_i = \min\{i + 1, Q_{\max} - 1\},

so step 0 uses the initial state only and the number of past points grows by
one per step until :math:`Q_{\max} - 1` is reached.

Four schemes are provided, one object each:

``AdamsPC``
    Adams–Bashforth predictor / Adams–Moulton corrector (seed 000, eqs. (4)–(5)).
``AdamsMoulton``
    Fully implicit Adams–Moulton of the same orders.
``Enright``
    Enright's implicit second-derivative scheme (seed 000, eq. (6)).
``SemiImplicitEnright``
    Predictor–corrector–recorrector of seed 000, §2.3.2.

Every coefficient is derived for the actual step history from order
conditions (exactness on polynomials), see :func:`adams_bashforth_coefficients`,
:func:`adams_moulton_coefficients` and :func:`enright_coefficients`; on uniform
grids they reduce to the classical tables.  A step is described by a
:class:`StepFormula` (a sequence of :class:`Stage` objects, each a linear
combination of :math:`f` and :math:`\dot f` values at named points), which is
what the Pyomo renderer, the simulator and the adjoint consume.  The function
:func:`integrate` is the plain-numpy reference implementation of those
formulas.

Start-up and the observable order
---------------------------------
With the ramp :math:`Q_i = \min(i+1, Q_{\max}-1)` the first steps are of low
order.  Step 0 of the Adams schemes is Heun's method / the trapezoidal rule
(local error :math:`O(h^3)`) and step 0 of the Enright schemes is the
one-step member of order 3 (local error :math:`O(h^4)`).  A fixed number of
low-order steps of size :math:`h` limits the *global* error, so on a plain
uniform grid the observed order is :attr:`MultistepScheme.startup_order`
(:math:`\min(3, Q_{\max})` for Adams, :math:`\min(4, Q_{\max}+1)` for Enright)
rather than :attr:`MultistepScheme.order`.  The full order is recovered with
a grid whose start-up steps shrink faster than :math:`h`
(``make_grid(..., startup="refined")`` in :mod:`pyomo_odeest.grid`) or with
exact start values (``integrate(..., start_values=...)``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from numpy.polynomial import chebyshev as _cheb
from numpy.polynomial import legendre as _leg

__all__ = [
    "PointRef",
    "Stage",
    "StepFormula",
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
]

#: Valid range (inclusive) of the maximum corrector order :math:`Q_{\max}`.
QMAX_RANGE = (2, 8)
#: :math:`Q_{\max}` used by :func:`get_scheme` when none is given.
DEFAULT_QMAX = 4

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

    def _targets_self(self, p: PointRef) -> bool:
        if p.kind == "stage" and p.stage == self.name:
            return True
        return self.name == "x" and p.kind == "new"

    @property
    def implicit(self) -> bool:
        """True if the stage references its own value (``"new"`` for ``x``)."""
        return any(self._targets_self(p) for p, _ in self.f_terms + self.fdot_terms)

    @property
    def points(self) -> tuple[PointRef, ...]:
        """All points referenced by the stage (f terms first, then fdot terms)."""
        return tuple(p for p, _ in self.f_terms) + tuple(p for p, _ in self.fdot_terms)


@dataclass(frozen=True)
class StepFormula:
    r"""The equations of step :math:`i` (seed 000, eq. (2)) on a given grid.

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


# ---------------------------------------------------------------------------
# Coefficient derivations
# ---------------------------------------------------------------------------
def _as_times(t_hist, what="t_hist") -> np.ndarray:
    th = np.atleast_1d(np.asarray(t_hist, dtype=float))
    if th.ndim != 1 or th.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of times")
    if not np.all(np.isfinite(th)):
        raise ValueError(f"{what} contains non-finite values: {th}")
    if th.size > 1 and not np.all(np.diff(th) < 0):
        raise ValueError(
            f"{what} must be strictly decreasing (t_i, t_(i-1), ..., t_(i-Q+1)), got {th}"
        )
    return th


def _quadrature_weights(value_nodes, deriv_nodes=()) -> np.ndarray:
    r"""Weights of a generalized quadrature on :math:`[0, 1]`.

    Finds :math:`w, v` with

    .. math::

        \int_0^1 P(s)\,ds = \sum_j w_j P(s_j) + \sum_l v_l P'(r_l)

    for every polynomial :math:`P` of degree :math:`< N`, :math:`N` the total
    number of nodes.  The moment conditions are written in the Chebyshev
    basis on the interval spanned by the nodes and :math:`[0, 1]` (well
    conditioned for the small :math:`N` used here); the moments are exact
    Gauss–Legendre sums.
    """
    sv = np.asarray(value_nodes, dtype=float).ravel()
    sd = np.asarray(deriv_nodes, dtype=float).ravel()
    n = sv.size + sd.size
    allpts = np.concatenate([sv, sd, [0.0, 1.0]])
    lo, hi = allpts.min(), allpts.max()
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)

    def u(s):
        return (np.asarray(s, dtype=float) - mid) / half

    a = np.empty((n, n))
    a[:, : sv.size] = _cheb.chebvander(u(sv), n - 1).T
    if sd.size:
        for m in range(n):
            c = np.zeros(n)
            c[m] = 1.0
            a[m, sv.size:] = _cheb.chebval(u(sd), _cheb.chebder(c)) / half
    xg, wg = _leg.leggauss(n // 2 + 1)
    sg = 0.5 * (xg + 1.0)
    rhs = 0.5 * (_cheb.chebvander(u(sg), n - 1).T @ wg)
    return np.linalg.solve(a, rhs)


def adams_bashforth_coefficients(t_hist, h) -> np.ndarray:
    r"""Variable-step Adams–Bashforth coefficients :math:`\Pi_1, \dots, \Pi_Q`.

    The predictor of seed 000, eq. (5),

    .. math::

        y_{i+1} = x_i + h_i \sum_{j=1}^{Q} \Pi_j f(x_{i-j+1}, t_{i-j+1}),

    integrates over :math:`[t_i, t_i + h_i]` the polynomial interpolating
    :math:`f` at the :math:`Q` past times.  With :math:`s = (t - t_i)/h_i`
    the weights solve :math:`\sum_j \Pi_j s_j^m = 1/(m+1)`,
    :math:`m = 0, \dots, Q-1`: the formula is exact when :math:`x` is a
    polynomial of degree :math:`\le Q` (local error :math:`O(h^{Q+1})`,
    order :math:`Q`).

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots, t_{i-Q+1})`, strictly decreasing.
    h : float
        Step :math:`h_i > 0`.

    Returns
    -------
    numpy.ndarray
        :math:`(\Pi_1, \dots, \Pi_Q)`; uniform steps give the classical
        tables, e.g. AB2 = (3/2, -1/2).
    """
    th = _as_times(t_hist)
    h = float(h)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"step h must be positive and finite, got {h}")
    return _quadrature_weights((th - th[0]) / h)


def adams_moulton_coefficients(t_hist, t_new, q=None) -> np.ndarray:
    r"""Variable-step Adams–Moulton coefficients :math:`K_0, K_1, \dots, K_Q`.

    The corrector of seed 000, eq. (4),

    .. math::

        x_{i+1} = x_i + h_i \Big[K_0 f(\cdot, t_{i+1})
                  + \sum_{j=1}^{Q} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    integrates the polynomial interpolating :math:`f` at :math:`t_{i+1}` and
    the :math:`Q` past times (:math:`Q+1` points): exact for :math:`x` of
    degree :math:`\le Q+1` (order :math:`Q+1`, written :math:`K^{Q+1}` in the
    seed).

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots)`, strictly decreasing; its first entry
        fixes :math:`h_i = t_{\mathrm{new}} - t_i`.
    t_new : float
        :math:`t_{i+1} > t_i`.
    q : int, optional
        Number of past points :math:`Q` to use (default ``len(t_hist)``);
        ``q=0`` gives the backward Euler rule :math:`K_0 = 1`.

    Returns
    -------
    numpy.ndarray
        :math:`(K_0, K_1, \dots, K_Q)`; uniform steps give the classical
        tables, e.g. AM2 = (1/2, 1/2), AM3 = (5/12, 8/12, -1/12).
    """
    th = _as_times(t_hist)
    h = float(t_new) - th[0]
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"t_new must be finite and > t_hist[0]; got t_new={t_new}, t_i={th[0]}")
    q = th.size if q is None else int(q)
    if not 0 <= q <= th.size:
        raise ValueError(f"q must be in [0, len(t_hist)={th.size}], got {q}")
    s = (th[:q] - th[0]) / h
    return _quadrature_weights(np.concatenate([[1.0], s]))


def enright_coefficients(t_hist, t_new) -> tuple[np.ndarray, float]:
    r"""Variable-step Enright second-derivative coefficients.

    Seed 000, eq. (6), with the :math:`h^2` coefficient written as its own
    unknown :math:`\sigma` (the seed reuses the symbol :math:`\rho_0`):

    .. math::

        x_{i+1} = x_i + h_i \sum_{j=1}^{Q} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(x_{i+1}),
        \qquad \dot f = D_x f\, f + \partial_t f.

    The :math:`Q + 2` unknowns are fixed by exactness for :math:`x` a
    polynomial of degree :math:`\le Q + 2` (in :math:`s = (t-t_i)/h_i`:
    :math:`1 = \sum_j \rho_j m s_j^{m-1} + \rho_0 m + \sigma m (m-1)`,
    :math:`m = 1, \dots, Q+2`), i.e. the :math:`\rho^{Q+2}` of the seed.  Local
    error :math:`O(h^{Q+3})`, order :math:`Q + 2`.  For :math:`Q = 1`,
    :math:`\rho_0 = 2/3`, :math:`\rho_1 = 1/3`, :math:`\sigma = -1/6` on any
    step.

    Parameters
    ----------
    t_hist : sequence of float
        :math:`(t_i, t_{i-1}, \dots, t_{i-Q+1})`, strictly decreasing.
    t_new : float
        :math:`t_{i+1} > t_i`.

    Returns
    -------
    rho : numpy.ndarray
        :math:`(\rho_0, \rho_1, \dots, \rho_Q)`.
    sigma : float
        Coefficient of :math:`h_i^2 \dot f(x_{i+1})`.
    """
    th = _as_times(t_hist)
    h = float(t_new) - th[0]
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"t_new must be finite and > t_hist[0]; got t_new={t_new}, t_i={th[0]}")
    s = (th - th[0]) / h
    w = _quadrature_weights(np.concatenate([[1.0], s]), [1.0])
    return w[:-1], float(w[-1])


# ---------------------------------------------------------------------------
# Schemes
# ---------------------------------------------------------------------------
def _check_qmax(qmax) -> int:
    lo, hi = QMAX_RANGE
    if isinstance(qmax, bool) or not isinstance(qmax, (int, np.integer)):
        raise ValueError(f"qmax must be an int in [{lo}, {hi}], got {qmax!r}")
    if not lo <= int(qmax) <= hi:
        raise ValueError(f"qmax must be an int in [{lo}, {hi}], got {qmax}")
    return int(qmax)


def _check_grid(t) -> np.ndarray:
    t = np.ascontiguousarray(np.asarray(t, dtype=float))
    if t.ndim != 1 or t.size < 2:
        raise ValueError("the grid t must be a 1-D array with at least two times")
    if not np.all(np.isfinite(t)):
        raise ValueError("the grid t contains non-finite values")
    if not np.all(np.diff(t) > 0):
        bad = int(np.argmin(np.diff(t)))
        raise ValueError(f"the grid t must be strictly increasing (t[{bad}]={t[bad]}, t[{bad + 1}]={t[bad + 1]})")
    return t


def _past(lag: int) -> PointRef:
    return PointRef("past", lag)


_NEW = PointRef("new")


class MultistepScheme:
    r"""Base class of the multistep schemes of seed 000, eqs. (2), (4)–(6).

    A scheme maps a grid :math:`t_0 < \dots < t_k` to the list of step
    equations :math:`x_{i+1} = x_i + h_i F_i(\dots)` with coefficients derived
    for the actual step history.

    Contract for subclasses
    -----------------------
    1. Set the class attributes ``name`` (registry key), ``needs_fdot``
       (whether :math:`\dot f` appears) and ``stage_names`` (stage names in
       evaluation order, ending with ``"x"``).
    2. Implement the properties ``order`` (classical global order for
       :math:`Q_i \equiv Q_{\max}-1`) and ``startup_order`` (observed global
       order on a plain uniform grid when the order ramp is used).
    3. Implement ``_stages(t_hist, t_new, q)`` returning the stages of one step
       with ``q`` past points, ``t_hist = (t_i, ..., t_{i-q+1})``.  Do not
       call it directly: :meth:`step_formula` calls it and then checks it.
    4. Coefficients are dimensionless: ``f_terms`` multiply :math:`h_i`,
       ``fdot_terms`` multiply :math:`h_i^2`.
    5. A stage may reference past points with ``lag < q``, stages defined
       before it, and itself (``"new"`` for ``"x"``: implicit stage).
       Non-past points are evaluated at :math:`t_{i+1}`.
    6. Implement ``_stage_degrees(q)``: for each stage, the polynomial degree
       up to which the stage reproduces :math:`x(t_{i+1})` exactly when
       every point holds the exact solution.  :meth:`step_formula` verifies
       this on every step (self-check) and raises if it fails.
    7. The order policy is :meth:`order_q`, :math:`Q_i = \min(i+1, Q_{\max}-1)`
       (seed 000, after eq. (5)); subclasses do not override it.
    8. Instances are immutable apart from the per-grid formula cache.

    Parameters
    ----------
    qmax : int
        :math:`Q_{\max}` of the seed, in :data:`QMAX_RANGE`.
    """

    name: str = ""
    needs_fdot: bool = False
    stage_names: tuple[str, ...] = ("x",)
    _CACHE_SIZE = 8

    def __init__(self, qmax: int = DEFAULT_QMAX):
        self.qmax = _check_qmax(qmax)
        self._cache: OrderedDict[bytes, tuple[StepFormula, ...]] = OrderedDict()
        #: number of step formulas built (cache misses count every step)
        self.n_formulas_built = 0

    # -- to be provided by subclasses ---------------------------------------
    @property
    def order(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def startup_order(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _stages(self, t_hist: np.ndarray, t_new: float, q: int) -> tuple[Stage, ...]:  # pragma: no cover
        raise NotImplementedError

    def _stage_degrees(self, q: int) -> Mapping[str, int]:  # pragma: no cover
        raise NotImplementedError

    # -- public API ---------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(qmax={self.qmax})"

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.qmax == other.qmax

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.qmax))

    def order_q(self, i: int) -> int:
        r""":math:`Q_i = \min(i + 1, Q_{\max} - 1)` (seed 000, after eq. (5))."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
            raise ValueError(f"step index must be a non-negative int, got {i!r}")
        return min(int(i) + 1, self.qmax - 1)

    def step_formula(self, i: int, t) -> StepFormula:
        r"""Equations of step ``i`` on grid ``t`` (coefficients for its history).

        Parameters
        ----------
        i : int
            Step index, ``0 <= i < len(t) - 1``.
        t : array_like
            The grid :math:`t_0 < \dots < t_k`.

        Raises
        ------
        ValueError
            Bad grid or step index.
        RuntimeError
            If the derived coefficients fail the exactness self-check
            (ill-conditioned step history).
        """
        t = _check_grid(t)
        return self._step_formula(i, t)

    def formulas(self, t) -> list[StepFormula]:
        """The ``k`` step formulas on grid ``t``; cached per grid."""
        t = _check_grid(t)
        key = t.tobytes()
        hit = self._cache.get(key)
        if hit is None:
            hit = tuple(self._step_formula(i, t) for i in range(t.size - 1))
            self._cache[key] = hit
            while len(self._cache) > self._CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return list(hit)

    # -- internals ----------------------------------------------------------
    def _step_formula(self, i, t: np.ndarray) -> StepFormula:
        k = t.size - 1
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < k:
            raise ValueError(f"step index must be an int in [0, {k - 1}] for a grid with k={k} steps, got {i!r}")
        i = int(i)
        q = self.order_q(i)
        t_hist = t[i - q + 1: i + 1][::-1].copy()
        stages = tuple(self._stages(t_hist, float(t[i + 1]), q))
        sf = StepFormula(i=i, order_q=q, stages=stages)
        self._validate(sf, t)
        self.n_formulas_built += 1
        return sf

    def _validate(self, sf: StepFormula, t: np.ndarray) -> None:
        """Structural rules 1, 5 and the exactness self-check of rule 6."""
        i, q = sf.i, sf.order_q
        names = tuple(st.name for st in sf.stages)
        if names != tuple(self.stage_names):
            raise RuntimeError(f"{self!r}: step {i} has stages {names}, expected {self.stage_names}")
        seen: list[str] = []
        for st in sf.stages:
            for p in st.points:
                if p.kind == "past" and p.lag >= q:
                    raise RuntimeError(f"{self!r}: step {i} stage {st.name!r} uses lag {p.lag} >= Q_i={q}")
                if p.kind == "stage" and p.stage not in seen and p.stage != st.name:
                    raise RuntimeError(f"{self!r}: step {i} stage {st.name!r} references later stage {p.stage!r}")
                if p.kind == "new" and st.name != "x":
                    raise RuntimeError(f"{self!r}: step {i} stage {st.name!r} references x_(i+1) before it is defined")
            seen.append(st.name)
        if sf.stages[-1].name != "x":
            raise RuntimeError(f"{self!r}: the last stage of step {i} must be 'x'")

        # exactness on x(s) = s^m, s = (t - t_i)/h_i (dx/ds = m s^(m-1), d2x/ds2 = m(m-1) s^(m-2))
        h = t[i + 1] - t[i]
        degrees = self._stage_degrees(q)

        def pos(p: PointRef) -> float:
            return (t[i - p.lag] - t[i]) / h if p.kind == "past" else 1.0

        for st in sf.stages:
            deg = degrees[st.name]
            for m in range(1, deg + 1):
                terms = [c * m * pos(p) ** (m - 1) for p, c in st.f_terms]
                if m >= 2:
                    terms += [d * m * (m - 1) * pos(p) ** (m - 2) for p, d in st.fdot_terms]
                res = 1.0 - sum(terms)
                scale = 1.0 + sum(abs(v) for v in terms)
                if not abs(res) <= 1e-9 * scale:
                    raise RuntimeError(
                        f"{self!r}: coefficients of step {i} (t_i={t[i]:.6g}, h_i={h:.3g}) fail the "
                        f"exactness check for stage {st.name!r}, degree {m}: residual {res:.3e}; "
                        "the step history is too ill-conditioned (reduce step-size ratios or qmax)"
                    )


class AdamsPC(MultistepScheme):
    r"""Adams predictor–corrector (PECE), seed 000, eqs. (4)–(5).

    .. math::

        y_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \Pi_j f(x_{i-j+1}, t_{i-j+1}),\\
        x_{i+1} &= x_i + h_i \Big[K_0 f(y_{i+1}, t_{i+1})
                  + \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    with the variable-step Adams–Bashforth (:math:`Q_i` points) and
    Adams–Moulton (:math:`Q_i + 1` points) coefficients of
    :func:`adams_bashforth_coefficients` / :func:`adams_moulton_coefficients`.
    Global order :math:`Q_{\max}`; with the order ramp on a plain uniform grid
    the Heun start (local error :math:`O(h^3)`) limits the observed order to
    :math:`\min(3, Q_{\max})`.  Stages: ``("y", "x")``, both explicit.
    """

    name = "adams_pc"
    needs_fdot = False
    stage_names = ("y", "x")

    @property
    def order(self) -> int:
        return self.qmax

    @property
    def startup_order(self) -> int:
        return min(3, self.qmax)

    def _stage_degrees(self, q):
        return {"y": q, "x": q + 1}

    def _stages(self, t_hist, t_new, q):
        h = t_new - t_hist[0]
        pi = adams_bashforth_coefficients(t_hist, h)
        k = adams_moulton_coefficients(t_hist, t_new)
        past = [_past(j) for j in range(q)]
        y = Stage("y", tuple(zip(past, map(float, pi))))
        x = Stage("x", ((PointRef("stage", stage="y"), float(k[0])),) + tuple(zip(past, map(float, k[1:]))))
        return (y, x)


class AdamsMoulton(MultistepScheme):
    r"""Implicit variable-step Adams–Moulton scheme.

    .. math::

        x_{i+1} = x_i + h_i \Big[K_0 f(x_{i+1}, t_{i+1})
                  + \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    the corrector of seed 000, eq. (4), iterated to convergence.  Global order
    :math:`Q_{\max}`; with the ramp on a plain uniform grid the trapezoidal
    start limits the observed order to :math:`\min(3, Q_{\max})`.
    Stages: ``("x",)``, implicit.
    """

    name = "adams_moulton"
    needs_fdot = False
    stage_names = ("x",)

    @property
    def order(self) -> int:
        return self.qmax

    @property
    def startup_order(self) -> int:
        return min(3, self.qmax)

    def _stage_degrees(self, q):
        return {"x": q + 1}

    def _stages(self, t_hist, t_new, q):
        k = adams_moulton_coefficients(t_hist, t_new)
        past = [_past(j) for j in range(q)]
        return (Stage("x", ((_NEW, float(k[0])),) + tuple(zip(past, map(float, k[1:])))),)


class Enright(MultistepScheme):
    r"""Enright's implicit second-derivative scheme, seed 000, eq. (6).

    .. math::

        x_{i+1} = x_i + h_i \sum_{j=1}^{Q_i} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(x_{i+1}),
        \qquad \dot f = D_x f\, f + \partial_t f,

    with the :math:`Q_i + 2` coefficients of :func:`enright_coefficients`
    (exact for polynomials of degree :math:`\le Q_i + 2`).  Global order
    :math:`Q_{\max} + 1`; with the ramp on a plain uniform grid the one-step
    start (local error :math:`O(h^4)`) limits the observed order to
    :math:`\min(4, Q_{\max} + 1)`.  Stages: ``("x",)``, implicit.
    """

    name = "enright"
    needs_fdot = True
    stage_names = ("x",)

    @property
    def order(self) -> int:
        return self.qmax + 1

    @property
    def startup_order(self) -> int:
        return min(4, self.qmax + 1)

    def _stage_degrees(self, q):
        return {"x": q + 2}

    def _stages(self, t_hist, t_new, q):
        rho, sigma = enright_coefficients(t_hist, t_new)
        past = [_past(j) for j in range(q)]
        f_terms = ((_NEW, float(rho[0])),) + tuple(zip(past, map(float, rho[1:])))
        return (Stage("x", f_terms, ((_NEW, sigma),)),)


class SemiImplicitEnright(MultistepScheme):
    r"""Predictor–corrector–recorrector variant of Enright's scheme.

    Seed 000, §2.3.2 (semi-implicit model):

    .. math::

        y_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \Pi_j f(x_{i-j+1}),\\
        y^c_{i+1} &= x_i + h_i K_0 f(y_{i+1})
                    + h_i \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}),\\
        x_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(y^c_{i+1}).

    Only :math:`f(x_{i+1})` is implicit.  Order: the local error of
    :math:`y^c` is :math:`O(h^{Q+2})`, so replacing :math:`\dot f(x_{i+1})` by
    :math:`\dot f(y^c_{i+1})` perturbs the step by
    :math:`h^2 \sigma\, D_x \dot f\, O(h^{Q+2}) = O(h^{Q+4})`, below the
    :math:`O(h^{Q+3})` truncation error of the Enright formula: the global order
    is :math:`Q_{\max} + 1`, as for :class:`Enright` (even the predictor,
    :math:`O(h^{Q+1})`, would suffice).  Start-up-limited observed order on a
    plain uniform grid: :math:`\min(4, Q_{\max} + 1)`.
    Stages: ``("y", "yc", "x")``; ``x`` is implicit.
    """

    name = "semi_implicit_enright"
    needs_fdot = True
    stage_names = ("y", "yc", "x")

    @property
    def order(self) -> int:
        return self.qmax + 1

    @property
    def startup_order(self) -> int:
        return min(4, self.qmax + 1)

    def _stage_degrees(self, q):
        return {"y": q, "yc": q + 1, "x": q + 2}

    def _stages(self, t_hist, t_new, q):
        h = t_new - t_hist[0]
        pi = adams_bashforth_coefficients(t_hist, h)
        k = adams_moulton_coefficients(t_hist, t_new)
        rho, sigma = enright_coefficients(t_hist, t_new)
        past = [_past(j) for j in range(q)]
        y = Stage("y", tuple(zip(past, map(float, pi))))
        yc = Stage("yc", ((PointRef("stage", stage="y"), float(k[0])),) + tuple(zip(past, map(float, k[1:]))))
        x = Stage(
            "x",
            ((_NEW, float(rho[0])),) + tuple(zip(past, map(float, rho[1:]))),
            ((PointRef("stage", stage="yc"), sigma),),
        )
        return (y, yc, x)


SCHEMES: dict[str, type[MultistepScheme]] = {
    "adams_pc": AdamsPC,
    "adams_moulton": AdamsMoulton,
    "enright": Enright,
    "semi_implicit_enright": SemiImplicitEnright,
}


def get_scheme(name_or_obj, qmax=None) -> MultistepScheme:
    """Return a scheme object from a registry name or an existing object.

    Parameters
    ----------
    name_or_obj : str or MultistepScheme
        A key of :data:`SCHEMES` (case-insensitive, ``-`` accepted for ``_``)
        or a scheme instance (returned unchanged).
    qmax : int, optional
        :math:`Q_{\\max}` in :data:`QMAX_RANGE`; default :data:`DEFAULT_QMAX`
        for names.  For an instance it must be None or equal to its ``qmax``.

    Raises
    ------
    ValueError
        Unknown name, wrong type, or ``qmax`` outside :data:`QMAX_RANGE`.
    """
    if isinstance(name_or_obj, MultistepScheme):
        if qmax is not None and _check_qmax(qmax) != name_or_obj.qmax:
            raise ValueError(
                f"qmax={qmax} conflicts with the given scheme {name_or_obj!r}; "
                "pass the scheme name instead to choose qmax"
            )
        return name_or_obj
    if isinstance(name_or_obj, type) and issubclass(name_or_obj, MultistepScheme):
        return name_or_obj(DEFAULT_QMAX if qmax is None else _check_qmax(qmax))
    if not isinstance(name_or_obj, str):
        raise ValueError(f"scheme must be a name in {sorted(SCHEMES)} or a MultistepScheme, got {name_or_obj!r}")
    key = name_or_obj.strip().lower().replace("-", "_")
    if key not in SCHEMES:
        raise ValueError(f"unknown scheme {name_or_obj!r}; valid names: {sorted(SCHEMES)}")
    return SCHEMES[key](DEFAULT_QMAX if qmax is None else _check_qmax(qmax))


# ---------------------------------------------------------------------------
# Reference forward integrator
# ---------------------------------------------------------------------------
_EPS = np.finfo(float).eps


def _fd_jacobian(fun, z, t, f0=None):
    """Forward-difference Jacobian of ``fun(z, t)`` with respect to ``z``."""
    f0 = np.asarray(fun(z, t), dtype=float) if f0 is None else f0
    n = z.size
    jac = np.empty((f0.size, n))
    for c in range(n):
        dz = np.sqrt(_EPS) * max(1.0, abs(z[c]))
        zp = z.copy()
        zp[c] += dz
        jac[:, c] = (np.asarray(fun(zp, t), dtype=float) - f0) / dz
    return jac


def _fd_fdot(f):
    r"""Central-difference :math:`\dot f = D_x f\, f + \partial_t f`.

    Differentiates :math:`f` along the direction :math:`(f, 1)` in
    :math:`(x, t)`; relative accuracy about :math:`10^{-10}`.
    """

    def fdot(x, t):
        v = np.asarray(f(x, t), dtype=float)
        vn = np.max(np.abs(v), initial=0.0)
        xs = max(1.0, np.max(np.abs(x), initial=0.0))
        eps = _EPS ** (1.0 / 3.0) * max(1.0, abs(t))
        if vn > 0:
            eps = min(eps, _EPS ** (1.0 / 3.0) * xs / vn)
        fp = np.asarray(f(x + eps * v, t + eps), dtype=float)
        fm = np.asarray(f(x - eps * v, t - eps), dtype=float)
        return (fp - fm) / (2.0 * eps)

    return fdot


def integrate(
    scheme,
    f: Callable,
    t,
    x0,
    fdot: Callable | None = None,
    newton_tol: float = 1e-12,
    max_newton: int = 50,
    *,
    jac: Callable | None = None,
    fdot_jac: Callable | None = None,
    start_values=None,
) -> np.ndarray:
    r"""Solve the discrete equations (seed 000, eq. (2)) step by step.

    Reference implementation of the :class:`StepFormula` equations: for each
    step the stages are evaluated in order; an implicit stage
    :math:`v = b + h_i c\, f(v, t_{i+1}) + h_i^2 d\, \dot f(v, t_{i+1})`
    (:math:`b` collecting the known terms) is solved by Newton's method with
    Jacobian :math:`I - h_i c\, D_x f - h_i^2 d\, D_x \dot f`.

    Parameters
    ----------
    scheme : str or MultistepScheme
        Passed to :func:`get_scheme`.
    f : callable
        ``f(x, t) -> (n,)`` right-hand side.
    t : array_like
        Grid :math:`t_0 < \dots < t_k`.
    x0 : array_like
        Initial state, shape ``(n,)`` (a scalar is treated as ``n = 1``).
    fdot : callable, optional
        ``fdot(x, t) -> (n,)``, :math:`D_x f\, f + \partial_t f`; needed by the
        Enright schemes.  If omitted it is approximated by a central difference
        of ``f`` along :math:`(f, 1)` (relative error about :math:`10^{-10}`).
    newton_tol : float
        Newton stops when :math:`\|\Delta v\|_\infty \le` ``newton_tol``
        :math:`(1 + \|v\|_\infty)`.
    max_newton : int
        Maximum Newton iterations per implicit stage.
    jac, fdot_jac : callable, optional
        ``(x, t) -> (n, n)`` Jacobians :math:`D_x f`, :math:`D_x \dot f`;
        forward differences are used when omitted.
    start_values : array_like, optional
        Shape ``(m, n)``, ``m >= 1``: values imposed for
        :math:`x_0, \dots, x_{m-1}` (e.g. the exact solution) instead of
        computing them with the start-up steps; ``start_values[0]`` overrides
        ``x0``.  Steps ``m-1, ..., k-1`` use the scheme as usual.

    Returns
    -------
    numpy.ndarray
        Shape ``(k+1, n)``, the states :math:`x_0, \dots, x_k`.

    Raises
    ------
    RuntimeError
        If a non-finite value appears or Newton does not converge; the
        message names the step and stage.
    """
    sch = get_scheme(scheme)
    t = _check_grid(t)
    k = t.size - 1
    x0 = np.atleast_1d(np.asarray(x0, dtype=float)).ravel()
    n = x0.size
    if not (np.isfinite(newton_tol) and newton_tol > 0):
        raise ValueError(f"newton_tol must be positive, got {newton_tol}")
    if int(max_newton) < 1:
        raise ValueError(f"max_newton must be >= 1, got {max_newton}")
    if sch.needs_fdot and fdot is None:
        fdot = _fd_fdot(f)

    x = np.full((k + 1, n), np.nan)
    x[0] = x0
    m0 = 1
    if start_values is not None:
        sv = np.asarray(start_values, dtype=float)
        sv = sv.reshape(sv.shape[0], -1) if sv.ndim >= 1 else sv.reshape(1, 1)
        if sv.ndim != 2 or sv.shape[1] != n or not 1 <= sv.shape[0] <= k + 1:
            raise ValueError(f"start_values must have shape (m, {n}) with 1 <= m <= {k + 1}, got {np.shape(start_values)}")
        if not np.all(np.isfinite(sv)):
            raise ValueError("start_values contains non-finite values")
        m0 = sv.shape[0]
        x[:m0] = sv
    if not np.all(np.isfinite(x[0])):
        raise ValueError("x0 contains non-finite values")

    fcache: dict[int, np.ndarray] = {}
    dcache: dict[int, np.ndarray] = {}

    def call(fun, z, tt, what, i, stage):
        v = np.asarray(fun(z, tt), dtype=float).reshape(-1)
        if v.size != n or not np.all(np.isfinite(v)):
            raise RuntimeError(
                f"{what} returned {'non-finite values' if v.size == n else f'shape {v.shape}, expected ({n},)'} "
                f"at step {i} (t={tt:.6g}), stage {stage!r}"
            )
        return v

    def f_past(idx, i, stage):
        if idx not in fcache:
            fcache[idx] = call(f, x[idx], t[idx], "f", i, stage)
        return fcache[idx]

    def fdot_past(idx, i, stage):
        if idx not in dcache:
            dcache[idx] = call(fdot, x[idx], t[idx], "fdot", i, stage)
        return dcache[idx]

    formulas = sch.formulas(t)
    eye = np.eye(n)
    for i in range(m0 - 1, k):
        sf = formulas[i]
        h = t[i + 1] - t[i]
        tn = t[i + 1]
        vals: dict[str, np.ndarray] = {}
        for st in sf.stages:
            base = x[i].copy()
            c_self = 0.0
            d_self = 0.0
            for terms, scale, is_fdot in ((st.f_terms, h, False), (st.fdot_terms, h * h, True)):
                for p, c in terms:
                    if st._targets_self(p):
                        if is_fdot:
                            d_self += c
                        else:
                            c_self += c
                        continue
                    if p.kind == "past":
                        v = fdot_past(i - p.lag, i, st.name) if is_fdot else f_past(i - p.lag, i, st.name)
                    else:
                        v = call(fdot if is_fdot else f, vals[p.stage], tn, "fdot" if is_fdot else "f", i, st.name)
                    base += scale * c * v
            if c_self == 0.0 and d_self == 0.0:
                z = base
            else:
                # initial guess: freeze f, fdot at x_i
                z = base + h * c_self * f_past(i, i, st.name)
                if d_self:
                    z = z + h * h * d_self * fdot_past(i, i, st.name)
                for it in range(int(max_newton)):
                    fz = call(f, z, tn, "f", i, st.name)
                    g = z - base - h * c_self * fz
                    jz = np.asarray(jac(z, tn), dtype=float) if jac is not None else _fd_jacobian(f, z, tn, fz)
                    a = eye - h * c_self * jz
                    if d_self:
                        dz = call(fdot, z, tn, "fdot", i, st.name)
                        g = g - h * h * d_self * dz
                        jd = (np.asarray(fdot_jac(z, tn), dtype=float) if fdot_jac is not None
                              else _fd_jacobian(fdot, z, tn, dz))
                        a = a - h * h * d_self * jd
                    try:
                        delta = np.linalg.solve(a, -g)
                    except np.linalg.LinAlgError as exc:
                        raise RuntimeError(f"singular Newton matrix at step {i} (t={t[i]:.6g}), stage {st.name!r}") from exc
                    z = z + delta
                    if not np.all(np.isfinite(z)):
                        raise RuntimeError(f"Newton produced non-finite values at step {i} (t={t[i]:.6g}), stage {st.name!r}")
                    if np.max(np.abs(delta)) <= newton_tol * (1.0 + np.max(np.abs(z))):
                        break
                else:
                    raise RuntimeError(
                        f"Newton did not converge in {max_newton} iterations at step {i} "
                        f"(t={t[i]:.6g}, h={h:.3g}), stage {st.name!r}; last |delta|={np.max(np.abs(delta)):.3e}"
                    )
            if not np.all(np.isfinite(z)):
                raise RuntimeError(f"non-finite state at step {i} (t={t[i]:.6g}), stage {st.name!r}")
            vals[st.name] = z
        x[i + 1] = vals["x"]
    return x
