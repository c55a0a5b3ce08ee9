"""Command line: ``pyomo-odeest MODEL.py DATA.csv [options]``.

Problem file format
-------------------
``MODEL.py`` is a Python module that defines

* ``states``: list of state names,
* ``parameters``: list of ``pyomo_odeest.Parameter`` (or of names),
* ``rhs(x, u, t)``: right-hand side on Pyomo objects (one expression per state),
* ``initial``: mapping state -> number | parameter name | callable(u),

and optionally ``observe`` (list of states or ``g(x, u, t)`` returning a
mapping), ``sigma`` / ``weights``, ``t0``, ``T``, ``penalty``, ``inputs``
(mapping name -> ``PiecewiseConstant`` / ``PiecewiseLinear`` / ``Spline``),
``constraints`` (list of ``PathConstraint`` / ``ParameterConstraint``), and
``options`` (a dict of default command-line options, e.g.
``{"scheme": "enright", "qmax": 3}``).

``DATA.csv`` holds the measurements: *wide* (first column ``time``, one
column per observed quantity, empty = not measured) or *long* (columns
``time``, ``name``, ``value`` and optionally ``sigma``).

Outputs (``--out DIR``): ``estimates.csv``, ``states.csv``, ``fitted.csv``,
``result.json`` and, unless ``--no-plot``, ``fit.png``; with
``--approach compare`` also ``comparison.csv``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd

APPROACHES = ("simultaneous", "reduced_space", "multiple_shooting", "compare")
SCHEMES = ("adams_pc", "adams_moulton", "enright", "semi_implicit_enright")


def _parser():
    p = argparse.ArgumentParser(
        prog="pyomo-odeest",
        description="Estimate ODE parameters by full discretization (Pyomo + Ipopt via cyipopt).",
        epilog="Problem file format: see `python -m pyomo_odeest.cli --help` and docs/cli.md.")
    p.add_argument("model", help="Python module defining states, parameters, rhs(x, u, t), initial "
                   "(optionally observe, sigma, weights, t0, T, options)")
    p.add_argument("data", help="CSV with the measurements (wide: time + one column per observed "
                   "quantity; long: time, name, value[, sigma])")
    p.add_argument("--approach", choices=APPROACHES, default=None,
                   help="simultaneous (Pyomo block + Ipopt, default), reduced_space (single "
                   "shooting with the discrete adjoint), multiple_shooting, or compare (all "
                   "available, side by side)")
    p.add_argument("--scheme", choices=SCHEMES, default=None,
                   help="discretization scheme (default adams_pc)")
    p.add_argument("--qmax", type=int, default=None, help="maximum corrector order Q_max (default 4)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps-per-interval", type=int, default=None,
                   help="equal steps between consecutive measurement times (default 10)")
    g.add_argument("--max-step", type=float, default=None, help="largest integration step")
    p.add_argument("--tol", type=float, default=None, help="Ipopt tolerance (default 1e-8)")
    p.add_argument("--max-iter", type=int, default=None, help="Ipopt iteration limit")
    p.add_argument("--tee", action="store_true", help="show Ipopt's iteration log (progress)")
    p.add_argument("--out", default="odeest_results", help="output directory (created)")
    p.add_argument("--no-plot", action="store_true", help="do not write fit.png")
    return p


def load_model_file(path):
    """Import the problem module; return it."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"error: model file {path} not found")
    spec = importlib.util.spec_from_file_location(f"_odeest_model_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    missing = [a for a in ("states", "parameters", "rhs", "initial") if not hasattr(mod, a)]
    if missing:
        raise SystemExit(f"error: {path} must define {', '.join(missing)}")
    return mod


def read_data(path):
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"error: data file {path} not found")
    df = pd.read_csv(path)
    cols = [c.lower() for c in df.columns]
    if "time" not in cols:
        raise SystemExit(f"error: {path} needs a 'time' column")
    if "value" in cols and ("name" in cols or "observable" in cols):
        return df
    df = df.rename(columns={df.columns[cols.index("time")]: "time"}).set_index("time")
    return df


def build_problem(mod, data):
    from .problem.declaration import EstimationProblem
    kw = {k: getattr(mod, k) for k in ("observe", "sigma", "weights", "t0", "T", "loss",
                                       "penalty", "inputs", "constraints")
          if hasattr(mod, k)}
    return EstimationProblem(states=mod.states, parameters=mod.parameters, rhs=mod.rhs,
                             initial=mod.initial, data=data,
                             name=Path(getattr(mod, "__file__", "model")).stem, **kw)


def main(argv=None):
    args = _parser().parse_args(argv)
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)
    import pyomo_odeest  # noqa: F401
    from .analysis.compare import APPROACHES as REGISTERED, compare_approaches, plot_fits
    from .problem.declaration import ProblemError

    mod = load_model_file(args.model)
    defaults = dict(getattr(mod, "options", {}) or {})
    approach = args.approach or defaults.get("approach", "simultaneous")
    scheme = args.scheme or defaults.get("scheme", "adams_pc")
    qmax = args.qmax or defaults.get("qmax", 4)
    spi = args.steps_per_interval or defaults.get("steps_per_interval")
    max_step = args.max_step or defaults.get("max_step")
    if spi is None and max_step is None:
        spi = 10
    options = {}
    if args.tol is not None:
        options["tol"] = args.tol
    if args.max_iter is not None:
        options["max_iter"] = args.max_iter
    try:
        problem = build_problem(mod, read_data(args.data))
    except ProblemError as err:
        raise SystemExit(f"error: {err}")
    print(problem)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = dict(scheme=scheme, qmax=qmax, steps_per_interval=spi, max_step=max_step)
    if approach == "compare":
        names = [a for a in ("simultaneous", "reduced_space", "multiple_shooting") if a in REGISTERED]
        table, results = compare_approaches(problem, names, options=options or None, **common)
        print(table.to_string())
        table.to_csv(out / "comparison.csv")
        best = [r for r in results.values() if r.success]
        res = min(best, key=lambda r: r.objective) if best else next(iter(results.values()))
    else:
        if approach not in REGISTERED:
            raise SystemExit(f"error: approach {approach!r} is not available in this installation")
        fn, kw = REGISTERED[approach]
        kwargs = dict(common)
        kwargs.update(kw)
        if options:
            kwargs["options"] = options
        if approach == "simultaneous":
            kwargs["tee"] = args.tee
        res = fn(problem, **kwargs)
        results = {approach: res}
    print(res.summary())
    print(res.estimates.to_string())
    res.estimates.to_frame().to_csv(out / "estimates.csv", index_label="parameter")
    if res.states is not None:
        res.states.to_csv(out / "states.csv")
    if res.fitted is not None:
        res.fitted.to_csv(out / "fitted.csv")
    info = dict(approach=res.approach, method=res.method, scheme=res.scheme,
                estimates={k: float(v) for k, v in res.estimates.items()},
                objective=float(res.objective), status=res.status, success=bool(res.success),
                iterations=int(res.iterations), timings={k: float(v) for k, v in res.timings.items()})
    (out / "result.json").write_text(json.dumps(info, indent=2))
    if not args.no_plot:
        try:
            plot_fits(problem, results, path=out / "fit.png")
        except ImportError as err:
            print(f"note: {err}", file=sys.stderr)
    print(f"wrote {out}/")
    return 0 if res.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
