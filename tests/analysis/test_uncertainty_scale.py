"""Uncertainty with σ unknown (residual-scaled covariance, Student t, profile-t) as the
default, σ known exact (inverse Fisher information), and the covariance's own warnings
(singular information on scaled parameters) in the result."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.optimize import curve_fit

from pyomo_odeest import EstimationProblem, Parameter, estimate

T = np.linspace(0.5, 10.0, 20)
R, K, X0 = 0.9, 10.0, 0.5


def _logistic(t, r, k, x0):
    e = np.exp(r * t)
    return k * x0 * e / (k + x0 * (e - 1.0))


def _logistic_problem(sigma=None, seed=0):
    rng = np.random.default_rng(seed)
    y = _logistic(T, R, K, X0) + 0.3 * rng.standard_normal(len(T))
    data = pd.DataFrame({"x": y}, index=pd.Index(T, name="time"))
    return data, EstimationProblem(
        ["x"], [Parameter("r", 0.5, lb=0), Parameter("K", 8.0, lb=0), Parameter("x0", 1.0, lb=0)],
        rhs=lambda x, u, t: [u.r * x.x * (1 - x.x / u.K)], initial={"x": "x0"}, data=data,
        sigma=sigma, name="logistic")


def _fit(P, max_step=0.02):
    res = estimate(P, "reduced_space", scheme="enright", max_step=max_step)
    assert res.success
    return res


def test_sigma_unknown_standard_errors_equal_curve_fit():
    data, P = _logistic_problem()
    res = _fit(P)
    popt, pcov = curve_fit(_logistic, T, data["x"].to_numpy(), p0=[0.5, 8.0, 1.0],
                           absolute_sigma=False)
    np.testing.assert_allclose(res.x, popt, rtol=1e-3)
    cov = res.covariance()
    assert cov.scale == "residual" and "σ unknown" in cov.scale_note
    np.testing.assert_allclose(cov.se.to_numpy(), np.sqrt(np.diag(pcov)), rtol=0.02)
    iv = res.confidence_intervals(0.95)
    q = stats.t.ppf(0.975, len(T) - 3)                    # Student t, m − p dof
    assert iv.attrs["scale"] == "residual" and iv.attrs["quantile"] == pytest.approx(q)
    # r, K, x0 are declared lb=0: their intervals are those of log u, u·exp(±q·se/u)
    assert list(iv["scale"]) == ["positive"] * 3
    np.testing.assert_allclose(np.log(iv["upper"] / iv["estimate"]),
                               q * np.sqrt(np.diag(pcov)) / iv["estimate"], rtol=0.02)
    np.testing.assert_allclose(np.log(iv["estimate"] / iv["lower"]),
                               q * np.sqrt(np.diag(pcov)) / iv["estimate"], rtol=0.02)
    # the default differs from σ = 1 by the residual standard deviation
    known = res.covariance(scale="known")
    assert known.scale == "known"
    np.testing.assert_allclose(cov.se / known.se, np.sqrt(cov.s2), rtol=1e-10)


def test_sigma_known_covariance_is_the_inverse_fisher_matrix():
    sig = 0.3
    data, P = _logistic_problem(sigma=sig)
    res = _fit(P)
    u = res.x
    h = 1e-6
    S = np.column_stack([(_logistic(T, *(u + h * e)) - _logistic(T, *(u - h * e))) / (2 * h)
                         for e in np.eye(3)])
    F = S.T @ S / sig**2
    cov = res.covariance()
    assert cov.scale == "known"
    np.testing.assert_allclose(cov.matrix.to_numpy(), np.linalg.inv(F), rtol=2e-3)
    iv = res.confidence_intervals(0.95)
    assert iv.attrs["quantile"] == pytest.approx(stats.norm.ppf(0.975))
    # with σ known, curve_fit's absolute_sigma=True gives the same matrix
    _, pcov = curve_fit(_logistic, T, data["x"].to_numpy(), p0=u, sigma=np.full(len(T), sig),
                        absolute_sigma=True)
    np.testing.assert_allclose(cov.se.to_numpy(), np.sqrt(np.diag(pcov)), rtol=0.02)


def test_profile_threshold_follows_the_scale():
    _, P = _logistic_problem()
    res = _fit(P, max_step=0.1)              # the threshold does not depend on the grid
    pr = res.profile(["r"], max_points=4)
    assert pr.scale == "residual"
    assert pr.threshold == pytest.approx(stats.f.ppf(0.95, 1, len(T) - 3))


def _product_problem():
    """x' = −(a·b)·x: only the product a·b is determined."""
    t = np.linspace(0.2, 3, 12)
    data = pd.DataFrame({"x": 2.0 * np.exp(-0.6 * t)}, index=pd.Index(t, name="time"))
    data["x"] += 0.01 * np.random.default_rng(1).standard_normal(len(t))
    return EstimationProblem(["x"], [Parameter("a", 1.0), Parameter("b", 0.5)],
                             rhs=lambda x, u, t: [-(u.a * u.b) * x.x], initial={"x": 2.0},
                             data=data, sigma=0.01)


def test_singular_information_warns_in_the_result_and_the_table():
    res = estimate(_product_problem(), "reduced_space", max_step=0.05)
    cov = res.covariance()
    assert set(cov.non_identifiable) == {"a", "b"}
    assert not np.isfinite(cov.se).any()
    assert any(w.startswith("covariance:") and "singular" in w for w in res.warnings)
    iv = res.confidence_intervals()
    assert (iv["status"] == "not identifiable").all()
    assert any("singular" in w for w in iv.attrs["warnings"])
    n = len(res.warnings)
    res.covariance()                                      # reported once
    assert len(res.warnings) == n


def test_arrhenius_parameters_are_not_called_singular_for_their_units():
    """k(T) = A·exp(−E/(R·T)) at four temperatures: A ~ 1e7 and E ~ 5e4 make the
    unscaled information matrix's condition number ~1e20, but the parameters are
    identifiable (the scaled matrix is well conditioned)."""
    from pyomo_odeest import Experiment
    A, E, Rg = 1.0e7, 5.0e4, 8.314
    temps = [300.0, 320.0, 340.0, 360.0]
    t = np.linspace(0.5, 5, 10)
    rng = np.random.default_rng(2)
    exps = []
    for i, Tk in enumerate(temps):
        k = A * np.exp(-E / (Rg * Tk))
        y = np.exp(-k * t) + 0.005 * rng.standard_normal(len(t))
        exps.append(Experiment(f"T{i}", pd.DataFrame({"c": y}, index=pd.Index(t, name="time")),
                               parameters={"temp": Tk}))
    P = EstimationProblem(["c"], [Parameter("A", 1.2e7, lb=0), Parameter("E", 5.1e4, lb=0),
                                  Parameter("temp", 300.0, fixed=True, local=True)],
                          rhs=lambda x, u, t: [-u.A * np.e ** (-u.E / (Rg * u.temp)) * x.c],
                          initial={"c": 1.0}, data=None, sigma=0.005, experiments=exps)
    res = estimate(P, "reduced_space", max_step=0.05)
    assert res.success
    cov = res.covariance()
    assert not [w for w in res.warnings if "singular" in w]
    assert np.isfinite(cov.se).all() and cov.condition < 1e8
    se = cov.se
    assert abs(res.estimates["E"] - E) < 5 * se["E"]
    rep = res.identifiability()
    assert rep.rank == 2
