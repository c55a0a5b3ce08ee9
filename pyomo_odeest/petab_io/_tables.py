r"""PEtab (format version 1) problems: the tables as symbolic objects.

A PEtab problem is an SBML model plus four tables, which :func:`read_petab`
turns into a :class:`PetabModel`: parameters (:class:`PetabParameter`; the
symbol of a parameter id stands for its *linear*-scale value, the optimisation
variable is :math:`\theta_s = \mathrm{scale}(\theta)`), per-condition values of
the model's constants and initial species, observables
:math:`y = h_o(x, k, \pi^{obs})`, :math:`\sigma = s_o(\pi^{noise}, \theta)` (their
placeholders filled per measurement row), and measurements (:math:`t = \infty`:
at the condition's steady state).

The negative log-likelihood is PEtab's, every constant included
[MHV, eq. (2)–(5)], for the transformation :math:`\tau` of each observable:

.. math::

    -\log L = \sum_{\text{data}} \tfrac12\log(2\pi\sigma^2)
        + \log J_\tau(m)
        + \tfrac12\Big(\frac{\tau(y(t)) - \tau(m)}{\sigma}\Big)^2,

with :math:`J_\tau(m) = 1,\ m,\ m\ln 10` for ``lin``, ``log``, ``log10``.
Priors (:attr:`PetabParameter.prior`) are separate from the likelihood;
:meth:`PetabModel.prior_nll` is their :math:`-\log p(\theta)`, for

=========================  =====================================================
type (parameters)          :math:`-\log p` of the value :math:`v`
=========================  =====================================================
``normal`` (μ; σ)          :math:`\tfrac12\log(2\pi\sigma^2) + (v-\mu)^2/(2\sigma^2)`
``laplace`` (μ; b)         :math:`\log(2b) + |v-\mu|/b`
``uniform`` (a; b)         :math:`\log(b-a)`
``logNormal`` (μ; σ)       :math:`\log v + \tfrac12\log(2\pi\sigma^2) + (\log v-\mu)^2/(2\sigma^2)`
``logLaplace`` (μ; b)      :math:`\log(2bv) + |\log v-\mu|/b`
=========================  =====================================================

with :math:`v` the linear value, or the scaled value for the ``parameterScale...``
variants.  Unsupported features raise
:class:`~pyomo_odeest.petab_io._sbml.UnsupportedFeatureError`: see docs/petab.md,
sections "The objective", "Priors" and "Not supported".
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import sympy

from ._sbml import TIME, SbmlOde, UnsupportedFeatureError, _optional, read_sbml, symbol

__all__ = ["PetabParameter", "PetabObservable", "PetabModel", "read_petab", "SCALES"]

#: scale name -> (scale, unscale) on numbers and on sympy expressions
SCALES = ("lin", "log", "log10")


def scale_value(v, scale):
    """Scaled value of a linear-scale number."""
    v = float(v)
    if scale != "lin" and v == 0.0:
        return -math.inf            # the lower bound 0 of an unbounded log-scale parameter
    return {"lin": lambda a: a, "log": math.log, "log10": math.log10}[scale](v)


def unscale_value(v, scale):
    return {"lin": lambda a: a, "log": math.exp, "log10": lambda a: 10.0 ** a}[scale](float(v))


def unscale_sym(s, scale):
    """Linear value as a sympy expression of the scaled symbol ``s``."""
    return {"lin": s, "log": sympy.exp(s), "log10": sympy.Integer(10) ** s}[scale]


def transform_sym(y, transformation):
    """The observable's transformation τ(y) (lin, log or log10)."""
    return {"lin": y, "log": sympy.log(y), "log10": sympy.log(y, 10)}[transformation]


def transform_value(m, transformation):
    return {"lin": lambda a: a, "log": np.log, "log10": np.log10}[transformation](m)


def log_jacobian(m, transformation):
    r""":math:`\log J_\tau(m)`: 0, :math:`\log m`, :math:`\log(m\ln 10)`."""
    m = np.asarray(m, dtype=float)
    return {"lin": lambda a: np.zeros_like(a), "log": np.log,
            "log10": lambda a: np.log(a * np.log(10.0))}[transformation](m)


def per_transformation(fn, x, trans):
    """``fn(x_i, τ_i)`` of every element of ``x``, ``trans`` the transformation τ_i of each."""
    trans, x = np.asarray(trans), np.asarray(x, dtype=float)
    out = np.empty(len(x))
    for tr in set(trans):
        out[trans == tr] = fn(x[trans == tr], tr)
    return out


@dataclass
class PetabParameter:
    """One row of the parameter table (values on the linear scale)."""

    id: str
    scale: str
    lb: float
    ub: float
    nominal: float
    estimate: bool
    prior: tuple | None = None     # (type, (a, b)) of objectivePriorType/-Parameters

    def prior_nll(self, value):
        """:math:`-\\log p` of this parameter's prior (a sympy expression when ``value`` is
        one) at the *linear* value ``value``; 0 without a prior."""
        if self.prior is None:
            return 0
        kind, (a, b) = self.prior
        kind = kind.lower()
        is_sym = isinstance(value, sympy.Basic)
        log = sympy.log if is_sym else math.log
        if kind.startswith("parameterscale"):
            v = ({"lin": value, "log": log(value), "log10": log(value) / log(10)}[self.scale]
                 if is_sym else scale_value(value, self.scale))
            kind = kind[len("parameterscale"):]
        else:
            v = value
        absf = sympy.Abs if is_sym else abs
        if kind == "uniform":
            return log(b - a)
        if kind == "normal":
            return 0.5 * log(2 * math.pi * b * b) + (v - a) ** 2 / (2 * b * b)
        if kind == "laplace":
            return log(2 * b) + absf(v - a) / b
        if kind == "lognormal":
            return log(v) + 0.5 * log(2 * math.pi * b * b) + (log(v) - a) ** 2 / (2 * b * b)
        return log(2 * b * v) + absf(log(v) - a) / b          # logLaplace

    @property
    def scaled_nominal(self):
        return scale_value(self.nominal, self.scale)

    @property
    def scaled_bounds(self):
        return scale_value(self.lb, self.scale), scale_value(self.ub, self.scale)


@dataclass
class PetabObservable:
    """One row of the observable table; formulas with their placeholders."""

    id: str
    formula: sympy.Expr
    noise: sympy.Expr
    transformation: str
    distribution: str
    observable_placeholders: list
    noise_placeholders: list


@dataclass
class PetabModel:
    r"""A PEtab problem in symbolic form.

    Attributes
    ----------
    name : str
        The problem's folder name (or the YAML file's stem).
    ode : SbmlOde
    parameters : list of PetabParameter
    conditions : list of str
        Simulation conditions used by the measurements, in order of first use.
    constants : dict condition -> dict constant id -> sympy expression
        Value of each model constant in that condition, in the parameter
        symbols (linear scale) or a number.
    initial : dict condition -> dict state -> sympy expression
        Initial state of each condition in the parameter symbols.
    observables : dict id -> PetabObservable
    measurements : pandas.DataFrame
        The measurement table with added columns ``y`` (observable as a
        sympy expression in the state symbols, the parameter symbols and
        :data:`~pyomo_odeest.petab_io._sbml.TIME`) and ``sigma`` (sympy, in the
        parameter symbols only).
    preequilibration : dict condition -> condition
        The pre-equilibration condition of each simulation condition that has
        one (its ``constants`` and ``initial`` are held like a simulation
        condition's).
    reset : dict condition -> list of states
        Per pre-equilibrated simulation condition: the species its row sets
        (reset after pre-equilibration; the others keep the steady state).
    """

    name: str
    folder: str
    ode: SbmlOde
    parameters: list
    conditions: list
    constants: dict
    initial: dict
    observables: dict
    measurements: pd.DataFrame
    yaml_path: str = ""
    preequilibration: dict = field(default_factory=dict)
    reset: dict = field(default_factory=dict)

    # -- parameters -------------------------------------------------------
    @property
    def estimated(self):
        return [p for p in self.parameters if p.estimate]

    def parameter(self, pid):
        for p in self.parameters:
            if p.id == pid:
                return p
        raise KeyError(f"no parameter {pid!r} in the parameter table of {self.name}")

    @property
    def has_priors(self):
        return any(p.prior is not None for p in self.estimated)

    def prior_nll(self, scaled=None):
        """:math:`-\\log p(\\theta)` of the priors of the estimated parameters at ``scaled``
        (default: the nominal values); 0 without priors."""
        vals = self.linear_values(scaled)
        return float(sum(p.prior_nll(vals[p.id]) for p in self.estimated))

    def nominal_scaled(self):
        """Scaled nominal values of the estimated parameters (the default start)."""
        return np.array([p.scaled_nominal for p in self.estimated])

    def linear_values(self, scaled=None):
        """Linear-scale values of every table parameter; ``scaled`` (optional)
        gives the estimated ones on their scales, default the nominal values."""
        vals = {p.id: float(p.nominal) for p in self.parameters}
        if scaled is not None:
            scaled = np.asarray(scaled, dtype=float)
            est = self.estimated
            if scaled.shape != (len(est),):
                raise ValueError(f"expected {len(est)} scaled values (estimated parameters "
                                 f"{[p.id for p in est]}), got shape {scaled.shape}")
            for p, v in zip(est, scaled):
                vals[p.id] = unscale_value(v, p.scale)
        return vals

    # -- per condition -----------------------------------------------------
    def rhs(self, condition):
        """:math:`f` of ``condition`` in states, parameter symbols and time."""
        sub = self.constants[condition]
        return [sympy.sympify(self.ode.rhs[s]).xreplace(sub) for s in self.ode.states]

    def rows(self, condition):
        return self.measurements[self.measurements["simulationConditionId"] == condition]

    def __repr__(self):
        return (f"PetabModel({self.name}: {len(self.ode.states)} states, "
                f"{len(self.estimated)} estimated parameters, {len(self.conditions)} conditions, "
                f"{len(self.measurements)} measurements)")


_PLACEHOLDER = re.compile(r"^(observableParameter|noiseParameter)(\d+)_(.+)$")


def _placeholders(expr, kind, obs_id):
    found = []
    for s in expr.free_symbols:
        mt = _PLACEHOLDER.match(s.name)
        if mt and mt.group(1) == kind and mt.group(3) == obs_id:
            found.append((int(mt.group(2)), s))
    return [s for _, s in sorted(found, key=lambda a: a[0])]


def _real_symbols(expr):
    """PEtab's sympify gives symbols with extra assumptions: use :func:`symbol` throughout."""
    return expr.xreplace({s: symbol(s.name) for s in expr.free_symbols if isinstance(s, sympy.Symbol)})


def _sympify(petab, text, where):
    try:
        e = petab.math.sympify_petab(str(text))
    except Exception as err:  # noqa: BLE001 - petab raises several types
        raise ValueError(f"{where}: cannot parse {text!r}: {err}") from None
    return _real_symbols(sympy.sympify(e))


def _is_empty(v):
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == ""


def _text(row, col, default):
    """The stripped text of a table entry, ``default`` when it is empty or absent."""
    return default if _is_empty(row.get(col)) else str(row[col]).strip()


def _value_or_symbol(v, parameter_ids, where):
    """A table entry: a number, or a parameter id (its linear-scale symbol)."""
    try:
        return sympy.Float(float(v), 17)
    except (TypeError, ValueError):
        pass
    v = str(v).strip()
    if v not in parameter_ids:
        raise ValueError(f"{where}: {v!r} is neither a number nor a parameter of the "
                         "parameter table")
    return symbol(v)


def read_petab(yaml_path) -> PetabModel:
    """Read a PEtab v1 problem (YAML file or the folder holding one; of several YAML
    files in a folder, the one named as the folder, as the collection names its problems)."""
    petab = _optional("petab.v1", "reading PEtab needs the petab package (0.8 on Python 3.11)")
    yaml_path = str(yaml_path)
    if os.path.isdir(yaml_path):
        ymls = sorted(f for f in os.listdir(yaml_path) if f.endswith((".yaml", ".yml")))
        own = [f for f in ymls
               if os.path.splitext(f)[0] == os.path.basename(os.path.abspath(yaml_path))]
        if len(ymls) != 1 and not own:
            raise ValueError(f"{yaml_path}: expected one PEtab YAML file in the folder, or one "
                             f"named as the folder, found {ymls}; pass the YAML file")
        yaml_path = os.path.join(yaml_path, (own or ymls)[0])
    folder = os.path.dirname(os.path.abspath(yaml_path))
    name = os.path.basename(folder)
    spec = petab.yaml.load_yaml(yaml_path)
    if str(spec.get("format_version", "1")).split(".")[0] != "1":
        raise UnsupportedFeatureError(f"{yaml_path}: PEtab format version "
                                      f"{spec.get('format_version')} (only version 1 is supported)")
    probs = spec.get("problems", [])
    if len(probs) != 1:
        raise UnsupportedFeatureError(f"{yaml_path}: {len(probs)} problems in one file "
                                      "(exactly one is supported)")
    pr = probs[0]
    if len(pr.get("sbml_files", [])) != 1:
        raise UnsupportedFeatureError(f"{yaml_path}: {len(pr.get('sbml_files', []))} models "
                                      "(exactly one SBML file is supported)")
    if pr.get("mapping_files"):
        raise UnsupportedFeatureError(f"{yaml_path}: mapping tables are not supported")
    if spec.get("extensions"):
        raise UnsupportedFeatureError(f"{yaml_path}: PEtab extensions {list(spec['extensions'])} "
                                      "are not supported")

    def path_of(f):
        return os.path.join(folder, f)

    def read_tables(key, reader):
        files = pr.get(key, [])
        frames = [reader(path_of(f)) for f in files]
        return (pd.concat(frames) if frames else None), ", ".join(files)

    ode = read_sbml(path_of(pr["sbml_files"][0]))
    par_file = spec["parameter_file"]
    par_file = par_file[0] if isinstance(par_file, list) else par_file
    par_df = petab.get_parameter_df(path_of(par_file))
    cond_df, cond_files = read_tables("condition_files", petab.get_condition_df)
    obs_df, obs_files = read_tables("observable_files", petab.get_observable_df)
    meas_df, meas_files = read_tables("measurement_files", petab.get_measurement_df)

    # -- parameter table ------------------------------------------------------
    for col in ("parameterScale", "estimate"):
        if col not in par_df.columns:
            raise ValueError(f"{par_file}: the parameter table has no column {col!r} (PEtab "
                             "requires parameterId, parameterScale, lowerBound, upperBound, "
                             "nominalValue, estimate)")
    params = []
    for pid, row in par_df.iterrows():
        scale = str(row.get("parameterScale", "lin")).strip() or "lin"
        if scale not in SCALES:
            raise ValueError(f"{par_file}: parameter {pid}: parameterScale {scale!r} is not one "
                             f"of {SCALES}")
        est = bool(int(row.get("estimate", 1)))
        lb = float(row.get("lowerBound", np.nan))
        ub = float(row.get("upperBound", np.nan))
        nom = float(row["nominalValue"]) if "nominalValue" in row and not _is_empty(
            row["nominalValue"]) else np.nan
        if est and (np.isnan(lb) or np.isnan(ub)):
            raise ValueError(f"{par_file}: estimated parameter {pid} needs lowerBound and "
                             "upperBound (-inf and inf, or 0 and inf on a log scale, for none)")
        if not np.isfinite(nom):
            if est and not (np.isfinite(lb) and np.isfinite(ub) and (lb > 0 or scale == "lin")):
                raise ValueError(f"{par_file}: estimated parameter {pid} has no nominalValue "
                                 f"and the unbounded range [{lb}, {ub}] has no midpoint to "
                                 "start from; give a nominalValue")
            if est:
                nom = unscale_value(0.5 * (scale_value(lb, scale) + scale_value(ub, scale)), scale)
            else:
                raise ValueError(f"{par_file}: fixed parameter {pid} needs a nominalValue")
        if est and scale != "lin" and lb < 0:
            raise ValueError(f"{par_file}: parameter {pid} on {scale} scale needs lowerBound "
                             f">= 0 (0: unbounded below on that scale), got {lb}")
        params.append(PetabParameter(str(pid), scale, lb, ub, nom, est,
                                     _prior(row, pid, scale, par_file)))
    pids = {p.id for p in params}

    # -- observables ---------------------------------------------------------
    observables = {}
    for oid, row in obs_df.iterrows():
        oid = str(oid)
        where = f"{obs_files}: observable {oid}"
        trans = _text(row, "observableTransformation", "lin")
        dist = _text(row, "noiseDistribution", "normal")
        if trans not in SCALES:
            raise ValueError(f"{where}: observableTransformation {trans!r} is not one of {SCALES}")
        if dist != "normal":
            raise UnsupportedFeatureError(f"{where}: noiseDistribution {dist!r} (only normal, "
                                          "with lin/log/log10 transformation, is supported)")
        formula = _sympify(petab, row["observableFormula"], where + " formula")
        noise = _sympify(petab, row["noiseFormula"], where + " noiseFormula")
        observables[oid] = PetabObservable(
            oid, formula, noise, trans, dist,
            _placeholders(formula, "observableParameter", oid),
            _placeholders(noise, "noiseParameter", oid))

    # -- measurements -----------------------------------------------------------
    if meas_df is None or len(meas_df) == 0:
        raise ValueError(f"{yaml_path}: the measurement table ({meas_files or 'none listed'}) "
                         "has no rows; a PEtab problem needs at least one measurement")
    needed = ("observableId", "simulationConditionId", "measurement", "time")
    absent = [c for c in needed if c not in meas_df.columns]
    if absent:
        raise ValueError(f"{meas_files}: the measurement table has no column(s) {absent} "
                         f"(required: {list(needed)}; columns found: {list(meas_df.columns)})")
    meas = meas_df.reset_index(drop=True).copy()
    for col in ("time", "measurement"):
        bad = pd.to_numeric(meas[col], errors="coerce").isna() & meas[col].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{meas_files}: row {i}: {col} {meas[col].iat[i]!r} is not a number")
    times = meas["time"].astype(float).to_numpy()
    if np.any(np.isneginf(times)) or np.any(np.isnan(times)):
        i = int(np.flatnonzero(np.isneginf(times) | np.isnan(times))[0])
        raise ValueError(f"{meas_files}: row {i}: time {times[i]} (times are numbers >= 0, "
                         "or inf for a steady-state measurement)")
    if np.any(times < 0):
        raise ValueError(f"{meas_files}: measurement times must be >= 0")
    unknown = sorted(set(meas["observableId"]) - set(observables))
    if unknown:
        raise ValueError(f"{meas_files}: observables {unknown} are not in the observable table")
    conditions = list(dict.fromkeys(str(c) for c in meas["simulationConditionId"]))
    preeq = _preequilibration(meas, conditions, meas_files)
    if cond_df is None:
        cond_df = pd.DataFrame(index=pd.Index([], name="conditionId"))
    used = conditions + [p for p in dict.fromkeys(preeq.values()) if p and p not in conditions]
    missing = [c for c in used if c not in cond_df.index]
    if missing:
        raise ValueError(f"{meas_files}: conditions {missing} are not in the condition table "
                         f"({cond_files})")

    # -- conditions: constants and initial states ---------------------------------
    state_syms = {symbol(s) for s in ode.states}
    constants, initial, reset = {}, {}, {}
    for c in used:
        row = cond_df.loc[c]
        given = [k for k in row.index if not _is_empty(row[k])]
        sub = {}
        for k, v in ode.constants.items():
            if k in given:
                sub[symbol(k)] = _value_or_symbol(row[k], pids, f"{cond_files}: condition {c}, "
                                                                 f"column {k}")
            elif k in pids:
                sub[symbol(k)] = symbol(k)
            else:
                if not np.isfinite(v):
                    raise ValueError(f"{ode.path}: parameter {k} has no value and is not in the "
                                     "parameter or condition table")
                sub[symbol(k)] = sympy.Float(v, 17)
        reset[c] = [s for s in ode.states if s in given]
        initial[c] = {s: _value_or_symbol(row[s], pids, f"{cond_files}: condition {c}, column {s}")
                      if s in given else sympy.sympify(ode.initial[s]).xreplace(sub)
                      for s in ode.states}
        other = [k for k in given if k != "conditionName" and k not in ode.constants
                 and k not in ode.states]
        if other:
            raise ValueError(f"{cond_files}: condition {c} sets {other}, which are not constants "
                             "or species of the model")
        constants[c] = sub

    # -- per-row observable and sigma expressions ---------------------------------
    def overrides(text, n, where):
        if n == 0:
            return []
        if _is_empty(text):
            raise ValueError(f"{where}: {n} overrides expected, none given")
        parts = [t.strip() for t in str(text).split(";")]
        if len(parts) != n:
            raise ValueError(f"{where}: {n} overrides expected, got {len(parts)} ({text!r})")
        return [_value_or_symbol(t, pids, where) for t in parts]

    ys, sigmas = [], []
    cache = {}
    for i, r in meas.iterrows():
        o = observables[str(r["observableId"])]
        c = str(r["simulationConditionId"])
        op = r.get("observableParameters", np.nan)
        npar = r.get("noiseParameters", np.nan)
        key = (o.id, c, str(op), str(npar))
        if key not in cache:
            where = f"{meas_files}: row {i} ({o.id})"
            osub = dict(zip(o.observable_placeholders,
                            overrides(op, len(o.observable_placeholders), where
                                      + " observableParameters")))
            nsub = dict(zip(o.noise_placeholders,
                            overrides(npar, len(o.noise_placeholders), where + " noiseParameters")))
            y = ode.substitute_assignments(o.formula.xreplace(osub)).xreplace(constants[c])
            # the observable's id in its noise formula stands for its value
            sig = o.noise.xreplace(nsub).xreplace({symbol(o.id): o.formula.xreplace(osub)})
            sig = ode.substitute_assignments(sig).xreplace(constants[c])
            free = {s.name for s in y.free_symbols | sig.free_symbols} - \
                {s.name for s in state_syms} - pids - {TIME.name}
            if free:
                raise ValueError(f"{where}: symbols {sorted(free)} are not defined (not states, "
                                 "model constants, or parameters of the parameter table)")
            cache[key] = (y, sig)
        ys.append(cache[key][0])
        sigmas.append(cache[key][1])
    meas["y"] = ys
    meas["sigma"] = sigmas
    meas = meas.astype({"simulationConditionId": str, "observableId": str, "time": float,
                        "measurement": float})
    return PetabModel(name=name, folder=folder, ode=ode, parameters=params, conditions=conditions,
                      constants=constants, initial=initial, observables=observables,
                      measurements=meas, yaml_path=os.path.abspath(yaml_path),
                      preequilibration={c: p for c, p in preeq.items() if p},
                      reset={c: reset[c] for c, p in preeq.items() if p})


PRIOR_TYPES = ("uniform", "normal", "laplace", "logNormal", "logLaplace",
               "parameterScaleUniform", "parameterScaleNormal", "parameterScaleLaplace")


def _prior(row, pid, scale, par_file):
    """``(type, (a, b))`` of a parameter's objective prior, or None."""
    pars = row.get("objectivePriorParameters", None)
    if _is_empty(row.get("objectivePriorType", None)) and _is_empty(pars):
        return None
    kind = _text(row, "objectivePriorType", "parameterScaleUniform")
    where = f"{par_file}: parameter {pid}"
    if kind not in PRIOR_TYPES:
        raise UnsupportedFeatureError(f"{where}: objectivePriorType {kind!r} is not one of "
                                      f"{list(PRIOR_TYPES)}")
    if _is_empty(pars):
        raise ValueError(f"{where}: objectivePriorType {kind} needs objectivePriorParameters "
                         "('a;b')")
    try:
        a, b = (float(v) for v in str(pars).split(";"))
    except ValueError:
        raise ValueError(f"{where}: objectivePriorParameters {pars!r} must be two numbers "
                         "'a;b'") from None
    if kind.lower().endswith("uniform") and not a < b:
        raise ValueError(f"{where}: uniform prior needs lower < upper, got {pars!r}")
    if not kind.lower().endswith("uniform") and not b > 0:
        raise ValueError(f"{where}: the scale (second number) of the {kind} prior must be "
                         f"> 0, got {pars!r}")
    return (kind, (a, b))


def _preequilibration(meas, conditions, meas_files):
    """Per simulation condition: its pre-equilibration condition (or None)."""
    col = "preequilibrationConditionId"
    if col not in meas.columns:
        return {c: None for c in conditions}
    pre = [None if _is_empty(v) else str(v).strip() for v in meas[col]]
    sim = meas["simulationConditionId"].astype(str).to_list()
    out = {}
    for c in conditions:
        used = {p for p, s in zip(pre, sim) if s == c}
        if len(used) > 1:
            raise UnsupportedFeatureError(
                f"{meas_files}: simulation condition {c} is used with several "
                f"pre-equilibrations {sorted(map(str, used))} (one per simulation condition "
                f"is supported)")
        out[c] = used.pop()
    return out
