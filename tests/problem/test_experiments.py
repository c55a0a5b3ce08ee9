"""Several experiments sharing parameters: declaration, every approach, and the
identity with the same problem written by hand as one block."""
import math

import numpy as np
import pandas as pd
import pytest
import sympy

from pyomo_odeest import (EstimationProblem, Experiment, Parameter, Preequilibration,
                          ProblemError, estimate)
from pyomo_odeest.approaches._reduced import discrete_model

from helpers import (AB_TIMES as TIMES, ab_data as _data, ab_rhs as _rhs,
                     three_experiments_by_hand as _by_hand, three_experiments_problem as _problem)


def test_declaration_global_and_local_parameters():
    P = _problem()
    assert P.parameter_names == ["k1", "k2", "A0_e1", "A0_e2", "A0_e3"]
    assert P.u0.tolist() == [0.5, 0.5, 1.0, 1.5, 1.0]
    subs = P.experiment_problems
    assert [str(e) for e in subs[1].l_sym] == ["A0_e2", "0"]
    assert float(subs[2].l_sym[1]) == 0.4
    assert subs[0].f_sym == subs[2].f_sym                # globals shared
    with pytest.raises(AttributeError, match="several experiments"):
        P.data
    with pytest.raises(ProblemError, match="several experiments"):
        P.initial_state(P.u0)


def test_experiments_need_neither_initial_nor_data_of_the_problem():
    """With experiments that give every initial state, the problem's ``initial`` and
    ``data`` may be left out (both default to None); without experiments a missing
    ``initial`` names the states it lacks."""
    rng = np.random.default_rng(0)
    exps = [Experiment(e, _data(0.5, 0.3, a0, 0.0, rng), initial={"A": a0, "B": 0.0})
            for e, a0 in (("e1", 1.0), ("e2", 2.0))]
    P = EstimationProblem(["A", "B"], [Parameter("k1", 0.4), Parameter("k2", 0.4)], _rhs,
                          experiments=exps)
    assert [float(v) for v in P.experiment_problems[1].l_sym] == [2.0, 0.0]
    with pytest.raises(ProblemError, match=r"experiment 'e1'.*missing states \['B'\]"):
        EstimationProblem(["A", "B"], [Parameter("k1", 0.4), Parameter("k2", 0.4)], _rhs,
                          experiments=[Experiment("e1", _data(0.5, 0.3, 1.0, 0.0, rng),
                                                  initial={"A": 1.0})])
    with pytest.raises(ProblemError, match=r"initial: missing states \['A', 'B'\]"):
        EstimationProblem(["A", "B"], [Parameter("k1", 0.4), Parameter("k2", 0.4)], _rhs,
                          data=_data(0.5, 0.3, 1.0, 0.0, rng))


def test_three_experiments_equal_one_block_by_hand():
    P = _problem()
    H = _by_hand(P)
    r = estimate(P, "simultaneous")
    rh = estimate(H, "simultaneous")
    assert r.success and rh.success
    np.testing.assert_allclose(r.x, rh.estimates[P.parameter_names].to_numpy(), rtol=1e-7)
    assert r.objective == pytest.approx(rh.objective, rel=1e-9)
    for e in P.experiment_names:
        for s in ("A", "B"):
            np.testing.assert_allclose(r.states.loc[e][s], rh.states[f"{s}_{e}"], atol=1e-8)
            np.testing.assert_allclose(r.adjoint.loc[e][s], rh.adjoint[f"{s}_{e}"],
                                       rtol=1e-5, atol=1e-9)
            for st in r.multipliers:
                np.testing.assert_allclose(r.multipliers[st].loc[e][s],
                                           rh.multipliers[st][f"{s}_{e}"], rtol=1e-5, atol=1e-9)
    # the local initial states are estimated per experiment, near the truth
    np.testing.assert_allclose(r.estimates[["A0_e1", "A0_e2", "A0_e3"]], [1.0, 2.0, 0.5],
                               atol=0.05)


def test_sequential_approaches_agree_with_simultaneous():
    P = _problem(same_horizon=False)           # experiments on different horizons
    r = estimate(P, "simultaneous")
    rr = estimate(P, "reduced_space")
    assert r.success and rr.success
    np.testing.assert_allclose(rr.x, r.x, rtol=1e-6)
    np.testing.assert_allclose(rr.states.to_numpy(), r.states.to_numpy(), atol=1e-7)
    assert list(rr.fitted.index.get_level_values("experiment").unique()) == ["e1", "e2", "e3"]
    assert rr.states.loc["e3"].index[-1] == 5.0


def test_summed_gradient_and_hessian_exact():
    P = _problem(same_horizon=False)
    dm = discrete_model(P, steps_per_interval=3)
    u = P.u0 * 1.1
    g = dm.gradient(u, "adjoint")
    np.testing.assert_allclose(g, dm.gradient(u, "fd"), rtol=1e-6, atol=1e-9)
    H = dm.hessian(u, "soa")
    np.testing.assert_allclose(H, dm.hessian(u, "adjoint_fd"), rtol=1e-5, atol=1e-8)
    assert dm.objective(u) == pytest.approx(sum(
        m.objective(u) for m in dm.models))


def test_errors_name_the_culprit():
    rng = np.random.default_rng(0)
    d = _data(0.7, 0.3, 1.0, 0.0, rng)
    kw = dict(states=["A", "B"], rhs=_rhs, initial={"A": "A0", "B": 0.0})
    with pytest.raises(ProblemError, match="local=True"):
        EstimationProblem(parameters=["k1", "k2", Parameter("A0", local=True)], data=d, **kw)
    with pytest.raises(ProblemError, match="not local"):
        EstimationProblem(parameters=["k1", "k2", "A0"], data=None,
                          experiments=[Experiment("e1", d, parameters={"k1": 1.0})], **kw)
    with pytest.raises(ProblemError, match="data must be None"):
        EstimationProblem(parameters=["k1", "k2", "A0"], data=d,
                          experiments=[Experiment("e1", d)], **kw)
    with pytest.raises(ProblemError, match="experiment 'e2'.*bogus"):
        EstimationProblem(parameters=["k1", "k2", "A0"], data=None,
                          experiments=[Experiment("e1", d), Experiment("e2", d.rename(
                              columns={"A": "bogus"}))], **kw)
    with pytest.raises(ProblemError, match="identifier"):
        Experiment("exp 1", d)
    P = _problem()
    with pytest.raises(ProblemError, match="mapping experiment"):
        from pyomo_odeest import make_grid
        estimate(P, "simultaneous", grid=make_grid(TIMES))


def test_docs_snippet_runs_as_written():
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "docs" / "experiments.md").read_text()
    ns = {}
    for code in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        exec(compile(code, "experiments.md", "exec"), ns)
    assert ns["res"].success
    assert ns["res"].estimates["k"] == pytest.approx(0.7, rel=1e-4)
    est = ns["pre_res"].estimates                      # the pre-equilibration example
    np.testing.assert_allclose(est[["k1", "k2", "ks", "kd"]], [0.7, 0.4, 1.5, 0.6], rtol=1e-3)


def test_continuous_approach_sums_experiments():
    P = _problem(same_horizon=False)
    rc = estimate(P, "continuous")
    r = estimate(P, "simultaneous", scheme="enright", steps_per_interval=20)
    assert rc.success
    np.testing.assert_allclose(rc.x, r.x, rtol=1e-5)
    cm = rc.backend.model
    u = P.u0 * 1.1
    np.testing.assert_allclose(cm.gradient(u, "adjoint"), cm.gradient(u, "fd"), rtol=1e-5,
                               atol=1e-8)
    assert list(rc.states.index.get_level_values("experiment").unique()) == ["e1", "e2", "e3"]


def test_compare_approaches_takes_experiments():
    from pyomo_odeest import compare_approaches
    table, results = compare_approaches(_problem(), ("simultaneous", "reduced_space",
                                                     "multiple_shooting", "continuous",
                                                     "adaptive"))
    for a in ("simultaneous", "reduced_space", "multiple_shooting", "continuous", "adaptive"):
        assert table.loc[a, "success"], a
        assert table.loc[a, "A0_e3"] == pytest.approx(0.5, abs=0.05)
        for frame in (results[a].states, results[a].fitted, results[a].residuals):
            assert isinstance(frame, pd.DataFrame)
            assert list(frame.index.get_level_values("experiment").unique()) == ["e1", "e2", "e3"]
    np.testing.assert_allclose(results["multiple_shooting"].x, results["simultaneous"].x,
                               rtol=1e-3)
    # the adaptive model (55) takes several experiments: one block each, parameters shared
    np.testing.assert_allclose(results["adaptive"].x, results["simultaneous"].x, rtol=1e-2)


def test_penalty_and_initial_callables_are_checked_as_for_one_experiment():
    """The penalty and a callable initial value of several experiments go through the
    rules of a single-experiment problem: the same refusals, the same explanations."""
    rng = np.random.default_rng(0)
    d = _data(0.7, 0.3, 1.0, 0.0, rng)
    for experiments in (None, [Experiment("e1", d), Experiment("e2", d)]):
        kw = dict(states=["A", "B"], parameters=["k1", "k2", "A0"], rhs=_rhs,
                  data=None if experiments else d, experiments=experiments)
        with pytest.raises(ProblemError, match="penalty may depend on parameters only"):
            EstimationProblem(initial={"A": "A0", "B": 0.0},
                              penalty=lambda u: sympy.Symbol("A", real=True) ** 2, **kw)
        with pytest.raises(ProblemError, match="penalty must be callable"):
            EstimationProblem(initial={"A": "A0", "B": 0.0}, penalty=1.0, **kw)
        with pytest.raises(ProblemError, match=r"initial\[A\] gives a state, parameter"):
            EstimationProblem(initial={"A": lambda u: math.exp(u.A0), "B": 0.0}, **kw)
        P = EstimationProblem(initial={"A": lambda u: 2 * u.A0, "B": 0.0},
                              penalty=lambda u: (u.k1 - 1) ** 2, **kw)
        assert str(P.penalty_sym) == "(k1 - 1)**2"


def _preequilibrated_experiments():
    """A <-> B, then B -> C at a rate set per experiment; every experiment starts from the
    steady state of the same pre-equilibration (no B -> C, from C = 0), the third with C
    reset to 0.3."""
    t = np.linspace(0.5, 3.0, 6)
    rhs = lambda x, u, t: [-u.k1 * x.A + u.k2 * x.B,                       # noqa: E731
                           u.k1 * x.A - u.k2 * x.B - u.s * x.B, u.s * x.B]
    pre = Preequilibration(parameters={"s": 0.0})

    def exp(name, s, reset):
        data = pd.DataFrame({"C": 0.1 * s * t}, index=t)
        return Experiment(name, data=data, parameters={"s": s},
                          preequilibration=Preequilibration(parameters={"s": 0.0}, reset=reset,
                                                            initial={"C": 0.0}),
                          initial={"C": 0.3} if reset else None)
    P = EstimationProblem(["A", "B", "C"], [Parameter("k1", 0.7), Parameter("k2", 0.4),
                                            Parameter("s", 0.0, fixed=True, local=True)],
                          rhs, {"A": 1.0, "B": 0.0, "C": 0.0}, data=None, sigma=0.05,
                          experiments=[exp("e1", 0.5, []), exp("e2", 1.5, []),
                                       exp("e3", 1.0, ["C"])], preequilibration=pre)
    return P


def test_experiments_share_one_steady_state_and_their_numeric_functions(monkeypatch):
    from pyomo_odeest.discretization.continuous import ContinuousModel
    from pyomo_odeest.problem._steady_state import SteadyState
    built = []
    init = SteadyState.__init__
    monkeypatch.setattr(SteadyState, "__init__",
                        lambda self, *a, **k: built.append(init(self, *a, **k)))
    P = _preequilibrated_experiments()
    e1, e2, e3 = P.experiment_problems
    assert len(built) == 1                                  # one pre-equilibration, built once
    assert e1.steady_state is e2.steady_state is e3.steady_state
    assert e1._numeric_cache is e2._numeric_cache is e3._numeric_cache is P._numeric_cache
    assert e1.l_sym == e2.l_sym != e3.l_sym                 # e3 resets C
    m1, m2, m3 = (ContinuousModel(sp) for sp in P.experiment_problems)
    assert m1.l is m2.l and m1.l is not m3.l                # equal initial states: built once
    # the same values as a problem of one experiment, built on its own
    alone = EstimationProblem(
        ["A", "B", "C"], [Parameter("k1", 0.7), Parameter("k2", 0.4),
                          Parameter("s", 1.0, fixed=True)],
        lambda x, u, t: [-u.k1 * x.A + u.k2 * x.B, u.k1 * x.A - u.k2 * x.B - u.s * x.B,
                         u.s * x.B], {"A": 1.0, "B": 0.0, "C": 0.3},
        data=e3.data, sigma=0.05, preequilibration=Preequilibration(
            parameters={"s": 0.0}, reset=["C"], initial={"C": 0.0}))
    assert len(built) == 2
    u3 = P.u0
    ua = np.array([0.7, 0.4, 1.0])
    np.testing.assert_allclose(e3.initial_state(u3), alone.initial_state(ua), rtol=1e-12)
    assert m3.objective(u3) == pytest.approx(ContinuousModel(alone).objective(ua), rel=1e-9)


def test_unpickled_experiments_share_their_numeric_functions_again():
    import pickle
    P = pickle.loads(pickle.dumps(_problem()))
    caches = {id(sp._numeric_cache) for sp in P.experiment_problems}
    assert caches == {id(P._numeric_cache)}
