"""Multiple shooting [AT]: constraint derivatives (6), (17), the one-interval limit,
the Lotka–Volterra hard start (18)–(19) and the degenerate scalar form (8)."""

import numpy as np
import pytest

import pyomo_odeest as po

from pyomo_odeest import compare_approaches
from pyomo_odeest.discretization.discrete import DiscreteModel
from pyomo_odeest import make_grid
from pyomo_odeest.models import LV_P0, lotka_volterra_problem
from pyomo_odeest import EvaluationError, estimate_reduced, estimate_multiple_shooting
from pyomo_odeest.approaches import MultipleShootingNLP
from pyomo_odeest.approaches._shooting import interval_models, node_start_values



from helpers import nonautonomous_problem as nonlinear_problem, rel




def fd_jacobian(fun, x, step=1e-6):
    cols = []
    for a in range(len(x)):
        e = np.zeros_like(x)
        e[a] = step * max(1.0, abs(x[a]))
        cols.append((fun(x + e) - fun(x - e)) / (2 * e[a]))
    return np.array(cols).T


def nlp_pair(prob, u, grid, nodes, scheme, formulation):
    im = interval_models(prob, scheme, 4, grid=grid, nodes=nodes)
    S, _ = node_start_values(prob, im.nodes, u, "data")
    S = S + 0.05 * np.cos(np.arange(S.size)).reshape(S.shape)      # off the data, infeasible
    out = [MultipleShootingNLP(prob, im, formulation, jac, u, S) for jac in ("adjoint", "sensitivity")]
    return out


CASES = [
    # LV on a jittered grid: ten intervals with different non-uniform sub-grids
    ("lv", "adams_pc", None), ("lv", "enright", None),
    # non-autonomous problem, x0 = l(u) (initial-state rows), measurements off the nodes
    ("nl", "adams_pc", (0.8, 1.6)), ("nl", "enright", (0.8, 1.6)),
]


@pytest.mark.parametrize("which,scheme,nodes", CASES)
@pytest.mark.parametrize("formulation", ["vector", "scalar"])
def test_adjoint_jacobian_equals_sensitivities_and_differences(which, scheme, nodes, formulation):
    if which == "lv":
        prob = lotka_volterra_problem(p0=(0.9, 1.1, 0.95, 1.05))
        grid = make_grid(prob.meas_times, 0.0, prob.T, steps_per_interval=4, jitter=0.35, seed=3)
        u = prob.u0
    else:
        prob = nonlinear_problem()
        grid = make_grid(prob.meas_times, 0.0, prob.T, steps_per_interval=4, jitter=0.35, seed=5,
                         extra_times=nodes)
        u = np.array([0.9, 1.4, 0.25])
    adj, sens = nlp_pair(prob, u, grid, nodes, scheme, formulation)
    h = np.diff(grid.t)
    assert h.max() / h.min() > 1.3                       # really non-uniform
    assert adj.N >= 3
    x = adj.x0.copy()
    Ja, Js = adj.jacobian_dense(x), sens.jacobian_dense(x)
    assert np.max(np.abs(adj.constraints(x))) > 1e-3     # an infeasible point
    assert rel(Ja, Js) < 1e-6
    Jfd = fd_jacobian(adj.constraints, x)
    assert rel(Ja, Jfd) < 1e-5
    # objective gradient (explicit at nodes, one adjoint sweep for off-node measurements)
    gfd = fd_jacobian(lambda z: np.array([adj.objective(z)]), x)[0]
    assert rel(adj.gradient(x), gfd) < 1e-5
    if which == "nl":
        assert adj.init_rows and adj.off_meas
    # sweep counts: vector form n adjoint sweeps per interval, scalar form one
    per = adj.nx if formulation == "vector" else 1
    before = adj.counts["adjoint_sweeps"]
    adj._jkey = None
    adj.jacobian(x + 0.0)
    assert adj.counts["adjoint_sweeps"] - before == per * adj.N


def test_one_interval_is_single_shooting():
    """nodes = {t0, T}: the interval trajectory, J and the reduced gradient are single shooting's."""
    prob = lotka_volterra_problem(p0=(0.9, 1.1, 0.95, 1.05))
    u = prob.u0
    dm = DiscreteModel(prob, "adams_pc", 4, steps_per_interval=10)
    traj = dm.simulate(u)
    im = interval_models(prob, "adams_pc", 4, steps_per_interval=10, nodes=(0.0, 10.0))
    assert im.N == 1 and np.array_equal(im.models[0].t, dm.t)
    S = np.vstack([traj.X[0], traj.X[-1]])
    for jac in ("sensitivity", "adjoint"):
        nlp = MultipleShootingNLP(prob, im, "vector", jac, u, S)
        x = nlp.x0
        X = nlp.trajectories(x)[0].X
        assert np.max(np.abs(X - traj.X)) <= 1e-10 * np.max(np.abs(traj.X))
        assert np.max(np.abs(nlp.constraints(x))) < 1e-12
        assert nlp.objective(x) == pytest.approx(dm.objective(u, traj), rel=1e-10)
        # reduced gradient: ∇_p L + (∂x(T)/∂p)ᵀ ∇_{s_1} L  (s_0 fixed, s_1 = x(T))
        g = nlp.gradient(x)
        J = nlp.jacobian_dense(x)
        gp = g[nlp.ns:] + J[:, nlp.ns:].T @ g[2:4]
        assert rel(gp, dm.gradient(u, "adjoint", traj)) < 1e-10
    # and the estimates agree
    red = estimate_reduced(prob, "adams_pc", 4, steps_per_interval=10, hessian="soa")
    ms = estimate_multiple_shooting(prob, "adams_pc", 4, steps_per_interval=10, nodes=(0.0, 10.0),
                                    init="simulate", jacobian="adjoint", options={"tol": 1e-10})
    assert red.success and ms.success, (red.status, ms.status)
    assert rel(ms.x, red.x) < 1e-5
    assert ms.objective == pytest.approx(red.objective, rel=1e-8)


@pytest.fixture(scope="module")
def from_p0():
    """The three approaches from the seed's start p0 on the default draw (seed=1)."""
    prob = lotka_volterra_problem(p0=LV_P0)
    tab, res = compare_approaches(prob, ("simultaneous", "reduced_space", (
        "multiple_shooting", "multiple_shooting", {"jacobian": "adjoint"})), qmax=4,
        steps_per_interval=10)
    return prob, tab, res


def test_from_p0_single_shooting_fails_multiple_shooting_and_block_converge(from_p0):
    prob, _, res = from_p0
    ss, ms, sim = res["reduced_space"], res["multiple_shooting"], res["simultaneous"]
    assert not ss.success
    assert ss.status is po.Status.SIMULATION_FAILED and "non-finite" in ss.message
    assert ms.method == "ipopt/vector-adjoint+lbfgs"
    for r in (ms, sim):
        assert r.success, r.status
        assert np.max(np.abs(r.x - 1.0)) < 0.1, r.x
    # the two discretizations differ only by the order ramp restarting at the nodes
    assert np.max(np.abs(ms.x - sim.x)) < 1e-2
    assert ms.extra["max_defect"] < 1e-6
    assert ms.states.shape == sim.states.shape and ms.fitted.shape == (10, 2)
    assert np.allclose(ms.residuals.to_numpy(), ms.fitted.to_numpy() - prob.data.to_numpy())
    # node trajectories of the initial iterate (data-based nodes, p0) exist on every interval
    init = ms.extra["node_trajectories_initial"]
    assert len(init) == 10 and all(np.all(np.isfinite(d.to_numpy())) for d in init)
    assert np.allclose(ms.extra["node_values_initial"].iloc[1:].to_numpy(), prob.data.to_numpy())


def test_compare_three_approaches(from_p0):
    _, tab, res = from_p0
    assert list(tab.index) == ["simultaneous", "reduced_space", "multiple_shooting"]
    assert tab.loc["multiple_shooting", "success"] and tab.loc["simultaneous", "success"]
    assert not tab.loc["reduced_space", "success"]
    assert res["multiple_shooting"].approach == "multiple_shooting"
    for col in ("p1", "p4", "objective", "iterations", "fevals", "gevals", "wall_s"):
        assert np.isfinite(float(tab.loc["multiple_shooting", col])), col


def test_failing_interval_is_an_evaluation_error_and_simulate_init_falls_back():
    prob = lotka_volterra_problem(p0=LV_P0)
    im = interval_models(prob, "adams_pc", 4, steps_per_interval=10, nodes=(0.0, 10.0))
    nlp = MultipleShootingNLP(prob, im, "vector", "sensitivity", prob.u0)
    with pytest.raises(EvaluationError, match="interval 0"):
        nlp.constraints(nlp.x0)
    im10 = interval_models(prob, "adams_pc", 4, steps_per_interval=10)
    assert interval_models(prob, "adams_pc", 4, steps_per_interval=10) is im10     # cached
    S, used = node_start_values(prob, im10.nodes, prob.u0, "simulate", im10)
    assert used.startswith("simulate, data from node")
    assert np.all(np.isfinite(S))


def test_scalar_form_gradient_vanishes_and_ipopt_behaviour(record_property):
    """(8): ∇h(j) = 2 J_jᵀ G_j is zero at feasible points (LICQ fails); record what Ipopt does."""
    prob = lotka_volterra_problem(p0=LV_P0)
    im = interval_models(prob, "adams_pc", 4, steps_per_interval=10)
    u = np.ones(4)
    S, used = node_start_values(prob, im.nodes, u, "simulate", im)
    assert used == "simulate"
    sc = MultipleShootingNLP(prob, im, "scalar", "adjoint", u, S)
    vec = MultipleShootingNLP(prob, im, "vector", "adjoint", u, S)
    x = sc.x0
    assert np.max(np.abs(sc.constraints(x))) < 1e-20
    Jsc = sc.jacobian_dense(x)
    assert np.max(np.abs(Jsc)) < 1e-8
    # the vector form's Jacobian has full row rank there
    Jv = vec.jacobian_dense(x)
    free = np.flatnonzero(vec.x_lb != vec.x_ub)
    assert np.linalg.svd(Jv[:, free], compute_uv=False).min() > 1e-2
    # near feasibility ∇h = O(‖G‖): the rows shrink linearly with the defect
    norms = []
    for eps in (1e-2, 1e-3):
        xe = sc.point(S + eps * np.vstack([np.zeros(2), np.ones((10, 2))]), u)
        G = sc.defects(xe)
        norms.append(np.linalg.norm(sc.jacobian_dense(xe)) / np.linalg.norm(G))
    assert norms[1] == pytest.approx(norms[0], rel=0.1)
    # what Ipopt does with (8) from the seed's start (recorded, not required to succeed)
    s = estimate_multiple_shooting(prob, "adams_pc", 4, steps_per_interval=10,
                                   formulation="scalar", jacobian="adjoint",
                                   options={"max_iter": 80})
    v = estimate_multiple_shooting(prob, "adams_pc", 4, steps_per_interval=10, jacobian="adjoint")
    rec = dict(status=str(s.status), iterations=s.iterations, max_defect=s.extra["max_defect"],
               estimates=np.round(s.x, 4).tolist(), vector_status=str(v.status),
               vector_iterations=v.iterations, vector_max_defect=v.extra["max_defect"])
    for k, val in rec.items():
        record_property(k, val)
    print("scalar form (8) with Ipopt:", rec)
    assert isinstance(s.status, str) and len(s.extra["history"]) == s.iterations + 1
    # Ipopt's primal infeasibility of (8) is max_j ‖G_j‖² at the last iterate
    G = s.extra["defects"].to_numpy()
    assert s.extra["history"]["inf_pr"].iloc[-1] == pytest.approx(np.max(np.sum(G * G, axis=1)),
                                                                   rel=1e-6, abs=1e-14)
    assert v.success
    assert s.iterations > v.iterations or s.extra["max_defect"] > 1e-6
