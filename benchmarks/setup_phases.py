"""Where the preparation of the simultaneous NLP goes, per scheme: build,
initialization, evaluator set-up, against Ipopt's own time.

Lotka–Volterra with N steps (both states measured at t = 1..10), every
scheme in a fresh process; CPU seconds (``time.process_time``) of
``build_block``, ``initialize_block``, the evaluator inside ``odeest_ipopt``
and the rest of the solve (Ipopt with the callbacks).  With ``--methanol``,
the set-up (build + initialization + evaluator) of every scheme on COPS
methanol (``qmax=4``, ``max_step=0.01``), each in a fresh process so that no
compiled term is cached.

    python benchmarks/setup_phases.py [N ...] [--methanol]

The last line reads ``setup_phases: N=<largest> worst_ratio=<max over schemes
of (build + init + set-up) / Ipopt> scheme=<that scheme>`` (with
``--methanol``: ``methanol_setup_max=<CPU s> scheme=<slowest>``).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SCHEMES = ["adams_pc", "adams_moulton", "enright", "semi_implicit_enright"]


def child_lv(scheme, n):
    import numpy as np
    import pyomo.environ as pyo
    import pyomo_odeest.pyomo.solver as sv
    from pyomo_odeest.approaches.simultaneous import initialize_block, scale_parameters
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.pyomo.block import build_block

    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    out = {}
    c = time.process_time()
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, None, steps_per_interval=n // 10)
    out["build"] = time.process_time() - c
    c = time.process_time()
    initialize_block(m.est, np.array(prob.u0))
    out["init"] = time.process_time() - c
    scale_parameters(m, m.est)
    base = sv.PyomoNLPEvaluator

    class Timed(base):
        def __init__(self, *a, **k):
            c0 = time.process_time()
            super().__init__(*a, **k)
            out["setup"] = time.process_time() - c0

    sv.PyomoNLPEvaluator = Timed
    solver = sv.OdeestIpoptSolver()
    c = time.process_time()
    solver.solve(m, options={"tol": 1e-8, "print_level": 0})
    out["ipopt"] = time.process_time() - c - out["setup"]
    out["iters"] = solver.last_info.get("iterations")
    out["mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    return out


def child_methanol(scheme):
    import numpy as np
    import pyomo.environ as pyo
    from pyomo_odeest.approaches.simultaneous import initialize_block
    from pyomo_odeest.models import methanol_problem
    from pyomo_odeest.pyomo.block import build_block
    from pyomo_odeest.pyomo.evaluator import PyomoNLPEvaluator

    prob = methanol_problem()
    c = time.process_time()
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, 4, max_step=0.01)
    c1 = time.process_time()
    initialize_block(m.est, np.array(prob.u0))
    c2 = time.process_time()
    PyomoNLPEvaluator(m)
    c3 = time.process_time()
    return dict(build=c1 - c, init=c2 - c1, setup=c3 - c2, total=c3 - c)


def spawn(*args):
    p = subprocess.run([sys.executable, __file__, "--child", *map(str, args)],
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(p.stderr[-2000:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[20000, 100000])
    ap.add_argument("--methanol", action="store_true")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args(argv)
    if args.child:
        kind, scheme = args.child[0], args.child[1]
        r = child_methanol(scheme) if kind == "methanol" else child_lv(scheme, int(args.child[2]))
        print("RESULT " + json.dumps(r))
        return
    if args.methanol:
        print(f"{'scheme':>22} {'build':>6} {'init':>6} {'setup':>6} {'total':>6}  (CPU s)")
        res = {s: spawn("methanol", s) for s in SCHEMES}
        for s, r in res.items():
            print(f"{s:>22} {r['build']:6.2f} {r['init']:6.2f} {r['setup']:6.2f} {r['total']:6.2f}")
        worst = max(res, key=lambda s: res[s]["total"])
        print(f"setup_phases: methanol_setup_max={res[worst]['total']:.2f} scheme={worst}")
        return
    print(f"{'N':>7} {'scheme':>22} {'build':>6} {'init':>6} {'setup':>6} {'ipopt':>7} "
          f"{'ratio':>6} {'iters':>5} {'MB':>6}  (CPU s)")
    worst = None
    for n in args.sizes:
        for s in SCHEMES:
            r = spawn("lv", s, n)
            ratio = (r["build"] + r["init"] + r["setup"]) / r["ipopt"]
            print(f"{n:>7} {s:>22} {r['build']:6.2f} {r['init']:6.2f} {r['setup']:6.2f} "
                  f"{r['ipopt']:7.2f} {ratio:6.3f} {r['iters']!s:>5} {r['mb']:6.0f}", flush=True)
            if n == args.sizes[-1] and (worst is None or ratio > worst[0]):
                worst = (ratio, s)
    print(f"setup_phases: N={args.sizes[-1]} worst_ratio={worst[0]:.3f} scheme={worst[1]}")


if __name__ == "__main__":
    main()
