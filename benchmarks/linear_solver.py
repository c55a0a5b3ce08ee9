"""Ipopt's linear algebra on the Lotka–Volterra NLP: MUMPS settings and Ipopt builds.

The NLP: the [AT] Lotka–Volterra estimation problem discretized by the Adams
predictor–corrector (Q_max = 4) with N steps (``build_block`` +
``initialize_block`` + ``PyomoNLPEvaluator``, as ``estimate_simultaneous``
builds it; about 4N variables).  For each size the evaluator is built once and
Ipopt (exact Hessian, tol 1e-8) is started from the same point for every
setting:

* every MUMPS ordering (``mumps_pivot_order`` 0 AMD, 2 AMF, 3 SCOTCH, 4 PORD,
  5 METIS, 6 QAMD, 7 automatic choice) with Ipopt's default scaling;
* scalings (``mumps_scaling`` 77 automatic / 0 none / 8, with
  ``mumps_permuting_scaling`` 7 / 0), ``mumps_mem_percent`` 1000 / 100 and
  ``mumps_pivtol`` 1e-6 (Ipopt's default) / 1e-4 with the package's default ordering.

The time compared is the CPU time of the whole Ipopt call per iteration
(``time.process_time``, callbacks included: they are the same for every
setting; wall time on a loaded shared machine is mostly waiting).  BLAS runs
single-threaded (``OPENBLAS_NUM_THREADS=1``, ``OMP_NUM_THREADS=1`` unless set):
threads that spin-wait on a loaded 2-core machine would be counted as CPU
time.  Settings are run in a rotated order within each
repeat, and each Ipopt build (a Python interpreter whose ``cyipopt`` links a
different Ipopt, ``--python``) runs in its own process, alternating between
builds at every repeat; the minimum over repeats is reported.

    python benchmarks/linear_solver.py [--sizes N ...] [--repeats R]
                                       [--python NAME=INTERPRETER ...]

Last line: ``linear_solver: best_ordering=... per_iter_ratio_worst_over_best=...
builds=NAME:s_per_iter,...`` (best ordering and the worst/best ratio of
orderings for the first build at the largest N; per build its Ipopt time per
iteration at the largest N with the package defaults).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ORDERINGS = {0: "amd", 2: "amf", 3: "scotch", 4: "pord", 5: "metis", 6: "qamd", 7: "auto"}


def settings():
    out = [(f"order_{name}", {"mumps_pivot_order": k}) for k, name in ORDERINGS.items()]
    out += [("defaults", {}),
            ("scaling_none", {"mumps_scaling": 0}),
            ("scaling_8", {"mumps_scaling": 8}),
            ("no_permuting_scaling", {"mumps_permuting_scaling": 0}),
            ("mem_percent_100", {"mumps_mem_percent": 100}),
            ("pivtol_1e-6", {"mumps_pivtol": 1e-6}),
            ("pivtol_1e-4", {"mumps_pivtol": 1e-4})]
    return out


def child(sizes, rotate, skip):
    """Run every setting on every size in this process; print one JSON line per run
    (``ROW ...``, flushed, so that a crash of Ipopt loses only the run that crashed)."""
    import warnings
    warnings.simplefilter("ignore")
    import numpy as np
    from pyomo_odeest.transcription import initialize_block
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.nlp._cyipopt_adapter import ipopt_version, solve_with_ipopt
    from pyomo_odeest.transcription._block import build_block
    from pyomo_odeest.nlp._evaluator import PyomoNLPEvaluator
    import pyomo.environ as pyo
    sets = settings()
    sets = sets[rotate % len(sets):] + sets[:rotate % len(sets)]
    for n in sizes:
        prob = lotka_volterra_problem()
        m = pyo.ConcreteModel()
        m.est = build_block(prob, "adams_pc", 4, steps_per_interval=max(1, n // 10))
        initialize_block(m.est, None, "auto")
        ev = PyomoNLPEvaluator(m)
        x0 = np.array(ev.x0, dtype=float)
        for name, opts in sets:
            if f"{n}:{name}" in skip:
                continue
            print("START " + json.dumps(dict(n=n, setting=name)), flush=True)
            o = {"tol": 1e-8, "max_iter": 200, **opts}
            t, c = time.perf_counter(), time.process_time()
            r = solve_with_ipopt(ev, x0=x0, options=o)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            print("ROW " + json.dumps(dict(
                n=n, nvar=int(ev.n), setting=name, iterations=int(r.iterations),
                ipopt_s=float(r.ipopt_s), eval_s=float(r.eval_s), wall_s=wall, cpu_s=cpu,
                objective=float(r.obj), status=str(r.status_name),
                version=".".join(map(str, ipopt_version() or ("?",))))), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", type=int, default=[10000, 30000])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--python", nargs="*", default=None,
                    help="NAME=INTERPRETER of each Ipopt build (default: this interpreter)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rotate", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--skip", nargs="*", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.sizes, args.rotate, set(args.skip))
        return
    builds = dict(b.split("=", 1) for b in (args.python or [f"wheels={sys.executable}"]))
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        env.setdefault(var, "1")
    best, versions = {}, {}
    crashed = {}
    for rep in range(args.repeats):
        for bname, exe in builds.items():
            skip = []
            while True:
                out = subprocess.run([exe, os.path.abspath(__file__), "--child", "--rotate",
                                      str(rep), "--sizes", *map(str, args.sizes), "--skip", *skip],
                                     capture_output=True, text=True, env=env)
                started = None
                for ln in out.stdout.splitlines():
                    if ln.startswith("START "):
                        started = json.loads(ln[6:])
                    elif ln.startswith("ROW "):
                        r = json.loads(ln[4:])
                        started = None
                        versions[bname] = r["version"]
                        skip.append(f"{r['n']}:{r['setting']}")
                        own = r["cpu_s"] / max(r["iterations"], 1)
                        key = (bname, r["n"], r["setting"])
                        if key not in best or own < best[key]["own"]:
                            best[key] = dict(r, own=own)
                if out.returncode == 0:
                    break
                if started is None:
                    print(f"build {bname} failed:\n{out.stderr[-2000:]}")
                    sys.exit(1)
                key = f"{started['n']}:{started['setting']}"
                crashed[(bname, started["n"], started["setting"])] = out.returncode
                print(f"build {bname}: Ipopt crashed (exit code {out.returncode}) at N={started['n']} "
                      f"with {started['setting']}", flush=True)
                skip.append(key)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'build':>8} {'ipopt':>7} {'N':>6} {'nvar':>7} {'setting':>22} {'iter':>5} "
          f"{'cpu_s':>8} {'cpu_ms/it':>10} {'status':>12}")
    for (bname, n, name), r in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[1]["own"])):
        print(f"{bname:>8} {versions[bname]:>7} {n:>6} {r['nvar']:>7} {name:>22} {r['iterations']:>5} "
              f"{r['cpu_s']:8.2f} {1e3 * r['own']:10.2f} {r['status'][:12]:>12}")
    for (bname, n, name), rc in sorted(crashed.items()):
        print(f"{bname:>8} {versions.get(bname, '?'):>7} {n:>6} {'':>7} {name:>22}  crashed (exit code {rc})")
    first, nmax = next(iter(builds)), max(args.sizes)
    orders = {name: best[(first, nmax, name)]["own"] for name, _ in settings()
              if name.startswith("order_") and (first, nmax, name) in best}
    b_order = min(orders, key=orders.get)
    ratio = max(orders.values()) / orders[b_order]
    builds_s = ",".join(f"{b}:{best[(b, nmax, 'defaults')]['own']:.4f}" if (b, nmax, "defaults") in best
                        else f"{b}:crashed" for b in builds)
    print(f"linear_solver: best_ordering={b_order[6:]} per_iter_ratio_worst_over_best={ratio:.2f} "
          f"builds={builds_s}")


if __name__ == "__main__":
    main()
