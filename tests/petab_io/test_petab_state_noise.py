"""PEtab noise formulas of the states or observables: each datum is a scaled residual
(τ(y) − τ(m))/σ and a residual sqrt(2 log σ + C), so the least squares is PEtab's
negative log-likelihood.  On a hand-written problem (closed-form solution, the NLL by
hand) and on Armistead_CellDeathDis2024 (σ = sd · state)."""
import math
import os

import numpy as np
import pandas as pd
import pytest

petab = pytest.importorskip("petab")
libsbml = pytest.importorskip("libsbml")

from scipy.optimize import minimize  # noqa: E402

from pyomo_odeest import estimate  # noqa: E402
from pyomo_odeest.petab_io import petab_nll, petab_problem  # noqa: E402
from pyomo_odeest.petab_io._problem import LOG_SIGMA_SHIFT  # noqa: E402
from petab_io.test_petab_features import (DOSE, K, T_ON, closed_form,  # noqa: E402
                                          objective_at_nominal, write_switch)

pytestmark = pytest.mark.extras

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "petab")
#: AMICI's NLL of Armistead_CellDeathDis2024 at its nominal parameters
ARMISTEAD_REFERENCE = -301.9161818

TIMES = np.arange(0.0, 10.01, 0.5)
# per case: the noise formula, its parameters (id, nominal, lower, upper bound; log10
# scale), σ of the closed-form solution X at the noise parameters, and the truth
CASES = {
    "relative": ("noiseParameter1_obs * X", [("s", 0.2, 1e-3, 10.0)],
                 lambda X, s: s * X, dict(s=0.1)),
    "affine": ("a + b * obs", [("a", 0.05, 1e-4, 1.0), ("b", 0.2, 1e-3, 10.0)],
               lambda X, a, b: a + b * X, dict(a=0.02, b=0.1)),
}
#: the continuous least squares at tight tolerances (its default relative stop on the
#: objective, which holds n·C/2 of the log-σ residuals, leaves ~5e-5 on the estimates)
LEAST_SQUARES = dict(optimizer="least_squares", rtol=1e-10, atol=1e-12,
                     options=dict(ftol=1e-15, gtol=1e-14, xtol=1e-15))


def write_case(folder, case):
    """The switched-input problem of test_petab_features with the noise formula of
    ``case``, data drawn from that noise model; the YAML path."""
    noise, pars, sigma, truth = CASES[case]
    rng = np.random.default_rng(11)
    rows = []
    for cnd, t_on in T_ON.items():
        X = closed_form(TIMES, t_on)
        m = X + sigma(X, **truth) * rng.standard_normal(len(TIMES))
        rows += [dict(observableId="obs", simulationConditionId=cnd, time=t, measurement=v,
                      noiseParameters="s" if case == "relative" else np.nan)
                 for t, v in zip(TIMES, m)]
    extra = [dict(parameterId=n, parameterScale="log10", lowerBound=lb, upperBound=ub,
                  nominalValue=v, estimate=1)
             for n, v, lb, ub in pars]
    return write_switch(folder, noise=noise, extra_params=extra, rows=rows)


def hand_nll(case, rows, k, dose, **noise):
    """PEtab's NLL by hand: the closed-form solution and σ of the case's formula."""
    out = 0.0
    for cnd, t_on in T_ON.items():
        d = rows[rows["simulationConditionId"] == cnd]
        X = closed_form(d["time"].to_numpy(), t_on, k=k, dose=dose)
        sig = CASES[case][2](X, **noise)
        r = (d["measurement"].to_numpy() - X) / sig
        out += float(np.sum(0.5 * np.log(2 * np.pi * sig ** 2) + 0.5 * r ** 2))
    return out


def hand_minimum(case, rows, names):
    """The minimum of :func:`hand_nll` over the log10 parameters ``names`` (linear values)."""
    def f(v):
        return hand_nll(case, rows, **dict(zip(names, 10.0 ** np.asarray(v))))
    x0 = np.log10([K, DOSE] + [p[1] for p in CASES[case][1]])
    out = minimize(f, x0, method="BFGS", options=dict(gtol=1e-10, maxiter=5000))
    out = minimize(f, out.x, method="Nelder-Mead",
                   options=dict(xatol=1e-11, fatol=1e-14, maxiter=20000, maxfev=20000))
    return pd.Series(10.0 ** out.x, index=names), out.fun


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    path = write_case(tmp_path_factory.mktemp(request.param), request.param)
    pe = petab_problem(path)
    rows = pe.model.measurements
    names = [p.id for p in pe.model.estimated]
    best, nll = hand_minimum(request.param, rows, names)
    return request.param, pe, rows, names, best, nll


def test_objective_is_the_nll_by_hand(case):
    """At the nominal point and at the optimum: the imported problem's objective (its own
    simulation, LSODA) as PEtab's NLL is the NLL by hand; per datum the squares of its two
    residuals are r²/σ² and 2 log σ + C (none of σ in the parameters' penalty)."""
    name, pe, rows, names, best, nll = case
    nominal = {p.id: p.nominal for p in pe.model.estimated}
    n = len(rows)
    assert pe.n_data == n and len(pe._data) == n
    assert sum(c.endswith("_log_sigma") for c in pe.problem.obs_names) == n
    assert pe.problem.penalty_sym == 0
    assert objective_at_nominal(pe) == pytest.approx(hand_nll(name, rows, **nominal), rel=1e-8)
    assert petab_nll(pe.model) == pytest.approx(hand_nll(name, rows, **nominal), rel=1e-8)
    res = estimate(pe.problem, "continuous", **LEAST_SQUARES)
    assert res.success, res.status
    assert pe.nll(res.objective) == pytest.approx(nll, rel=1e-8)
    est = 10.0 ** pe.scaled_estimates(res)
    X = np.concatenate([closed_form(rows["time"][rows["simulationConditionId"] == c], t_on,
                                    k=est["k"], dose=est["dose"]) for c, t_on in T_ON.items()])
    order = np.concatenate([np.flatnonzero(rows["simulationConditionId"] == c) for c in T_ON])
    sig = CASES[name][2](X, **{q: est[q] for q in names[2:]})
    m = rows["measurement"].to_numpy()[order]
    R, d = res.residuals, pe._data.iloc[order]
    A = [R.loc[(c, t), a] for c, t, a in zip(d["condition"], d["time"], d["name"])]
    B = [R.loc[(c, t), a + "_log_sigma"] for c, t, a in zip(d["condition"], d["time"], d["name"])]
    np.testing.assert_allclose(np.square(A), ((m - X) / sig) ** 2, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(np.square(B), 2 * np.log(sig) + LOG_SIGMA_SHIFT, rtol=1e-8)


@pytest.mark.parametrize("approach, options, rel", [
    ("continuous", LEAST_SQUARES, 1e-4),
    ("continuous", dict(rtol=1e-10, atol=1e-12), 1e-4),
    ("reduced_space", dict(scheme="enright", max_step=0.2), 1e-3)])
def test_estimates_are_the_minimum_by_hand(case, approach, options, rel):
    name, pe, rows, names, best, nll = case
    res = estimate(pe.problem, approach, **options)
    assert res.success, res.status
    est = 10.0 ** pe.scaled_estimates(res)
    np.testing.assert_allclose(est[names].to_numpy(), best[names].to_numpy(), rtol=rel)
    assert pe.simulated_nll(res) == pytest.approx(nll, rel=rel)


def test_sigma_not_positive_at_the_start_is_an_error(tmp_path):
    """σ = a + b·obs with a = −1, b = 0.2 at the nominal point: −0.9 at t = 0 (X = 0.5)."""
    path = write_case(tmp_path / "p", "affine")
    par = os.path.join(os.path.dirname(path), "parameters.tsv")
    df = pd.read_csv(par, sep="\t")
    df.loc[df["parameterId"] == "a", ["parameterScale", "lowerBound", "upperBound",
                                      "nominalValue"]] = ["lin", -2.0, 1.0, -1.0]
    df.to_csv(par, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"the noise formula of obs \(X\*b \+ a\) is -0\.9 at "
                                         r"the nominal parameters \(condition c1, t = 0\); "
                                         r"sigma must be positive"):
        petab_problem(path)


ARMISTEAD = os.path.join(DATA, "Armistead_CellDeathDis2024")


def test_armistead_nominal_nll_is_the_reference():
    """σ = sd_X_obs · X (the observed state): the imported problem's objective at the
    nominal point, and the independent simulation, give AMICI's reference NLL."""
    pe = petab_problem(ARMISTEAD)
    assert pe.n_data == 58 and len(pe.model.estimated) == 14
    assert objective_at_nominal(pe) == pytest.approx(ARMISTEAD_REFERENCE, abs=1e-4)
    assert pe.simulated_nll() == pytest.approx(ARMISTEAD_REFERENCE, abs=1e-4)
    assert math.isfinite(pe.constant)


def test_a_nominal_value_outside_the_bounds_starts_at_the_bound(tmp_path):
    """Lang's nominal values 0 on a log scale (start −inf) and above the upper bound: the
    start is the nearest bound, with a warning naming the parameter; the NLL at the
    nominal point is unchanged (PEtab's)."""
    path = write_switch(tmp_path / "p")
    par = os.path.join(os.path.dirname(path), "parameters.tsv")
    df = pd.read_csv(par, sep="\t")
    df.loc[df["parameterId"] == "k", "nominalValue"] = 0.0
    df.loc[df["parameterId"] == "dose", "nominalValue"] = 20.0
    df.to_csv(par, sep="\t", index=False)
    with pytest.warns(UserWarning) as record:
        pe = petab_problem(path)
    said = " ".join(str(w.message) for w in record)
    assert "nominal value 0.0 of k lies outside its bounds [0.01, 10.0]" in said
    assert "nominal value 20.0 of dose" in said
    np.testing.assert_allclose(pe.problem.u0, [-2.0, 1.0])
