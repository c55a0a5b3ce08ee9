"""Cost of one reduced-space gradient relative to one forward simulation.

Problem: [MHV]'s diagonal linear model (eq. (24)), x' = diag(φ) x, x(0) = 1,
φ_i ~ U[-1.1, -0.1] (eq. (26)), data perturbed as in eq. (27), Gaussian
log-likelihood with Σ = I; discretized by the Adams predictor–corrector
(Q_max = 4) with steps of at most 0.5 on [0, 100] (grid through every
measurement time).

For each configuration the script times (median of repeats, one process):
* ``sim``: one forward simulation of the discrete scheme,
* ``adj``: the discrete-adjoint gradient given the trajectory (backward
  sweep of eq. (52) + eq. (54)),
* ``sens``: the forward-sensitivity gradient given the trajectory
  (eqs. (51), (53)),
and prints ``adj/sim`` (median of paired, alternating timings) and
``sens/sim``.  Sweeps: (a) p = 2, 10, 50, 200,
1000 parameters with 11 observation times, (b) 2, 10, 50, 200, 1000
observation times with p = 50.  Target: adj/sim <= 3 everywhere and flat
within ±20 % of its mean over both sweeps.

Usage: python benchmarks/gradient_cost.py [--quick]
Last line: ``gradient_cost: max_ratio=... min_ratio=... sensitivity_ratio_at_p1000=...``
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from pyomo_odeest.discretization.discrete import DiscreteModel
from pyomo_odeest.models.diagonal_linear import diagonal_linear_problem


def _median_time(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _paired(fa, fb, repeats):
    """Median times of fa and fb and the median of the per-pair ratios b/a.

    The two are timed alternately so that load on a shared machine affects
    both alike.
    """
    ta, tb = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        fa()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        fb()
        tb.append(time.perf_counter() - t)
    ta, tb = np.array(ta), np.array(tb)
    return float(np.median(ta)), float(np.median(tb)), float(np.median(tb / ta))


def measure(p, n_obs, repeats=9, with_sensitivity=True):
    prob = diagonal_linear_problem(p, n_obs=n_obs, seed=1)
    dm = DiscreteModel(prob, "adams_pc", 4, max_step=0.5)
    u = prob.u0 + 0.1
    traj = dm.simulate(u)
    sim, adj, ratio = _paired(lambda: dm.simulate(u), lambda: dm.gradient(u, "adjoint", traj),
                              repeats)
    sens = np.nan
    if with_sensitivity:
        sens = _median_time(lambda: dm.gradient(u, "sensitivity", traj), 1 if p >= 200 else repeats)
    return dict(p=p, n_obs=n_obs, k=dm.k, sim_s=sim, adj_s=adj, sens_s=sens,
                adj_ratio=ratio, sens_ratio=sens / sim)


def main(argv):
    warnings.simplefilter("ignore", RuntimeWarning)
    quick = "--quick" in argv
    ps = (2, 10, 50, 200) if quick else (2, 10, 50, 200, 1000)
    obs = (2, 10, 50, 200) if quick else (2, 10, 50, 200, 1000)
    rows = []
    print(f"{'sweep':>6} {'p':>5} {'n_obs':>6} {'k':>5} {'sim_s':>9} {'adj_s':>9} {'sens_s':>9} "
          f"{'adj/sim':>8} {'sens/sim':>9}")
    for sweep, configs in (("a", [(p, 11) for p in ps]), ("b", [(50, n) for n in obs])):
        for p, n in configs:
            r = measure(p, n)
            rows.append(r)
            print(f"{sweep:>6} {p:>5} {n:>6} {r['k']:>5} {r['sim_s']:9.4f} {r['adj_s']:9.4f} "
                  f"{r['sens_s']:9.4f} {r['adj_ratio']:8.3f} {r['sens_ratio']:9.3f}", flush=True)
    ratios = np.array([r["adj_ratio"] for r in rows])
    mean = ratios.mean()
    print(f"adjoint/simulation: mean {mean:.3f}, spread {ratios.min() / mean - 1:+.1%} .. "
          f"{ratios.max() / mean - 1:+.1%} (target: <= 3, within ±20%)")
    big = [r for r in rows if r["p"] == max(ps) and r["n_obs"] == 11][0]
    print(f"gradient_cost: max_ratio={ratios.max():.3f} min_ratio={ratios.min():.3f} "
          f"sensitivity_ratio_at_p{max(ps)}={big['sens_ratio']:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
