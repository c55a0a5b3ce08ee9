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
* ``scratch``: the adjoint gradient from scratch (``dm.gradient(u)``: the
  simulation, then the sweep),
and prints ``adj/sim`` (median of paired, alternating timings), ``sens/sim``
and ``scratch/sim``.  Sweeps: (a) p = 2, 10, 50, 200,
1000 parameters with 11 observation times, (b) 2, 10, 50, 200, 1000
observation times with p = 50, (c) a model with a *dense* ∂f/∂u and more
parameters than states (n = 4 states, p = 8, 40, 200 parameters:
f_i = -x_i + Σ_k u_k w_ik sin(x_{(i+k) mod n}) + c_i, every f_i depends on
every u_k), (d) an implicit scheme (Adams–Moulton, Q_max = 4, whose
simulation solves a Newton system per step) on the diagonal model,
p = 10, 50, 200.  Target: adj/sim <= 3 everywhere and flat within ±20 % of
its mean over sweeps (a) and (b); the gradient from scratch <= 3 simulations
in every sweep.

Usage: python benchmarks/gradient_cost.py [--quick]
Last line: ``gradient_cost: max_ratio=... min_ratio=... sensitivity_ratio_at_p1000=...
scratch_max_ratio=... dense_fu_max_ratio=... implicit_max_ratio=...`` (the
first three over sweeps (a), (b); ``scratch_max_ratio`` the largest
scratch/sim of all sweeps; the last two the largest scratch/sim of sweeps
(c) and (d)).
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np

import pandas as pd

from pyomo_odeest.discretization.discrete import DiscreteModel
from pyomo_odeest.models._diagonal_linear import diagonal_linear_problem
from pyomo_odeest.problem._declaration import EstimationProblem, Parameter


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


def dense_fu_problem(n, p, n_obs=11, seed=1):
    """n states, p parameters, every f_i depending on every u_k (dense ∂f/∂u); noisy data
    around 1 (the cost of a gradient does not depend on the data values)."""
    import pyomo.environ as pyo
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1.0, 1.0, (n, p)) / p
    c = rng.uniform(0.5, 1.0, n)
    times = np.linspace(0.0, 10.0, n_obs)

    def rhs(x, u, t):
        return [-x[i] + sum(u[k] * float(w[i, k]) * pyo.sin(x[(i + k) % n]) for k in range(p))
                + float(c[i]) for i in range(n)]
    states = [f"x{i + 1}" for i in range(n)]
    data = pd.DataFrame(1.0 + 0.05 * rng.standard_normal((n_obs, n)),
                        index=pd.Index(times, name="time"), columns=states)
    return EstimationProblem(states=states, parameters=[Parameter(f"u{k + 1}", 1.0) for k in range(p)],
                             rhs=rhs, initial={s_: 0.5 for s_ in states}, data=data, sigma=0.1,
                             name=f"dense_fu_{n}x{p}")


def measure(p, n_obs, repeats=9, with_sensitivity=True, scheme="adams_pc", problem=None,
            max_step=0.5):
    prob = diagonal_linear_problem(p, n_obs=n_obs, seed=1) if problem is None else problem
    dm = DiscreteModel(prob, scheme, 4, max_step=max_step)
    u = prob.u0 + 0.1
    traj = dm.simulate(u)
    sim, adj, ratio = _paired(lambda: dm.simulate(u), lambda: dm.gradient(u, "adjoint", traj),
                              repeats)
    _, scratch, scratch_ratio = _paired(lambda: dm.simulate(u), lambda: dm.gradient(u, "adjoint"),
                                        repeats)
    sens = np.nan
    if with_sensitivity:
        sens = _median_time(lambda: dm.gradient(u, "sensitivity", traj), 1 if p >= 200 else repeats)
    return dict(p=p, n_obs=n_obs, k=dm.k, sim_s=sim, adj_s=adj, sens_s=sens, scratch_s=scratch,
                adj_ratio=ratio, sens_ratio=sens / sim, scratch_ratio=scratch_ratio)


def main(argv):
    warnings.simplefilter("ignore", RuntimeWarning)
    quick = "--quick" in argv
    ps = (2, 10, 50, 200) if quick else (2, 10, 50, 200, 1000)
    obs = (2, 10, 50, 200) if quick else (2, 10, 50, 200, 1000)
    rows, extra = [], {"c": [], "d": []}
    print(f"{'sweep':>6} {'p':>5} {'n_obs':>6} {'k':>5} {'sim_s':>9} {'adj_s':>9} {'sens_s':>9} "
          f"{'adj/sim':>8} {'sens/sim':>9} {'scratch/sim':>12}")

    def show(sweep, r):
        print(f"{sweep:>6} {r['p']:>5} {r['n_obs']:>6} {r['k']:>5} {r['sim_s']:9.4f} {r['adj_s']:9.4f} "
              f"{r['sens_s']:9.4f} {r['adj_ratio']:8.3f} {r['sens_ratio']:9.3f} "
              f"{r['scratch_ratio']:12.3f}", flush=True)
    for sweep, configs in (("a", [(p, 11) for p in ps]), ("b", [(50, n) for n in obs])):
        for p, n in configs:
            r = measure(p, n)
            rows.append(r)
            show(sweep, r)
    for p in ((8, 40) if quick else (8, 40, 200)):               # (c) dense ∂f/∂u, p > n = 4
        r = measure(p, 11, problem=dense_fu_problem(4, p), max_step=0.05,
                    with_sensitivity=p <= 40)
        extra["c"].append(r)
        show("c", r)
    for p in ((10, 50) if quick else (10, 50, 200)):             # (d) implicit scheme
        r = measure(p, 11, scheme="adams_moulton", with_sensitivity=False)
        extra["d"].append(r)
        show("d", r)
    ratios = np.array([r["adj_ratio"] for r in rows])
    mean = ratios.mean()
    print(f"adjoint/simulation: mean {mean:.3f}, spread {ratios.min() / mean - 1:+.1%} .. "
          f"{ratios.max() / mean - 1:+.1%} (target: <= 3, within ±20%)")
    big = [r for r in rows if r["p"] == max(ps) and r["n_obs"] == 11][0]
    scratch = max(r["scratch_ratio"] for r in rows + extra["c"] + extra["d"])
    dense = max(r["scratch_ratio"] for r in extra["c"])
    implicit = max(r["scratch_ratio"] for r in extra["d"])
    print(f"gradient from scratch / simulation: at most {scratch:.3f} (dense df/du {dense:.3f}, "
          f"implicit scheme {implicit:.3f}; target: <= 3)")
    print(f"gradient_cost: max_ratio={ratios.max():.3f} min_ratio={ratios.min():.3f} "
          f"sensitivity_ratio_at_p{max(ps)}={big['sens_ratio']:.2f} scratch_max_ratio={scratch:.3f} "
          f"dense_fu_max_ratio={dense:.3f} implicit_max_ratio={implicit:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
