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
(``make_grid(..., startup="refined")`` in :mod:`pyomo_odeest.discretization.grid`) or with
exact start values (``integrate(..., start_values=...)``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Mapping

import numpy as np
from numpy.polynomial import legendre as _leg

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


@lru_cache(maxsize=None)
def _gauss_legendre_01(npts: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [0, 1]."""
    xg, wg = _leg.leggauss(npts)
    nodes, weights = 0.5 * (xg + 1.0), 0.5 * wg
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def _chebyshev_table(u: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """T_m(u) and T_m'(u) for m = 0..n-1 (three-term recurrence); shape (n, *u.shape)."""
    t = np.empty((n,) + u.shape)
    d = np.empty((n,) + u.shape)
    t[0], d[0] = 1.0, 0.0
    if n > 1:
        t[1], d[1] = u, 1.0
    for m in range(1, n - 1):
        t[m + 1] = 2.0 * u * t[m] - t[m - 1]
        d[m + 1] = 2.0 * t[m] + 2.0 * u * d[m] - d[m - 1]
    return t, d


def _quadrature_weights(value_nodes, deriv_nodes=None) -> np.ndarray:
    r"""Weights of generalized quadratures on :math:`[0, 1]` (batched).

    For each row ``b`` finds :math:`w, v` with

    .. math::

        \int_0^1 P(s)\,ds = \sum_j w_j P(s_{bj}) + \sum_l v_l P'(r_{bl})

    for every polynomial :math:`P` of degree :math:`< N`, :math:`N` the total
    number of nodes of a row.  The moment conditions are written in the
    Chebyshev basis on the interval spanned by the row's nodes and
    :math:`[0, 1]` (well conditioned for the small :math:`N` used here); the
    moments are exact Gauss–Legendre sums.

    Parameters
    ----------
    value_nodes : array_like, shape (B, nv) or (nv,)
    deriv_nodes : array_like, shape (B, nd) or (nd,), optional

    Returns
    -------
    numpy.ndarray, shape (B, nv + nd) (or (nv + nd,) for 1-D input)
    """
    sv = np.asarray(value_nodes, dtype=float)
    single = sv.ndim == 1
    sv = np.atleast_2d(sv)
    bsz = sv.shape[0]
    sd = np.zeros((bsz, 0)) if deriv_nodes is None else np.asarray(deriv_nodes, dtype=float).reshape(bsz, -1)
    nv, n = sv.shape[1], sv.shape[1] + sd.shape[1]
    allpts = np.concatenate([sv, sd, np.zeros((bsz, 1)), np.ones((bsz, 1))], axis=1)
    lo = allpts.min(axis=1, keepdims=True)
    hi = allpts.max(axis=1, keepdims=True)
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    sg, wg = _gauss_legendre_01(n // 2 + 1)
    u = (np.concatenate([sv, sd, np.broadcast_to(sg, (bsz, sg.size))], axis=1) - mid) / half
    tab, der = _chebyshev_table(u, n)  # (n, B, npts)
    a = np.concatenate([tab[:, :, :nv], der[:, :, nv:n] / half], axis=2)  # (m, B, col)
    a = np.transpose(a, (1, 0, 2))  # (B, m, col)
    rhs = tab[:, :, n:] @ wg  # (n, B)
    w = np.linalg.solve(a, rhs.T[:, :, None])[:, :, 0]
    return w[0] if single else w


def _ab_weights(s: np.ndarray) -> np.ndarray:
    """Adams–Bashforth weights for scaled past nodes s (B, Q) -> (B, Q)."""
    return _quadrature_weights(s)


def _am_weights(s: np.ndarray) -> np.ndarray:
    """Adams–Moulton weights (K_0 for s = 1, then K_1..K_Q) -> (B, Q+1)."""
    return _quadrature_weights(np.concatenate([np.ones((s.shape[0], 1)), s], axis=1))


def _enright_weights(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enright weights: rho (B, Q+1) (rho_0 first) and sigma (B,)."""
    w = _quadrature_weights(np.concatenate([np.ones((s.shape[0], 1)), s], axis=1), np.ones((s.shape[0], 1)))
    return w[:, :-1], w[:, -1]


def _solve_public(weights, s):
    try:
        return weights(s)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"order conditions are singular for the scaled history {s[0]}: ill-conditioned step sizes") from exc


def adams_bashforth_coefficients(t_hist, h) -> np.ndarray:
    r"""Variable-step Adams–Bashforth coefficients :math:`\Pi_1, \dots, \Pi_Q`.

    The predictor of [GM-grad], eq. (5),

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
    return _solve_public(_ab_weights, ((th - th[0]) / h)[None, :])[0]


def adams_moulton_coefficients(t_hist, t_new, q=None) -> np.ndarray:
    r"""Variable-step Adams–Moulton coefficients :math:`K_0, K_1, \dots, K_Q`.

    The corrector of [GM-grad], eq. (4),

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
    return _solve_public(_am_weights, ((th[:q] - th[0]) / h)[None, :])[0]


def enright_coefficients(t_hist, t_new) -> tuple[np.ndarray, float]:
    r"""Variable-step Enright second-derivative coefficients.

    [GM-grad], eq. (6), with the :math:`h^2` coefficient written as its own
    unknown :math:`\sigma` ([GM-grad] reuses the symbol :math:`\rho_0`):

    .. math::

        x_{i+1} = x_i + h_i \sum_{j=1}^{Q} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(x_{i+1}),
        \qquad \dot f = D_x f\, f + \partial_t f.

    The :math:`Q + 2` unknowns are fixed by exactness for :math:`x` a
    polynomial of degree :math:`\le Q + 2` (in :math:`s = (t-t_i)/h_i`:
    :math:`1 = \sum_j \rho_j m s_j^{m-1} + \rho_0 m + \sigma m (m-1)`,
    :math:`m = 1, \dots, Q+2`), i.e. the :math:`\rho^{Q+2}` of [GM-grad].  Local
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
    rho, sigma = _solve_public(_enright_weights, ((th - th[0]) / h)[None, :])
    return rho[0], float(sigma[0])


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
    t = getattr(t, "t", t)  # a pyomo_odeest.discretization.grid.Grid or an array of times
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


def _stage_ref(name: str) -> PointRef:
    return PointRef("stage", stage=name)


#: A stage whose coefficients are arrays over a batch of steps with the same
#: structure: ``(name, ((PointRef, coef[B]), ...), ((PointRef, coef[B]), ...))``.
StageTemplate = tuple


class MultistepScheme:
    r"""Base class of the multistep schemes of [GM-grad], eqs. (2), (4)–(6).

    A scheme maps a grid :math:`t_0 < \dots < t_k` to the list of step
    equations :math:`x_{i+1} = x_i + h_i F_i(\dots)` (:class:`StepFormula`)
    with coefficients derived for the actual step history.

    Contract for subclasses
    -----------------------
    1. Set the class attributes ``name`` (registry key), ``needs_fdot``
       (whether :math:`\dot f` appears) and ``stage_names`` (stage names in
       evaluation order, ending with ``"x"``).
    2. Implement the properties ``order`` (classical global order, reached
       once :math:`Q_i = Q_{\max}-1`) and ``startup_order`` (observed global
       order on a plain uniform grid when the order ramp is used; see the
       module docstring).
    3. Implement ``_stage_templates(s, q)``: ``s`` has shape ``(B, q)``, row
       ``b`` holding the scaled past nodes
       :math:`s_j = (t_{i-j+1} - t_i)/h_i`, :math:`j = 1..q`, of ``B`` steps
       (so :math:`s_1 = 0` and the new point is :math:`s = 1`).  Return one
       template ``(name, f_terms, fdot_terms)`` per stage whose coefficients
       are arrays of shape ``(B,)``.  Do not call it directly:
       :meth:`formulas` / :meth:`step_formula` call it (batched over steps
       with equal :math:`Q_i`), split it into :class:`StepFormula` objects
       and check them.
    4. Coefficients are dimensionless: ``f_terms`` multiply :math:`h_i`,
       ``fdot_terms`` multiply :math:`h_i^2`.
    5. A stage may reference past points with ``lag < q``, stages defined
       before it, and itself (``"new"`` for ``"x"``: an implicit stage).
       Non-past points are evaluated at :math:`t_{i+1}`.
    6. Implement ``_stage_degrees(q)``: for each stage, the polynomial degree
       up to which the stage reproduces :math:`x(t_{i+1})` exactly when every
       referenced point holds the exact solution.  Every formula is verified
       against this (self-check) and a :class:`RuntimeError` names the step
       if it fails (an ill-conditioned step history).
    7. The order policy is :meth:`order_q`,
       :math:`Q_i = \min(i+1, Q_{\max}-1)` [GM-grad, after eq. (5)];
       subclasses do not override it.
    8. Instances are immutable apart from the per-grid formula cache and
       the counter ``n_formulas_built``.

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
        self._batch_cache: OrderedDict[bytes, tuple[StepBatch, ...]] = OrderedDict()
        #: number of step formulas built so far (cache hits do not count)
        self.n_formulas_built = 0

    # -- to be provided by subclasses ---------------------------------------
    @property
    def order(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def startup_order(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _stage_templates(self, s: np.ndarray, q: int) -> tuple[StageTemplate, ...]:  # pragma: no cover
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
        r""":math:`Q_i = \min(i + 1, Q_{\max} - 1)` [GM-grad, after eq. (5)]."""
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
            If the derived coefficients fail the exactness self-check.
        """
        t = _check_grid(t)
        k = t.size - 1
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < k:
            raise ValueError(f"step index must be an int in [0, {k - 1}] for a grid with k={k} steps, got {i!r}")
        # through the cache, so that the coefficients are bit-identical to formulas(t)[i]
        return self.formulas(t)[int(i)]

    @staticmethod
    def _restarts(t, restarts):
        """Sorted restart indices (default: ``t.restarts`` of a Grid), checked."""
        if not restarts:
            restarts = getattr(t, "restarts", ())
        k = np.asarray(getattr(t, "t", t)).size - 1
        restarts = tuple(sorted({int(r) for r in restarts}))
        if restarts and (restarts[0] < 1 or restarts[-1] > k - 1):
            raise ValueError(f"restarts must be grid indices in [1, {k - 1}], got {restarts}")
        return restarts

    def formulas(self, t, restarts=()) -> list[StepFormula]:
        r"""The ``k`` step formulas on grid ``t`` (index = step); cached per grid.

        ``restarts``: grid indices :math:`r` where the order ramp starts
        afresh, :math:`Q_i = \min(i - r + 1, Q_{\max} - 1)` for the steps
        after the last restart :math:`r \le i` (no step's history crosses a
        restart; used at the switching times of piecewise inputs).  Default:
        ``t.restarts`` when ``t`` is a :class:`~pyomo_odeest.discretization.grid.Grid`.
        """
        restarts = self._restarts(t, restarts)
        t = _check_grid(t)
        key = (t.tobytes(), restarts)
        hit = self._cache.get(key)
        if hit is None:
            out: list[StepFormula | None] = [None] * (t.size - 1)
            for batch in self.batches(t, restarts):
                for r, i in enumerate(batch.steps.tolist()):
                    out[i] = batch.formula(r)
            self.n_formulas_built += len(out)
            hit = tuple(out)
            self._cache[key] = hit
            while len(self._cache) > self._CACHE_SIZE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return list(hit)

    def batches(self, t, restarts=()) -> tuple[StepBatch, ...]:
        """The step formulas of grid ``t`` as arrays: one :class:`StepBatch` per
        order :math:`Q_i` (steps of equal :math:`Q_i` share one structure).

        Same coefficients as :meth:`formulas` (which is built from these), in
        O(number of batches) Python objects instead of O(k); cached per grid.
        With ``restarts`` (see :meth:`formulas`) a batch's steps need not be
        consecutive.
        """
        restarts = self._restarts(t, restarts)
        t = _check_grid(t)
        key = (t.tobytes(), restarts)
        hit = self._batch_cache.get(key)
        if hit is None:
            k = t.size - 1
            steps = np.arange(k)
            seg = np.zeros(k, dtype=int)
            for r in restarts:
                seg[r:] = r
            qs = np.minimum(steps - seg + 1, self.qmax - 1)
            hit = tuple(self._build(steps[qs == q], t, int(q)) for q in np.unique(qs))
            self._batch_cache[key] = hit
            while len(self._batch_cache) > self._CACHE_SIZE:
                self._batch_cache.popitem(last=False)
        else:
            self._batch_cache.move_to_end(key)
        return hit

    # -- internals ----------------------------------------------------------
    def _build(self, idx: np.ndarray, t: np.ndarray, q: int | None = None) -> StepBatch:
        """Coefficients of steps ``idx`` (all with the same Q_i), checked."""
        q = self.order_q(int(idx[0])) if q is None else q
        h = t[idx + 1] - t[idx]
        lags = np.arange(q)
        s = (t[idx[:, None] - lags[None, :]] - t[idx, None]) / h[:, None]
        try:
            templates = self._stage_templates(s, q)
        except np.linalg.LinAlgError as exc:
            raise RuntimeError(
                f"{self!r}: the order conditions of steps {int(idx[0])}..{int(idx[-1])} (Q={q}) are singular: "
                "the step history is too ill-conditioned (reduce step-size ratios or qmax)"
            ) from exc
        self._check_templates(templates, s, q, idx, t)
        B = idx.size

        def arr(c):
            a = np.array(np.broadcast_to(np.asarray(c, dtype=float), (B,)))
            a.setflags(write=False)
            return a

        stages = tuple((name, tuple((p, arr(c)) for p, c in f_terms),
                        tuple((p, arr(c)) for p, c in fdot_terms))
                       for name, f_terms, fdot_terms in templates)
        steps = np.array(idx, dtype=np.int64)
        steps.setflags(write=False)
        return StepBatch(q=q, steps=steps, stages=stages)

    def _check_templates(self, templates, s, q, idx, t) -> None:
        """Structural rules 1, 5 and the exactness self-check of rule 6."""
        names = tuple(tp[0] for tp in templates)
        if names != tuple(self.stage_names):
            raise RuntimeError(f"{self!r}: stages {names}, expected {self.stage_names}")
        degrees = self._stage_degrees(q)
        seen: list[str] = []
        for name, f_terms, fdot_terms in templates:
            for p, _ in f_terms + fdot_terms:
                if p.kind == "past" and p.lag >= q:
                    raise RuntimeError(f"{self!r}: stage {name!r} uses lag {p.lag} >= Q_i={q}")
                if p.kind == "stage" and p.stage not in seen and p.stage != name:
                    raise RuntimeError(f"{self!r}: stage {name!r} references later stage {p.stage!r}")
                if p.kind == "new" and name != "x":
                    raise RuntimeError(f"{self!r}: stage {name!r} references x_(i+1) before it is defined")
            seen.append(name)

            # exactness on x(s) = s^m, s = (t - t_i)/h_i:
            #   1 = sum c m s_p^(m-1) + sum d m (m-1) s_p^(m-2),  m = 1..degree
            def pos(p):
                return s[:, p.lag] if p.kind == "past" else np.ones(s.shape[0])

            fp = np.stack([pos(p) for p, _ in f_terms], axis=1)
            fc = np.stack([np.broadcast_to(c, s.shape[:1]) for _, c in f_terms], axis=1)
            if fdot_terms:
                dp = np.stack([pos(p) for p, _ in fdot_terms], axis=1)
                dc = np.stack([np.broadcast_to(c, s.shape[:1]) for _, c in fdot_terms], axis=1)
            for m in range(1, degrees[name] + 1):
                terms = fc * m * fp ** (m - 1)
                if fdot_terms and m >= 2:
                    terms = np.concatenate([terms, dc * m * (m - 1) * dp ** (m - 2)], axis=1)
                res = 1.0 - terms.sum(axis=1)
                scale = 1.0 + np.abs(terms).sum(axis=1)
                bad = ~(np.abs(res) <= 1e-9 * scale)
                if np.any(bad):
                    b = int(np.argmax(bad))
                    i = int(idx[b])
                    raise RuntimeError(
                        f"{self!r}: coefficients of step {i} (t_i={t[i]:.6g}, h_i={t[i + 1] - t[i]:.3g}) "
                        f"fail the exactness check for stage {name!r}, degree {m}: residual {res[b]:.3e}; "
                        "the step history is too ill-conditioned (reduce step-size ratios or qmax)"
                    )


class AdamsPC(MultistepScheme):
    r"""Adams predictor–corrector (PECE), [GM-grad], eqs. (4)–(5).

    .. math::

        y_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \Pi_j f(x_{i-j+1}, t_{i-j+1}),\\
        x_{i+1} &= x_i + h_i \Big[K_0 f(y_{i+1}, t_{i+1})
                  + \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    with the variable-step Adams–Bashforth (:math:`Q_i` points) and
    Adams–Moulton (:math:`Q_i + 1` points) coefficients of
    :func:`adams_bashforth_coefficients` / :func:`adams_moulton_coefficients`.
    Global order :math:`Q_{\max}` (predictor local error
    :math:`O(h^{Q+1})` enters the corrector multiplied by :math:`h`); with the
    order ramp on a plain uniform grid the Heun start (local error
    :math:`O(h^3)`) limits the observed order to :math:`\min(3, Q_{\max})`.
    Stages: ``("y", "x")``, both explicit.

    Parameters
    ----------
    qmax : int
        :math:`Q_{\max}` in :data:`QMAX_RANGE`.
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

    def _stage_templates(self, s, q):
        pi = _ab_weights(s)
        k = _am_weights(s)
        past = [_past(j) for j in range(q)]
        y = ("y", tuple((past[j], pi[:, j]) for j in range(q)), ())
        x = ("x", ((_stage_ref("y"), k[:, 0]),) + tuple((past[j], k[:, j + 1]) for j in range(q)), ())
        return (y, x)


class AdamsMoulton(MultistepScheme):
    r"""Implicit variable-step Adams–Moulton scheme.

    .. math::

        x_{i+1} = x_i + h_i \Big[K_0 f(x_{i+1}, t_{i+1})
                  + \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}, t_{i-j+1})\Big],

    the corrector of [GM-grad], eq. (4), solved exactly instead of being fed
    the predictor.  Global order :math:`Q_{\max}`; with the ramp on a plain
    uniform grid the trapezoidal start limits the observed order to
    :math:`\min(3, Q_{\max})`.  Stages: ``("x",)``, implicit.

    Parameters
    ----------
    qmax : int
        :math:`Q_{\max}` in :data:`QMAX_RANGE`.
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

    def _stage_templates(self, s, q):
        k = _am_weights(s)
        past = [_past(j) for j in range(q)]
        return (("x", ((_NEW, k[:, 0]),) + tuple((past[j], k[:, j + 1]) for j in range(q)), ()),)


class Enright(MultistepScheme):
    r"""Enright's implicit second-derivative scheme, [GM-grad], eq. (6).

    .. math::

        x_{i+1} = x_i + h_i \sum_{j=1}^{Q_i} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(x_{i+1}),
        \qquad \dot f = D_x f\, f + \partial_t f,

    with the :math:`Q_i + 2` coefficients of :func:`enright_coefficients`
    (exact for polynomials of degree :math:`\le Q_i + 2`; [GM-grad] writes
    :math:`\sigma` as :math:`\rho_0`).  Global order :math:`Q_{\max} + 1`;
    with the ramp on a plain uniform grid the one-step start (local error
    :math:`O(h^4)`) limits the observed order to :math:`\min(4, Q_{\max}+1)`.
    Stages: ``("x",)``, implicit.

    Parameters
    ----------
    qmax : int
        :math:`Q_{\max}` in :data:`QMAX_RANGE`.
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

    def _stage_templates(self, s, q):
        rho, sigma = _enright_weights(s)
        past = [_past(j) for j in range(q)]
        f_terms = ((_NEW, rho[:, 0]),) + tuple((past[j], rho[:, j + 1]) for j in range(q))
        return (("x", f_terms, ((_NEW, sigma),)),)


class SemiImplicitEnright(MultistepScheme):
    r"""Predictor–corrector–recorrector variant of Enright's scheme.

    [GM-grad], §2.3.2 (semi-implicit model):

    .. math::

        y_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \Pi_j f(x_{i-j+1}),\\
        y^c_{i+1} &= x_i + h_i K_0 f(y_{i+1})
                    + h_i \sum_{j=1}^{Q_i} K_j f(x_{i-j+1}),\\
        x_{i+1} &= x_i + h_i \sum_{j=1}^{Q_i} \rho_j f(x_{i-j+1})
                  + h_i \rho_0 f(x_{i+1}) + h_i^2 \sigma \dot f(y^c_{i+1}).

    Only :math:`f(x_{i+1})` is implicit.

    Order.  The local error of :math:`y^c` is :math:`O(h^{Q+2})`, so using
    :math:`\dot f(y^c_{i+1})` instead of :math:`\dot f(x_{i+1})` perturbs the
    step by :math:`h^2 \sigma\, D_x\dot f\; O(h^{Q+2}) = O(h^{Q+4})`, one
    power below the :math:`O(h^{Q+3})` truncation error of the Enright
    formula.  The global order is therefore :math:`Q_{\max} + 1`, as for
    :class:`Enright` (feeding the predictor, :math:`O(h^{Q+1})`, would still
    give :math:`O(h^{Q+3})`).  The extra :math:`O(h^{Q+4})` term has a large
    constant, so the asymptotic slope is approached from above more slowly
    than for :class:`Enright`.  Start-up-limited observed order on a plain
    uniform grid: :math:`\min(4, Q_{\max}+1)`.
    Stages: ``("y", "yc", "x")``; ``x`` is implicit.

    Parameters
    ----------
    qmax : int
        :math:`Q_{\max}` in :data:`QMAX_RANGE`.
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

    def _stage_templates(self, s, q):
        pi = _ab_weights(s)
        k = _am_weights(s)
        rho, sigma = _enright_weights(s)
        past = [_past(j) for j in range(q)]
        y = ("y", tuple((past[j], pi[:, j]) for j in range(q)), ())
        yc = ("yc", ((_stage_ref("y"), k[:, 0]),) + tuple((past[j], k[:, j + 1]) for j in range(q)), ())
        x = ("x", ((_NEW, rho[:, 0]),) + tuple((past[j], rho[:, j + 1]) for j in range(q)),
             ((_stage_ref("yc"), sigma),))
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


def _stage_is_implicit(stage) -> bool:
    """Whether a batch stage ``(name, f_terms, fdot_terms)`` references itself."""
    name, f_terms, d_terms = stage
    return any((p.kind == "new" and name == "x") or (p.kind == "stage" and p.stage == name)
               for p, _ in f_terms + d_terms)


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
    restarts=(),
) -> np.ndarray:
    r"""Solve the discrete equations [GM-grad, eq. (2)] step by step.

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
    restarts : sequence of int
        Grid indices where the order ramp restarts (see
        :meth:`MultistepScheme.formulas`; default ``t.restarts`` for a Grid).

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
    restarts = tuple(restarts) or tuple(getattr(t, "restarts", ()))
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

    # f (fdot) at grid points, computed once per point when first needed
    F = np.empty((k + 1, n))
    D = np.empty((k + 1, n)) if sch.needs_fdot else None
    have_f = [False] * (k + 1)
    have_d = [False] * (k + 1)

    def call(fun, z, tt, what, i, stage):
        v = fun(z, tt)
        if v.__class__ is not np.ndarray or v.dtype != float or v.shape != (n,):
            v = np.asarray(v, dtype=float).reshape(-1)
        tot = v.sum() if v.size == n else np.nan
        if tot - tot != 0:      # NaN or inf somewhere (or a wrong shape)
            raise RuntimeError(
                f"{what} returned {'non-finite values' if v.size == n else f'shape {v.shape}, expected ({n},)'} "
                f"at step {i} (t={tt:.6g}), stage {stage!r}"
            )
        return v

    def grid_values(idx, i, stage, is_dot):
        """f (fdot) at the grid points ``idx`` (an array), computing missing ones."""
        have, store, fun = (have_d, D, fdot) if is_dot else (have_f, F, f)
        for j in idx.tolist():
            if not have[j]:
                store[j] = call(fun, x[j], t[j], "fdot" if is_dot else "f", i, stage)
                have[j] = True
        return store[idx]

    eye = np.eye(n)
    # inverse Newton matrix per stage, kept across iterations and steps while
    # Newton contracts fast (a simplified Newton method: the solution is that
    # of the equations, to newton_tol, whichever matrix drives the iteration)
    newton_inv: dict = {}

    def _matrix(z, tn, hc, hhd):
        a = eye - hc * (np.asarray(jac(z, tn), dtype=float) if jac is not None
                        else _fd_jacobian(f, z, tn, f(z, tn)))
        if hhd:
            a = a - hhd * (np.asarray(fdot_jac(z, tn), dtype=float) if fdot_jac is not None
                           else _fd_jacobian(fdot, z, tn, fdot(z, tn)))
        return np.linalg.inv(a)

    def _newton(i, stage, base, c_self, d_self, z):
        """Solve z = base + h c f(z, t_{i+1}) + h^2 d fdot(z, t_{i+1})."""
        h = t[i + 1] - t[i]
        tn = t[i + 1]
        hc, hhd = h * c_self, h * h * d_self
        cached = newton_inv.get(stage)
        inv = None
        if (cached is not None and abs(cached[0] - hc) <= 0.1 * abs(hc)
                and abs(cached[1] - hhd) <= 0.1 * abs(hhd)):
            inv = cached[2]
        fresh = False
        prev = None
        for _ in range(int(max_newton)):
            g = z - base - hc * call(f, z, tn, "f", i, stage)
            if d_self:
                g = g - hhd * call(fdot, z, tn, "fdot", i, stage)
            if inv is None:
                try:
                    inv = _matrix(z, tn, hc, hhd)
                except np.linalg.LinAlgError as exc:
                    raise RuntimeError(f"singular Newton matrix at step {i} (t={t[i]:.6g}), stage {stage!r}") from exc
                newton_inv[stage] = (hc, hhd, inv)
                fresh = True
            delta = -(inv @ g)
            z = z + delta
            tot = z.sum()
            if tot - tot != 0:
                raise RuntimeError(f"Newton produced non-finite values at step {i} (t={t[i]:.6g}), stage {stage!r}")
            dn = np.abs(delta).max()
            # an old matrix converges only linearly: it must reach 1e-4 of the
            # tolerance (Newton's quadratic step leaves an error far below
            # it); when it stalls, a fresh matrix takes over
            tol = newton_tol * (1.0 + np.abs(z).max()) * (1.0 if fresh else 1e-4)
            if dn <= tol:
                return z
            if prev is not None and prev > 0:
                theta = dn / prev  # observed contraction: remaining error <= theta/(1-theta) |delta|
                if theta < 1.0 and theta / (1.0 - theta) * dn <= tol:
                    return z
                if theta > 0.25 and not fresh:
                    inv = None          # slow with an old matrix: a fresh one next
            prev = dn
        raise RuntimeError(
            f"Newton did not converge in {max_newton} iterations at step {i} "
            f"(t={t[i]:.6g}, h={h:.3g}), stage {stage!r}; last |delta|={dn:.3e}"
        )

    # per batch and stage: past terms as (lags, coefficient matrix), other
    # terms one by one, implicit (own) coefficients summed
    batches = sch.batches(t, restarts)
    pred = None
    if any(_stage_is_implicit(st) for bt in batches for st in bt.stages):
        pred = {bt.q: bt for bt in AdamsPC(sch.qmax).batches(t, restarts)}   # AB guess
    work = []
    for batch in batches:
        steps = batch.steps
        sel = steps >= m0 - 1
        if not sel.any():
            continue
        rows = np.nonzero(sel)[0]
        hh = t[steps + 1] - t[steps]
        plans = []
        for name, f_terms, d_terms in batch.stages:
            terms = []
            own = [np.zeros(steps.size), np.zeros(steps.size)]
            for is_dot, ts, power in ((False, f_terms, 1), (True, d_terms, 2)):
                past = [(p.lag, c) for p, c in ts if p.kind == "past"]
                lags = np.array([lg for lg, _ in past], dtype=np.int64)
                cm = (np.stack([c for _, c in past], axis=1) * (hh ** power)[:, None]) if past else None
                others = []
                for p, c in ts:
                    if p.kind == "past":
                        continue
                    if (p.kind == "new" and name == "x") or (p.kind == "stage" and p.stage == name):
                        own[int(is_dot)] = own[int(is_dot)] + c
                    else:
                        others.append((p.stage, c * hh ** power))
                terms.append((is_dot, lags, cm, others))
            plans.append((name, terms, own))
        p_lags = p_cm = None
        if pred is not None:
            pb = pred[batch.q]
            p_lags = np.array([p.lag for p, _ in pb.stages[0][1]], dtype=np.int64)
            p_cm = np.stack([c for _, c in pb.stages[0][1]], axis=1) * hh[:, None]
        work += [(int(steps[r]), r, plans, p_lags, p_cm) for r in rows.tolist()]
    # in step order (with restarts a batch's steps are not consecutive)
    for i, r, plans, p_lags, p_cm in sorted(work, key=lambda w: w[0]):
        tn = t[i + 1]
        vals: dict[str, np.ndarray] = {}
        for name, terms, own in plans:
            base = x[i].copy()
            for is_dot, lags, cm, others in terms:
                if cm is not None:
                    base += cm[r] @ grid_values(i - lags, i, name, is_dot)
                for pst, c in others:
                    base += c[r] * call(fdot if is_dot else f, vals[pst], tn,
                                        "fdot" if is_dot else "f", i, name)
            c_self, d_self = float(own[0][r]), float(own[1][r])
            if c_self == 0.0 and d_self == 0.0:
                z = base
            else:
                if vals:
                    z0 = next(reversed(vals.values())).copy()
                else:
                    z0 = x[i] + p_cm[r] @ grid_values(i - p_lags, i, name, False)
                z = _newton(i, name, base, c_self, d_self, z0)
            tot = z.sum()
            if tot - tot != 0:
                raise RuntimeError(f"non-finite state at step {i} (t={t[i]:.6g}), stage {name!r}")
            vals[name] = z
        x[i + 1] = vals["x"]
    return x
