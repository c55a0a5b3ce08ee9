"""pyomo.dae front end: the schemes as TransformationFactory plugins."""

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.dae import ContinuousSet, DerivativeVar

import pyomo_odeest  # noqa: F401
from pyomo_odeest import DaeSchemeError, problem_from_dae
from pyomo_odeest.models import lotka_volterra_data, lotka_volterra_problem
from pyomo_odeest import estimate_reduced, estimate_simultaneous

DATA = lotka_volterra_data(seed=1)


def dae_model(skip_first=False):
    m = pyo.ConcreteModel()
    m.t = ContinuousSet(initialize=[0.0] + list(DATA.index))      # measurement times
    m.p = pyo.Var([1, 2, 3, 4], initialize=0.8)
    m.x1 = pyo.Var(m.t, initialize=0.5)
    m.x2 = pyo.Var(m.t, initialize=1.0)
    m.dx1 = DerivativeVar(m.x1, wrt=m.t)
    m.dx2 = DerivativeVar(m.x2, wrt=m.t)

    def ode1(m, t):
        if skip_first and t == m.t.first():
            return pyo.Constraint.Skip
        return m.dx1[t] == -m.p[1] * m.x1[t] + m.p[2] * m.x1[t] * m.x2[t]

    m.ode1 = pyo.Constraint(m.t, rule=ode1)
    m.ode2 = pyo.Constraint(m.t, rule=lambda m, t: m.dx2[t] == m.p[3] * m.x2[t] - m.p[4] * m.x1[t] * m.x2[t])
    m.x1[0].fix(0.4)
    m.x2[0].fix(1.0)
    m.obj = pyo.Objective(expr=sum((m.x1[t] - DATA.loc[t, "x1"]) ** 2 + (m.x2[t] - DATA.loc[t, "x2"]) ** 2
                                   for t in DATA.index))
    return m


def init_from_data(m):
    tt = np.array(list(m.t))
    for name, x0 in (("x1", 0.4), ("x2", 1.0)):
        col = np.interp(tt, np.r_[0.0, DATA.index], np.r_[x0, DATA[name]])
        v = getattr(m, name)
        for t_, c_ in zip(tt, col):
            if not v[t_].fixed:
                v[t_].set_value(float(c_))


@pytest.mark.parametrize("family,variant,scheme", [
    ("odeest.adams", "pc", "adams_pc"), ("odeest.adams", "moulton", "adams_moulton"),
    ("odeest.enright", "implicit", "enright"), ("odeest.enright", "semi_implicit", "semi_implicit_enright")])
def test_dae_model_gives_same_estimates(family, variant, scheme):
    m = dae_model()
    pyo.TransformationFactory(family).apply_to(m, wrt=m.t, variant=variant, qmax=3, steps_per_interval=5)
    assert len(m.t) == 51                              # measurement times kept, 5 steps each
    assert all(float(t) in m.t for t in DATA.index)
    init_from_data(m)
    res = pyo.SolverFactory("odeest_ipopt").solve(m, options={"tol": 1e-10})
    assert res.solver.termination_condition == pyo.TerminationCondition.optimal
    p = np.array([pyo.value(m.p[k]) for k in range(1, 5)])
    ref = estimate_simultaneous(lotka_volterra_problem(p0=(0.8,) * 4), scheme, 3,
                                steps_per_interval=5, options={"tol": 1e-10}, certify=False)
    assert np.max(np.abs(p - ref.x)) < 1e-8


def test_transformation_without_pint(monkeypatch):
    """Units are optional in Pyomo (they need pint): without pint the transformation must not
    ask for them, and gives the same discretization as with it."""
    import pyomo_odeest.transcription._dae as dae
    from pyomo.common.dependencies import pint_available as pint_installed
    built = {}
    # the 'with pint' branch can only run where pint is installed
    cases = (True, False) if bool(pint_installed) else (False,)
    for available in cases:
        monkeypatch.setattr(dae, "pint_available", available)
        m = dae_model()
        pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, variant="pc", qmax=3,
                                                             steps_per_interval=2)
        built[available] = sorted(str(c.body) for c in m.component_data_objects(pyo.Constraint))
    assert len(built[False]) > 40
    if True in built:
        assert built[True] == built[False]


def test_reduced_space_accepts_the_dae_model():
    prob = problem_from_dae(dae_model(), DATA)
    assert prob.states == ["x1", "x2"] and len(prob.parameters) == 4
    red = estimate_reduced(prob, "adams_pc", 3, steps_per_interval=5)
    ref = estimate_simultaneous(lotka_volterra_problem(p0=(0.8,) * 4), "adams_pc", 3,
                                steps_per_interval=5, options={"tol": 1e-10})
    assert np.max(np.abs(red.x - ref.x)) < 1e-8


def test_bad_options_are_rejected():
    m = dae_model()
    with pytest.raises(ValueError, match="variant"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, variant="rk4")
    with pytest.raises(ValueError, match="positive"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, max_step=-0.1)
    with pytest.raises(ValueError, match="qmax"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, qmax=1)
    pyo.TransformationFactory("dae.finite_difference").apply_to(m, nfe=20)
    with pytest.raises(DaeSchemeError, match="already discretized"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t)


def test_missing_ode_at_first_point_is_explained():
    m = dae_model(skip_first=True)
    with pytest.raises(DaeSchemeError, match="first one included"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, steps_per_interval=2)


def test_time_dependent_rhs_rejected_for_reduced_space():
    m = dae_model()
    m.ode2.deactivate()
    m.ode3 = pyo.Constraint(m.t, rule=lambda m, t: m.dx2[t] == m.p[3] * m.x2[t] * t)
    with pytest.raises(DaeSchemeError, match="time-dependent"):
        problem_from_dae(m, DATA)


def _lv_f(x1, x2, p, tt, drift):
    """The right-hand side of dae_model (drift != 0: p1 scaled by 1 + drift·t) and its Jacobian."""
    a = p[0] * (1 + drift * tt)
    f = np.array([-a * x1 + p[1] * x1 * x2, p[2] * x2 - p[3] * x1 * x2])
    J = np.array([[-a + p[1] * x2, p[1] * x1], [-p[3] * x2, p[2] - p[3] * x1]])
    return f, J


@pytest.mark.parametrize("drift", [0.0, 0.01])
@pytest.mark.parametrize("family,variant", [
    ("odeest.adams", "pc"), ("odeest.adams", "moulton"),
    ("odeest.enright", "implicit"), ("odeest.enright", "semi_implicit")])
def test_scheme_rows_match_the_step_formulas(family, variant, drift):
    """Every scheme row, at random values of all variables, has the residual of its step formula
    [GM-grad eqs. (4)-(6)] computed here in NumPy.  drift = 0: the right-hand side is the same
    function at every point (rendered once and reused); drift != 0: it changes with t, so each
    point's rows must use that point's own right-hand side (predictor-corrector), or be
    refused (Enright's ḟ has no ∂f/∂t)."""
    m = dae_model()
    if drift:
        m.ode1.deactivate()
        m.ode1b = pyo.Constraint(m.t, rule=lambda m, t: m.dx1[t] == -m.p[1] * (1 + drift * t) * m.x1[t]
                                 + m.p[2] * m.x1[t] * m.x2[t])
    if drift and family == "odeest.enright":              # ḟ = D_x f·f needs an autonomous f
        with pytest.raises(DaeSchemeError, match="autonomous"):
            pyo.TransformationFactory(family).apply_to(m, wrt=m.t, variant=variant, qmax=4,
                                                       steps_per_interval=3)
        return
    pyo.TransformationFactory(family).apply_to(m, wrt=m.t, variant=variant, qmax=4, steps_per_interval=3)
    rng = np.random.default_rng(3)
    t = np.array([float(v) for v in m.t])
    for v in m.component_data_objects(pyo.Var):
        v.set_value(float(rng.uniform(0.5, 1.5)))
    p = np.array([pyo.value(m.p[k]) for k in range(1, 5)])
    X = np.array([[pyo.value(m.x1[tt]), pyo.value(m.x2[tt])] for tt in t])
    D = np.array([[pyo.value(m.dx1[tt]), pyo.value(m.dx2[tt])] for tt in t])
    stage_vals = {st: np.array([[pyo.value(getattr(m, f"dx{s}_odeest_{st}")[i]) for s in (1, 2)]
                                for i in range(len(t) - 1)])
                  for st in m._odeest_scheme.stage_names if st != "x"}
    checked = 0
    for i, formula in enumerate(m._odeest_scheme.formulas(t)):
        h, tn = t[i + 1] - t[i], t[i + 1]
        for stage in formula.stages:
            val = X[i].copy()
            for pref, c in stage.f_terms:
                if pref.kind == "past":
                    fv = D[i - pref.lag]
                elif pref.kind == "new":
                    fv = D[i + 1]
                else:
                    fv = _lv_f(*stage_vals[pref.stage][i], p, tn, drift)[0]
                val = val + h * c * fv
            for pref, d in stage.fdot_terms:
                assert pref.kind in ("new", "stage")
                if pref.kind == "new":
                    fdot = _lv_f(*X[i + 1], p, tn, drift)[1] @ D[i + 1]
                else:
                    f, J = _lv_f(*stage_vals[pref.stage][i], p, tn, drift)
                    fdot = J @ f
                val = val + h * h * d * fdot
            target = X[i + 1] if stage.name == "x" else stage_vals[stage.name][i]
            for s in (1, 2):
                con = getattr(m, f"dx{s}_odeest_eq_{stage.name}")[i]
                res = pyo.value(con.body) - pyo.value(con.upper)
                assert res == pytest.approx(target[s - 1] - val[s - 1], rel=1e-12, abs=1e-12)
                checked += 1
    assert checked == 2 * len(m._odeest_scheme.stage_names) * (len(t) - 1)


def _cli_snippet():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    return re.search(r"## pyomo.dae models\n\n```python\n(.*?)```", text, flags=re.S).group(1)


def test_docs_snippet_runs_as_written_and_reaches_the_estimate():
    """The docs' snippet, with no state initialization of its own: the transformation
    simulates the start and scales the parameters, Ipopt reaches the estimate of
    estimate_simultaneous on the same scheme and grid, and the checks stay quiet."""
    code = _cli_snippet()
    ns = {}
    exec(compile(code, "cli.md", "exec"), ns)
    m, data, results = ns["m"], ns["data"], ns["results"]
    assert results.solver.termination_condition == pyo.TerminationCondition.optimal
    assert m._odeest_initialization == "simulate"
    assert m.scaling_factor[m.p[1]] == pytest.approx(1 / 0.8)
    p = np.array([pyo.value(m.p[k]) for k in range(1, 5)])
    ref = estimate_simultaneous(lotka_volterra_problem(data, p0=(0.8,) * 4), "adams_pc", 4,
                                steps_per_interval=10)
    np.testing.assert_allclose(p, ref.x, rtol=1e-6)
    res = ns["res"]
    assert res.success and res.warnings == []
    np.testing.assert_allclose(res.estimates.to_numpy(), p)
    assert pyomo_odeest.dae_result(m, data, results, sigma=0.05 ** 0.5).warnings == []


def test_dae_start_values_and_scaling_can_be_switched_off():
    m = dae_model()
    m.x1[5.0].set_value(7.0)
    pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, steps_per_interval=2,
                                                      initialize=False, scale_parameters=False)
    assert m.x1[5.0].value == 7.0 and not hasattr(m, "scaling_factor")
    assert m._odeest_initialization.startswith("none")
    m = dae_model()
    pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, steps_per_interval=2)
    # the start is the scheme's simulation: the discrete equations hold there
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    from pyomo_odeest import DiscreteModel
    dm = DiscreteModel(prob, "adams_pc", 4, steps_per_interval=2)
    X = dm.simulate(prob.u0).X
    np.testing.assert_allclose([m.x1[t].value for t in m.t], X[:, 0], rtol=1e-10)
    np.testing.assert_allclose([m.dx2[t].value for t in m.t],
                               [pyo.value(m.p[3] * m.x2[t] - m.p[4] * m.x1[t] * m.x2[t])
                                for t in m.t], rtol=1e-12)
    with pytest.raises(ValueError, match="initialize must be"):
        pyo.TransformationFactory("odeest.adams").apply_to(dae_model(), initialize="data")


def test_nonsense_from_an_uninitialized_start_is_flagged():
    """Without the start values (and the scaling) Ipopt reports 'optimal' at
    p1 ≈ p2 ≈ -1.8e6: dae_result's checks flag it instead of a clean success."""
    code = _cli_snippet().replace("steps_per_interval=10)", "steps_per_interval=10, "
                                  "initialize=False, scale_parameters=False)")
    ns = {}
    exec(compile(code, "cli.md", "exec"), ns)
    m = ns["m"]
    assert ns["results"].solver.termination_condition == pyo.TerminationCondition.optimal
    assert abs(pyo.value(m.p[1])) > 1e4                                 # nonsense
    res = pyomo_odeest.dae_result(m, ns["data"], ns["results"], sigma=0.05 ** 0.5)
    assert any("rank-deficient" in w for w in res.warnings)
    assert any("inconsistent with the noise level" in w for w in res.warnings)
    assert any("rank-deficient" in w for w in ns["res"].warnings)       # without sigma too


def _weighted_model():
    """dae_model with a weighted objective: the late measurements count 25x less."""
    m = dae_model()
    m.obj.deactivate()
    w = {t: 1.0 / (0.1 + 0.1 * t) ** 2 for t in DATA.index}
    m.wobj = pyo.Objective(expr=sum(w[t] * ((m.x1[t] - DATA.loc[t, "x1"]) ** 2
                                            + 3.0 * (m.x2[t] - DATA.loc[t, "x2"]) ** 2)
                                    for t in DATA.index))
    return m, w


def test_problem_from_dae_honours_the_objective_weights():
    """The reduced space on problem_from_dae's problem finds the estimate of the weighted
    pyomo.dae model itself (same scheme and grid), not the unweighted one."""
    m, w = _weighted_model()
    prob = problem_from_dae(m, DATA)
    W = np.asarray(prob.weights)
    expect = np.array([[w[t], 3.0 * w[t]] for t in DATA.index])
    assert np.allclose(W, expect, rtol=1e-12)
    red = estimate_reduced(prob, "adams_pc", 3, steps_per_interval=5, certify=False)
    assert red.success
    unweighted = estimate_reduced(problem_from_dae(dae_model(), DATA), "adams_pc", 3,
                                  steps_per_interval=5, certify=False)
    pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, variant="pc", qmax=3,
                                                       steps_per_interval=5)
    sol = pyo.SolverFactory("odeest_ipopt").solve(m, options={"tol": 1e-10})
    assert sol.solver.termination_condition == pyo.TerminationCondition.optimal
    p = np.array([pyo.value(m.p[k]) for k in range(1, 5)])
    assert np.max(np.abs(red.x - p)) < 1e-6
    assert np.max(np.abs(unweighted.x - p)) > 1e-3        # the weights do move the estimate
    # sigma= proportional to the objective's weights: accepted (same estimate)
    sig = [[1 / np.sqrt(w[t]), 1 / np.sqrt(3.0 * w[t])] for t in DATA.index]
    import pandas as pd
    sig = pd.DataFrame(sig, index=DATA.index, columns=["x1", "x2"])
    m2, _ = _weighted_model()
    assert np.allclose(np.asarray(problem_from_dae(m2, DATA, sigma=sig).weights), expect)
    with pytest.raises(DaeSchemeError, match="not proportional"):
        problem_from_dae(m2, DATA, sigma=0.1)


def test_problem_from_dae_refuses_an_objective_it_cannot_honour():
    import pandas as pd
    m = dae_model()
    m.obj.deactivate()
    m.l1 = pyo.Objective(expr=sum(abs(m.x1[t] - DATA.loc[t, "x1"]) for t in DATA.index))
    with pytest.raises(DaeSchemeError, match="not quadratic.*deactivate"):
        problem_from_dae(m, DATA)
    m = dae_model()
    m.obj.expr = m.obj.expr + (m.p[1] - 1) ** 2                 # a penalty on a parameter
    with pytest.raises(DaeSchemeError, match="p\\[1\\].*penalty="):
        problem_from_dae(m, DATA)
    other = DATA.copy()
    other.iloc[3, 0] += 0.1                                     # data differ from the objective
    with pytest.raises(DaeSchemeError, match="data has"):
        problem_from_dae(dae_model(), other)
    more = pd.concat([DATA, pd.DataFrame({"x1": [0.5], "x2": [0.5]}, index=[10.5])])
    m = dae_model()
    m.t.add(10.5)
    with pytest.raises(DaeSchemeError, match="does not fit"):
        problem_from_dae(m, more)
    m = dae_model()
    m.obj.deactivate()                                          # no objective: the data's
    assert np.all(np.asarray(problem_from_dae(m, DATA).weights)[problem_from_dae(m, DATA).mask] == 1)


def test_problem_from_dae_refuses_constraints_it_would_drop():
    m = dae_model()
    m.cap = pyo.Constraint(m.t, rule=lambda m, t: m.x1[t] <= 0.9)
    with pytest.raises(DaeSchemeError, match=r"cap\[0\.0\].*not ODEs.*constraints="):
        problem_from_dae(m, DATA)
    m.cap.deactivate()
    assert problem_from_dae(m, DATA).states == ["x1", "x2"]
