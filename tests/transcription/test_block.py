"""The Pyomo block of the schemes and simultaneous estimation [GM-grad, eq. (2)]."""

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest
from pyomo.core.expr.visitor import identify_variables

import pyomo_odeest as po
from pyomo_odeest import build_block, scheme_constraint
from pyomo_odeest.transcription import add_objective_term
from pyomo_odeest import make_grid
from pyomo_odeest.models import LV_P0, lotka_volterra_data, lotka_volterra_problem
from pyomo_odeest import PyomoNLPEvaluator, estimate_simultaneous, initialize_block


SCHEMES = ["adams_pc", "adams_moulton", "enright", "semi_implicit_enright"]


def nonautonomous_problem():
    """x' = -a x + sin(b t) y, y' = -x y / (1 + x^2): exercises t, division, sin."""
    t = np.linspace(0.5, 3.0, 6)
    data = pd.DataFrame({"x": np.cos(t), "y": 1 + 0.1 * t}, index=t)
    return po.EstimationProblem(
        states=["x", "y"], parameters=[po.Parameter("a", 0.7), po.Parameter("b", 1.3)],
        rhs=lambda x, u, t: [-u.a * x.x + pyo.sin(u.b * t) * x.y, -x.x * x.y / (1 + x.x**2)],
        initial={"x": 1.0, "y": 0.5}, data=data)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("qmax", [2, 4, 5])
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_block_matches_step_by_step_simulation(scheme, qmax, jitter):
    """States of an independent simulation satisfy every block constraint to 1e-10."""
    prob = nonautonomous_problem()
    grid = make_grid(prob.meas_times, t0=0.0, T=prob.T, steps_per_interval=4, jitter=jitter, seed=3)
    b = build_block(prob, scheme, qmax, grid=grid)
    m = pyo.ConcreteModel()
    m.est = b
    u = np.array([0.9, 1.7])
    for p, v in zip(prob.parameter_names, u):
        b.u[p].set_value(v)
    assert initialize_block(b, u, init="simulate") == "simulate"
    ev = PyomoNLPEvaluator(m)
    x = np.array([v.value for v in ev.variables])
    assert np.array_equal(ev.g_lb, ev.g_ub)            # all equations
    c = ev.constraints(x) - ev.g_lb
    scale = 1 + np.abs(x).max()
    assert np.max(np.abs(c)) / scale < 1e-10
    # and the simulation is not trivially zero: perturbing one state breaks a row
    j = ev.column(b.x[len(grid.t) // 2, "x"])
    x2 = x.copy()
    x2[j] += 1e-3
    assert np.max(np.abs(ev.constraints(x2) - ev.g_lb)) > 1e-5


def test_the_start_simulation_lambdifies_once_per_problem(monkeypatch):
    """The scheme's start simulation of every block and round reads f, ḟ and their
    Jacobians lambdified once per problem; the functions take the parameters of each
    call (two parameter vectors, two right-hand sides)."""
    from pyomo_odeest.transcription import _initialize
    prob = lotka_volterra_problem(p0=(1.0, 1.0, 1.0, 1.0))
    calls = []
    real = _initialize.lambdify
    monkeypatch.setattr(_initialize, "lambdify", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = _initialize.numeric_functions(prob, prob.u0)
    assert len(calls) == 4
    b = _initialize.numeric_functions(prob, 2 * prob.u0)
    assert len(calls) == 4
    x = np.array([1.0, 2.0])
    fa, fb = prob.numeric_rhs()(x, prob.u0, 0.3), prob.numeric_rhs()(x, 2 * prob.u0, 0.3)
    assert np.allclose(a["f"](x, 0.3), fa) and np.allclose(b["f"](x, 0.3), fb)
    assert not np.allclose(fa, fb)
    grid = make_grid(prob.meas_times, t0=0.0, T=prob.T, steps_per_interval=4)
    X = _initialize.simulate(prob, "enright", grid, prob.u0)
    assert len(calls) == 4 and np.all(np.isfinite(X))


def test_auto_start_judges_a_simulation_by_the_values_it_predicts():
    """States of size 1000 observed through y = 0.001·x (PEtab's scaled outputs): the
    simulation predicts the data's scale, so the block starts from it, not from the
    data (which would start 1e8 from feasibility); a simulation that predicts values
    far beyond the data (a wrong start) falls back."""
    t = np.linspace(0, 5, 11)
    data = pd.DataFrame({"y": np.exp(-0.3 * t)}, index=t)

    def problem(k):
        return po.EstimationProblem(
            ["x"], [po.Parameter("k", k)], rhs=lambda x, u, t: [-u.k * x.x],
            initial={"x": 1000.0}, data=data, observe=lambda x, u, t: {"y": 0.001 * x.x})
    b = build_block(problem(0.3), "adams_pc", 3, None, None, 10)
    assert initialize_block(b, np.array([0.3]), init="auto") == "simulate"
    b = build_block(problem(-1.5), "adams_pc", 3, None, None, 10)
    assert initialize_block(b, np.array([-1.5]), init="auto") != "simulate"


def test_block_components_are_named_and_vectorised():
    prob = lotka_volterra_problem()
    b = build_block(prob, "adams_pc", 4, steps_per_interval=5)
    m = pyo.ConcreteModel()
    m.est = b
    k = len(b.grid.t) - 1
    # every step has an x-equation and a predictor equation per state
    for i in (0, 1, 2, k - 1):
        for s in ("x1", "x2"):
            assert scheme_constraint(b, i, s).active
            assert scheme_constraint(b, i, s, "y").active
    assert scheme_constraint(b, -1, "x1") is b.x0_eq["x1"]
    assert b.find_component("ode_x_x1_q3") is not None
    with pytest.raises(KeyError, match="no x-stage equation of step"):
        scheme_constraint(b, k + 5, "x1")
    ev = PyomoNLPEvaluator(m)
    # every row is evaluated from its stored template or stored expression, in a
    # family of rows of the same shape: a handful of families for all the scheme rows
    st = ev.stats
    assert st["general_rows"] == 0 and st["grouped_rows"] + st["template_rows"] == ev.m
    assert st["template_rows"] >= 2 * 2 * (k - 2)
    assert st["grouped_families"] + st["template_families"] <= 20 < 2 * 2 * (k - 2)



@pytest.mark.parametrize("scheme", ["adams_pc", "semi_implicit_enright"])
def test_templated_rows_read_as_ordinary_rows(scheme):
    """Rows are stored as templates (one rule call per component); every way of
    reading a row renders that row's own expression, and a cloned model's rows
    use the clone's components."""
    prob = nonautonomous_problem()
    grid = make_grid(prob.meas_times, t0=0.0, T=prob.T, steps_per_interval=4, jitter=0.3, seed=3)
    m = pyo.ConcreteModel()
    m.est = b = build_block(prob, scheme, 4, grid=grid)
    initialize_block(b, prob.u0, init="simulate")
    k = len(grid.t) - 1
    con = scheme_constraint(b, k - 2, "x")
    assert type(con).__name__ == "_LazyRowData"        # templated until inspected
    ev = PyomoNLPEvaluator(m)
    x = np.array([v.value for v in ev.variables])
    c = ev.constraints(x)
    row = ev.constraint_rows.index(con)
    assert con.equality                                 # renders the row
    assert type(con).__name__ == "ConstraintData"      # now an ordinary row
    assert "IndexTemplate" not in repr(con.body) and "_1" not in str(con.body)
    assert pyo.value(con.body) - pyo.value(con.upper) == pytest.approx(c[row], abs=1e-13)
    assert str(b.x[k - 1, "x"]) in str(con.body)
    # body / lower / upper / __call__ of an untouched templated row
    other = scheme_constraint(b, k - 3, "y", "x") if scheme == "adams_pc" else scheme_constraint(b, k - 3, "y", "yc")
    assert pyo.value(other.body) == pytest.approx(pyo.value(other.lower) + c[ev.constraint_rows.index(other)],
                                                  abs=1e-13)
    # clones render their own variables
    m2 = m.clone()
    d2 = scheme_constraint(m2.est, k - 4, "x")
    names = {id(v) for v in identify_variables(d2.body)}
    assert id(m2.est.x[k - 3, "x"]) in names and id(b.x[k - 3, "x"]) not in names
    ev2 = PyomoNLPEvaluator(m2)
    c2 = ev2.constraints(np.array([v.value for v in ev2.variables]))
    # rows rendered before the clone are ordinary rows there: compare row by row name
    by_name = lambda ev, vals, mm: {d.getname(fully_qualified=True, relative_to=mm): v  # noqa
                                    for d, v in zip(ev.constraint_rows, vals)}
    r1, r2 = by_name(ev, c, m), by_name(ev2, c2, m2)
    assert r1.keys() == r2.keys()
    assert all(abs(r1[k] - r2[k]) <= 1e-13 for k in r1)

def test_demo_converges_from_p0():
    prob = lotka_volterra_problem(p0=LV_P0)
    res = estimate_simultaneous(prob, "adams_pc", qmax=4, steps_per_interval=10)
    assert res.success, res.status
    assert res.iterations <= 100
    assert np.max(np.abs(res.x - 1.0)) < 0.1
    # result object: states on the grid, fitted observations, multipliers by step/state
    assert list(res.states.columns) == ["x1", "x2"]
    assert len(res.states) == 101
    assert res.fitted.shape == (10, 2)
    assert np.allclose(res.residuals.to_numpy(), res.fitted.to_numpy() - prob.data.to_numpy())
    assert res.adjoint.shape == (101, 2)
    dual = res.model.dual
    b = res.model.est
    assert res.multiplier(7, "x2") == dual[scheme_constraint(b, 7, "x2")]
    assert res.multiplier(7, "x2", "y") == dual[scheme_constraint(b, 7, "x2", "y")]


@pytest.mark.parametrize("scheme", ["enright", "semi_implicit_enright", "adams_moulton"])
def test_other_schemes_estimate_lv(scheme):
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    ref = estimate_simultaneous(prob, "adams_pc", qmax=4, steps_per_interval=10)
    res = estimate_simultaneous(prob, scheme, qmax=3, steps_per_interval=10)
    assert res.success
    assert np.max(np.abs(res.x - ref.x)) < 5e-3


def test_user_constraint_active_with_multiplier():
    """A user inequality on the parameters, active at the solution, is respected."""
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    free = estimate_simultaneous(prob, "adams_pc", qmax=3, steps_per_interval=5, certify=False)
    cap = float(free.x[0] + free.x[1]) - 0.1
    m = pyo.ConcreteModel()
    m.est = build_block(prob, "adams_pc", 3, steps_per_interval=5)
    m.cap = pyo.Constraint(expr=m.est.u["p1"] + m.est.u["p2"] <= cap)
    add_objective_term(m.est, 1e-3 * (m.est.u["p3"] - 1.0) ** 2)
    res = estimate_simultaneous(prob, model=m, certify=False)     # this model's optimum
    assert res.success
    assert pyo.value(m.est.u["p1"] + m.est.u["p2"]) == pytest.approx(cap, abs=1e-7)
    lam = m.dual[m.cap]
    assert lam > 1e-3                       # active <= constraint: λ > 0 (docs convention)
    # the extra objective term is part of the solved objective
    assert pyo.value(m.est.objective) == pytest.approx(
        pyo.value(m.est.misfit) + 1e-3 * (pyo.value(m.est.u["p3"]) - 1) ** 2)


def test_long_format_sigma_and_gaussian_nll():
    wide = lotka_volterra_data(seed=1)
    long = wide.reset_index().melt(id_vars="time", var_name="name", value_name="value")
    long["sigma"] = 0.5
    p_long = lotka_volterra_problem(data=long, p0=(0.9,) * 4)
    p_wide = po.EstimationProblem(
        states=["x1", "x2"], parameters=[po.Parameter(f"p{k}", 0.9) for k in range(1, 5)],
        rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": 0.4, "x2": 1.0}, data=wide, sigma=0.5)
    assert np.allclose(p_long.weights, 4.0)
    assert np.allclose(p_wide.weights, 4.0)
    r1 = estimate_simultaneous(p_long, steps_per_interval=5)
    r2 = estimate_simultaneous(p_wide, steps_per_interval=5)
    assert np.allclose(r1.x, r2.x, atol=1e-7)
    p_nll = po.EstimationProblem(
        states=["x1", "x2"], parameters=[po.Parameter(f"p{k}", 0.9) for k in range(1, 5)],
        rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": 0.4, "x2": 1.0}, data=wide,
        loss=po.GaussianNLL([0.25, 0.25]))
    r3 = estimate_simultaneous(p_nll, steps_per_interval=5)
    assert np.allclose(r3.x, r2.x, atol=1e-6)          # same minimizer, half the LS objective
    const = 20 * 0.5 * np.log(2 * np.pi * 0.25)
    assert r3.objective == pytest.approx(0.5 * r2.objective + const, rel=1e-7)


def test_missing_values_and_observation_function():
    data = lotka_volterra_data(seed=1)
    data.iloc[2, 0] = np.nan
    tot = pd.DataFrame({"total": data["x1"] + data["x2"]})
    prob = po.EstimationProblem(
        states=["x1", "x2"], parameters=[po.Parameter(f"p{k}", 1.0) for k in range(1, 5)],
        rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": 0.4, "x2": 1.0},
        data=tot.dropna(), observe=lambda x, u, t: {"total": x.x1 + x.x2})
    res = estimate_simultaneous(prob, steps_per_interval=5)
    assert res.success
    assert list(res.fitted.columns) == ["total"]
    p2 = lotka_volterra_problem(data=data)
    assert p2.mask.sum() == 19
    assert p2.weights[2, 0] == 0.0


def test_initial_conditions_as_parameters():
    data = lotka_volterra_data(seed=1)
    prob = po.EstimationProblem(
        states=["x1", "x2"],
        parameters=[po.Parameter(f"p{k}", 1.0) for k in range(1, 5)]
        + [po.Parameter("x10", 0.5, lb=0.0), po.Parameter("x20", 1.0, fixed=True)],
        rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": "x10", "x2": lambda u: u.x20},
        data=data)
    res = estimate_simultaneous(prob, steps_per_interval=5)
    assert res.success
    assert res.estimates["x20"] == 1.0                       # fixed stays fixed
    assert res.states.iloc[0]["x1"] == pytest.approx(res.estimates["x10"], abs=1e-9)
    assert abs(res.estimates["x10"] - 0.4) < 0.15


# ---------------------------------------------------------------------------
# bad input: a clear error naming the problem, before any solve
# ---------------------------------------------------------------------------
def _lv(**kw):
    args = dict(states=["x1", "x2"], parameters=[po.Parameter(f"p{k}", 1.0) for k in range(1, 5)],
                rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": 0.4, "x2": 1.0},
                data=lotka_volterra_data(seed=1))
    args.update(kw)
    return po.EstimationProblem(**args)


def test_bad_inf_measurement():
    d = lotka_volterra_data(seed=1)
    d.iloc[3, 1] = np.inf
    with pytest.raises(po.ProblemError, match="infinite"):
        _lv(data=d)


def test_bad_nan_in_long_format():
    d = lotka_volterra_data(seed=1).reset_index().melt(id_vars="time", var_name="name")
    d.loc[4, "value"] = np.nan
    with pytest.raises(po.ProblemError, match="a value is required"):
        _lv(data=d)


def test_bad_unsorted_and_duplicate_times():
    d = lotka_volterra_data(seed=1)
    with pytest.raises(po.ProblemError, match="not sorted"):
        _lv(data=d.iloc[::-1])
    with pytest.raises(po.ProblemError, match="duplicates"):
        _lv(data=pd.concat([d.iloc[:3], d.iloc[2:]]))


def test_bad_times_outside_horizon():
    with pytest.raises(po.ProblemError, match=r"\[t0, T\]"):
        _lv(T=5.0)
    with pytest.raises(po.ProblemError, match=r"\[t0, T\]"):
        _lv(t0=2.0)


def test_bad_data_column():
    d = lotka_volterra_data(seed=1).rename(columns={"x2": "prey"})
    with pytest.raises(po.ProblemError, match="prey"):
        _lv(data=d)


def test_bad_sigma():
    with pytest.raises(po.ProblemError, match="positive"):
        _lv(sigma=0.0)
    with pytest.raises(po.ProblemError, match="positive"):
        _lv(sigma={"x1": 1.0, "x2": -0.1})


def test_bad_qmax():
    prob = _lv()
    for q in (0, 1, 99, 2.5):
        with pytest.raises(ValueError, match="qmax"):
            build_block(prob, "adams_pc", q)
    with pytest.raises(ValueError, match="unknown scheme"):
        build_block(prob, "rk4")


def test_bad_rhs_length():
    with pytest.raises(po.ProblemError, match="one per state"):
        _lv(rhs=lambda x, u, t: [x.x1])
    with pytest.raises(po.ProblemError, match="missing"):
        _lv(rhs=lambda x, u, t: {"x1": x.x1})


def test_bad_start_makes_rhs_nonfinite():
    with pytest.raises(po.ProblemError, match="not finite"):
        _lv(rhs=lambda x, u, t: [pyo.log(x.x1 - 1.0), x.x2])


def test_bad_names():
    with pytest.raises(po.ProblemError, match="duplicate"):
        _lv(states=["x1", "x1"])
    with pytest.raises(po.ProblemError, match="no parameter"):
        _lv(initial={"x1": "nope", "x2": 1.0})


def test_building_a_block_leaves_other_threads_sum_alone():
    """Pyomo templatizes a rule by replacing builtins.sum for the whole process; while a
    block was built, 37,229 of 96,814 calls of sum(...) in another thread raised
    StopIteration (Dask's size estimates: "Sizeof calculation ... failed").  The
    template sum is now this thread's only; the block is built as before (templates),
    and a nested build restores everything."""
    import builtins
    import threading
    import pyomo.environ as pyo
    from pyomo_odeest import PyomoNLPEvaluator, build_block
    from pyomo_odeest.models import lotka_volterra_problem
    p = lotka_volterra_problem()
    real_sum = builtins.sum
    bad, calls, done = [], [0], threading.Event()

    def other():
        while not done.is_set():
            try:
                if sum(map(abs, [])) != 0 or sum(i for i in range(3)) != 3:
                    bad.append("wrong value")
            except Exception as err:                  # noqa: BLE001 - what is counted
                bad.append(type(err).__name__)
            calls[0] += 1
    import sys
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)          # thread switches everywhere, windows included
    th = threading.Thread(target=other)
    th.start()
    try:
        for _ in range(3):
            m = pyo.ConcreteModel()
            m.est = build_block(p, "adams_pc", 4)
    finally:
        done.set()
        th.join()
        sys.setswitchinterval(interval)
    assert calls[0] > 100 and not bad, (len(bad), bad[:3])
    assert builtins.sum is real_sum
    from pyomo.core.expr import template_expr
    assert "acquire" not in vars(template_expr._TemplateIterManager)
    assert PyomoNLPEvaluator(m).stats["template_families"] > 0
