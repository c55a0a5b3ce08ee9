"""SBML constants and functions in imported models: pi, exponentiale and Avogadro's
constant, piecewise anywhere in a rate law (on a condition's constant, on an estimated
parameter), rateOf, initial assignments to constants, and a construct the estimation
cannot represent, named with its SBML element."""
import os

import numpy as np
import pandas as pd
import pytest

petab = pytest.importorskip("petab")
libsbml = pytest.importorskip("libsbml")

from pyomo_odeest import estimate  # noqa: E402
from pyomo_odeest.petab_io import (PetabSimulator, UnsupportedFeatureError,  # noqa: E402
                                   petab_problem, read_petab)

from petab_io.test_petab_features import (DOSE, K, T_ON, X0, closed_form, direct_minimum,  # noqa: E402
                                  objective_at_nominal, write_switch)

pytestmark = pytest.mark.extras


def edit_sbml(yaml_path, change):
    """Apply ``change(model)`` to the problem's SBML file."""
    path = os.path.join(os.path.dirname(yaml_path), "model.xml")
    doc = libsbml.readSBMLFromFile(path)
    change(doc.getModel())
    assert libsbml.writeSBMLToFile(doc, path) == 1


def simulated_equals_closed_form(model, **kw):
    terms = PetabSimulator(model, rtol=1e-11, atol=1e-12).terms()
    expect = [closed_form(t, T_ON[c], **kw) for c, t in zip(terms["simulationConditionId"],
                                                              terms["time"])]
    np.testing.assert_allclose(terms["simulation"], expect, rtol=1e-8, atol=1e-10)


def ast_types(node, out=None):
    out = set() if out is None else out
    out.add(node.getType())
    for i in range(node.getNumChildren()):
        ast_types(node.getChild(i), out)
    return out


def test_pi_exponentiale_and_avogadro_in_a_rate_law(tmp_path):
    """k X written as k X (pi/3.14159...) (e/2.71828...) (avogadro/6.02214076e23): the
    import must read and render the three constants with their values."""
    path = write_switch(tmp_path / "p", rate="cell * u * (pi / 3.141592653589793) * "
                        "(exponentiale / 2.718281828459045) * (avogadro / 6.02214076e23)")
    doc = libsbml.readSBMLFromFile(os.path.join(tmp_path / "p", "model.xml"))
    law = doc.getModel().getReaction("R1").getKineticLaw().getMath()
    assert {libsbml.AST_CONSTANT_PI, libsbml.AST_CONSTANT_E,
            libsbml.AST_NAME_AVOGADRO} <= ast_types(law)
    model = read_petab(path)
    simulated_equals_closed_form(model)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


def write_level(folder, rate):
    """The switch problem with a constant ``level`` of the model that the conditions
    set (0 in c1, 1 in c2), as Alkan's drug levels."""
    path = write_switch(folder, rate=rate)

    def add(m):
        q = m.createParameter()
        q.setId("level"), q.setValue(0.0), q.setConstant(True)
    edit_sbml(path, add)
    pd.DataFrame({"conditionId": list(T_ON), "t_on": list(T_ON.values()),
                  "level": [0.0, 1.0]}).to_csv(os.path.join(folder, "conditions.tsv"),
                                                sep="\t", index=False)
    return path


def test_piecewise_of_a_condition_constant_in_a_rate_law(tmp_path):
    """u doubled where level > 0 (condition c2): per condition the closed form with the
    dose doubled; the imported problem's objective is the simulated NLL."""
    model = read_petab(write_level(tmp_path / "p", "cell * u * piecewise(2, level > 0, 1)"))
    terms = PetabSimulator(model, rtol=1e-11, atol=1e-12).terms()
    expect = [closed_form(t, T_ON[c], dose=DOSE * (2 if c == "c2" else 1))
              for c, t in zip(terms["simulationConditionId"], terms["time"])]
    np.testing.assert_allclose(terms["simulation"], expect, rtol=1e-8, atol=1e-10)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


@pytest.mark.parametrize("approach, options", [
    ("reduced_space", dict(scheme="enright", max_step=0.2)),
    pytest.param("simultaneous", dict(scheme="enright", max_step=0.2),
                 marks=pytest.mark.slow)])
def test_piecewise_of_a_condition_constant_fit(tmp_path, approach, options):
    """The piecewise stays in the rates (Expr_if in Pyomo, its derivatives by branch): the
    fit reaches the direct minimum of PEtab's NLL."""
    pe = petab_problem(write_level(tmp_path / "p", "cell * u * piecewise(2, level > 0, 1)"))
    best, x = direct_minimum(pe.model, pe.model.nominal_scaled())
    P = pe.problem
    res = estimate(P, approach, u0=P.u0 + 0.1 * P.free_mask, **options)
    assert res.success, res.status
    assert pe.simulated_nll(res) == pytest.approx(best, abs=2e-3)
    np.testing.assert_allclose(pe.scaled_estimates(res).to_numpy(), x, atol=5e-3)


def test_piecewise_of_an_estimated_parameter_in_a_rate_law(tmp_path):
    """piecewise(3, dose > 2, 1) with dose = 1: the lower piece, u unchanged."""
    path = write_switch(tmp_path / "p", rate="cell * u * piecewise(3, dose > 2, 1)")
    model = read_petab(path)
    simulated_equals_closed_form(model)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


def test_rate_of_a_species(tmp_path):
    """A parameter Y with the rate rule dY/dt = rateOf(X), Y(0) = 0: Y = X - X0, so the
    observable Y + X0 is X's closed form."""
    path = write_switch(tmp_path / "p", observable=f"Y + {X0}")

    def add(m):
        q = m.createParameter()
        q.setId("Y"), q.setValue(0.0), q.setConstant(False)
        r = m.createRateRule()
        r.setVariable("Y"), r.setMath(libsbml.parseL3Formula("rateOf(X)"))
    edit_sbml(path, add)
    model = read_petab(path)
    assert model.ode.rhs["Y"] == model.ode.rhs["X"]
    simulated_equals_closed_form(model)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


def test_initial_assignment_to_a_constant(tmp_path):
    """k given by the initial assignment k = dose/2 (Bertozzi's beta_N = R0*gamma/N): k
    follows the estimated dose (0.5 at the nominal point; 0.3 at dose 0.6)."""
    path = write_switch(tmp_path / "p")

    def add(m):
        m.getParameter("k").setValue(123.0)      # overridden by the initial assignment
        a = m.createInitialAssignment()
        a.setSymbol("k"), a.setMath(libsbml.parseL3Formula("dose / 2"))
    edit_sbml(path, add)
    par = pd.read_csv(os.path.join(tmp_path / "p", "parameters.tsv"), sep="\t")
    par = par[par["parameterId"] != "k"]
    par.to_csv(os.path.join(tmp_path / "p", "parameters.tsv"), sep="\t", index=False)
    model = read_petab(path)
    assert "k" not in model.ode.constants
    simulated_equals_closed_form(model, k=DOSE / 2)
    sim = PetabSimulator(model, rtol=1e-11, atol=1e-12)
    terms = sim.terms(np.log10([0.6]))
    expect = [closed_form(t, T_ON[c], k=0.3, dose=0.6)
              for c, t in zip(terms["simulationConditionId"], terms["time"])]
    np.testing.assert_allclose(terms["simulation"], expect, rtol=1e-8, atol=1e-10)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(sim.nll(), abs=1e-6)


def test_a_construct_without_representation_is_named_as_the_model_s(tmp_path):
    """floor() in a kinetic law: UnsupportedFeatureError naming the file and the reaction,
    not a failure of a right-hand side."""
    path = write_switch(tmp_path / "p", rate="cell * u * floor(dose + 0.5)")
    with pytest.raises(UnsupportedFeatureError,
                       match=r"model.xml: floor.*the rate of X.*kinetic law of R1") as err:
        petab_problem(path)
    assert "rhs" not in str(err.value)
