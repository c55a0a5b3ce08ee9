"""The plain-numpy reference implementation of the step formulas: :func:`integrate`."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ._families import AdamsPC, _check_grid, get_scheme
from ._formulas import _targets_self

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
        Newton stops when :math:`|\Delta v_j| \le` ``newton_tol``
        :math:`(1 + |v_j|)` for every state :math:`j` (each state against its own
        magnitude, so that states of very different scales are all resolved).
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
        if not math.isfinite(tot):      # NaN or inf somewhere (or a wrong shape)
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
            # each state's change against its own magnitude: states of very different
            # scales (1e7 and 1e-3 molecules) must each be resolved to newton_tol
            dn = (np.abs(delta) / (1.0 + np.abs(z))).max()
            # an old matrix converges only linearly: it must reach 1e-4 of the
            # tolerance (Newton's quadratic step leaves an error far below
            # it); when it stalls, a fresh matrix takes over
            tol = newton_tol * (1.0 if fresh else 1e-4)
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
    if any(_targets_self(p, name) for bt in batches
           for name, ft, dt in bt.stages for p, _ in ft + dt):
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
                    if _targets_self(p, name):
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
