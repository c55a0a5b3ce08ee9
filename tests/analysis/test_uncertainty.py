"""Covariance, Wald and profile intervals, identifiability, confidence bands."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pyomo_odeest import (EstimationProblem, Parameter, estimate, identifiability_report,
                          prediction_bands, profile_likelihood, covariance, delta_method)
from pyomo_odeest.analysis._uncertainty import curvature
from pyomo_odeest.analysis import kkt_reduced_hessian
from pyomo_odeest.models import lotka_volterra_data
from pyomo_odeest.models._lotka_volterra import LV_X0, lv_rhs

TIMES = np.arange(1.0, 9.0)
SIG_X = np.linspace(0.05, 0.12, len(TIMES))       # heteroscedastic σ of x
SIG_Y = 0.08
Z95 = stats.norm.ppf(0.975)


def _linear_data(seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = 0.7, 1.3, -0.4
    x = b + a * TIMES + SIG_X * rng.standard_normal(len(TIMES))
    y = c * TIMES + SIG_Y * rng.standard_normal(len(TIMES))
    return pd.DataFrame({"x": x, "y": y}, index=pd.Index(TIMES, name="time"))


def _linear_problem(data, a_ub=None):
    """x' = a, x(0) = b; y' = c, y(0) = 0: x = b + a t, y = c t (every scheme is exact)."""
    sigma = pd.DataFrame({"x": SIG_X, "y": SIG_Y}, index=data.index)
    return EstimationProblem(
        states=["x", "y"],
        parameters=[Parameter("a", 0.5, ub=a_ub), Parameter("b", 1.0), Parameter("c", 0.0)],
        rhs=lambda x, u, t: [u.a + 0 * x.x, u.c + 0 * x.y], initial={"x": "b", "y": 0.0},
        data=data, sigma=sigma, name="linear")


def _closed_form(data):
    """Weighted least squares in closed form: estimates, (XᵀWX)⁻¹, χ²."""
    X = np.zeros((2 * len(TIMES), 3))
    X[:len(TIMES), 0], X[:len(TIMES), 1] = TIMES, 1.0
    X[len(TIMES):, 2] = TIMES
    w = np.concatenate([1 / SIG_X**2, np.full(len(TIMES), 1 / SIG_Y**2)])
    z = np.concatenate([data["x"], data["y"]])
    F = X.T @ (w[:, None] * X)
    C = np.linalg.inv(F)
    beta = C @ X.T @ (w * z)
    chi2 = float(np.sum(w * (z - X @ beta) ** 2))
    return beta, C, chi2, X


@pytest.fixture(scope="module")
def linear():
    data = _linear_data()
    P = _linear_problem(data)
    res = estimate(P, "reduced_space", max_step=1.0)
    return data, P, res


def test_linear_model_covariance_matches_closed_form(linear):
    data, P, res = linear
    beta, C, chi2, _ = _closed_form(data)
    assert res.success
    np.testing.assert_allclose(res.x, beta, rtol=1e-8, atol=1e-10)
    dof = 2 * len(TIMES) - 3
    for method, expected in (("fim", C), ("hessian", C), ("residual", chi2 / dof * C)):
        cov = res.covariance(method)
        np.testing.assert_allclose(cov.matrix.to_numpy(), expected, rtol=1e-8, atol=1e-14)
    cov = res.covariance("residual")
    assert cov.dof == dof and cov.s2 == pytest.approx(chi2 / dof, rel=1e-8)
    iv = cov.intervals(0.9)                                   # Student t for 'residual'
    q = stats.t.ppf(0.95, dof)
    np.testing.assert_allclose(iv["lower"], beta - q * np.sqrt(chi2 / dof * np.diag(C)), rtol=1e-8)
    corr = res.covariance().correlation.to_numpy()
    np.testing.assert_allclose(corr, C / np.sqrt(np.outer(np.diag(C), np.diag(C))), rtol=1e-8)
    # delta method of a linear function is exact: q = a·5 + b (x at t = 5)
    d = delta_method(res.covariance(), lambda u: 5 * u["a"] + u["b"], names=["x5"])
    g = np.array([5.0, 1.0, 0.0])
    assert d.loc["x5", "se"] == pytest.approx(np.sqrt(g @ C @ g), rel=1e-8)
    # bands of the state x over time: var = (t, 1) C (t, 1)ᵀ
    bands = prediction_bands(res, kind="states")
    t = bands.se.index.to_numpy()
    se_x = np.sqrt(C[0, 0] * t**2 + 2 * C[0, 1] * t + C[1, 1])
    np.testing.assert_allclose(bands.se["x"].to_numpy(), se_x, rtol=1e-8)
    np.testing.assert_allclose(bands.upper["x"] - bands.value["x"], Z95 * se_x, rtol=1e-8)


@pytest.mark.parametrize("approach,options,rtol", [
    ("simultaneous", dict(max_step=1.0, options={"tol": 1e-12}), 1e-8),
    ("multiple_shooting", dict(max_step=1.0, options={"tol": 1e-12}), 1e-6),
    ("continuous", dict(), 1e-6),
])
def test_linear_model_covariance_every_approach(linear, approach, options, rtol):
    data, P, _ = linear
    beta, C, _, _ = _closed_form(data)
    res = estimate(P, approach, **options)
    assert res.success, res.status
    np.testing.assert_allclose(res.x, beta, rtol=1e-6)
    for method in ("fim", "hessian"):
        np.testing.assert_allclose(res.covariance(method).matrix.to_numpy(), C, rtol=rtol,
                                   atol=1e-12)


def test_active_bound_reported_not_given_an_interval():
    data = _linear_data()
    P = _linear_problem(data, a_ub=0.6)                    # unconstrained a ≈ 0.7
    res = estimate(P, "reduced_space", max_step=1.0)
    assert res.estimates["a"] == pytest.approx(0.6, abs=1e-7)
    cov = res.covariance()
    assert cov.at_bound == {"a": "upper"}
    iv = cov.intervals()
    assert iv.loc["a", "status"] == "at upper bound" and np.isnan(iv.loc["a", "lower"])
    # the others: covariance with a held at its bound = inverse of the (b, c) block of the FIM
    _, C, _, X = _closed_form(data)
    F = np.linalg.inv(C)
    np.testing.assert_allclose(cov.matrix.to_numpy(), np.linalg.inv(F[1:, 1:]), rtol=1e-8)


def test_profile_equals_wald_for_linear_model(linear):
    _, P, res = linear
    pr = profile_likelihood(res)
    iv = pr.intervals
    assert list(iv["shape"]) == ["ok"] * 3
    np.testing.assert_allclose(iv["lower"], iv["wald_lower"], rtol=1e-6)
    np.testing.assert_allclose(iv["upper"], iv["wald_upper"], rtol=1e-6)
    # the profile of a linear model is the parabola ((θ − θ̂)/se)²
    cov = res.covariance()
    df = pr.curves["a"]
    expected = ((df["value"] - res.estimates["a"]) / cov.se["a"]) ** 2
    np.testing.assert_allclose(df["lr"], expected, rtol=1e-6, atol=1e-8)


def _reciprocal_problem(seed=3):
    """x' = 1/θ, x(0) = 0: x = t/θ, linear in φ = 1/θ."""
    rng = np.random.default_rng(seed)
    t = np.arange(1.0, 6.0)
    sig = 0.6
    data = pd.DataFrame({"x": t / 2.0 + sig * rng.standard_normal(len(t))},
                        index=pd.Index(t, name="time"))
    P = EstimationProblem(states=["x"], parameters=[Parameter("theta", 1.5, lb=0.1)],
                          rhs=lambda x, u, t: [1 / u.theta + 0 * x.x], initial={"x": 0.0},
                          data=data, sigma=sig, name="reciprocal")
    phi_se = sig / np.sqrt(np.sum(t**2))
    phi_hat = float(np.sum(t * data["x"]) / np.sum(t**2))
    return P, phi_hat, phi_se


@pytest.mark.parametrize("approach", ["reduced_space", "simultaneous"])
def test_profile_skewed_as_expected_in_nonlinear_case(approach):
    """θ = 1/φ with φ estimated linearly: the LR interval is invariant under
    reparametrization, [1/(φ̂ + zσ), 1/(φ̂ − zσ)], skewed to the right of θ̂;
    Wald is symmetric on the scale of θ's Wald interval, the log of the positive
    θ (lb > 0): θ̂·exp(±z·se/θ̂), inside the LR interval's limits on both sides."""
    P, phi, s = _reciprocal_problem()
    res = estimate(P, approach, max_step=1.0)
    assert res.estimates["theta"] == pytest.approx(1 / phi, rel=1e-7)
    pr = profile_likelihood(res, approach=approach)
    row = pr.intervals.loc["theta"]
    assert row["lower"] == pytest.approx(1 / (phi + Z95 * s), rel=1e-4)
    assert row["upper"] == pytest.approx(1 / (phi - Z95 * s), rel=1e-4)
    th = row["estimate"]
    assert row["upper"] - th > 1.3 * (th - row["lower"])                 # skewed right
    se = res.covariance().se["theta"]
    assert np.log(row["wald_upper"] / th) == pytest.approx(np.log(th / row["wald_lower"]))
    assert row["wald_upper"] == pytest.approx(th * np.exp(Z95 * se / th), rel=1e-10)
    # exp(x) < 1/(1 − x) and exp(−x) < 1/(1 + x): both Wald limits lie below the LR ones
    assert row["wald_upper"] < row["upper"] and row["wald_lower"] < row["lower"]


def test_rank_deficient_problem_flagged_with_null_direction():
    t = np.arange(1.0, 6.0)
    data = pd.DataFrame({"x": np.exp(-1.0 * t)}, index=pd.Index(t, name="time"))
    P = EstimationProblem(states=["x"], parameters=[Parameter("k1", 0.5), Parameter("k2", 0.5)],
                          rhs=lambda x, u, t: [-(u.k1 + u.k2) * x.x], initial={"x": 1.0},
                          data=data, sigma=0.01)
    rep = identifiability_report(problem=P, estimates=[0.5, 0.5])
    assert rep.rank == 1 and not rep.identifiable
    v = rep.null_directions[0]
    np.testing.assert_allclose(np.abs(v.to_numpy()), [2 ** -0.5] * 2, rtol=1e-6)
    assert v["k1"] * v["k2"] < 0
    assert any("rank-deficient" in w and "k1" in w and "k2" in w for w in rep.warnings)
    # an estimate of it: the covariance says so, and the same report comes from the result
    res = estimate(P, "reduced_space", max_step=0.5)
    assert res.identifiability().rank == 1
    cov = res.covariance()
    assert any("singular" in w for w in cov.warnings) and np.all(np.isinf(cov.se))


def test_fewer_measurements_than_parameters_warned():
    data = lotka_volterra_data(seed=1).iloc[[4]]                  # two values, four parameters
    P = EstimationProblem(states=["x1", "x2"], parameters=[Parameter(f"p{k}", 1.0) for k in range(1, 5)],
                          rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data)
    rep = identifiability_report(problem=P, estimates=np.ones(4))
    assert rep.n_measurements == 2 and rep.rank <= 2
    assert any("fewer measured values (2) than free parameters (4)" in w for w in rep.warnings)


@pytest.fixture(scope="module")
def lv():
    data = lotka_volterra_data(seed=3, variance=0.05**2)
    P = EstimationProblem(states=["x1", "x2"], parameters=[Parameter(f"p{k}", 1.0) for k in range(1, 5)],
                          rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data, sigma=0.05)
    return P, estimate(P, "reduced_space", max_step=0.25, options={"tol": 1e-12},
                      certify=False)            # one discretization, compared below


def test_kkt_reduced_hessian_equals_reduced_space_hessian(lv):
    P, red = lv
    sim = estimate(P, "simultaneous", max_step=0.25, options={"tol": 1e-12}, certify=False)
    np.testing.assert_allclose(sim.x, red.x, rtol=1e-7)
    curv = curvature(sim, hessian=True)                    # the KKT system, no simulation
    H = curv.H
    dm = red.backend.discrete_model
    np.testing.assert_allclose(H, dm.hessian(sim.x, "soa"), rtol=1e-7)
    # independent check: central differences of the adjoint gradient
    np.testing.assert_allclose(H, dm.hessian(sim.x, "adjoint_fd"), rtol=1e-5)
    # the system is formed with the solve's own evaluator (one set-up), then let go;
    # a fresh evaluator of the solved model gives the same reduced Hessian
    assert sim.backend._evaluator is None
    H_fresh = kkt_reduced_hessian(sim.model)[0]
    np.testing.assert_allclose(H, H_fresh, rtol=1e-12, atol=1e-12 * np.abs(H).max())
    red_curv = curvature(red, hessian=True)
    for method in ("fim", "hessian", "residual"):
        np.testing.assert_allclose(covariance(sim, method, curv=curv).matrix,
                                   covariance(red, method, curv=red_curv).matrix, rtol=1e-6)


def test_lv_covariance_agrees_with_shooting_and_bands(lv):
    P, red = lv
    ms = estimate(P, "multiple_shooting", max_step=0.25, options={"tol": 1e-10}, certify=False)
    # the order ramp restarts at each node: a slightly different discretization
    # (estimates differ by 2e-3 on this grid, standard errors by 0.4 %)
    np.testing.assert_allclose(ms.covariance("fim").se, red.covariance("fim").se, rtol=0.01)
    # observed vs expected information differ by the residual curvature only
    np.testing.assert_allclose(red.covariance("hessian").se, red.covariance("fim").se, rtol=0.1)
    bands = red.prediction_bands()
    assert list(bands.value.columns) == ["x1", "x2"]
    assert np.all(bands.upper.to_numpy() >= bands.lower.to_numpy())
    rep = red.identifiability()
    assert rep.identifiable and not rep.warnings


def test_refit_of_a_pickled_result_holds_a_parameter_fixed():
    """A refit of a pickled result (its approach and options as solved): a fixed,
    (b, c) re-optimized = weighted least squares of the remainder in closed form."""
    import pickle
    from pyomo_odeest import Status
    data = _linear_data()
    P = _linear_problem(data)
    res = pickle.loads(pickle.dumps(estimate(P, "reduced_space", max_step=1.0)))
    out = res.refit(np.array([0.7, 1.3, -0.4]), {"a": 0.65})
    assert out.status is Status.CONVERGED and out.approach == "reduced_space"
    u = out.x
    assert u[0] == 0.65
    np.testing.assert_array_equal(out.grid.t, res.grid.t)           # on the grid as solved
    _, _, _, X = _closed_form(data)
    w = np.concatenate([1 / SIG_X**2, np.full(len(TIMES), 1 / SIG_Y**2)])
    z = np.concatenate([data["x"], data["y"]]) - 0.65 * X[:, 0]
    Xr = X[:, 1:]
    bc = np.linalg.solve(Xr.T @ (w[:, None] * Xr), Xr.T @ (w * z))
    np.testing.assert_allclose(u[1:], bc, rtol=1e-8)
    assert out.objective == pytest.approx(float(np.sum(w * (z - Xr @ bc) ** 2)), rel=1e-8)


def _linear_experiments(y_in_first=True):
    """Two experiments of the linear model with their own x(0) = b_e (local) and shared
    a, c; with ``y_in_first=False`` the first experiment measures only y."""
    from pyomo_odeest import Experiment
    d0, d1 = _linear_data(seed=0), _linear_data(seed=1)
    if not y_in_first:
        d0 = d0[["y"]]
    exps = [Experiment(f"e{i}", d, sigma=pd.DataFrame({"x": SIG_X, "y": SIG_Y},
                                                      index=d.index)[list(d.columns)])
            for i, d in enumerate((d0, d1))]
    return EstimationProblem(
        states=["x", "y"],
        parameters=[Parameter("a", 0.5), Parameter("b", 1.0, local=True), Parameter("c", 0.0)],
        rhs=lambda x, u, t: [u.a + 0 * x.x, u.c + 0 * x.y], initial={"x": "b", "y": 0.0},
        data=None, experiments=exps), (d0, d1)


def _closed_form_experiments(d0, d1):
    """Columns a, b_e0, b_e1, c: rows x = a t + b_e, y = c t of both experiments."""
    n = len(TIMES)
    X = np.zeros((4 * n, 4))
    for e, d in enumerate((d0, d1)):
        X[2 * e * n:(2 * e + 1) * n, [0, 1 + e]] = np.c_[TIMES, np.ones(n)]
        X[(2 * e + 1) * n:(2 * e + 2) * n, 3] = TIMES
    w = np.tile(np.r_[np.full(n, 1 / SIG_X**2), np.full(n, 1 / SIG_Y**2)], 2)
    z = np.concatenate([d0["x"], d0["y"], d1["x"], d1["y"]])
    C = np.linalg.inv(X.T @ (w[:, None] * X))
    return C @ X.T @ (w * z), C


@pytest.mark.parametrize("approach, kw, rtol", [
    ("reduced_space", dict(max_step=1.0), 1e-7),
    ("simultaneous", dict(max_step=1.0, options={"tol": 1e-12}), 1e-7),
    ("continuous", dict(), 1e-6),
    ("multiple_shooting", dict(max_step=1.0, options={"tol": 1e-12}), 1e-6)])
def test_several_experiments_covariance_matches_closed_form(approach, kw, rtol):
    """Global a, c and a local x(0) per experiment: the covariance of the summed
    objective is the weighted least-squares one over both experiments' rows."""
    P, (d0, d1) = _linear_experiments()
    beta, C = _closed_form_experiments(d0, d1)
    res = estimate(P, approach, **kw)
    assert res.success
    assert P.parameter_names == ["a", "b_e0", "b_e1", "c"]
    np.testing.assert_allclose(res.x, beta, rtol=rtol, atol=1e-9)
    for method in ("fim", "hessian"):
        cov = res.covariance(method)
        np.testing.assert_allclose(cov.matrix.to_numpy(), C, rtol=rtol, atol=1e-14)
    assert cov.dof == 4 * len(TIMES) - 4
    rep = res.identifiability()
    assert rep.identifiable and rep.n_measurements == 4 * len(TIMES)
    bands = prediction_bands(res, kind="states")             # per experiment, own grid
    t = bands.se.loc["e1"].index.to_numpy()
    se_x = np.sqrt(C[0, 0] * t**2 + 2 * C[0, 2] * t + C[2, 2])
    np.testing.assert_allclose(bands.se.loc["e1"]["x"].to_numpy(), se_x, rtol=1e-7)


@pytest.mark.parametrize("approach", ["reduced_space", "simultaneous"])
def test_several_experiments_profile_equals_wald(approach):
    P, _ = _linear_experiments()
    res = estimate(P, approach, max_step=1.0)
    pr = profile_likelihood(res, parameters=["a", "b_e1"])
    iv = pr.intervals
    assert list(iv["shape"]) == ["ok", "ok"]
    np.testing.assert_allclose(iv["lower"], iv["wald_lower"], rtol=1e-5)
    np.testing.assert_allclose(iv["upper"], iv["wald_upper"], rtol=1e-5)


def test_several_experiments_nonlinear_covariance_equals_the_problem_written_as_one():
    """Three experiments of A -> B with a local A0: the simultaneous KKT covariance of
    the multi-experiment NLP equals the reduced-space covariance of the same data
    written by hand as one 6-state problem (exact Hessian and Gauss–Newton)."""
    from helpers import three_experiments_by_hand as _by_hand, three_experiments_problem as _problem
    P = _problem()
    res = estimate(P, "simultaneous", max_step=0.05, scheme="enright", options={"tol": 1e-12})
    one = estimate(_by_hand(P), "reduced_space", max_step=0.05, scheme="enright")
    np.testing.assert_allclose(res.x, one.x, rtol=1e-6)
    for method in ("fim", "hessian"):
        np.testing.assert_allclose(res.covariance(method).matrix.to_numpy(),
                                   one.covariance(method).matrix.to_numpy(), rtol=1e-5)
    red = estimate(P, "reduced_space", max_step=0.05, scheme="enright")
    np.testing.assert_allclose(red.covariance("hessian").matrix.to_numpy(),
                               one.covariance("hessian").matrix.to_numpy(), rtol=1e-5)


def test_several_experiments_unseen_local_parameter_flagged():
    """The first experiment does not measure x, so its x(0) = b_e0 is not identifiable:
    the report names exactly that direction; the covariance says so."""
    P, _ = _linear_experiments(y_in_first=False)
    res = estimate(P, "reduced_space", max_step=1.0)
    rep = res.identifiability()
    assert rep.rank == 3 and not rep.identifiable
    v = rep.null_directions[0]
    assert abs(v["b_e0"]) == pytest.approx(1.0, abs=1e-8)
    assert any("b_e0" in w for w in rep.warnings)
    assert any("b_e0" in w for w in res.warnings)
    cov = res.covariance()
    assert np.isinf(cov.matrix.loc["b_e0", "b_e0"]) and np.isfinite(cov.se["c"])


@pytest.mark.parametrize("approach,options", [
    ("continuous", {}), ("simultaneous", dict(scheme="enright", steps_per_interval=40))])
def test_covariance_agrees_with_parmest(approach, options):
    """parmest's Rooney–Biegler example, y = A (1 - exp(-B t)), written as the ODE
    y' = B (A - y), y(0) = 0 with σ = 1 (parmest's measure_error): the package's estimates
    and inverse-FIM covariance equal parmest's theta_est() and cov_est() (parmest runs
    on the package's solver).  Measured: 7e-10 on θ, 1.3e-6 on the covariance (parmest
    differentiates by finite differences)."""
    pytest.importorskip("pyomo.contrib.parmest.parmest")
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "parmest_rooney_biegler.py"
    spec = importlib.util.spec_from_file_location("parmest_rooney_biegler", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    import pyomo_odeest
    with pyomo_odeest.use_as_ipopt():
        pest = ex.estimator()
        _, theta = pest.theta_est()
        cov_parmest = pest.cov_est().to_numpy()
    data = pd.DataFrame({"y": ex.DATA["y"].to_numpy(float)},
                        index=pd.Index(ex.DATA["hour"].to_numpy(float), name="time"))
    P = EstimationProblem(states=["y"], parameters=[Parameter("A", 15.0), Parameter("B", 0.5)],
                          rhs=lambda x, u, t: [u.B * (u.A - x.y)], initial={"y": 0.0},
                          data=data, sigma=1.0, name="rooney_biegler")
    res = estimate(P, approach, **options)
    assert res.success
    assert np.allclose(res.x, [theta["asymptote"], theta["rate_constant"]], rtol=1e-6)
    C = covariance(res, "fim").matrix.to_numpy()
    assert np.allclose(C, cov_parmest, rtol=1e-4, atol=0)


def test_profile_with_unknown_sigma_is_the_profile_t_interval(linear):
    """scale='residual' (σ unknown): for a model linear in its parameters the profile-t
    interval equals the Wald interval of the residual-scaled covariance with Student t
    quantiles, and the Wald columns of the profile result are those intervals."""
    _, P, res = linear
    pr = profile_likelihood(res, scale="residual")
    wald = res.covariance("residual").intervals(0.95, "t")
    iv = pr.intervals
    assert list(iv["shape"]) == ["ok"] * 3
    np.testing.assert_allclose(iv["lower"], wald["lower"], rtol=1e-6)
    np.testing.assert_allclose(iv["upper"], wald["upper"], rtol=1e-6)
    np.testing.assert_allclose(iv["wald_lower"], wald["lower"], rtol=1e-12)
    known = profile_likelihood(res, parameters=["a"]).intervals.loc["a"]
    s = np.sqrt(res.covariance("residual").s2)
    # widths scale with s·t_{m-p} / z
    ratio = (iv.loc["a", "upper"] - iv.loc["a", "lower"]) / (known["upper"] - known["lower"])
    assert ratio == pytest.approx(s * stats.t.ppf(0.975, len(TIMES) * 2 - 3) / Z95, rel=1e-5)


def _reciprocal_noisy(ub):
    """The reciprocal model with noise so large that φ̂ − z·se(φ) < 0: θ = 1/φ has no
    finite upper confidence limit."""
    rng = np.random.default_rng(3)
    t = np.arange(1.0, 6.0)
    sig = 3.0
    data = pd.DataFrame({"x": t / 2.0 + sig * rng.standard_normal(len(t))},
                        index=pd.Index(t, name="time"))
    P = EstimationProblem(states=["x"], parameters=[Parameter("theta", 1.5, lb=0.1, ub=ub)],
                          rhs=lambda x, u, t: [1 / u.theta + 0 * x.x], initial={"x": 0.0},
                          data=data, sigma=sig, name="reciprocal_noisy")
    phi_hat = float(np.sum(t * data["x"]) / np.sum(t**2))
    return P, phi_hat, sig / np.sqrt(np.sum(t**2))


def test_one_sided_profile_stops_at_the_bound():
    P, phi, s = _reciprocal_noisy(ub=50.0)
    assert phi - Z95 * s < 0 < phi                         # no finite upper limit exists
    res = estimate(P, "reduced_space", max_step=1.0)
    row = profile_likelihood(res).intervals.loc["theta"]
    assert row["shape"] == "one-sided"
    assert row["lower_end"] == "crossed" and row["upper_end"] == "bound"
    assert np.isnan(row["upper"])
    assert row["lower"] == pytest.approx(1 / (phi + Z95 * s), rel=1e-4)
    # the Wald interval of the positive θ (log scale) spans more than the declared
    # range [0.1, 50]: cut to it at both ends, and called poorly determined
    assert (row["wald_lower"], row["wald_upper"]) == (0.1, 50.0)
    wald = res.confidence_intervals().loc["theta"]
    th = res.estimates["theta"]
    assert wald["scale"] == "positive" and wald["status"] == "poorly determined"
    assert wald["factor"] == pytest.approx(np.exp(2 * Z95 * res.covariance().se["theta"] / th),
                                           rel=1e-10)
    assert wald["factor"] > 1e4


def test_one_sided_profile_without_bound_is_not_reached():
    P, phi, s = _reciprocal_noisy(ub=None)
    res = estimate(P, "reduced_space", max_step=1.0)
    row = profile_likelihood(res, max_points=6).intervals.loc["theta"]
    assert row["upper_end"] == "not reached" and np.isnan(row["upper"])
    assert row["shape"] == "one-sided"
    assert row["lower"] == pytest.approx(1 / (phi + Z95 * s), rel=1e-4)


def test_flat_profile_of_an_unobserved_parameter():
    """b drives a state that is not observed: its profile is flat (λ = 0 everywhere) and
    reported as such, while the identifiable a gets its interval."""
    t = np.arange(1.0, 6.0)
    rng = np.random.default_rng(0)
    data = pd.DataFrame({"x": 0.7 * t + 0.05 * rng.standard_normal(len(t))},
                        index=pd.Index(t, name="time"))
    P = EstimationProblem(states=["x", "y"],
                          parameters=[Parameter("a", 0.5), Parameter("b", 0.3, lb=0.0, ub=2.0)],
                          rhs=lambda x, u, t: [u.a + 0 * x.x, u.b + 0 * x.y],
                          initial={"x": 0.0, "y": 0.0}, data=data, observe=["x"], sigma=0.05,
                          name="unobserved")
    res = estimate(P, "reduced_space", max_step=1.0)
    assert any("not identifiable along" in w and "b" in w for w in res.warnings)
    pr = profile_likelihood(res)
    iv = pr.intervals
    assert iv.loc["b", "shape"] == "flat" and np.isnan(iv.loc["b", "lower"])
    assert float(pr.curves["b"]["lr"].max()) < 1e-8
    assert iv.loc["a", "shape"] == "ok"
    # no information on b: its Wald interval is the whole declared range [0, 2]
    assert (iv.loc["b", "wald_lower"], iv.loc["b", "wald_upper"]) == (0.0, 2.0)
    assert res.confidence_intervals().loc["b", "status"] == "not identifiable"


def test_unlocated_crossing_is_reported_not_guessed():
    """The first step of the lower side overshoots to the bound far above the threshold;
    with one re-optimization allowed the crossing cannot be located, and the limit is
    NaN with a warning (it used to be interpolated between two distant points)."""
    P, phi, s = _reciprocal_noisy(ub=50.0)
    res = estimate(P, "reduced_space", max_step=1.0)
    pr = profile_likelihood(res, max_refine=1)
    row = pr.intervals.loc["theta"]
    assert row["lower_end"] == "not refined" and np.isnan(row["lower"])
    assert any("not located" in w for w in pr.warnings)


def test_analyses_of_a_failed_result_say_why():
    """From the Lotka–Volterra problem's default start the reduced space's explicit
    simulation blows up (status ``simulation_failed``): the covariance and the profile
    at that point raise the simulation's error type with the status and the remedy,
    not the raw failure of the integrator."""
    from pyomo_odeest.discretization.discrete._simulation import SimulationError
    from pyomo_odeest.models import lotka_volterra_problem
    p = lotka_volterra_problem()
    r = estimate(p, approach="reduced_space")
    assert not r.success
    for analysis in (lambda: r.covariance(), lambda: r.profile("p1")):
        with pytest.raises(SimulationError, match="not an optimum .*simulation_failed.*re-estimate"):
            analysis()
