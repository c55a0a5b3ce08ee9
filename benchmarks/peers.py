"""The same NLP in pyomo_odeest and in CasADi (SX with expand, MX).

Lotka–Volterra [AT] with both states measured at t = 1..10, N steps of a
scheme of the package (``--scheme``, ``--qmax``; default the trapezoid,
``adams_moulton`` with ``qmax=2``), written for CasADi from the same step
batches the Pyomo block is rendered from (``casadi_schemes.py``: the same
variables, stage by stage, and the same equations), states unbounded, the
same start point (our simulated initialization, stages included, handed to
CasADi), Ipopt with ``tol=1e-8`` on both sides (CasADi brings its own Ipopt
and MUMPS).  Every run is a fresh subprocess; runs are interleaved
(ours, SX, MX, ours, ...) and the minimum per method is kept.  CPU seconds are
the child's user+system time, wall seconds its elapsed time; memory is the
child's peak resident set (``ru_maxrss``).

    pip install -e ".[bench]"        # casadi
    python benchmarks/peers.py [N ...] [--repeats R] [--scheme NAME --qmax Q]

The last line reads ``peers: N=<largest> [scheme=... qmax=...] ours_over_sx=<cpu ratio>
ours_over_mx=<cpu ratio> build_over_solve=<ours: build+initialization+set-up
over Ipopt> bytes_per_var=<ours: peak resident memory above the process after its
imports, per NLP variable> floor_bytes_per_var=... over_floor=...``; the line before it gives the whole peak per
variable, imports included.  ``bytes_per_var`` is ``(ru_maxrss at the end -
ru_maxrss after the imports) / NLP variables``: everything the estimate holds at
its peak (Pyomo block, initial simulation, evaluator, Ipopt and MUMPS, malloc's
unreturned pages), in bytes per NLP variable.  The imports are pyomo_odeest's
simultaneous approach, cyipopt and what an estimate imports lazily, taken by a
20-step estimate run first (its compiled terms are dropped before the measured
run, which compiles its own), in a run of its own at the largest N: the timed runs
start cold.  Then ``floor_bytes_per_var``, the same quantity's
floor measured in fresh processes (:func:`floor`: Ipopt + MUMPS alone on the same
NLP plus the least Pyomo model with one variable and one row per NLP variable;
``--no-floor`` skips it), and ``over_floor``, the ratio of the two.
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


def run_ours(n, scheme, qmax):
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.approaches._simultaneous import estimate_simultaneous
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    res = estimate_simultaneous(prob, scheme, qmax, steps_per_interval=n // 10,
                                options={"tol": 1e-8, "print_level": 0})
    t = res.timings
    return dict(obj=res.objective, u=res.x.tolist(), iters=res.iterations, status=res.status,
                pre_s=t["build_s"] + t["setup_s"], solve_s=t["solve_s"], nvar=_nvar(scheme, qmax, n))


def _nvar(scheme, qmax, n):
    """NLP variables: 4 parameters, 2 states at N + 1 points, 2 per stage and step."""
    from pyomo_odeest.discretization.schemes import get_scheme
    return 4 + 2 * (n + 1) + 2 * n * (len(get_scheme(scheme, qmax).stage_names) - 1)


def _start_point(prob, scheme, qmax, n, layout):
    """Our block's start point (simulated initialization), in CasADi's layout."""
    import pyomo.environ as pyo
    from pyomo_odeest.transcription import initialize_block
    from pyomo_odeest.transcription._block import build_block
    m = pyo.ConcreteModel()
    b = m.est = build_block(prob, scheme, qmax, steps_per_interval=n // 10)
    initialize_block(b, np.array(prob.u0))
    k = len(b.t) - 1
    parts = []
    for kind, name in layout:
        if kind == "u":
            parts.append([pyo.value(b.u[p]) for p in prob.parameter_names])
        elif kind == "x":
            parts.append([pyo.value(b.x[i, s]) for i in range(k + 1) for s in prob.states])
        else:
            comp = getattr(b, name)
            parts.append([pyo.value(comp[i, s]) for i in range(k) for s in prob.states])
    return np.concatenate(parts), np.asarray(b.t)


def run_casadi(n, expand, scheme, qmax):
    import casadi as ca
    from casadi_schemes import casadi_nlp
    from pyomo_odeest.discretization._grid import resolve_grid
    from pyomo_odeest.discretization.schemes import get_scheme
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.problem._misfit import misfit_constant
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    grid = resolve_grid(prob, None, None, n // 10)
    sch = get_scheme(scheme, qmax)

    def f(x, p):
        return ca.vertcat(-p[0] * x[0] + p[1] * x[0] * x[1], p[2] * x[1] - p[3] * x[0] * x[1])
    c0 = time.perf_counter()
    nlp, layout = casadi_nlp(f, 2, 4, sch, np.asarray(grid.t), [0.4, 1.0], np.asarray(grid.J),
                             prob.data[["x1", "x2"]].to_numpy().T, expand)
    solver = ca.nlpsol("s", "ipopt", nlp, {"expand": expand, "print_time": False,
                                            "ipopt": {"tol": 1e-8, "print_level": 0}})
    build = time.perf_counter() - c0
    w0, t = _start_point(prob, scheme, qmax, n, layout)     # the start point ours uses
    assert np.array_equal(t, np.asarray(grid.t))
    c1 = time.perf_counter()
    sol = solver(x0=w0, lbg=0, ubg=0)
    solve = time.perf_counter() - c1
    st = solver.stats()
    return dict(obj=float(sol["f"]) + misfit_constant(prob), u=np.asarray(sol["x"])[:4, 0].tolist(),
                iters=st["iter_count"], status=st["return_status"], pre_s=build, solve_s=solve,
                nvar=int(nlp["x"].numel()))


def child(method, n, scheme, qmax):
    w0 = time.perf_counter()
    import pyomo_odeest.approaches._simultaneous  # noqa: F401  (imports before the baseline)
    if method in ("ours", "ours-memory"):
        import cyipopt  # noqa: F401  (imported lazily by the solve: an import, not NLP memory)
    else:
        import casadi  # noqa: F401
    if method == "ours-memory":
        # what every estimate imports lazily (sympy's code printers, the models, the
        # post-solve checks): a 20-step estimate first, its compiled terms then dropped
        # so that the measured run compiles its own
        from pyomo_odeest.models import lotka_volterra_problem
        from pyomo_odeest.approaches._simultaneous import estimate_simultaneous
        from pyomo_odeest.nlp import _family
        estimate_simultaneous(lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9)), scheme, qmax,
                              steps_per_interval=2, options={"print_level": 0})
        _family._CACHE.clear()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = (run_ours(n, scheme, qmax) if method in ("ours", "ours-memory")
           else run_casadi(n, method == "sx", scheme, qmax))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.update(cpu_s=ru.ru_utime + ru.ru_stime, wall_s=time.perf_counter() - w0,
               maxrss=ru.ru_maxrss * 1024, base_rss=base)
    print("RESULT " + json.dumps(out))


def floor(n, scheme, qmax, nvar):
    """The floor of ``bytes_per_var`` at N = n, measured in fresh processes: Ipopt + MUMPS
    alone on the same NLP (``setup_phases.py``'s Ipopt-alone run: the structure and
    values handed to cyipopt as stored arrays, no model alive) plus the least Pyomo model
    with one variable and one row per NLP variable (``pyomo_floor.py``), in bytes per
    NLP variable: ``(ipopt, pyomo)``."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c",
                        "import json, sys; sys.path.insert(0, sys.argv[1]); "
                        "from setup_phases import child_ipopt_alone as c; "
                        "print('RESULT ' + json.dumps(c(int(sys.argv[2]), (), sys.argv[3], "
                        "int(sys.argv[4]))))", here, str(n), scheme, str(qmax)],
                       capture_output=True, text=True)
    ipopt = next((json.loads(line[7:])["ipopt_alone"] for line in p.stdout.splitlines()
                  if line.startswith("RESULT ")), None)
    if ipopt is None:
        raise RuntimeError(f"Ipopt alone at N={n} failed:\n{p.stderr[-2000:]}")
    q = subprocess.run([sys.executable, os.path.join(here, "pyomo_floor.py"), str(nvar)],
                       capture_output=True, text=True)
    pyomo = float(q.stdout.strip().splitlines()[-1].split("floor_bytes_per_var=")[1])
    return ipopt / nvar, pyomo


def spawn(method, n, scheme, qmax):
    p = subprocess.run([sys.executable, __file__, "--child", method, str(n), scheme, str(qmax)],
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
    ap.add_argument("--scheme", default="adams_moulton",
                    help="a scheme name of the package (default: adams_moulton, the trapezoid with qmax 2)")
    ap.add_argument("--qmax", type=int, default=2)
    ap.add_argument("--no-floor", action="store_true",
                    help="do not measure the memory floor (Ipopt alone + the least Pyomo model)")
    ap.add_argument("--child", nargs=4)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2], int(args.child[3]))
    print(f"scheme {args.scheme}, qmax {args.qmax}")
    print("CPU/wall seconds of a fresh process each (import, build, initialization, solve); "
          f"{os.cpu_count()} cores, shared; minimum of {args.repeats} interleaved runs")
    print(f"{'N':>8} {'method':>6} {'cpu_s':>8} {'wall_s':>8} {'build_s':>8} {'ipopt_s':>8} "
          f"{'iters':>5} {'objective':>14} {'MB':>7}")
    best = {}
    for n in args.sizes:
        for _ in range(args.repeats):
            for meth in args.methods:
                r = spawn(meth, n, args.scheme, args.qmax)
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
    parts = [f"peers: N={n}"] + ([] if args.scheme == "adams_moulton" and args.qmax == 2
                                 else [f"scheme={args.scheme} qmax={args.qmax}"])
    for m in ("sx", "mx"):
        if o and (n, m) in best:
            parts.append(f"ours_over_{m}={o['cpu_s'] / best[(n, m)]['cpu_s']:.3f}")
    if o:
        print(f"ours at N={n}: peak {o['maxrss'] / 1e6:.0f} MB, "
              f"{o['maxrss'] / o['nvar']:.0f} bytes per variable with the imports")
        parts.append(f"build_over_solve={o['pre_s'] / o['solve_s']:.3f}")
        mem = spawn("ours-memory", n, args.scheme, args.qmax)
        bpv = (mem['maxrss'] - mem['base_rss']) / mem['nvar']
        parts.append(f"bytes_per_var={bpv:.0f}")
        if not args.no_floor:
            ip, py = floor(n, args.scheme, args.qmax, o["nvar"])
            print(f"floor at N={n}: Ipopt + MUMPS alone {ip:.0f} bytes per variable, "
                  f"the least Pyomo model {py:.0f}")
            parts.append(f"floor_bytes_per_var={ip + py:.0f} over_floor={bpv / (ip + py):.3f}")
    print(" ".join(parts))


if __name__ == "__main__":
    main()
