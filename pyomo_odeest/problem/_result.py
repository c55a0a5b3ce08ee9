"""The result object shared by every estimation backend."""
from __future__ import annotations

import json
import pickle
from dataclasses import MISSING, dataclass, field, fields, replace

import numpy as np
import pandas as pd

from ._status import Status, status_from_ipopt

__all__ = ["EstimationResult", "SchemeRef", "stack_experiments", "post_solve_checks"]


#: The analyses offered as methods of :class:`EstimationResult`,
#: ``name -> fn(result, ...)``, and the post-solve checks every approach runs
#: (``"diagnose"``, see :func:`post_solve_checks`).  :mod:`pyomo_odeest.analysis`
#: fills it when it is imported (importing any part of ``pyomo_odeest`` does, through
#: the package's ``__init__``), so this layer, and the approaches above it, import
#: nothing from the analysis layer.
RESULT_ANALYSES = {}


def _analysis(name):
    try:
        return RESULT_ANALYSES[name]
    except KeyError:
        raise RuntimeError(f"EstimationResult.{name} is provided by pyomo_odeest.analysis; "
                           "import pyomo_odeest first") from None


def post_solve_checks(problem, result):
    """Run the post-solve checks on ``result`` (status, active bounds, χ², rank,
    stability: :func:`pyomo_odeest.analysis._diagnostics.diagnose`) and return it.

    The estimation pipeline calls this once per result, so a doubtful result
    always carries its warnings in ``result.warnings``.  The checks live in the
    analysis layer and are reached through :data:`RESULT_ANALYSES`.
    """
    return _analysis("diagnose")(problem, result)


@dataclass(frozen=True)
class SchemeRef:
    """Name and maximum order of a scheme: what the JSON form of a result keeps of
    ``result.scheme`` (``get_scheme(ref.name, ref.qmax)`` rebuilds the scheme)."""

    name: str
    qmax: int | None = None

    def __str__(self):
        return f"{self.name}(qmax={self.qmax})"


class _ByBackend:
    """What an approach's ``collect_experiment`` gives as a frame its result's backend
    computes on first use (:data:`BY_BACKEND`)."""

    def __repr__(self):
        return "BY_BACKEND"


#: A frame left to the result's backend: ``adjoint`` by ``backend.adjoint_frame(u,
#: states)`` when the result's :attr:`~EstimationResult.adjoint` is first read.
BY_BACKEND = _ByBackend()


def stack_experiments(names, frames):
    """Per-experiment DataFrames as one frame indexed by ``(experiment, ...)``
    (None if any is None); without names (a problem without experiments) the one
    frame itself."""
    frames = list(frames)
    if not names:
        return frames[0]
    if any(f is None for f in frames):
        return None
    return pd.concat(dict(zip(names, frames)), names=["experiment"])

_SCALARS = (str, bool, int, float, type(None), np.bool_, np.integer, np.floating)


def _is_data(v) -> bool:
    """Numbers, strings, arrays, pandas objects and lists/tuples/dicts of them."""
    if isinstance(v, (_SCALARS, np.ndarray, pd.DataFrame, pd.Series)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_data(a) for a in v)
    if isinstance(v, dict):
        return all(isinstance(k, (str, int)) and _is_data(a) for k, a in v.items())
    return False


def _picklable(v) -> bool:
    """Whether ``v`` pickles (an approach class defined inside a function does not)."""
    try:
        pickle.dumps(v)
    except Exception:                           # noqa: BLE001 - any refusal of pickle
        return False
    return True


def _label(v):
    return v.item() if isinstance(v, np.generic) else v


def _index_to_json(idx: pd.Index) -> dict:
    """An index (or the columns) of a frame: its labels, each a list of levels for a
    :class:`pandas.MultiIndex`, and the names of its levels."""
    if isinstance(idx, pd.MultiIndex):
        return {"levels": [_label(n) for n in idx.names],
                "values": [[_label(a) for a in t] for t in idx]}
    return {"levels": [_label(idx.name)], "values": [_label(a) for a in idx]}


def _index_from_json(d) -> pd.Index:
    if not isinstance(d, dict) or not isinstance(d.get("values"), list) \
            or not isinstance(d.get("levels"), list) or not d["levels"]:
        raise ValueError("an index needs 'levels' (a non-empty list of names) and "
                         "'values' (a list of labels)")
    names, values = d["levels"], d["values"]
    if len(names) == 1:
        return pd.Index(values, name=names[0], tupleize_cols=False)
    if any(not isinstance(t, list) or len(t) != len(names) for t in values):
        raise ValueError(f"each label of an index of {len(names)} levels is a list of "
                         f"{len(names)} values")
    if not values:
        return pd.MultiIndex.from_arrays([[] for _ in names], names=names)
    return pd.MultiIndex.from_tuples([tuple(t) for t in values], names=names)


def _to_json(v):
    """A JSON-able structure; pandas and numpy objects carry a tag so they come back typed
    (the index of a frame or series with all its levels and their names: a frame of
    several experiments keeps its ``(experiment, time)`` index)."""
    if isinstance(v, pd.DataFrame):
        numeric = all(pd.api.types.is_numeric_dtype(t) for t in v.dtypes)
        return {"__frame__": {"index": _index_to_json(v.index),
                              "columns": _index_to_json(v.columns),
                              "numeric": numeric,
                              **({} if numeric else {"dtypes": [str(t) for t in v.dtypes]}),
                              "data": (v.to_numpy(dtype=float) if numeric
                                       else v.to_numpy(dtype=object)).tolist()}}
    if isinstance(v, pd.Series):
        return {"__series__": {"index": _index_to_json(v.index), "name": _label(v.name),
                               "data": v.to_numpy(dtype=float).tolist()}}
    if isinstance(v, np.ndarray):
        return {"__array__": v.tolist(), "dtype": str(v.dtype)}
    if isinstance(v, Status):
        return v.value
    if isinstance(v, tuple):
        return {"__tuple__": [_to_json(a) for a in v]}
    if isinstance(v, list):
        return [_to_json(a) for a in v]
    if isinstance(v, dict):
        return {"__dict__": [[_label(k), _to_json(a)] for k, a in v.items()]}
    return _label(v)


def _old_index(d, key, name_key):
    """The index of a frame or series written before the levels were kept: a flat list
    of labels (and one name)."""
    return pd.Index(d[key], name=d.get(name_key), tupleize_cols=False)


def _from_json(v):
    """Inverse of :func:`_to_json`; a malformed tag raises ValueError, KeyError or
    TypeError (:meth:`EstimationResult.from_dict` names the field)."""
    if isinstance(v, list):
        return [_from_json(a) for a in v]
    if not isinstance(v, dict):
        return v
    if "__frame__" in v:
        d = v["__frame__"]
        index = (_index_from_json(d["index"]) if isinstance(d["index"], dict)
                 else _old_index(d, "index", "index_name"))
        columns = (_index_from_json(d["columns"]) if isinstance(d["columns"], dict)
                   else pd.Index(d["columns"], tupleize_cols=False))
        data = np.array(d["data"], dtype=float if d["numeric"] else object)
        if data.size != len(index) * len(columns):
            raise ValueError(f"a frame of {len(index)} rows and {len(columns)} columns "
                             f"holds {data.size} values")
        frame = pd.DataFrame(data.reshape(len(index), len(columns)), index=index,
                             columns=columns)
        dtypes = d.get("dtypes")
        if dtypes is not None:                   # a table of strings and numbers: per column
            if len(dtypes) != len(columns):
                raise ValueError(f"{len(dtypes)} column types for {len(columns)} columns")
            frame = pd.concat([frame.iloc[:, j].astype(t) for j, t in enumerate(dtypes)],
                              axis=1) if len(columns) else frame
            frame.columns = columns
        return frame
    if "__series__" in v:
        d = v["__series__"]
        index = (_index_from_json(d["index"]) if isinstance(d["index"], dict)
                 else pd.Index(d["index"], tupleize_cols=False))
        data = np.array(d["data"], dtype=float)
        if data.shape != (len(index),):
            raise ValueError(f"a series of {len(index)} labels holds data of shape "
                             f"{data.shape}")
        return pd.Series(data, index=index, name=d["name"])
    if "__array__" in v:
        return np.array(v["__array__"], dtype=v["dtype"])
    if "__tuple__" in v:
        return tuple(_from_json(a) for a in v["__tuple__"])
    if "__dict__" in v:
        return {k: _from_json(a) for k, a in v["__dict__"]}
    return {k: _from_json(a) for k, a in v.items()}     # a plain JSON object (hand-written)


def _status(v) -> Status:
    """A :class:`Status` from a status or its value (JSON), or an Ipopt status name."""
    try:
        return Status.parse(v)
    except ValueError:
        return status_from_ipopt(v)


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _checked_fields(out: dict) -> dict:
    """The fields read by :meth:`EstimationResult.from_dict`, checked: a field of the
    wrong kind (a tampered or foreign file) raises ValueError naming it."""
    def bad(name, what):
        got = out[name]
        raise ValueError(f"EstimationResult.from_dict: field {name!r} must be {what}; got "
                         f"{type(got).__name__} {str(got)[:60]!r}")

    for name in ("approach", "method", "message"):
        if name in out and not isinstance(out[name], str):
            bad(name, "a string")
    if "status" in out:
        try:
            out["status"] = Status.parse(out["status"])
        except ValueError:
            bad("status", f"one of {[s.value for s in Status]}")
    est = out.get("estimates")
    if isinstance(est, dict) and all(isinstance(k, str) for k in est) \
            and all(_is_number(a) for a in est.values()):
        out["estimates"] = pd.Series({k: float(a) for k, a in est.items()}, dtype=float)
    elif "estimates" in out and not (isinstance(est, pd.Series)
                                     and all(isinstance(k, str) for k in est.index)):
        bad("estimates", "a mapping of parameter names to values")
    if "objective" in out and not (_is_number(out["objective"]) or out["objective"] is None):
        bad("objective", "a number")
    if "iterations" in out and not (isinstance(out["iterations"], (int, np.integer))
                                    and not isinstance(out["iterations"], bool)):
        bad("iterations", "an integer")
    for name in ("evaluations", "timings", "extra"):
        if name in out and not isinstance(out[name], dict):
            bad(name, "a mapping")
    for name in ("states", "fitted", "residuals", "adjoint"):
        if out.get(name) is not None and not isinstance(out[name], pd.DataFrame):
            bad(name, "a table (DataFrame) or null")
    mult = out.get("multipliers")
    if "multipliers" in out and not (isinstance(mult, dict) and all(
            isinstance(a, pd.DataFrame) for a in mult.values())):
        bad("multipliers", "a mapping of stage names to tables")
    if "warnings" in out and not (isinstance(out["warnings"], list)
                                  and all(isinstance(w, str) for w in out["warnings"])):
        bad("warnings", "a list of strings")
    sch = out.get("scheme")
    if isinstance(sch, dict):
        if not (isinstance(sch.get("name"), str) and (sch.get("qmax") is None or (
                isinstance(sch["qmax"], int) and not isinstance(sch["qmax"], bool)))):
            bad("scheme", "null or {'name': str, 'qmax': int or null}")
        out["scheme"] = SchemeRef(sch["name"], sch.get("qmax"))
    elif isinstance(sch, str):                               # older files: a label
        out["scheme"] = None
    elif sch is not None:
        bad("scheme", "null or {'name': str, 'qmax': int or null}")
    return out


@dataclass
class EstimationResult:
    """Outcome of one estimation.

    Attributes
    ----------
    approach : str
        The name passed to :func:`~pyomo_odeest.estimate`, one of
        :data:`~pyomo_odeest.APPROACH_NAMES`.
    method : str
        Solver and derivative method (e.g. ``'ipopt/exact-hessian'``).
    scheme : MultistepScheme or None
        The discretization scheme (``.name``, ``.qmax``; a :class:`SchemeRef`
        after :meth:`from_json`); None for the continuous approach.
    estimates : pandas.Series
        Parameter values (fixed ones included), indexed by name.
    objective : float
        J_k at the estimates (including any constant term of the loss).
    status : Status
        How the estimation ended (:class:`~pyomo_odeest.problem._status.Status`).
    success : bool
        ``status.success``: converged to a (local) optimum (a property).
    iterations : int
    evaluations : dict
        Function / gradient / Hessian evaluation counts.
    timings : dict
        Seconds: ``build_s`` (model), ``setup_s`` (evaluator), ``solve_s``
        (solver wall time), ``total_s``.
    states : pandas.DataFrame
        Discrete states x_i on the grid (index: time).  For a problem with
        several experiments, ``states``, ``fitted``, ``residuals`` and
        ``adjoint`` (and each frame of ``multipliers``) are indexed by
        ``(experiment, time)`` (or ``(experiment, step)``): ``res.states.loc['e1']``.
    fitted : pandas.DataFrame
        Observations z(τ_j) at the measurement times.
    residuals : pandas.DataFrame
        fitted − data (NaN where not measured).
    adjoint : pandas.DataFrame or None
        Multiplier of the equation that defines x_i (row i = 0..k; row 0 is
        x_0 = l(u)).  With the block's sign convention this is the adjoint
        p_i of [GM-grad], eq. (52).
    multipliers : dict
        Stage name -> DataFrame of multipliers of that stage's equations,
        indexed by step i (``'x'``: the equation defining x_{i+1}); for each
        path constraint, ``'path_<name>'``: its multipliers indexed by time.
    model : object
        The solved Pyomo model (simultaneous approach) or None.
    extra : dict
        Backend-specific information.
    message : str
        The optimizer's own message (Ipopt's return status, SciPy's message).
    grid : Grid, dict or None
        The grid of the discretization (several experiments: name -> Grid).
    warnings : list of str
        Reasons to doubt the result although the solver may report success,
        each with advice: from the sanity checks of
        :mod:`pyomo_odeest.analysis._diagnostics` (no convergence, a misfit
        inconsistent with the noise level,
        :func:`~pyomo_odeest.problem._noise.noise_check`, a parameter at a
        bound, a stability-limited discretization, rank deficiency); shown by
        :meth:`summary`.

    Pickling keeps every data field; the solved Pyomo model (its
    constraints are rendered lazily by rules that close over the block) and
    entries of ``extra`` that are live objects rather than data (simulators,
    interval models) are left out, their names listed in
    ``extra['not_pickled']``.  ``backend`` (the model the analyses evaluate
    through one protocol: ``problem``, ``simulate(u)``,
    ``observation_sensitivities(u, free)``, ``hessian(u, free)``) is pickled as
    the data that build it (its discretization, node values, integrator
    settings, the KKT system at the solution) and built from them on first
    use, so the analyses of a pickled result are the original's.  :meth:`lean`
    gives the same copy in memory (what the runner sends back from a worker), and
    :meth:`to_json` / :meth:`from_json` write and read the data fields with the
    same data of the backend (see :meth:`from_json`).
    """

    approach: str
    method: str
    scheme: object
    estimates: pd.Series
    objective: float
    status: Status
    iterations: int
    evaluations: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    states: pd.DataFrame | None = None
    fitted: pd.DataFrame | None = None
    residuals: pd.DataFrame | None = None
    adjoint: pd.DataFrame | None = None
    multipliers: dict = field(default_factory=dict)
    model: object = None
    extra: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    message: str = ""
    grid: object = None

    def __post_init__(self):
        self.status = _status(self.status)

    @property
    def success(self) -> bool:
        """True when the status is a (local) optimum (:attr:`Status.success`)."""
        return self.status.success

    @property
    def scheme_label(self) -> str:
        """``'name(qmax=q)'`` of the scheme ('' without one)."""
        s = self.scheme
        return "" if s is None else f"{s.name}(qmax={s.qmax})"

    @property
    def backend(self):
        """The model of this result's approach behind the analyses: built on first use
        from the recipe a pickled (or :meth:`lean`) result carries or from the data
        a result read from JSON carries (:meth:`from_json`), else from the problem,
        scheme and grid."""
        be = self.__dict__.get("_backend")
        if be is None:
            recipe = self.__dict__.get("_backend_recipe")
            if recipe is not None:
                be = recipe[0](*recipe[1])
            elif "_backend_data" in self.__dict__:          # read from JSON
                be = _analysis("backend")(self, self.__dict__["_backend_data"], read=True)
            else:
                be = _analysis("backend")(self)
            self.__dict__["_backend"] = be
        return be

    @backend.setter
    def backend(self, value):
        self.__dict__["_backend"] = value

    def _recipe(self):
        """``(build, args)`` that build the backend again (the ``__reduce__`` of the
        backends of :mod:`pyomo_odeest.approaches._backend`: data only), or None."""
        be = self.__dict__.get("_backend")
        if be is None:
            return self.__dict__.get("_backend_recipe")
        if type(be).__reduce__ is object.__reduce__:      # no recipe of its own
            return None
        try:
            return be.__reduce__()
        except Exception:                       # noqa: BLE001 - rebuilt from the result
            return None

    def multiplier(self, i, state, stage="x"):
        """Multiplier of the ``stage`` equation of step ``i`` for ``state``."""
        return float(self.multipliers[stage].loc[i, state])

    def summary(self) -> str:
        est = ", ".join(f"{k}={v:.6g}" for k, v in self.estimates.items())
        text = (f"{self.approach} [{self.method}; {self.scheme_label or '-'}]: {self.status} "
                f"({self.message}) after "
                f"{self.iterations} iterations, objective={self.objective:.8g}, {est} "
                f"({self.timings.get('total_s', float('nan')):.2f} s)")
        text += "".join(f"\n  {line}" for line in self._grid_lines())
        return text + "".join(f"\n  WARNING: {w}" for w in self.warnings)

    def _grid_lines(self) -> list:
        """The grid, its certificate and the refinement rounds, for :meth:`summary`."""
        if self.grid is None:
            return []
        grids = self.grid.values() if isinstance(self.grid, dict) else [self.grid]
        lines = [f"grid: {sum(len(g) for g in grids)} points"
                 + (f" in {len(grids)} experiments" if isinstance(self.grid, dict) else "")]
        cert = self.extra.get("certificate")
        if cert:
            lines.append(cert.get("summary", ""))
        for r in self.extra.get("refinement") or []:
            lines.append(f"  round {r['round']}: {r['grid_points']} points, objective "
                         f"{r.get('objective', float('nan')):.8g} (simulated "
                         f"{r.get('objective_simulated', float('nan')):.8g}), fitted values "
                         f"within {r.get('fit_error', float('nan')):.2g}, shift "
                         f"{r.get('max_shift', float('nan')):.2g} SE, {r['status']}"
                         + (f" (stopped by the watch at iteration {r['watch']['iteration']}"
                            + (f"; the next round starts from iteration "
                               f"{r['watch']['best']['iteration']}, "
                               f"{r['watch']['best']['objective_simulated']:.8g} simulated"
                               if r["watch"].get("best") else "") + ")"
                            if r.get("watch") else "")
                         + (f" (in a trust region of radius {r['region']['radius']:.3g}"
                            + (f", on its bound: {', '.join(r['region']['active'])}"
                               if r["region"]["active"] else "") + ")"
                            if r.get("region") else "")
                         + f", {r.get('seconds', float('nan')):.2f} s")
        return lines

    def __repr__(self):
        return f"EstimationResult({self.summary()})"

    # -- serialization ---------------------------------------------------------
    @property
    def problem(self):
        """The EstimationProblem this result solves (``extra['problem']``; None if unknown)."""
        return self.extra.get("problem")

    def _data_extra(self, also=()):
        """``extra`` without live objects; their names (and ``also``) in ``not_pickled``."""
        keep = {k: v for k, v in self.extra.items() if _is_data(v)}
        if self.problem is not None:            # pickles (without its caches): the
            keep["problem"] = self.problem      # analyses of a pickled result need it
        dropped = sorted((set(map(str, self.extra)) - set(map(str, keep))) | set(also))
        if dropped:
            keep["not_pickled"] = sorted(set(keep.get("not_pickled", [])) | set(dropped))
        return keep

    def __getstate__(self):
        return dict(self.lean().__dict__)

    def __setstate__(self, state):
        if "adjoint" in state:                  # pickled before the adjoint was deferred
            state = dict(state)
            state["_adjoint"] = state.pop("adjoint")
        self.__dict__.update(state)

    def lean(self) -> "EstimationResult":
        """A copy without the Pyomo model and without live objects in ``extra``
        (the numbers only: cheap to send between processes); its backend is built on
        first use from the data that build the original's (the same analyses)."""
        out = replace(self, model=None, adjoint=self.__dict__.get("_adjoint"),
                      extra=self._data_extra(() if self.model is None else ("model",)))
        if self.__dict__.get("_adjoint_deferred"):   # still the backend's to compute
            out.__dict__["_adjoint_deferred"] = True
        refit = self.__dict__.get("_refit")     # how it was solved: its refits are the same
        if refit is not None and _picklable(refit):
            out.__dict__["_refit"] = refit
        recipe = self._recipe()
        if recipe is not None:
            out.__dict__["_backend_recipe"] = recipe
        elif "_backend_data" in self.__dict__:
            out.__dict__["_backend_data"] = self.__dict__["_backend_data"]
        return out

    def _backend_json(self):
        """The data that build the backend (:func:`~pyomo_odeest.approaches._backend.backend_data`)
        for :meth:`to_dict`, or None."""
        recipe = self._recipe()
        if recipe is None or self.problem is None:
            return self.__dict__.get("_backend_data")
        return _analysis("backend_data")(self.problem, recipe)

    def to_dict(self) -> dict:
        """The data fields as JSON-able Python structures (the model is left out) and,
        as ``'backend'``, the data that build the backend again (see :meth:`from_json`)."""
        out = {}
        for f in fields(self):
            if f.name in ("model", "grid"):
                continue
            v = self._data_extra() if f.name == "extra" else getattr(self, f.name)
            if f.name == "extra":
                v.pop("problem", None)          # not JSON: rebuild it and pass problem=...
            if f.name == "scheme":
                v = None if v is None else {"name": v.name, "qmax": v.qmax}
            out[f.name] = _to_json(v)
        out["backend"] = _to_json(self._backend_json())
        return out

    @classmethod
    def from_dict(cls, d: dict, problem=None) -> "EstimationResult":
        """Inverse of :meth:`to_dict` (``problem``: see :meth:`from_json`).  Raises
        ValueError naming the field when a field is unknown, missing or of the wrong
        kind (an unknown status, estimates that are not a mapping of names to values,
        a table that is not one, ...)."""
        if not isinstance(d, dict):
            raise ValueError(f"EstimationResult.from_dict needs a mapping of field names "
                             f"to values, got {type(d).__name__}")
        names = {f.name for f in fields(cls)}
        backend = d.get("backend")
        d = {k: v for k, v in d.items() if k not in ("success", "backend")}   # derived
        unknown = sorted(set(d) - names, key=str)
        if unknown:
            raise ValueError(f"EstimationResult.from_dict: unknown field(s) {unknown}; "
                             f"known: {sorted(names - {'model'})}")
        required = [f.name for f in fields(cls) if f.default is MISSING
                    and f.default_factory is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"EstimationResult.from_dict: missing field(s) {missing}")
        out = {}
        for k, v in d.items():
            try:
                out[k] = _from_json(v)
            except (ValueError, KeyError, TypeError, IndexError) as err:
                raise ValueError(f"EstimationResult.from_dict: field {k!r} cannot be read: "
                                 f"{type(err).__name__}: {err}") from None
        try:
            backend = _from_json(backend)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise ValueError(f"EstimationResult.from_dict: 'backend' cannot be read: "
                             f"{type(err).__name__}: {err}") from None
        if not (backend is None or isinstance(backend, dict)
                and isinstance(backend.get("build"), str) and "args" in backend):
            raise ValueError("EstimationResult.from_dict: 'backend' must be null or "
                             "{'build': str, 'args': ...}")
        res = cls(**_checked_fields(out))
        if problem is not None:
            res.extra["problem"] = problem
        res.__dict__["_backend_data"] = backend
        return res

    def to_json(self, path=None, **kw) -> str:
        """JSON text of :meth:`to_dict` (non-finite numbers as ``NaN``/``Infinity``,
        as Python's :mod:`json` writes them); also written to ``path`` if given."""
        text = json.dumps(self.to_dict(), **kw)
        if path is not None:
            with open(path, "w") as fh:
                fh.write(text)
        return text

    @classmethod
    def from_json(cls, text_or_path, problem=None) -> "EstimationResult":
        """Inverse of :meth:`to_json` (a JSON string or the path of a file).

        The problem is not JSON: ``problem`` (the problem the result was estimated
        with, e.g. built again from its model file) makes it the result's, for its
        analyses.  The file keeps, beside the data fields, the data that build the
        backend again (the backend's pickled form: each experiment's scheme and grid,
        multiple shooting's nodes and node values, the simultaneous approach's KKT
        system at the solution, the integrator's settings), so the covariance,
        profiles and bands of the result read back are the original's.  A file
        without them (written before they were kept, or with a backend of the user's
        own) rebuilds the backend from the scheme and the default grid (the continuous
        approach's from its integrator's name and tolerances): its analyses then
        approximate the original's, and for a discretized approach a warning (also in
        ``warnings``) says so.
        """
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            with open(text) as fh:
                text = fh.read()
        return cls.from_dict(json.loads(text), problem)

    @property
    def x(self) -> np.ndarray:
        """Estimates as an array in parameter order."""
        return self.estimates.to_numpy(dtype=float)

    # -- uncertainty (computed by pyomo_odeest.analysis on request) -----------
    def covariance(self, method="fim", **kw):
        """Covariance of the estimates: ``'fim'``, ``'hessian'`` or ``'residual'``
        (:func:`pyomo_odeest.analysis._uncertainty.covariance`)."""
        return _analysis("covariance")(self, method, **kw)

    def confidence_intervals(self, level=0.95, method="fim", dist=None, **kw):
        """Wald intervals (:func:`pyomo_odeest.analysis._uncertainty.confidence_intervals`)."""
        return _analysis("confidence_intervals")(self, level, method, dist, **kw)

    def refit(self, u_start=None, fixed=None, problem=None, **options) -> "EstimationResult":
        """Estimate again through this result's approach with its options as solved (its
        scheme and grid, the refined grid after the refinement stage, tolerances,
        scaling, optimizer), from ``u_start`` (default: the estimates) with the
        parameters ``fixed`` (a mapping name -> value) held at those values, on
        ``problem`` (default: the result's; e.g. a
        :meth:`~pyomo_odeest.EstimationProblem.variant` with other data) and with
        ``options`` over the recorded ones (optimizer ``options`` merged).  The
        pipeline without the refinement stage
        (:meth:`~pyomo_odeest.approaches.Approach.refit`): what profiles and the
        bootstrap re-estimate through.  A result read from JSON solves again on its
        approach's defaults but its scheme, grid and integrator settings."""
        return _analysis("refit")(self, u_start, fixed, problem, **options)

    def profile(self, parameters=None, level=0.95, **kw):
        """Profile likelihood and LR intervals (:func:`pyomo_odeest.analysis._profile.profile_likelihood`)."""
        return _analysis("profile")(self, parameters, level, **kw)

    def identifiability(self, **kw):
        """Identifiability report (:func:`pyomo_odeest.analysis._identifiability.identifiability_report`)."""
        return _analysis("identifiability")(self, **kw)

    def plot(self, **kw):
        """Figure of the fit: data (σ error bars), fitted curves, residual panels
        (:func:`pyomo_odeest.analysis._plots.plot_result`)."""
        return _analysis("plot")(self, **kw)

    def prediction_bands(self, level=0.95, kind="observables", **kw):
        """Delta-method bands over time (:func:`pyomo_odeest.analysis._prediction.prediction_bands`)."""
        return _analysis("prediction_bands")(self, level=level, kind=kind, **kw)


def _adjoint(self):
    """The ``adjoint`` field: a frame left to the backend (:data:`BY_BACKEND`) is
    computed when first read (``backend.adjoint_frame(u, states)``) and kept."""
    d = self.__dict__
    if d.pop("_adjoint_deferred", False):
        d["_adjoint"] = self.backend.adjoint_frame(self.x, self.states)
    return d.get("_adjoint")


def _set_adjoint(self, value):
    d = self.__dict__
    d.pop("_adjoint_deferred", None)
    if value is BY_BACKEND:
        d["_adjoint"], d["_adjoint_deferred"] = None, True
    else:
        d["_adjoint"] = value


# a property over the dataclass field (its default, None, stays the field's)
EstimationResult.adjoint = property(_adjoint, _set_adjoint, doc="""The adjoint (see the
class's attributes); for the continuous approach swept by the backend when first read.""")
