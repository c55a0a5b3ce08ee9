r"""The approaches on three experiments with measured feeds, from a good and a poor start.

Problem: :func:`pyomo_odeest.models.fed_batch_problem` (fed-batch series reaction
A -> B -> C, three experiments each with its own piecewise feed F(t), 20
measurement times, σ = 0.01): A and B measured from the start (0.3, 1.0),
only B from the poor start (6, 0.03) (true (0.8, 0.3)).  Each approach runs
with its defaults (Adams PC, the default grid); the simultaneous block with
its default start (each experiment's states simulated at the start values,
``init='auto'``) and with the states taken from the data (``init='data'``).

Usage: ``python benchmarks/multi_experiment_start.py``.  Last line::

    multi_experiment_start: sim_over_reduced_good=... sim_over_reduced_poor=... all_success=...
"""
from __future__ import annotations

import time

from pyomo_odeest import estimate
from pyomo_odeest.models import fed_batch_problem

CASES = {"good": ((0.3, 1.0), ("A", "B")), "poor": ((6.0, 0.03), ("B",))}
RUNS = [("simultaneous", {}), ("simultaneous", {"init": "data"}), ("reduced_space", {}),
        ("multiple_shooting", {})]


def main():
    times, ok = {}, True
    for case, (start, observed) in CASES.items():
        P = fed_batch_problem(start, observed, sigma=0.01)
        for approach, kw in RUNS:
            t = time.perf_counter()
            r = estimate(P, approach, **kw)
            s = time.perf_counter() - t
            label = approach + (f"[init={kw['init']}]" if kw else "")
            times[case, label] = s
            ok &= bool(r.success)
            print(f"{case:5s} {label:28s} {r.status:28s} iterations={r.iterations:4d} "
                  f"seconds={s:7.2f} k1={r.x[0]:.6f} k2={r.x[1]:.6f}", flush=True)
    ratio = {c: times[c, "simultaneous"] / times[c, "reduced_space"] for c in CASES}
    print(f"multi_experiment_start: sim_over_reduced_good={ratio['good']:.2f} "
          f"sim_over_reduced_poor={ratio['poor']:.2f} all_success={ok}")


if __name__ == "__main__":
    main()
