"""Uncertainty of the estimates: Lotka–Volterra and HIV (the numbers of docs/uncertainty.md).

Lotka–Volterra ([AT], data of ``lotka_volterra_data(seed=1)``, σ² = 0.05 as in
the paper; least squares with weights 1/σ²): covariance by the three methods,
Wald and profile intervals, a derived quantity (the period-related product
p1·p3), identifiability, bands and profile plots.

HIV ([MHV], ``hiv_problem()``: 6 of 11 parameters, relative errors of 5 %):
covariance, Wald intervals and bands in the reduced space (Enright scheme,
steps ≤ 0.5), the profiles of the two least determined parameters, and the identifiability report with all 11
parameters free.

Usage: python examples/uncertainty.py [--plots DIR]
(PYOMO_ODEEST_EXAMPLE_QUICK=1: without the HIV profiles, which take minutes.)
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from pyomo_odeest import EstimationProblem, Parameter, estimate
from pyomo_odeest.analysis import identifiability_report, profile_likelihood
from pyomo_odeest.models import hiv_problem
from pyomo_odeest.models._lotka_volterra import LV_X0, lotka_volterra_data, lv_rhs

QUICK = os.environ.get("PYOMO_ODEEST_EXAMPLE_QUICK") == "1"
pd.set_option("display.width", 140)
pd.set_option("display.precision", 4)


def lotka_volterra(plots=None):
    data = lotka_volterra_data(seed=1)                       # variance 0.05
    P = EstimationProblem(states=["x1", "x2"],
                          parameters=[Parameter(f"p{k}", 0.8) for k in range(1, 5)],
                          rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data,
                          sigma=np.sqrt(0.05), name="lotka_volterra")
    res = estimate(P, "reduced_space")
    print(res.summary())
    print("\nstandard errors by method")
    print(pd.DataFrame({m: res.covariance(m).se for m in ("fim", "hessian", "residual")}))
    cov = res.covariance("fim")
    print("\ncorrelations (inverse FIM)")
    print(cov.correlation.round(3))
    t = time.perf_counter()
    pr = profile_likelihood(res)
    print(f"\nWald and profile 95 % intervals (profiles: {time.perf_counter() - t:.1f} s)")
    print(pr.intervals[["estimate", "wald_lower", "lower", "wald_upper", "upper", "shape"]])
    print("\ndelta method: q = p1·p3")
    print(cov.delta(lambda u: u["p1"] * u["p3"], names=["p1*p3"]))
    print("\n" + res.identifiability().summary())
    if plots:
        res.prediction_bands().plot(data=data, path=f"{plots}/uncertainty_lv_bands.png")
        pr.plot(path=f"{plots}/uncertainty_lv_profiles.png")


def hiv(plots=None):
    P = hiv_problem()
    # mildly stiff: the implicit Enright scheme (as in examples/hiv.py)
    res = estimate(P, "reduced_space", scheme="enright", max_step=0.5)
    print(res.summary())
    cov = res.covariance("fim")
    truth = pd.Series(P.true_values)
    iv = cov.intervals()
    iv["truth"] = truth.reindex(iv.index)
    t = time.perf_counter()
    worst = cov.se.div(cov.estimates.reindex(cov.names).abs()).nlargest(2).index.tolist()
    iv["rel_se"] = iv["se"] / iv["estimate"].abs()
    cols = ["estimate", "truth", "se", "rel_se", "lower", "upper"]
    pr = None
    if QUICK:                       # the profiles of HIV take minutes; the LV ones ran above
        print(f"\nWald 95 % intervals (profiles of {worst} skipped in the small-size mode)")
    else:
        pr = profile_likelihood(res, parameters=worst, target_step=1.0)
        print(f"\nWald and profile 95 % intervals (profiles of {worst}: "
              f"{time.perf_counter() - t:.1f} s)")
        iv = iv.join(pr.intervals[["lower", "upper", "shape"]], rsuffix="_profile")
        cols += ["lower_profile", "upper_profile", "shape"]
    print(iv[iv["status"] == "ok"][cols])
    print("\ncorrelations (inverse FIM)")
    print(cov.correlation.round(2))
    print("\n" + res.identifiability().summary())
    # all 11 parameters free: the report names the non-identifiable directions
    free = hiv_problem(estimate=tuple(P.true_values))
    rep = identifiability_report(problem=free, estimates=P.true_values,
                                 discretization=dict(scheme="enright", max_step=0.5))
    print("\nall 11 parameters free, at the truth:\n" + rep.summary())
    if plots:
        res.prediction_bands().plot(data=P.data, path=f"{plots}/uncertainty_hiv_bands.png")
        if pr is not None:
            pr.plot(path=f"{plots}/uncertainty_hiv_profiles.png")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--plots", default=None, help="directory for PNG figures")
    a = ap.parse_args()
    if a.plots:
        os.makedirs(a.plots, exist_ok=True)
    print("=== Lotka–Volterra ===")
    lotka_volterra(a.plots)
    print("\n=== HIV ===")
    hiv(a.plots)
