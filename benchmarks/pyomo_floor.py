"""The least memory a Pyomo model needs per NLP variable.

    python benchmarks/pyomo_floor.py [N]

A ``ConcreteModel`` with N scalar variables ``x[i]`` (initialized) and the
simplest equality row per variable, ``x[i+1] - x[i] == 0`` (a linear
two-term expression): resident memory per variable and per row, measured
after each component is built.  A block that states an ODE discretization
has at least one variable and one row per NLP variable, so the sum is a
floor for the block's share of the peak memory of a simultaneous solve
(``benchmarks/setup_phases.py --memory`` reports the block of
``adams_pc``; ``docs/performance.md``).

Last line: ``pyomo_floor: N=... var_bytes=... row_bytes=... floor_bytes_per_var=...``
"""
from __future__ import annotations

import gc
import os
import sys

import pyomo.environ as pyo


def rss():
    """Resident set size in bytes (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    m = pyo.ConcreteModel()
    gc.collect()
    r0 = rss()
    m.I = pyo.RangeSet(0, N - 1)
    m.x = pyo.Var(m.I, initialize=1.0)
    gc.collect()
    r1 = rss()
    m.c = pyo.Constraint(pyo.RangeSet(0, N - 2), rule=lambda m, i: m.x[i + 1] - m.x[i] == 0)
    gc.collect()
    r2 = rss()
    var_b, row_b = (r1 - r0) / N, (r2 - r1) / (N - 1)
    print(f"pyomo_floor: N={N} var_bytes={var_b:.0f} row_bytes={row_b:.0f} "
          f"floor_bytes_per_var={var_b + row_b:.0f}")


if __name__ == "__main__":
    main()
