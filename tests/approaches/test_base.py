"""The estimation pipeline (``approaches/_base.py``): one configuration per approach,
one start-value rule, one status vocabulary, the same answers from every approach.

Conformance matrix: every approach of ``APPROACH_NAMES``, and a user's approach class
run through ``estimate(problem, cls)`` (``CONFORMANCE``), on x' = -k x (+ inputs,
experiments, constraints), each case with its tolerance:

* the discrete approaches (simultaneous, reduced space, multiple shooting on the
  interior nodes ``NODES``, measurement times at and between them) solve the same
  discrete equations, multiple shooting with its order ramp restarting at each node
  [AT, eq. (2)] (a local error of the start-up steps there, 1e-6 of the estimates):
  they agree to ``DISCRETE_RTOL``; on the grid restarting at the nodes the reduced
  space solves multiple shooting's equations (``SAME_EQUATIONS_RTOL``);
* the continuous and adaptive approaches solve the ODE to their tolerances, the
  discrete ones on ``SPI`` Adams PC(4) steps per interval: ``ODE_RTOL``;
* the adaptive approach takes experiments without inputs or constraints (each
  round within a trust region of 10 %): it agrees to ``ODE_RTOL`` where it takes
  the case, and refuses the other cases with a ProblemError (the same refusal in
  each).
"""
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest import (APPROACH_NAMES, EstimationProblem, EstimationResult, Experiment,
                          Parameter, PathConstraint, PiecewiseConstant, ProblemError, Status)
from pyomo_odeest.approaches import IPOPT_DEFAULTS, approach_config, option_table
from pyomo_odeest.approaches._base import common_config, discretization_config
from pyomo_odeest.problem import start_values

from user_approaches import PlainIpoptReduced

SPI = 20
DISCRETE_RTOL = 1e-5
ODE_RTOL = 2e-3
T_MEAS = np.linspace(0.5, 3.0, 6)
#: interior shooting nodes, measurement times among them and between them
NODES = (0.0, 1.0, 2.0, 3.0)

OPTS = {
    "simultaneous": dict(qmax=4, steps_per_interval=SPI),
    "reduced_space": dict(qmax=4, steps_per_interval=SPI),
    "multiple_shooting": dict(qmax=4, steps_per_interval=SPI, nodes=NODES),
    "continuous": dict(rtol=1e-10, atol=1e-12),
    # a frozen pattern is faithful only near the parameters it was recorded at: each
    # round moves at most 10 % (from k = 0.5 the first round alone ends in
    # Restoration_Failed at k = 1.67)
    "adaptive": dict(qmax=3, controller=po.StepController(eps=1e-5), trust=0.1,
                     max_rebuilds=20),
}


def _data(k=0.7, c=2.0, t=T_MEAS, u=None):
    x = c * np.exp(-k * t) if u is None else u(t)
    return pd.DataFrame({"x": x}, index=t)


def decay(c_fixed=True, k_ub=None, sigma=0.05, **kw):
    """x' = -k x, x(0) = c (c fixed at 2 or estimated), data exact at k = 0.7."""
    return EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.0, ub=k_ub),
                                     Parameter("c", 2.0, fixed=c_fixed, lb=0.1, ub=10)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "c"},
                             data=kw.pop("data", _data()), sigma=sigma, **kw)


#: a user's approach class -> the approach it derives from (whose options and tolerance
#: it takes); the conformance matrix runs the classes through estimate(problem, cls)
USER = {PlainIpoptReduced: "reduced_space"}
CONFORMANCE = APPROACH_NAMES + tuple(USER)


def _fit(problem, approach, **kw):
    return po.estimate(problem, approach, **{**OPTS[USER.get(approach, approach)], **kw})


def _check_same(results, reference="simultaneous"):
    ref = results[reference].x
    for a, r in results.items():
        assert r.success, (a, r.status, r.message, r.warnings)
        tol = (DISCRETE_RTOL if USER.get(a, a) in ("reduced_space", "multiple_shooting")
               else ODE_RTOL)
        np.testing.assert_allclose(r.x, ref, rtol=tol, atol=tol, err_msg=str(a))


# ---------------------------------------------------------------------------
# start values: one rule
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("approach", APPROACH_NAMES)
def test_start_value_contradicting_a_fixed_parameter_is_refused_everywhere(approach):
    """x' = -k x, x(0) = c fixed at 2, u0 giving c = 3: the same refusal in every approach
    (the simultaneous approach used to keep c = 2, the others moved it to 3)."""
    with pytest.raises(ProblemError, match="fixed parameter 'c'"):
        _fit(decay(), approach, u0=[0.7, 3.0])
    with pytest.raises(ProblemError, match="fixed parameter 'c'"):
        _fit(decay(), approach, u0={"c": 3.0})


@pytest.mark.parametrize("approach", APPROACH_NAMES)
def test_fixed_parameter_with_an_equal_u0_entry(approach):
    res = _fit(decay(), approach, u0=pd.Series({"k": 0.6, "c": 2.0}))
    assert res.success and res.approach == approach
    assert res.estimates["c"] == 2.0
    assert res.estimates["k"] == pytest.approx(0.7, rel=ODE_RTOL)


def test_start_value_forms():
    P = decay(c_fixed=False)
    np.testing.assert_array_equal(start_values(P), [0.5, 2.0])
    np.testing.assert_array_equal(start_values(P, [0.6, 3.0]), [0.6, 3.0])
    np.testing.assert_array_equal(start_values(P, {"c": 3.0}), [0.5, 3.0])
    np.testing.assert_array_equal(start_values(P, pd.Series({"k": 0.9})), [0.9, 2.0])
    with pytest.raises(ProblemError, match="unknown parameter 'q'"):
        start_values(P, {"q": 1.0})
    with pytest.raises(ProblemError, match="outside its bounds"):
        start_values(P, {"c": 20.0})
    P.parameters[0].ub = 0.4                     # a declared value beyond a changed bound
    np.testing.assert_array_equal(start_values(P), [0.4, 2.0])
    with pytest.raises(ProblemError, match="one per parameter"):
        start_values(P, [1.0])


def test_start_value_of_a_local_parameter_by_its_declared_name():
    P = two_experiments()
    names = P.parameter_names
    u = start_values(P, {"c": 2.5})
    assert [u[names.index(n)] for n in ("c_e1", "c_e2")] == [2.5, 2.5]
    u = start_values(P, {"c_e2": 1.5})
    assert u[names.index("c_e2")] == 1.5 and u[names.index("c_e1")] == 2.0


# ---------------------------------------------------------------------------
# the conformance matrix
# ---------------------------------------------------------------------------
def test_conformance_active_bound():
    """k bounded above at 0.6 (optimum 0.7): every approach ends on the bound."""
    res = {a: _fit(decay(k_ub=0.6), a) for a in CONFORMANCE}
    _check_same(res)
    for a, r in res.items():
        assert r.estimates["k"] == pytest.approx(0.6, abs=1e-6), a
        assert any("upper bound" in w for w in r.warnings), a


def test_conformance_estimated_initial_state():
    res = {a: _fit(decay(c_fixed=False), a) for a in CONFORMANCE}
    _check_same(res)
    np.testing.assert_allclose(res["continuous"].x, [0.7, 2.0], rtol=1e-6)


@pytest.mark.parametrize("sigma", [0.05, None], ids=["sigma_known", "sigma_unknown"])
def test_conformance_sigma(sigma):
    rng = np.random.default_rng(3)
    data = _data() + 0.02 * rng.standard_normal((len(T_MEAS), 1))
    res = {a: _fit(decay(c_fixed=False, sigma=sigma, data=data), a) for a in CONFORMANCE}
    _check_same(res)
    covs = {a: r.covariance("residual" if sigma is None else "fim").matrix.to_numpy()
            for a, r in res.items()}
    for a, C in covs.items():
        np.testing.assert_allclose(C, covs["continuous"], rtol=2e-2, err_msg=str(a))


def two_experiments():
    return EstimationProblem(
        ["x"], [Parameter("k", 0.5, lb=0.0), Parameter("c", 2.0, lb=0.1, ub=10, local=True)],
        rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "c"}, data=None, sigma=0.05,
        experiments=[Experiment("e1", _data(c=2.0)), Experiment("e2", _data(c=1.0))])


def _refused(make, approach, match):
    with pytest.raises(ProblemError, match=match):
        _fit(make(), approach)


#: per approach, what the two-experiment case adds: the shooting nodes; the adaptive
#: rounds from the fixed-grid seed's estimate (from the start, c_e2 = 2 against data at
#: 1, the trust-limited rounds on the 88-step pattern of eps = 1e-5 end in
#: Restoration_Failed near the optimum)
TWO_EXPERIMENT_OPTS = {"multiple_shooting": {"nodes": {"e1": NODES, "e2": NODES}},
                       "adaptive": {"seed": "always"}}


def test_conformance_two_experiments_with_a_local_parameter():
    res = {a: _fit(two_experiments(), a, **TWO_EXPERIMENT_OPTS.get(a, {}))
           for a in CONFORMANCE}
    _check_same(res)
    np.testing.assert_allclose(res["continuous"].estimates[["k", "c_e1", "c_e2"]],
                               [0.7, 2.0, 1.0], rtol=1e-6)
    for a, r in res.items():
        assert r.states.index.names[0] == "experiment", a


@pytest.mark.parametrize("approach", ("reduced_space", "multiple_shooting", "continuous",
                                      "adaptive"))
@pytest.mark.parametrize("several", (False, True))
def test_pipeline_builds_and_collects_one_part_per_experiment(approach, several, monkeypatch):
    """The pipeline loops over the experiments (a problem without experiments is one):
    ``build_experiment`` and ``collect_experiment`` run once per experiment, with the
    experiment's own problem and name, and the frames come back stacked."""
    cls = po.approaches._estimate.approach_class(approach)
    calls = {"build": [], "collect": []}
    build, collect = cls.build_experiment, cls.collect_experiment

    def spy_build(self, problem, name, cfg, u_start):
        calls["build"].append((name, problem))
        return build(self, problem, name, cfg, u_start)

    def spy_collect(self, problem, part, u, solved, outcome):
        calls["collect"].append(problem)
        return collect(self, problem, part, u, solved, outcome)
    monkeypatch.setattr(cls, "build_experiment", spy_build)
    monkeypatch.setattr(cls, "collect_experiment", spy_collect)
    P = two_experiments() if several else decay()
    opts = dict(OPTS[approach])
    if several:
        opts.update(TWO_EXPERIMENT_OPTS.get(approach, {}))
    r = po.estimate(P, approach, **opts)
    assert r.success, (r.status, r.message)
    assert [n for n, _ in calls["build"]] == (["e1", "e2"] if several else [None])
    assert [p for _, p in calls["build"]] == P.subproblems == calls["collect"]
    if several:
        assert list(r.states.index.levels[0]) == ["e1", "e2"]
        assert list(r.fitted.loc["e2"].index) == list(T_MEAS)
        if approach in ("continuous", "adaptive"):       # no fixed grid: none per experiment
            assert r.grid is None
        else:
            assert set(r.grid) == {"e1", "e2"}
    else:
        assert r.states.index.name == "time" and r.fitted.shape == (len(T_MEAS), 1)


def test_experiment_option_per_experiment():
    from pyomo_odeest.discretization._experiments import experiment_option
    assert experiment_option((0, 1), None, "nodes") == (0, 1)       # one experiment
    assert experiment_option({"e1": (0, 2)}, "e1", "nodes") == (0, 2)
    assert experiment_option(None, "e1", "nodes") is None
    with pytest.raises(ProblemError, match="no nodes for experiment 'e2'"):
        experiment_option({"e1": (0, 2)}, "e2", "nodes")
    with pytest.raises(ProblemError, match="nodes must be a mapping experiment"):
        experiment_option((0, 2), "e1", "nodes")
    with pytest.raises(TypeError, match="grid must be a mapping"):
        experiment_option((0, 2), "e1", "grid")


def _with_input():
    F = PiecewiseConstant([0, 1.3], [0.0, 1.0])

    def exact(t):
        return np.where(t < 1.3, 2 * np.exp(-0.7 * t),
                        (2 * np.exp(-0.7 * 1.3) - 1 / 0.7) * np.exp(-0.7 * (t - 1.3)) + 1 / 0.7)
    return EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.0), Parameter("c", 2.0, fixed=True)],
                             rhs=lambda x, u, t: [-u.k * x.x + u.F], initial={"x": "c"},
                             data=_data(u=exact), sigma=0.05, inputs={"F": F})


def test_conformance_piecewise_constant_input():
    res = {a: _fit(_with_input(), a) for a in CONFORMANCE if a not in ("adaptive", "continuous")}
    res["continuous"] = _fit(_with_input(), "continuous", hessian="soa")   # and its default below
    _check_same(res)
    assert res["continuous"].estimates["k"] == pytest.approx(0.7, rel=1e-6)
    _refused(_with_input, "adaptive", "input")


@pytest.mark.parametrize("make", [_with_input, decay], ids=["switched_input", "decay"])
def test_continuous_default_quasi_newton_from_a_far_start(make):
    """From k = 0.5 the continuous approach's default Ipopt run (limited-memory Hessian)
    used to take its first step to k ~ 48 (with the input) or k ~ 282 (x' = -k x), where
    the misfit is flat, and to stop there not converged; the first quasi-Newton step is
    now limited to the parameters' start magnitudes (``first_quasi_newton_scale``)."""
    r = _fit(make(), "continuous", options={"max_iter": 100})
    assert r.success and r.estimates["k"] == pytest.approx(0.7, rel=1e-4)


def _with_path_constraint():
    # x(tau_j) <= 1.2 at the measurement times (the continuous approach imposes path
    # constraints there), binding at the first one, tau = 0.5 (the fit gives 1.41)
    return decay(c_fixed=False, constraints=[PathConstraint("xmax", lambda x, u, t: x.x - 1.2,
                                                            at="measurements")])


def test_conformance_path_constraint():
    res = {a: _fit(_with_path_constraint(), a) for a in CONFORMANCE if a != "adaptive"}
    _check_same(res)
    for a, r in res.items():
        assert r.fitted["x"].iloc[0] == pytest.approx(1.2, abs=1e-5), a     # active
    _refused(_with_path_constraint, "adaptive", "constraint")


#: multiple shooting against the reduced space on the grid restarting at its nodes
SAME_EQUATIONS_RTOL = 1e-8


def _restarting_at_nodes(grid, nodes=NODES):
    """``grid`` with the order ramp restarting at the interior ``nodes`` too."""
    if isinstance(grid, dict):
        return {name: _restarting_at_nodes(g, nodes) for name, g in grid.items()}
    at = np.searchsorted(grid.t, nodes[1:-1])
    assert np.array_equal(grid.t[at], nodes[1:-1])
    return po.Grid(t=grid.t, meas_times=grid.meas_times, I=grid.I, J=grid.J,
                   restarts=tuple(grid.restarts) + tuple(int(i) for i in at))


@pytest.mark.parametrize("make", [lambda: decay(c_fixed=False), _with_input,
                                  _with_path_constraint, two_experiments],
                         ids=["decay", "switched_input", "path_constraint", "two_experiments"])
def test_conformance_shooting_solves_the_equations_restarting_at_its_nodes(make):
    """Multiple shooting on interior nodes, its intervals joined by the continuity
    constraints [AT, eq. (4)], solves the discrete equations of its grid with the
    order ramp restarting at each node [AT, eq. (2)]: the reduced space on that grid
    finds the same estimates, objective and covariance."""
    P = make()
    shoot = _fit(P, "multiple_shooting", **(TWO_EXPERIMENT_OPTS["multiple_shooting"]
                                           if P.experiments else {}))
    assert shoot.success and shoot.extra["max_defect"] < 1e-10, shoot.summary()
    red = po.estimate(P, "reduced_space", qmax=4, grid=_restarting_at_nodes(shoot.grid))
    assert red.success, red.summary()
    np.testing.assert_allclose(shoot.x, red.x, rtol=SAME_EQUATIONS_RTOL, atol=1e-12)
    assert shoot.objective == pytest.approx(red.objective, rel=10 * SAME_EQUATIONS_RTOL)
    np.testing.assert_allclose(shoot.covariance().matrix.to_numpy(),
                               red.covariance().matrix.to_numpy(),
                               rtol=10 * SAME_EQUATIONS_RTOL)


# ---------------------------------------------------------------------------
# configuration: one declaration of the common options
# ---------------------------------------------------------------------------
COMMON = common_config()
DISCRETIZATION = discretization_config()
#: defaults an approach changes on purpose (documented with the approach)
OVERRIDES = {("multiple_shooting", "scale"): False, ("adaptive", "qmax"): 2}


@pytest.mark.parametrize("approach", APPROACH_NAMES)
def test_same_defaults_read_back_from_every_configuration(approach):
    cfg = approach_config(approach)
    for block in (COMMON, DISCRETIZATION):
        for k in block.keys():
            if k not in cfg:
                continue
            want = OVERRIDES.get((approach, k), block[k])
            assert cfg[k] == want, (approach, k)
    for k in ("u0", "options", "tee", "max_wall_time", "progress"):
        assert k in cfg, (approach, k)
    assert tuple(cfg.keys()) == po.approach_options(approach)


def test_one_default_ipopt_tolerance():
    assert IPOPT_DEFAULTS["tol"] == 1e-8
    src = "".join(p.read_text() for p in Path(po.__file__).parent.joinpath("approaches").rglob("*.py"))
    assert not re.search(r"[\"']tol[\"']\s*:\s*1e-", src.replace('IPOPT_DEFAULTS = {"tol": 1e-8', ""))


def test_option_domains_refuse_with_the_option_named():
    with pytest.raises(ProblemError, match="unknown optimizer 'newton'"):
        po.estimate(decay(), "reduced_space", optimizer="newton")
    with pytest.raises(ProblemError, match="max_wall_time"):
        po.estimate(decay(), "continuous", max_wall_time=-1)
    with pytest.raises(TypeError, match=r"does not take option\(s\) \['nodes'\]"):
        po.estimate(decay(), "simultaneous", nodes=(0, 1))


def test_option_tables_are_generated_from_the_configurations():
    for a in APPROACH_NAMES:
        table = option_table(type(po.approaches._estimate.approach_class(a)()))
        rows = [r.split("|")[1].strip().strip("`") for r in table.splitlines()[2:]]
        assert rows == list(po.approach_options(a))


def test_docs_option_tables_are_current():
    """docs/choosing.md includes the tables generated from the configurations."""
    import importlib.util
    root = Path(po.__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("approach_options",
                                                  root / "docs_tools" / "approach_options.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.OUT.read_text() == gen.text(), "run python docs_tools/approach_options.py"
    assert '--8<-- "approach_options.md"' in (root / "docs" / "choosing.md").read_text()


@pytest.mark.parametrize("approach, optimizer", [
    ("reduced_space", "L-BFGS-B"), ("continuous", "least_squares"),
    ("continuous", "L-BFGS-B"), ("simultaneous", None)])
def test_max_wall_time_stops_the_solve(approach, optimizer):
    """Every optimizer honours max_wall_time (least_squares has no callback: it is
    checked where its Jacobian is evaluated)."""
    opts = dict(OPTS.get(approach, {}))
    if optimizer is not None:
        opts["optimizer"] = optimizer
    res = po.estimate(decay(c_fixed=False), approach, max_wall_time=1e-9, **opts)
    assert res.status is Status.TIME_LIMIT and not res.success
    assert any("time limit" in w for w in res.warnings)
    assert any("time limit" in w for w in res.warnings)


def iore(k=0.1, N=2.0):
    """The IORE degradation model x' = -k x^N (optimum k = 4.6e-14, N = 6.8), started
    where its users' tool starts it, k = 0.1: 12 decades from the optimum (the
    published point: k = 8e-14, N = 6.7)."""
    t = np.array([0, 1, 2, 3, 6, 9, 12, 18, 24, 36.0])
    c = (100.0 ** (1 - 6.7) + 5.7 * 8e-14 * t) ** (1 / (1 - 6.7))
    data = pd.DataFrame({"C": c + 0.3 * np.random.default_rng(1).standard_normal(len(t))},
                        index=t)
    return EstimationProblem(
        ["C"], [Parameter("k", k, lb=0.0), Parameter("N", N, lb=0.0, ub=20),
                Parameter("C0", 100.0, lb=0)],
        rhs=lambda x, u, t: [-u.k * x.C ** u.N], initial={"C": "C0"}, data=data, sigma=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("approach", APPROACH_NAMES)
def test_a_start_twelve_decades_off_returns_within_the_time_limit(approach):
    """From k = 0.1 every approach returns within max_wall_time (plus the checks'
    time) with a non-success status or the optimum (J = 3.830317, the reduced space
    from the published point), and no warning calls k, 4.6e-14 at the optimum, held by
    its bound 0."""
    import time
    t0 = time.perf_counter()
    res = po.estimate(iore(), approach, max_wall_time=30)
    assert time.perf_counter() - t0 < 30 + 45, res.summary()
    assert not res.success or abs(res.objective - 3.830317) < 1e-3, res.summary()
    assert not any("bound" in w for w in res.warnings), res.warnings


def test_start_push_keeps_the_start():
    """Ipopt's bound push (1e-2 of the bound's magnitude) is lowered only as far as a
    start close to a bound needs: nothing moves, and a start on a bound moves by 1e-8."""
    from pyomo_odeest.approaches._base import start_push
    inf = np.inf
    assert start_push([0.5, 3.0], [0.0, -inf], [1.0, inf]) == {}
    assert start_push([8e-14, 3.0], [0.0, -inf], [inf, inf]) == {"bound_push": 4e-14}
    assert start_push([2.0 - 1e-6, 5.0], [0.0, 0.0], [2.0, 10.0]) == {
        "bound_push": pytest.approx(0.25e-6)}
    assert start_push([0.0, 1e-3], [0.0, 0.0], [1.0, 1.0]) == {"bound_push": 1e-8}
    assert start_push([1.0], [-inf], [inf]) == {}


def test_a_start_near_a_bound_is_where_ipopt_starts():
    """The IORE model from its published point (k = 8e-14 above its bound 0): multiple
    shooting (unscaled parameters) used to start Ipopt at k = 1e-2, where the model
    cannot be simulated (simulation_failed after 0 iterations); it now starts where it
    was told and reaches the optimum the other approaches reach."""
    res = po.estimate(iore(8e-14, 6.7), "multiple_shooting")
    assert res.success, res.summary()
    assert res.objective == pytest.approx(3.8302, abs=2e-3)
    assert res.estimates["k"] == pytest.approx(4.56e-14, rel=1e-2)


def test_adaptive_tightens_its_tolerance_on_iore_to_the_optimum():
    """The adaptive approach tightens its tolerance until the fitted values are within
    fit_tol of the ODE's.  On the IORE model from its published point the second
    tolerance's solve used to end in a restoration failure at J = 71013 (a step to an
    error e <= 0, where the controller's log e is undefined, cut back as an evaluation
    error again and again); with the errors bounded below by 0 it solves, at the
    optimum the other approaches reach (J = 3.8302, k = 4.56e-14)."""
    res = po.estimate(iore(8e-14, 6.7), "adaptive")
    assert res.success, res.summary()
    assert len(res.extra["tolerance_rounds"]) >= 2
    assert res.extra["fit_error"] <= res.extra["fit_tol"]
    assert res.objective == pytest.approx(3.8302, abs=2e-3)
    assert res.estimates["k"] == pytest.approx(4.56e-14, rel=1e-2)


def test_adaptive_keeps_the_last_tolerance_that_solved(monkeypatch):
    """Where the solve at a tighter tolerance fails, the result is the last tolerance's
    estimates (near the optimum), reported as not resolved, not the failed solve's point."""
    from pyomo_odeest.approaches import _adaptive
    rounds, calls = _adaptive._rounds, []

    def second_fails(built, runs, cfg):
        out = rounds(built, runs, cfg)
        calls.append(out)
        if len(calls) == 2:
            out.status, out.message = Status.FAILED, "Restoration_Failed"
        return out

    monkeypatch.setattr(_adaptive, "_rounds", second_fails)
    res = po.estimate(iore(8e-14, 6.7), "adaptive")
    assert len(calls) == 2
    assert res.status is Status.NOT_RESOLVED and not res.success
    assert "at the tighter tolerance" in res.message and "fit_tol" in res.message
    assert res.objective < 3.9
    assert res.estimates["k"] == pytest.approx(4.56e-14, rel=0.1)
    assert res.extra["eps"] == pytest.approx(1e-3)
    # its warning says what is wrong (the discretization), not to try another start
    [w] = [w for w in res.warnings if w.startswith("not resolved")]
    assert "the optimizer converged" in w and "fit_tol" in w and "start" not in w
    assert not [w for w in res.warnings if w.startswith("not converged")]


# ---------------------------------------------------------------------------
# vocabulary: names and statuses round-trip
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fits():
    return {a: _fit(decay(c_fixed=False), a) for a in APPROACH_NAMES}


def test_every_name_round_trips(fits, tmp_path):
    from pyomo_odeest.cli import APPROACHES as CLI
    assert set(APPROACH_NAMES) <= set(CLI)
    table, results = po.compare_approaches(
        decay(c_fixed=False), [(a, a, OPTS[a]) for a in APPROACH_NAMES])
    assert list(table.index) == list(APPROACH_NAMES)
    for a, r in fits.items():
        assert r.approach == a
        assert results[a].approach == a and results[a].success
        back = EstimationResult.from_json(r.to_json())
        assert back.approach == a and back.status is r.status and back.success == r.success
        np.testing.assert_array_equal(back.x, r.x)
        assert (back.scheme is None) == (r.scheme is None)
        if r.scheme is not None:
            assert (back.scheme.name, back.scheme.qmax) == (r.scheme.name, r.scheme.qmax)


def test_results_pickle_without_the_backend_and_rebuild_it(fits):
    for a, r in fits.items():
        C = r.covariance().matrix.to_numpy()
        back = pickle.loads(pickle.dumps(r))
        assert "_backend" not in back.__dict__
        assert back.approach == a and back.status is r.status
        np.testing.assert_allclose(back.covariance().matrix.to_numpy(), C, rtol=1e-8,
                                   err_msg=a)


def test_status_vocabulary():
    from pyomo_odeest.problem._status import status_from_ipopt
    assert status_from_ipopt("Solve_Succeeded") is Status.CONVERGED
    assert status_from_ipopt("Solved_To_Acceptable_Level").success
    assert status_from_ipopt("Maximum_Iterations_Exceeded") is Status.MAX_ITERATIONS
    assert status_from_ipopt("Maximum_WallTime_Exceeded") is Status.TIME_LIMIT
    assert status_from_ipopt("Restoration_Failed") is Status.FAILED
    assert [s for s in Status if s.success] == [Status.CONVERGED, Status.ACCEPTABLE]
    assert Status.parse("converged") is Status.CONVERGED


def test_no_approach_name_string_tests_outside_the_front_door():
    """Approach names are compared only in the front door (``approaches/_estimate.py``,
    the configuration registry); the analyses use the backend protocol."""
    root = Path(po.__file__).parent
    names = "|".join(APPROACH_NAMES + ("continuous_adjoint", "adaptive_simultaneous"))
    pat = re.compile(rf"""(==|!=|\bin\b|startswith\()\s*\(?\s*["'](?:{names})["']""")
    pat2 = re.compile(rf"""["'](?:{names})["']\s*(==|!=|\bin\b)""")
    pat3 = re.compile(r"""\.approach\s*(==|!=|\bin\b|\.startswith)""")
    bad = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root).as_posix()
        if rel == "approaches/_estimate.py":
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if pat.search(line) or pat2.search(line) or pat3.search(line):
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------
# the adaptive approach's rounds
# ---------------------------------------------------------------------------
def test_adaptive_user_bound_is_not_a_trust_bound():
    """An active bound of the problem ends the rounds once the pattern is stable (it
    used to count as a trust bound and rebuild until max_rebuilds)."""
    r = _fit(decay(k_ub=0.6), "adaptive")
    assert r.success and r.extra["pattern_stable"]
    assert len(r.extra["rounds"]) <= 3 and not r.extra["rounds"][-1]["on_trust_bound"]


def test_adaptive_rounds_out_before_a_stable_pattern_is_not_success():
    """Rounds that end on a trust bound (or with a pattern that still changes) when
    max_rebuilds runs out are not an optimum, whatever Ipopt said of the last one."""
    r = _fit(decay(c_fixed=False), "adaptive", trust=0.05, max_rebuilds=2, seed="never")
    assert len(r.extra["rounds"]) == 3 and not r.extra["pattern_stable"]
    assert r.status is Status.MAX_ITERATIONS and not r.success
    assert "after 3 rounds" in r.message and "max_rebuilds" in r.message
    assert any("not converged" in w for w in r.warnings)


def test_adaptive_rounds_that_do_not_converge_are_followed_by_the_seeds():
    """seed='auto' (the default): where the rounds from the start do not converge (here
    they run out on a trust bound), the rounds run again from the fixed-grid seed's
    estimate, and the result says so."""
    r = _fit(decay(c_fixed=False), "adaptive", trust=0.05, max_rebuilds=2)
    assert r.success, r.summary()
    assert "ended max_iterations" in r.extra["seed"]["after"]
    ref = _fit(decay(c_fixed=False), "adaptive", trust=0.05, max_rebuilds=2, seed="always")
    np.testing.assert_allclose(r.x, ref.x, rtol=1e-8)
    assert r.iterations > ref.iterations


def test_adaptive_without_a_converged_round_keeps_the_lower_rounds(monkeypatch):
    """Where the seed's rounds do not converge either, the result is the attempt whose
    last round ends lower, still not a success, its message naming both."""
    from pyomo_odeest.approaches import _adaptive
    rounds, calls = _adaptive._rounds, []

    def never_converge(built, runs, cfg):
        out = rounds(built, runs, cfg)
        calls.append(out.x[1][-1]["objective"])
        out.status = Status.MAX_ITERATIONS
        return out

    monkeypatch.setattr(_adaptive, "_rounds", never_converge)
    r = _fit(decay(c_fixed=False), "adaptive", trust=0.05, max_rebuilds=2)
    assert len(calls) == 2 and r.status is Status.MAX_ITERATIONS and not r.success
    first, seeded = calls
    assert seeded < first
    assert r.extra["rounds"][-1]["objective"] == seeded
    assert "these are the rounds from the fixed-grid seed's estimate" in r.message


def test_run_scipy_is_the_one_scipy_driver_of_the_approaches(monkeypatch):
    """The reduced space and the continuous approach call SciPy through one driver,
    which backs the line search off where the model cannot be evaluated, keeps the
    approach's defaults below the user's options, and stops at the time limit."""
    from types import SimpleNamespace

    from pyomo_odeest.approaches import _base, _continuous, _reduced
    from pyomo_odeest.nlp import EvaluationError

    def fun(x):
        if x[0] > 3.0:                              # e.g. a simulation that fails there
            raise EvaluationError("cannot evaluate")
        return float((x[0] - 1.0) ** 2), np.array([2.0 * (x[0] - 1.0)])
    cfg = SimpleNamespace(optimizer="BFGS", options={"gtol": 1e-9}, tee=False,
                          max_wall_time=None, progress=False)
    sol, out = _base.run_scipy(fun, np.array([2.99]), np.array([-np.inf]),
                               np.array([np.inf]), cfg, dict(gtol=1.0, maxiter=50))
    assert out.status is po.Status.CONVERGED and abs(out.x[0] - 1.0) < 1e-8
    assert out.iterations == sol.nit > 0
    slow = SimpleNamespace(**{**vars(cfg), "max_wall_time": 1e-9})
    assert _base.run_scipy(fun, np.array([2.5]), np.array([0.0]), np.array([3.0]), slow,
                           {})[1].status is po.Status.TIME_LIMIT
    calls = []

    def spy(*args, **kw):
        calls.append(args[4].optimizer)
        return _base.run_scipy(*args, **kw)
    monkeypatch.setattr(_reduced, "run_scipy", spy)
    monkeypatch.setattr(_continuous, "run_scipy", spy)
    from pyomo_odeest.models import lotka_volterra_problem
    lv = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    for approach in ("reduced_space", "continuous"):
        calls.clear()
        assert po.estimate(lv, approach, optimizer="L-BFGS-B").success
        assert calls and set(calls) == {"L-BFGS-B"}            # each round through it
