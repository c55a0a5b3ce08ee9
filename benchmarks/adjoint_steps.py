"""Why the continuous adjoint needs many parameters to beat forward sensitivities.

Problem: [MHV]'s diagonal linear model (eqs. (24)–(27)) with p parameters and
11 observation times on [0, 100] (``benchmarks/mhv_figures.py`` times the
gradients; this script counts what they cost).  For SciPy's BDF, LSODA and
Radau (rtol 1e-8, atol 1e-10, as in ``mhv_figures.py``) it reports

* the accepted steps of the forward solve, of the forward-sensitivity solve
  and of the adjoint's backward sweep (one solve per interval between
  measurement times, restarted after each jump of λ);
* the share of the backward steps taken before the step size first
  reaches the median step of its interval (the ramp-up after each restart:
  BDF starts at order 1 with a step of about 1e-5; Radau, a one-step
  method, has no order to ramp up);
* CPU seconds of one forward solve, the adjoint's backward sweep (forward
  trajectory given) and the sensitivity gradient, medians of ``--repeats``
  interleaved repeats;
* the same with compiled stepping: SciPy's ``odeint`` (Fortran LSODA, the
  whole integration inside Fortran, Python only for the right-hand sides)
  for the sensitivity system and for the backward sweep of [λ, q] with
  q' = -f_u^T λ as extra states; the forward trajectory for the sweep is the
  package's dense output.

Last line: ``adjoint_steps: p=... bdf_backward_over_forward_steps=...
bdf_rampup_share=... lsoda_backward_over_forward_steps=...
radau_backward_over_forward_steps=... compiled_backward_over_sens=...`` (the last: CPU time of the compiled backward
sweep alone over the compiled sensitivity gradient; above 1 means the
adjoint loses at this p whatever the stepping overhead).

Usage: python benchmarks/adjoint_steps.py [--p 12] [--repeats 5]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from scipy.integrate import odeint  # noqa: E402

from pyomo_odeest.discretization.continuous import ContinuousModel  # noqa: E402
from pyomo_odeest.models._diagonal_linear import (diagonal_linear_exact_gradient,  # noqa: E402
                                                 diagonal_linear_problem)

RTOL, ATOL = 1e-8, 1e-10


def _cpu(fn, repeats):
    ts, out = [], None
    for _ in range(repeats):
        t = time.process_time()
        out = fn()
        ts.append(time.process_time() - t)
    return float(np.median(ts)), out


def count_steps(cm, u):
    """Accepted steps of the forward, sensitivity and backward solves (intervals listed)."""
    rec = []
    solve = cm._solve_piece

    def spy(fun, jac, t_span, y0, dense=True, atol=None):
        s = solve(fun, jac, t_span, y0, dense, atol)
        rec.append((t_span, np.asarray(s.t)))
        return s
    cm._solve_piece = spy
    try:
        cm._fwd_key = None
        cm.gradient(u, "adjoint")
        cm.gradient(u, "sensitivity")
    finally:
        cm._solve_piece = solve
    forward, backward, sens = rec[0][1], [r[1] for r in rec[1:-1]], rec[-1][1]
    ramp = []
    for t in backward:
        h = np.abs(np.diff(t))
        ramp.append(int(np.argmax(h >= np.median(h))))
    return (len(forward) - 1, len(sens) - 1, sum(len(t) - 1 for t in backward),
            len(backward), sum(ramp))


def compiled(cm, u):
    """Gradients with odeint (Fortran LSODA): the sensitivity gradient, and the adjoint's
    backward sweep of [λ, q] on the package's forward dense output."""
    n, p = cm.n, cm.p
    ul = u.tolist()
    sens = cm._sens

    def sens_rhs(y, t):
        fv, A, B = sens(y[:n].tolist(), ul, t)
        return np.concatenate([fv, (A @ y[n:].reshape(n, p) + B).ravel()])

    def sens_gradient():
        y0 = np.concatenate([cm.l.dense(u), cm.l_u.dense(u).ravel()])
        Y = odeint(sens_rhs, y0, cm.tau, rtol=RTOL, atol=ATOL, mxstep=10**6)
        Fx, Fu = cm.misfit.gradients(Y[:, :n], u)
        return np.einsum("jnk,jn->k", Y[:, n:].reshape(len(cm.tau), n, p), Fx) + Fu

    sol, Xm = cm._forward(u)
    xs = sol.sol
    adj_x, adj_u = cm._adj_x, cm._adj_u

    def back_rhs(y, t):
        x = xs(t).tolist()
        lam = y[:n].tolist()
        return -np.concatenate([adj_x.dense(x, ul, t, lam), adj_u.dense(x, ul, t, lam)])

    def backward():
        jumps, gu = cm.misfit.gradients(Xm, u)
        y, t_hi = np.zeros(n + p), cm.T
        for j in range(len(cm.tau) - 1, -1, -1):
            if cm.tau[j] < t_hi:
                y = odeint(back_rhs, y, [t_hi, cm.tau[j]], rtol=RTOL, atol=ATOL,
                           mxstep=10**6)[-1].copy()
            y[:n] += jumps[j]
            t_hi = cm.tau[j]
        return cm.l_u.dense(u).T @ y[:n] + y[n:] + gu
    return sens_gradient, backward


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    p = args.p
    prob = diagonal_linear_problem(p, n_obs=11, seed=1000 * p + 7 * 11)
    u = np.asarray(prob.true_values, dtype=float)
    exact = diagonal_linear_exact_gradient(u, prob)
    print(f"diagonal linear model, p = n = {p}, 11 observation times, rtol={RTOL:g}, "
          f"atol={ATOL:g}; CPU seconds, medians of {args.repeats}; load average "
          f"{os.getloadavg()[0]:.1f}")
    ratio = {}
    for method in ("BDF", "LSODA", "Radau"):
        cm = ContinuousModel(prob, method=method, rtol=RTOL, atol=ATOL)
        cm.gradient(prob.u0, "adjoint")
        cm.gradient(prob.u0, "sensitivity", index=[0])
        fw, se, bw, nseg, ramp = count_steps(cm, u)
        ratio[method] = (bw / fw, ramp / bw)
        t_fwd, _ = _cpu(lambda: (setattr(cm, "_fwd_key", None), cm._forward(u)), args.repeats)
        cm._forward(u)
        t_back, g = _cpu(lambda: cm.gradient(u, "adjoint"), args.repeats)
        t_sens, _ = _cpu(lambda: cm.gradient(u, "sensitivity"), args.repeats)
        err = float(np.linalg.norm(g - exact) / np.linalg.norm(exact))
        print(f"{method:5s}: steps forward {fw}, sensitivity {se}, adjoint backward {bw} in "
              f"{nseg} restarted intervals ({ramp} = {100 * ramp / bw:.0f} % before the step "
              f"reaches its interval's median); CPU forward {t_fwd:.4f}, backward sweep "
              f"{t_back:.4f}, sensitivity gradient {t_sens:.4f}; adjoint error {err:.1e}")
    cm = ContinuousModel(prob, method="LSODA", rtol=RTOL, atol=ATOL)
    sens_gradient, backward = compiled(cm, u)
    sens_gradient(), backward()
    t_cs, gs = _cpu(sens_gradient, args.repeats)
    t_cb, gb = _cpu(backward, args.repeats)
    print(f"odeint (Fortran LSODA): sensitivity gradient {t_cs:.4f}, adjoint backward sweep "
          f"alone {t_cb:.4f} (errors {np.linalg.norm(gs - exact) / np.linalg.norm(exact):.1e}, "
          f"{np.linalg.norm(gb - exact) / np.linalg.norm(exact):.1e})")
    print(f"adjoint_steps: p={p} bdf_backward_over_forward_steps={ratio['BDF'][0]:.2f} "
          f"bdf_rampup_share={ratio['BDF'][1]:.2f} "
          f"lsoda_backward_over_forward_steps={ratio['LSODA'][0]:.2f} "
          f"radau_backward_over_forward_steps={ratio['Radau'][0]:.2f} "
          f"compiled_backward_over_sens={t_cb / t_cs:.2f}")


if __name__ == "__main__":
    main()
