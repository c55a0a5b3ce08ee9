"""Command line: ``pyomo-odeest MODEL.py DATA.csv [options]`` and
``pyomo-odeest petab PROBLEM [options]``.

The problem file (``states``, ``parameters`` (Parameters or names), ``rhs(x, u, t)``,
``initial``; optionally the names of :data:`PROBLEM_KEYS` and ``options``, a dict of
default command-line options), the data file (wide or long CSV), the options, the exit
codes (2 usage error, 1 estimation failed or not converged) and the outputs
(``--out DIR``; ``--approach compare``: ``comparison.csv``) are described in
docs/cli.md, section "Command line"; the ``petab`` subcommand
(:func:`~pyomo_odeest.petab_io.fit_petab` on a PEtab folder or YAML file) in its
section "PEtab problems".
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd

from .approaches import APPROACH_NAMES
from .discretization import SCHEMES

#: ``--approach`` choices: the approaches of :func:`~pyomo_odeest.approaches.estimate`, and
#: ``compare`` (all of them, one table).
APPROACHES = tuple(APPROACH_NAMES) + ("compare",)
#: Names a model file may define (besides ``states``, ``parameters``, ``rhs``, ``initial``)
#: that are passed to :class:`~pyomo_odeest.EstimationProblem`.
PROBLEM_KEYS = ("observe", "sigma", "weights", "t0", "T", "loss", "penalty", "inputs",
                "constraints")
#: Command-line options a model file's ``options`` dict may set.
OPTION_KEYS = ("approach", "scheme", "qmax", "steps_per_interval", "max_step", "tol", "max_iter")


class UsageError(Exception):
    """A bad option, file or problem: exit code 2."""


class EstimationFailed(Exception):
    """The estimation ran and failed: exit code 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):          # one line, no usage dump
        raise UsageError(message)


def _arg(cast, kind, test, what):
    """An argument converted by ``cast`` (else "is not ``kind``") that satisfies ``test``
    (else ``what`` is said of it)."""
    def conv(text):
        try:
            v = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if not test(v):
            raise argparse.ArgumentTypeError(f"{v} {what}")
        return v
    return conv


def _int_in(lo, hi=None):
    return _arg(int, "an integer", lambda v: lo <= v and (hi is None or v <= hi),
                f"is out of range: valid {lo}..{hi}" if hi is not None else
                f"is out of range: must be >= {lo}")


_positive_float = _arg(float, "a number", lambda v: 0 < v < float("inf"),
                       "must be a positive finite number")
_level = _arg(float, "a number", lambda v: 0 < v < 1, "must be between 0 and 1 (e.g. 0.95)")


def _parser():
    from .discretization.schemes import DEFAULT_QMAX, QMAX_RANGE
    p = _Parser(
        prog="pyomo-odeest",
        description="Estimate ODE parameters by full discretization (Pyomo + Ipopt via cyipopt).",
        epilog="Problem file format: see `python -m pyomo_odeest.cli --help` and docs/cli.md. "
               "PEtab problems: `pyomo-odeest petab PROBLEM [options]` (its --help). "
               "Exit codes: 0 success, 1 estimation failed or not converged, 2 usage error.")
    p.add_argument("model", help="Python module defining states, parameters, rhs(x, u, t), initial "
                   "(optionally observe, sigma, weights, loss, penalty, t0, T, inputs, constraints, "
                   "options)")
    p.add_argument("data", help="CSV with the measurements (wide: time + one column per observed "
                   "quantity; long: time, name, value[, sigma])")
    p.add_argument("--approach", choices=APPROACHES, default=None,
                   help="an approach of pyomo_odeest.estimate (default simultaneous), or "
                   "compare (all of them, one table in comparison.csv)")
    p.add_argument("--scheme", choices=SCHEMES, default=None,
                   help="discretization scheme (default adams_pc)")
    p.add_argument("--qmax", type=_int_in(*QMAX_RANGE), default=None,
                   help=f"maximum corrector order Q_max, {QMAX_RANGE[0]}..{QMAX_RANGE[1]} (default: "
                   f"the approach's, {DEFAULT_QMAX} for the schemes)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps-per-interval", type=_int_in(1), default=None,
                   help="equal steps between consecutive measurement times, >= 1 (default 10)")
    g.add_argument("--max-step", type=_positive_float, default=None,
                   help="largest integration step (> 0)")
    p.add_argument("--tol", type=_positive_float, default=None, help="Ipopt tolerance (default 1e-8)")
    p.add_argument("--max-iter", type=_int_in(0), default=None, help="Ipopt iteration limit")
    p.add_argument("--level", type=_level, default=0.95,
                   help="confidence level of the intervals in the output (default 0.95)")
    p.add_argument("--tee", action="store_true", help="show the solver's iteration log (progress)")
    p.add_argument("--out", default="odeest_results", help="output directory (created)")
    p.add_argument("--no-plot", action="store_true", help="do not write fit.png")
    return p


def load_model_file(path):
    """Import the problem module; return it (:class:`UsageError` naming the file otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"model file {path} not found")
    spec = importlib.util.spec_from_file_location(f"_odeest_model_{path.stem}", path)
    if spec is None:
        raise UsageError(f"model file {path} is not a Python module (*.py)")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as err:
        raise UsageError(f"model file {path}, line {err.lineno}: syntax error: {err.msg}") from None
    except Exception as err:
        raise UsageError(f"model file {path} failed to run: {type(err).__name__}: {err}") from None
    missing = [a for a in ("states", "parameters", "rhs", "initial") if not hasattr(mod, a)]
    if missing:
        raise UsageError(f"{path} must define {', '.join(missing)}")
    opts = getattr(mod, "options", None) or {}
    if not isinstance(opts, dict):
        raise UsageError(f"{path}: options must be a dict, got {type(opts).__name__}")
    unknown = sorted(set(opts) - set(OPTION_KEYS))
    if unknown:
        raise UsageError(f"{path}: options has unknown key(s) {unknown}; valid: {list(OPTION_KEYS)}")
    return mod


def read_data(path):
    """The CSV as a DataFrame (wide: indexed by time; long: as read)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"data file {path} not found")
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise UsageError(f"data file {path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"data file {path} is not a readable CSV: {msg}") from None
    if df.shape[0] == 0:
        raise UsageError(f"data file {path} has a header but no rows")
    cols = [str(c).strip().lower() for c in df.columns]
    if "time" not in cols:
        raise UsageError(f"{path} needs a 'time' column (columns: {list(df.columns)})")
    if "value" in cols and ("name" in cols or "observable" in cols):
        return df
    return df.rename(columns={df.columns[cols.index("time")]: "time"}).set_index("time")


def build_problem(mod, data):
    from .problem._declaration import EstimationProblem
    kw = {k: getattr(mod, k) for k in PROBLEM_KEYS if hasattr(mod, k)}
    return EstimationProblem(states=mod.states, parameters=mod.parameters, rhs=mod.rhs,
                             initial=mod.initial, data=data,
                             name=Path(getattr(mod, "__file__", "model")).stem, **kw)


def _setting(args, defaults, name, fallback=None):
    """The command line's value, else the model file's, else ``fallback`` (0 is a value)."""
    v = getattr(args, name)
    return v if v is not None else defaults.get(name, fallback)


def _run(argv):
    args = _parser().parse_args(argv)
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)
    import pyomo_odeest  # noqa: F401
    from .analysis import plot_fits

    mod = load_model_file(args.model)
    defaults = dict(getattr(mod, "options", None) or {})
    approach = _setting(args, defaults, "approach", "simultaneous")
    if approach not in APPROACHES:
        raise UsageError(f"approach {approach!r} (model file options) is not one of {list(APPROACHES)}")
    scheme = _setting(args, defaults, "scheme", "adams_pc")
    qmax = _setting(args, defaults, "qmax")       # None: each approach's default
    spi = _setting(args, defaults, "steps_per_interval")
    max_step = _setting(args, defaults, "max_step")
    if args.max_step is not None and args.steps_per_interval is None:
        spi = None                      # the command line's --max-step replaces the file's steps
    if args.steps_per_interval is not None and args.max_step is None:
        max_step = None
    if spi is None and max_step is None:
        spi = 10
    options = {k: v for k in ("tol", "max_iter") if (v := _setting(args, defaults, k)) is not None}
    problem = build_problem(mod, read_data(args.data))
    print(problem)
    settings = dict(scheme=scheme, qmax=qmax, steps_per_interval=spi, max_step=max_step,
                    options=options or None, tee=args.tee)
    names = list(APPROACH_NAMES) if approach == "compare" else [approach]
    given = {k for k in ("scheme", "qmax", "steps_per_interval", "max_step")
             if getattr(args, k) is not None or k in defaults}
    # every argument is checked before anything runs
    from .discretization._size_guard import validate_estimator
    for a in names:
        kw = _options_for(a, settings)
        dropped = sorted(given - set(kw))
        if dropped:
            print(f"note: the {a} approach does not take {', '.join(dropped)} (not applied)",
                  file=sys.stderr)
        validate_estimator(a, problem, **kw)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create the output directory {out}: {err}") from None
    if approach == "compare":
        return _compare(problem, names, settings, args, out, plot_fits)
    from .approaches import estimate
    res = estimate(problem, approach, **_options_for(approach, settings))
    print(res.summary())
    ci = _intervals(res, args.level)
    print(f"estimates with standard errors and {args.level:.0%} intervals:")
    print(ci.to_string())
    ci.to_csv(out / "estimates.csv", index_label="parameter")
    if res.states is not None:
        res.states.to_csv(out / "states.csv")
    if res.fitted is not None:
        res.fitted.to_csv(out / "fitted.csv")
    _write(out, _info(res, ci, args.level), plot_fits, problem, {approach: res}, args)
    if not res.success:
        raise EstimationFailed(f"the estimation did not converge ({res.status}); results "
                               f"written to {out}/")
    return 0


def _options_for(approach, settings):
    """The command line's settings that ``approach`` takes
    (:func:`~pyomo_odeest.approaches.approach_options`); None values left out."""
    from .approaches import approach_options
    accepted = set(approach_options(approach))
    return {k: v for k, v in settings.items() if k in accepted and v is not None}


def _intervals(res, level):
    """Estimates with standard errors and Wald intervals (the result's default covariance);
    NaN with a ``status`` saying why when the covariance cannot be computed."""
    try:
        ci = res.confidence_intervals(level)
    except Exception as err:          # reported in the table, never fatal
        nan = float("nan")
        ci = pd.DataFrame({"estimate": res.estimates.astype(float), "se": nan, "lower": nan,
                           "upper": nan, "status": f"no covariance: {type(err).__name__}: {err}"})
        ci.index.name = "parameter"
    return ci


def _num(v):
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None


def _info(res, ci, level):
    return dict(approach=res.approach, method=res.method, scheme=res.scheme_label,
                estimates={k: float(v) for k, v in res.estimates.items()},
                standard_errors={k: _num(v) for k, v in ci["se"].items()},
                intervals={k: [_num(lo), _num(hi)] for k, lo, hi in
                           zip(ci.index, ci["lower"], ci["upper"])},
                level=float(level),
                objective=_num(res.objective), status=str(res.status), message=res.message,
                success=bool(res.success),
                iterations=int(res.iterations),
                timings={k: float(v) for k, v in res.timings.items()},
                warnings=list(res.warnings))


def _write(out, info, plot_fits, problem, results, args):
    """``result.json`` from ``info`` and, unless ``--no-plot``, ``fit.png`` of ``results``."""
    (out / "result.json").write_text(json.dumps(info, indent=2))
    if not args.no_plot and results:
        try:
            plot_fits(problem, results, path=out / "fit.png")
        except ImportError as err:
            print(f"note: {err}", file=sys.stderr)
    print(f"wrote {out}/")


def _compare(problem, names, settings, args, out, plot_fits):
    """Every approach from the same start: one table (``comparison.csv``), one JSON entry
    per approach, one figure."""
    from .analysis import compare_approaches

    table, results = compare_approaches(problem, [(a, a, _options_for(a, settings))
                                                  for a in names])
    rows, info = [], {}
    for a in names:
        row = {"status": table.loc[a, "status"], "success": bool(table.loc[a, "success"])}
        res = results.get(a)
        if res is None:
            rows.append(row)
            info[a] = dict(status=row["status"], success=False)
            continue
        ci = _intervals(res, args.level)
        row.update(objective=float(res.objective), iterations=int(res.iterations),
                   wall_s=float(res.timings.get("total_s", float("nan"))))
        for p in ci.index:
            row[p] = float(ci.loc[p, "estimate"])
            row[f"se_{p}"] = float(ci.loc[p, "se"])
        rows.append(row)
        info[a] = _info(res, ci, args.level)
    comp = pd.DataFrame(rows, index=pd.Index(names, name="approach"))
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        print(comp.to_string())
    comp.to_csv(out / "comparison.csv")
    _write(out, info, plot_fits, problem, results, args)
    if not any(r.success for r in results.values()):
        raise EstimationFailed("no approach converged: " + "; ".join(
            f"{a}: {s}" for a, s in comp["status"].items()))
    return 0


def _petab_parser():
    from .petab_io._fit import DEFAULT_APPROACHES, LEAST_SQUARES
    from .petab_io._problem import NOISE_FORMS
    p = _Parser(
        prog="pyomo-odeest petab",
        description="Fit a PEtab problem: multistart over approaches, polish, noise "
                    "refinement, budgets (pyomo_odeest.fit_petab).",
        epilog="Exit codes: 0 converged (no worse than the reference), 1 not converged or "
               "failed, 2 usage error.  See docs/cli.md, \"PEtab problems\".")
    p.add_argument("problem", help="a folder holding one PEtab YAML file, or the YAML file")
    p.add_argument("--approaches", default=",".join(DEFAULT_APPROACHES),
                   help=f"comma-separated, tried in order: {LEAST_SQUARES} and the approaches "
                   f"of pyomo_odeest.estimate (default {','.join(DEFAULT_APPROACHES)})")
    p.add_argument("--starts", type=_int_in(1), default=4,
                   help="starts per approach: the nominal point and starts-1 Sobol points, "
                   ">= 1 (default 4)")
    p.add_argument("--spread", type=_positive_float, default=0.3,
                   help="half-width of the Sobol box around the nominal point, on the "
                   "parameters' scales (default 0.3)")
    p.add_argument("--scheme", choices=SCHEMES, default="enright",
                   help="scheme of the discrete approaches (default enright)")
    p.add_argument("--grid-points", type=_int_in(1), default=300,
                   help="largest step of the first grid = horizon / grid-points (default 300)")
    p.add_argument("--grid", choices=("auto", "uniform"), default="auto",
                   help="auto: the first grid's steps follow LSODA's at the start, growing by at "
                   "most 2x per step, at most horizon / grid-points (default); uniform: "
                   "horizon / grid-points")
    p.add_argument("--refine", type=_int_in(0), default=2,
                   help="tolerance refits of the continuous approaches (default 2)")
    p.add_argument("--max-wall-time", type=_nonnegative_float, default=120.0,
                   help="seconds of every fit, 0: no limit (default 120)")
    p.add_argument("--max-problem-time", type=_nonnegative_float, default=3600.0,
                   help="seconds of the whole fit from the import, 0: no limit (default 3600)")
    p.add_argument("--all-approaches", action="store_true",
                   help="run every approach (default: stop at the first that converges)")
    p.add_argument("--workers", type=_int_in(0), default=0,
                   help="Dask worker processes (default 0: serial)")
    p.add_argument("--seed", type=_int_in(0), default=0, help="seed of the Sobol starts")
    p.add_argument("--noise", choices=NOISE_FORMS, default="joint",
                   help="estimated noise parameters (other than one profiled sigma): fitted "
                   "with the other parameters (joint, default) or alternately after the fits")
    p.add_argument("--reference", type=_finite_float, default=None,
                   help="a reference NLL (default: references.tsv beside the problem, when "
                   "it lists it)")
    p.add_argument("--profiles", action="store_true",
                   help="profile likelihoods at the best fit (profiles.csv, profiles.png)")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show the progress bar (default: when standard error is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--quiet", action="store_true", help="no line per fit")
    p.add_argument("--out", default="odeest_results", help="output directory (created)")
    p.add_argument("--no-plot", action="store_true",
                   help="do not write waterfall.png, fit.png, profiles.png")
    return p


_nonnegative_float = _arg(float, "a number", lambda v: 0 <= v < float("inf"),
                          "must be a finite number >= 0")
_finite_float = _arg(float, "a number", lambda v: abs(v) < float("inf"), "must be finite")


def _reference_beside(folder, name):
    """The reference NLL of ``references.tsv`` in the problem's folder or its parent."""
    for parent in (folder, folder.parent):
        f = parent / "references.tsv"
        if f.is_file():
            try:
                tab = pd.read_csv(f, sep="\t", index_col="problem")
            except (ValueError, KeyError, pd.errors.ParserError):
                continue
            if name in tab.index and "reference_nll" in tab:
                return float(tab.loc[name, "reference_nll"])
    return None


def _run_petab(argv):
    args = _petab_parser().parse_args(argv)
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)
    from .petab_io._fit import FitSettings, fit_petab
    path = Path(args.problem)
    if not path.exists():
        raise UsageError(f"PEtab problem {path} not found (give a folder holding one PEtab "
                         "YAML file, or the YAML file)")
    folder = (path if path.is_dir() else path.parent).resolve()
    if path.is_dir() and not any(f.suffix in (".yaml", ".yml") for f in path.iterdir()):
        raise UsageError(f"{path} holds no PEtab YAML file")
    settings = dict(approaches=args.approaches, starts=args.starts, spread=args.spread,
                    scheme=args.scheme, grid_points=args.grid_points, grid=args.grid,
                    refine=args.refine, max_wall_time=args.max_wall_time,
                    max_problem_time=args.max_problem_time,
                    all_approaches=args.all_approaches, workers=args.workers, seed=args.seed,
                    noise=args.noise)
    try:
        FitSettings(**settings)
    except ValueError as err:
        raise UsageError(str(err)) from None
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create the output directory {out}: {err}") from None
    reference = args.reference if args.reference is not None else _reference_beside(
        folder, folder.name)
    try:
        from .petab_io import read_petab
        model = read_petab(str(path))
    except Exception as err:
        raise UsageError(f"cannot import the PEtab problem {path}: {type(err).__name__}: "
                         f"{err}") from None
    log = None if args.quiet else (lambda line: print(line, flush=True))
    fit = fit_petab(model, reference=reference, progress=args.progress, log=log, **settings)
    print(fit.summary())
    prof = None
    if args.profiles:
        if fit.status == "converged":
            prof = fit.profiles(progress=args.progress)
        else:
            print(f"note: no profiles: the fit is {fit.status}", file=sys.stderr)
    try:
        fit.to_folder(out, figures=not args.no_plot, profiles=prof)
    except ImportError as err:
        print(f"note: {err}", file=sys.stderr)
        fit.to_folder(out, figures=False, profiles=prof)
    print(f"wrote {out}/")
    if not fit.success:
        raise EstimationFailed(f"the fit is {fit.status}"
                               + (f" ({', '.join(fit.flags)})" if fit.flags else "")
                               + f"; results written to {out}/")
    return 0


def main(argv=None) -> int:
    """Run the command line; return the exit code (0, 1 failed estimation, 2 usage error)."""
    from .problem._validation import ProblemError
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["petab"]:
            return _run_petab(argv[1:])
        return _run(argv)
    except (UsageError, ProblemError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except EstimationFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
    except Exception as err:            # a failure of the estimation itself
        print(f"error: the estimation failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
