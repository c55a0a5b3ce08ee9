"""Inputs given as data: piecewise-constant, piecewise-linear and spline inputs,
piecewise-constant controls; grids with switching times; exact derivatives; order."""
import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import (SCHEMES, DiscreteModel, EstimationProblem, Experiment, Parameter,
                          ProblemError, estimate, get_scheme, make_grid)
from pyomo_odeest.discretization.schemes import integrate
from pyomo_odeest import PiecewiseConstant, PiecewiseLinear, Spline, inputs_from_frame

T_MEAS = np.linspace(0.5, 5.0, 10)
DATA = pd.DataFrame({"x": np.exp(-0.5 * T_MEAS)}, index=T_MEAS)
INPUTS = {
    "constant": PiecewiseConstant([0, 1.3, 2.7], [0.0, 1.0, 0.3]),
    "linear": PiecewiseLinear([0, 1.3, 2.7, 5], [0.0, 1.0, 0.3, 0.5]),
    "spline": Spline(np.linspace(0, 5, 8), np.sin(np.linspace(0, 5, 8))),
    "control": PiecewiseConstant([0, 1.3, 2.7], ["c0", "c1", 0.3]),
}


def _problem(inp, data=DATA):
    ctl = not inp.parameter_names()          # c0, c1 fixed unless the input is a control
    return EstimationProblem(
        ["x", "y"], [Parameter("k", 0.5), Parameter("c0", 0.1, lb=-2, ub=2, fixed=ctl),
                     Parameter("c1", 0.9, lb=-2, ub=2, fixed=ctl)],
        rhs=lambda x, u, t: [-u.k * x.x + u.F * x.y, -0.1 * x.y + u.F * t],
        initial={"x": 1.0, "y": 0.5}, data=data, inputs={"F": inp})


def test_input_values_and_breakpoints():
    c = INPUTS["constant"]
    np.testing.assert_array_equal(c([0.0, 1.3, np.nextafter(1.3, 0), 9.0]), [0, 1, 0, 0.3])
    lin = INPUTS["linear"]
    assert lin(2.0) == pytest.approx(1.0 + (2.0 - 1.3) / 1.4 * (0.3 - 1.0))
    assert lin.slope(np.nextafter(1.3, 0)) == pytest.approx(1 / 1.3)
    assert lin.slope(1.3) == pytest.approx(-0.7 / 1.4)
    fr = pd.DataFrame({"F": [0.0, 1.0], "G": [2.0, 3.0]}, index=[0.0, 2.0])
    ins = inputs_from_frame(fr, {"F": "constant", "G": "linear"})
    assert ins["F"](1.9) == 0.0 and ins["G"](1.0) == pytest.approx(2.5)
    P = _problem(c)
    np.testing.assert_array_equal(P.switch_times, [1.3, 2.7])


def test_grid_contains_switches_with_twins_and_restarts():
    P = _problem(INPUTS["constant"])
    dm = DiscreteModel(P, steps_per_interval=2)
    t = dm.t
    for s in (1.3, 2.7):
        i = int(np.flatnonzero(t == s)[0])
        assert t[i - 1] == np.nextafter(s, -np.inf)
        assert {i - 1, i} <= set(dm.grid.restarts)
        # no step's history crosses the switch: steps from the twin on restart the ramp
        assert dm.formulas[i - 1].order_q == 1 and dm.formulas[i].order_q == 1
    with pytest.raises(ProblemError, match="switching time"):
        estimate(P, "simultaneous", grid=make_grid(T_MEAS, t0=0.0, extra_times=[1.3, 2.7]))


@pytest.mark.parametrize("kind", list(INPUTS))
def test_discrete_gradients_exact_for_every_scheme(kind):
    P = _problem(INPUTS[kind])
    u = P.u0 * 1.1
    for scheme in SCHEMES:
        dm = DiscreteModel(P, scheme, steps_per_interval=1)
        g = dm.gradient(u, "adjoint")
        np.testing.assert_allclose(g, dm.gradient(u, "fd"), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(dm.gradient(u, "sensitivity"), g, rtol=1e-9, atol=1e-12)
        if scheme == "enright":
            np.testing.assert_allclose(dm.hessian(u, "soa"), dm.hessian(u, "adjoint_fd"),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_observed_order_with_piecewise_input(scheme):
    """x' = -k x + F(t), F piecewise constant: full order on a grid holding the
    switches (refined start-up after each), order 1 when the switch is a plain point."""
    F = INPUTS["constant"]
    k = 0.8

    def exact(T):
        x = 1.0
        for a, b, v in [(0, 1.3, 0.0), (1.3, 2.7, 1.0), (2.7, T, 0.3)]:
            x = v / k + (x - v / k) * np.exp(-k * (b - a))
        return x

    sch = get_scheme(scheme)
    orders = {}
    for mode in ("switches", "plain"):
        errs = []
        for n in (8, 16, 32):
            if mode == "switches":
                g = make_grid([4.0], steps_per_interval=n, switches=[1.3, 2.7], startup="refined")
            else:
                g = make_grid([4.0], steps_per_interval=n, extra_times=[1.3, 2.7],
                              startup="refined")
            X = integrate(sch, lambda x, t: -k * x + F(t), g.t, np.array([1.0]),
                          fdot=lambda x, t: -k * (-k * x + F(t)), restarts=g.restarts)
            errs.append(abs(X[-1, 0] - exact(4.0)))
        orders[mode] = np.log2(errs[-2] / errs[-1])
    assert orders["switches"] > sch.order - 0.25
    assert orders["plain"] < 1.2


@pytest.mark.parametrize("kind", list(INPUTS))
def test_simultaneous_equals_reduced_space_with_inputs(kind):
    P = _problem(INPUTS[kind])
    r = estimate(P, "simultaneous", scheme="enright", steps_per_interval=3)
    rr = estimate(P, "reduced_space", scheme="enright", steps_per_interval=3)
    assert r.success and rr.success
    np.testing.assert_allclose(rr.x, r.x, rtol=1e-6, atol=1e-8)


def test_control_recovered_and_bounded():
    truth = PiecewiseConstant([0, 1.3, 2.7], [0.4, -0.5, 0.3])
    sim = _problem(truth)
    dm = DiscreteModel(sim, steps_per_interval=5)
    X = dm.simulate(np.array([0.5, 0.0, 0.0])).X
    data = pd.DataFrame(X[dm.grid.J], index=T_MEAS, columns=["x", "y"])
    P = _problem(INPUTS["control"], data)
    P.parameters[0].fixed = True
    P.parameters[0].value = 0.5
    # the data are the discretization's own states: its grid recovers the control exactly
    r = estimate(P, "simultaneous", steps_per_interval=5, certify=False)
    np.testing.assert_allclose(r.estimates[["c0", "c1"]], [0.4, -0.5], atol=1e-6)
    P.parameters[2].ub = -0.6                       # the control's bound becomes active
    r = estimate(P, "simultaneous", steps_per_interval=5, certify=False)
    assert r.success and r.estimates["c1"] == pytest.approx(-0.6, abs=1e-7)


def test_inputs_per_experiment():
    exps = [Experiment("a", DATA, inputs={"F": INPUTS["constant"]}),
            Experiment("b", DATA, inputs={"F": INPUTS["linear"]})]
    P = EstimationProblem(
        ["x", "y"], [Parameter("k", 0.5)],
        rhs=lambda x, u, t: [-u.k * x.x + u.F * x.y, -0.1 * x.y + u.F * t],
        initial={"x": 1.0, "y": 0.5}, data=None, inputs=["F"], experiments=exps)
    assert [list(sp.switch_times) for sp in P.experiment_problems] == [[1.3, 2.7], [1.3, 2.7]]
    r = estimate(P, "simultaneous")
    rr = estimate(P, "reduced_space")
    np.testing.assert_allclose(rr.x, r.x, rtol=1e-6)
    with pytest.raises(ProblemError, match="no value for inputs"):
        EstimationProblem(["x", "y"], [Parameter("k", 0.5)],
                          rhs=lambda x, u, t: [-u.k * x.x + u.F * x.y, 0],
                          initial={"x": 1.0, "y": 0.5}, data=None, inputs=["F"],
                          experiments=[Experiment("a", DATA)])


def test_input_errors():
    with pytest.raises(ProblemError, match="also state or parameter"):
        EstimationProblem(["x"], ["k"], lambda x, u, t: [-u.k * x.x], {"x": 1.0},
                          DATA, inputs={"k": INPUTS["constant"]})
    with pytest.raises(ProblemError, match="name no parameter"):
        EstimationProblem(["x"], ["k"], lambda x, u, t: [-u.k * x.x + u.F], {"x": 1.0},
                          DATA, inputs={"F": PiecewiseConstant([0, 1], ["q", 1.0])})
    with pytest.raises(ProblemError, match="spline covers"):
        EstimationProblem(["x"], ["k"], lambda x, u, t: [-u.k * x.x + u.F], {"x": 1.0},
                          DATA, inputs={"F": Spline([0, 1, 2, 3], [0, 1, 0, 1])})
    with pytest.raises(ProblemError, match="must be a PiecewiseConstant"):
        EstimationProblem(["x"], ["k"], lambda x, u, t: [-u.k * x.x + u.F], {"x": 1.0},
                          DATA, inputs={"F": np.ones(3)})
    with pytest.raises(ValueError, match="strictly increasing"):
        PiecewiseConstant([0, 2, 1], [1, 2, 3])
    P = _problem(INPUTS["constant"])
    with pytest.raises(ProblemError, match="adaptive approach does not take inputs"):
        estimate(P, "adaptive")


@pytest.mark.parametrize("module", ["pickle", "cloudpickle"])
@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_problem_and_result_with_inputs_pickle_after_use(kind, module):
    """The inputs' sympy functions are classes made at run time: a used problem and its
    result pickle (the standard pickle: the functions' applications pickle as their
    input, whose classes are made again; cloudpickle, as the runner sends them) and
    estimate identically after loading; before, the standard pickle failed and a
    cloudpickle copy of such a class failed to load ('nargs')."""
    pickler = pytest.importorskip(module)
    P = _problem(INPUTS[kind])
    first = estimate(P, "reduced_space", scheme="enright", steps_per_interval=3)
    res = pickler.loads(pickler.dumps(first.lean()))
    np.testing.assert_array_equal(res.x, first.x)
    again = estimate(pickler.loads(pickler.dumps(P)), "reduced_space",
                     scheme="enright", steps_per_interval=3)
    np.testing.assert_array_equal(again.x, first.x)
