r"""Write an :class:`~pyomo_odeest.EstimationProblem` as a PEtab problem.

The model becomes SBML (through libsbml): one species per state in a
compartment of size 1, with a *rate rule* :math:`\dot x = f(x, u, t)` (so the
right-hand side is kept exactly, whatever its form), one SBML parameter per
parameter of the model and an initial assignment :math:`x(0) = l(u)` per state;
every parameter on its scale (see :func:`write_petab`; bounds not declared are written
as infinite), one
condition per experiment, one measurement row per datum with
:math:`\sigma = 1/\sqrt{w}`, so that :math:`-\log L = J/2 + \sum \tfrac12\log(2\pi/w)`.
Local parameters, constant inputs, pre-equilibration and what raises
:class:`ValueError`: see docs/petab.md, section "Export".
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pandas as pd
import sympy
from sympy.printing.str import StrPrinter

from ..problem._declaration import EstimationProblem, LeastSquares
from ..problem._inputs import PiecewiseConstant, evaluate_inputs, input_applications
from ._problem import _identifier
from ._sbml import _libsbml, symbol

__all__ = ["write_petab"]



def hidden_names(local, renamed):
    """Parameters the condition table sets (copies of local parameters, renamed
    pre-equilibration parameters)."""
    return {c for cs in local.values() for c in cs.values()} | set(renamed)


class _L3Printer(StrPrinter):
    """Sympy to libsbml's L3 formula syntax (``^`` for powers, ``ln`` for log)."""

    def _print_Pow(self, e):
        if e.exp == sympy.Rational(1, 2):
            return f"sqrt({self._print(e.base)})"
        return f"({self._print(e.base)})^({self._print(e.exp)})"

    def _print_log(self, e):
        return f"ln({self._print(e.args[0])})"

    def _print_Float(self, e):
        return repr(float(e))

    def _print_Piecewise(self, e):
        parts = []
        for val, cond in e.args:
            parts.append(self._print(val))
            if cond != sympy.true:
                parts.append(self._print(cond))
        return f"piecewise({', '.join(parts)})"

    def _print_Relational(self, e):
        return f"({self._print(e.lhs)}) {e.rel_op} ({self._print(e.rhs)})"


def _formula(expr, libsbml, where):
    text = _L3Printer().doprint(expr)
    ast = libsbml.parseL3Formula(text)
    if ast is None:
        raise ValueError(f"{where}: cannot write {expr} as SBML math "
                         f"({libsbml.getLastParseL3Error()})")
    return ast


def _inline(e):
    """``e`` with its (constant) inputs replaced by their values."""
    apps = input_applications([e])
    return evaluate_inputs(e.xreplace({a: a.func(sympy.Float(0.0)) for a in apps})) if apps else e


def _same(a, b):
    a, b = sympy.sympify(a), sympy.sympify(b)
    return a == b or sympy.expand(a - b) == 0


def write_petab(problem: EstimationProblem, folder, name=None, scales=None):
    """Write ``problem`` as PEtab v1 into ``folder`` (created); returns the YAML path.

    ``name`` (default: the problem's name) names the files, inside ``folder``.
    ``scales`` maps parameter names to ``'lin'``, ``'log'`` or ``'log10'``: the
    problem's parameter u is the PEtab parameter θ on that scale (θ = u, e^u, 10^u),
    written on it.  A parameter not in ``scales`` is written on the scale its formulas
    show (log10 or log when it enters them only through 10^u or e^u, as in an imported
    problem), otherwise on the linear scale.  Bounds not declared are written as
    infinite (0 for the lower bound on a log scale)."""
    L = _libsbml()
    import petab.v1 as petab
    name = name or problem.name
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\\" in name or os.sep in name or (os.altsep and os.altsep in name)
            or "\0" in name):
        raise ValueError(f"write_petab: name={name!r} must be a plain file name (no folder "
                         "separators, not '.' or '..'): the files are written into folder")
    scales = dict(scales or {})
    bad = {k: v for k, v in scales.items() if v not in ("lin", "log", "log10")}
    if bad:
        raise ValueError(f"write_petab: scales {bad}: a scale is 'lin', 'log' or 'log10'")
    if not isinstance(problem.loss, LeastSquares):
        raise ValueError("write_petab takes least-squares problems (PEtab noise is per datum)")
    if sympy.sympify(problem.penalty_sym) != 0:
        raise ValueError("write_petab cannot write a penalty R(u) (PEtab v1 has no such term)")
    several = bool(getattr(problem, "experiments", None))
    runs = ([(e.name, sp, e.preequilibration or problem.preequilibration)
             for e, sp in zip(problem.experiments, problem.experiment_problems)]
            if several else [("c0", problem, problem.preequilibration)])

    def where(cid):
        return f"write_petab: experiment '{cid}': " if several else "write_petab: "

    names, states = problem.parameter_names, problem.states
    u0 = dict(zip(names, map(float, problem.u0)))
    taken = set(names) | set(states) | set(problem.inputs or {})
    local = {}                         # local parameter k -> {experiment: k_<experiment>}
    for n in names if several else ():
        k = n[:-len(runs[0][0]) - 1]
        copies = {cid: f"{k}_{cid}" for cid, _, _ in runs}
        if n == copies[runs[0][0]] and k.isidentifier() and k not in taken and \
                all(c in names for c in copies.values()):
            local[k] = copies
    inputs, overrides = {}, {}         # input -> {experiment: value}; experiment -> {id: value}
    switched = {}                      # input switched in time -> {experiment: PiecewiseConstant}
    for cid, sp, pre in runs:
        if sp.t0 != 0.0:
            raise ValueError(f"{where(cid)}PEtab simulations start at t = 0; the problem "
                             f"starts at t0 = {sp.t0}")
        for k, inp in (sp.inputs or {}).items():
            vals = set(inp.values) if isinstance(inp, PiecewiseConstant) else set()
            if len(vals) != 1:
                if not isinstance(inp, PiecewiseConstant) or inp.parameter_names():
                    raise ValueError(
                        f"{where(cid)}input '{k}' ({type(inp).__name__}"
                        + (", values naming parameters" if vals else "") + ") changes in "
                        "time; PEtab v1 holds constants and SBML piecewise functions of time "
                        "(a PiecewiseConstant of numbers is written as piecewise)")
                switched.setdefault(k, {})[cid] = inp
                continue
            v = vals.pop()
            if several:
                inputs.setdefault(k, {})[cid] = symbol(v) if isinstance(v, str) else sympy.Float(v)
        if pre is not None:
            overrides[cid] = ov = {}
            for k, v in (pre.parameters or {}).items():
                if callable(v):
                    raise ValueError(f"{where(cid)}Preequilibration parameters[{k!r}] is a "
                                     f"function; PEtab v1 conditions hold numbers and "
                                     f"parameter ids")
                own = next((d for d, c in local.items() if c[cid] == k), None)
                if own or not any(k in c.values() for c in local.values()):
                    ov[own or k] = sympy.Float(v) if not isinstance(v, str) else \
                        symbol(local[v][cid] if v in local else v)
    # an input switched in time: piecewise(v0, time < t1, v1, time < t2, ..., v_n) with the
    # numbers (one experiment) or with model parameters k_v<j>, k_t<j> that each condition
    # sets (pieces an experiment does not have start at t = inf)
    tsym = sympy.Symbol("time")
    switch_expr, switch_rows = {}, {}          # input -> expression; experiment -> {id: value}
    for k, per in switched.items():
        if several:
            const = inputs.pop(k, {})
            for cid, _, _ in runs:
                if cid not in per:
                    v = const.get(cid, sympy.Float(0.0))
                    if not v.is_Number:
                        raise ValueError(f"{where(cid)}input '{k}' names a parameter here and "
                                         f"changes in time elsewhere; write it as numbers")
                    per[cid] = PiecewiseConstant([0.0], [float(v)])
        n = max(len(inp.values) for inp in per.values())
        if several:
            vs = [symbol(_identifier(f"{k}_v{j}", taken)) for j in range(n)]
            ts = [symbol(_identifier(f"{k}_t{j}", taken)) for j in range(1, n)]
            for cid, inp in per.items():
                row = switch_rows.setdefault(cid, {})
                for j in range(n):
                    row[vs[j].name] = float(inp.values[j]) if j < len(inp.values) else 0.0
                    if j:
                        row[ts[j - 1].name] = (float(inp.times[j]) if j < len(inp.times)
                                               else float("inf"))
        else:
            inp = per[runs[0][0]]
            vs = [sympy.Float(v, 17) for v in inp.values]
            ts = [sympy.Float(t, 17) for t in inp.times[1:]]
        args = [(vs[j], sympy.StrictLessThan(tsym, ts[j])) for j in range(n - 1)]
        switch_expr[k] = sympy.Piecewise(*args, (vs[-1], True))

    def switch_app(e):
        """``e`` with the application of every input switched in time (one experiment)
        replaced by its piecewise expression (matched by its values on every piece)."""
        if several or not switched:
            return e
        sub = {}
        for a in input_applications([e]):
            fn = type(a)._imp_
            for k, per in switched.items():
                inp = per[runs[0][0]]
                pts = np.concatenate([inp.times, inp.times[1:] - 1e-9 * (1 + abs(inp.times[1:])),
                                      [inp.times[-1] + 1.0]])
                if np.allclose([float(fn(t)) for t in pts], inp(pts), rtol=0, atol=0):
                    sub[a] = switch_expr[k].xreplace({tsym: problem.t_sym})
                    break
        return e.xreplace(sub)

    renamed = {k: _identifier(f"{k}_model", taken) for k in dict.fromkeys(
        k for ov in overrides.values() for k in ov if k not in local)}

    def sim_map(cid):                  # model parameter -> its value in the condition
        m = {symbol(k): symbol(c[cid]) for k, c in local.items()}
        m.update({symbol(k): v[cid] for k, v in inputs.items()})
        m.update({symbol(k): sympy.Float(v) for k, v in switch_rows.get(cid, {}).items()})
        m.update({symbol(r): symbol(k) for k, r in renamed.items()})
        return m

    def back(cid):                     # this experiment's parameters -> model parameters
        return {v: k for k, v in sim_map(cid).items()
                if str(k) not in inputs and str(k) not in switch_rows.get(cid, {})}

    def entry(v, what):
        v = sympy.sympify(v)
        if v.is_Number:
            return float(v)
        if v.is_Symbol and v.name in names:
            return v.name
        raise ValueError(f"{what} is {v}: a PEtab v1 condition table holds numbers and "
                         f"parameter ids only")

    to_model = {symbol(k): symbol(r) for k, r in renamed.items()}
    to_model.update({symbol(k): e.xreplace({tsym: problem.t_sym})
                     for k, e in switch_expr.items()} if several else {})
    f = [sympy.sympify(e).xreplace(to_model)
         for e in (problem.f_sym if several else
                   (_inline(switch_app(sympy.sympify(e))) for e in problem.f_sym))]
    cond, pre_rows, evaluated = {}, {}, []   # evaluated: where the initial assignments hold
    for cid, sp, pre in runs:
        cm = sim_map(cid)
        cond[cid] = {str(k): entry(v, f"{where(cid)}the value of {k}") for k, v in cm.items()}
        if pre is None:
            evaluated.append((cond[cid], cm, sp.l_sym, cid, ""))
            continue
        pm = {**cm, **{symbol(renamed.get(k, k)): v for k, v in overrides[cid].items()}}
        if not all(_same(fk.xreplace(pm), _inline(gk))
                   for fk, gk in zip(f, sp.steady_state.f_sym)):
            raise ValueError(f"{where(cid)}the pre-equilibration has dynamics of its own "
                             f"(Preequilibration(rhs=...)), not the model's under other parameter "
                             f"values: a PEtab v1 pre-equilibration condition sets parameters "
                             f"and initial values only")
        pre_rows[cid] = {str(k): entry(v, f"{where(cid)}the pre-equilibration value of {k}")
                         for k, v in pm.items()}
        evaluated.append((pre_rows[cid], pm, sp.steady_state.x0_sym, cid, " pre-equilibration"))
        cond[cid].update({s: entry(v, f"{where(cid)}the initial value of the reset state {s}")
                          for s, v in zip(states, sp.l_sym) if s in sp.preequilibration.reset})
    ia = []                            # initial assignments: an expression before numbers and
    for k in range(len(states)):       # parameters (which columns can hold), then the most common
        n = Counter(sympy.sympify(tg[k]).xreplace(back(cid)) for _, _, tg, cid, _ in evaluated)
        ia.append(max(n, key=lambda e: (not (e.is_Number or e.is_Symbol), n[e])))
    for row, cm, tg, cid, what in evaluated:
        for k, s in enumerate(states):
            if not _same(ia[k].xreplace(cm), tg[k]):
                row[s] = entry(tg[k], f"{where(cid)}the{what} initial value of {s}")
    same = len({repr(sorted(r.items())) for r in pre_rows.values()}) == 1
    ids = set(cond)
    shared = _identifier("preeq", ids) if same else None
    pre_id = {cid: shared or _identifier(f"preeq_{cid}", ids) for cid in pre_rows}
    cond.update({pre_id[cid]: r for cid, r in pre_rows.items()})

    obs = {}
    for cid, sp, _ in runs:
        cm = sim_map(cid)
        for o, g in zip(sp.obs_names, map(_inline, sp.g_sym)):
            h = obs.setdefault(o, g.xreplace(back(cid)))
            if not _same(h.xreplace(cm), g):
                raise ValueError(f"{where(cid)}observable '{o}' is {g}, not {h} under this "
                                 f"experiment's parameters; a PEtab observable is one formula "
                                 f"for every condition")

    # scales: u is theta on its scale where declared, or where u enters every formula only
    # through 10^u (log10) or e^u (log); the formulas are written in theta
    formulas = f + ia + list(obs.values())
    in_tables = {str(v) for r in cond.values() for v in r.values()}
    scale_of = {}
    for n in names:
        if n in hidden_names(local, renamed) or n in in_tables:
            if scales.get(n, "lin") != "lin":
                raise ValueError(f"write_petab: parameter '{n}' is set per condition (a local "
                                 f"or pre-equilibration parameter); it is written on the "
                                 f"linear scale, not {scales[n]}")
            continue
        u = symbol(n)
        if not any(e.has(u) for e in formulas):
            scale_of[n] = scales.get(n, "lin")
            continue
        for sc in ([scales[n]] if n in scales else ["log10", "log"]):
            if sc == "lin":
                break
            th = sympy.Symbol(n, positive=True)
            sub = {u: sympy.log(th) / sympy.log(10) if sc == "log10" else sympy.log(th)}
            new = [e.xreplace(sub) for e in formulas]
            if not any(e.has(sympy.log(th)) or any(
                    p.base == th and not p.exp.is_Rational for p in e.atoms(sympy.Pow))
                    for e in new):
                scale_of[n] = sc
                back_sym = {th: u}
                formulas = [e.xreplace(back_sym) for e in new]
                break
            if n in scales:
                raise ValueError(
                    f"write_petab: scales[{n!r}] = {sc!r}, but '{n}' does not enter the "
                    f"problem's formulas only through {'10^' if sc == 'log10' else 'exp('}"
                    f"{n}{')' if sc == 'log' else ''}: the model could not be written in the "
                    "parameter on that scale")
    f, ia = formulas[:len(f)], formulas[len(f):len(f) + len(ia)]
    obs = dict(zip(obs, formulas[len(f) + len(ia):]))

    def linear(n, v):
        """A scaled value of parameter ``n`` on the linear scale (None: unbounded)."""
        sc = scale_of.get(n, "lin")
        if v is None:
            return None
        return float(v) if sc == "lin" else float(10.0 ** v if sc == "log10" else np.exp(v))
    u_lin = {n: linear(n, u0[n]) for n in names}

    taken |= set(local) | {"default_compartment", name}
    oid = {o: _identifier(f"obs_{o}", taken) if o in taken else o for o in obs}   # not a model id
    os.makedirs(folder, exist_ok=True)
    tname = "time"
    t_to_time = {problem.t_sym: sympy.Symbol(tname)}
    doc = L.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId(name if str(name).isidentifier() else "model")
    comp = m.createCompartment()
    comp.setId("default_compartment"), comp.setSize(1.0), comp.setConstant(True)
    comp.setSpatialDimensions(3)
    hidden = {c for cs in local.values() for c in cs.values()} | set(renamed)
    used = set().union(*[e.free_symbols for e in f + ia])
    u_at = {symbol(n): v for n, v in u0.items()}
    for p, v in [(n, u_lin[n]) for n in names if n not in hidden or symbol(n) in used] + [
            (str(k), float(v.xreplace(u_at))) for k, v in sim_map(runs[0][0]).items()]:
        q = m.createParameter()
        q.setId(p), q.setValue(v), q.setConstant(True)
    for k, s in enumerate(states):
        q = m.createSpecies()
        q.setId(s), q.setCompartment("default_compartment"), q.setInitialConcentration(0.0)
        q.setHasOnlySubstanceUnits(False), q.setBoundaryCondition(False)
        q.setConstant(False)
        rr = m.createRateRule()
        rr.setVariable(s)
        rr.setMath(_formula(f[k].xreplace(t_to_time), L, f"rhs of {s}"))
        q = m.createInitialAssignment()
        q.setSymbol(s)
        q.setMath(_formula(ia[k], L, f"initial value of {s}"))
    # the csymbol time: parseL3Formula reads 'time' as a name; turn it into the csymbol
    for r in m.getListOfRules():
        _time_csymbol(r.getMath(), tname, L)
    sbml_file = f"model_{name}.xml"
    target = os.path.join(folder, sbml_file)
    if L.writeSBMLToFile(doc, target) != 1 or not os.path.isfile(target):
        raise OSError(f"write_petab: the SBML model could not be written to {target} "
                      f"(libsbml's writer failed: is the folder writable and is there space?)")

    def bound(p, v, low):
        if v is not None:
            return linear(p.name, v)
        return (0.0 if scale_of.get(p.name, "lin") != "lin" else -np.inf) if low else np.inf
    par = pd.DataFrame({
        "parameterId": names,
        "parameterScale": [scale_of.get(n, "lin") for n in names],
        "lowerBound": [bound(p, p.lb, True) for p in problem.parameters],
        "upperBound": [bound(p, p.ub, False) for p in problem.parameters],
        "nominalValue": [u_lin[n] for n in names],
        "estimate": [0 if p.fixed else 1 for p in problem.parameters]})
    # PEtab asks where to draw starts of a log-scale parameter unbounded below (its
    # lower bound 0): a normal of width 1 on its scale around the start (not a bound,
    # not in the likelihood)
    open_log = [not p.fixed and p.lb is None and scale_of.get(p.name, "lin") != "lin"
                for p in problem.parameters]
    if any(open_log):
        par["initializationPriorType"] = ["parameterScaleNormal" if o else ""
                                          for o in open_log]
        par["initializationPriorParameters"] = [f"{u0[n]!r};1.0" if o else ""
                                                for n, o in zip(names, open_log)]
    cond_df = pd.DataFrame([{"conditionId": c, **r} for c, r in cond.items()])
    obs_df = pd.DataFrame({
        "observableId": list(oid.values()),
        "observableFormula": [str(g.xreplace(t_to_time)) for g in obs.values()],
        "noiseFormula": [f"noiseParameter1_{o}" for o in oid.values()],
        "observableTransformation": "lin", "noiseDistribution": "normal"})
    rows = []
    for cid, sp, _ in runs:
        D = sp.data.to_numpy(dtype=float)
        pcol = {"preequilibrationConditionId": pre_id.get(cid, np.nan)} if pre_id else {}
        for j, t in enumerate(sp.meas_times):
            for o, on in enumerate(sp.obs_names):
                if sp.mask[j, o]:
                    rows.append({"observableId": oid[on], **pcol, "simulationConditionId": cid,
                                 "measurement": D[j, o], "time": float(t),
                                 "noiseParameters": 1.0 / np.sqrt(sp.weights[j, o])})
    meas = pd.DataFrame(rows)
    full = {}
    for k, df, write in (("parameters", par, petab.write_parameter_df),
                         ("conditions", cond_df, petab.write_condition_df),
                         ("observables", obs_df, petab.write_observable_df),
                         ("measurements", meas, petab.write_measurement_df)):
        full[k] = os.path.join(folder, f"{k}_{name}.tsv")
        write(df, full[k])
    yaml_path = os.path.join(folder, f"{name}.yaml")
    petab.create_problem_yaml(os.path.join(folder, sbml_file), full["conditions"],
                              full["measurements"], full["parameters"], full["observables"],
                              yaml_path, relative_paths=True)
    return yaml_path


def _time_csymbol(ast, tname, L):
    if ast is None:
        return
    if ast.getType() == L.AST_NAME and ast.getName() == tname:
        ast.setType(L.AST_NAME_TIME)
    for i in range(ast.getNumChildren()):
        _time_csymbol(ast.getChild(i), tname, L)
