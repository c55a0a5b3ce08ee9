"""The four schemes, one object each, with the order policy
:math:`Q_i = \\min(i+1, Q_{\\max}-1)` of [GM-grad] and their step formulas per grid."""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import numpy as np

from ._coefficients import _ab_weights, _am_weights, _enright_weights
from ._formulas import PointRef, StepBatch, StepFormula

#: Valid range (inclusive) of the maximum corrector order :math:`Q_{\max}`.
QMAX_RANGE = (2, 8)
#: :math:`Q_{\max}` used by :func:`get_scheme` when none is given.
DEFAULT_QMAX = 4


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
    t = getattr(t, "t", t)  # a pyomo_odeest.discretization._grid.Grid or an array of times
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


def _f_terms(w, q: int, first: PointRef | None = None) -> tuple:
    """The f terms ``(first, w[:, 0]), (x_i, w[:, 1]), ..., (x_{i-q+1}, w[:, q])``;
    without ``first`` the past points take the columns ``0..q-1``."""
    head = () if first is None else ((first, w[:, 0]),)
    return head + tuple((_past(j), w[:, j + len(head)]) for j in range(q))


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
    2. Set ``_extra_order``: :attr:`order` is ``qmax + _extra_order`` and
       :attr:`startup_order` is ``min(3 + _extra_order, order)``.
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
    _extra_order = 0
    _CACHE_SIZE = 8

    def __init__(self, qmax: int = DEFAULT_QMAX):
        self.qmax = _check_qmax(qmax)
        self._cache: OrderedDict[bytes, tuple[StepFormula, ...]] = OrderedDict()
        self._batch_cache: OrderedDict[bytes, tuple[StepBatch, ...]] = OrderedDict()
        #: number of step formulas built so far (cache hits do not count)
        self.n_formulas_built = 0

    @property
    def order(self) -> int:
        r"""Classical global order, reached once :math:`Q_i = Q_{\max}-1`."""
        return self.qmax + self._extra_order

    @property
    def startup_order(self) -> int:
        """Observed global order on a plain uniform grid with the order ramp (see the
        module docstring): limited by the start-up steps."""
        return min(3 + self._extra_order, self.order)

    # -- to be provided by subclasses ---------------------------------------
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

    def __getstate__(self):
        # pickled without the per-grid formula caches (rebuilt on demand, bit-identical)
        state = dict(self.__dict__)
        state["_cache"], state["_batch_cache"] = OrderedDict(), OrderedDict()
        return state

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
        ``t.restarts`` when ``t`` is a :class:`~pyomo_odeest.discretization._grid.Grid`.
        """
        restarts, t = self._restarts(t, restarts), _check_grid(t)

        def build():
            out: list[StepFormula | None] = [None] * (t.size - 1)
            for batch in self.batches(t, restarts):
                for r, i in enumerate(batch.steps.tolist()):
                    out[i] = batch.formula(r)
            self.n_formulas_built += len(out)
            return tuple(out)
        return list(self._cached(self._cache, (t.tobytes(), restarts), build))

    def batches(self, t, restarts=()) -> tuple[StepBatch, ...]:
        """The step formulas of grid ``t`` as arrays: one :class:`StepBatch` per
        order :math:`Q_i` (steps of equal :math:`Q_i` share one structure).

        Same coefficients as :meth:`formulas` (which is built from these), in
        O(number of batches) Python objects instead of O(k); cached per grid.
        With ``restarts`` (see :meth:`formulas`) a batch's steps need not be
        consecutive.
        """
        restarts, t = self._restarts(t, restarts), _check_grid(t)

        def build():
            steps = np.arange(t.size - 1)
            seg = np.zeros(t.size - 1, dtype=int)
            for r in restarts:
                seg[r:] = r
            qs = np.minimum(steps - seg + 1, self.qmax - 1)
            return tuple(self._build(steps[qs == q], t, int(q)) for q in np.unique(qs))
        return self._cached(self._batch_cache, (t.tobytes(), restarts), build)

    # -- internals ----------------------------------------------------------
    def _cached(self, cache: OrderedDict, key, build):
        """``cache[key]``, computed by ``build()`` on a miss (LRU of ``_CACHE_SIZE`` grids)."""
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = build()
            while len(cache) > self._CACHE_SIZE:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return hit

    def _build(self, idx: np.ndarray, t: np.ndarray, q: int | None = None) -> StepBatch:
        """Coefficients of steps ``idx`` (all with the same Q_i), checked."""
        q = self.order_q(int(idx[0])) if q is None else q
        h = t[idx + 1] - t[idx]
        lags = np.arange(q)
        past = t[idx[:, None] - lags[None, :]]
        s = _snap((past - t[idx, None]) / h[:, None],
                  np.maximum(np.abs(past), np.abs(t[idx + 1, None])) / h[:, None])
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


def _snap(s, scale):
    """The scaled nodes ``s`` with every entry within round-off of an integer made that
    integer: the error of ``(t_j - t_i)/h_i`` computed from the times is about
    ``eps · max|t| / h_i`` (``scale``), and a grid of equal steps (up to that error)
    then has the classical, step-independent coefficients, which the block stores
    once per batch (:func:`~pyomo_odeest.transcription._block._add_param`).  A node
    moves by at most 16 · eps · max|t| in time: a few units in the last place of the
    grid's own times."""
    r = np.round(s)
    close = np.abs(s - r) <= 16.0 * np.finfo(float).eps * np.maximum(scale, 1.0)
    return np.where(close, r, s)


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

    def _stage_degrees(self, q):
        return {"y": q, "x": q + 1}

    def _stage_templates(self, s, q):
        y = ("y", _f_terms(_ab_weights(s), q), ())
        return (y, ("x", _f_terms(_am_weights(s), q, _stage_ref("y")), ()))


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

    def _stage_degrees(self, q):
        return {"x": q + 1}

    def _stage_templates(self, s, q):
        return (("x", _f_terms(_am_weights(s), q, _NEW), ()),)


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
    _extra_order = 1

    def _stage_degrees(self, q):
        return {"x": q + 2}

    def _stage_templates(self, s, q):
        rho, sigma = _enright_weights(s)
        return (("x", _f_terms(rho, q, _NEW), ((_NEW, sigma),)),)


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
    _extra_order = 1

    def _stage_degrees(self, q):
        return {"y": q, "yc": q + 1, "x": q + 2}

    def _stage_templates(self, s, q):
        rho, sigma = _enright_weights(s)
        y = ("y", _f_terms(_ab_weights(s), q), ())
        yc = ("yc", _f_terms(_am_weights(s), q, _stage_ref("y")), ())
        return (y, yc, ("x", _f_terms(rho, q, _NEW), ((_stage_ref("yc"), sigma),)))


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
