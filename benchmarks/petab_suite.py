"""PEtab benchmark suite: :func:`pyomo_odeest.fit_petab` over a collection of problems.

    python benchmarks/petab_suite.py [FOLDER ...] [--approaches continuous_least_squares,reduced_space,simultaneous]
                                     [--starts 4] [--spread 0.3] [--scheme enright]
                                     [--grid-points 300] [--grid auto|uniform] [--refine 2] [--workers 0]
                                     [--max-wall-time 120] [--max-problem-time 3600] [--all-approaches]

Every FOLDER holding one PEtab YAML file is a problem (a folder holding
problem folders is searched one level down); default: the problems shipped
with the tests (``tests/data/petab``).  Each problem is fitted by
:func:`pyomo_odeest.fit_petab` with the options given (its workflow, statuses
and budgets: docs/petab.md, "Fitting a problem: fit_petab"; ``--refine``: the
tolerance refits of the continuous approaches, the grids being certified and
refined by the discrete approaches themselves), with the reference NLL of
``references.tsv`` beside the problems when it lists them.  The libraries a fit
imports on first use (:data:`WARM_IMPORTS`) are imported before the first
problem's clock starts, as ``amici_peer.py`` imports its own; each ``wall_s``
counts the problem's import (SBML, PEtab tables, generated code) and its fits.

Prints the fits' lines, then one line per problem,
``petab_problem: name=... nominal_nll=... best_nll=... best_approach=... wall_s=... status=...``
(values are the objective the estimation minimizes: PEtab's NLL, plus the
priors when the problem has them), followed by ``reference_nll`` (the
reference on the same objective) and ``ref_gap`` (best − reference), the
discrete NLL of the best start and its first grid's largest step (``nan`` for
the continuous approaches), ``flags`` and the approaches' failures, and ends
with ``petab_suite: problems=... imported=... median_wall_s=...``;
``--out`` (default ``benchmarks/results/petab_suite.tsv``) keeps one row per
problem with its best estimates (JSON), updated by each run.  A problem that
cannot be imported has the status ``import_failed:<exception>``.  Exit code 0
when every problem converged no worse than its reference, 1 otherwise, 2 on a
usage error (a folder that does not exist, ``--starts 0``).

``--check-stored``: no fit; for every problem with a row in ``--out``, its stored best
estimates evaluated by today's package: the problem's own objective there
(``ContinuousModel``, LSODA, rtol 1e-10, atol 1e-12, which a profiled σ needs) and
the independent simulation's (the suite's ``best_nll``: PEtab's NLL plus the priors),
one line ``petab_stored: name=... stored_nll=... simulated_nll=... difference=...``
each (``difference``: relative to max(1, |stored|)).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "tests", "data", "petab")


def problem_folders(paths):
    """The problem folders of ``paths`` (a folder with a YAML file, or a folder of them);
    ValueError naming a path that is not a folder."""
    out = []
    for p in paths:
        p = os.path.abspath(p)
        if not os.path.isdir(p):
            raise ValueError(f"{p} is not a folder (a PEtab problem folder, or a folder of "
                             "them)")
        if any(f.endswith((".yaml", ".yml")) for f in os.listdir(p)):
            out.append(p)
        else:
            out += sorted(os.path.join(p, d) for d in os.listdir(p)
                          if os.path.isdir(os.path.join(p, d)))
    return out


def references(folders):
    ref = {}
    for parent in {os.path.dirname(f) for f in folders} | set(folders):
        f = os.path.join(parent, "references.tsv")
        if os.path.exists(f):
            ref.update(pd.read_csv(f, sep="\t", index_col="problem")["reference_nll"].to_dict())
    return ref


def run_problem(folder, args, ref, runner):
    """One problem's row (a dict) from :func:`fit_petab`."""
    from pyomo_odeest import fit_petab
    name = os.path.basename(folder)
    t0 = time.perf_counter()
    try:
        fit = fit_petab(folder, approaches=args.approaches, starts=args.starts,
                        spread=args.spread, scheme=args.scheme, grid_points=args.grid_points,
                        grid=args.grid, refine=args.refine, max_wall_time=args.max_wall_time,
                        max_problem_time=args.max_problem_time,
                        all_approaches=args.all_approaches, workers=args.workers,
                        seed=args.seed, noise=args.noise, reference=ref.get(name),
                        runner=runner,
                        progress=False, log=lambda line: print(line, flush=True))
    except Exception as err:  # noqa: BLE001 - reported as the status
        return dict(name=name, nominal_nll=np.nan, best_nll=np.nan, best_approach="-",
                    wall_s=time.perf_counter() - t0, status=f"import_failed:{type(err).__name__}",
                    imported=False, detail=str(err)[:200], flags=[], reference=None)
    out = dict(name=name, nominal_nll=fit.nominal_nll, best_nll=fit.best_nll,
               wall_s=fit.wall_s, status=fit.status, flags=list(fit.flags), imported=True,
               detail=fit.failures, best_approach=fit.best_approach, reference=fit.reference,
               success=fit.success)
    if fit.best_row is not None:
        b = fit.best_row
        out.update(best_discrete=float(b["nll_discrete"]), best_step=float(b["max_step"]),
                   best_rtol=float(b.get("rtol", np.nan)),
                   estimates={k: float(b[f"p_{k}"])
                              for k in fit.estimation.problem.parameter_names})
    return out


def check_stored(folder, path):
    """The line of ``--check-stored`` for the problem in ``folder`` (None: no stored row)."""
    from pyomo_odeest.discretization.continuous import ContinuousModel
    from pyomo_odeest.petab_io import petab_problem
    from pyomo_odeest.petab_io._fit import _Estimates, simulated
    name = os.path.basename(folder)
    tab = pd.read_csv(path, sep="\t", index_col="name") if os.path.exists(path) else None
    if tab is None or name not in tab.index or not isinstance(tab.loc[name, "estimates"], str):
        return None
    stored = json.loads(tab.loc[name, "estimates"])
    pe = petab_problem(folder)
    P = pe.problem
    u = pd.Series(np.asarray(P.u0, dtype=float), index=P.parameter_names)
    unknown = sorted(set(stored) - set(u.index))
    if unknown:
        raise ValueError(f"{name}: stored estimates of parameters the problem does not "
                         f"have: {unknown}")
    u[list(stored)] = list(stored.values())
    subs = P.experiment_problems if P.experiments else [P]
    J = sum(ContinuousModel(sp, method="LSODA", rtol=1e-10, atol=1e-12).objective(u.to_numpy())
            for sp in subs)
    nll = simulated(pe, _Estimates(u, J))
    old = float(tab.loc[name, "best_nll"])
    return (f"petab_stored: name={name} stored_nll={old:.6f} simulated_nll={nll:.6f} "
            f"difference={(nll - old) / max(1.0, abs(old)):.2g}")


def problem_line(row):
    """The ``petab_problem:`` line of a row of :func:`run_problem`."""
    extra = ""
    if row.get("reference") is not None:
        extra = (f" reference_nll={row['reference']:.6f} "
                 f"ref_gap={row['best_nll'] - row['reference']:+.6f}")
    if row["flags"]:
        extra += " flags=" + ",".join(row["flags"])
    if "best_discrete" in row:
        extra += (f" best_discrete_nll={row['best_discrete']:.6f} "
                  f"best_max_step={row['best_step']:.4g}")
    return (f"petab_problem: name={row['name']} nominal_nll={row['nominal_nll']:.6f} "
            f"best_nll={row['best_nll']:.6f} best_approach={row['best_approach']} "
            f"wall_s={row['wall_s']:.1f} status={row['status']}{extra}"
            + (f" failures={row['detail']}" if row["detail"] else ""))


def write_results(path, rows):
    """Update the TSV ``path``: one row per problem (replacing an earlier row of the same
    name), with the best estimates as JSON, so the fits can be checked or restarted."""
    cols = ["name", "status", "best_nll", "reference", "nominal_nll", "best_approach",
            "wall_s", "best_rtol", "best_step", "flags", "estimates"]
    new = pd.DataFrame([{**{k: r.get(k) for k in cols}, "flags": ",".join(r["flags"]),
                         "estimates": json.dumps(r.get("estimates"))} for r in rows],
                       columns=cols)
    if os.path.exists(path):
        old = pd.read_csv(path, sep="\t")
        new = pd.concat([old[~old["name"].isin(new["name"])], new], ignore_index=True)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new.sort_values("name").to_csv(path, sep="\t", index=False)


def _parser():
    from pyomo_odeest.petab_io._fit import DEFAULT_APPROACHES
    from pyomo_odeest.petab_io._problem import NOISE_FORMS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=[DEFAULT])
    ap.add_argument("--approaches", default=",".join(DEFAULT_APPROACHES),
                    type=lambda s: [a.strip() for a in s.split(",") if a.strip()])
    ap.add_argument("--starts", type=int, default=4,
                    help="starts per approach: the nominal point and starts-1 Sobol points")
    ap.add_argument("--spread", type=float, default=0.3)
    ap.add_argument("--scheme", default="enright",
                    help="scheme of the discrete approaches")
    ap.add_argument("--grid-points", type=int, default=300,
                    help="largest step of the first grid = horizon / grid-points")
    ap.add_argument("--grid", choices=("auto", "uniform"), default="auto",
                    help="auto: steps that follow LSODA's (rtol 1e-6) at the start, growing by "
                         "at most 2x per step, at most horizon/grid-points; uniform: "
                         "horizon/grid-points")
    ap.add_argument("--refine", type=int, default=2,
                    help="tolerance refits (rtol / 100 each) of the continuous approaches")
    ap.add_argument("--max-wall-time", type=float, default=120.0,
                    help="max_wall_time (seconds) of every fit (0: no limit)")
    ap.add_argument("--max-problem-time", type=float, default=3600.0,
                    help="seconds a problem may take, from the start of its import "
                         "(0: no limit)")
    ap.add_argument("--all-approaches", action="store_true",
                    help="run every approach (default: stop at the first that converges to "
                         "a point no worse than the start and the reference)")
    ap.add_argument("--workers", type=int, default=0,
                    help="Dask worker processes of the runner (0: serial)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", choices=NOISE_FORMS, default="joint",
                    help="estimated noise parameters: joint (fitted with θ) or alternate")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "petab_suite.tsv"),
                    help="TSV updated with one row per problem and its best estimates "
                         "('' : none)")
    ap.add_argument("--check-stored", action="store_true",
                    help="no fit: evaluate the best estimates stored in --out by today's "
                         "package (petab_stored lines)")
    return ap


#: what a fit imports on first use (the SBML and PEtab readers, the engine, the
#: optimizers): imported before any clock starts, as ``amici_peer.py`` imports AMICI,
#: fides and pyPESTO before its own, so that the first problem's wall time is its fit
WARM_IMPORTS = ("libsbml", "petab.v1", "casadi", "scipy.optimize", "scipy.integrate",
                "scipy.stats")


def warm_imports():
    import importlib
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:       # an optional one that is missing: the fit says so
            pass


def main(argv=None):
    args = _parser().parse_args(argv)
    from pyomo_odeest.petab_io._fit import FitSettings
    from pyomo_odeest.runner import Runner
    try:                                  # every setting and folder checked before a fit
        FitSettings(approaches=args.approaches, starts=args.starts, spread=args.spread,
                    scheme=args.scheme, grid_points=args.grid_points, grid=args.grid,
                    refine=args.refine, max_wall_time=args.max_wall_time,
                    max_problem_time=args.max_problem_time, workers=args.workers,
                    seed=args.seed, noise=args.noise)
        folders = problem_folders(args.folders)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check_stored:
        if not args.out:
            print("error: --check-stored reads the estimates stored in --out", file=sys.stderr)
            return 2
        lines = [check_stored(f, args.out) for f in folders]
        for line in lines:
            if line:
                print(line, flush=True)
        print(f"petab_stored: problems={sum(1 for x in lines if x)}")
        return 0
    ref = references(folders)
    warm_imports()
    rows = []
    runner = (Runner(mode="dask", n_workers=args.workers, progress=False) if args.workers
              else Runner(mode="serial", progress=False))
    try:
        for f in folders:
            row = run_problem(f, args, ref, runner)
            rows.append(row)
            print(problem_line(row), flush=True)
    finally:
        runner.close()
    if args.out:
        write_results(args.out, rows)
    walls = [r["wall_s"] for r in rows]
    print(f"petab_suite: problems={len(rows)} imported={sum(r['imported'] for r in rows)} "
          f"median_wall_s={np.median(walls) if walls else float('nan'):.1f}")
    return 0 if rows and all(r.get("success", False) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
