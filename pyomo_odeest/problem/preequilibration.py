"""What a :class:`~pyomo_odeest.problem.components.Preequilibration` adds to
:class:`~pyomo_odeest.problem.declaration.EstimationProblem`: the initial state
:math:`l(u)` written with the steady state :math:`x_{ss}(u)` of
:mod:`.steady_state` (states not reset), and the problem's ``steady_state``."""
from __future__ import annotations

from typing import Mapping

import sympy

from .components import Preequilibration
from .steady_state import SteadyState
from .validation import ProblemError

__all__ = ["Preequilibrated"]


def _check(pre, states, where):
    if not isinstance(pre, Preequilibration):
        raise ProblemError(f"{where}preequilibration must be a Preequilibration, got "
                           f"{type(pre).__name__}")
    bad = [s for s in pre.reset if s not in states]
    if bad:
        raise ProblemError(f"{where}preequilibration reset names {bad}, which are not states "
                           f"{states}")


class Preequilibrated:
    """Mixin of :class:`~pyomo_odeest.problem.declaration.EstimationProblem`: pre-equilibration."""

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
            base = initial if isinstance(initial, Mapping) else dict(zip(self.states, initial))
            x0 = self._initial({**base, **pre.initial}, us, symbol_of)
        ov = self._overrides(pre, self.parameter_names, us, symbol_of, "")
        f = tuple(sympy.sympify(e).xreplace(ov) for e in f)
        x0 = tuple(sympy.sympify(e).xreplace(ov) for e in x0)
        #: the steady state x_ss(u) of the pre-equilibration (None without one)
        self.steady_state = SteadyState(f, x0, self.x_sym, self.u_sym, self.u0, self.name)
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
        f = [sympy.sympify(v).xreplace(ov).subs(subs) for v in f]
        x0 = {s: sympy.sympify(v).xreplace(ov).subs(subs) for s, v in x0.items()}
        return Preequilibration(initial=x0, rhs=(lambda fe: (lambda x, u, t: list(fe)))(f),
                                reset=pre.reset)
