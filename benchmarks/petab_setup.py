"""The set-up of a PEtab problem for the continuous least squares on CVODES: import,
the models of every condition, and the first objective and adjoint gradient.

Three runs, each in a fresh process: ``before`` on another version of the package
(``--before``: a folder holding a ``pyomo_odeest`` package, or a git revision of this
repository, exported with ``git archive``; default ``3af9e28``, the version before one
set-up per model), then this checkout twice with a new, empty cache directory for the store of generated code
(``PYOMO_ODEEST_CACHE``): ``cold`` (the store is filled) and ``warm`` (the store is read).
Each prints the seconds of the import (``petab_problem``), of the models
(``continuous_model`` per condition) and of the first evaluation (objective and
adjoint gradient at the nominal parameters), the NLL there and the largest
difference of the gradient from the ``before`` run's.  ``uptime``'s load is printed
before and after (the machine's other jobs slow every run).

    python benchmarks/petab_setup.py [PROBLEM_FOLDER] [--before REVISION_OR_FOLDER]

Last line: ``petab_setup: problem=<name> before_s=<import + models + first evaluation>
cold_s=... warm_s=... speedup=<before_s / cold_s>`` (``warm_speedup`` too).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(HERE, "tests", "data", "petab", "Isensee_JCB2018")


def child(folder):
    """One set-up in this process; prints ``RESULT {json}``."""
    t0 = time.perf_counter()
    import numpy as np
    import pyomo_odeest
    try:                               # where the continuous models live now, and before
        from pyomo_odeest.discretization.continuous import continuous_model
    except ImportError:
        from pyomo_odeest.approaches.continuous import continuous_model
    from pyomo_odeest.petab_io import petab_problem
    t1 = time.perf_counter()
    pe = petab_problem(folder)
    t2 = time.perf_counter()
    models = [continuous_model(sp) for sp in pe.problem.subproblems]
    t3 = time.perf_counter()
    u = np.asarray(pe.problem.u0, dtype=float)
    objective = sum(m.objective(u) for m in models)
    gradient = sum(m.gradient(u, "adjoint") for m in models)
    t4 = time.perf_counter()
    print("RESULT " + json.dumps(dict(
        package=os.path.dirname(pyomo_odeest.__file__), imports_s=t1 - t0, import_s=t2 - t1,
        models_s=t3 - t2, first_eval_s=t4 - t3, setup_s=t4 - t1, nll=pe.nll(objective),
        gradient=[float(g) for g in gradient])))


def spawn(folder, path, cache):
    env = dict(os.environ, PYTHONPATH=path, PYOMO_ODEEST_CACHE=cache)
    p = subprocess.run([sys.executable, __file__, folder, "--child"], env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(p.stderr[-3000:])


def load():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT)
    ap.add_argument("--before", default="3af9e28",
                    help="git revision or folder of the package whose set-up is 'before'")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        child(args.folder)
        return
    name = os.path.basename(os.path.normpath(args.folder))
    print(f"load before: {load()}", flush=True)
    runs = {}
    with tempfile.TemporaryDirectory() as before, tempfile.TemporaryDirectory() as cache:
        if os.path.isdir(args.before):
            before = args.before
        else:                                         # a revision: its package, exported
            archive = subprocess.run(["git", "-C", HERE, "archive", args.before, "pyomo_odeest"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", before], input=archive, check=True)
        runs["before"] = spawn(args.folder, before, os.path.join(cache, "before"))
        print(f"before done: {load()}", flush=True)
        runs["cold"] = spawn(args.folder, HERE, cache)
        runs["warm"] = spawn(args.folder, HERE, cache)
    print(f"load after: {load()}")
    g0 = runs["before"]["gradient"]
    print(f"{'run':>6} {'package':>28} {'import':>8} {'models':>8} {'1st eval':>8} "
          f"{'set-up':>8} {'NLL':>18} {'|dNLL|/NLL':>10} {'max|dg|/max|g|':>14}")
    scale = max(abs(v) for v in g0)
    for k, r in runs.items():
        dn = abs(r["nll"] - runs["before"]["nll"]) / abs(runs["before"]["nll"])
        dg = max(abs(a - b) for a, b in zip(r["gradient"], g0)) / scale
        print(f"{k:>6} {r['package'][-28:]:>28} {r['import_s']:8.1f} {r['models_s']:8.1f} "
              f"{r['first_eval_s']:8.1f} {r['setup_s']:8.1f} {r['nll']:18.9f} {dn:10.1e} "
              f"{dg:14.1e}")
    b, c, w = (runs[k]["setup_s"] for k in ("before", "cold", "warm"))
    print(f"petab_setup: problem={name} before_s={b:.1f} cold_s={c:.1f} warm_s={w:.1f} "
          f"speedup={b / c:.1f} warm_speedup={b / w:.1f}")


if __name__ == "__main__":
    main()
