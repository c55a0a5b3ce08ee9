"""Borghans: what lies along the descent from the published (nominal) parameters.

    python benchmarks/borghans_landscape.py [FOLDER] [--max-nfev 200]

1. A Gauss–Newton trust-region fit on the continuous objective (the
   continuous approach with ``optimizer='least_squares'``: SciPy's
   ``least_squares``, ``'trf'``, bounds, residual Jacobian from the forward
   sensitivities [MHV, eq. (8)], LSODA rtol 1e-8) from the nominal point:
   the standard least-squares method of the field's tools.
2. At the point where it stops: the gradient by the continuous adjoint and by
   the forward sensitivities at rtol 1e-8 and 1e-11, and central differences
   of J at steps 1e-3 … 1e-6 (log10 units) of the parameter with the largest
   derivative.  If J is smooth there, the differences converge to the
   derivative as the step shrinks.
3. The continuous approach (Ipopt limited-memory, monotone μ from 1e-5, the
   start kept: bound push 1e-8) from a start perturbed by a uniform ±0.05 on
   the parameters' scales (seed 0), for ``--perturbed-iterations`` iterations.
4. With ``--lbfgs``: the continuous approach with L-BFGS-B (LSODA rtol 1e-8)
   from the nominal point, its status and the NLL by simulation (printed
   before the last line).

Last line::

    borghans_landscape: nominal_nll=... end_nll=... end_status=... end_projected_gradient=...
        adjoint_rel_err_rtol1e-8=... fd_over_derivative=<h=1e-3>,<1e-4>,<1e-5>,<1e-6>
        perturbed_start_nll=... perturbed_end_nll=... perturbed_status=...
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from pyomo_odeest import estimate
from pyomo_odeest.discretization.continuous import ContinuousModel
from pyomo_odeest.nlp import projected_gradient, stationarity_check
from pyomo_odeest.petab_io import petab_problem

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "data", "petab", "Borghans_BiophysChem1997")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT)
    ap.add_argument("--max-nfev", type=int, default=200)
    ap.add_argument("--perturbed-iterations", type=int, default=30)
    ap.add_argument("--lbfgs", action="store_true",
                    help="also L-BFGS-B on the continuous objective from the nominal point")
    args = ap.parse_args()
    pe = petab_problem(args.folder)
    P = pe.problem
    idx = np.flatnonzero(P.free_mask)
    names = [P.parameter_names[i] for i in idx]
    lb = np.array([P.parameters[i].lb for i in idx], dtype=float)
    ub = np.array([P.parameters[i].ub for i in idx], dtype=float)
    u_nom = np.array(P.u0, dtype=float)
    fit = estimate(P, "continuous", optimizer="least_squares", rtol=1e-8, atol=1e-10,
                   scale=False, options=dict(max_nfev=args.max_nfev))
    J0, J_end, u_end = fit.extra["objective_start"], fit.objective, fit.x
    x_end = u_end[idx]
    g_end, models = {}, {}
    for rtol in (1e-8, 1e-11):
        m = models[rtol] = ContinuousModel(P, method="LSODA", rtol=rtol, atol=rtol * 1e-2)
        g_end[rtol] = dict(adjoint=m.gradient(u_end, "adjoint", idx),
                           sensitivity=m.gradient(u_end, "sensitivity", idx))
    ref = g_end[1e-11]["sensitivity"]
    m = models[1e-11]
    # the stationarity rule of the approaches, on the gradient at rtol 1e-11
    stationary = stationarity_check(ref, x_end, lb, ub, m.gradient(u_nom, "sensitivity", idx))
    pg = stationary["projected_gradient"]
    status = "stationary" if pg <= stationary["limit"] else "not_stationary"
    ones = np.ones(len(idx))               # at a bound: a push against it is projected out
    active = (projected_gradient(ones, x_end, lb, ub) == 0) | \
        (projected_gradient(-ones, x_end, lb, ub) == 0)
    adj_err = float(np.max(np.abs(g_end[1e-8]["adjoint"] - ref)) / np.max(np.abs(ref)))
    sens_err = float(np.max(np.abs(g_end[1e-8]["sensitivity"] - ref)) / np.max(np.abs(ref)))
    agree = float(np.max(np.abs(g_end[1e-11]["adjoint"] - ref)) / np.max(np.abs(ref)))
    k = int(np.argmax(np.abs(ref)))
    ratios = []
    for h in (1e-3, 1e-4, 1e-5, 1e-6):
        up, um = u_end.copy(), u_end.copy()
        up[idx[k]] += h
        um[idx[k]] -= h
        ratios.append((m.objective(up) - m.objective(um)) / (2 * h) / ref[k])
    print(f"start: J={J0:.6f} NLL={pe.nll(J0):.4f} (reference {-83.3237191357272:.4f})")
    print(f"trust region: {fit.status} after {fit.evaluations['objective']} residual and "
          f"{fit.iterations} Jacobian evaluations, {fit.timings['solve_s']:.1f} s; "
          f"J={J_end:.6f}, active bounds: {[n for n, a in zip(names, active) if a]}")
    print(f"gradient at the end point: rtol 1e-11 adjoint vs sensitivities {agree:.2g} "
          f"(relative, max norm); at rtol 1e-8 adjoint error {adj_err:.3g}, "
          f"sensitivity error {sens_err:.3g}")
    print(f"dJ/d{names[k]} = {ref[k]:.6g}; central differences / derivative at h = "
          f"1e-3..1e-6: {', '.join(f'{r:.3g}' for r in ratios)}")
    rng = np.random.default_rng(0)
    u_p = np.array(P.u0, dtype=float)
    u_p[idx] = np.clip(u_p[idx] + rng.uniform(-0.05, 0.05, len(idx)), lb, ub)
    res = estimate(P, "continuous", u0=u_p, rtol=1e-8, atol=1e-10, scale=False,
                   options={"max_iter": args.perturbed_iterations, "bound_push": 1e-8,
                            "bound_frac": 1e-8, "obj_scaling_factor": 100.0,
                            "mu_strategy": "monotone", "mu_init": 1e-5})
    p_start, p_end = pe.nll(res.extra["objective_start"]), pe.simulated_nll(res)
    print(f"perturbed start: NLL {p_start:.4f} -> {p_end:.4f} (by simulation) after "
          f"{res.iterations} iterations, {res.status}")
    if args.lbfgs:
        lb_fit = estimate(P, "continuous", optimizer="L-BFGS-B", rtol=1e-8, atol=1e-10)
        print(f"L-BFGS-B from the nominal point: {lb_fit.status} after {lb_fit.iterations} "
              f"iterations, NLL {pe.simulated_nll(lb_fit):.4f} (by simulation), "
              f"success={lb_fit.success}")
    print(f"borghans_landscape: nominal_nll={pe.nll(J0):.6f} end_nll={pe.nll(J_end):.6f} "
          f"end_status={status} end_projected_gradient={pg:.3g} "
          f"adjoint_rel_err_rtol1e-8={adj_err:.3g} "
          f"fd_over_derivative={','.join(f'{r:.3g}' for r in ratios)} "
          f"perturbed_start_nll={p_start:.4f} perturbed_end_nll={p_end:.4f} "
          f"perturbed_status={res.status}")


if __name__ == "__main__":
    main()
