"""What pre-equilibration costs in the set-up and the exact derivatives of the reduced space.

Problem: a chain x0 <-> x1 <-> ... <-> x_{n-1} of reversible reactions
(forward a_i (1 + L), backward b_i; one conservation law), 2(n-1) estimated
parameters, x0 and x_{n-1} observed at 10 times.  With pre-equilibration
(at L = 0) and without (x(0) = (1, 0, ..., 0)), it times the problem's
construction, the discrete model's set-up (Adams PC, q <= 4, 5 steps per
interval), one adjoint gradient and the second-order-adjoint Hessian (the
first call builds the symbolic second derivatives; medians of ``--repeats``
later calls at perturbed parameters).

Last line: ``preequilibration_cost: n=... problem_ratio=... first_hessian_s=...
first_hessian_plain_s=... hessian_ratio=...`` (ratios: with over without
pre-equilibration).

Usage: python benchmarks/preequilibration_cost.py [--n 15] [--repeats 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from pyomo_odeest import DiscreteModel, EstimationProblem, Parameter, Preequilibration


def chain(n, pre):
    S = [f"x{i}" for i in range(n)]
    pars = ([Parameter(f"a{i}", 0.5 + 0.05 * i, lb=0.01, ub=10) for i in range(n - 1)]
            + [Parameter(f"b{i}", 0.3 + 0.02 * i, lb=0.01, ub=10) for i in range(n - 1)]
            + [Parameter("L", 1.0, fixed=True)])

    def rhs(x, u, t):
        v = [u[f"a{i}"] * (1 + u.L) * x[S[i]] - u[f"b{i}"] * x[S[i + 1]] for i in range(n - 1)]
        return [(v[i - 1] if i else 0) - (v[i] if i < n - 1 else 0) for i in range(n)]
    tt = np.linspace(0.5, 5, 10)
    df = pd.DataFrame({"x0": np.linspace(0.5, 0.2, 10), f"x{n - 1}": np.linspace(0.1, 0.3, 10)},
                      index=tt)
    return EstimationProblem(S, pars, rhs, {s: float(s == "x0") for s in S}, df,
                             preequilibration=Preequilibration(parameters={"L": 0.0})
                             if pre else None)


def measure(n, pre, repeats):
    t0 = time.perf_counter()
    P = chain(n, pre)
    t1 = time.perf_counter()
    dm = DiscreteModel(P, "adams_pc", 4, steps_per_interval=5)
    t2 = time.perf_counter()
    dm.gradient(P.u0)
    t3 = time.perf_counter()
    dm.hessian(P.u0, "soa")
    t4 = time.perf_counter()
    later = []
    for k in range(repeats):
        u = P.u0 * (1 + 0.01 * (k + 1))
        s = time.perf_counter()
        dm.hessian(u, "soa")
        later.append(time.perf_counter() - s)
    return dict(problem=t1 - t0, model=t2 - t1, gradient=t3 - t2, first_hessian=t4 - t3,
                hessian=float(np.median(later)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    out = {}
    for pre in (False, True):
        r = measure(args.n, pre, args.repeats)
        out[pre] = r
        print(f"preequilibration={pre} " + " ".join(f"{k}_s={v:.3f}" for k, v in r.items()),
              flush=True)
    print(f"preequilibration_cost: n={args.n} "
          f"problem_ratio={out[True]['problem'] / out[False]['problem']:.2f} "
          f"first_hessian_s={out[True]['first_hessian']:.2f} "
          f"first_hessian_plain_s={out[False]['first_hessian']:.2f} "
          f"hessian_ratio={out[True]['hessian'] / out[False]['hessian']:.2f}")


if __name__ == "__main__":
    main()
