r"""Refinement before convergence: the simultaneous multistart with and without the watch.

Problem: the two-compartment pharmacokinetic model with a one-hour infusion, σ
unknown (``pyomo_odeest.models.pk_infusion_problem``), whose first grid has
minima the ODE does not have away from the data's optimum.  The same Sobol starts
(seed 0, log space) are solved by the simultaneous approach, then by the reduced
space (Ipopt), each with its defaults,
once with ``watch_tol=0`` (the solve runs on its first grid to its end, the
refinement stage after it) and once with the default watch
(``watch_tol=1``: the solve stops where its iterate's fitted values are more
than 1σ off the ODE's, and the stage refines there and solves on).  Every
start has the multistart's per-start time limit and at most 20 s.  Printed per setting: the
statuses, the distinct minima (by simulated objective), the starts the watch
stopped, and the total time; then the Lotka–Volterra demo (whose first grid
resolves the ODE) timed with and without the watch, to show what
the watch costs where it never fires (medians of 10 interleaved pairs, `--pairs`).

Usage: ``python benchmarks/grid_watch.py [--starts N] [--per-start S] [--pairs P]``.  Last line::

    grid_watch: starts=32 converged_off=... converged_on=... failed_off=... failed_on=... time_ratio=... rs_converged_off=... rs_converged_on=... rs_time_ratio=... demo_ratio=...

(the first five fields are the simultaneous approach's, ``rs_`` the reduced space's).
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

import pyomo_odeest as po
from pyomo_odeest.models import lotka_volterra_problem, pk_infusion_problem
from pyomo_odeest.runner import multistart

#: seconds each start may take (besides the multistart's own per-start limit)
PER_START = 20.0


def run(problem, n, watch_tol, approach, per_start=PER_START):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ms = multistart(problem, n=n, approach=approach, seed=0,
                        options=dict(watch_tol=watch_tol, max_wall_time=per_start))
    return ms, time.perf_counter() - t


def demo_times(pairs=10):
    """Median seconds of the Lotka–Volterra demo without and with the watch, the two
    interleaved (``pairs`` of each, after one warm-up solve)."""
    lv = lotka_volterra_problem()
    po.estimate(lv, "simultaneous")                 # warm: the first solve builds caches
    times = {0.0: [], 1.0: []}
    for _ in range(pairs):
        for wt in (0.0, 1.0):
            t = time.perf_counter()
            res = po.estimate(lv, "simultaneous", watch_tol=wt)
            times[wt].append(time.perf_counter() - t)
            assert res.success and "grid_watch" not in res.extra
    return {wt: float(np.median(v)) for wt, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=32)
    ap.add_argument("--per-start", type=float, default=PER_START,
                    help="seconds each start may take (default %(default)s)")
    ap.add_argument("--pairs", type=int, default=10,
                    help="interleaved pairs of demo solves (the demo ratio is their median)")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    pk = pk_infusion_problem()
    out = {}
    for approach in ("simultaneous", "reduced_space"):
        for wt in (0.0, 1.0):
            ms, secs = run(pk, args.starts, wt, approach, args.per_start)
            tab = ms.table
            counts = tab["status"].value_counts().to_dict()
            print(f"\n{approach}, watch_tol={wt:g}: {secs:.1f} s; statuses {counts}")
            print(ms.summary())
            ok = tab["success"].astype(bool)
            out[approach, wt] = dict(secs=secs, converged=int(ok.sum()), failed=int((~ok).sum()))
    demo = demo_times(args.pairs)
    print(f"\nLotka-Volterra demo, median of {args.pairs} interleaved: {demo[0.0]:.3f} s without the "
          f"watch, {demo[1.0]:.3f} s with it")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    sim = {wt: out["simultaneous", wt] for wt in (0.0, 1.0)}
    red = {wt: out["reduced_space", wt] for wt in (0.0, 1.0)}
    print(f"grid_watch: starts={args.starts} converged_off={sim[0.0]['converged']} "
          f"converged_on={sim[1.0]['converged']} failed_off={sim[0.0]['failed']} "
          f"failed_on={sim[1.0]['failed']} "
          f"time_ratio={sim[1.0]['secs'] / sim[0.0]['secs']:.2f} "
          f"rs_converged_off={red[0.0]['converged']} rs_converged_on={red[1.0]['converged']} "
          f"rs_time_ratio={red[1.0]['secs'] / red[0.0]['secs']:.2f} "
          f"demo_ratio={demo[1.0] / demo[0.0]:.2f}")

if __name__ == "__main__":
    main()
