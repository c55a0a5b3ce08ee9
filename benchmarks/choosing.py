"""Simultaneous against sequential on engines of the same class: ``compare_approaches``
on [AT]'s Lotka–Volterra problem and on a PEtab problem, the continuous approach on
SUNDIALS CVODES (the compiled engine, when CasADi is installed) and the reduced space
on its compiled sweeps (when numba is installed).

    python benchmarks/choosing.py [--petab tests/data/petab/Bruno_JExpBot2016]
                                  [--steps 10,100] [--quick]

Lotka–Volterra: data and start of ``models.lotka_volterra_problem`` from the benign
start p = 0.8 (from [AT]'s hard start single shooting cannot simulate: see
``python -m pyomo_odeest``); the discrete approaches on the Adams
predictor–corrector (Q_max = 4) with ``--steps`` steps per measurement interval.
PEtab: the problem's nominal point; the discrete approaches on Enright's scheme
with the largest step of ``fit_petab``'s first grid (horizon/300, no more than
the median LSODA step at the start).  Every approach with its defaults.

Prints the tables (approach, engine, objective, status, iterations, wall time;
for the PEtab problem also the NLL by PEtab's independent simulation), and ends with

    choosing: lv_fastest=... lv_spread=... petab_fastest=... petab_spread=... engine=...

``*_spread``: the largest difference of the objectives of the approaches that
converged (the continuous approaches have no discretization error; the discrete
ones differ from them by theirs).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

APPROACHES = ("simultaneous", "reduced_space", "multiple_shooting", "continuous",
              ("continuous_least_squares", "continuous", {"optimizer": "least_squares"}))


def engine_of(res):
    """What runs the approach: the integrator of the continuous approach, the engine of
    the discrete model's simulation and sweeps (reduced space), or the Pyomo block."""
    integ = res.extra.get("integrator")
    if integ:
        return integ.get("name", "")
    if res.approach == "simultaneous":
        return "Ipopt on the Pyomo block"
    if res.approach == "multiple_shooting":
        return "discrete intervals (numpy)"
    dm = getattr(res.backend, "discrete_model", None)
    engine = getattr(dm, "engine", "")
    return f"discrete sweeps ({engine})" if engine else ""


def table_of(problem, approaches, **common):
    from pyomo_odeest.analysis import compare_approaches
    t0 = time.perf_counter()
    table, results = compare_approaches(problem, approaches, progress=False, **common)
    rows = []
    for label, r in table.iterrows():
        res = results.get(label)
        rows.append(dict(approach=label, engine="" if res is None else engine_of(res),
                         objective=r.get("objective", np.nan), status=r["status"],
                         success=bool(r.get("success", False)),
                         iterations=r.get("iterations", np.nan), wall_s=r.get("wall_s", np.nan)))
    return rows, results, time.perf_counter() - t0


def show(rows, extra=None):
    head = f"{'approach':26s} {'objective':>14s} {'iter':>5s} {'wall_s':>8s}  status / engine"
    print(head)
    for r in rows:
        more = "" if extra is None else f" {extra.get(r['approach'], np.nan):14.6f}"
        print(f"{r['approach']:26s} {r['objective']:14.6f} {r['iterations']!s:>5s} "
              f"{r['wall_s']:8.2f}{more}  {str(r['status'])[:40]} / {r['engine']}")


def summary(rows):
    ok = [r for r in rows if r["success"] and np.isfinite(r["objective"])]
    if not ok:
        return "-", float("nan")
    fastest = min(ok, key=lambda r: r["wall_s"])["approach"]
    obj = [r["objective"] for r in ok]
    return fastest, float(max(obj) - min(obj))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--petab", default=os.path.join(HERE, "..", "tests", "data", "petab",
                                                    "Bruno_JExpBot2016"))
    ap.add_argument("--steps", default="10,100")
    ap.add_argument("--quick", action="store_true", help="10 steps per interval, no PEtab")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    import pyomo_odeest  # noqa: F401
    from pyomo_odeest.discretization.continuous import cvodes_available
    from pyomo_odeest.models import lotka_volterra_problem
    engine = "cvodes" if cvodes_available() else "scipy"
    steps = [10] if args.quick else [int(s) for s in args.steps.split(",")]
    lv = None
    for k in steps:
        print(f"\nLotka–Volterra, start p = 0.8, Adams PC Q_max = 4, {k} steps per interval")
        rows, _, wall = table_of(lotka_volterra_problem(p0=(0.8,) * 4), APPROACHES,
                                 scheme="adams_pc", qmax=4, steps_per_interval=k)
        show(rows)
        lv = lv or rows
    petab = None
    if not args.quick:
        from pyomo_odeest.petab_io._fit import first_grid
        from pyomo_odeest.petab_io import petab_problem
        pe = petab_problem(args.petab)
        grid, h = first_grid(pe.problem, argparse.Namespace(grid_points=300, grid="auto"))
        print(f"\n{os.path.basename(os.path.normpath(args.petab))}, nominal start, "
              f"Enright, largest step {h:.3g} (last column: NLL by simulation)")
        on_grid = dict(grid=grid) if grid is not None else dict(max_step=h)
        rows, results, _ = table_of(pe.problem, APPROACHES, scheme="enright", **on_grid)
        sim = {}
        for label, res in results.items():
            try:
                sim[label] = pe.simulated_nll(res)
            except Exception:  # noqa: BLE001 - estimates that cannot be simulated
                sim[label] = float("nan")
        for r in rows:                      # the objective the approaches share: PEtab's NLL
            res = results.get(r["approach"])
            r["objective"] = pe.nll(res.objective) if res is not None else np.nan
        show(rows, sim)
        petab = rows
    lf, ls = summary(lv)
    line = f"choosing: lv_fastest={lf} lv_spread={ls:.2e}"
    if petab is not None:
        pf, ps = summary(petab)
        line += f" petab_fastest={pf} petab_spread={ps:.2e}"
    print(line + f" engine={engine}")


if __name__ == "__main__":
    main()
