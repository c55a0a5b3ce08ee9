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


# ---------------------------------------------------------------------------
# SBML events at given times
# ---------------------------------------------------------------------------
def add_event(m, eid, trigger, target, value, initial_value=False, delay=None):
    ev = m.createEvent()
    ev.setId(eid), ev.setUseValuesFromTriggerTime(True)
    tr = ev.createTrigger()
    tr.setMath(libsbml.parseL3Formula(trigger))
    tr.setInitialValue(initial_value), tr.setPersistent(True)
    if delay is not None:
        ev.createDelay().setMath(libsbml.parseL3Formula(delay))
    ea = ev.createEventAssignment()
    ea.setVariable(target), ea.setMath(libsbml.parseL3Formula(value))


def write_dosing_event(folder, target="u", events=(("on", "time >= t_on", "dose"),), **kw):
    """The switch problem with its input u set by events instead of the assignment rule
    u = piecewise(0, time < t_on, dose): u a parameter without rules (or a boundary
    species) that is 0 until the events set it."""
    path = write_switch(folder, **kw)

    def change(m):
        m.removeRule("u")
        if target == "u":
            m.getParameter("u").setValue(0.0)
        else:
            m.removeParameter("u")
            s = m.createSpecies()
            s.setId("u"), s.setCompartment("cell"), s.setInitialConcentration(0.0)
            s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(True)
            s.setConstant(False)
        for ev in events:
            add_event(m, *ev[:2], "u", *ev[2:])
    edit_sbml(path, change)
    return path


@pytest.mark.parametrize("target", ["parameter", "boundary_species"])
def test_time_triggered_event_setting_an_input(tmp_path, target):
    """An event at t_on (a condition's constant) setting u to the estimated dose is the
    switch problem: the independent simulation and the import's objective equal the
    closed form's, for u a parameter and for u a boundary species (Smith's insulin)."""
    path = write_dosing_event(tmp_path / "p", target="u" if target == "parameter" else "D")
    model = read_petab(path)
    simulated_equals_closed_form(model)
    pe = petab_problem(model)
    for sp, cnd in zip(pe.problem.experiment_problems, pe.problem.experiment_names):
        assert T_ON[cnd] in set(np.round(sp.switch_times, 12))
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


def test_time_triggered_events_fire_in_time_order(tmp_path):
    """Three events on u written out of time order: on at t_on, off at 7 (written first),
    and a delayed one (trigger time >= 1, delay 0.5) that sets 0 before t_on; the latest
    event that has fired decides u, so the closed form is the dose from t_on to 7 (c1:
    2-7, c2: 5-7)."""
    path = write_dosing_event(tmp_path / "p", events=(
        ("off", "time >= 7", "0"), ("on", "t_on <= time", "dose"),
        ("early", "time >= 1", "0", False, "0.5")))
    model = read_petab(path)
    terms = PetabSimulator(model, rtol=1e-11, atol=1e-12).terms()
    t, cnd = terms["time"].to_numpy(), terms["simulationConditionId"]
    on = np.array([closed_form(ti, T_ON[c]) for ti, c in zip(t, cnd)])
    x7 = np.array([closed_form(7.0, T_ON[c]) for c in cnd])
    expect = np.where(t <= 7, on, x7 * np.exp(-K * (t - 7)))
    np.testing.assert_allclose(terms["simulation"], expect, rtol=1e-8, atol=1e-10)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), abs=1e-6)


def test_an_event_true_at_the_start_fires_unless_its_initial_value_is_true(tmp_path):
    """Trigger time >= 0: with initialValue false it fires at t = 0 (u = dose from the
    start), with initialValue true it never fires (u = 0 throughout), as SBML says; an
    event that never fires does not end one that did, though written after it."""
    never = ("never", "time >= 0", "0", True)
    cases = {"fires": ((("start", "time >= 0", "dose", False),), 0.0),
             "never": ((("start", "time >= 0", "dose", True),), None),
             "both": ((("start", "time >= 0", "dose", False), never), 0.0)}
    for name, (events, t_on) in cases.items():
        path = write_dosing_event(tmp_path / name, events=events)
        terms = PetabSimulator(read_petab(path), rtol=1e-11, atol=1e-12).terms()
        t = terms["time"].to_numpy()
        expect = closed_form(t, 0.0) if t_on is not None else X0 * np.exp(-K * t)
        np.testing.assert_allclose(terms["simulation"], expect, rtol=1e-8, atol=1e-10)


def test_time_triggered_event_fit(tmp_path):
    """The reduced space fits the event-dosed problem to the direct minimum of PEtab's NLL."""
    pe = petab_problem(write_dosing_event(tmp_path / "p"))
    best, x = direct_minimum(pe.model, pe.model.nominal_scaled())
    res = estimate(pe.problem, "reduced_space", u0=pe.problem.u0 + 0.1, scheme="enright",
                   max_step=0.2)
    assert res.success, res.status
    assert pe.simulated_nll(res) == pytest.approx(best, abs=2e-3)
    np.testing.assert_allclose(pe.scaled_estimates(res).to_numpy(), x, atol=5e-3)


@pytest.mark.parametrize("trigger, target, value, match", [
    ("X < 0.5", "u", "dose", r"event on \(when X < 0.5.*depends on the states \['X'\] "
                             r"\(a state-triggered event\)"),
    ("time >= t_on", "X", "1", r"event on .*sets X, which the reactions or a rate rule "
                               r"change \(a jump of the state\)"),
    ("time >= t_on", "u", "X", r"event on .*the value it gives u depends on states"),
    ("time < t_on", "u", "dose", r"event on .*true before a time and false after it")])
def test_events_the_import_cannot_represent_are_named(tmp_path, trigger, target, value, match):
    path = write_switch(tmp_path / "p")

    def change(m):
        m.removeRule("u")
        m.getParameter("u").setValue(0.0)
        add_event(m, "on", trigger, target, value)
    edit_sbml(path, change)
    with pytest.raises(UnsupportedFeatureError, match=r"model.xml: SBML " + match):
        read_petab(path)


def test_piecewise_of_a_state_without_a_jump_is_a_rate(tmp_path):
    """Smith's piecewise(x - a, x > a, 0) (a kink, no jump) in a rate law imports: the
    independent simulation equals a direct integration of max(X - 0.5, 0) kinetics, and
    the import's objective the simulated NLL."""
    from scipy.integrate import solve_ivp
    path = write_switch(tmp_path / "p", rate="cell * (u + piecewise(X - 0.5, X > 0.5, 0))")
    model = read_petab(path)
    terms = PetabSimulator(model, rtol=1e-11, atol=1e-12).terms()
    for c, t_on in T_ON.items():
        rows = terms["simulationConditionId"] == c
        t = terms["time"][rows].to_numpy()

        def f(t, x):
            return [(DOSE if t >= t_on else 0.0) + max(x[0] - 0.5, 0.0) - K * x[0]]
        pieces = [solve_ivp(f, (0, t_on), [X0], rtol=1e-12, atol=1e-13, dense_output=True)]
        pieces.append(solve_ivp(f, (t_on, t.max()), pieces[0].y[:, -1], rtol=1e-12,
                                atol=1e-13, dense_output=True))
        x = [pieces[int(ti >= t_on)].sol(ti)[0] for ti in t]
        np.testing.assert_allclose(terms["simulation"][rows], x, rtol=1e-7, atol=1e-9)
    pe = petab_problem(model)
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-11, atol=1e-12).nll(), rel=1e-8)
