"""Coverage of 95 % Wald and profile-likelihood intervals on Lotka–Volterra.

Monte Carlo over synthetic data sets of [AT]'s Lotka–Volterra problem
(``models.lotka_volterra_data``: both states at t = 1, ..., 10, true
p = (1, 1, 1, 1)) with Gaussian noise of standard deviation σ = 0.05 (random
seed = data set number).  Each data set is estimated in the reduced space
(Adams PC, Q_max = 4, steps of at most 0.25; least squares weighted by 1/σ², σ
known) from a start drawn around the truth (p·exp(0.2·U[-1, 1]), same seed),
then

* Wald: ``covariance(result, 'fim')`` (inverse Fisher information), normal
  quantile, 95 %;
* profile: ``profile_likelihood(result)`` in the reduced space, interval
  {θ : λ(θ) ≤ χ²₁(0.95)} (an open side counts as unbounded).

Printed: per-parameter coverage of both, failures, time per data set, and
the last line ``coverage: n=... wald=... profile=... median_profile_s=...``
(fractions pooled over the four parameters; ``median_profile_s`` is the
median wall time of the four profiles of one data set).

Usage: python benchmarks/interval_coverage.py [--n 200] [--processes 2] [--quick]
(``--quick``: 12 data sets).
"""
from __future__ import annotations

import argparse
import time
from multiprocessing import Pool

import numpy as np

SIGMA = 0.05
TRUE = np.ones(4)
LEVEL = 0.95
#: Steps of at most 0.25 (k = 40): on noise-free data the estimates differ from
#: the truth by at most 1.5e-3 (k = 100: 5e-5), 5 % of a standard error.
MAX_STEP = 0.25


def _one(seed):
    from pyomo_odeest import estimate
    from pyomo_odeest.analysis._profile import profile_likelihood
    from pyomo_odeest.analysis._uncertainty import covariance
    from pyomo_odeest import EstimationProblem, Parameter
    from pyomo_odeest.models._lotka_volterra import LV_X0, lotka_volterra_data, lv_rhs

    t = time.perf_counter()
    data = lotka_volterra_data(seed=seed, variance=SIGMA ** 2)
    start = TRUE * np.exp(0.2 * np.random.default_rng(10_000 + seed).uniform(-1, 1, 4))
    P = EstimationProblem(states=["x1", "x2"],
                          parameters=[Parameter(f"p{k + 1}", float(v)) for k, v in enumerate(start)],
                          rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data,
                          sigma=SIGMA, name="lotka_volterra")
    res = estimate(P, "reduced_space", max_step=MAX_STEP)
    if not res.success:
        return dict(seed=seed, ok=False, status=res.status)
    w = covariance(res, "fim").intervals(LEVEL)
    pr = profile_likelihood(res, level=LEVEL, target_step=1.0, options={"tol": 1e-7})
    iv = pr.intervals
    lo = iv["lower"].fillna(-np.inf).to_numpy()
    hi = iv["upper"].fillna(np.inf).to_numpy()
    return dict(seed=seed, ok=True,
                wald=((w["lower"].to_numpy() <= TRUE) & (TRUE <= w["upper"].to_numpy())).tolist(),
                profile=((lo <= TRUE) & (TRUE <= hi)).tolist(),
                open=int((~np.isfinite(lo)).sum() + (~np.isfinite(hi)).sum()),
                profile_s=pr.seconds, total_s=time.perf_counter() - t)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    n = 12 if a.quick else a.n
    t = time.perf_counter()
    if a.processes > 1:
        with Pool(a.processes) as pool:
            out = list(pool.imap_unordered(_one, range(n)))
    else:
        out = [_one(s) for s in range(n)]
    ok = [o for o in sorted(out, key=lambda o: o["seed"]) if o["ok"]]
    failed = [o for o in out if not o["ok"]]
    W = np.array([o["wald"] for o in ok], dtype=float)
    R = np.array([o["profile"] for o in ok], dtype=float)
    names = ["p1", "p2", "p3", "p4"]
    print(f"{len(ok)} of {n} data sets estimated ({len(failed)} failed: "
          f"{[(o['seed'], o['status']) for o in failed][:5]})")
    print("parameter  wald   profile")
    for k, nm in enumerate(names):
        print(f"{nm:9s}  {W[:, k].mean():.3f}  {R[:, k].mean():.3f}")
    print(f"open profile sides: {sum(o['open'] for o in ok)}")
    ps = np.array([o["profile_s"] for o in ok])
    print(f"profile seconds per data set: median {np.median(ps):.2f}, max {ps.max():.2f}; "
          f"wall {time.perf_counter() - t:.0f} s with {a.processes} process(es)")
    print(f"coverage: n={len(ok)} wald={W.mean():.3f} profile={R.mean():.3f} "
          f"median_profile_s={np.median(ps):.2f}")


if __name__ == "__main__":
    main()
