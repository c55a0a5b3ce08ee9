r"""Inputs given as data: known (or piecewise-constant decision) functions of time.

See docs/experiments.md, section "Inputs given as data" (the kinds of input, the
switching times in the grid, the observed orders).  A model declares them as
``inputs={"F": PiecewiseConstant([0, 2, 5], [0.0, 0.3, 0.1])}`` on the problem (or
per :class:`~pyomo_odeest.problem._declaration.Experiment`); inside ``rhs`` (and
``observe``) ``u.F`` stands for :math:`F(t)`.  Every input is smooth between its
*breakpoints*, which the grid contains with their twins
(:func:`~pyomo_odeest.discretization._grid.make_grid`).  Symbolically an input is a
sympy function of :math:`t` with a numeric implementation (``_imp_``) used by
``lambdify``, and its time derivatives for :math:`\dot f` of the Enright schemes; a
control is :math:`\sum_k c_k\,\mathbb 1_{[t_k, t_{k+1})}(t)` with parameters
:math:`c_k`, so its derivatives are those of ordinary parameters.
"""
from __future__ import annotations

import bisect
import itertools

import numpy as np
import sympy

__all__ = ["Input", "PiecewiseConstant", "PiecewiseLinear", "Spline", "inputs_from_frame",
           "input_applications", "evaluate_inputs", "NotPolynomial", "input_coefficients",
           "input_pieces"]

_counter = itertools.count()


def _implemented(label, fn, derivative=None, spec=None):
    """A sympy function class of one argument evaluated numerically by ``fn``;
    ``derivative`` (a class or None = 0) is its derivative.  ``spec``, ``(input,
    key)``: its applications pickle as the input and the key (the class is built
    again from the input, :meth:`Input._function`), so that a problem pickles with
    the standard ``pickle``; without it they pickle by value only (cloudpickle)."""
    def fdiff(self, argindex=1):
        return derivative(self.args[0]) if derivative is not None else sympy.Integer(0)

    name = f"{label}_{next(_counter)}"
    # no "nargs" in the class dict: sympy makes it a read-only property, which a copy of
    # the class by value (cloudpickle: a problem or result sent to another process)
    # cannot set back
    ns = {"fdiff": fdiff, "_imp_": staticmethod(fn)}
    if spec is not None:
        ns.update(_odeest_spec=spec, __reduce_ex__=_reduce_application)
    return type(name, (sympy.Function,), ns)


def _reduce_application(self, protocol):
    """Pickle an application ``F(t)`` of an input's function as its input and key."""
    inp, key = self._odeest_spec
    return _application, (inp, key, self.args)


def _application(inp, key, args):
    """``F(*args)`` for the function ``key`` of input ``inp`` (unpickling)."""
    return inp._function(key)(*args)


def _check_knots(times, values, what, min_points=1):
    t = np.asarray(times, dtype=float).reshape(-1)
    if t.size < min_points:
        raise ValueError(f"{what}: at least {min_points} time(s) required")
    if not np.all(np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError(f"{what}: times must be finite and strictly increasing")
    v = list(values)
    if len(v) != t.size:
        raise ValueError(f"{what}: {len(v)} values for {t.size} times")
    if not np.all(np.isfinite([float(a) for a in v if not isinstance(a, str)])):
        raise ValueError(f"{what}: values must be finite")
    return t, v


class Input:
    """Base class: a function of time with breakpoints (see the module docstring)."""

    #: times where the input or one of its derivatives jumps
    breakpoints: np.ndarray = np.zeros(0)

    @classmethod
    def from_series(cls, series):
        """From a pandas Series indexed by time (by the start times of the pieces for
        :class:`PiecewiseConstant`)."""
        return cls(series.index.to_numpy(dtype=float), series.to_numpy(dtype=float))

    def parameter_names(self):
        """Names of parameters the input depends on (controls)."""
        return []

    def expression(self, t_sym, symbol_of_parameter):
        """The sympy expression of the input at time ``t_sym``."""
        raise NotImplementedError

    def _function(self, key):
        """The sympy function class ``key`` of this input, built once
        (:meth:`_make_function`); a pickled input builds it again."""
        made = self.__dict__.setdefault("_functions", {})
        if key not in made:
            made[key] = self._make_function(key)
        return made[key]

    def _make_function(self, key):
        raise NotImplementedError

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_functions", None)          # classes made at run time
        return state

    def __call__(self, t):
        """Numeric values at times ``t`` (numeric inputs only)."""
        raise NotImplementedError


class PiecewiseConstant(Input):
    """:math:`F(t) = v_k` on :math:`[t_k, t_{k+1})`; values numbers or parameter names.

    Parameters
    ----------
    times : array_like
        Start times :math:`t_0 < t_1 < \\dots` of the pieces.
    values : sequence of float or str
        Value of each piece; a string names a parameter of the problem (a
        piecewise-constant control, estimated within that parameter's bounds).
    """

    def __init__(self, times, values):
        self.times, vals = _check_knots(times, values, "PiecewiseConstant")
        self.values = [v if isinstance(v, str) else float(v) for v in vals]
        self.breakpoints = self.times[1:].copy()

    def parameter_names(self):
        return [v for v in self.values if isinstance(v, str)]

    def _piece(self, t):
        """Index of the piece of each time (an int for one time: the schemes evaluate
        the input point by point, where numpy's per-call overhead dominated)."""
        if np.ndim(t) == 0:
            knots = self.__dict__.get("_knots") or self.__dict__.setdefault(
                "_knots", self.times.tolist())
            return min(max(bisect.bisect_right(knots, float(t)) - 1, 0), len(knots) - 1)
        return np.clip(np.searchsorted(self.times, t, side="right") - 1, 0, len(self.times) - 1)

    def __call__(self, t):
        if self.parameter_names():
            raise TypeError("a control (values naming parameters) has no fixed numeric value")
        return np.asarray(self.values, dtype=float)[self._piece(np.asarray(t, dtype=float))]

    def expression(self, t_sym, symbol_of_parameter):
        if not self.parameter_names():
            return self._function(("pwc",))(t_sym)
        out = sympy.Integer(0)
        for k, v in enumerate(self.values):
            c = symbol_of_parameter(v) if isinstance(v, str) else sympy.Float(v)
            out = out + c * self._function(("ind", k))(t_sym)
        return out

    def _make_function(self, key):
        if key[0] == "pwc":                    # the input's values
            vals = np.asarray(self.values, dtype=float)
            return _implemented("pwc", lambda t: vals[self._piece(np.asarray(t, dtype=float))],
                                spec=(self, key))
        k = key[1]                             # the indicator of piece k
        return _implemented(f"ind{k}", lambda t: np.asarray(
            self._piece(np.asarray(t, dtype=float)) == k, dtype=float), spec=(self, key))


class PiecewiseLinear(Input):
    """Linear interpolation through ``(times, values)``, constant outside."""

    def __init__(self, times, values):
        self.times, vals = _check_knots(times, values, "PiecewiseLinear", 2)
        self.values = np.asarray(vals, dtype=float)
        self.breakpoints = self.times.copy()
        self._slopes = np.concatenate([[0.0], np.diff(self.values) / np.diff(self.times), [0.0]])

    def __call__(self, t):
        return np.interp(np.asarray(t, dtype=float), self.times, self.values)

    def slope(self, t):
        """Right derivative (the slope of the piece starting at or before t)."""
        return self._slopes[np.searchsorted(self.times, np.asarray(t, dtype=float), side="right")]

    def expression(self, t_sym, symbol_of_parameter):
        return self._function(("pwl",))(t_sym)

    def _make_function(self, key):
        if key[0] == "pwl_d":
            return _implemented("pwl_d", self.slope, spec=(self, key))
        return _implemented("pwl", self.__call__, self._function(("pwl_d",)), spec=(self, key))


class Spline(Input):
    """Cubic spline (scipy ``CubicSpline``, not-a-knot) through ``(times, values)``;
    the problem's horizon must lie within ``[times[0], times[-1]]``."""

    def __init__(self, times, values):
        from scipy.interpolate import CubicSpline
        self.times, vals = _check_knots(times, values, "Spline", 4)
        self.values = np.asarray(vals, dtype=float)
        self.spline = CubicSpline(self.times, self.values)
        self.breakpoints = self.times[1:-1].copy()

    def __call__(self, t):
        return self.spline(np.asarray(t, dtype=float))

    def expression(self, t_sym, symbol_of_parameter):
        return self._function(("spl", 0))(t_sym)

    def _make_function(self, key):
        order = key[1]                         # the derivative of that order (a cubic: 3 last)
        return _implemented(f"spl_d{order}" if order else "spl",
                            lambda t: self.spline(np.asarray(t, dtype=float), order),
                            self._function(("spl", order + 1)) if order < 3 else None,
                            spec=(self, key))


_KINDS = {"constant": PiecewiseConstant, "linear": PiecewiseLinear, "spline": Spline}


def inputs_from_frame(frame, kind="constant"):
    """``{column: Input}`` from a DataFrame indexed by time (``kind``:
    ``'constant'``, ``'linear'`` or ``'spline'``, or a mapping column -> kind)."""
    out = {}
    for col in frame.columns:
        k = kind.get(col, "constant") if isinstance(kind, dict) else kind
        if k not in _KINDS:
            raise ValueError(f"input kind {k!r} of column {col!r}; use one of {list(_KINDS)}")
        s = frame[col].dropna()
        out[str(col)] = _KINDS[k].from_series(s)
    return out


def input_applications(exprs):
    """The input function applications (``F(t)``, ``F'(t)``, indicators) in ``exprs``,
    in a deterministic order."""
    apps = set()
    for e in exprs:
        apps |= {a for a in sympy.sympify(e).atoms(sympy.Function) if hasattr(type(a), "_imp_")}
    return sorted(apps, key=sympy.default_sort_key)


def evaluate_inputs(expr):
    """``expr`` with every input application at a numeric time replaced by its value."""
    apps = [a for a in input_applications([expr]) if a.args[0].is_number]
    if not apps:
        return expr
    return expr.xreplace({a: sympy.Float(float(type(a)._imp_(float(a.args[0]))), 17)
                          for a in apps})


class NotPolynomial(ValueError):
    """An input is not a polynomial of degree <= 3 between its breakpoints."""


_FIT = 0.5 - 0.5 * np.cos(np.pi * (np.arange(4) + 0.5) / 4)      # Chebyshev nodes in (0, 1)
_CHECK = np.array([0.1, 0.45, 0.95])


def input_coefficients(app, lo, hi):
    r"""Coefficients :math:`c_m` of :math:`F(t) = \sum_{m \le 3} c_m s^m`,
    :math:`s = (t - lo)/(hi - lo)`, of the input application ``app`` on the
    piece ``[lo, hi]`` between breakpoints: exact for the package's inputs
    (piecewise constant, linear, cubic spline and their derivatives), checked at
    three more points (:class:`NotPolynomial` otherwise).  A piece on which the
    input is constant gets exactly that constant.  The compiled engines evaluate
    inputs by these polynomials (CVODES, the discrete model's numba kernels)."""
    imp = type(app)._imp_
    w = hi - lo
    vals = np.array([float(imp(lo + w * s)) for s in _FIT])
    scale = max(1.0, float(np.max(np.abs(vals))))
    if np.all(vals == vals[0]) and float(imp(lo + 0.5 * w)) == vals[0]:
        c = np.array([vals[0], 0.0, 0.0, 0.0])
    else:
        c = np.linalg.solve(np.vander(_FIT, 4, increasing=True), vals)
    chk = np.array([float(imp(lo + w * s)) for s in _CHECK])
    err = np.abs(np.vander(_CHECK, 4, increasing=True) @ c - chk)
    if not np.all(np.isfinite(c)) or np.any(err > 1e-9 * scale):
        raise NotPolynomial(f"input {type(app).__name__} is not a polynomial of degree <= 3 "
                            f"between its breakpoints on [{lo:g}, {hi:g}]")
    return c


def input_pieces(problem):
    """``(inner, lo, width)``: the switching times strictly inside the problem's horizon
    and the start and width of each piece between them (piece ``i`` of a time ``t`` is
    ``searchsorted(inner, t, side='right')``, right-continuous as the inputs)."""
    t0, T = float(problem.t0), float(problem.T)
    sw = np.asarray(problem.switch_times, dtype=float)
    inner = np.unique(sw[(sw > t0) & (sw < T)])
    edges = np.concatenate([[t0], inner, [T]])
    return inner, edges[:-1], np.diff(edges)
