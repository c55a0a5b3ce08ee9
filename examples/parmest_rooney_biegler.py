"""parmest's Rooney–Biegler example on a machine without an ipopt executable.

parmest names its solver ``SolverFactory('ipopt')`` in its code.  After
``pyomo_odeest.use_as_ipopt()`` that name gives the package's in-process
solver (Ipopt through cyipopt), so parmest's own example runs unchanged:
the estimate ``theta_est()``, the covariance ``cov_est()`` (finite
differences), bootstrap resampling and the likelihood-ratio test.

Data and model: parmest's ``RooneyBieglerExperiment``
(``y = A (1 - exp(-B t))``, six measurements); parmest's documented estimate
is A = 19.1426, B = 0.5311.

Usage: python examples/parmest_rooney_biegler.py
The last line is ``parmest: theta=(A, B) cov=((a, b), (c, d))``.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

import pyomo_odeest

DATA = pd.DataFrame(data=[[1, 8.3], [2, 10.3], [3, 19.0], [4, 16.0], [5, 15.6], [7, 19.8]],
                    columns=["hour", "y"])


def estimator():
    import pyomo.contrib.parmest.parmest as parmest
    from pyomo.contrib.parmest.examples.rooney_biegler.rooney_biegler import (
        RooneyBieglerExperiment)
    exps = [RooneyBieglerExperiment(DATA.loc[i, :], measure_error=1.0)
            for i in range(DATA.shape[0])]
    return parmest.Estimator(exps, obj_function="SSE")


def run(bootstrap_samples=10, seed=0):
    """Estimate, covariance, bootstrap and likelihood-ratio test; returns a dict."""
    with pyomo_odeest.use_as_ipopt():
        pest = estimator()
        obj, theta = pest.theta_est()
        cov = pest.cov_est()
        boot = pest.theta_est_bootstrap(bootstrap_samples, seed=seed)
        grid = pd.DataFrame(list(itertools.product(np.linspace(17.0, 21.0, 5),
                                                   np.linspace(0.4, 0.7, 4))),
                            columns=["asymptote", "rate_constant"])
        obj_at = pest.objective_at_theta(grid)
        lr = pest.likelihood_ratio_test(obj_at, obj, [0.8, 0.95])
    return dict(obj=obj, theta=theta, cov=cov, bootstrap=boot, obj_at_theta=obj_at, lr=lr)


def main():
    r = run()
    theta, cov = r["theta"], r["cov"]
    print(f"objective (SSE) at the estimate: {r['obj']:.6g}")
    print("theta:", dict(theta))
    print("covariance (finite differences):\n", cov)
    print("bootstrap estimates (first rows):\n", r["bootstrap"].head())
    print("likelihood-ratio test, points inside the 80 % region:",
          int(r["lr"][0.8].sum()), "of", len(r["lr"]))
    A, B = theta["asymptote"], theta["rate_constant"]
    c = cov.values
    print(f"parmest: theta=({A:.4f}, {B:.4f}) "
          f"cov=(({c[0, 0]:.4g}, {c[0, 1]:.4g}), ({c[1, 0]:.4g}, {c[1, 1]:.4g}))")


if __name__ == "__main__":
    main()
