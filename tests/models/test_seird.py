"""SEIRD problem of [SEIRD]: recovery by CG/BFGS/simultaneous, invariant, penalty, gradients."""
import numpy as np
import pytest

from pyomo_odeest.discretization.discrete import DiscreteModel
from pyomo_odeest.models import seird_data, seird_problem
from pyomo_odeest.models._seird import (SEIRD_N, SEIRD_PARAMS, SEIRD_STATES, SEIRD_TRUE, SEIRD_X0,
                                        conservation_sum, fit_reduced, grid_points, log_objective)
from pyomo_odeest import estimate_simultaneous

U_TRUE = np.array([SEIRD_TRUE[p] for p in SEIRD_PARAMS])
X0_TRUE = np.array([SEIRD_X0[s] for s in SEIRD_STATES])
SPI = 2


@pytest.fixture(scope="module")
def data05():
    return seird_data(0.05, seed=0)


@pytest.fixture(scope="module")
def fits(data05):
    """Noise 0.05, rates only: the reduced-space fits (secant search, as in [SEIRD])."""
    prob = seird_problem(data05, steps_per_interval=SPI)
    dm = DiscreteModel(prob, steps_per_interval=SPI)
    out = {m: fit_reduced(prob, m, "secant", dm=dm) for m in ("cg-fr", "cg-pr", "bfgs")}
    return prob, out


@pytest.mark.parametrize("method", ["cg-fr", "cg-pr", "bfgs"])
def test_reduced_methods_recover_rates(fits, method):
    _, res = fits
    r = res[method]
    assert r.success, r.message
    err = np.abs(r.u / U_TRUE - 1.0)
    assert np.all(err < 0.05), dict(zip(SEIRD_PARAMS, err))
    # far from the start (0.4x - 2x the truth): the data did the work
    assert np.all(np.abs(fits[0].u0 / U_TRUE - 1.0) > 0.4)


def test_simultaneous_recovers_rates_and_agrees(fits):
    prob, res = fits
    sim = estimate_simultaneous(prob, steps_per_interval=SPI, certify=False)   # BFGS's grid
    assert sim.success, sim.status
    err = np.abs(sim.x / U_TRUE - 1.0)
    assert np.all(err < 0.05), dict(zip(SEIRD_PARAMS, err))
    # same discrete problem: same minimizer as the reduced-space BFGS
    assert np.allclose(sim.x, res["bfgs"].u, rtol=1e-4)
    assert sim.objective == pytest.approx(res["bfgs"].fun, rel=1e-8)


def test_bfgs_needs_fewer_iterations_than_cg(fits):
    _, res = fits
    nb, nfr, npr = res["bfgs"].nit, res["cg-fr"].nit, res["cg-pr"].nit
    assert nb < nfr and nb < npr, (nb, nfr, npr)
    # and reaches the same minimum
    assert res["bfgs"].fun == pytest.approx(res["cg-fr"].fun, rel=1e-9)
    assert res["bfgs"].fun == pytest.approx(res["cg-pr"].fun, rel=1e-9)


def test_conservation_penalty_improves_initial_state(data05):
    """Same data, weights, start, grid and optimizer; only the conservation term differs."""
    err = {}
    for cons in (True, False):
        prob = seird_problem(data05, estimate_initial=True, conservation=cons,
                             steps_per_interval=SPI)
        r = fit_reduced(prob, "bfgs", "wolfe")
        assert r.success, r.message
        x0 = r.u[4:]
        err[cons] = (np.linalg.norm(x0 - X0_TRUE) / np.linalg.norm(X0_TRUE),
                     abs(x0[0] / X0_TRUE[0] - 1.0), abs(x0.sum() - SEIRD_N))
    print(f"initial-state error |x0_hat - x0|/|x0|: with penalty {err[True][0]:.3e}, "
          f"without {err[False][0]:.3e}")
    assert err[True][0] < 0.1 * err[False][0]         # S0 dominates the norm
    assert err[True][1] < 0.1 * err[False][1]         # S0 itself
    assert err[True][2] < 0.1 * err[False][2]         # total population
    assert err[False][0] > 1e-3                       # a measurable difference


@pytest.mark.parametrize("scheme", ["adams_pc", "adams_moulton", "enright", "semi_implicit_enright"])
def test_discrete_states_conserve_population_and_penalty_forms_agree(data05, scheme):
    prob = seird_problem(data05, estimate_initial=True, steps_per_interval=SPI)
    dm = DiscreteModel(prob, scheme=scheme, steps_per_interval=SPI)
    assert dm.k + 1 == prob.seird["n_points"] == grid_points(data05, SPI)
    x0 = X0_TRUE * np.array([1.03, 0.9, 1.2, 0.8, 1.1])          # sum != N
    u = np.concatenate([U_TRUE * np.array([1.2, 0.8, 1.1, 0.9]), x0])
    X = dm.simulate(u).X
    tot = X.sum(axis=1)
    assert np.max(np.abs(tot - tot[0])) < 1e-12
    assert abs(tot[0] - x0.sum()) < 1e-15
    assert abs(tot[0] - SEIRD_N) > 1e-3                           # the penalty is active
    # rho * sum over the grid == (k+1) rho (1'x0 - N)^2 == J(with) - J(without)
    rho = prob.seird["rho"]
    grid_form = rho * conservation_sum(X, SEIRD_N)
    prob_off = seird_problem(data05, estimate_initial=True, conservation=False,
                             steps_per_interval=SPI)
    dm_off = DiscreteModel(prob_off, scheme=scheme, steps_per_interval=SPI)
    penalty_form = dm.objective(u) - dm_off.objective(u)
    assert penalty_form == pytest.approx(grid_form, rel=1e-10)
    assert grid_form == pytest.approx((dm.k + 1) * rho * (x0.sum() - SEIRD_N) ** 2, rel=1e-10)


@pytest.mark.parametrize("estimate_initial", [False, True])
def test_adjoint_gradient_of_full_cost_matches_central_differences(data05, estimate_initial):
    """∇J by the discrete adjoint (misfit + initial-state term + conservation penalty)."""
    prob = seird_problem(data05, estimate_initial=estimate_initial, steps_per_interval=SPI)
    dm = DiscreteModel(prob, steps_per_interval=SPI)
    u = U_TRUE * np.array([1.3, 0.7, 1.2, 0.8])
    if estimate_initial:
        u = np.concatenate([u, X0_TRUE * np.array([1.02, 0.9, 1.15, 0.85, 1.1])])
    g = dm.gradient(u, "adjoint")
    # central differences with relative steps (D0 ~ 1e-5, S0 ~ 1)
    fd = np.zeros_like(u)
    for a in range(len(u)):
        h = 1e-6 * u[a]
        e = np.zeros_like(u)
        e[a] = h
        fd[a] = (dm.objective(u + e) - dm.objective(u - e)) / (2 * h)
    rel = np.abs(g - fd) / np.abs(fd)
    assert np.all(rel < 1e-6), rel
    # the log-parameter wrapper used by the optimizers: ∇_θ = u ⊙ ∇_u
    fun, grad = log_objective(dm)
    th = np.log(u)
    assert fun(th) == pytest.approx(dm.objective(u), rel=1e-14)
    assert np.allclose(grad(th), u * g, rtol=1e-12)


def test_fit_reduced_rejects_mismatched_grid(data05):
    prob = seird_problem(data05, estimate_initial=True, steps_per_interval=SPI)
    with pytest.raises(ValueError, match="grid points"):
        fit_reduced(prob, "bfgs", steps_per_interval=4)


def test_data_noise_model(data05):
    clean = data05.attrs["clean"]
    eps = (data05 / clean - 1.0).to_numpy() / 0.05                 # z̄ = z (1 + η ε)
    assert abs(eps.mean()) < 0.3 and 0.8 < eps.std() < 1.2
    assert list(data05.columns) == ["I", "R", "D"]
    assert np.allclose(data05.index, np.arange(2.0, 101.0, 2.0))
    assert sum(SEIRD_X0.values()) == pytest.approx(SEIRD_N, abs=1e-15)
