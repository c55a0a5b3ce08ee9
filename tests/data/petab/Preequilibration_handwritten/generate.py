"""Writes this hand-written PEtab problem with pre-equilibration (run from this folder).

Model (mass action, one compartment of size 1):
    A -> B  at k1 (1 + L) A,     B -> A  at k2 B      (A + B conserved)
    -> C    at ks L A,           C ->    at kd C      (no conservation)
Conditions: ``pre`` (L = 0.1) is the pre-equilibration of ``stim1`` (L = 1; C
keeps its steady-state value: NaN in the table) and of ``stim2`` (L = 2; C reset
to 0.5); ``ctrl`` (L = 0.5) has no pre-equilibration and starts from the SBML
initial values A = 1, B = 0, C = 0.  Observables A (σ = 0.02) and C (σ = 0.05),
normal noise.  The data are a simulation at the nominal parameters (SciPy, the
steady state in closed form) plus seeded Gaussian noise.
"""
import os

import libsbml
import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

TRUE = {"k1": 0.7, "k2": 0.4, "ks": 1.5, "kd": 0.6}
L = {"pre": 0.1, "stim1": 1.0, "stim2": 2.0, "ctrl": 0.5}
TIMES = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
SIGMA = {"obs_A": 0.02, "obs_C": 0.05}


def sbml(path):
    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId("preequilibration_handwritten")
    c = m.createCompartment()
    c.setId("cell"), c.setSize(1.0), c.setConstant(True), c.setSpatialDimensions(3)
    for s, v in (("A", 1.0), ("B", 0.0), ("C", 0.0)):
        sp = m.createSpecies()
        sp.setId(s), sp.setCompartment("cell"), sp.setInitialConcentration(v)
        sp.setHasOnlySubstanceUnits(False), sp.setBoundaryCondition(False), sp.setConstant(False)
    for p, v in {**TRUE, "L": 0.0}.items():
        q = m.createParameter()
        q.setId(p), q.setValue(v), q.setConstant(True)
    for rid, reac, prod, mods, law in (("R1", "A", "B", (), "cell * k1 * (1 + L) * A"),
                                       ("R2", "B", "A", (), "cell * k2 * B"),
                                       ("R3", None, "C", ("A",), "cell * ks * L * A"),
                                       ("R4", "C", None, (), "cell * kd * C")):
        r = m.createReaction()
        r.setId(rid), r.setReversible(False)
        if reac:
            sr = r.createReactant()
            sr.setSpecies(reac), sr.setStoichiometry(1), sr.setConstant(True)
        if prod:
            sr = r.createProduct()
            sr.setSpecies(prod), sr.setStoichiometry(1), sr.setConstant(True)
        for mo in mods:
            r.createModifier().setSpecies(mo)
        r.createKineticLaw().setMath(libsbml.parseL3Formula(law))
    libsbml.writeSBMLToFile(doc, path)


def rhs(t, x, Lv):
    A, B, C = x
    k1, k2, ks, kd = TRUE.values()
    return [-k1 * (1 + Lv) * A + k2 * B, k1 * (1 + Lv) * A - k2 * B, ks * Lv * A - kd * C]


def simulate(cond):
    k1, k2, ks, kd = TRUE.values()
    if cond == "ctrl":
        x0 = [1.0, 0.0, 0.0]
    else:
        A = k2 / (k1 * (1 + L["pre"]) + k2)
        x0 = [A, 1 - A, ks * L["pre"] * A / kd]
        if cond == "stim2":
            x0[2] = 0.5
    sol = solve_ivp(rhs, (0, TIMES[-1]), x0, args=(L[cond],), t_eval=TIMES, rtol=1e-12,
                    atol=1e-13)
    return sol.y


def main():
    sbml("model.xml")
    rng = np.random.default_rng(21)
    rows = []
    for cond in ("stim1", "stim2", "ctrl"):
        X = simulate(cond)
        for k, t in enumerate(TIMES):
            for obs, idx in (("obs_A", 0), ("obs_C", 2)):
                rows.append({"observableId": obs,
                             "preequilibrationConditionId": "" if cond == "ctrl" else "pre",
                             "simulationConditionId": cond, "time": t,
                             "measurement": X[idx, k] + SIGMA[obs] * rng.standard_normal()})
    pd.DataFrame(rows).to_csv("measurements.tsv", sep="\t", index=False)
    pd.DataFrame({"conditionId": list(L), "L": list(L.values()),
                  "C": [np.nan, np.nan, 0.5, np.nan]}).to_csv("conditions.tsv", sep="\t",
                                                              index=False)
    pd.DataFrame({"observableId": list(SIGMA), "observableFormula": ["A", "C"],
                  "noiseFormula": list(SIGMA.values())}).to_csv("observables.tsv", sep="\t",
                                                                 index=False)
    pd.DataFrame({"parameterId": list(TRUE), "parameterScale": "log10", "lowerBound": 1e-3,
                  "upperBound": 1e3, "nominalValue": list(TRUE.values()),
                  "estimate": 1}).to_csv("parameters.tsv", sep="\t", index=False)
    with open("problem.yaml", "w") as f:
        f.write("format_version: 1\nparameter_file: parameters.tsv\nproblems:\n"
                "- condition_files: [conditions.tsv]\n  measurement_files: [measurements.tsv]\n"
                "  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    main()
