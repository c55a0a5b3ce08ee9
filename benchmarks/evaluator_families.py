"""The evaluator's callbacks on a model of several experiments: families shared or not.

A simultaneous model of several experiments (or PEtab conditions) holds each
equation of the scheme once per experiment's block.  ``PyomoNLPEvaluator``
evaluates the blocks' rows of one compiled expression as one family
(``_merged_families``); this script builds the model of a PEtab problem
(default: Brannmark's eight conditions, Enright's scheme on the first grid of
``fit_petab``) and times the constraints, the Jacobian and the Hessian of the
same evaluator set-up with the families shared and, for comparison, kept one
per block (the merge turned off), at the same point, best of ``--repeats``.

    python benchmarks/evaluator_families.py [PROBLEM_FOLDER] [--repeats R]

Last line: ``evaluator_families: problem=... n=... families=BEFORE->AFTER
constraints_ratio=... jacobian_ratio=... hessian_ratio=...`` (time per block
over time shared; > 1: sharing is faster).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "data", "petab", "Brannmark_JBC2010")


def model_of(folder):
    """The simultaneous model of ``folder``'s PEtab problem at its nominal point."""
    import pyomo_odeest as po
    from pyomo_odeest.petab_io._fit import FitSettings, first_grid
    pe = po.petab_problem(po.read_petab(folder))
    grid, _ = first_grid(pe.problem, FitSettings())
    res = po.estimate(pe.problem, approach="simultaneous", scheme="enright", grid=grid,
                      certify=False, options={"max_iter": 0})
    return res.backend.model


def best_time(fn, repeats):
    fn()
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def timings(model, merge, repeats):
    from pyomo_odeest.nlp import _evaluator
    saved = _evaluator._merged_families
    if not merge:
        _evaluator._merged_families = lambda fams: fams
    try:
        ev = _evaluator.PyomoNLPEvaluator(model)
    finally:
        _evaluator._merged_families = saved
    x = ev.x0.copy()
    lam = np.random.default_rng(0).standard_normal(ev.m)
    return ev, {"constraints": best_time(lambda: ev.constraints(x), repeats),
                "jacobian": best_time(lambda: ev.jacobian(x), repeats),
                "hessian": best_time(lambda: ev.hessian(x, lam, 1.0), repeats)}, \
        (ev.constraints(x), ev.jacobian(x), ev.hessian(x, lam, 1.0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    model = model_of(args.folder)
    ev0, t0, v0 = timings(model, False, args.repeats)
    ev1, t1, v1 = timings(model, True, args.repeats)
    # the same rows and entries, keyed by the Pyomo objects (the order differs)
    g0 = dict(zip(map(id, ev0.constraint_rows), v0[0]))
    g1 = dict(zip(map(id, ev1.constraint_rows), v1[0]))
    diff = max(abs(g0[k] - g1[k]) for k in g0)
    print(f"{'callback':12s} {'per block [ms]':>15s} {'shared [ms]':>12s} {'ratio':>7s}")
    for k in t0:
        print(f"{k:12s} {1e3 * t0[k]:15.2f} {1e3 * t1[k]:12.2f} {t0[k] / t1[k]:7.2f}")
    print(f"largest difference of a constraint row: {diff:.1e}")
    name = os.path.basename(os.path.normpath(args.folder))
    print(f"evaluator_families: problem={name} n={ev1.n} "
          f"families={len(ev0.con_families)}->{len(ev1.con_families)} "
          + " ".join(f"{k}_ratio={t0[k] / t1[k]:.2f}" for k in t0))
    return 0 if diff <= 1e-12 * max(1.0, max(abs(v) for v in g0.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
