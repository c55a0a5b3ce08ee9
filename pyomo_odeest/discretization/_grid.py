r"""Integration grids containing every measurement time.

The discrete problem of [GM-grad], eq. (2), lives on a partition

.. math::

    t_0 < t_1 < \dots < t_k = T, \qquad h_i = t_{i+1} - t_i,

that contains every measurement time :math:`\tau_1 < \dots < \tau_s`, with
the index correspondence of [GM-grad], eq. (3):

.. math::

    \mathcal I(i) = \begin{cases} j & t_i = \tau_j,\\ 0 & \text{otherwise,}\end{cases}
    \qquad \mathcal J(j) = i \ \text{ with } t_i = \tau_j .
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..problem._declaration import ProblemError

__all__ = ["Grid", "make_grid", "resolve_grid", "subdivide", "follow_steps", "STARTUP_MODES"]

#: Accepted values of ``make_grid(startup=...)``.
STARTUP_MODES = ("none", "refined")


@dataclass(frozen=True, eq=False)
class Grid:
    r"""An integration grid with its measurement index maps [GM-grad, eq. (3)].

    Attributes
    ----------
    t : numpy.ndarray
        :math:`t_0, \dots, t_k`, strictly increasing (read-only).
    meas_times : numpy.ndarray
        :math:`\tau_1, \dots, \tau_s`, strictly increasing, all in ``t``.
    I : numpy.ndarray of int
        Length :math:`k+1`; ``I[i] = j`` (1-based) if :math:`t_i = \tau_j`,
        else 0.
    J : numpy.ndarray of int
        Length :math:`s`; ``J[j-1] = i`` with :math:`t_i = \tau_j`.
    restarts : tuple of int
        Grid indices where the schemes' order ramp restarts: for each
        switching time :math:`\sigma` of a piecewise input the grid holds
        :math:`\sigma^- =` ``nextafter(σ, -inf)`` and :math:`\sigma`, and
        both are restarts, so that no step straddles the switch and no
        multistep history crosses it (see :func:`make_grid`).

    Notes
    -----
    Arrays are compared by identity (``eq=False``): numpy arrays have no
    scalar truth value, so field-wise equality would be ambiguous.
    """

    t: np.ndarray
    meas_times: np.ndarray
    I: np.ndarray
    J: np.ndarray
    restarts: tuple = ()

    def __post_init__(self):
        t = np.asarray(self.t, dtype=float)
        tau = np.asarray(self.meas_times, dtype=float)
        I = np.asarray(self.I, dtype=int)
        J = np.asarray(self.J, dtype=int)
        if t.ndim != 1 or t.size < 2 or not np.all(np.isfinite(t)) or not np.all(np.diff(t) > 0):
            raise ValueError("Grid.t must be a finite, strictly increasing 1-D array with at least two times")
        if tau.ndim != 1 or I.shape != t.shape or J.shape != tau.shape:
            raise ValueError("Grid: inconsistent shapes of t, meas_times, I, J")
        if tau.size and (np.any(J < 0) or np.any(J >= t.size) or not np.array_equal(t[J], tau)):
            raise ValueError("Grid: J does not map measurement times onto grid points")
        expect = np.zeros(t.size, dtype=int)
        expect[J] = np.arange(1, tau.size + 1)
        if not np.array_equal(I, expect):
            raise ValueError("Grid: I is not the inverse of J [GM-grad, eq. (3)]")
        rs = tuple(sorted({int(r) for r in self.restarts}))
        if rs and (rs[0] < 1 or rs[-1] > t.size - 2):
            raise ValueError(f"Grid: restarts must be indices in [1, {t.size - 2}], got {rs}")
        object.__setattr__(self, "restarts", rs)
        for name, arr in (("t", t), ("meas_times", tau), ("I", I), ("J", J)):
            arr = arr.copy()
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def h(self) -> np.ndarray:
        r"""Steps :math:`h_i = t_{i+1} - t_i`, length :math:`k`."""
        return np.diff(self.t)

    @property
    def k(self) -> int:
        """Number of steps."""
        return self.t.size - 1

    @property
    def s(self) -> int:
        """Number of measurement times."""
        return self.meas_times.size

    @property
    def M(self) -> np.ndarray:
        r"""Grid indices of measurements, :math:`M = \{i : \mathcal I(i) \ne 0\}`."""
        return self.J.copy()

    def __len__(self) -> int:
        return self.t.size

    def required_indices(self) -> np.ndarray:
        """Grid indices of the points every refinement keeps: :math:`t_0`, :math:`T`,
        the measurement times and the restarts (a switching time and its twin)."""
        return np.unique(np.concatenate([[0, self.k], self.J, list(self.restarts)]).astype(int))

    def __repr__(self) -> str:
        h = self.h
        return (f"Grid(k={self.k}, s={self.s}, t=[{self.t[0]:.6g}, {self.t[-1]:.6g}], "
                f"h in [{h.min():.3g}, {h.max():.3g}])")


def _times(name, values, scalar=False) -> np.ndarray:
    if scalar and np.ndim(values) != 0:
        raise ValueError(f"{name} must be a scalar")
    try:
        arr = np.atleast_1d(np.asarray(values, dtype=float))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D sequence of numbers") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN")
    if np.any(~np.isfinite(arr)):
        raise ValueError(f"{name} contains infinite values")
    return arr


def _int_at_least(value, low) -> bool:
    """True for an int (not a bool) ``>= low``."""
    return (not isinstance(value, bool) and isinstance(value, (int, np.integer))
            and value >= low)


def substeps(lengths, max_step=None, steps_per_interval=None) -> np.ndarray:
    """Equal sub-steps per interval of ``lengths``: the fewest with at least
    ``steps_per_interval`` and none longer than ``max_step`` (1 without either)."""
    n = np.full(np.shape(lengths), 1 if steps_per_interval is None else int(steps_per_interval))
    if max_step is not None:
        n = np.maximum(n, np.ceil(np.asarray(lengths) / max_step * (1.0 - 1e-12)).astype(int))
    return n


def _geometric_startup(H, L, ratio, startup_steps, startup_order):
    """Steps h_0 < h_1 < ... (growth ``ratio``) summing to ``H``."""
    if startup_steps is None:
        target = H * (H / L) ** ((startup_order - 3) / 3.0)
        m = 1
        while H * (ratio - 1.0) / (ratio ** m - 1.0) > target and m < 200:
            m += 1
    else:
        m = startup_steps
    w = ratio ** np.arange(m)
    return H * w / w.sum()


def make_grid(
    meas_times,
    t0: float = 0.0,
    T: float | None = None,
    *,
    max_step: float | None = None,
    steps_per_interval: int | None = None,
    extra_times=(),
    startup: str = "none",
    startup_steps: int | None = None,
    startup_order: int = 7,
    startup_ratio: float = 2.0,
    jitter: float = 0.0,
    seed=None,
    switches=(),
) -> Grid:
    r"""Build an integration grid containing :math:`t_0`, :math:`T` and every
    measurement time [GM-grad, eq. (3)].

    The required points :math:`\{t_0, T\} \cup \{\tau_j\} \cup` ``extra_times``
    split :math:`[t_0, T]` into intervals; each interval of length :math:`L_r`
    is divided into :math:`n_r` equal sub-steps, the fewest with
    :math:`n_r \ge` ``steps_per_interval`` and :math:`L_r / n_r \le`
    ``max_step`` (either may be omitted; with both omitted :math:`n_r = 1`).

    Start-up refinement (``startup="refined"``): the order ramp
    :math:`Q_i = \min(i+1, Q_{\max}-1)` caps the observed order at 3 (Adams) or
    4 (Enright) on uniform grids (docs/schemes.md, "The start-up ramp limits the
    order").  The refined start-up replaces the first sub-step :math:`H` (also
    after every switching time) by steps growing by ``startup_ratio`` and summing
    to :math:`H`, the first :math:`h_0 \le H (H/L)^{(p-3)/3}` with :math:`p` =
    ``startup_order`` and :math:`L = T - t_0`, so that the start-up no longer
    limits a global order :math:`\le p`; a fixed ``startup_steps`` only reduces
    the error constant, not the order.

    Parameters
    ----------
    meas_times : array_like
        Measurement times :math:`\tau_j`, strictly increasing, in
        :math:`[t_0, T]` (may include :math:`t_0`).
    t0 : float
        Initial time.
    T : float, optional
        Final time; default ``max(meas_times)``.  Must exceed ``t0``.
    max_step : float, optional
        Upper bound on the uniform sub-steps (> 0).
    steps_per_interval : int, optional
        Minimum number of equal sub-steps between consecutive required points.
    extra_times : array_like
        Further required grid points (not measurements), in :math:`[t_0, T]`.
    startup : {"none", "refined"}
        Start-up refinement, see above.
    startup_steps : int, optional
        Number of geometric start-up steps; default: chosen from
        ``startup_order``.
    startup_order : int
        Global order :math:`p` the refined start-up must not limit (default
        7, enough for every scheme with :math:`Q_{\max} \le 6`).
    startup_ratio : float
        Growth factor of the start-up steps, > 1 (default 2).
    jitter : float
        In :math:`[0, 1)`: each non-required interior point is moved by
        ``jitter`` :math:`\cdot\, g/2 \cdot U(-1, 1)`, :math:`g` its smaller
        adjacent gap, which keeps the ordering (gaps shrink by at most the
        factor ``1 - jitter``).  For tests on non-uniform grids.
    seed : int or numpy.random.Generator, optional
        Random source for ``jitter``.
    switches : array_like
        Switching times :math:`\sigma` of piecewise inputs in
        :math:`(t_0, T)`: required points, each preceded by its twin
        :math:`\sigma^- =` ``numpy.nextafter(σ, -inf)``; both are
        :attr:`Grid.restarts` (docs/experiments.md, "Switching times").

    Returns
    -------
    Grid

    Raises
    ------
    ValueError
        Unsorted or duplicate measurement times, NaN/infinite times, times
        outside :math:`[t_0, T]`, :math:`T \le t_0`, non-positive
        ``max_step``, bad ``steps_per_interval``, ``startup`` or ``jitter``.
    """
    tau = _times("meas_times", meas_times)
    if tau.size > 1 and np.any(np.diff(tau) == 0):
        dup = tau[:-1][np.diff(tau) == 0]
        raise ValueError(f"meas_times contains duplicates: {np.unique(dup)}")
    if tau.size > 1 and np.any(np.diff(tau) < 0):
        raise ValueError("meas_times must be sorted in increasing order")
    t0 = float(_times("t0", t0, scalar=True)[0])
    if T is None:
        if tau.size == 0:
            raise ValueError("T is required when meas_times is empty")
        T = float(tau.max())
    else:
        T = float(_times("T", T, scalar=True)[0])
    if not T > t0:
        raise ValueError(f"T must be greater than t0 (t0={t0}, T={T})")
    extra = _times("extra_times", extra_times)
    for name, arr in (("meas_times", tau), ("extra_times", extra)):
        out = arr[(arr < t0) | (arr > T)]
        if out.size:
            raise ValueError(f"{name} outside [t0, T] = [{t0}, {T}]: {out}")

    if max_step is not None:
        max_step = float(max_step)
        if math.isnan(max_step) or not max_step > 0:
            raise ValueError(f"max_step must be positive, got {max_step}")
    if steps_per_interval is not None and not _int_at_least(steps_per_interval, 1):
        raise ValueError(f"steps_per_interval must be a positive int, got {steps_per_interval!r}")
    if startup not in STARTUP_MODES:
        raise ValueError(f"startup must be one of {STARTUP_MODES}, got {startup!r}")
    if startup_steps is not None and not _int_at_least(startup_steps, 1):
        raise ValueError(f"startup_steps must be a positive int or None, got {startup_steps!r}")
    if not _int_at_least(startup_order, 3):
        raise ValueError(f"startup_order must be an int >= 3, got {startup_order!r}")
    startup_ratio = float(startup_ratio)
    if not (startup_ratio > 1.0 and np.isfinite(startup_ratio)):
        raise ValueError(f"startup_ratio must be > 1, got {startup_ratio}")
    jitter = float(jitter)
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")

    sw = _times("switches", switches)
    sw = np.unique(sw[(sw > t0) & (sw < T)])
    required = np.unique(np.concatenate([[t0, T], tau, extra, sw]))
    pieces = [required[:1]]
    movable = [np.zeros(1, dtype=bool)]
    ns = substeps(np.diff(required), max_step, steps_per_interval)
    for r, (a, b, n) in enumerate(zip(required[:-1], required[1:], ns)):
        length = b - a
        frac = np.arange(1, n + 1) / n
        if startup == "refined" and (r == 0 or np.any(sw == a)):   # also after each switch
            H = length / n
            hs = _geometric_startup(H, T - t0, startup_ratio, startup_steps, int(startup_order))
            head = np.cumsum(hs)[:-1] / length  # interior points of [a, a + H]
            frac = np.concatenate([head, frac])
        pts = a + length * frac
        pts[-1] = b
        pieces.append(pts)
        movable.append(np.arange(pts.size) < pts.size - 1)    # all but the required end
    t = np.concatenate(pieces)
    mov = np.concatenate(movable)

    if jitter > 0.0:
        rng = np.random.default_rng(seed)
        idx = np.nonzero(mov)[0]
        gaps = np.diff(t)
        g = np.minimum(gaps[idx - 1], gaps[idx])
        t = t.copy()
        t[idx] += jitter * 0.5 * g * rng.uniform(-1.0, 1.0, size=idx.size)

    restarts = ()
    if sw.size:
        twins = np.nextafter(sw, -np.inf)
        if np.any(np.isin(twins, t)) or np.any(np.isin(twins, tau)):
            raise ValueError("a grid point or measurement lies one unit in the last place "
                             "before a switching time")
        t = np.sort(np.concatenate([t, twins]))
        r = np.searchsorted(t, twins)
        restarts = tuple(int(i) for i in np.concatenate([r, r + 1]))
    J = np.searchsorted(t, tau)
    I = np.zeros(t.size, dtype=int)
    I[J] = np.arange(1, tau.size + 1)
    return Grid(t=t, meas_times=tau, I=I, J=J, restarts=restarts)


def subdivide(grid: Grid, counts) -> Grid:
    """A grid with the required points of ``grid`` (:meth:`Grid.required_indices`)
    and ``counts[r]`` equal steps between required points r and r + 1 (one for the
    step from a switching time's twin to it); the measurement maps and the
    restarts carried over."""
    req = grid.required_indices()
    counts = np.asarray(counts, dtype=int)
    if counts.shape != (req.size - 1,) or np.any(counts < 1):
        raise ValueError(f"counts must hold a positive int per interval between required "
                         f"points ({req.size - 1}), got {counts.tolist()[:10]}")
    t_req = grid.t[req]
    tiny = (t_req[1:] - t_req[:-1]) <= 1e-12 * (t_req[-1] - t_req[0])
    counts = np.where(tiny, 1, counts)              # a switching time's twin step stays one
    return _with_points(grid, [a + (b - a) * np.arange(1, n) / n
                               for a, b, n in zip(t_req[:-1], t_req[1:], counts)])


def _with_points(grid, inner):
    """``grid``'s required points with ``inner[r]`` (increasing, strictly inside) between
    required points r and r + 1; the measurement maps and the restarts carried over."""
    req = grid.required_indices()
    t_req = grid.t[req]
    pieces = [t_req[:1]]
    for b, pts in zip(t_req[1:], inner):
        pieces.append(np.append(np.asarray(pts, dtype=float), b))
    t = np.concatenate(pieces)
    new_index = np.concatenate([[0], np.cumsum([p.size for p in pieces[1:]])])
    where = dict(zip(req.tolist(), new_index.tolist()))
    J = np.array([where[int(j)] for j in grid.J], dtype=int)
    I = np.zeros(t.size, dtype=int)
    I[J] = np.arange(1, J.size + 1)
    return Grid(t=t, meas_times=grid.meas_times, I=I, J=J,
                restarts=tuple(where[int(r)] for r in grid.restarts))


def follow_steps(grid: Grid, step_times, max_step=None, ratio=2.0) -> Grid:
    r"""A grid with the required points of ``grid`` whose steps follow an integrator's
    accepted steps (``step_times``, the ends of its steps).

    A step at time t is the smallest of ``max_step`` and the envelope
    :math:`\min_j (g_j + c\, d_j(t))`, :math:`g_j` the integrator's steps,
    :math:`d_j(t)` the distance from t to step j and :math:`c = 1 - 1/`
    ``ratio``, so that consecutive steps differ by less than the factor
    ``ratio`` (the variable-step schemes' coefficients stay well conditioned and
    their zero-stability holds) while the grid follows the solution's time
    scale: fine in fast transients, coarse where it settles.  A step that would
    leave less than a fifth of itself before a required point ends there (or two
    steps reach it); steps below 1e-6 of the horizon (an integrator's cautious
    first steps) are not followed.
    """
    if not float(ratio) > 1:
        raise ValueError(f"ratio must be > 1, got {ratio}")
    if max_step is not None and not float(max_step) > 0:
        raise ValueError(f"max_step must be positive, got {max_step}")
    req = grid.required_indices()
    t_req = grid.t[req]
    span = float(t_req[-1] - t_req[0])
    cap = span if max_step is None else min(float(max_step), span)
    ends = np.unique(np.asarray(step_times, dtype=float).ravel())
    ends = ends[np.isfinite(ends)]
    lo, hi = ends[:-1], ends[1:]
    g = np.maximum(hi - lo, 1e-6 * span)
    c = 1.0 - 1.0 / float(ratio)

    def step(t):
        if not g.size:
            return cap
        d = np.maximum(np.maximum(lo - t, t - hi), 0.0)
        return float(min(cap, np.min(g + c * d)))

    inner = []
    for a, b in zip(t_req[:-1], t_req[1:]):
        pts, t = [], float(a)
        while b - a > 1e-12 * span:                    # not a switching time's twin step
            h = step(t)
            if t + 1.2 * h >= b:
                if b - t > h:                          # two steps to b
                    pts.append(t + (b - t) / 2)
                break
            t += h
            pts.append(t)
        inner.append(np.array(pts))
    return _with_points(grid, inner)


def resolve_grid(problem, grid=None, max_step=None, steps_per_interval=None) -> Grid:
    """The integration grid of eq. (3) for ``problem``.

    Given ``grid`` is checked (starts at t0, contains every measurement
    time); otherwise :func:`make_grid` is called with ``max_step`` or
    ``steps_per_interval`` (default 10 steps per measurement interval).
    """
    sw = np.asarray(getattr(problem, "switch_times", ()), dtype=float)
    if grid is None:
        if max_step is None and steps_per_interval is None:
            steps_per_interval = 10
        return make_grid(problem.meas_times, t0=problem.t0, T=problem.T, max_step=max_step,
                         steps_per_interval=steps_per_interval, switches=sw)
    if not isinstance(grid, Grid):
        raise TypeError("grid must be a pyomo_odeest.Grid (see make_grid)")
    missing = [tau for tau in problem.meas_times if not np.any(grid.t == tau)]
    if missing or grid.t[0] != problem.t0:
        raise ProblemError(f"grid must start at t0 and contain every measurement time; "
                           f"missing {missing[:5]}")
    if sw.size:
        idx = np.searchsorted(grid.t, sw)
        ok = (idx >= 1) & (idx < len(grid.t)) & (grid.t[np.minimum(idx, len(grid.t) - 1)] == sw)
        ok &= (grid.t[np.maximum(idx - 1, 0)] == np.nextafter(sw, -np.inf))
        if not ok.all() or not set(np.concatenate([idx - 1, idx]).tolist()) <= set(grid.restarts):
            raise ProblemError(f"grid must contain every switching time of the inputs with its "
                               f"twin and restarts (make_grid(..., switches=...)); missing "
                               f"{sw[~ok][:5]}")
    return grid
