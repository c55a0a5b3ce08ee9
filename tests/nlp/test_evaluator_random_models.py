"""Property test: random indexed models, vectorised path against the general path.

A seeded generator builds models with indexed Vars and Params over a few
index sets (with holes), constraints from random expression trees that mix
index offsets (``x[i+1]``), fixed variables, mutable and immutable Params,
every supported operator, ``Constraint.Skip`` on random rows, ``set_value``
of random rows and deactivated rows, plus a random objective.  For each
model the evaluator on the vectorised path (rows grouped by the signature of
their stored expressions) must agree with ``templatize=False`` (every row
walked on its own) on constraint values, objective, gradient, Jacobian and
Lagrangian Hessian at a random point, with random multipliers; and its
derivatives must match finite differences.
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import pytest

from pyomo_odeest import PyomoNLPEvaluator, check_derivatives
from pyomo_odeest.analysis import check_consistency

UNARY = [pyo.exp, pyo.sin, pyo.cos, pyo.tanh, pyo.atan,
         lambda e: pyo.log(1.5 + e ** 2), lambda e: pyo.sqrt(2.0 + e ** 2), abs]


def random_expr(rng, leaf, depth):
    """A random expression tree; ``leaf()`` draws a leaf."""
    if depth == 0 or rng.random() < 0.25:
        return leaf()
    op = rng.integers(0, 7)
    a = random_expr(rng, leaf, depth - 1)
    if op == 5:
        return UNARY[rng.integers(0, len(UNARY))](a)
    if op == 6:
        return a ** int(rng.integers(2, 4)) if rng.random() < 0.5 else (1.2 + a ** 2) ** 1.5
    b = random_expr(rng, leaf, depth - 1)
    if op == 0:
        return a + b
    if op == 1:
        return a - b
    if op == 2:
        return a * b
    if op == 3:
        return a / (1.5 + b ** 2)
    return a * float(rng.uniform(-2, 2)) + b


def random_model(seed):
    rng = np.random.default_rng(seed)
    m = pyo.ConcreteModel()
    n = int(rng.integers(5, 12))
    idx = sorted(rng.choice(np.arange(0, 3 * n), size=n, replace=False).tolist())
    m.I = pyo.Set(initialize=idx, ordered=True)
    m.J = pyo.Set(initialize=["a", "b"])
    m.x = pyo.Var(m.I, initialize=lambda m, i: float(rng.uniform(-1, 1)))
    m.y = pyo.Var(m.I, m.J, initialize=lambda m, i, j: float(rng.uniform(0.2, 1.0)))
    m.k = pyo.Var(initialize=0.5)
    m.p = pyo.Param(m.I, initialize=lambda m, i: float(rng.uniform(0.5, 2)), mutable=True)
    m.q = pyo.Param(m.I, initialize=lambda m, i: float(rng.uniform(-1, 1)))
    for i in idx[:: int(rng.integers(2, 5))]:
        m.x[i].fix()
    nxt = dict(zip(idx[:-1], idx[1:]))
    for c in range(int(rng.integers(2, 5))):
        depth = int(rng.integers(1, 4))
        # one random "rule" per component: the tree shape is drawn once, leaves per row
        shape_seed = int(rng.integers(1 << 30))
        kind = int(rng.integers(0, 3))

        def rule(m, i, j, shape_seed=shape_seed, depth=depth, kind=kind):
            if i not in nxt or rng.random() < 0.1:
                return pyo.Constraint.Skip
            r = np.random.default_rng(shape_seed)      # same tree for every row

            def leaf():
                u = r.integers(0, 6)
                if u == 0:
                    return m.x[i]
                if u == 1:
                    return m.x[nxt[i]]
                if u == 2:
                    return m.y[i, j]
                if u == 3:
                    return m.p[i] * m.k
                if u == 4:
                    return m.q[i]
                return float(r.uniform(-1, 1))
            e = random_expr(r, leaf, depth) + m.y[nxt[i], j]
            if kind == 0:
                return e == m.q[i]
            if kind == 1:
                return e <= 3.0 + m.p[i]
            return pyo.inequality(-5.0, e, 5.0)

        m.add_component(f"c{c}", pyo.Constraint(m.I, m.J, rule=rule))
        con = m.component(f"c{c}")
        rows = list(con.values())
        if rows and rng.random() < 0.5:
            rows[int(rng.integers(len(rows)))].deactivate()
        if rows and rng.random() < 0.5:
            d = rows[int(rng.integers(len(rows)))]
            d.set_value(m.k * m.x[idx[-1]] + pyo.exp(m.y[idx[0], "a"]) == 1.0)
    m.o = pyo.Objective(expr=sum((m.x[i] - m.q[i]) ** 2 + m.p[i] * m.y[i, "b"] ** 2 for i in m.I)
                        + (m.k - 0.3) ** 4)
    return m


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_path_equals_general_path(seed):
    m = random_model(seed)
    ev = PyomoNLPEvaluator(m)
    evg = PyomoNLPEvaluator(m, templatize=False)
    assert ev.m == evg.m > 0 and ev.n == evg.n
    assert evg.stats["grouped_rows"] == 0 and ev.stats["general_rows"] == 0
    rng = np.random.default_rng(100 + seed)
    x = ev.x0 + 0.2 * rng.uniform(-1, 1, ev.n)
    rep = check_consistency(ev, evg, x, seed=seed)
    assert rep.ok, str(rep)
    rep = check_derivatives(ev, x, seed=seed, rtol=1e-5, atol=1e-7)
    assert rep.ok, str(rep)
    # the vectorised path is vectorised: fewer families than rows
    assert ev.stats["grouped_families"] < ev.m
