"""Derivative checks for NLP evaluators and plain callables.

Every backend of the package (the Pyomo evaluator, reduced-space shooting
objectives, ...) must deliver exact derivatives.  This module compares them
with central finite differences and compares two evaluators of the same
problem with each other:

* :func:`check_derivatives` -- gradient, constraint Jacobian and Lagrangian
  Hessian of an :class:`~pyomo_odeest.nlp._protocol.NLPEvaluator` against
  central differences of the objective, the constraints and the gradient of
  the Lagrangian, plus sanity checks of the sparsity structures.
* :func:`check_gradient` / :func:`check_jacobian` -- the same for plain
  callables ``fun(x) -> float`` / ``fun(x) -> (m,)``.
* :func:`check_consistency` -- two evaluators of one problem, possibly with
  different column and row orders, agree on values and derivatives.

All functions return a :class:`DerivativeReport`; ``report.ok`` says whether
everything is within tolerance and ``print(report)`` shows what is not.

An entry passes when ``|value - reference| <= atol + rtol * max(|value|,
|reference|)``, plus, for finite differences, an estimate of their round-off
error (``fd_noise`` in :func:`check_derivatives`).  The default step
``h = 1e-6`` (scaled by ``max(1, |x_j|)``) makes the truncation error of
central differences ``O(h**2)`` and the round-off error about
``1e-10 * |f|``, well inside the default tolerances for smooth functions of
moderate size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from ..nlp._protocol import EvaluationError

__all__ = ["Mismatch", "QuantityCheck", "DerivativeReport", "check_derivatives",
           "check_gradient", "check_jacobian", "check_consistency",
           "column_permutation", "row_permutation"]

#: at most this many offending entries are stored per quantity
MAX_OFFENDERS = 25


class Mismatch(NamedTuple):
    """One entry out of tolerance.

    Attributes
    ----------
    row, col : int
        Position of the entry (``col`` is ``-1`` for vectors and scalars, and
        ``row`` is ``-1`` for scalars).
    value : float
        The value under test (the exact derivative, or evaluator *a*).
    reference : float
        The reference (the finite difference, or evaluator *b*).
    """

    row: int
    col: int
    value: float
    reference: float


@dataclass
class QuantityCheck:
    """Comparison of one quantity (gradient, Jacobian, ...) with its reference.

    Attributes
    ----------
    name : str
        Name of the quantity.
    shape : tuple or None
        Shape of the compared arrays (``None`` for checks without numbers,
        such as the sparsity structure).
    max_abs : float
        Largest absolute difference over all entries.
    max_rel : float
        Largest relative difference ``|v - r| / max(|v|, |r|)`` over the
        entries where ``max(|v|, |r|) > atol``.
    n_bad : int
        Number of entries out of tolerance.
    offenders : list of Mismatch
        The worst offending entries (at most :data:`MAX_OFFENDERS`), worst first.
    notes : list of str
        Structural problems or evaluation failures found on the way.
    labels : tuple of str
        Names of the two compared values, used by ``__str__``.
    """

    name: str
    shape: tuple
    max_abs: float = 0.0
    max_rel: float = 0.0
    n_bad: int = 0
    offenders: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    labels: tuple = ("exact", "fd")

    @property
    def ok(self) -> bool:
        """True when no entry is out of tolerance and there are no notes."""
        return self.n_bad == 0 and not self.notes

    def __str__(self):
        status = "ok " if self.ok else "BAD"
        if self.shape is None:     # a check without numbers (structure)
            lines = [f"  [{status}] {self.name:<12} {len(self.notes)} problem(s)"]
        else:
            shape = "x".join(str(s) for s in self.shape) or "scalar"
            lines = [f"  [{status}] {self.name:<12} ({shape}): max abs err {self.max_abs:.3e}, "
                     f"max rel err {self.max_rel:.3e}, {self.n_bad} out of tolerance"]
        for note in self.notes:
            lines.append(f"        note: {note}")
        if self.offenders:
            a, b = self.labels
            lines.append(f"        {'row':>6} {'col':>6} {a:>16} {b:>16} {'abs err':>11}")
            for o in self.offenders:
                lines.append(f"        {o.row:>6} {o.col:>6} {o.value:>16.9e} "
                             f"{o.reference:>16.9e} {abs(o.value - o.reference):>11.3e}")
            if self.n_bad > len(self.offenders):
                lines.append(f"        ... {self.n_bad - len(self.offenders)} more")
        return "\n".join(lines)


@dataclass
class DerivativeReport:
    """Result of a derivative or consistency check.

    Attributes
    ----------
    title : str
        What was checked.
    checks : dict of str to QuantityCheck
        One entry per compared quantity, in the order checked.
    rtol, atol : float
        The tolerances used.
    h : float or None
        The finite-difference step (``None`` for consistency checks).
    """

    title: str
    checks: dict = field(default_factory=dict)
    rtol: float = 1e-6
    atol: float = 1e-8
    h: Optional[float] = None

    @property
    def ok(self) -> bool:
        """True when every quantity is within tolerance."""
        return all(c.ok for c in self.checks.values())

    def __getitem__(self, name) -> QuantityCheck:
        return self.checks[name]

    def __contains__(self, name):
        return name in self.checks

    @property
    def max_abs(self) -> float:
        """Largest absolute error over all quantities."""
        return max((c.max_abs for c in self.checks.values()), default=0.0)

    @property
    def max_rel(self) -> float:
        """Largest relative error over all quantities."""
        return max((c.max_rel for c in self.checks.values()), default=0.0)

    def __str__(self):
        step = "" if self.h is None else f", h={self.h:g}"
        head = (f"{self.title}: {'OK' if self.ok else 'FAILED'} "
                f"(rtol={self.rtol:g}, atol={self.atol:g}{step})")
        return "\n".join([head] + [str(c) for c in self.checks.values()])

    def __bool__(self):
        return self.ok


# --------------------------------------------------------------------------
# comparison helpers
# --------------------------------------------------------------------------
def _compare(name, value, reference, rtol, atol, labels=("exact", "fd"),
             noise=None) -> QuantityCheck:
    """Entry-wise comparison of two arrays of equal shape.

    ``noise`` (broadcastable to the shape) is added to the allowed error:
    the round-off error of the finite differences.
    """
    v = np.atleast_1d(np.asarray(value, dtype=float))
    r = np.atleast_1d(np.asarray(reference, dtype=float))
    shape = np.shape(value)
    qc = QuantityCheck(name, tuple(shape), labels=labels)
    if v.shape != r.shape:
        qc.notes.append(f"shape mismatch: {v.shape} vs {r.shape}")
        return qc
    if v.size == 0:
        return qc
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(v - r)
    scale = np.maximum(np.abs(v), np.abs(r))
    nonfinite = ~(np.isfinite(v) & np.isfinite(r))
    diff = np.where(nonfinite, np.inf, diff)
    # equal infinities (e.g. both +inf bounds) are a match
    same_inf = nonfinite & (v == r)
    diff = np.where(same_inf, 0.0, diff)
    allowed = atol + rtol * np.where(np.isfinite(scale), scale, 0.0)
    if noise is not None:
        nz = np.broadcast_to(np.atleast_1d(np.asarray(noise, dtype=float)), allowed.shape)
        allowed = allowed + np.where(np.isfinite(nz), nz, 0.0)
    bad = diff > allowed
    finite_diff = diff[np.isfinite(diff)]
    qc.max_abs = float(finite_diff.max()) if finite_diff.size else 0.0
    if (~np.isfinite(diff)).any():
        qc.max_abs = float("inf")
    big = (scale > atol) & np.isfinite(diff) & np.isfinite(scale)
    qc.max_rel = float((diff[big] / scale[big]).max()) if big.any() else 0.0
    if (~np.isfinite(diff) & ~same_inf).any():
        qc.max_rel = float("inf")
    qc.n_bad = int(bad.sum())
    if qc.n_bad:
        flat = np.flatnonzero(bad.ravel())
        order = flat[np.argsort(-diff.ravel()[flat], kind="stable")][:MAX_OFFENDERS]
        for k in order.tolist():
            if v.ndim == 2:
                i, j = divmod(k, v.shape[1])
            elif len(shape) == 0:
                i, j = -1, -1
            else:
                i, j = k, -1
            qc.offenders.append(Mismatch(int(i), int(j), float(v.ravel()[k]),
                                         float(r.ravel()[k])))
    return qc


def _steps(x, h):
    return h * np.maximum(1.0, np.abs(x))


def _fd_columns(fun, x, h, what, notes, noise_factor=10.0):
    """Central differences ``(fun(x + h_j e_j) - fun(x - h_j e_j)) / 2h_j``.

    Returns ``(fd, noise)``: arrays with one leading axis per column ``j``.
    ``noise`` estimates the round-off error of each difference quotient,
    ``noise_factor * eps * max(|fun(x+)|, |fun(x-)|) / (2 h_j)``: a sum of
    many terms (a large objective) has a value much larger than its
    derivatives, and its differences are only that accurate.  A column whose
    evaluation fails is NaN and a note is recorded.
    """
    x = np.asarray(x, dtype=float)
    hs = _steps(x, h)
    eps = np.finfo(float).eps
    cols, noise = [], []
    for j in range(x.size):
        xp = x.copy()
        xm = x.copy()
        xp[j] += hs[j]
        xm[j] -= hs[j]
        try:
            fp = np.asarray(fun(xp), dtype=float)
            fm = np.asarray(fun(xm), dtype=float)
            step = xp[j] - xm[j]
            cols.append((fp - fm) / step)
            noise.append(noise_factor * eps * np.maximum(np.abs(fp), np.abs(fm)) / step)
        except (EvaluationError, ArithmeticError, ValueError) as err:
            notes.append(f"{what}: evaluation failed at x[{j}] +/- {hs[j]:.1e}: {err}")
            cols.append(None)
            noise.append(None)
    shape = next((np.shape(c) for c in cols if c is not None), ())
    if not cols:
        return np.zeros((0,) + shape), np.zeros((0,) + shape)
    fill = np.full(shape, np.nan)
    return (np.stack([fill if c is None else c for c in cols]),
            np.stack([fill if c is None else c for c in noise]))


def _fd_check(name, fun, exact, x, h, rtol, atol, fd_noise, what, post=None):
    """Compare ``exact(shape)`` (called after the differences) with the central
    differences of ``fun`` at ``x`` (:func:`_fd_columns`), rearranged by
    ``post(fd, noise)``; failed evaluations become notes."""
    notes = []
    fd, nz = _fd_columns(fun, x, h, what, notes, fd_noise)
    if post is not None:
        fd, nz = post(fd, nz)
    qc = _compare(name, exact(fd.shape), fd, rtol, atol, noise=nz)
    qc.notes.extend(notes)
    return qc


def _transpose(fd, nz):
    return fd.T, nz.T


def _lagrangian_weights(m, lam, obj_factor, seed):
    """``lam`` (default uniform random in [-1, 1]) and ``obj_factor`` (default
    uniform random in [0.5, 1.5]), drawn in that order from ``seed``."""
    rng = np.random.default_rng(seed)
    lam = rng.uniform(-1.0, 1.0, m) if lam is None else np.asarray(lam, dtype=float)
    return lam, (float(rng.uniform(0.5, 1.5)) if obj_factor is None else obj_factor)


def _dense(a, shape):
    """Dense float array from an array, a scipy sparse matrix or a matrix-like."""
    if hasattr(a, "toarray"):
        a = a.toarray()
    return np.asarray(a, dtype=float).reshape(shape)


def _structure_notes(ev):
    """Problems with the declared sparsity structures of an evaluator."""
    notes = []
    (jr, jc), (hr, hc) = ([np.asarray(a) for a in st()]
                          for st in (ev.jacobian_structure, ev.hessian_structure))
    for what, r, c, m in (("Jacobian", jr, jc, ev.m), ("Hessian", hr, hc, ev.n)):
        if r.shape != c.shape:
            notes.append(f"{what} structure: rows {r.shape} and cols {c.shape} differ in length")
        elif r.size and (r.min() < 0 or r.max() >= m or c.min() < 0 or c.max() >= ev.n):
            notes.append(f"{what} structure: index out of range")
    if hr.shape == hc.shape and hr.size:
        if np.any(hr < hc):
            k = int(np.flatnonzero(hr < hc)[0])
            notes.append(f"Hessian structure: entry ({hr[k]}, {hc[k]}) is above the "
                         "diagonal (the lower triangle is required)")
        if np.unique(hr * max(ev.n, 1) + hc).size != hr.size:
            notes.append("Hessian structure: duplicate entries")
    return notes


# --------------------------------------------------------------------------
# public checks
# --------------------------------------------------------------------------
def check_derivatives(ev, x=None, lam=None, obj_factor=None, h=1e-6, rtol=1e-6,
                      atol=1e-8, seed=0, hessian=True, fd_noise=10.0) -> DerivativeReport:
    """Compare an evaluator's exact derivatives with central finite differences.

    Parameters
    ----------
    ev : NLPEvaluator
        The evaluator (``n``, ``m``, ``objective``, ``gradient``,
        ``constraints``, ``jacobian_structure``/``jacobian``,
        ``hessian_structure``/``hessian``).
    x : array_like, optional
        The point, in the evaluator's column order (default ``ev.x0``).
    lam : array_like, optional
        Constraint multipliers for the Lagrangian Hessian (default: uniform
        random in ``[-1, 1]``).
    obj_factor : float, optional
        Objective weight in the Lagrangian (default: uniform random in
        ``[0.5, 1.5]``).
    h : float
        Relative finite-difference step; column ``j`` uses
        ``h * max(1, |x_j|)``.
    rtol, atol : float
        Tolerances (see the module docstring).
    seed : int
        Seed for the random ``lam`` and ``obj_factor``.
    hessian : bool
        Also check the Hessian (default True).
    fd_noise : float
        Round-off allowance: entry ``(i, j)`` may additionally differ by
        ``fd_noise * eps * |F_i| / (2 h_j)`` where ``F`` is the differenced
        function (objective, constraint ``i``, Lagrangian gradient entry
        ``i``); ``0`` disables it.

    Returns
    -------
    DerivativeReport
        Quantities ``structure``, ``gradient``, ``jacobian`` (when ``m > 0``)
        and ``hessian``.  The Hessian is compared with central differences of
        ``obj_factor * gradient(x) + jacobian(x).T @ lam``, i.e. of the
        gradient of ``L = obj_factor * f + lam . g``, as a full symmetric
        ``(n, n)`` matrix; the structure is checked to be lower triangular.
    """
    x = np.array(ev.x0 if x is None else x, dtype=float)
    if x.shape != (ev.n,):
        raise ValueError(f"x has shape {x.shape}, the evaluator has n={ev.n}")
    lam, obj_factor = _lagrangian_weights(ev.m, lam, obj_factor, seed)
    rep = DerivativeReport(f"derivative check (n={ev.n}, m={ev.m})", rtol=rtol, atol=atol, h=h)
    rep.checks["structure"] = QuantityCheck("structure", None, notes=_structure_notes(ev))
    fd_args = (x, h, rtol, atol, fd_noise)
    rep.checks["gradient"] = _fd_check("gradient", ev.objective, lambda _: ev.gradient(x),
                                       *fd_args, "objective")
    if ev.m:
        rep.checks["jacobian"] = _fd_check("jacobian", ev.constraints,
                                           lambda _: ev.jacobian_dense(x), *fd_args,
                                           "constraints", _transpose)
    if hessian:
        def grad_lagrangian(z):
            g = obj_factor * np.asarray(ev.gradient(z), dtype=float)
            if ev.m:
                g = g + ev.jacobian_dense(z).T @ lam
            return g

        rep.checks["hessian"] = _fd_check(
            "hessian", grad_lagrangian, lambda _: ev.hessian_dense(x, lam, obj_factor), *fd_args,
            "Lagrangian gradient", lambda fd, nz: (0.5 * (fd + fd.T), np.maximum(nz, nz.T)))
    return rep


def check_gradient(fun: Callable, grad: Callable, x, h=1e-6, rtol=1e-6, atol=1e-8,
                   name="gradient", fd_noise=10.0) -> DerivativeReport:
    """Compare ``grad(x)`` with central differences of a scalar ``fun(x)``.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> float``.
    grad : callable
        ``grad(x) -> (n,)`` array.
    x : array_like
        The point.
    h, rtol, atol, fd_noise : float
        Step, tolerances and round-off allowance as in :func:`check_derivatives`.
    name : str
        Name of the quantity in the report.

    Returns
    -------
    DerivativeReport
        With one quantity, ``name``.
    """
    x = np.array(x, dtype=float).ravel()
    qc = _fd_check(name, lambda z: float(fun(z)),
                   lambda _: np.asarray(grad(x), dtype=float).ravel(),
                   x, h, rtol, atol, fd_noise, "fun")
    return DerivativeReport(f"gradient check (n={x.size})", {name: qc}, rtol, atol, h)


def check_jacobian(fun: Callable, jac: Callable, x, h=1e-6, rtol=1e-6, atol=1e-8,
                   name="jacobian", fd_noise=10.0) -> DerivativeReport:
    """Compare ``jac(x)`` with central differences of a vector ``fun(x)``.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (m,)`` array.
    jac : callable
        ``jac(x) -> (m, n)``, dense or anything with ``toarray()`` (scipy
        sparse).
    x : array_like
        The point.
    h, rtol, atol, fd_noise : float
        Step, tolerances and round-off allowance as in :func:`check_derivatives`.
    name : str
        Name of the quantity in the report.

    Returns
    -------
    DerivativeReport
        With one quantity, ``name``.
    """
    x = np.array(x, dtype=float).ravel()
    qc = _fd_check(name, lambda z: np.atleast_1d(np.asarray(fun(z), dtype=float)),
                   lambda shape: _dense(jac(x), shape), x, h, rtol, atol, fd_noise, "fun",
                   _transpose)
    return DerivativeReport(f"Jacobian check ({qc.shape[0]}x{x.size})", {name: qc},
                            rtol, atol, h)


def _match(items_a: Sequence, items_b: Sequence, what: str, key=None):
    """``p`` with ``key(items_b[p[k]]) == key(items_a[k])``, or an error message.

    ``key=None`` matches by object identity.
    """
    key = id if key is None else key
    if len(items_a) != len(items_b):
        return None, f"{what}: {len(items_a)} vs {len(items_b)}"
    where = {key(o): k for k, o in enumerate(items_b)}
    if len(where) != len(items_b):
        return None, f"{what} of evaluator b do not have distinct keys"
    p = np.empty(len(items_a), dtype=np.int64)
    for k, o in enumerate(items_a):
        j = where.get(key(o))
        if j is None:
            name = getattr(o, "name", repr(o))
            return None, f"{what}: '{name}' of evaluator a is missing from evaluator b"
        p[k] = j
    return p, None


def column_permutation(ev_a, ev_b, key=None):
    """Column map between two evaluators of one problem.

    Parameters
    ----------
    ev_a, ev_b : NLPEvaluator
        Evaluators with ``variables`` lists.  Without ``variables`` on either
        one, the orders are assumed equal.
    key : callable, optional
        Maps a variable to a hashable key used for matching; default: object
        identity (the same Pyomo model).  Use e.g. ``lambda v: v.name`` to
        compare two copies of a model.

    Returns
    -------
    numpy.ndarray
        ``p`` such that column ``k`` of *a* is column ``p[k]`` of *b*.

    Raises
    ------
    ValueError
        If the variables do not match one to one.
    """
    va, vb = getattr(ev_a, "variables", None), getattr(ev_b, "variables", None)
    if va is None or vb is None:
        if ev_a.n != ev_b.n:
            raise ValueError(f"n differs: {ev_a.n} vs {ev_b.n}")
        return np.arange(ev_a.n)
    p, err = _match(va, vb, "variables", key)
    if err:
        raise ValueError(err)
    return p


def row_permutation(ev_a, ev_b, key=None):
    """Row map between two evaluators of one problem.

    Rows are matched through ``constraint_rows`` with ``key`` (default:
    object identity); see :func:`column_permutation`.
    """
    ra, rb = getattr(ev_a, "constraint_rows", None), getattr(ev_b, "constraint_rows", None)
    if ra is None or rb is None or (ev_a.m and any(r is None for r in ra)):
        if ev_a.m != ev_b.m:
            raise ValueError(f"m differs: {ev_a.m} vs {ev_b.m}")
        return np.arange(ev_a.m)
    p, err = _match(ra, rb, "constraint rows", key)
    if err:
        raise ValueError(err)
    return p


def _slack(g, lb, ub):
    """Row values measured from their bounds: ``g - lb``, else ``g - ub``, else ``g``."""
    return np.where(np.isfinite(lb), g - np.where(np.isfinite(lb), lb, 0.0),
                    np.where(np.isfinite(ub), g - np.where(np.isfinite(ub), ub, 0.0), g))


def check_consistency(ev_a, ev_b, x=None, lam=None, obj_factor=None, rtol=1e-9,
                      atol=1e-11, seed=0, var_key=None, row_key=None) -> DerivativeReport:
    """Check that two evaluators of the same problem agree.

    Columns are matched through ``variables`` and rows through
    ``constraint_rows`` (object identity unless keys are given), so the
    evaluators may order them differently.  A row may be shifted by a constant together with its bounds
    (``x + y >= 1`` as ``x + y`` in ``[1, inf)`` or as ``x + y - 1`` in
    ``[0, inf)``): rows are compared as distances from their finite bound,
    which is invariant under such shifts but not under a change of sign.

    Parameters
    ----------
    ev_a, ev_b : NLPEvaluator
        The evaluators.
    x : array_like, optional
        Point in the column order of ``ev_a`` (default ``ev_a.x0``).
    lam : array_like, optional
        Multipliers in the row order of ``ev_a`` (default uniform random in
        ``[-1, 1]``).
    obj_factor : float, optional
        Objective weight of the Lagrangian (default uniform random in
        ``[0.5, 1.5]``).
    rtol, atol : float
        Tolerances; the default is tight because both sides are exact.
    seed : int
        Seed for the random ``lam`` and ``obj_factor``.
    var_key, row_key : callable, optional
        Keys matching variables and constraint rows of the two evaluators
        (see :func:`column_permutation`); needed when they come from two
        different model objects.

    Returns
    -------
    DerivativeReport
        Quantities ``mapping``, ``x0``, ``x_bounds``, ``g_bounds``,
        ``objective``, ``gradient``, ``constraints``, ``jacobian``,
        ``hessian`` with ``ev_a`` as *value* and ``ev_b`` (permuted) as
        *reference*.
    """
    labels = ("a", "b")
    rep = DerivativeReport(f"consistency check (n={ev_a.n}, m={ev_a.m})", rtol=rtol, atol=atol)
    mp = QuantityCheck("mapping", None, labels=labels)
    rep.checks["mapping"] = mp
    try:
        pc = column_permutation(ev_a, ev_b, var_key)
        pr = row_permutation(ev_a, ev_b, row_key)
    except ValueError as err:
        mp.notes.append(str(err))
        return rep

    x = np.array(ev_a.x0 if x is None else x, dtype=float)
    xb = np.empty_like(x)
    xb[pc] = x
    lam, obj_factor = _lagrangian_weights(ev_a.m, lam, obj_factor, seed)
    lam_b = np.empty_like(lam)
    lam_b[pr] = lam

    def add(name, va, vb):
        rep.checks[name] = _compare(name, va, vb, rtol, atol, labels)

    add("x0", ev_a.x0, np.asarray(ev_b.x0)[pc])
    add("x_bounds", np.stack([ev_a.x_lb, ev_a.x_ub], 1),
        np.stack([np.asarray(ev_b.x_lb)[pc], np.asarray(ev_b.x_ub)[pc]], 1))
    lba, uba = np.asarray(ev_a.g_lb, float), np.asarray(ev_a.g_ub, float)
    lbb, ubb = np.asarray(ev_b.g_lb, float)[pr], np.asarray(ev_b.g_ub, float)[pr]
    gb = QuantityCheck("g_bounds", (ev_a.m,), labels=labels)
    pattern_a = np.stack([np.isfinite(lba), np.isfinite(uba)], 1)
    pattern_b = np.stack([np.isfinite(lbb), np.isfinite(ubb)], 1)
    bad_rows = np.flatnonzero((pattern_a != pattern_b).any(axis=1))
    for i in bad_rows[:MAX_OFFENDERS].tolist():
        name = getattr(getattr(ev_a, "constraint_rows", [None] * ev_a.m)[i], "name", i)
        gb.notes.append(f"row {i} ({name}): bounds [{lba[i]}, {uba[i]}] vs "
                        f"[{lbb[i]}, {ubb[i]}] are of different kinds")
    gb.n_bad = int(bad_rows.size)
    width_a = np.where(pattern_a.all(1), uba - np.where(pattern_a.all(1), lba, 0), 0.0)
    width_b = np.where(pattern_b.all(1), ubb - np.where(pattern_b.all(1), lbb, 0), 0.0)
    wc = _compare("g_bounds", width_a, width_b, rtol, atol, labels)
    wc.notes = gb.notes + wc.notes
    wc.n_bad += gb.n_bad
    rep.checks["g_bounds"] = wc

    add("objective", ev_a.objective(x), ev_b.objective(xb))
    add("gradient", ev_a.gradient(x), np.asarray(ev_b.gradient(xb))[pc])
    if ev_a.m:
        ga = np.asarray(ev_a.constraints(x), float)
        gbv = np.asarray(ev_b.constraints(xb), float)[pr]
        add("constraints", _slack(ga, lba, uba), _slack(gbv, lbb, ubb))
        add("jacobian", ev_a.jacobian_dense(x), ev_b.jacobian_dense(xb)[np.ix_(pr, pc)])
    add("hessian", ev_a.hessian_dense(x, lam, obj_factor),
        ev_b.hessian_dense(xb, lam_b, obj_factor)[np.ix_(pc, pc)])
    return rep
