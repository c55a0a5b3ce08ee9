r"""The initial condition :math:`x_0 = l(u)` as constraints ``x0_eq[s]`` of a block.

Without pre-equilibration ``l`` is rendered on the block's parameter
variables.  With one (:class:`~pyomo_odeest.problem._components.Preequilibration`)
the steady state is a vector of algebraic variables ``x_ss[s]`` with the
square steady-state system of
:class:`~pyomo_odeest.problem._steady_state.SteadyState` as constraints
``steady_state_eq[r]`` (:math:`G(x_{ss}, u) = 0`: the rhs rows and the
conservation laws), and ``l`` is rendered with :math:`x_{ss}` in place of the
steady-state functions; the solver's derivatives are those of :math:`G`, exact.
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import sympy

from ..problem._steady_state import SteadyStateError
from ..symbolic._convert import sympy_to_pyomo

__all__ = ["add_initial_condition", "initialize_steady_state", "steady_state_mismatch"]


def add_initial_condition(b, problem, usub):
    """``b.x0_eq[s]``: ``b.x[0, s] == l_s(u)`` on block ``b``, whose parameters are ``usub``
    (symbol -> Pyomo variable); adds ``b.x_ss`` and ``b.steady_state_eq`` for a
    pre-equilibrated problem."""
    ss = getattr(problem, "steady_state", None)
    l_sym = problem.l_sym
    sub, S = dict(usub), list(problem.states)
    if ss is not None:
        b.x_ss = pyo.Var(b.S, initialize=0.0)
        sub.update({x: b.x_ss[s] for x, s in zip(ss.x_sym, S)})
        rows = [sympy_to_pyomo(g, sub) for g in ss.G_sym]
        b.steady_state_eq = pyo.Constraint(range(len(rows)), rule=lambda b, r: rows[r] == 0)
        apps = ss.applications(l_sym)
        l_sym = [sympy.sympify(e).xreplace({a: ss.x_sym[i] for a, i in apps.items()})
                 for e in l_sym]
        u = [usub[s].value for s in problem.u_sym]
        initialize_steady_state(b, problem, np.where([v is None for v in u], problem.u0,
                                                     np.array(u, dtype=object)).astype(float))
    l_py = [sympy_to_pyomo(e, sub) if e.free_symbols else float(e) for e in l_sym]
    b.x0_eq = pyo.Constraint(b.S, rule=lambda b, s: b.x[0, s] == l_py[S.index(s)])


def initialize_steady_state(b, problem, u):
    """Start values of ``b.x_ss`` (if any): the steady state at ``u`` (full parameter
    vector), or at the problem's start values where ``u`` has none."""
    ss = getattr(problem, "steady_state", None)
    if ss is None or not hasattr(b, "x_ss"):
        return
    idx = [list(problem.u_sym).index(s) for s in ss.u_sym]
    try:
        x = ss.state(np.asarray(u, dtype=float)[idx])
    except SteadyStateError:
        x = ss.state(problem.u0[idx])
    for s, v in zip(problem.states, x):
        b.x_ss[s].set_value(float(v), skip_validation=True)


def steady_state_mismatch(b, u, rtol=1e-6):
    """Why the solved ``b.x_ss`` is not the pre-equilibration's steady state at ``u``
    (full parameter vector): ``G = 0`` also holds at unstable or other roots, so the
    solution is compared with the state the Newton/simulation solve of the problem
    accepts (stable, reached from the pre-equilibration's start).  ``[]`` if it is
    (or without pre-equilibration)."""
    problem = b.problem
    ss = getattr(problem, "steady_state", None)
    if ss is None or not hasattr(b, "x_ss"):
        return []
    idx = [list(problem.u_sym).index(s) for s in ss.u_sym]
    got = np.array([pyo.value(b.x_ss[s]) for s in problem.states])
    try:
        want = ss.state(np.asarray(u, dtype=float)[idx])
    except SteadyStateError as err:
        return [f"{problem.name}: the block's steady state {got} is not confirmed: {err}"]
    if np.all(np.abs(got - want) <= rtol * (1 + np.abs(want))):
        return []
    return [(f"{problem.name}: the block's steady state {got} is a root of the steady-state "
             f"equations but not the stable state the pre-equilibration reaches ({want})")]
