"""Peer benchmark: AMICI + pyPESTO (fides) on the PEtab problems of the package's suite.

    python benchmarks/amici_peer.py [FOLDER ...] [--starts 4] [--spread 0.3] [--seed 0]
                                    [--max-wall-time SECONDS] [--out benchmarks/results/amici_peer.tsv]
                                    [--cache-dir ~/.cache/pyomo_odeest_amici]
                                    [--rtol RTOL] [--atol ATOL]

Runs in its own environment (AMICI needs Python >= 3.12; it does not import
``pyomo_odeest``): ``swig`` from PyPI, ``libhdf5-serial-dev`` from Debian,
then ``pip install amici pypesto fides petab`` (AMICI builds from source).

Every FOLDER holding one PEtab YAML file is a problem (a folder holding
problem folders is searched one level down, as ``petab_suite.py`` does);
default: the problems under ``shared/petab`` beside the repository
(``/work/shared/petab``), else the tests' ``tests/data/petab``.  Per problem:

1. import (timed as ``import_s``): the PEtab tables, then pyPESTO's
   :class:`~pypesto.petab.PetabImporter`, which imports the model with AMICI
   (``amici.importers.petab.v1.import_petab_problem``) and compiles it into
   ``<cache-dir>/<name>`` unless a model of this AMICI version is there
   (``compiled=1`` when it was compiled in this run);
2. the nominal NLL: minus AMICI's ``llh`` at the nominal parameters
   (``simulate_petab``, no priors), with AMICI's default solver (CVODES,
   rtol 1e-8, atol 1e-16, or ``--rtol``/``--atol``: with atol 1e-16 the forward
   sensitivities of Fujita's model fail at the nominal point, CVODES's error
   test at t = 626, and every start with them; at 1e-12, the package's CVODES
   default, they do not); ``nominal_nll_tight`` the same with rtol = atol =
   1e-12 (not timed), to tell tolerance from modelling differences (likewise
   ``best_nll_tight`` at the best start's end point, given in ``best_x``);
3. pyPESTO with fides (default options, default Hessian: the hybrid FIM/BFGS
   scheme) from the *same* starts as ``petab_suite.py`` (:func:`suite_starts`):
   the nominal point plus ``starts - 1`` scrambled Sobol points
   (``scipy.stats.qmc.Sobol(d, scramble=True, seed=np.random.default_rng(seed))``)
   in the box nominal ± ``spread`` on the parameters' scales, clipped to the
   bounds, over the package's free parameters (PEtab's estimated parameters in
   the parameter table's order *without a profiled σ*, :func:`profiled_sigma`;
   ``tests/petab_io/test_fit_petab.py`` checks that they are ``fit_petab``'s
   starts).  A profiled σ starts at its nominal value in every start.  The
   objective is pyPESTO's (PEtab's NLL plus the priors'
   negative log-density where the parameter table states priors);
   ``best_nll`` is the NLL *without* priors (minus AMICI's llh) at the start with
   the lowest objective, ``best_obj`` that objective (with priors);
4. ``wall_s``: the nominal simulation and all starts (import excluded;
   ``cpu_s`` the process time of the same span, ``nominal_s`` that of the
   nominal simulation and objective); ``eval_s`` (not in ``wall_s``): the
   median time of one objective and gradient (forward sensitivities, what fides
   calls per iteration) at the nominal point, as ``petab_import.py --engine
   cvodes`` times the package's;
   ``--max-wall-time`` caps it per problem (fides' ``maxtime`` of each start is
   what is left of the budget; starts not begun count as not converged).

``converged`` counts the starts fides ended on a convergence criterion
(exit flag FTOL, XTOL or GTOL); ``hits`` those within 1e-3 of the best
objective.  Prints one line per problem,
``amici_problem: name=... nominal_nll=... best_nll=... wall_s=... import_s=... starts=... converged=...``
(then the reference NLL, the objective with priors, hits, ...), and ends with
``amici_peer: problems=... median_wall_s=...``; writes the table as TSV to ``--out``.
``--import-only`` stops after the nominal NLL (fills the model cache, e.g. before
timing the fits).

Reference NLLs come from ``references.tsv`` beside the problems (as in
``petab_suite.py``) or from the tables of a ``README.md`` there (first cell the
problem, last cell the reference NLL).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import time
import warnings

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared", "petab")
TESTS = os.path.join(REPO, "tests", "data", "petab")
DEFAULT = SHARED if os.path.isdir(SHARED) else TESTS
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pyomo_odeest_amici")
CONVERGED = (1, 2, 3)          # fides ExitFlag FTOL, XTOL, GTOL


# ---------------------------------------------------------------------------
# problems and references (as petab_suite.py)
# ---------------------------------------------------------------------------
def problem_folders(paths):
    out = []
    for p in paths:
        p = os.path.abspath(p)
        if any(f.endswith((".yaml", ".yml")) for f in os.listdir(p)):
            out.append(p)
        else:
            out += sorted(os.path.join(p, d) for d in os.listdir(p)
                          if os.path.isdir(os.path.join(p, d)))
    return out


def _number(text):
    try:
        return float(text.strip().replace("\u2212", "-"))
    except ValueError:
        return None


def references(folders):
    """Reference NLL per problem: ``references.tsv`` beside the problems, else the
    README.md tables (rows ``| problem | ... | reference NLL |``)."""
    ref = {}
    names = {os.path.basename(f) for f in folders}
    for parent in sorted({os.path.dirname(f) for f in folders} | set(folders)):
        tsv = os.path.join(parent, "references.tsv")
        if os.path.exists(tsv):
            ref.update(pd.read_csv(tsv, sep="\t", index_col="problem")["reference_nll"].to_dict())
            continue
        md = os.path.join(parent, "README.md")
        if not os.path.exists(md):
            continue
        with open(md, encoding="utf-8") as fh:
            for line in fh:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 2 and cells[0] in names and cells[0] not in ref:
                    v = _number(cells[-1])
                    if v is not None:
                        ref[cells[0]] = v
    return ref


def yaml_of(folder):
    ys = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml")))
    if len(ys) != 1:
        raise ValueError(f"{folder}: expected one PEtab YAML file, found {ys}")
    return os.path.join(folder, ys[0])


# ---------------------------------------------------------------------------
# the suite's starts
# ---------------------------------------------------------------------------
def _scale(v, scale):
    """The package's scale_value (math.log10 / math.log, as petab_io does)."""
    return {"lin": lambda a: a, "log": math.log, "log10": math.log10}[scale](float(v))


def _empty(v):
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == ""


def _noise_formulas(pp):
    """Per distinct (observable, condition, noiseParameters): the noise formula with
    its placeholders and the condition table's overrides substituted (sympy)."""
    from petab.v1.math import sympify_petab
    cond = pp.condition_df
    out = {}
    for _, r in pp.measurement_df.iterrows():
        oid, cid = str(r["observableId"]), str(r["simulationConditionId"])
        npar = r.get("noiseParameters", np.nan)
        key = (oid, cid, str(npar))
        if key in out:
            continue
        formula = sympify_petab(str(pp.observable_df.loc[oid, "noiseFormula"]))
        pat = re.compile(rf"^noiseParameter(\d+)_{re.escape(oid)}$")
        holders = sorted((int(m.group(1)), sym) for sym in formula.free_symbols
                         if (m := pat.match(sym.name)))
        vals = [] if _empty(npar) else [t.strip() for t in str(npar).split(";")]
        sub = {sym: sympify_petab(v) for (_, sym), v in zip(holders, vals)}
        formula = formula.xreplace(sub)
        if cond is not None and cid in cond.index:
            row = cond.loc[cid]
            formula = formula.xreplace({sym: sympify_petab(str(row[sym.name]).strip())
                                        for sym in formula.free_symbols
                                        if sym.name in row.index and not _empty(row[sym.name])})
        out[key] = formula
    return list(out.values())


def _estimated(pp):
    return set(pp.parameter_df.index[pp.parameter_df["estimate"].astype(int) == 1].astype(str))


def noise_parameter_ids(pp):
    """Estimated parameters that occur in a measurement's noise formula (after the
    noiseParameters overrides and the condition table's substitutions)."""
    est = _estimated(pp)
    return {sym.name for f in _noise_formulas(pp) for sym in f.free_symbols} & est


def profiled_sigma(pp):
    """The noise parameter the package profiles out (``petab_problem``'s rule), or None:
    the one estimated parameter of every noise formula, each formula a number times it
    (the fixed parameters at their nominal values), absent from the observables, and no
    priors in the parameter table.  Every other noise parameter is one of the package's
    free parameters (``noise='joint'``)."""
    import sympy
    from petab.v1.math import sympify_petab
    found = noise_parameter_ids(pp)
    if len(found) != 1:
        return None
    s = next(iter(found))
    df = pp.parameter_df
    if "objectivePriorType" in df.columns and not all(
            _empty(v) for v in df.loc[df["estimate"].astype(int) == 1, "objectivePriorType"]):
        return None
    fixed = {str(pid): float(r["nominalValue"]) for pid, r in df.iterrows()
             if not int(r.get("estimate", 1)) and not _empty(r.get("nominalValue", np.nan))}
    for f in _noise_formulas(pp):          # symbols by name (PEtab's carry assumptions)
        syms = {v.name: v for v in f.free_symbols}
        if s not in syms:
            return None
        f = f.xreplace({v: fixed[n] for n, v in syms.items() if n in fixed})
        if sympy.simplify(f / syms[s]).free_symbols:
            return None
    for y in pp.observable_df["observableFormula"]:
        if s in {v.name for v in sympify_petab(str(y)).free_symbols}:
            return None
    return s


def suite_start_parameters(pp):
    """The package's free parameters: PEtab's estimated parameters in the table's
    order without the profiled σ (:func:`profiled_sigma`); rows of (id, scaled nominal,
    scaled lb, scaled ub)."""
    noise = profiled_sigma(pp)
    rows = []
    for pid, r in pp.parameter_df.iterrows():
        if not int(r.get("estimate", 1)) or str(pid) == noise:
            continue
        scale = str(r.get("parameterScale", "lin")).strip() or "lin"
        lb, ub = float(r["lowerBound"]), float(r["upperBound"])
        nom = r.get("nominalValue", np.nan)
        if _empty(nom):
            v = 0.5 * (_scale(lb, scale) + _scale(ub, scale))
        else:
            v = _scale(float(nom), scale)
        rows.append((str(pid), v, _scale(lb, scale), _scale(ub, scale)))
    return rows


def suite_starts(params, starts=4, spread=0.3, seed=0):
    """The starts of ``petab_suite.py`` (its ``start_box`` + the runner's
    ``multistart_starts(n=starts-1, space='linear', starts=[u0], seed=seed)``):
    the nominal point, then ``starts - 1`` scrambled Sobol points in nominal ±
    ``spread`` clipped to the bounds.  ``params``: rows (id, value, lb, ub) on
    the parameters' scales (:func:`suite_start_parameters`).  Returns a
    DataFrame, one start a row, the parameter ids as columns."""
    from scipy.stats import qmc
    names = [p[0] for p in params]
    u0 = np.array([p[1] for p in params], dtype=float)
    rows = [u0.tolist()]
    n = starts - 1
    if n > 0:
        lo, hi = [], []
        for _, v, lb, ub in params:
            a = v - spread if lb is None else max(lb, v - spread)
            b = v + spread if ub is None else min(ub, v + spread)
            if not b > a:                   # no box: the runner falls back to the bounds
                a, b = lb, ub
            lo.append(float(a))
            hi.append(float(b))
        lo, hi = np.array(lo), np.array(hi)
        rng = np.random.default_rng(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)      # balance note for n != 2^k
            warnings.simplefilter("ignore", DeprecationWarning)
            U = qmc.Sobol(len(params), scramble=True, seed=rng).random(n)
        X = lo + U * (hi - lo)
        rows += [x.tolist() for x in X]
    return pd.DataFrame(rows, columns=names)


# ---------------------------------------------------------------------------
# AMICI / pyPESTO
# ---------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _module_name(name):
    s = re.sub(r"\W", "_", name)
    return s if s[:1].isalpha() else f"m_{s}"


def import_problem(folder, cache_dir):
    """PEtab tables -> pyPESTO problem on an AMICI model compiled into the cache."""
    import amici
    import petab.v1 as petab
    from pypesto.petab import PetabImporter
    name = os.path.basename(folder)
    out = os.path.join(cache_dir, name)
    pp = petab.Problem.from_yaml(yaml_of(folder))
    importer = PetabImporter(pp, output_folder=out, model_name=_module_name(name))
    creator = importer.create_objective_creator()
    compiled = creator._must_compile(False)
    t0 = time.perf_counter()
    model = creator.create_model(verbose=False)
    compile_s = time.perf_counter() - t0 if compiled else 0.0
    objective = creator.create_objective(model=model)
    problem = importer.create_problem(objective=objective)
    return dict(pp=pp, importer=importer, model=model, objective=objective, problem=problem,
                compiled=compiled, compile_s=compile_s, amici=amici)


def amici_solvers(imp):
    """The AMICI solvers of the imported objective and of the problem's objective
    (pyPESTO copies it into the problem, inside an aggregate when there are priors)."""
    out, todo = [], [imp["objective"], imp["problem"].objective]
    while todo:
        obj = todo.pop()
        if hasattr(obj, "amici_solver"):
            out.append(obj.amici_solver)
        todo.extend(getattr(obj, "_objectives", []))
    return out


def amici_nll(imp, x_full=None, tol=None):
    """Minus AMICI's llh (no priors) at the scaled full PEtab vector (None: nominal);
    ``tol``: rtol = atol of a copy of the solver (default: the objective's solver)."""
    from amici.sim.sundials.petab.v1 import LLH, simulate_petab
    pp = imp["pp"]
    solver = imp["objective"].amici_solver
    if tol is not None:
        solver = solver.clone()
        solver.set_relative_tolerance(tol)
        solver.set_absolute_tolerance(tol)
    if x_full is None:
        r = simulate_petab(pp, amici_model=imp["model"], solver=solver)
    else:
        pars = dict(zip(pp.x_ids, np.asarray(x_full, dtype=float)))
        r = simulate_petab(pp, amici_model=imp["model"], solver=solver,
                           problem_parameters=pars, scaled_parameters=True)
    llh = r[LLH]
    return -float(llh) if llh is not None else float("nan")


def evaluation_time(prob, x, repeats=5):
    """Median seconds of pyPESTO's objective and gradient (``sensi_orders=(0, 1)``) at
    ``x`` (free parameters); the first of ``repeats + 1`` calls not counted, the points
    1e-12 apart (relative) as in ``petab_import.py``."""
    times = []
    for k in range(repeats + 1):
        t = time.perf_counter()
        with _quiet():
            prob.objective(np.asarray(x, dtype=float) * (1 + 1e-12 * k), sensi_orders=(0, 1))
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))


def full_starts(imp, S):
    """Suite starts (package's free parameters) -> full pyPESTO vectors (x_ids):
    nominal values elsewhere (noise parameters, fixed ones), within pyPESTO's bounds."""
    pp, prob = imp["pp"], imp["problem"]
    ids = list(pp.x_ids)
    base = np.asarray(pp.x_nominal_scaled, dtype=float)
    lb, ub = np.asarray(prob.lb_full, dtype=float), np.asarray(prob.ub_full, dtype=float)
    X = np.tile(base, (len(S), 1))
    for c in S.columns:
        X[:, ids.index(c)] = S[c].to_numpy(dtype=float)
    free = prob.x_free_indices
    X[:, free] = np.clip(X[:, free], lb[free], ub[free])    # 1-ulp log10 differences
    return X


def optimize(imp, X, max_wall_time=None):
    """pyPESTO + fides from each row of X (full vectors), one start at a time."""
    import fides
    from pypesto.engine import SingleCoreEngine
    from pypesto.optimize import FidesOptimizer, minimize
    prob = imp["problem"]
    t0 = time.perf_counter()
    out = []
    for i, x in enumerate(X):
        left = None if max_wall_time is None else max_wall_time - (time.perf_counter() - t0)
        if left is not None and left <= 0:
            out.append(dict(start=i, fval=np.nan, exitflag=0, x=None, message="not run: "
                            "max-wall-time", time=0.0, n_fval=0, n_grad=0))
            continue
        opts = {} if left is None else {fides.Options.MAXTIME: float(left)}
        prob.set_x_guesses(x[None, :])
        ts = time.perf_counter()
        with _quiet():
            res = minimize(prob, optimizer=FidesOptimizer(options=opts, verbose=logging.ERROR),
                           n_starts=1, ids=[str(i)], engine=SingleCoreEngine(),
                           progress_bar=False)
        r = res.optimize_result.list[0]
        out.append(dict(start=i, fval=float(r.fval) if r.fval is not None else np.nan,
                        exitflag=int(r.exitflag) if r.exitflag is not None else 0,
                        x=None if r.x is None else np.asarray(r.x, dtype=float),
                        message=str(r.message), time=time.perf_counter() - ts,
                        n_fval=int(r.n_fval or 0), n_grad=int(r.n_grad or 0)))
    return out


def run_problem(folder, args, ref):
    name = os.path.basename(folder)
    row = dict(name=name, reference_nll=ref.get(name, np.nan))
    t0 = time.perf_counter()
    try:
        with _quiet():
            imp = import_problem(folder, args.cache_dir)
    except Exception as err:  # noqa: BLE001 - reported as the status
        row.update(import_s=time.perf_counter() - t0, status=f"import_failed:{type(err).__name__}",
                   detail=str(err).splitlines()[0][:200] if str(err) else "")
        return row
    row["import_s"] = time.perf_counter() - t0
    row["compiled"] = int(imp["compiled"])
    row["compile_s"] = imp["compile_s"]
    pp, prob = imp["pp"], imp["problem"]
    # pyPESTO's problem holds its own copy of the objective (inside an aggregate when
    # the problem has priors): the tolerances are set on both solvers
    for solver in amici_solvers(imp):
        if args.rtol is not None:
            solver.set_relative_tolerance(args.rtol)
        if args.atol is not None:
            solver.set_absolute_tolerance(args.atol)
    row["rtol"], row["atol"] = solver.get_relative_tolerance(), solver.get_absolute_tolerance()
    row["priors"] = int(prob.x_priors is not None)
    row["n_free"] = len(prob.x_free_indices)
    params = suite_start_parameters(pp)
    row["n_sampled"] = len(params)
    noise = sorted(set(pp.x_free_ids) - {p[0] for p in params})
    row["noise_parameters"] = ",".join(noise) or "-"

    t1, c1 = time.perf_counter(), time.process_time()
    row["nominal_nll"] = amici_nll(imp)
    x_nom = np.asarray(pp.x_nominal_scaled, dtype=float)
    with _quiet():
        row["nominal_obj"] = float(prob.objective(x_nom[prob.x_free_indices]))
    row["nominal_s"] = time.perf_counter() - t1
    t2, c2 = time.perf_counter(), time.process_time()
    row["eval_s"] = evaluation_time(prob, x_nom[prob.x_free_indices])
    # wall_s and cpu_s: the nominal simulation and the starts, not this timing
    t1, c1 = t1 + time.perf_counter() - t2, c1 + time.process_time() - c2
    if args.import_only:
        row.update(starts=0, converged=0, hits=0, best_obj=np.nan, best_nll=np.nan,
                   wall_s=time.perf_counter() - t1, cpu_s=time.process_time() - c1, capped=0,
                   status="ok")
        row["nominal_nll_tight"] = amici_nll(imp, tol=1e-12)
        return row
    S = suite_starts(params, args.starts, args.spread, args.seed)
    X = full_starts(imp, S)
    runs = optimize(imp, X, None if args.max_wall_time is None
                    else args.max_wall_time - (time.perf_counter() - t1))
    fvals = np.array([r["fval"] for r in runs], dtype=float)
    ok = np.isfinite(fvals)
    row["starts"] = len(runs)
    row["converged"] = int(sum(r["exitflag"] in CONVERGED for r in runs))
    if ok.any():
        b = int(np.nanargmin(np.where(ok, fvals, np.inf)))
        row["best_obj"] = float(fvals[b])
        row["best_start"] = b
        row["hits"] = int(np.sum(fvals[ok] <= fvals[b] + 1e-3))
        row["best_nll"] = amici_nll(imp, runs[b]["x"])
    else:
        row.update(best_obj=np.nan, best_start=-1, hits=0, best_nll=np.nan)
    row["wall_s"] = time.perf_counter() - t1
    row["cpu_s"] = time.process_time() - c1
    row["exitflags"] = ";".join(str(r["exitflag"]) for r in runs)
    row["start_nll"] = ";".join(f"{f:.6f}" for f in fvals)
    row["start_s"] = ";".join(f"{r['time']:.1f}" for r in runs)
    row["capped"] = int(any(r["exitflag"] == -2 or r["message"].startswith("not run")
                            for r in runs))
    row["status"] = "ok"
    row["nominal_nll_tight"] = amici_nll(imp, tol=1e-12)     # not timed
    if ok.any():
        xb = runs[row["best_start"]]["x"]
        row["best_nll_tight"] = amici_nll(imp, xb, tol=1e-12)
        row["best_x"] = ";".join(f"{k}={v:.17g}" for k, v in zip(pp.x_ids, xb))
    for r in runs:
        print(f"  {name} start {r['start']}: exitflag {r['exitflag']} ({r['message'][:60]}), "
              f"objective {r['fval']:.6f}, {r['n_fval']} fval {r['n_grad']} grad, "
              f"{r['time']:.1f} s", flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=[DEFAULT])
    ap.add_argument("--starts", type=int, default=4,
                    help="the nominal point and starts-1 Sobol points (as petab_suite.py)")
    ap.add_argument("--spread", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-wall-time", type=float, default=None,
                    help="cap (seconds) of a problem's nominal simulation + all starts")
    ap.add_argument("--cache-dir", default=CACHE,
                    help="compiled AMICI models, one folder per problem (reused)")
    ap.add_argument("--rtol", type=float, default=None,
                    help="relative tolerance of AMICI's solver (default: AMICI's, 1e-8)")
    ap.add_argument("--atol", type=float, default=None,
                    help="absolute tolerance of AMICI's solver (default: AMICI's, 1e-16; "
                         "the package's CVODES engine uses 1e-12)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "amici_peer.tsv"))
    ap.add_argument("--import-only", action="store_true",
                    help="import (compile into the cache) and the nominal NLL only, no fits")
    ap.add_argument("--print-starts", action="store_true",
                    help="print the suite's starts of every problem (no AMICI import, no fit)")
    args = ap.parse_args(argv)
    folders = problem_folders(args.folders)
    if args.print_starts:
        import petab.v1 as petab
        for f in folders:
            pp = petab.Problem.from_yaml(yaml_of(f))
            S = suite_starts(suite_start_parameters(pp), args.starts, args.spread, args.seed)
            print(f"# {os.path.basename(f)}")
            print(S.to_csv(sep="\t", index=False, float_format="%.17g"), end="")
        return 0
    os.environ.setdefault("AMICI_PARALLEL_COMPILE", "2")
    # model compilation calls `swig`: pip's swig lives beside this interpreter, which
    # need not be on PATH (the venv's python run by its full path)
    bindir = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(bindir, "swig")):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    # library imports outside the timed spans
    import amici  # noqa: F401
    import fides  # noqa: F401
    import pypesto.optimize  # noqa: F401
    import pypesto.petab  # noqa: F401
    from amici.sim.sundials.petab.v1 import simulate_petab  # noqa: F401
    # AMICI's modules set their own loggers' levels (its PEtab parameter mapping logs
    # at DEBUG under pyPESTO): silence INFO and below everywhere
    logging.disable(logging.INFO)
    ref = references(folders)
    rows = []
    for f in folders:
        row = run_problem(f, args, ref)
        rows.append(row)
        if row["status"] != "ok":
            print(f"amici_problem: name={row['name']} nominal_nll=nan best_nll=nan wall_s=nan "
                  f"import_s={row['import_s']:.1f} starts=0 converged=0 status={row['status']} "
                  f"detail={row.get('detail', '')!r}", flush=True)
            continue
        extra = (f" reference_nll={row['reference_nll']:.6f}"
                 if np.isfinite(row["reference_nll"]) else "")
        if row["priors"]:
            extra += f" nominal_obj={row['nominal_obj']:.6f} best_obj={row['best_obj']:.6f}"
        print(f"amici_problem: name={row['name']} nominal_nll={row['nominal_nll']:.6f} "
              f"best_nll={row['best_nll']:.6f} wall_s={row['wall_s']:.1f} "
              f"import_s={row['import_s']:.1f} starts={row['starts']} "
              f"converged={row['converged']}{extra} hits={row['hits']} cpu_s={row['cpu_s']:.1f} "
              f"nominal_s={row['nominal_s']:.2f} eval_s={row.get('eval_s', np.nan):.4f} "
              f"compiled={row['compiled']} "
              f"capped={row['capped']} atol={row['atol']:g} "
              f"noise_parameters={row['noise_parameters']}", flush=True)
    tab = pd.DataFrame(rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tab.to_csv(args.out, sep="\t", index=False, float_format="%.10g")
    walls = [r["wall_s"] for r in rows if "wall_s" in r]
    print(f"amici_peer: problems={len(rows)} imported={sum(r['status'] == 'ok' for r in rows)} "
          f"median_wall_s={np.median(walls) if walls else float('nan'):.1f}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
