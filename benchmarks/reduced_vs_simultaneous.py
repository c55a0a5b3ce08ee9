"""Reduced space against the simultaneous approach on Lotka–Volterra, end to end.

The [AT] Lotka–Volterra problem (both states measured at t = 1..10) from the
start p = (0.9, 0.9, 0.9, 0.9), the default scheme (Adams PC) with 10, 100 and
1000 steps per measurement interval, both approaches with their defaults
(Ipopt; the reduced space with the discrete adjoint gradient and the
second-order-adjoint Hessian), in one process, one run each.  Times are wall
seconds around the whole ``estimate_*`` call (model build, solve and the
post-solve checks of the result).

Before the timed runs both approaches solve the problem once at 2 steps per
interval, untimed, so imports, Pyomo's first-use costs and the loading of the
reduced space's compiled kernels are not charged to either side; that
warm-up's time for the reduced space and the kernel build time are printed
separately.  ``--cold`` points the kernel and numba caches at fresh temporary
directories, so the warm-up includes the compilation a first use on a new
machine pays.  ``--engine numpy`` runs the reduced space on its numpy engine
(the fallback without numba) instead; ``--sizes`` picks the steps per interval; ``--per-call`` also
times one simulation, gradient and Hessian on both engines at the largest size.

    python benchmarks/reduced_vs_simultaneous.py [--cold] [--engine numba|numpy] [--sizes 10 100 1000] [--per-call]

The last line reads ``reduced_vs_simultaneous: ratio_100=... ratio_1000=...
max_estimate_diff=...`` (ratio = reduced time / simultaneous time; the largest
absolute difference of the estimates over all sizes).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--engine", choices=("auto", "numba", "numpy"), default="auto")
    ap.add_argument("--cold", action="store_true",
                    help="compile the kernels afresh (temporary caches)")
    ap.add_argument("--per-call", action="store_true",
                    help="also time one simulation, gradient and Hessian on both engines "
                         "at the largest size")
    args = ap.parse_args(argv)
    if args.cold:
        os.environ["PYOMO_ODEEST_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="odeest_kernels_")
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="odeest_numba_")

    from pyomo_odeest.approaches._reduced import discrete_model, estimate_reduced
    from pyomo_odeest.approaches._simultaneous import estimate_simultaneous
    from pyomo_odeest.discretization.discrete import _compiled
    from pyomo_odeest.models import lotka_volterra_problem

    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))

    def reduced(spi):
        dm = discrete_model(prob, steps_per_interval=spi)
        if args.engine != "auto":
            dm = type(dm)(prob, steps_per_interval=spi, engine=args.engine)
        return estimate_reduced(prob, model=dm), dm.engine

    t0 = time.perf_counter()
    estimate_simultaneous(prob, steps_per_interval=2)
    warm_sim = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, engine = reduced(2)
    if args.engine != "numpy" and _compiled.numba_available():
        # load (or compile) the kernels the larger sizes run: engine 'auto' keeps
        # numpy below AUTO_MIN_BLOCKS blocks
        from pyomo_odeest.discretization.discrete import DiscreteModel
        dm = DiscreteModel(prob, steps_per_interval=2, engine="numba")
        estimate_reduced(prob, model=dm)
        engine = dm.engine
    warm_red = time.perf_counter() - t0
    print(f"warm-up at 2 steps/interval: simultaneous {warm_sim:.2f} s, reduced {warm_red:.2f} s "
          f"(engine {engine}; kernel build/load {sum(_compiled.COMPILE_SECONDS.values()):.2f} s"
          f"{', cold caches' if args.cold else ''})")
    print(f"{'steps':>6} {'sim_s':>8} {'red_s':>8} {'ratio':>6} {'sim_it':>6} {'red_it':>6} "
          f"{'max|du|':>9}  red_sim/grad/hess  engine")
    ratios, diffs = {}, []
    for spi in args.sizes:
        t0 = time.perf_counter()
        rs = estimate_simultaneous(prob, steps_per_interval=spi)
        ts = time.perf_counter() - t0
        t0 = time.perf_counter()
        rr, engine = reduced(spi)
        tr = time.perf_counter() - t0
        if not (rs.success and rr.success):
            print(f"  not converged: simultaneous {rs.status}, reduced {rr.status}")
        d = float(np.max(np.abs(rr.estimates.values - rs.estimates.values)))
        diffs.append(d)
        ratios[spi] = tr / ts
        ev = rr.evaluations
        print(f"{spi:>6} {ts:>8.2f} {tr:>8.2f} {tr / ts:>6.2f} {rs.iterations:>6} "
              f"{rr.iterations:>6} {d:>9.2e}  {ev['simulations']}/{ev['gradients']}/{ev['hessians']}"
              f"  {engine}")
        sys.stdout.flush()
    if args.per_call:
        per_call(prob, max(args.sizes))
    r100 = f"{ratios[100]:.3f}" if 100 in ratios else "nan"
    r1000 = f"{ratios[1000]:.3f}" if 1000 in ratios else "nan"
    print(f"reduced_vs_simultaneous: ratio_100={r100} ratio_1000={r1000} "
          f"max_estimate_diff={max(diffs):.3g}")


def per_call(prob, spi):
    """Seconds of one simulation, adjoint gradient (trajectory given) and second-order
    adjoint Hessian (from scratch) at ``spi`` steps per interval, numpy against numba
    (the best of three calls each, after one untimed call)."""
    from pyomo_odeest.discretization.discrete import DiscreteModel
    u = np.array([1.0, 1.0, 1.0, 1.0])
    rows = {}
    for engine in ("numpy", "numba"):
        dm = DiscreteModel(prob, steps_per_interval=spi, engine=engine)
        traj = dm.simulate(u)
        calls = {"simulate": lambda: dm.simulate(u),
                 "gradient": lambda: dm.gradient(u, "adjoint", traj),
                 "hessian": lambda: dm.hessian(u, "soa")}
        for name, fn in calls.items():
            fn()
            best = np.inf
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            rows.setdefault(name, {})[engine] = best
    print(f"per call at {spi} steps/interval ({dm.nblocks} blocks): "
          + ", ".join(f"{k} {v['numpy'] * 1e3:.1f} ms -> {v['numba'] * 1e3:.2f} ms "
                      f"(x{v['numpy'] / v['numba']:.0f})" for k, v in rows.items()))


if __name__ == "__main__":
    main()
