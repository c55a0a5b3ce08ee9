r"""Write an :class:`~pyomo_odeest.EstimationProblem` as a PEtab problem.

The model becomes SBML (through libsbml): one species per state in a
compartment of size 1, with a *rate rule* :math:`\dot x = f(x, u, t)` (so the
right-hand side is kept exactly, whatever its form), one SBML parameter per
problem parameter and an initial assignment :math:`x(t_0) = l(u)` per state.
The tables:

* parameters: every parameter on the linear scale, its bounds (PEtab needs
  finite ones: ±1e12 stand for none) and its start value as nominal value;
  ``estimate`` is 0 for fixed parameters;
* one condition ``c0``; observables :math:`g_o` with the noise formula
  ``noiseParameter1_<o>``; one measurement row per datum with
  :math:`\sigma = 1/\sqrt{w}` (weight w; 1 without weights).

Weighted least squares :math:`J = \sum w r^2` and PEtab's normal likelihood
with these σ are related by
:math:`-\log L = J/2 + \sum \tfrac12\log(2\pi/w)`, which the round-trip test
checks.  Problems with several experiments, a Gaussian covariance loss, a
penalty or :math:`t_0 \ne 0` raise :class:`ValueError`.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import sympy
from sympy.printing.str import StrPrinter

from ..problem._declaration import EstimationProblem, LeastSquares
from ._sbml import _libsbml

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


def write_petab(problem: EstimationProblem, folder, name=None):
    """Write ``problem`` as PEtab v1 into ``folder`` (created); returns the YAML path."""
    L = _libsbml()
    import petab.v1 as petab
    if getattr(problem, "experiments", None):
        raise ValueError("write_petab takes a single-experiment problem")
    if not isinstance(problem.loss, LeastSquares):
        raise ValueError("write_petab takes least-squares problems (PEtab noise is per datum)")
    if sympy.sympify(problem.penalty_sym) != 0:
        raise ValueError("write_petab cannot write a penalty R(u) (PEtab v1 has no such term)")
    if getattr(problem, "steady_state", None) is not None:
        raise ValueError("write_petab cannot write a pre-equilibrated problem (the "
                         "pre-equilibration would need its own condition)")
    if problem.t0 != 0.0:
        raise ValueError(f"PEtab simulations start at t = 0; the problem starts at "
                         f"t0 = {problem.t0}")
    name = name or problem.name
    os.makedirs(folder, exist_ok=True)
    tname = "time"
    t_to_time = {problem.t_sym: sympy.Symbol(tname)}

    doc = L.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId(name if str(name).isidentifier() else "model")
    comp = m.createCompartment()
    comp.setId("default_compartment"), comp.setSize(1.0), comp.setConstant(True)
    comp.setSpatialDimensions(3)
    u0 = problem.u0
    for p, v in zip(problem.parameters, u0):
        sp = m.createParameter()
        sp.setId(p.name), sp.setValue(float(v)), sp.setConstant(True)
    for k, s in enumerate(problem.states):
        sp = m.createSpecies()
        sp.setId(s), sp.setCompartment("default_compartment"), sp.setInitialConcentration(0.0)
        sp.setHasOnlySubstanceUnits(False), sp.setBoundaryCondition(False)
        sp.setConstant(False)
        rr = m.createRateRule()
        rr.setVariable(s)
        rr.setMath(_formula(problem.f_sym[k].xreplace(t_to_time), L, f"rhs of {s}"))
        ia = m.createInitialAssignment()
        ia.setSymbol(s)
        ia.setMath(_formula(problem.l_sym[k], L, f"initial value of {s}"))
    # the csymbol time: parseL3Formula reads 'time' as a name; turn it into the csymbol
    for r in m.getListOfRules():
        _time_csymbol(r.getMath(), tname, L)
    sbml_file = f"model_{name}.xml"
    L.writeSBMLToFile(doc, os.path.join(folder, sbml_file))

    par = pd.DataFrame({
        "parameterId": problem.parameter_names,
        "parameterScale": "lin",
        "lowerBound": [-BOUND if p.lb is None else p.lb for p in problem.parameters],
        "upperBound": [BOUND if p.ub is None else p.ub for p in problem.parameters],
        "nominalValue": u0,
        "estimate": [0 if p.fixed else 1 for p in problem.parameters]})
    cond = pd.DataFrame({"conditionId": ["c0"]})
    obs = pd.DataFrame({
        "observableId": problem.obs_names,
        "observableFormula": [str(g.xreplace(t_to_time)) for g in problem.g_sym],
        "noiseFormula": [f"noiseParameter1_{o}" for o in problem.obs_names],
        "observableTransformation": "lin", "noiseDistribution": "normal"})
    rows = []
    D = problem.data.to_numpy(dtype=float)
    for j, t in enumerate(problem.meas_times):
        for o, on in enumerate(problem.obs_names):
            if problem.mask[j, o]:
                rows.append({"observableId": on, "simulationConditionId": "c0",
                             "measurement": D[j, o], "time": float(t),
                             "noiseParameters": 1.0 / np.sqrt(problem.weights[j, o])})
    meas = pd.DataFrame(rows)
    files = {k: f"{k}_{name}.tsv" for k in ("parameters", "conditions", "observables",
                                             "measurements")}
    petab.write_parameter_df(par, os.path.join(folder, files["parameters"]))
    petab.write_condition_df(cond, os.path.join(folder, files["conditions"]))
    petab.write_observable_df(obs, os.path.join(folder, files["observables"]))
    petab.write_measurement_df(meas, os.path.join(folder, files["measurements"]))
    yaml_path = os.path.join(folder, f"{name}.yaml")
    full = {k: os.path.join(folder, v) for k, v in files.items()}
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
