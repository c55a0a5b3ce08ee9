"""Gradient cost per parameter of the continuous approach: forward sensitivities vs adjoint.

Problem: n = 20 states, p parameters that all act on every state (a dense
∂f/∂u), 20 measurement times on [0, 10], every state observed, Gaussian
misfit with σ = 0.1:

    x_i' = -(1 + i/n) x_i + Σ_k u_k w_ik sin(x_{(i+k) mod n}) + 0.5,
    x_i(0) = 1,  w_ik ~ U[-1, 1] / √p  (fixed seed).

For each p = 2, 5, 10, 20, 40, 80, 122 the script times (CPU time of the
process, median of ``--repeats``, after a warm-up call that builds every
compiled function) on the engine of ``--engine`` (default: CVODES through
CasADi, :class:`~pyomo_odeest.discretization.continuous.CvodesModel`, rtol 1e-8,
atol 1e-12):

* ``sim``: the objective J(u) (one forward solve);
* ``sens``: ∇J by forward sensitivities [MHV, eq. (8)] (one forward solve of
  the n(1 + p) augmented system);
* ``adj``: ∇J by the adjoint with jumps at the measurement times [MHV,
  eqs. (15)–(16)] (one forward and one backward solve);

and prints the cost per parameter of each in units of one simulation
(``sens/(p·sim)``, ``adj/(p·sim)``), the ratio sens/adj and the relative
difference of the two gradients.  [MHV]'s claim: the adjoint's cost is
nearly flat in p, so its cost per parameter falls like 1/p, while forward
sensitivities cost a roughly constant amount per parameter.

Last line: ``sensitivity_cost: crossover_p=... sens_over_adj_at_p122=...
adj_per_param_at_p122=... sens_per_param_at_p122=... max_gradient_rel_diff=...``
(``crossover_p``: smallest p from which the adjoint is faster at every larger
p; per-parameter costs in simulations).

Usage: python benchmarks/sensitivity_cost.py [--quick] [--repeats N] [--engine cvodes|scipy]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pyomo_odeest.discretization.continuous import continuous_model, cvodes_available  # noqa: E402
from pyomo_odeest.problem._declaration import EstimationProblem, Parameter  # noqa: E402

N_STATES, N_TIMES, T_END = 20, 20, 10.0


def problem(p, n=N_STATES, seed=1):
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1.0, 1.0, (n, p)) / np.sqrt(p)
    names = [f"x{i}" for i in range(n)]
    times = np.linspace(T_END / N_TIMES, T_END, N_TIMES)
    data = pd.DataFrame(1.0 + 0.1 * rng.standard_normal((N_TIMES, n)), index=times,
                        columns=names)

    def rhs(x, u, t):
        out = []
        for i in range(n):
            s = sum(u[f"u{k}"] * float(w[i, k]) * _sin(x[names[(i + k) % n]]) for k in range(p))
            out.append(-(1.0 + i / n) * x[names[i]] + s + 0.5)
        return out
    params = [Parameter(f"u{k}", float(rng.uniform(0.5, 1.5))) for k in range(p)]
    return EstimationProblem(names, params, rhs, {s: 1.0 for s in names}, data, sigma=0.1)


def _sin(v):
    import pyomo.environ as pyo
    return pyo.sin(v)


def _median_cpu(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return float(np.median(ts))


def measure(p, repeats, engine):
    prob = problem(p)
    cm = continuous_model(prob, engine, rtol=1e-8, atol=1e-12)
    u = prob.u0
    cm.gradient(u, "adjoint")                        # build and warm every function
    cm.gradient(u, "sensitivity")

    def fresh(fn):                  # no forward solution or sensitivities reused
        def call():
            cm._fwd_key = None
            if hasattr(cm, "_sens"):
                cm._sens = (None, None)
            return fn()
        return call
    sim = _median_cpu(fresh(lambda: cm.objective(u)), repeats)
    sens = _median_cpu(fresh(lambda: cm.gradient(u, "sensitivity")), repeats)
    adj = _median_cpu(fresh(lambda: cm.gradient(u, "adjoint")), repeats)
    ga, gs = cm.gradient(u, "adjoint"), cm.gradient(u, "sensitivity")
    diff = float(np.linalg.norm(ga - gs) / np.linalg.norm(gs))
    return dict(p=p, sim=sim, sens=sens, adj=adj, diff=diff)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engine", default="cvodes" if cvodes_available() else "scipy",
                    choices=("cvodes", "scipy"))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    sizes = [2, 10, 20] if args.quick else [2, 5, 10, 20, 40, 80, 122]
    print(f"engine {args.engine}; n = {N_STATES} states, {N_TIMES} measurement times; CPU time, "
          f"median of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'p':>4} {'sim [s]':>9} {'sens [s]':>9} {'adj [s]':>9} {'sens/(p sim)':>13} "
          f"{'adj/(p sim)':>12} {'sens/adj':>9} {'grad diff':>10}")
    rows = []
    for p in sizes:
        r = measure(p, args.repeats, args.engine)
        rows.append(r)
        print(f"{p:4d} {r['sim']:9.4f} {r['sens']:9.4f} {r['adj']:9.4f} "
              f"{r['sens'] / (p * r['sim']):13.2f} {r['adj'] / (p * r['sim']):12.2f} "
              f"{r['sens'] / r['adj']:9.2f} {r['diff']:10.1e}", flush=True)
    faster = [r["adj"] < r["sens"] for r in rows]
    cp = next((rows[i]["p"] for i in range(len(rows)) if all(faster[i:])), None)
    last = rows[-1]
    print(f"sensitivity_cost: crossover_p={cp} sens_over_adj_at_p{last['p']}="
          f"{last['sens'] / last['adj']:.2f} adj_per_param_at_p{last['p']}="
          f"{last['adj'] / (last['p'] * last['sim']):.3f} sens_per_param_at_p{last['p']}="
          f"{last['sens'] / (last['p'] * last['sim']):.3f} "
          f"max_gradient_rel_diff={max(r['diff'] for r in rows):.1e}")


if __name__ == "__main__":
    main()
