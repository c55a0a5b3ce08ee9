"""Multiple shooting and the continuous approach on problems with several experiments,
inputs given as data and constraints: exact derivatives, agreement with the other
approaches, and clear refusals."""
import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import (SCHEMES, EstimationProblem, Experiment, Parameter,
                          ParameterConstraint, PathConstraint, ProblemError, estimate)
from pyomo_odeest.approaches._shooting import shooting_nlp
from pyomo_odeest import PiecewiseConstant, PiecewiseLinear, Spline

T_MEAS = np.linspace(0.5, 5.0, 10)


def _simulate(k, x0, F, times=T_MEAS):
    from scipy.integrate import solve_ivp
    sw = [0.0, 1.3, 2.7, times[-1]]
    y = np.array([x0, 0.5])
    out = []
    for a, b in zip(sw[:-1], sw[1:]):
        te = times[(times > a) & (times <= b)]
        s = solve_ivp(lambda t, z: [-k * z[0] + F(t) * z[1], -0.1 * z[1] + F(t) * t], (a, b), y,
                      t_eval=te, rtol=1e-11, atol=1e-12)
        out.append(s.y.T)
        y = s.y[:, -1] if len(te) and te[-1] == b else solve_ivp(
            lambda t, z: [-k * z[0] + F(t) * z[1], -0.1 * z[1] + F(t) * t], (a, b), y,
            rtol=1e-11, atol=1e-12).y[:, -1]
    return pd.DataFrame(np.vstack(out), index=times, columns=["x", "y"])


def _problem(constraints=True, controls=True, at="grid"):
    """Two experiments with their own inputs (a piecewise-constant control in e1, a
    piecewise-linear and a spline input in e2), a local initial state, a path and a
    parameter constraint."""
    F1 = PiecewiseConstant([0, 1.3, 2.7], [0.4, 0.8, 0.3])
    F2 = PiecewiseLinear([0, 1.3, 2.7, 5], [0.0, 1.0, 0.3, 0.5])
    G2 = Spline(np.linspace(0, 5, 8), 0.2 * np.sin(np.linspace(0, 5, 8)))
    rng = np.random.default_rng(1)
    d1 = _simulate(0.5, 1.0, F1) + 0.005 * rng.standard_normal((10, 2))
    d2 = _simulate(0.5, 1.5, lambda t: F2(t) + G2(t)) + 0.005 * rng.standard_normal((10, 2))
    ctl = PiecewiseConstant([0, 1.3, 2.7], ["c0", "c1", 0.3]) if controls else F1
    cons = [PathConstraint("xmax", lambda x, u, t: x.x - 2.1, at=at),
            ParameterConstraint("csum", lambda u: u.c0 + u.c1 - 1.1)] if constraints else None
    return EstimationProblem(
        ["x", "y"], [Parameter("k", 0.6, lb=0), Parameter("c0", 0.5, lb=-2, ub=2),
                     Parameter("c1", 0.5, lb=-2, ub=2), Parameter("x0", 1.2, local=True)],
        rhs=lambda x, u, t: [-u.k * x.x + (u.F + u.G) * x.y, -0.1 * x.y + (u.F + u.G) * t],
        initial={"x": "x0", "y": 0.5}, data=None, constraints=cons,
        experiments=[Experiment("e1", d1, inputs={"F": ctl, "G": PiecewiseConstant([0], [0.0])}),
                     Experiment("e2", d2, inputs={"F": F2, "G": G2})])


def _fd(fun, x, h=1e-6):
    cols = []
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = h * max(1.0, abs(x[i]))
        cols.append((np.atleast_1d(fun(x + e)) - np.atleast_1d(fun(x - e))) / (2 * e[i]))
    return np.column_stack(cols)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("jacobian", ["sensitivity", "adjoint"])
def test_shooting_derivatives_exact_with_inputs_experiments_constraints(scheme, jacobian):
    P = _problem()
    nodes = {"e1": [1.0, 2.7, 4.0], "e2": [2.0, 3.3]}     # measurements off the nodes too
    nlp, _ = shooting_nlp(P, scheme, steps_per_interval=1, nodes=nodes, jacobian=jacobian)
    assert [p.im.N for p in nlp.parts] == [4, 3]
    assert nlp.m == nlp.m_cont + nlp.m_path + 1
    rng = np.random.default_rng(0)
    x = nlp.x0 + 0.02 * rng.standard_normal(nlp.n) * (nlp.x_lb != nlp.x_ub)
    assert np.max(np.abs(nlp.constraints(x)[:nlp.m_cont])) > 1e-3      # infeasible point
    g = nlp.gradient(x)
    np.testing.assert_allclose(g, _fd(nlp.objective, x)[0], rtol=1e-6, atol=1e-7)
    J = nlp.jacobian_dense(x)
    np.testing.assert_allclose(J, _fd(nlp.constraints, x), rtol=1e-6, atol=1e-7)
    # the objective is the sum of the experiments' and the shared columns add up
    assert nlp.objective(x) == pytest.approx(sum(p.objective(nlp.part_x(x, e))
                                                 for e, p in enumerate(nlp.parts)))


def test_shooting_one_interval_equals_reduced_space_with_constraints():
    """One shooting interval per experiment is single shooting: the same discrete
    equations as the reduced space, hence the same estimates and multipliers."""
    P = _problem()
    kw = dict(scheme="enright", steps_per_interval=3, options={"tol": 1e-10})
    rr = estimate(P, "reduced_space", **kw)
    rm = estimate(P, "multiple_shooting", nodes={"e1": [], "e2": []}, **kw)
    assert rr.success and rm.success
    np.testing.assert_allclose(rm.x, rr.x, rtol=1e-6, atol=1e-8)
    assert rr.multipliers["path_xmax"]["xmax"].max() > 0.01              # active
    np.testing.assert_allclose(rm.multipliers["path_xmax"], rr.multipliers["path_xmax"],
                               rtol=1e-4, atol=1e-5)
    pm = rm.extra["parameter_constraint_multipliers"]["csum"]
    assert pm == pytest.approx(rr.extra["parameter_constraint_multipliers"]["csum"], rel=1e-4)
    assert list(rm.states.index.get_level_values("experiment").unique()) == ["e1", "e2"]
    assert rm.fitted.shape == rr.fitted.shape


def test_shooting_experiments_default_nodes_agree_with_simultaneous():
    P = _problem()
    r = estimate(P, "simultaneous", scheme="enright", steps_per_interval=3)
    rm = estimate(P, "multiple_shooting", scheme="enright", steps_per_interval=3)
    assert r.success and rm.success
    assert rm.extra["max_defect"] < 1e-8
    # the multistep ramp restarts at every node: a slightly different discretization
    np.testing.assert_allclose(rm.x, r.x, rtol=2e-3)
    assert rm.states["x"].max() <= 2.1 + 1e-7
    assert set(rm.extra["experiments"]) == {"e1", "e2"}
    assert rm.extra["node_values"].index.names == ["experiment", "time"]


def test_shooting_experiment_argument_errors():
    P = _problem(constraints=False)
    with pytest.raises(ProblemError, match="nodes must be a mapping experiment"):
        estimate(P, "multiple_shooting", nodes=[1.0, 2.0])
    with pytest.raises(ProblemError, match="no nodes for experiment 'e2'"):
        estimate(P, "multiple_shooting", nodes={"e1": [1.0]})


# ---------------------------------------------------------------------------
# the continuous approach
# ---------------------------------------------------------------------------
def _input_problem(inp, data=None):
    t = T_MEAS
    data = pd.DataFrame({"x": np.exp(-0.5 * t)}, index=t) if data is None else data
    ctl = not inp.parameter_names()
    return EstimationProblem(
        ["x", "y"], [Parameter("k", 0.5), Parameter("c0", 0.1, lb=-2, ub=2, fixed=ctl),
                     Parameter("c1", 0.9, lb=-2, ub=2, fixed=ctl)],
        rhs=lambda x, u, t: [-u.k * x.x + u.F * x.y, -0.1 * x.y + u.F * t],
        initial={"x": 1.0, "y": 0.5}, data=data, inputs={"F": inp})


CONT_INPUTS = {
    "constant": PiecewiseConstant([0, 1.3, 2.7], [0.0, 1.0, 0.3]),
    "linear": PiecewiseLinear([0, 1.3, 2.7, 5], [0.0, 1.0, 0.3, 0.5]),
    "spline": Spline(np.linspace(0, 5, 8), np.sin(np.linspace(0, 5, 8))),
    "control": PiecewiseConstant([0, 1.3, 2.7], ["c0", "c1", 0.3]),
}


@pytest.mark.parametrize("kind", list(CONT_INPUTS))
def test_continuous_derivatives_exact_with_inputs(kind):
    """The continuous adjoint and sensitivities restart at every switching time:
    gradient and second-order-adjoint Hessian agree with differences."""
    from pyomo_odeest.approaches import ContinuousModel
    P = _input_problem(CONT_INPUTS[kind])
    u = P.u0 * 1.1
    cm = ContinuousModel(P)
    g = cm.gradient(u, "adjoint")
    np.testing.assert_allclose(cm.gradient(u, "sensitivity"), g, rtol=1e-7, atol=1e-7)
    gf = ContinuousModel(P, fd_step=1e-4).gradient(u, "fd")
    np.testing.assert_allclose(gf, g, rtol=1e-7, atol=1e-6)
    H = cm.hessian(u, "soa")
    np.testing.assert_allclose(H, cm.hessian(u, "adjoint_fd"), rtol=1e-6,
                               atol=1e-6 * np.abs(H).max())


def test_continuous_solution_exact_across_switches():
    """x' = -k x + F(t), F piecewise constant: the integration matches the exact
    piecewise solution (restart at each switch) to the integrator's tolerance."""
    from pyomo_odeest.approaches import ContinuousModel
    F = CONT_INPUTS["constant"]
    P = EstimationProblem(["x"], [Parameter("k", 0.8)], lambda x, u, t: [-u.k * x.x + u.F],
                          {"x": 1.0}, pd.DataFrame({"x": [0.0]}, index=[4.0]),
                          inputs={"F": F})
    x = 1.0
    for a, b, v in [(0, 1.3, 0.0), (1.3, 2.7, 1.0), (2.7, 4.0, 0.3)]:
        x = v / 0.8 + (x - v / 0.8) * np.exp(-0.8 * (b - a))
    X = ContinuousModel(P).simulate(times=[1.3, 2.7, 4.0])["x"].to_numpy()
    assert X[-1] == pytest.approx(x, rel=1e-9)


def test_continuous_experiments_inputs_constraints_equal_simultaneous():
    P = _problem(at="measurements")
    rc = estimate(P, "continuous")
    r = estimate(P, "simultaneous", scheme="enright", steps_per_interval=10)
    assert rc.success and r.success
    # the discretization error of the scheme (order 5, 10 steps per interval) and the
    # integrator's tolerance separate the two at the 1e-5 level
    np.testing.assert_allclose(rc.x, r.x, rtol=5e-5)
    lam, lam_s = rc.multipliers["path_xmax"]["xmax"], r.multipliers["path_xmax"]["xmax"]
    assert lam.idxmax() == lam_s.idxmax() == ("e2", 3.0)                  # active in e2
    assert lam.max() == pytest.approx(lam_s.max(), rel=1e-3)
    pm = rc.extra["parameter_constraint_multipliers"]["csum"]
    assert pm > 0.1 and pm == pytest.approx(
        r.extra["parameter_constraint_multipliers"]["csum"], rel=1e-4)
    assert rc.fitted["x"].max() <= 2.1 + 1e-7
    assert list(rc.states.index.get_level_values("experiment").unique()) == ["e1", "e2"]


@pytest.mark.parametrize("optimizer", ["ipopt", "least_squares"])
def test_a_continuous_result_of_several_experiments_has_no_grid_to_check(optimizer):
    """The continuous approaches integrate adaptively: their result of several
    experiments has no grid (not a dict of Nones), so the post-solve checks do not
    simulate it again as if it were a discretization's."""
    r = estimate(_problem(constraints=False), "continuous", optimizer=optimizer)
    assert r.success and r.grid is None
    assert "simulated_objective" not in r.extra
    assert not any("discretization error" in w for w in r.warnings)


def test_continuous_constraint_jacobian_exact():
    from pyomo_odeest.approaches._continuous import ContinuousConstraints
    from pyomo_odeest.approaches import ContinuousModel
    from pyomo_odeest.discretization import ExperimentModels
    P = _problem(at="measurements")
    cm = ExperimentModels(P, [ContinuousModel(sp) for sp in P.experiment_problems])
    cons = ContinuousConstraints(P, cm, P.free_mask)
    assert cons.m == 20 + 1
    u = P.u0 * 1.05
    free = np.flatnonzero(P.free_mask)

    def vals(z):
        v = u.copy()
        v[free] = z
        return cons.values(v)
    np.testing.assert_allclose(cons.jacobian(u), _fd(vals, u[free]), rtol=1e-5, atol=1e-6)


def test_each_unsupported_combination_raises_a_clear_error():
    """What an approach cannot do is refused with a ProblemError naming the feature
    (never ignored), also as the status of compare_approaches' row."""
    from pyomo_odeest import compare_approaches
    exps = _problem(constraints=False)                     # experiments and inputs
    single = _input_problem(CONT_INPUTS["constant"])       # inputs only
    grid_path = _problem(at="grid")                        # path constraint on the grid
    with pytest.raises(ProblemError, match="adaptive approach does not take inputs"):
        estimate(exps, "adaptive")
    with pytest.raises(ProblemError, match="adaptive approach does not take inputs"):
        estimate(single, "adaptive")
    with pytest.raises(ProblemError, match="adaptive approach does not take path or parameter "
                                           "constraints"):
        estimate(EstimationProblem(
            ["x"], [Parameter("k", 0.5)], lambda x, u, t: [-u.k * x.x], {"x": 1.0},
            pd.DataFrame({"x": np.exp(-0.5 * T_MEAS)}, index=T_MEAS),
            constraints=[ParameterConstraint("kmax", lambda u: u.k - 1)]), "adaptive")
    with pytest.raises(ProblemError, match="continuous approach imposes path constraints at the "
                                           "measurement times only.*at='grid'"):
        estimate(grid_path, "continuous")
    for approach in ("reduced_space", "continuous"):
        with pytest.raises(ProblemError, match="optimizer 'L-BFGS-B' does not take the "
                                               "problem's path or parameter constraints"):
            estimate(_problem(at="measurements"), approach, optimizer="L-BFGS-B")
    table, _ = compare_approaches(exps, ("adaptive",))
    assert "adaptive approach does not take inputs" in table.loc["adaptive", "status"]


def test_shooting_includes_the_penalty():
    """R(u) is part of the shooting objective: one interval = the reduced space."""
    t = T_MEAS
    P = EstimationProblem(["x"], [Parameter("k", 0.5)], lambda x, u, t: [-u.k * x.x],
                          {"x": 1.0}, pd.DataFrame({"x": np.exp(-0.5 * t)}, index=t),
                          penalty=lambda u: 0.1 * (u.k - 0.8) ** 2)
    rr = estimate(P, "reduced_space", steps_per_interval=4)
    rm = estimate(P, "multiple_shooting", steps_per_interval=4, nodes=[],
                  options={"tol": 1e-10})
    assert rr.success and rm.success
    assert 0.5 < rr.x[0] < 0.8                       # pulled towards 0.8 by the penalty
    assert rm.x[0] == pytest.approx(rr.x[0], rel=1e-7)
    assert rm.objective == pytest.approx(rr.objective, rel=1e-9)


def test_experiments_that_measure_some_of_the_observables():
    """``Experiment(observables=...)``: each experiment builds the observables it measures
    only; every approach finds the same estimates as with all observables declared in
    every experiment, and the fitted frames are stacked over the union of columns."""
    from pyomo_odeest import APPROACH_NAMES
    t = np.linspace(0.5, 3.0, 6)
    rng = np.random.default_rng(4)
    d1 = pd.DataFrame({"A": np.exp(-1.2 * t) + 0.01 * rng.standard_normal(6)}, index=t)
    d2 = pd.DataFrame({"S": 1.0 + 0.01 * rng.standard_normal(6),
                       "B": 1 - np.exp(-1.2 * t) + 0.01 * rng.standard_normal(6)}, index=t)

    def problem(subsets):
        obs = dict(e1=["A"], e2=["B", "S"]) if subsets else dict(e1=None, e2=None)
        return EstimationProblem(
            states=["A", "B"], parameters=[Parameter("k", 0.5, lb=0.01, ub=5.0)],
            rhs=lambda x, u, t: [-u.k * x.A, u.k * x.A], initial={"A": 1.0, "B": 0.0},
            data=None, observe=lambda x, u, t: {"A": x.A, "B": x.B, "S": x.A + x.B},
            experiments=[Experiment("e1", d1, observables=obs["e1"]),
                         Experiment("e2", d2, observables=obs["e2"])])
    sub, full = problem(True), problem(False)
    assert [sp.obs_names for sp in sub.experiment_problems] == [["A"], ["B", "S"]]
    assert [sp.obs_names for sp in full.experiment_problems] == [["A", "B", "S"]] * 2
    for name in [n for n in APPROACH_NAMES if n != "adaptive"]:    # one experiment only
        a, b = estimate(sub, name), estimate(full, name)
        assert a.success and b.success, name
        assert a.estimates["k"] == pytest.approx(b.estimates["k"], rel=1e-9), name
        assert a.objective == pytest.approx(b.objective, rel=1e-9), name
        assert set(a.fitted.columns) == {"A", "B", "S"}
        assert np.isnan(a.fitted.loc[("e1", t[0]), "S"])          # not observed in e1
    with pytest.raises(ProblemError, match="observables \\['Z'\\]"):
        EstimationProblem(
            states=["A", "B"], parameters=[Parameter("k", 0.5)],
            rhs=lambda x, u, t: [-u.k * x.A, u.k * x.A], initial={"A": 1.0, "B": 0.0},
            data=None, observe=lambda x, u, t: {"A": x.A},
            experiments=[Experiment("e1", d1, observables=["Z"])])
    with pytest.raises(ProblemError, match="data columns \\['S'\\]"):
        EstimationProblem(
            states=["A", "B"], parameters=[Parameter("k", 0.5)],
            rhs=lambda x, u, t: [-u.k * x.A, u.k * x.A], initial={"A": 1.0, "B": 0.0},
            data=None, observe=lambda x, u, t: {"A": x.A, "B": x.B, "S": x.A + x.B},
            experiments=[Experiment("e2", d2, observables=["B"])])
