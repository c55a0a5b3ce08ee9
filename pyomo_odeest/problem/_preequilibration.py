"""What a :class:`~pyomo_odeest.problem._components.Preequilibration` adds to
:class:`~pyomo_odeest.problem._declaration.EstimationProblem`: the initial state
:math:`l(u)` written with the steady state :math:`x_{ss}(u)` of
:mod:`.steady_state` (states not reset), and the problem's ``steady_state``."""
from __future__ import annotations

import numpy as np
import sympy

from ._components import Preequilibration
from ._steady_state import SteadyState, second_entries
from ._validation import ProblemError
from ..symbolic import lambdify

__all__ = ["Preequilibrated", "InitialHessian"]


def _check(pre, states, where):
    if not isinstance(pre, Preequilibration):
        raise ProblemError(f"{where}preequilibration must be a Preequilibration, got "
                           f"{type(pre).__name__}")
    bad = [s for s in pre.reset if s not in states]
    if bad:
        raise ProblemError(f"{where}preequilibration reset names {bad}, which are not states "
                           f"{states}")


class InitialHessian:
    r"""``H(u)``: the second derivatives :math:`\partial^2 l_i/\partial u_j\partial u_k`
    ``(n, m, m)`` of the initial state.  Explicit entries of :math:`l` are
    differentiated symbolically; the steady-state entries take
    :meth:`SteadyState.second` (numeric, by the implicit function theorem), which
    avoids the :math:`n m^2` symbolic derivatives of the steady-state functions
    (tens of seconds for 15 states and 28 parameters).  ``dense(u)`` is ``H(u)``."""

    def __init__(self, problem):
        self.n, self.m = len(problem.states), len(problem.u_sym)
        ss = problem.steady_state
        apps = ss.applications(problem.l_sym) if ss is not None else {}
        us = tuple(problem.u_sym)
        self._ss, self._rows = ss, []
        if ss is not None:
            self._pos = np.array([us.index(s) for s in ss.u_sym], dtype=np.intp)
            self._rows = [(k, i) for k, e in enumerate(problem.l_sym) for a, i in apps.items()
                          if e == a]
        self._entries = entries = second_entries(problem.l_sym, us,
                                                 skip={k for k, _ in self._rows})
        self._fn = lambdify((us,), [d for *_, d in entries], "numpy") if entries else None

    def __call__(self, u):
        u = np.asarray(u, dtype=float).reshape(-1)
        H = np.zeros((self.n, self.m, self.m))
        if self._fn is not None:
            for (k, a, b, _), v in zip(self._entries, self._fn(u)):
                H[k, a, b] = H[k, b, a] = float(v)
        if self._rows:
            T = self._ss.second(u[self._pos])
            ix = np.ix_(self._pos, self._pos)
            for k, i in self._rows:
                H[k][ix] = T[i]
        return H

    dense = __call__


class Preequilibrated:
    """Mixin of :class:`~pyomo_odeest.problem._declaration.EstimationProblem`: pre-equilibration."""

    def initial_hessian(self):
        """:class:`InitialHessian` of this (single-experiment) problem's :math:`l(u)`."""
        self._single("initial_hessian")
        return InitialHessian(self)

    def _overrides(self, pre, names, us, symbol_of, where):
        """``{symbol: value}`` of the pre-equilibration's parameter values."""
        out = {}
        for k, v in (pre.parameters or {}).items():
            if k not in names:
                raise ProblemError(f"{where}preequilibration parameters names {k!r}, not a "
                                   f"parameter (known: {list(names)})")
            if isinstance(v, str):
                if v not in names:
                    raise ProblemError(f"{where}preequilibration parameters[{k!r}] = {v!r} "
                                       f"names no parameter")
                out[sympy.Symbol(k, real=True)] = sympy.Symbol(v, real=True)
            else:
                out[sympy.Symbol(k, real=True)] = self._to_sym(
                    v(us) if callable(v) else v, f"preequilibration parameters[{k}]", symbol_of)
        return out

    def _preequilibrate(self, pre, initial, xs, us, t, symbol_of):
        """Replace ``l_sym`` by the pre-equilibrated initial state (single experiment)."""
        _check(pre, self.states, "")
        f = self.f_sym if pre.rhs is None else self._with_inputs(self._convert_vector(
            pre.rhs, xs, us, t, self.states, "preequilibration rhs", symbol_of))
        x0 = self.l_sym
        if pre.initial is not None:
            x0 = self._initial({**self._initial_mapping(initial), **pre.initial}, us, symbol_of)
        ov = self._overrides(pre, self.parameter_names, us, symbol_of, "")
        f = tuple(sympy.sympify(e).xreplace(ov) for e in f)
        x0 = tuple(sympy.sympify(e).xreplace(ov) for e in x0)
        #: the steady state x_ss(u) of the pre-equilibration (None without one), one per
        #: pre-equilibration of equal dynamics and start (the experiments' problems share it)
        key = ("steady_state", f, x0, self.x_sym, self.u_sym, tuple(self.u0))
        self.steady_state = self._numeric(key, lambda: SteadyState(
            f, x0, self.x_sym, self.u_sym, self.u0, self.name))
        self.preequilibration = pre
        xss = self.steady_state.expressions()
        self.l_sym = tuple(l if s in pre.reset else v
                           for s, l, v in zip(self.states, self.l_sym, xss))

    def _experiment_preequilibration(self, e, init, convert, subs, names, xs, us, t, symbol_of):
        """Experiment ``e``'s pre-equilibration stated in its own parameter symbols
        (``subs``: local parameter -> experiment copy) for its single-experiment
        problem; ``convert(mapping)`` states initial values as sympy."""
        pre = e.preequilibration
        where = f"experiment '{e.name}': "
        _check(pre, self.states, where)
        f = self.f_sym if pre.rhs is None else self._convert_vector(
            pre.rhs, xs, us, t, self.states, "preequilibration rhs", symbol_of)
        x0 = convert({**init, **(pre.initial or {})})
        ov = self._overrides(pre, names, us, symbol_of, where)
        f = [sympy.sympify(v).xreplace(ov).xreplace(subs) for v in f]
        x0 = {s: sympy.sympify(v).xreplace(ov).xreplace(subs) for s, v in x0.items()}
        return Preequilibration(initial=x0, rhs=_Stated(f), reset=pre.reset)


class _Stated:
    """``rhs(x, u, t)`` of expressions already stated in the problem's symbols (an
    experiment's pre-equilibration dynamics; a class, so that the problem pickles)."""

    def __init__(self, f):
        self.f = list(f)

    def __call__(self, x, u, t):
        return list(self.f)
