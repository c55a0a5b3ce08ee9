"""Cost of the pyomo.dae front end against pyomo.dae's own transformations.

Times (CPU seconds of this process) of ``TransformationFactory(...).apply_to``
on the Lotka–Volterra pyomo.dae model (two states, four parameters, data at
t = 1..10) for every variant of ``odeest.adams`` / ``odeest.enright`` and for
``dae.finite_difference`` (backward), with N steps.  Repeats are interleaved;
the minimum per method is reported.  Every method is first run once at a small
N (imports, the units registry), untimed.  A method is linear in N when its
time per step stays flat as N grows; the fitted exponent is the slope of
log(time) against log(N) over the sizes given.

    python benchmarks/dae_scaling.py [N ...] [--repeats R]

Last line: ``dae_scaling: N=<largest> ratio_pc=... ratio_moulton=... ratio_enright=...
ratio_semi=... max_exponent=...`` (ratios: our CPU time over pyomo.dae's
backward finite differences at the largest N; ``max_exponent``: the largest
fitted exponent of our four variants).
"""
from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

import pyomo.environ as pyo
from pyomo.dae import ContinuousSet, DerivativeVar

import pyomo_odeest  # noqa: F401  (registers the transformations)
from pyomo_odeest.models import lotka_volterra_data

DATA = lotka_volterra_data(seed=1)
METHODS = {
    "adams_pc": ("odeest.adams", dict(variant="pc")),
    "adams_moulton": ("odeest.adams", dict(variant="moulton")),
    "enright": ("odeest.enright", dict(variant="implicit")),
    "semi_implicit_enright": ("odeest.enright", dict(variant="semi_implicit")),
    "fd_backward": ("dae.finite_difference", dict(scheme="BACKWARD")),
}


def model():
    m = pyo.ConcreteModel()
    m.t = ContinuousSet(initialize=[0.0] + list(DATA.index))
    m.p = pyo.Var([1, 2, 3, 4], initialize=0.8)
    m.x1 = pyo.Var(m.t, initialize=0.5)
    m.x2 = pyo.Var(m.t, initialize=1.0)
    m.dx1 = DerivativeVar(m.x1, wrt=m.t)
    m.dx2 = DerivativeVar(m.x2, wrt=m.t)
    m.ode1 = pyo.Constraint(m.t, rule=lambda m, t: m.dx1[t] == -m.p[1] * m.x1[t] + m.p[2] * m.x1[t] * m.x2[t])
    m.ode2 = pyo.Constraint(m.t, rule=lambda m, t: m.dx2[t] == m.p[3] * m.x2[t] - m.p[4] * m.x1[t] * m.x2[t])
    m.x1[0].fix(0.4)
    m.x2[0].fix(1.0)
    return m


def transform(method, n):
    name, kw = METHODS[method]
    m = model()
    gc.collect()
    c0 = time.process_time()
    if name == "dae.finite_difference":
        pyo.TransformationFactory(name).apply_to(m, wrt=m.t, nfe=n, **kw)
    else:
        pyo.TransformationFactory(name).apply_to(m, wrt=m.t, steps_per_interval=n // 10, **kw)
    return time.process_time() - c0, len(m.t) - 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10000, 30000, 100000])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    args = ap.parse_args(argv)
    best = {}
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for meth in args.methods:                              # warm-up, untimed
        transform(meth, 100)
    print(f"{'N':>8} {'method':>22} {'cpu_s':>9} {'us/step':>9}")
    for n in args.sizes:
        for _ in range(args.repeats):
            for meth in args.methods:                     # interleaved repeats
                s, steps = transform(meth, n)
                key = (n, meth)
                best[key] = min(best.get(key, float("inf")), s)
        for meth in args.methods:
            s = best[(n, meth)]
            print(f"{n:>8} {meth:>22} {s:9.3f} {1e6 * s / n:9.1f}", flush=True)
    n = args.sizes[-1]
    short = {"adams_pc": "pc", "adams_moulton": "moulton", "enright": "enright",
             "semi_implicit_enright": "semi", "fd_backward": "fd"}
    exps = {}
    if len(args.sizes) > 1:
        for meth in args.methods:
            y = [best[(m_, meth)] for m_ in args.sizes]
            exps[meth] = float(np.polyfit(np.log(args.sizes), np.log(y), 1)[0])
        print("fitted exponents (time ~ N^e): "
              + " ".join(f"{short[m]}={e:.2f}" for m, e in exps.items()))
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ours = [m for m in args.methods if m != "fd_backward"]
    ratios = " ".join(f"ratio_{short[m]}={best[(n, m)] / best[(n, 'fd_backward')]:.3f}"
                      for m in ours if "fd_backward" in args.methods)
    max_exp = max((exps[m] for m in ours if m in exps), default=float("nan"))
    print(f"dae_scaling: N={n} {ratios} max_exponent={max_exp:.2f}")


if __name__ == "__main__":
    main()
