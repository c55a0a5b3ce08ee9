r"""The discrete problem [GM-grad, eq. (2)] as a Pyomo Block.

:func:`build_block` renders an :class:`~pyomo_odeest.problem.declaration.EstimationProblem`,
a scheme (:mod:`pyomo_odeest.discretization.schemes`) and a grid (:mod:`pyomo_odeest.discretization.grid`)
as explicit algebraic constraints:

================================  ===============================================
component                         meaning
================================  ===============================================
``b.t[i]``, ``b.h[i]``             grid times t_i (i = 0..k) and steps h_i
``b.x[i, s]``                      state s at grid point i
``b.u[p]``                         parameter p (bounds, start, fixed flag)
``b.<stage>[i, s]``                stage values of step i (``y``: predictor
                                   y_{i+1}; ``yc``: corrector of the
                                   semi-implicit scheme)
``b.x0_eq[s]``                     x_0 = l(u)
``b.ode_<stage>_<s>_q<Q>[i]``      the stage equation of step i for state s,
                                   for the steps whose order is Q_i = Q
``b.cf_<stage>_q<Q>[i, j]``        coefficient of the j-th f term
``b.cd_<stage>_q<Q>[i, j]``        coefficient of the j-th ḟ term (Enright)
``b.misfit``                       J_k = Σ_j φ_j (an Expression)
``b.penalty``                      the problem's penalty R(u) (0 if none)
``b.objective``                    minimize ``b.misfit + b.penalty`` + user terms
``b.input_values[j, i]``           value of the j-th input term at grid point i
``b.path_<name>[i]``               path constraint c(x_i, u, t_i) <= 0
``b.param_<name>``                 parameter constraint r(u) <= 0
================================  ===============================================

Each stage equation reads [GM-grad, eqs. (2), (4)–(6)]

.. math::

    v = x_i + h_i \sum_j c_j f(P_j, u, t_{P_j}) + h_i^2 \sum_j d_j \dot f(P_j, u, t_{P_j}),

with points P_j among past states, the new state x_{i+1} and earlier stages.
The constraint body is ``v - rhs`` so that Ipopt's multiplier of the x-stage
of step i is the adjoint p_{i+1} of [GM-grad], eq. (52) (see
:mod:`pyomo_odeest.approaches.simultaneous`).  Rows of one constraint component share one
rule in the step index, so the solver evaluates each component in one
vectorised call.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyomo.environ as pyo
import sympy

from ..discretization.grid import Grid, resolve_grid
from ..problem.misfit import misfit_sym
from ..problem.declaration import EstimationProblem, ProblemError
from ..problem.inputs import input_applications
from ..discretization.schemes import get_scheme
from ..symbolic.convert import sympy_to_pyomo

__all__ = ["build_block", "scheme_constraint", "add_objective_term", "set_parameter_vars",
           "add_parameter_constraints"]


def _groups(formulas):
    """Consecutive-or-not steps grouped by equation structure, keyed by Q."""
    groups = OrderedDict()
    for sf in formulas:
        groups.setdefault(sf.structure, []).append(sf)
    named = []
    used = set()
    for struct, sfs in groups.items():
        q = sfs[0].order_q
        tag = f"q{q}"
        n = 1
        while tag in used:
            n += 1
            tag = f"q{q}v{n}"
        used.add(tag)
        named.append((tag, sfs))
    return named


def build_block(problem: EstimationProblem, scheme="adams_pc", qmax=None, grid: Grid | None = None,
                max_step=None, steps_per_interval=None, block=None, fdot=None, parameters=None):
    """Render the discrete problem as a constructed Pyomo Block.

    Parameters
    ----------
    problem : EstimationProblem
    scheme : str or MultistepScheme
        ``'adams_pc'`` (default), ``'adams_moulton'``, ``'enright'``,
        ``'semi_implicit_enright'``.
    qmax : int
        Maximum corrector order Q_max (order policy Q_i = min(i+1, Q_max-1)).
    grid : Grid, optional
        Integration grid; by default built with :func:`make_grid` from the
        measurement times, ``max_step`` / ``steps_per_interval`` (default:
        ``steps_per_interval=10``).
    block : Block, optional
        A constructed (concrete) block to fill; a new ``Block(concrete=True)``
        otherwise.  Attach the returned block to your model (``m.est = b``)
        to add constraints and objective terms of your own.
    parameters : IndexedVar, optional
        Parameter variables shared with other blocks (indexed by
        ``problem.parameter_names``): ``b.u`` is then a Reference to them and
        keeps their bounds and values (one block per experiment of a
        problem with several experiments).

    Returns
    -------
    Block with the components listed in the module docstring and the
    attributes ``problem``, ``scheme``, ``grid``, ``formulas``.
    """
    if not isinstance(problem, EstimationProblem):
        raise TypeError("build_block needs an EstimationProblem")
    sch = get_scheme(scheme, qmax)
    grid = resolve_grid(problem, grid, max_step, steps_per_interval)
    t = np.asarray(grid.t, dtype=float)
    k = len(t) - 1
    formulas = sch.formulas(t, grid.restarts)

    b = block if block is not None else pyo.Block(concrete=True)
    b.problem = problem
    b.scheme = sch
    b.grid = grid
    b.formulas = formulas
    S = problem.states
    b.S = pyo.Set(initialize=S, ordered=True)
    b.P = pyo.Set(initialize=problem.parameter_names, ordered=True)
    b.K = pyo.RangeSet(0, k)
    b.steps = pyo.RangeSet(0, k - 1)
    b.t = pyo.Param(b.K, initialize={i: float(t[i]) for i in range(k + 1)})
    b.h = pyo.Param(b.steps, initialize={i: float(t[i + 1] - t[i]) for i in range(k)})
    b.x = pyo.Var(b.K, b.S, initialize=0.0)
    if parameters is not None:
        b.u = pyo.Reference(parameters[:])
    else:
        b.u = pyo.Var(b.P)
        set_parameter_vars(b.u, problem.parameters)

    stage_names = [st for st in sch.stage_names if st != "x"]
    for st in stage_names:
        if st in ("x", "u", "t", "h", "K", "S", "P"):
            raise AssertionError(f"stage name {st} clashes with a block component")
        b.add_component(st, pyo.Var(b.steps, b.S, initialize=0.0))

    usub = {sym: b.u[p] for sym, p in zip(problem.u_sym, problem.parameter_names)}
    f_sym = problem.f_sym
    fd_sym = problem.fdot_sym() if sch.needs_fdot else None
    # inputs: each application F(t) is a Param over the grid points (its value at
    # t_i; the twin point before a switch carries the left piece)
    c_sym = [ex for _, ex in problem.path_constraints]
    apps = input_applications(tuple(f_sym) + tuple(fd_sym or ()) + tuple(c_sym))
    in_syms = [sympy.Dummy(f"w{j}") for j in range(len(apps))]
    if apps:
        b.input_values = pyo.Param(range(len(apps)), b.K, initialize={
            (j, i): float(v) for j, a in enumerate(apps)
            for i, v in enumerate(np.broadcast_to(type(a)._imp_(t), t.shape))})
        rep = dict(zip(apps, in_syms))
        f_sym = tuple(e.xreplace(rep) for e in f_sym)
        fd_sym = None if fd_sym is None else tuple(e.xreplace(rep) for e in fd_sym)
        c_sym = [e.xreplace(rep) for e in c_sym]
    tsym = problem.t_sym
    xs = problem.x_sym

    # x0 = l(u)
    l_py = [sympy_to_pyomo(e, usub) if e.free_symbols else float(e) for e in problem.l_sym]
    b.x0_eq = pyo.Constraint(b.S, rule=lambda b, s: b.x[0, s] == l_py[S.index(s)])

    def point_objects(i, pref):
        """sympy symbol -> Pyomo object for the state and time of a point."""
        if pref.kind == "past":
            return grid_point_objects(i - pref.lag)
        if pref.kind == "new":
            return grid_point_objects(i + 1)
        comp = b.component(pref.stage)
        return grid_point_objects(i + 1, [comp[i, s] for s in S])

    def grid_point_objects(ip, xv=None):
        """... at grid point ``ip`` (states ``xv``, default x_ip)."""
        xv = [b.x[ip, s] for s in S] if xv is None else xv
        objs = dict(usub)
        objs.update(zip(xs, xv))
        objs[tsym] = b.t[ip]
        for j, w in enumerate(in_syms):
            objs[w] = b.input_values[j, ip]
        return objs

    b._scheme_index = {}
    for tag, sfs in _groups(formulas):
        steps = [sf.i for sf in sfs]
        step_set = pyo.Set(initialize=steps, ordered=True)
        b.add_component(f"steps_{tag}", step_set)
        proto = sfs[0]
        for st_i, stage in enumerate(proto.stages):
            nf, nd = len(stage.f_terms), len(stage.fdot_terms)
            cf = {(sf.i, j): float(sf.stages[st_i].f_terms[j][1]) for sf in sfs for j in range(nf)}
            cd = {(sf.i, j): float(sf.stages[st_i].fdot_terms[j][1]) for sf in sfs for j in range(nd)}
            cfc = pyo.Param(step_set, range(nf), initialize=cf) if nf else None
            cdc = pyo.Param(step_set, range(nd), initialize=cd) if nd else None
            if cfc is not None:
                b.add_component(f"cf_{stage.name}_{tag}", cfc)
            if cdc is not None:
                b.add_component(f"cd_{stage.name}_{tag}", cdc)
            f_points = [p for p, _ in stage.f_terms]
            d_points = [p for p, _ in stage.fdot_terms]
            target_comp = None if stage.name == "x" else b.component(stage.name)
            for si, s in enumerate(S):
                def rule(b, i, si=si, s=s, f_points=f_points, d_points=d_points,
                         cfc=cfc, cdc=cdc, target_comp=target_comp):
                    expr = 0
                    for j, pref in enumerate(f_points):
                        expr = expr + cfc[i, j] * sympy_to_pyomo(f_sym[si], point_objects(i, pref))
                    val = b.x[i, s] + b.h[i] * expr
                    if d_points:
                        dexpr = 0
                        for j, pref in enumerate(d_points):
                            dexpr = dexpr + cdc[i, j] * sympy_to_pyomo(fd_sym[si], point_objects(i, pref))
                        val = val + b.h[i] ** 2 * dexpr
                    target = b.x[i + 1, s] if target_comp is None else target_comp[i, s]
                    return target == val
                cname = f"ode_{stage.name}_{s}_{tag}"
                b.add_component(cname, pyo.Constraint(step_set, rule=rule))
                con = b.component(cname)
                for i in steps:
                    b._scheme_index[(stage.name, i, s)] = con[i]

    # objective: J_k = Σ_j φ_j(x_{J(j)}, u)
    terms = []
    for j, i in enumerate(grid.J):
        phi = misfit_sym(problem, j)
        objs = dict(usub)
        objs.update(zip(xs, [b.x[int(i), s] for s in S]))
        objs[tsym] = float(t[i])
        terms.append(sympy_to_pyomo(phi, objs) if phi.free_symbols else float(phi))
    b.misfit = pyo.Expression(expr=sum(terms))
    pen = problem.penalty_sym
    b.penalty = pyo.Expression(expr=sympy_to_pyomo(pen, usub) if pen.free_symbols else float(pen))
    b.extra_objective_terms = []
    b.objective = pyo.Objective(expr=b.misfit + b.penalty)

    # path constraints c(x_i, u, t_i) <= 0 at grid points or measurement times
    for (pc, _), ex in zip(problem.path_constraints, c_sym):
        pts = list(range(k + 1)) if pc.at == "grid" else sorted({int(i) for i in grid.J})

        def crule(b, i, ex=ex, name=pc.name):
            if ex.free_symbols:
                return sympy_to_pyomo(ex, grid_point_objects(i)) <= 0
            if float(ex) > 0:
                raise ProblemError(f"path constraint '{name}' is the constant {float(ex)} > 0")
            return pyo.Constraint.Skip
        b.add_component(f"path_{pc.name}", pyo.Constraint(pts, rule=crule))
    add_parameter_constraints(b, problem.parameter_constraints, usub)
    return b


def add_parameter_constraints(b, constraints, usub):
    """``b.param_<name>``: r(u) <= 0 for each (ParameterConstraint, sym) of ``constraints``."""
    for pc, ex in constraints:
        b.add_component(f"param_{pc.name}", pyo.Constraint(expr=sympy_to_pyomo(ex, usub) <= 0))


def set_parameter_vars(var, parameters):
    """Bounds, start values and fixed flags of ``var[p.name]`` from ``parameters``."""
    for p in parameters:
        v = var[p.name]
        v.setlb(p.lb)
        v.setub(p.ub)
        v.set_value(float(p.value), skip_validation=True)
        if p.fixed:
            v.fix(float(p.value))


def add_objective_term(b, expr):
    """Add a term to ``b.objective`` (kept after ``b.misfit``)."""
    b.extra_objective_terms.append(expr)
    b.objective.set_value(b.misfit + b.penalty + sum(b.extra_objective_terms))


def scheme_constraint(b, i, state, stage="x"):
    """The ConstraintData of the ``stage`` equation of step ``i`` for ``state``.

    ``stage='x'`` is the equation defining x_{i+1}; ``scheme_constraint(b, -1,
    s)`` returns the initial condition x_0 = l(u).
    """
    if i == -1 and stage == "x":
        return b.x0_eq[state]
    try:
        return b._scheme_index[(stage, int(i), state)]
    except KeyError:
        raise KeyError(f"no {stage}-stage equation of step {i} for state {state!r} "
                       f"(steps 0..{len(b.formulas) - 1}, states {list(b.S)})") from None
