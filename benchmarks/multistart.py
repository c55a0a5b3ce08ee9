r"""64 starts of a problem with spurious local minima, on 1 and on 2 Dask workers.

Problem: the harmonic oscillator :math:`\ddot x = -\omega^2 x`, x(0) = 1,
:math:`x_1 = \cos\omega t` measured at 20 times in (0, 10] with σ = 0.05
(``pyomo_odeest.models._oscillator``), ω estimated by the simultaneous block.
Its misfit has local minima besides ω ≈ 1 (ω ≈ 0.244, 1.741, 2.972, 4.2, ...):
the table of minima printed below shows them with their χ² verdict.

Starts: a scrambled Sobol design of 64 points in log ω ∈ [0.2, 5].  The same
tasks (same seeds) run on a LocalCluster with 1 worker process and with 2;
both runs must give the same table.  Also measured: worker start-up (cluster
plus importing the package), the Dask overhead per task (64 trivial tasks)
and the serialized size of a task.

Usage: ``python benchmarks/multistart.py [n_starts]``.  Last line::

    multistart: starts=64 workers=2 speedup=... best_obj=... hits=... spurious_flagged=...
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np
import pandas as pd

from pyomo_odeest.models import oscillator_problem
from pyomo_odeest.runner import Runner, Task, estimate_task, multistart, shared

BOUNDS = {"omega": (0.2, 5.0)}


def _import_package():
    import pyomo_odeest  # noqa: F401
    return os.getpid()


def measure(n_workers, prob, n):
    t0 = time.perf_counter()
    with Runner(n_workers=n_workers, progress=False) as rn:
        rn.client.run(_import_package)
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        trivial = rn.map(abs, list(range(-n, 0)))
        per_task = (time.perf_counter() - t1) / n
        assert trivial.table["success"].all()
        t2 = time.perf_counter()
        ms = multistart(prob, n=n, runner=rn, bounds=BOUNDS, seed=2026)
        wall = time.perf_counter() - t2
    return dict(startup=startup, per_task=per_task, wall=wall, ms=ms)


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 64
    warnings.simplefilter("ignore", RuntimeWarning)
    pd.set_option("display.width", 160)
    prob = oscillator_problem()
    import cloudpickle
    task = Task(estimate_task, (shared(prob), "simultaneous", np.array([1.0]), None))
    t = time.perf_counter()
    blob = cloudpickle.dumps(task)
    ser = time.perf_counter() - t
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    print(f"one task serialized: {len(blob)} bytes in {1e3 * ser:.2f} ms "
          f"(the problem itself: {len(shared(prob).payload)} bytes, rebuilt once per worker)")

    res = {w: measure(w, prob, n) for w in (1, 2)}
    for w, r in res.items():
        busy = r["ms"].table["wall_s"].sum()
        print(f"{w} worker(s): start-up {r['startup']:.1f} s, Dask overhead per trivial task "
              f"{1e3 * r['per_task']:.1f} ms, {n} estimations {r['wall']:.1f} s wall "
              f"({busy:.1f} s inside tasks, mean {busy / n:.2f} s)")
    drop = ["wall_s", "worker"]
    pd.testing.assert_frame_equal(res[1]["ms"].table.drop(columns=drop),
                                  res[2]["ms"].table.drop(columns=drop), check_exact=True)
    print("1-worker and 2-worker tables are identical (same seeds), apart from times and workers")

    ms = res[2]["ms"]
    tab = ms.table
    flagged = tab["warnings"].fillna("").str.contains("inconsistent with the noise level")
    cl = ms.clusters.copy()
    cl["chi2_flagged"] = [int(flagged[tab["cluster"] == c].sum()) for c in cl.index]
    print("\nminima reached (cluster 0 = best; chi2_flagged = starts whose result carries "
          "the noise-level warning):")
    print(cl.to_string(float_format=lambda v: f"{v:.6g}"))
    print(ms.summary().splitlines()[0])
    spurious = ms.spurious
    at_best_flagged = int(flagged[tab["cluster"] == 0].sum())
    print(f"starts at a spurious minimum: {len(spurious)}, of which flagged: "
          f"{int(flagged[tab['cluster'] > 0].sum())}; flagged at the best minimum: {at_best_flagged}; "
          f"failed: {int((~tab['success'].astype(bool)).sum())}")
    speedup = res[1]["wall"] / res[2]["wall"]
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"multistart: starts={n} workers=2 speedup={speedup:.2f} "
          f"best_obj={ms.best.objective:.6g} hits={ms.hits} spurious_flagged={int(flagged.sum())}")


if __name__ == "__main__":
    main(sys.argv)
