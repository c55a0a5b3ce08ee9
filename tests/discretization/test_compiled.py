"""The compiled (numba) engine of the discrete model gives the numbers of the numpy engine:
simulation, objective, adjoint and sensitivity gradients, sensitivities, second-order
adjoint Hessian, failures; and the numpy engine stays the fallback."""

import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest import make_grid
from pyomo_odeest.discretization.discrete import DiscreteModel, SimulationError, _equations
from pyomo_odeest.discretization.discrete._compiled import AUTO_MIN_BLOCKS
from pyomo_odeest.models import lotka_volterra_problem
from pyomo_odeest import estimate_reduced
from helpers import nonautonomous_problem as nonlinear_problem


try:
    import numba  # noqa: F401
    HAVE_NUMBA = True
except ImportError:
    HAVE_NUMBA = False

def rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def both(prob, *args, **kw):
    return (DiscreteModel(prob, *args, engine="numpy", **kw),
            DiscreteModel(prob, *args, engine="numba", **kw))


SCHEMES = [("adams_pc", 4), ("adams_moulton", 3), ("enright", None),
           ("semi_implicit_enright", None)]


def _compare(prob, scheme, qmax, grid, u):
    a, b = both(prob, scheme, qmax, grid=grid)
    assert a.engine == "numpy" and b.engine == "numba"
    ta, tb = a.simulate(u), b.simulate(u)
    assert rel(tb.W, ta.W) < 1e-12
    assert ta.newton_iterations == tb.newton_iterations
    assert b.objective(u, tb) == pytest.approx(a.objective(u, ta), rel=1e-12)
    for method in ("adjoint", "sensitivity"):
        assert rel(b.gradient(u, method, tb), a.gradient(u, method, ta)) < 1e-12, method
    # the compiled adjoint against the sparse LU of the assembled transposed Jacobian
    assert rel(b.gradient(u, "adjoint", tb), b.gradient(u, "transposed_solve", tb)) < 1e-12
    assert rel(b.sensitivities(tb), a.sensitivities(ta)) < 1e-12
    assert rel(b.adjoint(tb), a.adjoint(ta)) < 1e-12
    Ha, Hb = a.hessian(u, "soa"), b.hessian(u, "soa")
    assert rel(Hb, Ha) < 1e-12
    assert rel(b.hessian(u, "gauss_newton"), a.hessian(u, "gauss_newton")) < 1e-12
    return a, b


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("scheme,qmax", SCHEMES)
@pytest.mark.parametrize("jitter", [0.0, 0.35])
def test_compiled_equals_numpy_nonlinear(scheme, qmax, jitter):
    """Non-autonomous problem, parameter-dependent x_0, nonlinear observations, uniform and
    jittered (non-uniform) grids with the order ramp."""
    prob = nonlinear_problem()
    grid = make_grid(prob.meas_times, 0.0, prob.T, steps_per_interval=6, jitter=jitter, seed=3)
    _compare(prob, scheme, qmax, grid, np.array([0.9, 1.4, 0.25]))


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("scheme,qmax", SCHEMES)
def test_compiled_equals_numpy_lotka_volterra(scheme, qmax):
    prob = lotka_volterra_problem()
    grid = make_grid(prob.meas_times, 0.0, prob.T, steps_per_interval=20, jitter=0.3, seed=5)
    _compare(prob, scheme, qmax, grid, np.array([0.9, 1.1, 0.95, 1.05]))


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_compiled_functional_gradient_and_state_sensitivities():
    prob = nonlinear_problem()
    a, b = both(prob, "enright", None, steps_per_interval=5)
    u = np.array([0.9, 1.4, 0.25])
    ta, tb = a.simulate(u), b.simulate(u)
    dFdx = np.zeros((a.k + 1, a.n))
    dFdx[-1, 0] = 1.0
    dFdx[a.k // 2, 1] = -2.0
    assert rel(b.functional_gradient(tb, dFdx), a.functional_gradient(ta, dFdx)) < 1e-12
    assert rel(b.state_sensitivities(tb), a.state_sensitivities(ta)) < 1e-12


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_compiled_reports_the_same_failure():
    """x^1.5 of a negative state: the same step is named by both engines."""
    t = np.array([1.0, 2.0, 3.0])
    prob = po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 1.0)],
                                rhs=lambda x, u, t: [-u.k * x.x**1.5 - 1.0], initial={"x": 1.0},
                                data=pd.DataFrame({"x": [0.5, 0.3, 0.2]}, index=t))
    msgs = []
    for dm in both(prob, "adams_pc", 3, max_step=0.1):
        with pytest.raises(SimulationError, match="non-finite state in step") as err:
            dm.simulate(np.array([1.0]))
        msgs.append((str(err.value), err.value.step))
    assert msgs[0] == msgs[1]


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_compiled_estimate_equals_numpy_estimate():
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    a, b = both(prob, steps_per_interval=10)
    ra, rb = estimate_reduced(prob, model=a), estimate_reduced(prob, model=b)
    assert ra.success and rb.success
    assert rel(rb.x, ra.x) < 1e-8
    assert rb.objective == pytest.approx(ra.objective, rel=1e-10)


def test_numpy_engine_is_the_fallback(monkeypatch):
    """Without numba, 'auto' runs numpy and says why; 'numba' asks for the extra."""
    monkeypatch.setattr(_equations, "numba_available", lambda: False)
    prob = lotka_volterra_problem()
    dm = DiscreteModel(prob, steps_per_interval=60)
    assert dm.nblocks >= AUTO_MIN_BLOCKS
    assert dm.engine == "numpy" and "numba" in dm.engine_note
    assert np.all(np.isfinite(dm.gradient(np.array([0.9, 1.1, 0.95, 1.05]))))
    with pytest.raises(ImportError, match="compiled"):
        DiscreteModel(prob, steps_per_interval=2, engine="numba")
    with pytest.raises(ValueError, match="engine"):
        DiscreteModel(prob, steps_per_interval=2, engine="fortran")


def _input_problem(F, control=False):
    t = np.linspace(0.0, 6.0, 13)[1:]
    params = [po.Parameter("k", 0.5, lb=0.01, ub=5.0), po.Parameter("a", 1.2)]
    if control:
        params += [po.Parameter("c0", 0.4, lb=0.0, ub=2.0), po.Parameter("c1", 1.5, lb=0.0,
                                                                          ub=2.0)]
    return po.EstimationProblem(
        states=["x", "y"], parameters=params,
        rhs=lambda x, u, t: [-u.k * x.x + u.a * u.F * x.y, u.F - 0.1 * x.y * x.x],
        initial={"x": 1.0, "y": 1.0},
        data=pd.DataFrame({"x": np.exp(-0.5 * t) + 0.1, "y": 1 + 0.1 * t}, index=t),
        inputs={"F": F})


INPUTS = {
    # right-continuous pieces, a switch on a grid point of the default grid
    "constant": lambda: po.PiecewiseConstant([0.0, 1.3, 3.0, 4.1], [0.0, 1.0, 0.3, 2.0]),
    # its slope ends at T: 0 at T itself (right-continuous), as the numpy engine has it
    "linear": lambda: po.PiecewiseLinear([0.0, 1.3, 2.7, 4.1, 6.0], [0.0, 1.0, 0.3, 2.0, 0.5]),
    "spline": lambda: po.Spline(np.linspace(0.0, 6.0, 8), np.sin(np.linspace(0.0, 6.0, 8))),
    "control": lambda: po.PiecewiseConstant([0.0, 2.5], ["c0", "c1"]),
}


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("kind", list(INPUTS))
@pytest.mark.parametrize("scheme,qmax", SCHEMES)
def test_inputs_given_as_data_are_compiled(kind, scheme, qmax):
    """Inputs given as data (piecewise constant, linear, spline, a piecewise-constant
    control) run compiled, one cubic per piece between the switching times, with the
    numbers of the numpy engine, which evaluates them by their own functions."""
    prob = _input_problem(INPUTS[kind](), control=kind == "control")
    grid = make_grid(prob.meas_times, prob.t0, prob.T, steps_per_interval=6,
                     switches=prob.switch_times)
    _compare(prob, scheme, qmax, grid, prob.u0 * 1.1)


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_an_input_that_is_not_piecewise_cubic_stays_on_numpy():
    """An input that is not a polynomial of degree <= 3 between its breakpoints has no
    compiled form: 'auto' keeps numpy (with the reason), 'numba' refuses."""
    from pyomo_odeest.problem._inputs import Input, _implemented

    class Decay(Input):
        def expression(self, t_sym, symbol_of_parameter):
            return _implemented("decay", lambda t: np.exp(-np.asarray(t, dtype=float)))(t_sym)

    prob = _input_problem(Decay())
    dm = DiscreteModel(prob, steps_per_interval=400)
    assert dm.nblocks >= AUTO_MIN_BLOCKS
    assert dm.engine == "numpy" and "polynomial" in dm.engine_note
    assert np.isfinite(dm.objective(prob.u0))
    with pytest.raises(ValueError, match="engine='numba'"):
        DiscreteModel(prob, steps_per_interval=3, engine="numba").simulate(prob.u0)


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_auto_engine_compiles_large_models_only():
    prob = lotka_volterra_problem()
    small = DiscreteModel(prob, steps_per_interval=10)
    large = DiscreteModel(prob, steps_per_interval=100)
    assert small.nblocks < AUTO_MIN_BLOCKS <= large.nblocks
    assert small.engine == "numpy" and "blocks" in small.engine_note
    assert large.engine == "numba"


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("scheme", ["adams_pc", "enright"])
def test_compiled_adjoint_equals_ipopt_multipliers(scheme):
    """The compiled adjoint sweep reproduces Ipopt's multipliers of the simultaneous
    block at its solution (as the numpy sweep does in test_reduced.py)."""
    from pyomo_odeest import validate_multipliers, estimate_simultaneous
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    res = estimate_simultaneous(prob, scheme, 4, steps_per_interval=10, options={"tol": 1e-10})
    b = res.model.est
    dm = DiscreteModel(b.problem, b.scheme, grid=b.grid, engine="numba")
    rep = validate_multipliers(res.model, dm)
    assert dm.engine == "numba"
    assert rep.max_rel_adjoint < 1e-6
    assert rep.max_rel_recursion < 1e-6


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_compiled_model_pickles():
    cloudpickle = pytest.importorskip("cloudpickle")
    prob = lotka_volterra_problem()
    dm = DiscreteModel(prob, steps_per_interval=5, engine="numba")
    u = np.array([0.9, 1.1, 0.95, 1.05])
    g = dm.gradient(u)
    dm2 = cloudpickle.loads(cloudpickle.dumps(dm))
    assert dm2.engine == "numba"
    assert rel(dm2.gradient(u), g) < 1e-14
