"""Where the preparation of the simultaneous NLP goes, per scheme: build,
initialization, evaluator set-up, against Ipopt's own time.

Lotka–Volterra with N steps (both states measured at t = 1..10), every
scheme in a fresh process; CPU seconds (``time.process_time``) of
``build_block``, ``initialize_block``, the evaluator inside ``odeest_ipopt``
and the rest of the solve (Ipopt with the callbacks).  With ``--methanol``,
the set-up (build + initialization + evaluator) of every scheme on COPS
methanol (``qmax=4``, ``max_step=0.01``), each in a fresh process so that no
compiled term is cached.

With ``--memory``, where the bytes go at N steps (``adams_moulton``,
``qmax=2``, the NLP of ``benchmarks/peers.py``), each in a fresh process:
the resident set (``VmRSS``) after the imports and after each phase (build,
initialization, evaluator set-up), the peak of the process (``VmHWM``, reached
in the solve) above the state after the set-up, and, in
a second process, Ipopt and MUMPS alone: the same structure handed to
cyipopt with callbacks that return stored arrays (Jacobian, Hessian, ...
computed beforehand, everything else freed), so that its peak above its own
start is the memory of Ipopt and MUMPS for this NLP.

    python benchmarks/setup_phases.py [N ...] [--methanol] [--memory [--ipopt-options k=v ...]]

The last line reads ``setup_phases: N=<largest> worst_ratio=<max over schemes
of (build + init + set-up) / Ipopt> scheme=<that scheme>`` (with
``--methanol``: ``methanol_setup_max=<CPU s> scheme=<slowest>``; with
``--memory``: ``memory: N=<N> bytes_per_var=<peak above the imports per NLP
variable> block=... init=... evaluator=... solve=<peak above the set-up>
ipopt_alone=...``, each in bytes per NLP variable).
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
    import pyomo_odeest.nlp._plugin as sv
    from pyomo_odeest.transcription import initialize_block, scale_parameters
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.transcription._block import build_block

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
    from pyomo_odeest.transcription import initialize_block
    from pyomo_odeest.models import methanol_problem
    from pyomo_odeest.transcription._block import build_block
    from pyomo_odeest.nlp._evaluator import PyomoNLPEvaluator

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


def _rss():
    """(VmRSS, VmHWM) of this process in bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) * 1024
    return out["VmRSS"], out["VmHWM"]


def child_memory(n):
    """Resident memory after each phase of the estimate (adams_moulton, qmax=2)."""
    import numpy as np
    import pyomo.environ as pyo
    import cyipopt  # noqa: F401  (an import: part of the baseline)
    import pyomo_odeest.nlp._plugin as sv
    from pyomo_odeest.transcription import initialize_block, scale_parameters
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.transcription._block import build_block

    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    out = {"imports": _rss()[0]}
    m = pyo.ConcreteModel()
    m.est = build_block(prob, "adams_moulton", 2, steps_per_interval=n // 10)
    out["block"] = _rss()[0]
    initialize_block(m.est, np.array(prob.u0))
    scale_parameters(m, m.est)
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    out["init"] = _rss()[0]
    base = sv.PyomoNLPEvaluator

    class Measured(base):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            out["evaluator"] = _rss()[0]
            out.update(n=self.n, m=self.m, jac_nnz=self.stats["jac_nnz"],
                       hess_nnz=self.stats["hess_nnz"])

    sv.PyomoNLPEvaluator = Measured
    solver = sv.OdeestIpoptSolver()
    solver.solve(m, options={"tol": 1e-8, "print_level": 0})
    out["peak"] = _rss()[1]
    out["iters"] = solver.last_info["iterations"]
    return out


def child_ipopt_alone(n, options=(), scheme="adams_moulton", qmax=2):
    """Peak of Ipopt + MUMPS alone on the NLP of :func:`child_memory`
    (``options``: more Ipopt options as ``key=value``; ``scheme``, ``qmax``: the
    block's scheme, :func:`child_memory`'s by default)."""
    import ctypes
    import gc

    import numpy as np
    import pyomo.environ as pyo
    import cyipopt
    from pyomo_odeest.transcription import initialize_block
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.nlp._cyipopt_adapter import MUMPS_DEFAULTS
    from pyomo_odeest.transcription._block import build_block
    from pyomo_odeest.nlp._evaluator import PyomoNLPEvaluator

    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, qmax, steps_per_interval=n // 10)
    initialize_block(m.est, np.array(prob.u0))
    ev = PyomoNLPEvaluator(m)
    x0 = ev.x0.copy()
    st = dict(jac=tuple(a.copy() for a in ev.jacobian_structure()),
              hess=tuple(a.copy() for a in ev.hessian_structure()))
    vals = dict(f=ev.objective(x0), g=ev.gradient(x0), c=ev.constraints(x0), J=ev.jacobian(x0),
                H=ev.hessian(x0, np.ones(ev.m)))
    nn, mm, cl, cu = ev.n, ev.m, ev.g_lb.copy(), ev.g_ub.copy()
    del ev, m
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:                        # pragma: no cover - not glibc
        pass

    class Stored:
        def objective(self, x): return vals["f"]
        def gradient(self, x): return vals["g"]
        def constraints(self, x): return vals["c"]
        def jacobian(self, x): return vals["J"]
        def jacobianstructure(self): return st["jac"]
        def hessian(self, x, lam, of): return vals["H"]
        def hessianstructure(self): return st["hess"]

    start = _rss()[0]
    with open("/proc/self/clear_refs", "w") as fh:      # VmHWM := VmRSS
        fh.write("5")
    nlp = cyipopt.Problem(n=nn, m=mm, problem_obj=Stored(), lb=np.full(nn, -1e20),
                          ub=np.full(nn, 1e20), cl=cl, cu=cu)
    opts = {**MUMPS_DEFAULTS, "print_level": 0, "max_iter": 3}
    for kv in options:
        k, v = kv.split("=")
        opts[k] = int(v) if v.lstrip("-").isdigit() else v
    for k, v in opts.items():
        nlp.add_option(k, v)
    nlp.solve(x0)
    nlp.close()
    return dict(ipopt_alone=_rss()[1] - start)


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
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--ipopt-options", nargs="*", default=[],
                    help="key=value options of the Ipopt-alone run of --memory")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args(argv)
    if args.child:
        kind, scheme = args.child[0], args.child[1]
        if kind == "memory":
            r = child_memory(int(scheme))
        elif kind == "ipopt_alone":
            r = child_ipopt_alone(int(scheme), args.child[2:])
        else:
            r = child_methanol(scheme) if kind == "methanol" else child_lv(scheme, int(args.child[2]))
        print("RESULT " + json.dumps(r))
        return
    if args.memory:
        print(f"{'N':>8} {'n':>8} {'jac nnz':>9} {'hess nnz':>9} | MB: {'imports':>7} "
              f"{'+block':>6} {'+init':>6} {'+evaluator':>10} {'+solve peak':>11} {'peak':>6} "
              f"{'Ipopt alone':>11}")
        for n in args.sizes:
            r = spawn("memory", n)
            r.update(spawn("ipopt_alone", n, *args.ipopt_options))
            mb = 2.0 ** 20
            print(f"{n:>8} {r['n']:>8} {r['jac_nnz']:>9} {r['hess_nnz']:>9} | "
                  f"{r['imports'] / mb:11.0f} {(r['block'] - r['imports']) / mb:6.0f} "
                  f"{(r['init'] - r['block']) / mb:6.0f} {(r['evaluator'] - r['init']) / mb:10.0f} "
                  f"{(r['peak'] - r['evaluator']) / mb:11.0f} {r['peak'] / mb:6.0f} "
                  f"{r['ipopt_alone'] / mb:11.0f}", flush=True)
        per = lambda b: f"{b / r['n']:.0f}"          # noqa: E731
        print(f"setup_phases: memory: N={n} bytes_per_var={per(r['peak'] - r['imports'])} "
              f"block={per(r['block'] - r['imports'])} init={per(r['init'] - r['block'])} "
              f"evaluator={per(r['evaluator'] - r['init'])} "
              f"solve={per(r['peak'] - r['evaluator'])} ipopt_alone={per(r['ipopt_alone'])}")
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
