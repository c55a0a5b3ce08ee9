"""The vectorised set-up of blocks built by the package honours what the user
changed afterwards, and its shortcuts (sums compiled term by term, one symbol
per variable, merged Jacobian and Hessian entries) give exactly what the
general path gives.

Every check compares ``PyomoNLPEvaluator(m)`` with the reference
``templatize=False`` (every row walked on its own, compiled whole) on values,
gradients, Jacobians and Hessians at a random point.
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest

from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.analysis import check_consistency
from pyomo_odeest import estimate, estimate_simultaneous, initialize_block
from pyomo_odeest.models import (METHANOL_OPTIMUM, lotka_volterra_problem, methanol_problem)
from pyomo_odeest import build_block, scheme_constraint


def _agree(m, seed=3):
    ev, evg = PyomoNLPEvaluator(m), PyomoNLPEvaluator(m, templatize=False)
    rng = np.random.default_rng(seed)
    x = ev.x0 + 0.05 * rng.uniform(-1, 1, ev.n)
    name = lambda c: c.getname(fully_qualified=True, relative_to=m)  # noqa: E731
    rep = check_consistency(ev, evg, x, var_key=name, row_key=name)
    assert rep.ok, str(rep)
    return ev, x


def _lv_model(scheme):
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, 3, steps_per_interval=2)
    initialize_block(m.est, np.array(prob.u0))
    return m


@pytest.mark.parametrize("scheme", ["adams_pc", "adams_moulton", "enright",
                                    "semi_implicit_enright"])
def test_unmodified_package_block_agrees_with_general_path(scheme):
    m = _lv_model(scheme)
    ev, _ = _agree(m)
    assert not ev.stats["fallbacks"]
    assert ev.stats["template_rows"] > 0


@pytest.mark.parametrize("scheme", ["adams_pc", "enright"])
def test_user_changes_after_build_are_what_is_solved(scheme):
    m = _lv_model(scheme)
    b = m.est
    changed = scheme_constraint(b, 3, "x1")
    changed.set_value(b.x[4, "x1"] == 2 * b.x[3, "x1"] * b.u[b.P.first()])
    dropped = scheme_constraint(b, 5, "x2")
    dropped.deactivate()
    m.extra = pyo.Constraint(expr=b.x[2, "x1"] + b.u[b.P.first()] <= 5)
    b.x[6, "x1"].fix(0.7)
    ev, x = _agree(m)
    rows = ev.constraint_rows
    ids = {id(c) for c in rows}
    assert id(dropped) not in ids and id(m.extra) in ids and id(changed) in ids
    assert id(b.x[6, "x1"]) not in {id(v) for v in ev.variables}
    # the changed row evaluates the user's expression, not the scheme's
    ev.load_x(x)
    r = next(j for j, c in enumerate(rows) if c is changed)
    g = ev.constraints(x)
    assert g[r] == pytest.approx(pyo.value(changed.body), rel=1e-12, abs=1e-12)
    assert g[r] == pytest.approx(pyo.value(b.x[4, "x1"] - 2 * b.x[3, "x1"] * b.u[b.P.first()]),
                                 rel=1e-12, abs=1e-12)


def test_shared_factor_sums_and_repeated_variables():
    """``c_i * (p x_i^2 + p x_i y_i + exp(p y_i))``: the constant factor is
    distributed over the sum, ``p`` (in every term) is one symbol, and the
    row's Jacobian has one entry per variable."""
    import pyomo.core.base.constraint as pcon
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, 19)
    m.x = pyo.Var(m.I, initialize=lambda m, i: 0.1 * i)
    m.y = pyo.Var(m.I, initialize=lambda m, i: 1.0 - 0.03 * i)
    m.p = pyo.Var(initialize=0.7)
    m.c = pyo.Param(m.I, initialize=lambda m, i: 1.0 + i)
    old = getattr(pcon, "TEMPLATIZE_CONSTRAINTS", None)
    if old is None:                                     # pragma: no cover
        pytest.skip("Pyomo has no TEMPLATIZE_CONSTRAINTS flag")
    pcon.TEMPLATIZE_CONSTRAINTS = True
    try:
        m.r = pyo.Constraint(m.I, rule=lambda m, i: m.c[i] * (
            m.p * m.x[i] ** 2 + m.p * m.x[i] * m.y[i] + pyo.exp(m.p * m.y[i])) == 1)
    finally:
        pcon.TEMPLATIZE_CONSTRAINTS = old
    m.o = pyo.Objective(expr=sum((m.x[i] - m.y[i]) ** 2 for i in m.I) + m.p ** 2)
    ev, _ = _agree(m)
    assert ev.stats["template_rows"] == 20
    assert ev.stats["jac_nnz"] == 20 * 3


def test_blocks_with_the_same_equations_share_their_families():
    """Three blocks (experiments) holding the same indexed equations, with a parameter
    of their own and one they share: one family per equation, not one per block,
    rows and bounds still those of their own constraints."""
    import pyomo.core.base.constraint as pcon
    if getattr(pcon, "TEMPLATIZE_CONSTRAINTS", None) is None:     # pragma: no cover
        pytest.skip("Pyomo has no TEMPLATIZE_CONSTRAINTS flag")

    def blocks(n):
        old, pcon.TEMPLATIZE_CONSTRAINTS = pcon.TEMPLATIZE_CONSTRAINTS, True
        try:
            return _blocks(n)
        finally:
            pcon.TEMPLATIZE_CONSTRAINTS = old

    def _blocks(n):
        m = pyo.ConcreteModel()
        m.k = pyo.Var(initialize=0.7)
        m.B = pyo.Block(range(n))
        for e, b in m.B.items():
            b.x = pyo.Var(range(6), initialize=lambda b, i, e=e: 1 + 0.1 * i + 0.05 * e)
            b.a = pyo.Var(initialize=0.3 + 0.1 * e)
            b.x[0].fix()
            b.ode = pyo.Constraint(range(1, 6), rule=lambda b, i: b.x[i] == b.x[i - 1] + 0.1 * (
                -m.k * b.x[i] ** 2 + b.a * pyo.exp(-b.x[i - 1])))
            b.lo = pyo.Constraint(range(6), rule=lambda b, i, e=e: b.x[i] * b.a >= -1 - e)
        m.o = pyo.Objective(expr=sum((b.x[i] - 1) ** 2 for b in m.B.values() for i in range(6)))
        return m

    one, three = PyomoNLPEvaluator(blocks(1)), PyomoNLPEvaluator(blocks(3))
    assert three.stats["template_rows"] == three.m == 3 * one.m
    assert len(three.con_families) == len(one.con_families) == 2
    assert three.stats["merged_families"] == 4
    m = blocks(3)
    ev = PyomoNLPEvaluator(m)
    assert sorted(d.name for d in ev.constraint_rows) == sorted(
        d.name for d in m.component_data_objects(pyo.Constraint))
    _agree(m)


def test_methanol_reaches_published_optimum():
    """COPS methanol (rational right-hand side) with the Enright scheme."""
    r = estimate_simultaneous(methanol_problem(), "enright", 4, max_step=0.01)
    assert r.success, r.status
    assert abs(r.objective / METHANOL_OPTIMUM - 1) < 1e-5
    assert r.iterations <= 30


def test_methanol_default_start_with_the_adjoint_multipliers():
    """The simultaneous approach's defaults from the problem's start: Ipopt starts from
    the discrete adjoint of the simulated start (its own first estimate led it to stop
    ``not_stationary`` at 0.01727 after 45 iterations); it converges to the published
    optimum, certified."""
    r = estimate(methanol_problem(), approach="simultaneous")
    assert r.success, r.status
    assert abs(r.objective / METHANOL_OPTIMUM - 1) < 1e-3
    assert r.iterations <= 20
