"""Foundation tests of the ASL-free Pyomo -> Ipopt bridge.

* exact derivatives against central finite differences (via
  :mod:`pyomo_odeest.analysis._dercheck`) on models covering every supported operator,
  on both the templatized and the general path, and values against Pyomo's
  own evaluation;
* known optima through ``SolverFactory('odeest_ipopt')``;
* multipliers (``dual``, ``ipopt_zL_out``, ``ipopt_zU_out``) against KKT
  solutions derived by hand;
* consistency between an indexed rule, scalar constraints and
  ``templatize=False``;
* option pass-through, logging, and clean failures.
"""
from __future__ import annotations

import logging
import math
import sys

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.opt import SolverStatus, TerminationCondition

import pyomo_odeest  # noqa: F401  (registers 'odeest_ipopt')
from pyomo_odeest import (EvaluationError, PyomoNLPEvaluator, UnsupportedModelError,
                          check_derivatives)
from pyomo_odeest.analysis import check_consistency, check_gradient, check_jacobian
from pyomo_odeest.nlp import _cyipopt_adapter as cyipopt_adapter
from pyomo_odeest import solve_with_ipopt

SOLVER = "odeest_ipopt"
TIGHT = dict(rtol=1e-6, atol=1e-8)


def solve(m, **kw):
    """Solve with odeest_ipopt and return (results, solver)."""
    opt = pyo.SolverFactory(SOLVER)
    kw.setdefault("options", {"tol": 1e-10})
    return opt.solve(m, **kw), opt


def assert_optimal(res):
    assert res.solver.status == SolverStatus.ok
    assert res.solver.termination_condition == TerminationCondition.optimal


def add_suffixes(m):
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    m.ipopt_zL_out = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    m.ipopt_zU_out = pyo.Suffix(direction=pyo.Suffix.IMPORT)


def assert_values_match_pyomo(ev, x):
    """Objective and constraint rows of ``ev`` at ``x`` equal Pyomo's ``value()``.

    Rows are compared as distances from their finite bound, because a row may
    be stored as ``body - rhs`` with bound 0 instead of ``body`` with bound
    ``rhs``.
    """
    ev.load_x(x)
    if ev.objective_component is not None:
        f = ev.sense * pyo.value(ev.objective_component.expr)
        assert ev.objective(x) == pytest.approx(f, rel=1e-12, abs=1e-12)
    g = ev.constraints(x)
    for i, d in enumerate(ev.constraint_rows):
        body = pyo.value(d.body)
        lb, ub = d.lb, d.ub
        if ev.g_lb[i] > -np.inf:
            assert lb is not None, d.name
            assert g[i] - ev.g_lb[i] == pytest.approx(body - lb, rel=1e-12, abs=1e-12), d.name
        if ev.g_ub[i] < np.inf:
            assert ub is not None, d.name
            assert ev.g_ub[i] - g[i] == pytest.approx(ub - body, rel=1e-12, abs=1e-12), d.name
        if ev.g_lb[i] == -np.inf and ev.g_ub[i] == np.inf:     # pragma: no cover
            pytest.fail(f"row {d.name} has no bounds")
        # bounds of the same kind as Pyomo's
        assert (ev.g_lb[i] > -np.inf) == (lb is not None), d.name
        assert (ev.g_ub[i] < np.inf) == (ub is not None), d.name


def assert_derivatives(ev, x, seed=0):
    rep = check_derivatives(ev, x, seed=seed, **TIGHT)
    assert rep.ok, str(rep)
    # every quantity was actually compared
    assert "gradient" in rep and "hessian" in rep
    assert ("jacobian" in rep) == (ev.m > 0)
    return rep


def random_point(ev, scale=0.05, seed=1):
    rng = np.random.default_rng(seed)
    x = ev.x0 + scale * rng.uniform(-1, 1, ev.n) * np.maximum(1.0, np.abs(ev.x0))
    return np.clip(x, ev.x_lb, ev.x_ub)


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
def ops_model():
    """Scalar model using every supported operator (general path)."""
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=1.3, bounds=(0.5, 3))
    m.y = pyo.Var(initialize=0.7)
    m.z = pyo.Var(initialize=2.1)
    m.w = pyo.Var(initialize=-0.8)
    m.f = pyo.Var(initialize=1.7)
    m.f.fix()
    m.pm = pyo.Param(initialize=1.9, mutable=True)
    m.pi = pyo.Param(initialize=0.6)
    m.e = pyo.Expression(expr=m.x * m.y - m.z / m.x)
    m.e2 = pyo.Expression(expr=pyo.exp(m.e) + m.pm * m.f)
    m.c_arith = pyo.Constraint(expr=m.x + m.y - m.z * m.w + m.x / m.y - 3.0 <= 10)
    m.c_pow = pyo.Constraint(expr=m.x**3 + m.y**-2 + m.z**2.5 + m.x**m.y + m.pm**m.z
                             + m.z**m.pi + m.f**m.x == 4)
    m.c_fun = pyo.Constraint(expr=pyo.exp(m.w) + pyo.log(m.x) + pyo.log10(m.z)
                             + pyo.sqrt(m.x + m.z) + pyo.sin(m.y) + pyo.cos(m.w)
                             + pyo.tanh(m.y * m.z) >= -5)
    m.c_abs = pyo.Constraint(expr=abs(m.w)**3 + abs(m.x - m.z) + abs(m.y) * m.x <= 7)
    m.c_range = pyo.Constraint(expr=pyo.inequality(-1, m.e2 * m.f - m.pi * m.w**2, 20))
    m.c_named = pyo.Constraint(expr=m.e + m.e2 >= -10)
    m.c_neg = pyo.Constraint(expr=-(m.x - m.f)**2 + 1 / (m.x * m.y) <= m.pm)
    m.c_both = pyo.Constraint(expr=m.x * m.w >= m.y - m.z**2)
    m.o = pyo.Objective(expr=m.e**2 + (m.x - m.pi)**4 + m.y * m.z * m.w + m.f * m.pm * m.x
                        - pyo.log(m.z) * m.f)
    return m


def indexed_model(N=12):
    """Indexed model whose constraints are each written by one rule (templatizable)."""
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, N)
    m.I1 = pyo.RangeSet(1, N)
    m.x = pyo.Var(m.I, initialize=lambda m, i: 1 + 0.1 * i, bounds=(0.1, None))
    m.y = pyo.Var(m.I, initialize=lambda m, i: 0.5 + 0.05 * i)
    m.k = pyo.Var(initialize=0.7)
    m.pm = pyo.Param(m.I, mutable=True, initialize=lambda m, i: 1 + 0.2 * i)
    m.pi = pyo.Param(m.I, initialize=lambda m, i: 0.5 + 0.01 * i)
    m.h = pyo.Param(initialize=0.1)
    m.s = pyo.Param(initialize=2.0, mutable=True)
    m.x[0].fix()
    m.e = pyo.Expression(expr=m.k**2 + 1)
    m.ode = pyo.Constraint(m.I1, rule=lambda m, i: m.x[i] == m.x[i - 1] + m.h * (
        -m.k * m.x[i] * m.y[i] + m.pm[i] * pyo.sin(m.y[i - 1]) / m.e))
    m.alg = pyo.Constraint(m.I, rule=lambda m, i: (
        pyo.exp(m.y[i]) + pyo.log(m.x[i]) + pyo.log10(m.x[i] + 1) + pyo.sqrt(m.x[i])
        + pyo.cos(m.y[i]) * pyo.tanh(m.k) + m.x[i]**m.y[i] + abs(m.y[i] + 3)**1.5
        - m.pi[i] * m.y[i]**2 - i * m.y[i] >= -50))
    m.rng = pyo.Constraint(m.I, rule=lambda m, i: pyo.inequality(
        -5, m.x[i] * m.y[i] - m.s * m.pi[i], 5))
    m.lo = pyo.Constraint(m.I, rule=lambda m, i: m.pm[i] - 10 <= m.x[i] * m.k)
    m.o = pyo.Objective(expr=sum((m.x[i] - m.pm[i])**2 + 0.1 * (m.y[i] - m.pi[i])**2
                                 for i in m.I) + m.k**2)
    return m


def branching_model(N=6):
    """Indexed constraints whose rules branch on the index or skip rows."""
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(N)
    m.x = pyo.Var(m.I, initialize=lambda m, i: 0.1 * i + 0.3)
    m.q = pyo.Param(m.I, initialize=lambda m, i: 1.0 + i)
    m.p = pyo.Param(m.I, initialize=lambda m, i: 2.0 * i, mutable=True)

    def skip(m, i):
        if i == 1:
            return pyo.Constraint.Skip
        return m.x[i] == m.x[i - 1] + 0.1 * m.x[i]**2

    def branch(m, i):
        if i > 3:
            return m.x[i]**2 <= 10
        return pyo.exp(m.x[i]) <= 20

    def walk_set(m, i):
        if i == m.I.first():
            return m.x[i] >= 0
        return m.x[i] - m.x[m.I.prev(i)] <= m.q[i] * m.p[i]

    m.c_skip = pyo.Constraint(m.I, rule=skip)
    m.c_branch = pyo.Constraint(m.I, rule=branch)
    m.c_walk = pyo.Constraint(m.I, rule=walk_set)
    m.o = pyo.Objective(expr=sum((m.x[i] - 1)**2 for i in m.I))
    return m


# ---------------------------------------------------------------------------
# the derivative-checking kit can fail
# ---------------------------------------------------------------------------
class _Perturbed:
    """Wraps an evaluator and corrupts one derivative entry."""

    def __init__(self, ev, what, k=0, eps=1e-3):
        self._ev, self._what, self._k, self._eps = ev, what, k, eps

    def __getattr__(self, name):
        return getattr(self._ev, name)

    def _bump(self, v):
        v = np.array(v, dtype=float)
        v[self._k] += self._eps
        return v

    def gradient(self, x):
        g = self._ev.gradient(x)
        return self._bump(g) if self._what == "gradient" else g

    def jacobian(self, x):
        j = self._ev.jacobian(x)
        return self._bump(j) if self._what == "jacobian" else j

    def hessian(self, x, lam, obj_factor=1.0):
        h = self._ev.hessian(x, lam, obj_factor)
        return self._bump(h) if self._what == "hessian" else h

    def jacobian_dense(self, x):
        return PyomoNLPEvaluator.jacobian_dense(self, x)

    def hessian_dense(self, x, lam, obj_factor=1.0):
        return PyomoNLPEvaluator.hessian_dense(self, x, lam, obj_factor)


@pytest.mark.parametrize("what", ["gradient", "jacobian", "hessian"])
def test_kit_detects_wrong_derivatives(what):
    ev = PyomoNLPEvaluator(ops_model())
    x = ev.x0
    assert check_derivatives(ev, x, **TIGHT).ok
    bad = _Perturbed(ev, what, k=1)
    rep = check_derivatives(bad, x, **TIGHT)
    assert not rep.ok
    assert not rep[what].ok and rep[what].n_bad >= 1
    assert all(rep[q].ok for q in rep.checks if q not in (what, "hessian"))
    off = rep[what].offenders[0]
    assert abs(off.value - off.reference) == pytest.approx(1e-3, rel=1e-3)
    if what == "jacobian":
        r, c = ev.jacobian_structure()
        assert (off.row, off.col) == (r[1], c[1])
    assert "BAD" in str(rep) and what in str(rep)


def test_kit_detects_missing_hessian_entry_and_bad_structure():
    ev = PyomoNLPEvaluator(ops_model())

    class Upper(_Perturbed):
        def hessian_structure(self):
            r, c = self._ev.hessian_structure()
            return c, r                             # upper triangle: not allowed

    rep = check_derivatives(Upper(ev, "none"), ev.x0, **TIGHT)
    assert not rep["structure"].ok
    assert "lower triangle" in str(rep)


def test_check_gradient_and_jacobian_on_callables():
    x = np.array([0.3, -1.2, 2.0])
    f = lambda z: np.sum(np.sin(z) * z**2)                       # noqa: E731
    g = lambda z: np.cos(z) * z**2 + 2 * z * np.sin(z)           # noqa: E731
    assert check_gradient(f, g, x, **TIGHT).ok
    rep = check_gradient(f, lambda z: g(z) + np.array([0, 1e-4, 0]), x, **TIGHT)
    assert not rep.ok and rep["gradient"].offenders[0].row == 1
    F = lambda z: np.array([z[0] * z[1], np.exp(z[2]) - z[0]])   # noqa: E731
    J = lambda z: np.array([[z[1], z[0], 0], [-1, 0, np.exp(z[2])]])  # noqa: E731
    assert check_jacobian(F, J, x, **TIGHT).ok
    import scipy.sparse as sp
    assert check_jacobian(F, lambda z: sp.csr_matrix(J(z)), x, **TIGHT).ok
    rep = check_jacobian(F, lambda z: J(z) * np.array([[1, 1, 1], [1, 1, 0]]), x, **TIGHT)
    assert not rep.ok
    assert (rep["jacobian"].offenders[0].row, rep["jacobian"].offenders[0].col) == (1, 2)


# ---------------------------------------------------------------------------
# derivatives and values
# ---------------------------------------------------------------------------
def test_operators_general_path():
    m = ops_model()
    ev = PyomoNLPEvaluator(m)
    # scalar rows of different shapes: one family each, read from the stored expressions
    assert ev.stats["template_rows"] == ev.stats["general_rows"] == 0
    assert ev.stats["grouped_rows"] == ev.m == ev.stats["grouped_families"] == 8
    ev_g = PyomoNLPEvaluator(m, templatize=False)
    assert ev_g.stats["general_rows"] == 8 and ev_g.stats["grouped_rows"] == 0
    rep = check_consistency(ev, ev_g, random_point(ev, 0.1))
    assert rep.ok, str(rep)
    # the fixed variable is a constant, not a column
    assert ev.n == 4 and all(v is not m.f for v in ev.variables)
    for x in (ev.x0, random_point(ev, 0.1)):
        assert_derivatives(ev, x)
        assert_values_match_pyomo(ev, x)
    # ranged constraint keeps both bounds
    i = ev.constraint_rows.index(m.c_range)
    assert (ev.g_lb[i], ev.g_ub[i]) == (-1.0, 20.0)
    # a failed evaluation raises EvaluationError
    x = ev.x0.copy()
    x[ev.column(m.z)] = -1.0                       # log(z), z**2.5, log10(z)
    with pytest.raises(EvaluationError):
        ev.objective(x)
    with pytest.raises(EvaluationError):
        ev.constraints(x)


def test_mutable_param_and_fixed_value_are_read_at_build():
    m = ops_model()
    ev1 = PyomoNLPEvaluator(m)
    m.pm = 2.5
    m.f.fix(0.4)
    ev2 = PyomoNLPEvaluator(m)
    assert ev1.objective(ev1.x0) != ev2.objective(ev2.x0)
    assert_values_match_pyomo(ev2, ev2.x0)
    assert_derivatives(ev2, ev2.x0)


def test_indexed_rules_take_template_path():
    N = 12
    m = indexed_model(N)
    ev = PyomoNLPEvaluator(m)
    ev_g = PyomoNLPEvaluator(m, templatize=False)
    st = ev.stats
    assert st["fallbacks"] == []
    assert st["grouped_families"] == 4
    assert st["grouped_rows"] == ev.m == N + 3 * (N + 1)
    assert st["general_rows"] == st["template_rows"] == 0
    assert ev.column(m.k) >= 0
    with pytest.raises(KeyError):
        ev.column(m.x[0])                          # fixed: a constant, not a column
    for x in (ev.x0, random_point(ev, 0.1)):
        assert_derivatives(ev, x)
        assert_values_match_pyomo(ev, x)
    assert ev_g.stats["grouped_rows"] == 0 and ev_g.stats["general_rows"] == ev.m
    rep = check_consistency(ev, ev_g, random_point(ev, 0.1))
    assert rep.ok, str(rep)


def test_branching_and_skip_rules_take_general_path():
    m = branching_model(6)
    ev = PyomoNLPEvaluator(m)
    st = ev.stats
    # rows are grouped by the shape of their stored expressions, whatever the rule did
    assert st["fallbacks"] == [] and st["general_rows"] == 0
    assert st["grouped_rows"] == ev.m and st["grouped_families"] == 5
    assert ev.m == 5 + 6 + 6
    assert m.c_skip[2] in ev.constraint_rows and 1 not in m.c_skip
    for x in (ev.x0, random_point(ev, 0.2)):
        assert_derivatives(ev, x)
        assert_values_match_pyomo(ev, x)


def test_rules_that_cannot_be_templatized_fall_back():
    """Rules that would templatize *wrongly* if the index were taken as a number
    (set membership, Python containers, min/max, walking the set): the stored
    rows are what counts, and they agree with ``templatize=False``."""
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(6)
    m.S = pyo.Set(initialize=[2, 4])
    m.x = pyo.Var(m.I, initialize=lambda m, i: 0.2 * i)
    table = {i: float(i) for i in range(1, 7)}
    squares = [float(i)**2 for i in range(7)]
    rules = {
        "member_set": lambda m, i: m.x[i] == (2 if i in m.S else 1) * m.x[1]**2,
        "member_list": lambda m, i: m.x[i] == (2 if i in [2, 4] else 1) * m.x[1]**2,
        "list_item": lambda m, i: m.x[i]**2 <= squares[i],
        "dict_item": lambda m, i: m.x[i]**3 <= table.get(i, 0.0),
        "py_max": lambda m, i: pyo.exp(m.x[i]) <= max(i, 3),
        "set_last": lambda m, i: m.x[i] * m.x[1] <= m.I.last() - i + 1,
    }
    for name, rule in rules.items():
        m.add_component(name, pyo.Constraint(m.I, rule=rule))
    m.o = pyo.Objective(expr=sum((m.x[i] - 1)**2 for i in m.I))
    ev = PyomoNLPEvaluator(m)
    ev_g = PyomoNLPEvaluator(m, templatize=False)
    assert ev.stats["fallbacks"] == [] and ev.stats["grouped_rows"] == ev.m == 6 * len(rules)
    x = random_point(ev, 0.1)
    rep = check_consistency(ev, ev_g, x)
    assert rep.ok, str(rep)
    assert_values_match_pyomo(ev, x)
    assert_derivatives(ev, x)


def test_large_sum_objective():
    N = 400
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(N)
    m.x = pyo.Var(m.I, initialize=lambda m, i: math.sin(i))
    m.d = pyo.Param(m.I, initialize=lambda m, i: math.cos(i))
    m.wt = pyo.Param(m.I, initialize=lambda m, i: 1 + (i % 7), mutable=True)
    m.o = pyo.Objective(expr=sum(m.wt[i] * (m.x[i] - m.d[i])**2 + 0.01 * pyo.exp(-m.x[i])
                                 + (m.x[i] * m.x[i + 1] if i < N else 0) for i in m.I) + 3.0)
    ev = PyomoNLPEvaluator(m)
    assert ev.n == N and ev.m == 0
    x = random_point(ev, 0.2)
    assert_values_match_pyomo(ev, x)
    assert_derivatives(ev, x)
    # Hessian: diagonal plus the first off-diagonal, stored once (lower triangle)
    r, c = ev.hessian_structure()
    assert len(r) == 2 * N - 1 and np.all(r >= c)
    res, opt = solve(m)
    assert_optimal(res)
    assert np.linalg.norm(ev.gradient(np.array([v.value for v in ev.variables]))) < 1e-6


# ---------------------------------------------------------------------------
# known optima
# ---------------------------------------------------------------------------
def hs071():
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(4)
    m.x = pyo.Var(m.I, bounds=(1, 5), initialize={1: 1, 2: 5, 3: 5, 4: 1})
    x = m.x
    m.o = pyo.Objective(expr=x[1] * x[4] * (x[1] + x[2] + x[3]) + x[3])
    m.prod = pyo.Constraint(expr=x[1] * x[2] * x[3] * x[4] >= 25)
    m.sumsq = pyo.Constraint(expr=sum(x[i]**2 for i in m.I) == 40)
    return m


def test_hs071():
    m = hs071()
    add_suffixes(m)
    res, opt = solve(m)
    assert_optimal(res)
    assert pyo.value(m.o) == pytest.approx(17.0140173, abs=1e-6)
    assert [m.x[i].value for i in m.I] == pytest.approx([1.0, 4.743, 3.8211, 1.3794],
                                                          abs=1e-3)
    assert res.problem.upper_bound == pytest.approx(17.0140173, abs=1e-6)
    # multipliers of Ipopt's own HS071 example (same constraint bodies)
    assert m.dual[m.prod] == pytest.approx(-0.552293666, abs=1e-6)
    assert m.dual[m.sumsq] == pytest.approx(0.161468561, abs=1e-6)
    # x1 at its lower bound: z_L = 1.08787, others ~0
    assert m.ipopt_zL_out[m.x[1]] == pytest.approx(1.087871, abs=1e-5)
    assert abs(m.ipopt_zL_out[m.x[2]]) < 1e-6
    assert opt.last_info["iterations"] > 0


def rosenbrock(n, start):
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(n)
    m.x = pyo.Var(m.I, initialize=dict(enumerate(start, 1)))
    m.o = pyo.Objective(expr=sum(100 * (m.x[i + 1] - m.x[i]**2)**2 + (1 - m.x[i])**2
                                 for i in range(1, n)))
    return m


@pytest.mark.parametrize("n,start", [(2, [-1.2, 1.0]), (10, [0.0] * 10)])
def test_rosenbrock(n, start):
    m = rosenbrock(n, start)
    ev = PyomoNLPEvaluator(m)
    assert_derivatives(ev, ev.x0)
    res, opt = solve(m)
    assert_optimal(res)
    assert [m.x[i].value for i in m.I] == pytest.approx([1.0] * n, abs=1e-6)
    assert pyo.value(m.o) == pytest.approx(0.0, abs=1e-12)


def test_active_variable_bounds_and_bound_multipliers():
    # min (x-2)^2 + (y+1)^2 + (z-0.5)^2, 0 <= x <= 1, y >= 0, 0 <= z <= 1
    # optimum x=1 (upper bound), y=0 (lower bound), z=0.5 (inactive).
    # stationarity: 2(x-2) + z_U,x = 0  -> z_U,x = 2, reported as -2;
    #               2(y+1) - z_L,y = 0  -> z_L,y = 2.
    m = pyo.ConcreteModel()
    m.x = pyo.Var(bounds=(0, 1), initialize=0.5)
    m.y = pyo.Var(bounds=(0, None), initialize=1.0)
    m.z = pyo.Var(bounds=(0, 1), initialize=0.2)
    m.o = pyo.Objective(expr=(m.x - 2)**2 + (m.y + 1)**2 + (m.z - 0.5)**2)
    add_suffixes(m)
    res, _ = solve(m)
    assert_optimal(res)
    assert (m.x.value, m.y.value, m.z.value) == pytest.approx((1, 0, 0.5), abs=1e-7)
    assert m.ipopt_zU_out[m.x] == pytest.approx(-2.0, abs=1e-6)
    assert m.ipopt_zL_out[m.y] == pytest.approx(2.0, abs=1e-6)
    for v in (m.z,):
        assert abs(m.ipopt_zL_out[v]) < 1e-7 and abs(m.ipopt_zU_out[v]) < 1e-7
    assert abs(m.ipopt_zL_out[m.x]) < 1e-7 and abs(m.ipopt_zU_out[m.y]) < 1e-7


def test_maximization():
    # max 3 - (x-1)^2 - (y-2)^2 s.t. x + y <= 2: projection of (1, 2) onto
    # x + y = 2 is (0.5, 1.5), value 3 - 0.25 - 0.25 = 2.5.
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=0.0)
    m.y = pyo.Var(initialize=0.0)
    m.o = pyo.Objective(expr=3 - (m.x - 1)**2 - (m.y - 2)**2, sense=pyo.maximize)
    m.c = pyo.Constraint(expr=m.x + m.y <= 2)
    ev = PyomoNLPEvaluator(m)
    assert ev.sense == -1.0
    assert ev.objective(ev.x0) == pytest.approx(-(3 - 1 - 4))     # minimization form
    assert_derivatives(ev, ev.x0)
    res, opt = solve(m)
    assert_optimal(res)
    # (Ipopt relaxes constraint bounds by bound_relax_factor = 1e-8)
    assert (m.x.value, m.y.value) == pytest.approx((0.5, 1.5), abs=1e-7)
    assert pyo.value(m.o) == pytest.approx(2.5, abs=1e-7)
    assert opt.last_info["objective"] == pytest.approx(pyo.value(m.o), abs=1e-12)
    assert res.problem.lower_bound == pytest.approx(pyo.value(m.o), abs=1e-12)
    assert res.problem.sense == pyo.maximize


# ---------------------------------------------------------------------------
# duals
# ---------------------------------------------------------------------------
def dual_model(maximize, upper_form):
    """min x^2 + y^2  s.t.  x + y >= 1,  x - y == 0.2   (or the max of the negative).

    Solution: x + y = 1 and x - y = 0.2 give x = 0.6, y = 0.4.
    With L = s f + l1 c1 + l2 c2 (s f = x^2 + y^2 in both senses) and Pyomo's
    bodies c1 = x + y (lower bound 1), c2 = x - y:
        dL/dx = 2x + l1 + l2 = 0  ->  1.2 + l1 + l2 = 0
        dL/dy = 2y + l1 - l2 = 0  ->  0.8 + l1 - l2 = 0
    so l1 = -1 (<= 0: active lower bound) and l2 = -0.2.
    Written as 1 - x - y <= 0 (``upper_form``) the body is 1 - x - y, whose
    gradient is the negative: l1 = +1 (>= 0: active upper bound).
    """
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=3.0)
    m.y = pyo.Var(initialize=-2.0)
    f = m.x**2 + m.y**2
    if maximize:
        m.o = pyo.Objective(expr=-f, sense=pyo.maximize)
    else:
        m.o = pyo.Objective(expr=f)
    m.c1 = pyo.Constraint(expr=(1 - m.x - m.y <= 0) if upper_form else (m.x + m.y >= 1))
    m.c2 = pyo.Constraint(expr=m.x - m.y == 0.2)
    add_suffixes(m)
    return m


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("upper_form", [False, True])
def test_duals_against_hand_kkt(maximize, upper_form):
    m = dual_model(maximize, upper_form)
    res, _ = solve(m)
    assert_optimal(res)
    assert (m.x.value, m.y.value) == pytest.approx((0.6, 0.4), abs=1e-7)
    assert pyo.value(m.o) == pytest.approx(-0.52 if maximize else 0.52, abs=1e-7)
    assert m.dual[m.c1] == pytest.approx(1.0 if upper_form else -1.0, abs=1e-7)
    assert m.dual[m.c2] == pytest.approx(-0.2, abs=1e-7)
    assert set(m.dual.keys()) == {m.c1, m.c2}


# ---------------------------------------------------------------------------
# consistency: indexed rule / scalar constraints / templatize=False
# ---------------------------------------------------------------------------
N_CONS = 6


def consistency_model(kind):
    """min sum (x_i - 3)^2 + (y_i - 2)^2
       s.t. -x_i - y_i^2 >= -a_i       (Pyomo stores  -a_i <= -x_i - y_i^2)
            0.1 i == x_i - 0.5 y_i     (variables on the right only)
            x_i * y_i <= 4 + i
    ``kind='indexed'``: one rule per constraint; ``'scalar'``: 3N scalar
    constraints named c_i, d_i, e_i.
    """
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(N_CONS)
    m.x = pyo.Var(m.I, initialize=1.0)
    m.y = pyo.Var(m.I, initialize=1.0, bounds=(-5, None))
    m.a = pyo.Param(m.I, initialize=lambda m, i: 1 + 0.3 * i)
    c = lambda m, i: -m.x[i] - m.y[i]**2 >= -m.a[i]        # noqa: E731
    d = lambda m, i: 0.1 * i == m.x[i] - 0.5 * m.y[i]       # noqa: E731
    e = lambda m, i: m.x[i] * m.y[i] <= 4 + i               # noqa: E731
    if kind == "indexed":
        m.c = pyo.Constraint(m.I, rule=c)
        m.d = pyo.Constraint(m.I, rule=d)
        m.e = pyo.Constraint(m.I, rule=e)
    else:
        for i in m.I:
            for name, rule in (("c", c), ("d", d), ("e", e)):
                m.add_component(f"{name}_{i}", pyo.Constraint(expr=rule(m, i)))
    m.o = pyo.Objective(expr=sum((m.x[i] - 3)**2 + (m.y[i] - 2)**2 for i in m.I))
    add_suffixes(m)
    return m


def _row_key(d):
    """'c[3]' and 'c_3' -> 'c_3'."""
    return d.name.replace("[", "_").rstrip("]")


def _var_key(v):
    return v.name


def test_indexed_scalar_and_general_forms_agree():
    ma, mb, mc = (consistency_model(k) for k in ("indexed", "scalar", "indexed"))
    eva, evb = PyomoNLPEvaluator(ma), PyomoNLPEvaluator(mb)
    evc = PyomoNLPEvaluator(mc, templatize=False)
    assert eva.stats["grouped_rows"] == 3 * N_CONS == evb.stats["grouped_rows"]
    assert evc.stats["grouped_rows"] == 0 and evc.stats["general_rows"] == 3 * N_CONS

    # evaluator values and derivatives, at the start and at a random point
    for x in (eva.x0, random_point(eva, 0.3)):
        rep = check_consistency(eva, evb, x, var_key=_var_key, row_key=_row_key)
        assert rep.ok, str(rep)
        rep = check_consistency(eva, evc, x, var_key=_var_key, row_key=_row_key)
        assert rep.ok, str(rep)
        rep = check_consistency(eva, PyomoNLPEvaluator(ma, templatize=False), x)
        assert rep.ok, str(rep)
        assert_derivatives(eva, x)

    ra, _ = solve(ma)
    rb, _ = solve(mb)
    rc, _ = solve(mc, templatize=False)
    for r in (ra, rb, rc):
        assert_optimal(r)
    val = lambda m: {v.name: v.value for v in m.component_data_objects(pyo.Var)}  # noqa
    va, vb, vc = val(ma), val(mb), val(mc)
    for k in va:
        assert vb[k] == pytest.approx(va[k], abs=1e-8)
        assert vc[k] == pytest.approx(va[k], abs=1e-8)
    duals = lambda m: {_row_key(c): m.dual[c] for c in m.dual}   # noqa: E731
    da, db, dc = duals(ma), duals(mb), duals(mc)
    assert set(da) == set(db) == set(dc) and len(da) == 3 * N_CONS
    for k in da:
        assert db[k] == pytest.approx(da[k], abs=1e-7), k
        assert dc[k] == pytest.approx(da[k], abs=1e-7), k
    # the c rows are active with the documented sign (lower bound -> dual <= 0)
    assert any(da[f"c_{i}"] < -1e-3 for i in ma.I)
    assert all(da[f"c_{i}"] < 1e-8 for i in ma.I)


def test_two_dimensional_index_with_strings():
    """Constraint over (i, species) with species names: templatized and general agree."""
    species = ["A", "B", "C2"]
    N = 8

    def build():
        m = pyo.ConcreteModel()
        m.T = pyo.RangeSet(0, N)
        m.T1 = pyo.RangeSet(1, N)
        m.S = pyo.Set(initialize=species, ordered=True)
        m.c = pyo.Var(m.T, m.S, initialize=1.0, bounds=(0, None))
        m.k = pyo.Var(m.S, initialize=lambda m, s: 0.5 + 0.1 * len(s))
        m.c0 = pyo.Param(m.S, initialize={"A": 1.0, "B": 0.5, "C2": 0.2})
        m.data = pyo.Param(m.T, m.S, initialize=lambda m, t, s: m.c0[s] * math.exp(-0.3 * t))
        for s in m.S:
            m.c[0, s].fix(m.c0[s])
        m.ode = pyo.Constraint(m.T1, m.S, rule=lambda m, t, s: (
            m.c[t, s] == m.c[t - 1, s] - 0.1 * m.k[s] * m.c[t, s] ** 1.5))
        m.o = pyo.Objective(expr=sum((m.c[t, s] - m.data[t, s])**2 for t in m.T for s in m.S))
        add_suffixes(m)
        return m

    m1, m2 = build(), build()
    ev1 = PyomoNLPEvaluator(m1)
    ev2 = PyomoNLPEvaluator(m2, templatize=False)
    assert ev1.stats["grouped_rows"] == N * len(species) and ev1.stats["fallbacks"] == []
    assert ev2.stats["general_rows"] == N * len(species)
    x = random_point(ev1, 0.2)
    assert_derivatives(ev1, x)
    assert_values_match_pyomo(ev1, x)
    rep = check_consistency(ev1, ev2, x, var_key=_var_key, row_key=_row_key)
    assert rep.ok, str(rep)
    r1, _ = solve(m1)
    r2, _ = solve(m2, templatize=False)
    assert_optimal(r1)
    assert_optimal(r2)
    for s in species:
        assert m1.k[s].value == pytest.approx(m2.k[s].value, abs=1e-8)
        for t in m1.T1:
            assert m1.dual[m1.ode[t, s]] == pytest.approx(m2.dual[m2.ode[t, s]], abs=1e-8)


def ode_model(N=20):
    """Implicit Euler for x' = -k x with a split state z[t, j] (sum rule)."""
    m = pyo.ConcreteModel()
    m.T = pyo.RangeSet(0, N)
    m.T1 = pyo.RangeSet(1, N)
    m.J = pyo.Set(initialize=["a", "b"])
    m.x = pyo.Var(m.T, initialize=1.0)
    m.z = pyo.Var(m.T, m.J, initialize=0.5)
    m.k = pyo.Var(initialize=0.5, bounds=(0, 5))
    m.d = pyo.Param(m.T, initialize=lambda m, t: math.exp(-0.7 * 0.1 * t) + 0.01 * math.sin(t),
                    mutable=True)
    m.x[0].fix(1.0)
    m.ode = pyo.Constraint(m.T1, rule=lambda m, t: m.x[t] == m.x[t - 1] - 0.1 * m.k * m.x[t])
    m.split = pyo.Constraint(m.T, rule=lambda m, t: sum(m.z[t, j] for j in m.J) == m.x[t])
    m.pos = pyo.Constraint(m.T, m.J, rule=lambda m, t, j: m.z[t, j] >= 0.1 * m.x[t])
    m.o = pyo.Objective(expr=sum((m.x[t] - m.d[t])**2 for t in m.T)
                        + 1e-3 * sum((m.z[t, "a"] - m.z[t, "b"])**2 for t in m.T))
    add_suffixes(m)
    return m


def test_templatize_constraints_module_flag():
    import pyomo.core.base.constraint as pcon
    if not hasattr(pcon, "TEMPLATIZE_CONSTRAINTS"):      # pragma: no cover - Pyomo < 6.9
        pytest.skip("Pyomo has no TEMPLATIZE_CONSTRAINTS flag")
    old = pcon.TEMPLATIZE_CONSTRAINTS
    try:
        pcon.TEMPLATIZE_CONSTRAINTS = True
        mt = ode_model()
        assert type(mt.ode[1]).__name__ == "TemplateConstraintData"   # the flag is effective
        evt = PyomoNLPEvaluator(mt)
        rt, _ = solve(mt)
    finally:
        pcon.TEMPLATIZE_CONSTRAINTS = old
    m = ode_model()
    ev = PyomoNLPEvaluator(m)
    # 'ode' and 'pos' are stored as templates and evaluated from them; 'split' is
    # stored as a template sum, which is instantiated row by row from the stored template
    assert [n for n, _ in evt.stats["fallbacks"]] == ["split"]
    assert evt.stats["template_rows"] == len(mt.ode) + len(mt.pos)
    assert evt.stats["grouped_rows"] == len(mt.split)
    assert ev.stats["template_rows"] == 0 and ev.stats["grouped_rows"] == ev.m
    x = random_point(ev, 0.1)
    rep = check_consistency(ev, evt, x, var_key=_var_key, row_key=_row_key)
    assert rep.ok, str(rep)
    r, _ = solve(m)
    assert_optimal(rt)
    assert_optimal(r)
    assert mt.k.value == pytest.approx(m.k.value, abs=1e-8)
    assert 0.5 < m.k.value < 1.0
    for t in m.T1:
        assert mt.x[t].value == pytest.approx(m.x[t].value, abs=1e-8)
        assert mt.dual[mt.ode[t]] == pytest.approx(m.dual[m.ode[t]], abs=1e-8)


# ---------------------------------------------------------------------------
# options and output
# ---------------------------------------------------------------------------
def test_options_pass_through():
    m = rosenbrock(2, [-1.2, 1.0])
    res, opt = solve(m, options={"max_iter": 2})
    assert res.solver.termination_condition == TerminationCondition.maxIterations
    assert opt.last_info["iterations"] == 2
    # options given to the constructor are used too; solve() options override
    opt = pyo.SolverFactory(SOLVER, options={"max_iter": 3})
    res = opt.solve(rosenbrock(2, [-1.2, 1.0]))
    assert res.solver.termination_condition == TerminationCondition.maxIterations
    assert opt.last_info["iterations"] == 3
    res = opt.solve(rosenbrock(2, [-1.2, 1.0]), options={"max_iter": 500})
    assert_optimal(res)
    # the Pyomo idiom solver.options[...] = ...
    opt = pyo.SolverFactory(SOLVER)
    opt.options["max_iter"] = 4
    res = opt.solve(rosenbrock(2, [-1.2, 1.0]))
    assert res.solver.termination_condition == TerminationCondition.maxIterations
    assert opt.last_info["iterations"] == 4
    # an intermediate callback returning False stops Ipopt
    seen = []

    def stop_at_3(**info):
        seen.append(info["iter_count"])
        return info["iter_count"] < 3

    res = pyo.SolverFactory(SOLVER).solve(rosenbrock(2, [-1.2, 1.0]),
                                           intermediate_callback=stop_at_3)
    assert res.solver.termination_condition == TerminationCondition.userInterrupt
    assert seen == [0, 1, 2, 3]
    # an unknown option is an error naming it, not silently ignored
    with pytest.raises(ValueError, match="no_such_option"):
        pyo.SolverFactory(SOLVER).solve(rosenbrock(2, [-1.2, 1.0]),
                                        options={"no_such_option": 1})
    # a wrong value type too
    with pytest.raises(ValueError, match="max_iter"):
        pyo.SolverFactory(SOLVER).solve(rosenbrock(2, [-1.2, 1.0]),
                                        options={"max_iter": "many"})


def test_tee_shows_ipopt_log(capfd):
    capfd.readouterr()
    res, _ = solve(rosenbrock(2, [-1.2, 1.0]), tee=True)
    assert_optimal(res)
    out = capfd.readouterr().out
    assert "Ipopt" in out
    assert "iter    objective" in out
    assert "EXIT: Optimal Solution Found" in out
    lines = [ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "e" in ln]
    assert len(lines) >= 5                                     # iteration lines


def test_tee_false_prints_nothing(capfd, caplog):
    capfd.readouterr()
    # a rule that walks the index set makes Pyomo's templatizer log an ERROR
    # before the evaluator falls back to the general path: not shown
    with caplog.at_level(logging.DEBUG):
        res, _ = solve(branching_model(5), tee=False)
    assert_optimal(res)
    out, err = capfd.readouterr()
    assert out == ""
    assert err == ""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_load_solutions_false_leaves_model_unchanged():
    m = rosenbrock(2, [-1.2, 1.0])
    res, opt = solve(m, load_solutions=False)
    assert_optimal(res)
    assert (m.x[1].value, m.x[2].value) == (-1.2, 1.0)
    assert opt.last_info["raw"].x == pytest.approx([1.0, 1.0], abs=1e-6)


# ---------------------------------------------------------------------------
# failures are clean
# ---------------------------------------------------------------------------
class _CountingEvaluator:
    """Delegates to an evaluator and counts EvaluationErrors."""

    def __init__(self, ev):
        self._ev = ev
        self.errors = 0

    def __getattr__(self, name):
        attr = getattr(self._ev, name)
        if name not in ("objective", "gradient", "constraints", "jacobian", "hessian"):
            return attr

        def call(*args):
            try:
                return attr(*args)
            except EvaluationError:
                self.errors += 1
                raise
        return call


def test_log_domain_backoff():
    # min x - 2 log(x): Newton from x0 = 6 proposes 2x - x^2/2 = -6 < 0, where
    # log is undefined; Ipopt must reject the step and back off.  x* = 2.
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=6.0)
    m.o = pyo.Objective(expr=m.x - 2 * pyo.log(m.x))
    ev = _CountingEvaluator(PyomoNLPEvaluator(m))
    r = solve_with_ipopt(ev, options={"tol": 1e-10})
    assert r.status_name == "Solve_Succeeded"
    assert ev.errors >= 1
    assert r.x[0] == pytest.approx(2.0, abs=1e-8)
    res, _ = solve(m)
    assert_optimal(res)
    assert m.x.value == pytest.approx(2.0, abs=1e-8)
    assert pyo.value(m.o) == pytest.approx(2 - 2 * math.log(2), abs=1e-10)


def test_exp_overflow_backoff():
    # min exp(x) - 1000 x from x0 = 0: the Newton step goes to x = 999 where
    # exp overflows; x* = log(1000).
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=0.0)
    m.o = pyo.Objective(expr=pyo.exp(m.x) - 1000 * m.x)
    ev = _CountingEvaluator(PyomoNLPEvaluator(m))
    r = solve_with_ipopt(ev, options={"tol": 1e-10})
    assert r.status_name == "Solve_Succeeded"
    assert ev.errors >= 1
    res, _ = solve(m)
    assert_optimal(res)
    assert m.x.value == pytest.approx(math.log(1000), abs=1e-8)


@pytest.mark.parametrize("where", ["objective", "constraint"])
def test_nan_at_start_is_a_termination_condition(where):
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=-1.0)
    m.y = pyo.Var(initialize=1.0)
    if where == "objective":
        m.o = pyo.Objective(expr=pyo.log(m.x) + m.x**2 + m.y**2)
    else:
        m.o = pyo.Objective(expr=m.y**2 + m.x**2)
        m.c = pyo.Constraint(expr=pyo.sqrt(m.x) + m.y >= 1)
    res, opt = solve(m)                       # no exception
    tc = res.solver.termination_condition
    assert tc not in (TerminationCondition.optimal, TerminationCondition.locallyOptimal)
    assert tc == TerminationCondition.internalSolverError
    assert res.solver.status != SolverStatus.ok
    assert opt.last_info["status"] == "Invalid_Number_Detected"


@pytest.mark.parametrize("domain", [pyo.Integers, pyo.Binary, pyo.NonNegativeIntegers])
def test_integer_variable_rejected(domain):
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=1.0)
    m.count = pyo.Var([1, 2], domain=domain, initialize=1)
    m.o = pyo.Objective(expr=m.x**2 + m.count[2]**2)
    with pytest.raises(UnsupportedModelError, match=r"count\[2\]"):
        PyomoNLPEvaluator(m)
    with pytest.raises(UnsupportedModelError, match=r"count\[2\]"):
        pyo.SolverFactory(SOLVER).solve(m)
    m.count[2].fix(1)                          # fixed: a constant, fine
    res, _ = solve(m)
    assert_optimal(res)


def test_external_function_rejected_with_constraint_name():
    from pyomo.core.base.external import ExternalFunction
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=1.0)
    m.ext = ExternalFunction(lambda a: a**2)
    m.o = pyo.Objective(expr=m.x**2)
    m.c_ext = pyo.Constraint(expr=m.ext(m.x) <= 3)
    with pytest.raises(UnsupportedModelError, match="c_ext") as err:
        PyomoNLPEvaluator(m)
    assert "ext" in str(err.value) and "External" in str(err.value)
    with pytest.raises(UnsupportedModelError, match="c_ext"):
        pyo.SolverFactory(SOLVER).solve(m)


def test_logical_constraint_rejected_with_name():
    m = pyo.ConcreteModel()
    m.x = pyo.Var(initialize=1.0)
    m.Y = pyo.BooleanVar([1, 2])
    m.o = pyo.Objective(expr=m.x**2)
    m.my_logic = pyo.LogicalConstraint(expr=m.Y[1].implies(m.Y[2]))
    with pytest.raises(UnsupportedModelError, match="my_logic"):
        PyomoNLPEvaluator(m)
    m.my_logic.deactivate()
    res, _ = solve(m)
    assert_optimal(res)


def test_missing_cyipopt_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "cyipopt", None)
    with pytest.raises(ImportError, match="pip install cyipopt-wheels"):
        cyipopt_adapter.import_cyipopt()
    opt = pyo.SolverFactory(SOLVER)
    assert opt.available() is False
    with pytest.raises(ImportError, match="pip install cyipopt-wheels"):
        opt.solve(rosenbrock(2, [-1.2, 1.0]))


# ---------------------------------------------------------------------------
# user scaling through the `scaling_factor` Suffix
# ---------------------------------------------------------------------------
def _well_scaled():
    m = pyo.ConcreteModel()
    m.X = pyo.Var(initialize=0.5, bounds=(0, 5))
    m.Y = pyo.Var(initialize=0.5)
    m.c = pyo.Constraint(expr=m.X * m.Y >= 3)
    m.o = pyo.Objective(expr=(m.X - 1) ** 2 + (m.Y - 2) ** 2 + pyo.exp(0.1 * m.X * m.Y))
    return m


def _badly_scaled(where):
    """The same problem in x = X/1e5, y = 1e4·Y, constraint divided by 10; with the factors
    (1e5, 1e-4, 10) on a `scaling_factor` Suffix (on the model, or on the sub-block that holds
    the components) Ipopt sees exactly the well-scaled problem."""
    m = pyo.ConcreteModel()
    m.b = pyo.Block()
    m.b.x = pyo.Var(initialize=0.5e-5, bounds=(0, 5e-5))
    m.b.y = pyo.Var(initialize=0.5e4)
    m.b.c = pyo.Constraint(expr=m.b.x * m.b.y >= 0.3)
    m.o = pyo.Objective(expr=(1e5 * m.b.x - 1) ** 2 + (1e-4 * m.b.y - 2) ** 2 + pyo.exp(m.b.x * m.b.y))
    if where is not None:
        blk = m if where == "model" else m.b
        blk.scaling_factor = pyo.Suffix(direction=pyo.Suffix.EXPORT)
        blk.scaling_factor[m.b.x] = 1e5
        blk.scaling_factor[m.b.y] = 1e-4
        blk.scaling_factor[m.b.c] = 10.0
    return m


def _solve(m, **options):
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    s = pyo.SolverFactory("odeest_ipopt")
    s.solve(m, options={"tol": 1e-10, **options})
    assert s.last_info["status"] == "Solve_Succeeded"
    return s.last_info["iterations"], np.array([v.value for v in m.component_data_objects(pyo.Var)]), \
        list(m.dual.values())[0]


@pytest.mark.parametrize("where", ["model", "block"])
def test_scaling_factor_suffix_reaches_ipopt(where):
    it_ref, (X, Y), lam_ref = _solve(_well_scaled(), nlp_scaling_method="none")
    it_raw, _, _ = _solve(_badly_scaled(None), nlp_scaling_method="none")
    it, (x, y), lam = _solve(_badly_scaled(where))
    assert it == it_ref != it_raw              # Ipopt walks the well-scaled problem's path
    assert abs(1e5 * x / X - 1) < 1e-6 and abs(1e-4 * y / Y - 1) < 1e-6
    assert abs(lam / (10 * lam_ref) - 1) < 1e-6   # duals of the unscaled constraint body


def test_scaling_factor_must_be_positive():
    m = _badly_scaled("model")
    m.scaling_factor[m.b.c] = -1.0
    with pytest.raises(ValueError, match=r"scaling_factor of constraint 'b.c' is -1.0"):
        pyo.SolverFactory("odeest_ipopt").solve(m)


def _hs071_scaled(k):
    m = pyo.ConcreteModel()
    m.x = pyo.Var([1, 2, 3, 4], bounds=(1, 5), initialize={1: 1, 2: 5, 3: 5, 4: 1})
    m.c1 = pyo.Constraint(expr=1e3 * m.x[1] * m.x[2] * m.x[3] * m.x[4] >= 25e3)
    m.c2 = pyo.Constraint(expr=sum(m.x[i] ** 2 for i in m.x) == 40)
    m.o = pyo.Objective(expr=k * (m.x[1] * m.x[4] * (m.x[1] + m.x[2] + m.x[3]) + m.x[3]))
    return m


@pytest.mark.parametrize("k", [1.0, 1e4])
def test_missing_factors_follow_ipopts_gradient_based_rule(k):
    """With unit variable factors and no constraint/objective factors, the fill-in rule
    reproduces Ipopt's own default scaling exactly: same factors (100/max gradient when it
    exceeds 100), same iterations, bit-identical solution."""
    from pyomo_odeest.nlp._cyipopt_adapter import gradient_based_scaling
    ev = PyomoNLPEvaluator(_hs071_scaled(k))
    of, gf = gradient_based_scaling(ev, ev.x0, np.ones(4))
    assert of == pytest.approx(min(1.0, 100.0 / (k * 12.0)))     # ∇f(x0) = k·(12, 1, 2, 3)
    assert gf == pytest.approx([100.0 / 25e3, 1.0])              # ∇c1(x0) = 1e3·(25, 5, 5, 25)
    r_ipopt = solve_with_ipopt(ev, options={"tol": 1e-10})
    r_fill = solve_with_ipopt(PyomoNLPEvaluator(_hs071_scaled(k)), options={"tol": 1e-10},
                              x_scaling=np.ones(4))
    assert r_fill.iterations == r_ipopt.iterations
    assert np.array_equal(r_fill.x, r_ipopt.x)
    assert r_fill.obj / k == pytest.approx(17.0140173, abs=1e-6)
