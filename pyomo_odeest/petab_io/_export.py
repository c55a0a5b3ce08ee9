r"""Write an :class:`~pyomo_odeest.EstimationProblem` as a PEtab problem.

The model becomes SBML (through libsbml): one species per state in a
compartment of size 1, with a *rate rule* :math:`\dot x = f(x, u, t)` (so the
right-hand side is kept exactly, whatever its form), one SBML parameter per
parameter of the model and an initial assignment :math:`x(0) = l(u)` per state;
every parameter on the linear scale (±1e12 stand for infinite bounds), one
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

BOUND = 1e12


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


def write_petab(problem: EstimationProblem, folder, name=None):
    """Write ``problem`` as PEtab v1 into ``folder`` (created); returns the YAML path."""
    L = _libsbml()
    import petab.v1 as petab
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
    for cid, sp, pre in runs:
        if sp.t0 != 0.0:
            raise ValueError(f"{where(cid)}PEtab simulations start at t = 0; the problem "
                             f"starts at t0 = {sp.t0}")
        for k, inp in (sp.inputs or {}).items():
            vals = set(inp.values) if isinstance(inp, PiecewiseConstant) else set()
            if len(vals) != 1:
                raise ValueError(f"{where(cid)}input '{k}' ({type(inp).__name__}) changes in "
                                 f"time; PEtab v1 conditions hold constants (an input constant "
                                 f"over each experiment, a PiecewiseConstant of one value, is "
                                 f"written)")
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
    renamed = {k: _identifier(f"{k}_model", taken) for k in dict.fromkeys(
        k for ov in overrides.values() for k in ov if k not in local)}

    def sim_map(cid):                  # model parameter -> its value in the condition
        m = {symbol(k): symbol(c[cid]) for k, c in local.items()}
        m.update({symbol(k): v[cid] for k, v in inputs.items()})
        m.update({symbol(r): symbol(k) for k, r in renamed.items()})
        return m

    def back(cid):                     # this experiment's parameters -> model parameters
        return {v: k for k, v in sim_map(cid).items() if str(k) not in inputs}

    def entry(v, what):
        v = sympy.sympify(v)
        if v.is_Number:
            return float(v)
        if v.is_Symbol and v.name in names:
            return v.name
        raise ValueError(f"{what} is {v}: a PEtab v1 condition table holds numbers and "
                         f"parameter ids only")

    to_model = {symbol(k): symbol(r) for k, r in renamed.items()}
    f = [sympy.sympify(e).xreplace(to_model)
         for e in (problem.f_sym if several else map(_inline, problem.f_sym))]
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

    name = name or problem.name
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
    for p, v in [(n, u0[n]) for n in names if n not in hidden or symbol(n) in used] + [
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
    L.writeSBMLToFile(doc, os.path.join(folder, sbml_file))

    par = pd.DataFrame({
        "parameterId": names,
        "parameterScale": "lin",
        "lowerBound": [-BOUND if p.lb is None else p.lb for p in problem.parameters],
        "upperBound": [BOUND if p.ub is None else p.ub for p in problem.parameters],
        "nominalValue": problem.u0,
        "estimate": [0 if p.fixed else 1 for p in problem.parameters]})
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
