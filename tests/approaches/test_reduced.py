"""Reduced-space backend: gradients, Hessians, multipliers, comparison [GM-grad, §2.3, §2.5]."""

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest

import pyomo_odeest as po
from pyomo_odeest import build_block, compare_approaches
from pyomo_odeest.discretization.discrete import DiscreteModel, SimulationError
from pyomo_odeest import make_grid
from pyomo_odeest.models import LV_P0, lotka_volterra_problem
from pyomo_odeest import validate_multipliers
from pyomo_odeest.analysis._multipliers import adjoint_from_duals
from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.analysis import paper_gradient, paper_sensitivity_gradient
from pyomo_odeest import estimate_reduced, estimate_simultaneous, initialize_block


SCHEMES = ["adams_pc", "adams_moulton", "enright", "semi_implicit_enright"]


from helpers import nonautonomous_problem as nonlinear_problem, rel






@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("jitter", [0.0, 0.35])
def test_all_gradients_agree(prob, scheme, jitter):
    """Adjoint, transposed solve, sensitivity and paper recursions agree to 1e-10; FD to 1e-6."""
    grid = make_grid(prob.meas_times, 0.0, prob.T, steps_per_interval=5, jitter=jitter, seed=7)
    dm = DiscreteModel(prob, scheme, qmax=4, grid=grid)          # Q ramp 1, 2, 3
    u = np.array([0.9, 1.4, 0.25])
    traj = dm.simulate(u)
    g = dm.gradient(u, "adjoint", traj)
    for method in ("transposed_solve", "sensitivity", "recursion"):
        assert rel(dm.gradient(u, method, traj), g) < 1e-10, method
    if scheme != "semi_implicit_enright":
        assert rel(paper_sensitivity_gradient(dm, traj), g) < 1e-10
    assert rel(dm.gradient(u, "fd", fd_step=1e-6), g) < 1e-6


@pytest.mark.parametrize("scheme", SCHEMES)
def test_hessians(prob, scheme):
    dm = DiscreteModel(prob, scheme, qmax=3, steps_per_interval=4)
    u = np.array([0.9, 1.4, 0.25])
    H = dm.hessian(u, "soa")
    Hfd = dm.hessian(u, "adjoint_fd", fd_step=1e-5)
    assert rel(H, Hfd) < 1e-5
    # central differences of the sensitivity gradient as an independent reference
    Hs = np.zeros_like(H)
    for a in range(3):
        e = np.zeros(3)
        e[a] = 1e-5
        Hs[:, a] = (dm.gradient(u + e, "sensitivity") - dm.gradient(u - e, "sensitivity")) / 2e-5
    assert rel(H, Hs) < 1e-5
    assert np.allclose(H, H.T)


def test_gauss_newton_is_exact_for_zero_residual():
    """At a zero-residual point, GN equals the exact Hessian; elsewhere it differs."""
    prob = lotka_volterra_problem()
    dm = DiscreteModel(prob, "adams_pc", 3, steps_per_interval=4)
    u = np.array([1.0, 1.1, 0.9, 1.0])
    traj = dm.simulate(u)
    zero = prob.data.copy()
    zero.loc[:, :] = traj.X[dm.grid.J]
    p0 = lotka_volterra_problem(data=zero)
    dm0 = DiscreteModel(p0, "adams_pc", 3, steps_per_interval=4)
    assert rel(dm0.hessian(u, "gauss_newton"), dm0.hessian(u, "soa")) < 1e-10
    assert rel(dm.hessian(u, "gauss_newton"), dm.hessian(u, "soa")) > 1e-3


def test_objective_equals_block_objective(prob):
    """Reduced J_k(u) is the block's objective at the simulated states."""
    for scheme in SCHEMES:
        b = build_block(prob, scheme, 4, steps_per_interval=3)
        m = pyo.ConcreteModel()
        m.est = b
        u = np.array([0.9, 1.4, 0.25])
        for p, v in zip(prob.parameter_names, u):
            b.u[p].set_value(v)
        initialize_block(b, u, "simulate")
        dm = DiscreteModel(prob, scheme, 4, steps_per_interval=3)
        assert dm.objective(u) == pytest.approx(pyo.value(b.objective), rel=1e-12)
        # and its residual G(w, u) matches the block's constraint rows
        ev = PyomoNLPEvaluator(m)
        x = np.array([v.value for v in ev.variables])
        assert np.max(np.abs(ev.constraints(x) - ev.g_lb)) < 1e-12


def test_simulation_failure_is_reported():
    prob = lotka_volterra_problem(p0=LV_P0)
    dm = DiscreteModel(prob, "adams_pc", 4, steps_per_interval=10)
    with pytest.raises(SimulationError) as err:
        dm.simulate(np.array(LV_P0))
    assert err.value.step is not None and 3.0 < err.value.time < 4.5
    res = estimate_reduced(prob, "adams_pc", 4, steps_per_interval=10)
    assert not res.success and res.status is po.Status.SIMULATION_FAILED


@pytest.mark.parametrize("optimizer,hessian", [("ipopt", "soa"), ("ipopt", None),
                                               ("ipopt", "gauss_newton"), ("L-BFGS-B", None),
                                               ("trust-constr", "soa")])
def test_reduced_matches_simultaneous(optimizer, hessian):
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    sim = estimate_simultaneous(prob, "adams_pc", 4, steps_per_interval=10, options={"tol": 1e-10})
    red = estimate_reduced(prob, "adams_pc", 4, steps_per_interval=10, optimizer=optimizer,
                           hessian=hessian)
    assert sim.success and red.success, (sim.status, red.status)
    assert rel(red.x, sim.x) < 1e-5
    assert red.objective == pytest.approx(sim.objective, rel=1e-9)
    assert red.states.shape == sim.states.shape


def test_scipy_stop_away_from_a_stationary_point_is_not_a_success():
    """L-BFGS-B told to stop on a 10 % relative decrease of J reports convergence far
    from the optimum; the reduced space withdraws the success (projected gradient
    against the limit of :mod:`pyomo_odeest.nlp._stationarity`)."""
    prob = nonlinear_problem()
    good = estimate_reduced(prob, "adams_pc", 4, steps_per_interval=5, optimizer="L-BFGS-B")
    assert good.success, good.status
    res = estimate_reduced(prob, "adams_pc", 4, steps_per_interval=5, optimizer="L-BFGS-B",
                           options=dict(ftol=1e-1))
    assert not res.success and res.status is po.Status.NOT_STATIONARY
    assert "projected gradient" in res.message
    assert rel(res.x, good.x) > 1e-2


def test_reduced_respects_bounds():
    prob = lotka_volterra_problem(p0=(0.8,) * 4, bounds={"p3": (0.0, 0.95)})
    for opt in ("ipopt", "L-BFGS-B", "trust-constr"):
        res = estimate_reduced(prob, "adams_pc", 3, steps_per_interval=5, optimizer=opt)
        assert res.estimates["p3"] <= 0.95 + 1e-8
        assert res.estimates["p3"] == pytest.approx(0.95, abs=1e-5), opt


@pytest.mark.parametrize("scheme", ["adams_pc", "enright"])
def test_multipliers_equal_recursion_at_solution(scheme):
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    res = estimate_simultaneous(prob, scheme, 4, steps_per_interval=10, options={"tol": 1e-10})
    rep = validate_multipliers(res.model)
    assert rep.max_rel_recursion < 1e-6
    assert rep.max_rel_adjoint < 1e-6
    # the multipliers are not trivially zero: p_0 is of order one
    assert np.max(np.abs(res.adjoint.to_numpy())) > 1e-2


@pytest.mark.parametrize("scheme", ["adams_pc", "enright", "semi_implicit_enright"])
@pytest.mark.parametrize("u", [(0.9, 1.1, 0.95, 1.05), (1.2, 0.8, 1.1, 0.7)])
def test_duals_give_adjoint_and_gradient_at_fixed_u(scheme, u):
    prob = lotka_volterra_problem()
    rep, g = adjoint_from_duals(prob, u, scheme, 4, steps_per_interval=5)
    assert rep.max_rel_recursion < 1e-6
    dm = DiscreteModel(prob, scheme, 4, steps_per_interval=5)
    assert rel(g, dm.gradient(np.array(u))) < 1e-6
    assert rel(g, paper_gradient(dm, dm.simulate(np.array(u)))) < 1e-6


@pytest.mark.parametrize("scheme", ["adams_pc", "enright", "semi_implicit_enright"])
def test_adjoint_start_is_the_discrete_adjoint(scheme):
    """The multipliers the simultaneous approach starts Ipopt from at a simulated start
    (``adjoint_multipliers``) are the discrete adjoint of that start: the papers'
    recursion [GM-grad, eq. (52)] to 1e-8, and through eq. (54) the reduced-space
    gradient."""
    from pyomo_odeest.nlp._cyipopt_adapter import adjoint_multipliers
    prob = lotka_volterra_problem()
    u = np.array([0.9, 1.1, 0.95, 1.05])
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, 4, steps_per_interval=5)
    assert initialize_block(m.est, u, "simulate") == "simulate"
    for p, v in zip(prob.parameter_names, u):
        m.est.u[p].set_value(float(v))
    ev = PyomoNLPEvaluator(m)
    params = {id(v) for v in m.est.u.values()}
    y = adjoint_multipliers(ev, ev.x0, [id(v) in params for v in ev.variables])
    assert y is not None and np.max(np.abs(y)) > 1e-2
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    for row, val in zip(ev.constraint_rows, y):
        m.dual[row] = float(val)
    rep = validate_multipliers(m)
    assert rep.max_rel_recursion < 1e-8 and rep.max_rel_adjoint < 1e-8
    dm = DiscreteModel(prob, scheme, 4, steps_per_interval=5)
    assert rel(rep.gradient_from_duals, dm.gradient(u)) < 1e-8
    # not square (a parameter left out of the decisions): Ipopt's own estimate then
    assert adjoint_multipliers(ev, ev.x0, [False] * ev.n) is None


def test_comparison_table():
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    tab, res = compare_approaches(prob, ("simultaneous", "reduced_space"), qmax=4,
                                  steps_per_interval=10)
    assert list(tab.index) == ["simultaneous", "reduced_space"]
    for col in ("method", "p1", "p4", "objective", "status", "iterations", "fevals", "gevals",
                "wall_s"):
        assert col in tab.columns
    assert tab["success"].all()
    assert rel(tab.loc["reduced_space", ["p1", "p2", "p3", "p4"]].to_numpy(float),
               tab.loc["simultaneous", ["p1", "p2", "p3", "p4"]].to_numpy(float)) < 1e-5
    # from the seed's hard start the reduced space fails cleanly, the block converges
    tab2, _ = compare_approaches(lotka_volterra_problem(p0=LV_P0), qmax=4, steps_per_interval=10)
    assert tab2.loc["simultaneous", "success"] and not tab2.loc["reduced_space", "success"]


def test_penalty_term_in_every_derivative():
    """A parameter penalty R(u) enters J_k, its gradient and Hessian, and the block objective."""
    base = lotka_volterra_problem(p0=(0.9,) * 4)
    prob = po.EstimationProblem(
        states=base.states, parameters=[po.Parameter(f"p{k}", 0.9) for k in range(1, 5)],
        rhs=po.models._lotka_volterra.lv_rhs, initial={"x1": 0.4, "x2": 1.0}, data=base.data,
        penalty=lambda u: 0.5 * (u.p1 + u.p2 - 2.5) ** 2 + pyo.exp(0.1 * u.p3 * u.p4))
    u = np.array([0.9, 1.1, 0.95, 1.05])
    dm = DiscreteModel(prob, "adams_pc", 3, steps_per_interval=4)
    dm0 = DiscreteModel(base, "adams_pc", 3, steps_per_interval=4)
    R = 0.5 * (u[0] + u[1] - 2.5) ** 2 + np.exp(0.1 * u[2] * u[3])
    assert dm.objective(u) == pytest.approx(dm0.objective(u) + R, rel=1e-13)
    g = dm.gradient(u)
    for method in ("transposed_solve", "sensitivity", "recursion"):
        assert rel(dm.gradient(u, method), g) < 1e-10
    assert rel(dm.gradient(u, "fd"), g) < 1e-6
    assert rel(dm.hessian(u, "soa"), dm.hessian(u, "adjoint_fd")) < 1e-5
    sim = estimate_simultaneous(prob, "adams_pc", 3, steps_per_interval=4, options={"tol": 1e-10})
    red = estimate_reduced(prob, "adams_pc", 3, steps_per_interval=4)
    assert rel(red.x, sim.x) < 1e-6
    assert sim.objective == pytest.approx(red.objective, rel=1e-9)


def test_fractional_power_of_negative_state_is_reported():
    """x' = −k x^1.5 − 1 drives x below 0, where x^1.5 is undefined: the simulation
    reports the step (a SimulationError), it does not leak a complex number."""
    t = np.array([1.0, 2.0, 3.0])
    prob = po.EstimationProblem(states=["x"], parameters=[po.Parameter("k", 1.0)],
                                rhs=lambda x, u, t: [-u.k * x.x**1.5 - 1.0], initial={"x": 1.0},
                                data=pd.DataFrame({"x": [0.5, 0.3, 0.2]}, index=t))
    dm = DiscreteModel(prob, "adams_pc", 3, max_step=0.1)
    with pytest.raises(SimulationError, match="non-finite state in step"):
        dm.simulate(np.array([1.0]))


def test_parameter_scaling_same_optimum_and_bad_scaling_rejected():
    """Ipopt with x_scaling = 1/|u0| (default) and without reach the same optimum."""
    from pyomo_odeest import solve_with_ipopt
    from pyomo_odeest.approaches import ReducedSpaceNLP
    prob = lotka_volterra_problem(p0=(0.8, 0.8, 0.8, 0.8))
    a = estimate_reduced(prob, qmax=3, steps_per_interval=5, scale=True)
    b = estimate_reduced(prob, qmax=3, steps_per_interval=5, scale=False)
    assert a.success and b.success
    np.testing.assert_allclose(a.x, b.x, rtol=1e-8)
    nlp = ReducedSpaceNLP(DiscreteModel(prob, "adams_pc", 3, steps_per_interval=5))
    with pytest.raises(ValueError, match="positive finite"):
        solve_with_ipopt(nlp, x_scaling=[1.0, -1.0, 1.0, 1.0])


def test_simultaneous_solver_reports_the_adjoint_start():
    """A simulated start is solved from its adjoint (``last_info['adjoint_start']``);
    a block with a free variable the constraints do not determine is not."""
    from pyomo_odeest.nlp import OdeestIpoptSolver
    prob = lotka_volterra_problem()
    m = pyo.ConcreteModel()
    m.est = build_block(prob, "adams_pc", 4, steps_per_interval=5)
    initialize_block(m.est, np.array([0.9, 1.1, 0.95, 1.05]), "simulate")
    s = OdeestIpoptSolver()
    s.solve(m, adjoint_start=list(m.est.u.values()))
    assert s.last_info["adjoint_start"] is True
    s.solve(m, adjoint_start=list(m.est.u.values())[:-1])
    assert s.last_info["adjoint_start"] is False


def test_adjoint_start_reaches_ipopt_unclipped():
    """Multipliers above Ipopt's warm-start cap (``warm_start_mult_init_max``, 1e6 in the
    scaled problem) reach Ipopt as given, so its first iterate is as stationary as the
    adjoint makes it.  y = v through the row 1e-6·(y − v) = 0; min 1e-5·(y − 2e6)² + 20·v
    has its minimum at the start v = 1e6, where the row's adjoint multiplier is 2e7
    (every gradient at most 20: Ipopt scales nothing).  Clipped to 1e6, the first
    dual infeasibility was 19."""
    from pyomo_odeest.nlp import OdeestIpoptSolver
    m = pyo.ConcreteModel()
    m.v = pyo.Var(initialize=1e6, bounds=(0.0, 1e7))
    m.y = pyo.Var(initialize=1e6)
    m.c = pyo.Constraint(expr=1e-6 * (m.y - m.v) == 0)
    m.obj = pyo.Objective(expr=1e-5 * (m.y - 2e6) ** 2 + 20 * m.v)
    seen = {}

    def first(iter_count, obj_value, inf_pr, inf_du, mu):
        seen.setdefault(iter_count, inf_du)
        return True
    s = OdeestIpoptSolver()
    s.solve(m, adjoint_start=[m.v], intermediate_callback=first, options={"max_iter": 50})
    assert s.last_info["adjoint_start"] is True
    assert seen[0] < 1e-6, seen
    assert pyo.value(m.v) == pytest.approx(1e6, rel=1e-6)


def test_adjoint_start_at_an_optimum_on_a_bound_stays_there():
    """At a start that is already the optimum, with the decision on its bound, the warm
    start (the adjoint, bound multipliers that carry the gradient pointing out of the
    box, a small barrier parameter: ``warm_start``) is stationary from its first
    iterate and Ipopt does not leave it: min (y − 2)² with y = v, v in [0, 1], from
    v = 1.  Ipopt's cold bound multipliers (1) and barrier (0.1) first pull v into the
    box's interior."""
    from pyomo_odeest.nlp import OdeestIpoptSolver
    from pyomo_odeest.nlp import _cyipopt_adapter as ca

    def solve():
        m = pyo.ConcreteModel()
        m.v = pyo.Var(initialize=1.0, bounds=(0.0, 1.0))
        m.y = pyo.Var(initialize=1.0)
        m.c = pyo.Constraint(expr=m.y - m.v == 0)
        m.obj = pyo.Objective(expr=(m.y - 2.0) ** 2)
        seen = {}

        def watch(iter_count, obj_value, inf_pr, inf_du, mu, iterate):
            seen[iter_count] = (inf_du, float(np.min(iterate())))
            return True
        s = OdeestIpoptSolver()
        s.solve(m, adjoint_start=[m.v], intermediate_callback=watch)
        assert s.last_info["adjoint_start"] is True
        return pyo.value(m.v), seen

    v, seen = solve()
    assert v == pytest.approx(1.0, abs=1e-7)
    assert seen[0][0] < 1e-3, seen
    assert min(x for _, x in seen.values()) > 0.98, seen       # never pulled inside
    assert len(seen) <= 8, seen
    cold = ca.WARM_MU_INIT
    try:
        ca.WARM_MU_INIT = None                    # the cold start's bound multipliers
        v0, seen0 = solve()
    finally:
        ca.WARM_MU_INIT = cold
    assert v0 == pytest.approx(1.0, abs=1e-7)
    assert seen0[0][0] > 0.5 and min(x for _, x in seen0.values()) < 0.98, seen0
