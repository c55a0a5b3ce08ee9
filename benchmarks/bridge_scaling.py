"""Scaling of the Pyomo → cyipopt bridge on a Lotka–Volterra trapezoid NLP.

Model [AT, eq. (18) with the classical p4·x1·x2 term]::

    x1' = -p1 x1 + p2 x1 x2,    x2' = p3 x2 - p4 x1 x2,   x(0) = (0.4, 1)

discretized by the trapezoid rule on N uniform steps over [0, 10], with
least-squares data at t = 1..10 simulated from p = (1, 1, 1, 1) plus fixed
noise; parameters start at 0.8 and the states on the trajectory of that guess.  For each N the script prints the Pyomo build time, the evaluator set-up
time, the time spent in function evaluations, the wall time inside Ipopt and
the iteration count.  Targets at N = 1e5: eval_s <= 0.25 * ipopt_s and
setup_s <= build_s.

Usage: python benchmarks/bridge_scaling.py [N ...]
The last line is ``bridge_scaling: N=... setup_s=... eval_s=... ipopt_s=... iters=...``.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pyomo.environ as pyo

import pyomo_odeest  # noqa: F401  (registers the solver)
from pyomo_odeest import PyomoNLPEvaluator, solve_with_ipopt

T = 10.0


def lv_rhs(x1, x2, p):
    return (-p[1] * x1 + p[2] * x1 * x2, p[3] * x2 - p[4] * x1 * x2)


P_TRUE = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
P_START = {1: 0.8, 2: 0.8, 3: 0.8, 4: 0.8}


def simulate(p, times):
    from scipy.integrate import solve_ivp
    sol = solve_ivp(lambda t, x: lv_rhs(x[0], x[1], p), (0, T), [0.4, 1.0], t_eval=times,
                    rtol=1e-10, atol=1e-12)
    return sol.y.T


def synthetic_data(seed=0):
    rng = np.random.default_rng(seed)
    y = simulate(P_TRUE, np.arange(1, 11))
    return y + rng.normal(0.0, np.sqrt(0.05), y.shape)


def build(N, data):
    h = T / N
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, N)
    m.S = pyo.RangeSet(0, N - 1)
    m.p = pyo.Var([1, 2, 3, 4], initialize=P_START)
    # states start on the trajectory of the initial parameter guess
    x_init = simulate(P_START, np.linspace(0.0, T, N + 1))
    m.x1 = pyo.Var(m.I, initialize=dict(enumerate(x_init[:, 0])))
    m.x2 = pyo.Var(m.I, initialize=dict(enumerate(x_init[:, 1])))
    m.x1[0].fix(0.4)
    m.x2[0].fix(1.0)
    f1 = lambda i: -m.p[1] * m.x1[i] + m.p[2] * m.x1[i] * m.x2[i]
    f2 = lambda i: m.p[3] * m.x2[i] - m.p[4] * m.x1[i] * m.x2[i]
    m.c1 = pyo.Constraint(m.S, rule=lambda m, i: m.x1[i + 1] == m.x1[i] + h / 2 * (f1(i) + f1(i + 1)))
    m.c2 = pyo.Constraint(m.S, rule=lambda m, i: m.x2[i + 1] == m.x2[i] + h / 2 * (f2(i) + f2(i + 1)))
    idx = [int(round(t / h)) for t in range(1, 11)]
    m.obj = pyo.Objective(expr=sum((m.x1[i] - d[0]) ** 2 + (m.x2[i] - d[1]) ** 2
                                   for i, d in zip(idx, data)))
    return m


def run(N, data):
    t = time.perf_counter()
    m = build(N, data)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    ev = PyomoNLPEvaluator(m)
    setup_s = time.perf_counter() - t
    r = solve_with_ipopt(ev, options={"tol": 1e-8})
    p = r.x[[ev.column(m.p[k]) for k in (1, 2, 3, 4)]]
    return dict(N=N, build_s=build_s, setup_s=setup_s, eval_s=r.eval_s, ipopt_s=r.ipopt_s,
                iters=r.iterations, status=r.status_name, n=ev.n, m=ev.m, p=p,
                obj=r.obj)


def main(argv):
    Ns = [int(a) for a in argv] or [1000, 10000, 100000]
    data = synthetic_data()
    print(f"{'N':>8} {'n':>8} {'build_s':>8} {'setup_s':>8} {'eval_s':>8} {'ipopt_s':>8} "
          f"{'eval/ipopt':>10} {'setup/build':>11} {'iters':>6}  status")
    last = None
    for N in Ns:
        r = run(N, data)
        print(f"{N:>8} {r['n']:>8} {r['build_s']:8.3f} {r['setup_s']:8.3f} {r['eval_s']:8.3f} "
              f"{r['ipopt_s']:8.3f} {r['eval_s'] / r['ipopt_s']:10.3f} "
              f"{r['setup_s'] / r['build_s']:11.3f} {r['iters']:>6}  {r['status']}  obj={r['obj']:.6g}",
              flush=True)
        last = r
    print(f"bridge_scaling: N={last['N']} setup_s={last['setup_s']:.3f} eval_s={last['eval_s']:.3f} "
          f"ipopt_s={last['ipopt_s']:.3f} iters={last['iters']} build_s={last['build_s']:.3f} "
          f"eval_ratio={last['eval_s'] / last['ipopt_s']:.3f} "
          f"setup_ratio={last['setup_s'] / last['build_s']:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
