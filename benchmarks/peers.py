"""The same NLP in pyomo_odeest and in CasADi (SX with expand, MX).

Lotka–Volterra [AT] with both states measured at t = 1..10, N trapezoid steps
(``adams_moulton`` with ``qmax=2`` here; the same equations
``x_{i+1} = x_i + h/2 (f(x_i) + f(x_{i+1}))`` written with CasADi), states
unbounded, the same start point (our simulated initialization, handed to
CasADi), Ipopt with ``tol=1e-8`` on both sides (CasADi brings its own Ipopt
and MUMPS).  Every run is a fresh subprocess; runs are interleaved
(ours, SX, MX, ours, ...) and the minimum per method is kept.  CPU seconds are
the child's user+system time, wall seconds its elapsed time; memory is the
child's peak resident set (``ru_maxrss``).

    pip install -e ".[bench]"        # casadi
    python benchmarks/peers.py [N ...] [--repeats R]

The last line reads ``peers: N=<largest> ours_over_sx=<cpu ratio>
ours_over_mx=<cpu ratio> build_over_solve=<ours: build+initialization+set-up
over Ipopt> bytes_per_var=<ours: peak resident memory above the process after its
imports, per NLP variable>``; the line before it gives the whole peak per
variable, imports included.  ``bytes_per_var`` is ``(ru_maxrss at the end -
ru_maxrss after importing pyomo_odeest's simultaneous approach and cyipopt) /
(2 (N + 1) + 4)``: everything the estimate holds at its peak (Pyomo block,
initial simulation, evaluator, Ipopt and MUMPS, malloc's unreturned pages), in
bytes per NLP variable.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def run_ours(n):
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.approaches.simultaneous import estimate_simultaneous
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    res = estimate_simultaneous(prob, "adams_moulton", 2, steps_per_interval=n // 10,
                                options={"tol": 1e-8, "print_level": 0})
    t = res.timings
    nvar = (n + 1) * 2 + 4
    return dict(obj=res.objective, u=res.x.tolist(), iters=res.iterations, status=res.status,
                pre_s=t["build_s"] + t["setup_s"], solve_s=t["solve_s"], nvar=nvar)


def run_casadi(n, expand):
    import casadi as ca
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.discretization.grid import resolve_grid
    from pyomo_odeest.approaches.simultaneous import simulate
    from pyomo_odeest.problem.misfit import misfit_constant
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    grid = resolve_grid(prob, None, None, n // 10)
    t = np.asarray(grid.t)
    X0 = simulate(prob, "adams_moulton", t, prob.u0)     # the start point ours uses
    c0 = time.perf_counter()
    xa, xb, p, h = ca.MX.sym("xa", 2), ca.MX.sym("xb", 2), ca.MX.sym("p", 4), ca.MX.sym("h")

    def f(x):
        return ca.vertcat(-p[0] * x[0] + p[1] * x[0] * x[1], p[2] * x[1] - p[3] * x[0] * x[1])
    step = ca.Function("step", [xa, xb, p, h], [xb - xa - h / 2 * (f(xa) + f(xb))])
    P = ca.MX.sym("P", 4)
    X = ca.MX.sym("X", 2, n + 1)
    G = step.map(n)(X[:, :-1], X[:, 1:], ca.repmat(P, 1, n), ca.DM(np.diff(t)).T)
    J = np.asarray(grid.J)
    Z = prob.data[["x1", "x2"]].to_numpy().T
    obj = ca.sumsqr(X[:, J.tolist()] - ca.DM(Z))
    g = ca.vertcat(X[:, 0] - ca.DM([0.4, 1.0]), ca.vec(G))
    nlp = {"x": ca.vertcat(P, ca.vec(X)), "f": obj, "g": g}
    solver = ca.nlpsol("s", "ipopt", nlp, {"expand": expand, "print_time": False,
                                            "ipopt": {"tol": 1e-8, "print_level": 0}})
    build = time.perf_counter() - c0
    w0 = np.concatenate([prob.u0, X0.T.ravel(order="F")])
    c1 = time.perf_counter()
    sol = solver(x0=w0, lbg=0, ubg=0)
    solve = time.perf_counter() - c1
    st = solver.stats()
    return dict(obj=float(sol["f"]) + misfit_constant(prob), u=np.asarray(sol["x"])[:4, 0].tolist(),
                iters=st["iter_count"], status=st["return_status"], pre_s=build, solve_s=solve,
                nvar=(n + 1) * 2 + 4)


def child(method, n):
    w0 = time.perf_counter()
    import pyomo_odeest.approaches.simultaneous  # noqa: F401  (imports before the baseline)
    if method == "ours":
        import cyipopt  # noqa: F401  (imported lazily by the solve: an import, not NLP memory)
    else:
        import casadi  # noqa: F401
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = run_ours(n) if method == "ours" else run_casadi(n, expand=(method == "sx"))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.update(cpu_s=ru.ru_utime + ru.ru_stime, wall_s=time.perf_counter() - w0,
               maxrss=ru.ru_maxrss * 1024, base_rss=base)
    print("RESULT " + json.dumps(out))


def spawn(method, n):
    p = subprocess.run([sys.executable, __file__, "--child", method, str(n)],
                       capture_output=True, text=True, env=dict(os.environ))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{method} N={n} failed:\n{p.stderr[-2000:]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--methods", nargs="*", default=["ours", "sx", "mx"])
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]))
    print("CPU/wall seconds of a fresh process each (import, build, initialization, solve); "
          f"{os.cpu_count()} cores, shared; minimum of {args.repeats} interleaved runs")
    print(f"{'N':>8} {'method':>6} {'cpu_s':>8} {'wall_s':>8} {'build_s':>8} {'ipopt_s':>8} "
          f"{'iters':>5} {'objective':>14} {'MB':>7}")
    best = {}
    for n in args.sizes:
        for _ in range(args.repeats):
            for meth in args.methods:
                r = spawn(meth, n)
                if (n, meth) not in best or r["cpu_s"] < best[(n, meth)]["cpu_s"]:
                    best[(n, meth)] = r
        objs = [best[(n, m)]["obj"] for m in args.methods]
        for meth in args.methods:
            r = best[(n, meth)]
            print(f"{n:>8} {meth:>6} {r['cpu_s']:8.2f} {r['wall_s']:8.2f} {r['pre_s']:8.2f} "
                  f"{r['solve_s']:8.2f} {r['iters']:>5} {r['obj']:14.10f} {r['maxrss'] / 1e6:7.0f}",
                  flush=True)
        print(f"{n:>8} max objective difference {max(objs) - min(objs):.2e}")
    n = args.sizes[-1]
    o = best.get((n, "ours"))
    parts = [f"peers: N={n}"]
    for m in ("sx", "mx"):
        if o and (n, m) in best:
            parts.append(f"ours_over_{m}={o['cpu_s'] / best[(n, m)]['cpu_s']:.3f}")
    if o:
        print(f"ours at N={n}: peak {o['maxrss'] / 1e6:.0f} MB, "
              f"{o['maxrss'] / o['nvar']:.0f} bytes per variable with the imports")
        parts.append(f"build_over_solve={o['pre_s'] / o['solve_s']:.3f}")
        parts.append(f"bytes_per_var={(o['maxrss'] - o['base_rss']) / o['nvar']:.0f}")
    print(" ".join(parts))


if __name__ == "__main__":
    main()
