"""The evaluator reads the constraints stored in the model, never their rules.

Each case changes a model after construction (clone of a model whose rules
refer to the original, ``set_value``, deactivated rows, blocks deep in a
hierarchy, rows added after construction, indexed components with holes) and
checks that ``odeest_ipopt`` gives what the same model built from scratch
gives, on both the vectorised path and ``templatize=False``, and that the
evaluators agree at a random point on values and derivatives.  Models built
under Pyomo's ``TEMPLATIZE_CONSTRAINTS`` (rows stored as one template) are
covered as well.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pyomo.environ as pyo
import pytest

import pyomo_odeest  # noqa: F401  (registers 'odeest_ipopt')
from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.analysis import check_consistency

N = 8


@contextlib.contextmanager
def templatized_construction(on):
    """Build with Pyomo's ``TEMPLATIZE_CONSTRAINTS`` flag set to ``on``."""
    import pyomo.core.base.constraint as pcon
    if on and not hasattr(pcon, "TEMPLATIZE_CONSTRAINTS"):     # pragma: no cover
        pytest.skip("Pyomo has no TEMPLATIZE_CONSTRAINTS flag")
    old = getattr(pcon, "TEMPLATIZE_CONSTRAINTS", False)
    pcon.TEMPLATIZE_CONSTRAINTS = on
    try:
        yield
    finally:
        pcon.TEMPLATIZE_CONSTRAINTS = old


def chain(m, p_values=None, ref=None):
    """x[i] = x[i-1] + h*(p[i] - k x[i]^2) on 1..N, x[0] fixed, least squares on x and k.

    ``ref``: the block the rules refer to (default: the block they build).
    """
    m.I = pyo.RangeSet(0, N)
    m.I1 = pyo.RangeSet(1, N)
    m.x = pyo.Var(m.I, initialize=1.0)
    m.k = pyo.Var(initialize=0.5, bounds=(0, 10))
    m.p = pyo.Param(m.I1, mutable=True, initialize=p_values or {i: 1.0 + 0.1 * i for i in range(1, N + 1)})
    m.x[0].fix(1.0)

    def rule(b, i):
        r = b if ref is None else ref
        return r.x[i] == r.x[i - 1] + 0.1 * (r.p[i] - r.k * r.x[i] ** 2)

    m.ode = pyo.Constraint(m.I1, rule=rule)
    m.o = pyo.Objective(expr=sum((m.x[i] - 1.2) ** 2 for i in m.I1) + (m.k - 0.3) ** 2)
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    return m


def solve(m, templatize=True):
    res = pyo.SolverFactory("odeest_ipopt").solve(m, templatize=templatize,
                                                  options={"tol": 1e-10})
    assert res.solver.termination_condition == pyo.TerminationCondition.optimal
    return res


def state(m):
    """Variable values and duals keyed by names relative to ``m``."""
    vals = {v.getname(fully_qualified=True, relative_to=m): v.value
            for v in m.component_data_objects(pyo.Var, descend_into=True)}
    duals = {}
    for sfx in m.component_data_objects(pyo.Suffix, descend_into=True):
        if sfx.local_name == "dual":
            duals.update({c.getname(fully_qualified=True, relative_to=m): v
                          for c, v in sfx.items()})
    return vals, duals


def assert_same_solution(m, scratch):
    """``m`` solved on both paths equals ``scratch`` solved (values and duals)."""
    mg = m.clone()
    solve(scratch)
    solve(m)
    solve(mg, templatize=False)
    (vs, ds), (v, d), (vg, dg) = state(scratch), state(m), state(mg)
    assert set(v) == set(vs) == set(vg) and set(d) == set(ds) == set(dg) and ds
    for k in vs:
        assert v[k] == pytest.approx(vs[k], abs=1e-8), k
        assert vg[k] == pytest.approx(vs[k], abs=1e-8), k
    for k in ds:
        assert d[k] == pytest.approx(ds[k], abs=1e-7), k
        assert dg[k] == pytest.approx(ds[k], abs=1e-7), k


def assert_paths_agree(m):
    ev, evg = PyomoNLPEvaluator(m), PyomoNLPEvaluator(m, templatize=False)
    rng = np.random.default_rng(3)
    x = ev.x0 + 0.1 * rng.uniform(-1, 1, ev.n)
    name = lambda c: c.getname(fully_qualified=True, relative_to=m)  # noqa: E731
    rep = check_consistency(ev, evg, x, var_key=name, row_key=name)
    assert rep.ok, str(rep)
    return ev


FLAGS = pytest.mark.parametrize("templ", [False, True], ids=["stored_rows", "stored_template"])


@FLAGS
def test_clone_of_model_whose_rules_refer_to_the_original(templ):
    with templatized_construction(templ):
        orig = pyo.ConcreteModel()
        chain(orig, ref=orig)             # the rule names `orig`, not its block argument
    m = orig.clone()
    for i in m.I1:
        m.p[i] = 3.0 - 0.2 * i            # the clone differs from the original
    before = {i: orig.x[i].value for i in orig.I}
    with templatized_construction(templ):
        scratch = chain(pyo.ConcreteModel(), p_values={i: 3.0 - 0.2 * i for i in range(1, N + 1)})
    assert_paths_agree(m)
    assert_same_solution(m, scratch)
    # the original was neither read nor written
    assert {i: orig.x[i].value for i in orig.I} == before
    assert m.x[N].value != pytest.approx(1.0)


@FLAGS
def test_set_value_of_one_row(templ):
    with templatized_construction(templ):
        m = chain(pyo.ConcreteModel())
    m.ode[5].set_value(m.x[5] == 5.0)

    def scratch_rule(b, i):
        if i == 5:
            return b.x[5] == 5.0
        return b.x[i] == b.x[i - 1] + 0.1 * (b.p[i] - b.k * b.x[i] ** 2)

    scratch = chain(pyo.ConcreteModel())
    scratch.del_component(scratch.ode)
    scratch.ode = pyo.Constraint(scratch.I1, rule=scratch_rule)
    assert_paths_agree(m)
    assert_same_solution(m, scratch)
    assert m.x[5].value == pytest.approx(5.0, abs=1e-9)


@FLAGS
def test_deactivated_rows(templ):
    with templatized_construction(templ):
        m = chain(pyo.ConcreteModel())
    m.ode[3].deactivate()
    m.ode[7].deactivate()
    scratch = chain(pyo.ConcreteModel())
    scratch.del_component(scratch.ode)
    scratch.ode = pyo.Constraint(scratch.I1, rule=lambda b, i: pyo.Constraint.Skip if i in (3, 7)
                                 else b.x[i] == b.x[i - 1] + 0.1 * (b.p[i] - b.k * b.x[i] ** 2))
    ev = assert_paths_agree(m)
    assert ev.m == N - 2
    assert_same_solution(m, scratch)


def nested(leaf_builder):
    """The chain three blocks deep, inside an indexed block."""
    m = pyo.ConcreteModel()
    m.a = pyo.Block()
    m.a.b = pyo.Block([1, 2])
    for j in (1, 2):
        m.a.b[j].c = pyo.Block()
        leaf_builder(m.a.b[j].c, j)
        m.a.b[j].c.o.deactivate()
    m.link = pyo.Constraint(expr=m.a.b[1].c.k == 2 * m.a.b[2].c.k)
    m.o = pyo.Objective(expr=sum(m.a.b[j].c.o.expr for j in (1, 2)))
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    return m


@FLAGS
def test_blocks_deep_in_a_hierarchy(templ):
    def leaf(b, j):
        chain(b, p_values={i: 1.0 + 0.1 * i * j for i in range(1, N + 1)})
        b.del_component(b.dual)

    with templatized_construction(templ):
        m = nested(leaf)
    scratch = nested(leaf)
    assert_paths_agree(m)
    assert_same_solution(m, scratch)
    # solving one inner block alone uses only that block
    inner = m.a.b[2].c
    inner.o.activate()
    res = pyo.SolverFactory("odeest_ipopt").solve(inner)
    assert res.problem.number_of_variables == N + 1


@FLAGS
def test_rows_added_after_construction(templ):
    with templatized_construction(templ):
        m = chain(pyo.ConcreteModel())
        m.extra = pyo.ConstraintList()
    m.J = pyo.Set(initialize=[1, 2], ordered=True)
    m.cap = pyo.Constraint(m.J, rule=lambda b, j: b.x[j] <= 1.0 + 0.01 * j)
    m.J.add(3)
    m.cap[3] = m.x[3] <= 1.05                  # a row the rule never made
    m.extra.add(m.k >= 0.35)

    scratch = chain(pyo.ConcreteModel())
    scratch.extra = pyo.ConstraintList()
    scratch.J = pyo.Set(initialize=[1, 2, 3], ordered=True)
    scratch.cap = pyo.Constraint(scratch.J, rule=lambda b, j: b.x[j] <= (1.0 + 0.01 * j if j < 3
                                                                         else 1.05))
    scratch.extra.add(scratch.k >= 0.35)
    ev = assert_paths_agree(m)
    assert ev.m == N + 4
    assert_same_solution(m, scratch)


@FLAGS
def test_indexed_components_with_holes(templ):
    idx = [0, 1, 2, 4, 5, 9, 10]           # not contiguous

    def build(m):
        m.I = pyo.Set(initialize=idx, ordered=True)
        m.x = pyo.Var(m.I, initialize=1.0)
        m.y = pyo.Var(m.I, dense=False)       # only some members exist
        for i in idx[::2]:
            m.y[i] = 0.5
        m.w = pyo.Param(m.I, initialize=lambda m, i: 1.0 + i, mutable=True)
        m.I2 = pyo.Set(initialize=idx[::2], ordered=True)
        m.c = pyo.Constraint(m.I2, rule=lambda b, i: b.x[i] ** 2 + b.y[i] == b.w[i])
        with templatized_construction(False):      # branches on the index
            m.d = pyo.Constraint(m.I, rule=lambda b, i: pyo.Constraint.Skip if i == 0
                                 else b.x[i] >= 0.1 * b.x[b.I.prev(i)])
        m.o = pyo.Objective(expr=sum((m.x[i] - 1) ** 2 for i in m.I)
                            + sum(m.y[i] ** 2 for i in m.y))
        m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
        return m

    with templatized_construction(templ):
        m = build(pyo.ConcreteModel())
    scratch = build(pyo.ConcreteModel())
    ev = assert_paths_agree(m)
    assert ev.m == len(idx[::2]) + len(idx) - 1
    assert_same_solution(m, scratch)


def test_mutable_param_changes_between_solves():
    m = chain(pyo.ConcreteModel())
    opt = pyo.SolverFactory("odeest_ipopt")
    for scale in (1.0, 2.5, 0.7):
        for i in m.I1:
            m.p[i] = scale * (1.0 + 0.1 * i)
        res = opt.solve(m, options={"tol": 1e-10})
        assert res.solver.termination_condition == pyo.TerminationCondition.optimal
        scratch = chain(pyo.ConcreteModel(), p_values={i: scale * (1.0 + 0.1 * i)
                                                       for i in range(1, N + 1)})
        solve(scratch)
        for i in m.I:
            assert m.x[i].value == pytest.approx(scratch.x[i].value, abs=1e-8)
        assert m.k.value == pytest.approx(scratch.k.value, abs=1e-8)


def test_a_solve_reads_nothing_outside_the_model():
    """A rule that would fail if called again: the solve never calls it."""
    calls = []

    def rule(b, i):
        calls.append(i)
        if len(calls) > N:
            raise AssertionError("rule called again")
        return b.x[i] == b.x[i - 1] + 0.1 * (b.p[i] - b.k * b.x[i] ** 2)

    m = chain(pyo.ConcreteModel())
    m.del_component(m.ode)
    m.ode = pyo.Constraint(m.I1, rule=rule)
    assert len(calls) == N
    solve(m)
    solve(m.clone())
    assert len(calls) == N
