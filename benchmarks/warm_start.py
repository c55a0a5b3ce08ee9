"""Ipopt's start from the discrete adjoint: the cold start's bound multipliers and
barrier against the consistent ones.

The simultaneous approach starts Ipopt from the discrete adjoint of its simulated
start (``adjoint_start``, [GM-grad, eq. (52)]).  The bound multipliers and the barrier
parameter that go with it are either the cold start's (``bound_mult_init_val`` = 1 in
the scaled problem, ``mu_init`` = 0.1) or, at a start near stationarity, consistent
with the adjoint (:func:`pyomo_odeest.nlp._cyipopt_adapter.warm_start`, the default;
``WARM_MU_INIT = None`` turns it off).  Both, one after the other, on the shipped problems
from their default starts and from the optimum the first solve finds
(``--from-optimum``: how far Ipopt wanders from a start that is already the answer).

    python benchmarks/warm_start.py [--from-optimum] [--problems NAME ...]

Last line: ``warm_start: problems=N iterations_cold=... iterations_warm=...
converged_cold=... converged_warm=... max_objective_rel_diff=...``
(sums over the problems; the largest relative difference of the objectives where
both converged).
"""
from __future__ import annotations

import argparse
import time
import warnings

import pyomo_odeest as po
from pyomo_odeest import models
from pyomo_odeest.nlp import _cyipopt_adapter as ca

PROBLEMS = {
    "lotka_volterra": models.lotka_volterra_problem,
    "methanol": models.methanol_problem,
    "pinene": models.pinene_problem,
    "seird": lambda: models.seird_problem(models.seird_data(0.05, seed=0)),
    "pk_infusion": models.pk_infusion_problem,
    "gasoil": models.gasoil_problem,
}


def solve(prob, warm, u0=None):
    saved = ca.WARM_MU_INIT
    ca.WARM_MU_INIT = saved if warm else None
    try:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = po.estimate(prob, approach="simultaneous", u0=u0)
        return r, time.perf_counter() - t
    finally:
        ca.WARM_MU_INIT = saved


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-optimum", action="store_true")
    ap.add_argument("--problems", nargs="*", default=list(PROBLEMS), choices=list(PROBLEMS))
    args = ap.parse_args(argv)
    totals = {False: [0, 0], True: [0, 0]}
    diffs = []
    print(f"{'problem':16s} {'start':8s} {'bound mult.':12s} {'status':22s} {'iter':>5s} "
          f"{'objective':>14s} {'s':>7s}")
    for name in args.problems:
        prob = PROBLEMS[name]()
        u0 = None
        if args.from_optimum:
            u0 = solve(prob, True)[0].x
        res = {}
        for warm in (False, True):
            r, secs = solve(prob, warm, u0)
            res[warm] = r
            totals[warm][0] += r.iterations
            totals[warm][1] += int(r.success)
            print(f"{name:16s} {'optimum' if u0 is not None else 'default':8s} "
                  f"{'consistent' if warm else 'cold':12s} {r.status.value:22s} "
                  f"{r.iterations:5d} {r.objective:14.8g} {secs:7.2f}")
        if res[False].success and res[True].success:
            diffs.append(abs(res[True].objective / res[False].objective - 1))
    print(f"warm_start: problems={len(args.problems)} iterations_cold={totals[False][0]} "
          f"iterations_warm={totals[True][0]} converged_cold={totals[False][1]} "
          f"converged_warm={totals[True][1]} "
          f"max_objective_rel_diff={max(diffs) if diffs else float('nan'):.2e}")


if __name__ == "__main__":
    main()
