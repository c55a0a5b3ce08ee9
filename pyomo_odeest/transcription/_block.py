r"""The discrete problem [GM-grad, eq. (2)] as a Pyomo Block.

:func:`build_block` renders an :class:`~pyomo_odeest.problem._declaration.EstimationProblem`,
a scheme (:mod:`pyomo_odeest.discretization.schemes`) and a grid (:mod:`pyomo_odeest.discretization._grid`)
as explicit algebraic constraints:

================================  ===============================================
component                         meaning
================================  ===============================================
``b.t[i]``, ``b.h[i]``             grid times t_i (i = 0..k) (a Param) and steps
                                   h_i = t_{i+1} - t_i (an array; the
                                   equations write h_i as that difference)
``b.x[i, s]``                      state s at grid point i
``b.u[p]``                         parameter p (bounds, start, fixed flag)
``b.<stage>[i, s]``                stage values of step i (``y``: predictor
                                   y_{i+1}; ``yc``: corrector of the
                                   semi-implicit scheme)
``b.x0_eq[s]``                     x_0 = l(u)
``b.ode_<stage>_<s>_q<Q>[i]``      the stage equation of step i for state s,
                                   for the steps whose order is Q_i = Q
``b.cf_<stage>_q<Q>_<j>[i]``      coefficient of the j-th f term
``b.cd_<stage>_q<Q>_<j>[i]``      coefficient of the j-th ḟ term (Enright)
``b.misfit``                       J_k = Σ_j φ_j (an Expression)
``b.penalty``                      the problem's penalty R(u) (0 if none)
``b.objective``                    minimize ``b.misfit + b.penalty`` + user terms
``b.input_<j>[i]``                 value of the j-th input term at grid point i
``b.path_<name>[i]``               path constraint c(x_i, u, t_i) <= 0
``b.param_<name>``                 parameter constraint r(u) <= 0
================================  ===============================================

Each stage equation reads [GM-grad, eqs. (2), (4)–(6)]

.. math::

    v = x_i + h_i \sum_j c_j f(P_j, u, t_{P_j}) + h_i^2 \sum_j d_j \dot f(P_j, u, t_{P_j}),

with points P_j among past states, the new state x_{i+1} and earlier stages.
The constraint body is ``v - rhs`` so that Ipopt's multiplier of the x-stage
of step i is the adjoint p_{i+1} of [GM-grad], eq. (52) (see
:mod:`pyomo_odeest.approaches._simultaneous`).  Rows of one constraint component share one
rule in the step index, so the solver evaluates each component in one
vectorised call.
"""
from __future__ import annotations

import builtins
import itertools
import threading
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from functools import cached_property

import numpy as np
import pyomo.core.base.constraint as _pcon
import pyomo.environ as pyo
import sympy

from ..discretization._grid import Grid, resolve_grid
from ..problem._misfit import misfit_sym
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._inputs import input_applications
from ..discretization.schemes import get_scheme
from ..symbolic._convert import sympy_to_pyomo
from ._initial_state import add_initial_condition

_TemplateConstraintData = getattr(_pcon, "TemplateConstraintData", None)

__all__ = ["build_block", "scheme_constraint", "add_objective_term", "set_parameter_vars",
           "add_misfit", "add_parameter_constraints"]


def _batch_tags(batches):
    """A component tag per batch: ``q<Q>`` (``q<Q>v<n>`` if a Q repeats)."""
    used, tags = set(), []
    for batch in batches:
        tag, n = f"q{batch.q}", 1
        while tag in used:
            n += 1
            tag = f"q{batch.q}v{n}"
        used.add(tag)
        tags.append(tag)
    return tags


_REAL_SUM = builtins.sum
#: the template ``sum`` of the thread that is templatizing a rule (``fn``), if any
_THREAD_SUM = threading.local()
#: one templatizing build at a time (Pyomo's flag and iteration manager are global)
_TEMPLATING = threading.RLock()


def _thread_sum(*args, **kwargs):
    """``sum`` for every thread: Pyomo's template sum in the thread that templatizes a
    rule, Python's everywhere else."""
    fn = getattr(_THREAD_SUM, "fn", None)
    return (_REAL_SUM if fn is None else fn)(*args, **kwargs)


@contextmanager
def _template_sum_in_this_thread():
    """Pyomo templatizes a rule by replacing ``builtins.sum`` (and Set iteration) for
    the whole process while the rule runs; another thread's ``sum(...)`` then gets
    Pyomo's template sum, which raises ``StopIteration`` on an empty iterable (Dask's
    size estimates in the worker's other thread: "Sizeof calculation ... failed").
    Here the template sum is installed for the templatizing thread only.  Without
    Pyomo's iteration manager (another Pyomo version) nothing changes."""
    from pyomo.core.expr import template_expr
    mgr = getattr(template_expr, "_TemplateIterManager", None)
    if mgr is None or not all(hasattr(mgr, a) for a in ("acquire", "release", "paused",
                                                         "context", "iters")):
        yield                             # pragma: no cover - another Pyomo
        return

    # Pyomo's acquire/release (pyomo.core.expr.template_expr) without their
    # assignments to builtins.sum: a wrapper that undid them afterwards would leave a
    # window in which a thread switch shows the template sum to another thread
    def acquire_here():
        assert mgr.paused
        mgr.paused = False
        _THREAD_SUM.fn = mgr.context.sum_template
        for it in mgr.iters:
            it.acquire()

    def release_here():
        assert not mgr.paused
        mgr.paused = True
        _THREAD_SUM.fn = None
        for it in mgr.iters:
            it.release()

    saved = builtins.sum
    before = {k: mgr.__dict__[k] for k in ("acquire", "release") if k in mgr.__dict__}
    mgr.acquire, mgr.release = acquire_here, release_here
    builtins.sum = _thread_sum
    try:
        yield
    finally:
        for k in ("acquire", "release"):          # as they were (a nested use included)
            if k in before:
                setattr(mgr, k, before[k])
            else:
                delattr(mgr, k)
        if saved is not _thread_sum:
            _THREAD_SUM.fn = None
        builtins.sum = saved


@contextmanager
def _templatized():
    """Store indexed constraints built inside as templates (Pyomo >= 6.9's
    ``TEMPLATIZE_CONSTRAINTS``): one rule call per component instead of one
    per row, with Pyomo's template ``sum`` seen by this thread only
    (:func:`_template_sum_in_this_thread`).  No-op on older Pyomo."""
    old = getattr(_pcon, "TEMPLATIZE_CONSTRAINTS", None)
    if old is None:                       # pragma: no cover - Pyomo < 6.9
        yield
        return
    with _TEMPLATING, _template_sum_in_this_thread():
        _pcon.TEMPLATIZE_CONSTRAINTS = True
        try:
            yield
        finally:
            _pcon.TEMPLATIZE_CONSTRAINTS = old


if _TemplateConstraintData is not None:
    class _LazyRowData(_TemplateConstraintData):
        """A templated row that becomes a concrete row on first inspection.

        Pyomo's ``TemplateConstraintData`` returns the *template* (with free
        index placeholders) from ``body``, ``lower``, ``upper``, ``equality``
        and ``get_value``; every such access here first renders the row's own
        expression (``expr``), so user code and Pyomo tools see ordinary
        rows.  The solver reads ``template_expr()``, which renders nothing.
        """

        __slots__ = ()

        def to_bounded_expression(self, evaluate_bounds=False):
            self.expr
            return self.to_bounded_expression(evaluate_bounds)

        @property
        def equality(self):
            self.expr
            return self.equality

        def get_value(self):
            return self.expr

        @property
        def strict_lower(self):
            self.expr
            return self.strict_lower

        @property
        def strict_upper(self):
            self.expr
            return self.strict_upper
else:                                      # pragma: no cover - Pyomo < 6.9
    _LazyRowData = None


def _point_index(i, pref):
    """Grid index of a point of step ``i`` (stage points: that of x_{i+1})."""
    return i - pref.lag if pref.kind == "past" else i + 1


def _stage_rule(problem, si, s, stage, cf_name, cd_name, fdot, f_sym=None, in_syms=()):
    """Rule of the ``stage`` equation of state ``s`` for the steps of one batch.

    Components are looked up through the block argument (never captured), so
    that rules of cloned blocks render the clone's components; only symbolic
    data of ``problem`` (immutable) is captured."""
    f_points = [p for p, _ in stage[1]]
    d_points = [p for p, _ in stage[2]]
    name = stage[0]
    S, pnames = list(problem.states), list(problem.parameter_names)
    u_sym, x_sym, t_sym = problem.u_sym, problem.x_sym, problem.t_sym
    f_s = (problem.f_sym if f_sym is None else f_sym)[si]
    fd_s = fdot[si] if d_points else None
    in_names = [f"input_{j}" for j in range(len(in_syms))]

    def rule(b, i):
        base = {sym: b.u[p] for sym, p in zip(u_sym, pnames)}

        def term(expr_sym, pref):
            """``expr_sym`` at a point of step i: its states, time and input values."""
            ip = _point_index(i, pref)
            xc = b.component(pref.stage) if pref.kind == "stage" else None
            objs = dict(base)
            objs.update(zip(x_sym, [b.x[ip, z] if xc is None else xc[i, z] for z in S]))
            objs[t_sym] = b.t[ip]
            objs.update((w, b.component(nm)[ip]) for w, nm in zip(in_syms, in_names))
            return sympy_to_pyomo(expr_sym, objs)

        # one flat sum x_i + sum_j (h c_j) f(P_j) + sum_j (h^2 d_j) fdot(P_j):
        # its terms share a shape per right-hand side, so the solver
        # differentiates f (fdot) once, not once per point
        cf = [b.component(f"{cf_name}_{j}") for j in range(len(f_points))]
        # the step as t_{i+1} - t_i, the same float as the simulators' np.diff(t),
        # without a Param of one entry per step
        h = b.t[i + 1] - b.t[i]
        val = b.x[i, s]
        for j, pref in enumerate(f_points):
            val = val + (h * cf[j][i]) * term(f_s, pref)
        if d_points:
            cd = [b.component(f"{cd_name}_{j}") for j in range(len(d_points))]
            for j, pref in enumerate(d_points):
                val = val + (h ** 2 * cd[j][i]) * term(fd_s, pref)
        target = b.x[i + 1, s] if name == "x" else b.component(name)[i, s]
        return target == val
    return rule


def _add_param(b, name, index, get):
    """Add the immutable Param ``b.<name>`` over the sets ``index`` with values ``get(*idx)``.

    Only the entries that differ from the most common value are stored; that value
    is the Param's ``default`` (an immutable Param returns it for the others, and
    ``keys()``/``values()`` still list every index).  A coefficient table or the steps
    on a grid of equal steps within its intervals is then a few entries instead of
    one dictionary entry, index and float object per step (about 140 bytes each
    for a table of (step, term)).  The values are floats computed here (the initializer
    and the lists behind it are dropped after construction); ``within=Any`` skips
    Pyomo's per-entry check of the implicit domain (a test against Reals, most of
    the build time)."""
    keys = list(itertools.product(*index)) if len(index) > 1 else list(index[0])
    vals = [get(*k) for k in keys] if len(index) > 1 else [get(k) for k in keys]
    # counted by bit pattern: the default stands for an entry exactly (-0.0 is not 0.0)
    bits = [float(v).hex() for v in vals]
    common = Counter(bits).most_common(1)[0][0] if bits else "0x0.0p+0"
    sparse = {k: v for k, v, w in zip(keys, vals, bits) if w != common}
    common = float.fromhex(common)
    del keys, vals, bits
    b.add_component(name, pyo.Param(*index, initialize=sparse, default=common, within=pyo.Any))


def _coefficient_reader(steps, column):
    """``i -> column[r]`` for step ``i = steps[r]``."""
    i0 = int(steps[0])
    if np.all(np.diff(steps) == 1):
        return lambda i: column[i - i0]
    pos = {int(i): r for r, i in enumerate(steps.tolist())}
    return lambda i: column[pos[i]]


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
    batches = sch.batches(t, grid.restarts)

    b = block if block is not None else pyo.Block(concrete=True)
    b.problem = problem
    b.scheme = sch
    b.grid = grid
    b.formulas = _LazyFormulas(sch, t, grid.restarts)
    S = problem.states
    b.S = pyo.Set(initialize=S, ordered=True)
    b.P = pyo.Set(initialize=problem.parameter_names, ordered=True)
    b.K = pyo.RangeSet(0, k)
    b.steps = pyo.RangeSet(0, k - 1)
    _add_param(b, "t", (b.K,), t.tolist().__getitem__)
    b.h = np.diff(t)
    b.h.flags.writeable = False
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
    # inputs: each application F(t) is a Param b.input_<j> over the grid points
    # (its value at t_i; the twin point before a switch carries the left piece)
    c_sym = [ex for _, ex in problem.path_constraints]
    apps = input_applications(tuple(f_sym) + tuple(fd_sym or ()) + tuple(c_sym))
    in_syms = tuple(sympy.Dummy(f"w{j}") for j in range(len(apps)))
    for j, a in enumerate(apps):
        vals = np.broadcast_to(np.asarray(type(a)._imp_(t), dtype=float), t.shape).tolist()
        _add_param(b, f"input_{j}", (b.K,), vals.__getitem__)
    if apps:
        rep = dict(zip(apps, in_syms))
        f_sym = tuple(e.xreplace(rep) for e in f_sym)
        fd_sym = None if fd_sym is None else tuple(e.xreplace(rep) for e in fd_sym)
        c_sym = [e.xreplace(rep) for e in c_sym]

    # x0 = l(u)
    add_initial_condition(b, problem, usub)

    # one constraint per (batch, stage, state), stored as a template: every
    # distinct step formula is rendered (sympy -> Pyomo) once, not per step
    b._scheme_parts = {}
    b._step_batch = np.empty(k, dtype=np.int64)
    for bi, (tag, batch) in enumerate(zip(_batch_tags(batches), batches)):
        steps = batch.steps
        b._step_batch[steps] = bi
        if steps.size == steps[-1] - steps[0] + 1:
            step_set = pyo.RangeSet(int(steps[0]), int(steps[-1]))
        else:
            step_set = pyo.Set(initialize=steps.tolist(), ordered=True)
        b.add_component(f"steps_{tag}", step_set)
        for stage in batch.stages:
            sname, f_terms, d_terms = stage
            names = []
            for kind, terms in (("cf", f_terms), ("cd", d_terms)):
                cname = f"{kind}_{sname}_{tag}"
                names.append(cname)
                for j, (_, column) in enumerate(terms):
                    _add_param(b, f"{cname}_{j}", (step_set,),
                               _coefficient_reader(steps, column.tolist()))
            for si, s in enumerate(S):
                cname = f"ode_{sname}_{s}_{tag}"
                with _templatized():
                    b.add_component(cname, pyo.Constraint(
                        step_set, rule=_stage_rule(problem, si, s, stage, names[0], names[1], fd_sym,
                                         f_sym, in_syms)))
                con = b.component(cname)
                if _LazyRowData is not None:
                    for d in con._data.values():
                        if d.__class__ is _TemplateConstraintData:
                            d.__class__ = _LazyRowData
                b._scheme_parts[(sname, s, bi)] = con

    add_misfit(b, problem, usub, grid.J, t)
    pen = problem.penalty_sym
    b.penalty = pyo.Expression(expr=sympy_to_pyomo(pen, usub) if pen.free_symbols else float(pen))
    b.extra_objective_terms = []
    b.objective = pyo.Objective(expr=b.misfit + b.penalty)

    # path constraints c(x_i, u, t_i) <= 0 at grid points or measurement times
    def point(ip):
        objs = dict(usub)
        objs.update(zip(problem.x_sym, [b.x[ip, s] for s in S]))
        objs[problem.t_sym] = b.t[ip]
        objs.update({w: b.component(f"input_{j}")[ip] for j, w in enumerate(in_syms)})
        return objs

    for (pc, _), ex in zip(problem.path_constraints, c_sym):
        pts = list(range(k + 1)) if pc.at == "grid" else sorted({int(i) for i in grid.J})

        def crule(b, i, ex=ex, name=pc.name):
            if ex.free_symbols:
                return sympy_to_pyomo(ex, point(i)) <= 0
            if not float(ex) <= 0:           # a NaN row is refused too, never dropped
                raise ProblemError(f"path constraint '{name}' is the constant {float(ex)}, "
                                   "not <= 0")
            return pyo.Constraint.Skip
        b.add_component(f"path_{pc.name}", pyo.Constraint(pts, rule=crule))
    add_parameter_constraints(b, problem.parameter_constraints, usub)
    return b


def add_misfit(b, problem, usub, J, t):
    """``b.misfit``: J_k = Σ_j φ_j(x_{J(j)}, u) (an Expression), with the states ``b.x[i, s]``
    at the grid points ``J`` (times ``t[i]``)."""
    terms = []
    for j, i in enumerate(J):
        phi = sympy.sympify(misfit_sym(problem, j))
        objs = dict(usub)
        objs.update(zip(problem.x_sym, [b.x[int(i), s] for s in problem.states]))
        objs[problem.t_sym] = float(t[i])
        terms.append(sympy_to_pyomo(phi, objs) if phi.free_symbols else float(phi))
    b.misfit = pyo.Expression(expr=sum(terms))


def add_parameter_constraints(b, constraints, usub):
    """``b.param_<name>``: r(u) <= 0 for each (ParameterConstraint, sym) of ``constraints``."""
    for pc, ex in constraints:
        b.add_component(f"param_{pc.name}", pyo.Constraint(expr=sympy_to_pyomo(ex, usub) <= 0))


def set_parameter_vars(var, parameters, values=None):
    """Bounds, start values (``values``, default: the parameters' own) and fixed flags of
    ``var[p.name]`` from ``parameters``."""
    values = [p.value for p in parameters] if values is None else values
    for p, value in zip(parameters, values):
        v = var[p.name]
        v.setlb(p.lb)
        v.setub(p.ub)
        v.set_value(float(value), skip_validation=True)
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
    k = len(b._step_batch)
    try:
        i = int(i)
        if not 0 <= i < k:
            raise KeyError(i)
        return b._scheme_parts[(stage, state, int(b._step_batch[i]))][i]
    except (KeyError, TypeError, ValueError):
        raise KeyError(f"no {stage}-stage equation of step {i} for state {state!r} "
                       f"(steps 0..{k - 1}, states {list(b.S)})") from None


class _LazyFormulas(Sequence):
    """``b.formulas``: the scheme's step formulas, built on first use."""

    def __init__(self, scheme, t, restarts=()):
        self._scheme, self._t, self._restarts = scheme, t, restarts

    @cached_property
    def _all(self):
        return self._scheme.formulas(self._t, self._restarts)

    def __len__(self):
        return len(self._t) - 1

    def __getitem__(self, i):
        return self._all[i]

    def __iter__(self):
        return iter(self._all)
