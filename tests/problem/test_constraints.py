"""Path constraints c(x, u, t) <= 0 and parameter constraints r(u) <= 0."""
import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import (EstimationProblem, Experiment, ParameterConstraint, PathConstraint,
                          Parameter, ProblemError, estimate)
from pyomo_odeest.approaches import ReducedSpaceNLP
from pyomo_odeest.approaches._reduced import discrete_model

T = np.linspace(0.5, 5, 10)
K1, K2 = 1.0, 0.3
DATA = pd.DataFrame({"A": np.exp(-K1 * T),
                     "B": K1 / (K2 - K1) * (np.exp(-K1 * T) - np.exp(-K2 * T))}, index=T)


def _problem(bmax=0.5, ksum=None, at="grid", data=DATA):
    cons = [PathConstraint("bmax", lambda x, u, t: x.B - bmax, at=at)]
    if ksum is not None:
        cons.append(ParameterConstraint("ksum", lambda u: u.k1 + u.k2 - ksum))
    return EstimationProblem(
        ["A", "B"], [Parameter("k1", 0.5, lb=0), Parameter("k2", 0.5, lb=0)],
        rhs=lambda x, u, t: [-u.k1 * x.A, u.k1 * x.A - u.k2 * x.B],
        initial={"A": 1.0, "B": 0.0}, data=data, constraints=cons)


def test_active_state_constraint_and_its_multiplier():
    """max B = 0.587 without the constraint; B <= 0.5 is active at one grid point and its
    multiplier is the sensitivity of the optimal objective, dJ*/db = -lambda."""
    r = estimate(_problem(0.5), "simultaneous", steps_per_interval=4)
    assert r.success
    assert r.states["B"].max() == pytest.approx(0.5, abs=1e-7)
    lam = r.multipliers["path_bmax"]["bmax"]
    assert lam.min() > -1e-8 and lam.max() > 1.0
    assert lam.idxmax() == pytest.approx(r.states["B"].idxmax())
    d = 1e-4
    jp = estimate(_problem(0.5 + d), "simultaneous", steps_per_interval=4).objective
    jm = estimate(_problem(0.5 - d), "simultaneous", steps_per_interval=4).objective
    assert -(jp - jm) / (2 * d) == pytest.approx(lam.sum(), rel=1e-4)


def test_reduced_space_constraints_equal_simultaneous():
    P = _problem(0.5, ksum=1.15)
    r = estimate(P, "simultaneous", steps_per_interval=4)
    rr = estimate(P, "reduced_space", steps_per_interval=4)
    assert r.success and rr.success
    np.testing.assert_allclose(rr.x, r.x, rtol=1e-6)
    # both solved to Ipopt's tol=1e-8: multipliers agree to the barrier's accuracy
    np.testing.assert_allclose(rr.multipliers["path_bmax"], r.multipliers["path_bmax"],
                               rtol=1e-4, atol=1e-4)
    pm, pmr = (x.extra["parameter_constraint_multipliers"]["ksum"] for x in (r, rr))
    assert pm > 0.01 and pmr == pytest.approx(pm, rel=1e-4)
    assert r.x.sum() == pytest.approx(1.15, abs=1e-7)


def test_reduced_constraint_jacobian_exact():
    P = _problem(0.5, ksum=1.15, at="measurements")
    nlp = ReducedSpaceNLP(discrete_model(P, steps_per_interval=3))
    x = np.array([0.8, 0.35])
    J = nlp.jacobian_dense(x)
    assert J.shape == (len(T) + 1, 2)
    h = 1e-6
    fd = np.column_stack([(nlp.constraints(x + h * e) - nlp.constraints(x - h * e)) / (2 * h)
                          for e in np.eye(2)])
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-9)


def test_path_constraints_per_experiment():
    exps = [Experiment("a", DATA), Experiment("b", DATA * 1.1, initial={"A": 1.1})]
    P = EstimationProblem(
        ["A", "B"], [Parameter("k1", 0.5, lb=0), Parameter("k2", 0.5, lb=0)],
        rhs=lambda x, u, t: [-u.k1 * x.A, u.k1 * x.A - u.k2 * x.B],
        initial={"A": 1.0, "B": 0.0}, data=None, experiments=exps,
        constraints=[PathConstraint("bmax", lambda x, u, t: x.B - 0.55, at="measurements"),
                     ParameterConstraint("ksum", lambda u: u.k1 + u.k2 - 1.2)])
    r = estimate(P, "simultaneous", steps_per_interval=3)
    rr = estimate(P, "reduced_space", steps_per_interval=3)
    assert r.success and rr.success
    np.testing.assert_allclose(rr.x, r.x, rtol=1e-6)
    lam = r.multipliers["path_bmax"]
    assert list(lam.index.get_level_values("experiment").unique()) == ["a", "b"]
    assert r.fitted["B"].max() <= 0.55 + 1e-7
    assert lam["bmax"].loc["b"].max() > 0.01           # active in experiment b


def test_unsupported_combinations_raise():
    P = _problem(0.5, ksum=1.2)
    with pytest.raises(ProblemError, match="adaptive approach does not take path or "
                                           "parameter constraints"):
        estimate(P, "adaptive")
    with pytest.raises(ProblemError, match="continuous approach imposes path constraints at "
                                           "the measurement times only.*'bmax' has at='grid'"):
        estimate(P, "continuous")
    with pytest.raises(ProblemError, match="optimizer 'L-BFGS-B' does not take"):
        estimate(_problem(0.5, ksum=1.2, at="measurements"), "continuous", optimizer="L-BFGS-B")
    with pytest.raises(ProblemError, match="optimizer 'L-BFGS-B' does not take"):
        estimate(P, "reduced_space", optimizer="L-BFGS-B")
    with pytest.raises(ProblemError, match="at must be"):
        PathConstraint("c", lambda x, u, t: x.A, at="sometimes")
    with pytest.raises(AttributeError, match="no parameter named 'A'"):
        EstimationProblem(["A"], ["k"], lambda x, u, t: [-u.k * x.A], {"A": 1.0}, DATA[["A"]],
                          constraints=[ParameterConstraint("r", lambda u: u.k * 2 - u.A)])
    with pytest.raises(ProblemError, match="PathConstraint or ParameterConstraint"):
        EstimationProblem(["A"], ["k"], lambda x, u, t: [-u.k * x.A], {"A": 1.0}, DATA[["A"]],
                          constraints=[lambda x, u, t: x.A])


def test_cli_model_file_takes_constraints_and_inputs(tmp_path):
    from pyomo_odeest.cli import build_problem, load_model_file
    f = tmp_path / "model.py"
    f.write_text(
        "from pyomo_odeest import Parameter, PathConstraint, ParameterConstraint, "
        "PiecewiseConstant\n"
        "states = ['A', 'B']\n"
        "parameters = [Parameter('k1', 0.5, lb=0), Parameter('k2', 0.5, lb=0)]\n"
        "rhs = lambda x, u, t: [-u.k1 * x.A + u.F, u.k1 * x.A - u.k2 * x.B]\n"
        "initial = {'A': 1.0, 'B': 0.0}\n"
        "inputs = {'F': PiecewiseConstant([0, 2], [0.0, 0.1])}\n"
        "constraints = [PathConstraint('bmax', lambda x, u, t: x.B - 0.5),\n"
        "               ParameterConstraint('ksum', lambda u: u.k1 + u.k2 - 1.2)]\n")
    P = build_problem(load_model_file(f), DATA)
    assert [c.name for c, _ in P.path_constraints] == ["bmax"]
    assert [c.name for c, _ in P.parameter_constraints] == ["ksum"]
    assert list(P.switch_times) == [2.0]
