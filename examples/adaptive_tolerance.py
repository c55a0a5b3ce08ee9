"""Adaptive step-length control as a discrete model [GM-grad, §2.4, model (55)].

On the Lotka–Volterra problem (start p = 0.9) this script shows

1. how the accepted grid (k, min/max step, rejections) and the estimates
   change with the tolerance ε = 1e-2 ... 1e-6 (estimates by
   ``estimate_adaptive``, continued from one tolerance to the next);
2. what the gradient gains by including the step-size sensitivities (smooth
   controller, eq. (59)) versus freezing the accepted grid (the fixed-step
   gradient on that grid), both compared with central differences of
   J_{h,k} at points where the accept/reject pattern is unchanged;
3. that J_{h,k}(u) is only piecewise smooth: a scan across pattern changes;
4. Theorem 3: with a constant first step and piecewise-constant factors both
   gradients coincide.

Run:  python examples/adaptive_tolerance.py [--quick]
(``--quick`` or PYOMO_ODEEST_EXAMPLE_QUICK=1: tolerances 1e-2 and 1e-3 only.)
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

from pyomo_odeest.discretization.adaptive import AdaptiveModel, StepController, StepTable
from pyomo_odeest.approaches import estimate_adaptive
from pyomo_odeest.transcription._adaptive_block import compare_block_multipliers
from pyomo_odeest.models import lotka_volterra_problem

warnings.simplefilter("ignore", RuntimeWarning)

#: the error norm of this study (docs/adaptive.md's tables): absolute below 1, where the
#: Lotka-Volterra runs reject trials and change their patterns along p1 (part 3); the
#: controller's default, 0.01, is relative above 0.01
SCALE = 1.0


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def fd_free(am, u, step=1e-6):
    """Central differences of J_{h,k} by free adaptive runs; None if the pattern changes."""
    base = am.run(u).pattern
    g = np.zeros(len(u))
    for a in range(len(u)):
        du = np.zeros(len(u))
        du[a] = step * max(1.0, abs(u[a]))
        rp, rm = am.run(u + du), am.run(u - du)
        if rp.pattern != base or rm.pattern != base:
            return None
        g[a] = (am.objective(run=rp) - am.objective(run=rm)) / (2 * du[a])
    return g


def stable_fd(am, u0):
    for s in range(8):
        u = u0 * (1 + 0.0037 * s)
        g = fd_free(am, u)
        if g is not None:
            return u, g
    raise RuntimeError("no pattern-stable point found")


def main(quick=False):
    prob = lotka_volterra_problem(p0=(0.9,) * 4)
    u0 = prob.u0
    eps_list = (1e-2, 1e-3) if quick else (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)

    print("1. Accepted grid and estimates versus the tolerance (qmax=2, smooth controller)")
    print(f"{'eps':>7} {'k':>5} {'h_min':>8} {'h_max':>8} {'rej':>4} {'rounds':>6} "
          f"{'stable':>6} {'p1':>9} {'p2':>9} {'p3':>9} {'p4':>9} {'J':>10} {'duals':>8} {'s':>5}")
    u = u0
    models, estimates = {}, {}
    for eps in eps_list:
        t0 = time.perf_counter()
        am = AdaptiveModel(prob, StepController(eps=eps, scale=SCALE), qmax=2)
        models[eps] = am
        res = estimate_adaptive(prob, model=am, u0=u, options={"tol": 1e-12}, max_rebuilds=10,
                                trust=0.02, certify=False)    # this eps's discrete optimum
        g = res.extra["grid"]
        d = compare_block_multipliers(res.model)["max"]
        print(f"{eps:7.0e} {g['k']:5d} {g['h_min']:8.2e} {g['h_max']:8.2e} {g['rejected']:4d} "
              f"{len(res.extra['rounds']):6d} {str(res.extra['pattern_stable']):>6} "
              + " ".join(f"{v:9.6f}" for v in res.x)
              + f" {res.objective:10.7f} {d:8.1e} {time.perf_counter() - t0:5.1f}")
        if res.success:
            u = res.x
        estimates[eps] = res.x

    print("\n2. Gradient with step-size sensitivities (59) vs frozen accepted grid, "
          "against central differences of J_{h,k}")
    print(f"{'eps':>7} {'point':>8} {'|g_fd|':>9} {'|g59-g_fd|':>10} {'|gfrz-g_fd|':>11} "
          f"{'rel(59)':>8} {'rel(frozen)':>11}")
    for eps in eps_list:
        am = models[eps]
        for label, base in (("start", u0), ("estimate", estimates[eps])):
            uu, gfd = stable_fd(am, base)
            run = am.run(uu)
            g59 = am.adjoint(run).gradient
            gfz = am.gradient(uu, "frozen_grid", run=run)
            print(f"{eps:7.0e} {label:>8} {np.linalg.norm(gfd):9.2e} "
                  f"{np.linalg.norm(g59 - gfd):10.2e} {np.linalg.norm(gfz - gfd):11.2e} "
                  f"{rel(g59, gfd):8.1e} {rel(gfz, gfd):11.1e}")

    print("\n3. J_{h,k} along p1 (eps=1e-3, other parameters at 0.9): pattern changes and jumps")
    am = models[1e-3]
    ps = np.linspace(0.9, 0.95, 401)
    J, pats, grads = [], [], []
    for p1 in ps:
        uu = u0.copy()
        uu[0] = p1
        run = am.run(uu)
        J.append(am.objective(run=run))
        pats.append(run.pattern)
        grads.append(am.adjoint(run).gradient[0])
    J = np.array(J)
    grads = np.array(grads)
    dp = ps[1] - ps[0]
    changes = [i for i in range(1, len(ps)) if pats[i] != pats[i - 1]]
    jumps = [abs(J[i] - J[i - 1] - 0.5 * (grads[i] + grads[i - 1]) * dp) for i in changes]
    smooth = [abs(J[i] - J[i - 1] - 0.5 * (grads[i] + grads[i - 1]) * dp)
              for i in range(1, len(ps)) if i not in changes]
    print(f"   {len(changes)} pattern changes in p1 in [0.90, 0.95]; jump of J at a change: "
          f"median {np.median(jumps):.2e}, max {np.max(jumps):.2e} "
          f"(|J| = {J.mean():.3f}, |dJ/dp1| ~ {np.abs(grads).mean():.2f}); "
          f"trapezoid defect without change: max {np.max(smooth):.1e}")

    print("\n4. Theorem 3 (h0 = 0.05 constant, tables for R and r), eps=1e-3")
    tab = StepController(eps=1e-3, scale=SCALE, h0=0.05,
                         R=StepTable((0.1, 0.5, 1.0), (2.0, 1.5, 1.0, 0.7)),
                         r=StepTable((2.0, 10.0), (0.7, 0.5, 0.25)))
    for qmax in (2, 3):
        am = AdaptiveModel(prob, tab, qmax=qmax)
        uu, gfd = stable_fd(am, u0)
        run = am.run(uu)
        g59 = am.adjoint(run).gradient
        gfz = am.gradient(uu, "frozen_grid", run=run)
        print(f"   qmax={qmax}: k={run.k}, rejected={run.n_rejected}; rel(g59, g_frozen) = "
              f"{rel(g59, gfz):.1e}, rel(g59, g_fd) = {rel(g59, gfd):.1e}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv or os.environ.get("PYOMO_ODEEST_EXAMPLE_QUICK") == "1")
