"""PEtab import: SBML conversion, nominal likelihoods of the shipped benchmark
problems, unsupported features, estimation problems."""
import os
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module

petab = pytest.importorskip("petab")
libsbml = pytest.importorskip("libsbml")

from scipy.integrate import solve_ivp  # noqa: E402
import sympy  # noqa: E402

from pyomo_odeest import estimate  # noqa: E402
from pyomo_odeest.petab_io import (PetabSimulator, UnsupportedFeatureError, petab_problem,  # noqa: E402
                                read_petab, read_sbml)
from pyomo_odeest.petab_io._sbml import TIME, symbol  # noqa: E402
from pyomo_odeest import GaussianNLL, Preequilibration, Status  # noqa: E402
from pyomo_odeest.problem import PiecewiseConstant, PiecewiseLinear  # noqa: E402

pytestmark = pytest.mark.extras

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "petab")
REFERENCE = pd.read_csv(os.path.join(DATA, "references.tsv"), sep="\t",
                        index_col="problem")["reference_nll"]


def copy_problem(tmp_path, name="Crauste_CellSystems2017"):
    dst = tmp_path / name
    shutil.copytree(os.path.join(DATA, name), dst)
    return dst


def table(folder, prefix):
    return next(p for p in folder.iterdir() if p.name.startswith(prefix))


# ---------------------------------------------------------------------------
# nominal likelihood of every shipped problem
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(REFERENCE.index))
def test_nominal_nll_matches_reference(name):
    """Each of the ten shipped problems imports and its nominal NLL by the independent
    simulation equals the reference within 1e-3*max(1, |ref|) (Crauste's reference
    carries an integration error, see the next test)."""
    model = read_petab(os.path.join(DATA, name))
    nll = PetabSimulator(model, rtol=1e-8, atol=1e-10).nll()
    assert abs(nll - REFERENCE[name]) <= 1e-3 * max(1.0, abs(REFERENCE[name]))


def test_a_simulation_without_end_stops_at_its_work_bound():
    """A steady state that is never reached (here: too few evaluations allowed for
    Brannmark's pre-equilibration) fails with a message instead of running on; the
    bound counts per condition and likelihood, so the next call with a sufficient one
    succeeds."""
    model = read_petab(os.path.join(DATA, "Brannmark_JBC2010"))
    sim = PetabSimulator(model, rtol=1e-8, atol=1e-10, max_evaluations=50)
    with pytest.raises(RuntimeError, match="stopped after 50 evaluations"):
        sim.nll()
    sim.max_evaluations = 10**6
    assert abs(sim.nll() - REFERENCE["Brannmark_JBC2010"]) <= 1e-3 * abs(
        REFERENCE["Brannmark_JBC2010"])


def test_crauste_nominal_equals_likelihood_of_its_simulated_data():
    """Crauste's reference is 1.2e-3 (absolute) above our nominal value; our value
    is the likelihood of the collection's own simulatedData table (computed by
    petab's ``calculate_llh``).  The reference carries the integration error of its
    simulator's default tolerance (AMICI: 190.96513 at rtol 1e-8, 190.96398 at rtol
    1e-12, the value here)."""
    import petab.v1 as pv1
    name = "Crauste_CellSystems2017"
    model = read_petab(os.path.join(DATA, name))
    terms = PetabSimulator(model, rtol=1e-10, atol=1e-12).terms()
    prob = pv1.Problem.from_yaml(model.yaml_path)
    sim = pd.read_csv(table(pathlib.Path(model.folder), "simulatedData"), sep="\t")
    shipped = -pv1.calculate_llh(prob.measurement_df, sim, prob.observable_df, prob.parameter_df)
    both = terms.merge(sim, on=["observableId", "time"], suffixes=("", "_shipped"))
    assert len(both) == len(terms)
    # a sensitive model: simulators agree to ~1e-4 on states of size 1e4-1e5
    assert np.allclose(both["simulation"], both["simulation_shipped"], rtol=2e-4)
    assert terms["nll"].sum() == pytest.approx(shipped, abs=1e-6)
    assert 1e-3 < REFERENCE[name] - shipped < 1.5e-3


def test_nll_against_petab_calculate_llh():
    """Our likelihood terms equal petab's own ``calculate_llh`` on the same simulation."""
    import petab.v1 as pv1
    model = read_petab(os.path.join(DATA, "Elowitz_Nature2000"))
    terms = PetabSimulator(model, rtol=1e-8, atol=1e-10).terms()
    prob = pv1.Problem.from_yaml(model.yaml_path)
    sim = prob.measurement_df.copy()
    sim = sim.rename(columns={"measurement": "simulation"})
    sim["simulation"] = terms["simulation"].to_numpy()
    llh = pv1.calculate_llh(prob.measurement_df, sim, prob.observable_df, prob.parameter_df)
    assert terms["nll"].sum() == pytest.approx(-llh, rel=1e-12)


# ---------------------------------------------------------------------------
# SBML features the shipped problems do not exercise
# ---------------------------------------------------------------------------
def _sbml_with_features(path):
    """Transport between compartments of sizes 2 and 0.5 through a function
    definition; an assignment rule, a rate rule, an initial assignment and an
    amount species."""
    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    for cid, size in (("c1", 2.0), ("c2", 0.5)):
        c = m.createCompartment()
        c.setId(cid), c.setSize(size), c.setConstant(True), c.setSpatialDimensions(3)
    for sid, comp, x0, amount in (("A", "c1", 1.0, False), ("B", "c2", 0.0, False),
                                  ("N", "c2", 3.0, True)):
        s = m.createSpecies()
        s.setId(sid), s.setCompartment(comp), s.setInitialConcentration(x0)
        s.setHasOnlySubstanceUnits(amount), s.setBoundaryCondition(False), s.setConstant(False)
    for pid, v, const in (("k", 0.7, True), ("b0", 0.25, True), ("q", 0.0, False),
                          ("tot", 0.0, False)):
        p = m.createParameter()
        p.setId(pid), p.setValue(v), p.setConstant(const)
    fd = m.createFunctionDefinition()
    fd.setId("mass_action")
    fd.setMath(libsbml.parseL3Formula("lambda(kk, x, vol, kk * x * vol)"))
    r = m.createReaction()
    r.setId("transport"), r.setReversible(False)
    sr = r.createReactant()
    sr.setSpecies("A"), sr.setStoichiometry(1.0), sr.setConstant(True)
    sr = r.createProduct()
    sr.setSpecies("B"), sr.setStoichiometry(1.0), sr.setConstant(True)
    r.createKineticLaw().setMath(libsbml.parseL3Formula("mass_action(k, A, c1)"))
    r = m.createReaction()
    r.setId("decay"), r.setReversible(False)
    sr = r.createReactant()
    sr.setSpecies("N"), sr.setStoichiometry(2.0), sr.setConstant(True)
    r.createKineticLaw().setMath(libsbml.parseL3Formula("k * N"))
    ar = m.createAssignmentRule()
    ar.setVariable("tot"), ar.setMath(libsbml.parseL3Formula("A + B"))
    rr = m.createRateRule()
    rr.setVariable("q"), rr.setMath(libsbml.parseL3Formula("tot"))
    ia = m.createInitialAssignment()
    ia.setSymbol("B"), ia.setMath(libsbml.parseL3Formula("b0"))
    libsbml.writeSBMLToFile(doc, str(path))


def test_sbml_compartments_rules_functions_against_closed_form(tmp_path):
    _sbml_with_features(tmp_path / "m.xml")
    ode = read_sbml(tmp_path / "m.xml")
    assert ode.states == ["A", "B", "N", "q"]
    k, b0 = 0.7, 0.25
    sub = {symbol(c): v for c, v in ode.constants.items()}
    f = sympy.lambdify(([symbol(s) for s in ode.states], TIME),
                       [ode.rhs[s].xreplace(sub) for s in ode.states])
    x0 = [float(ode.initial[s].xreplace(sub)) for s in ode.states]
    t = np.linspace(0, 3, 7)
    sol = solve_ivp(lambda tt, x: f(x, tt), (0, 3), x0, t_eval=t, rtol=1e-11, atol=1e-12)
    e = np.exp(-k * t)
    # dA/dt = -v/V1 = -kA; dB/dt = v/V2 = 4kA; dN/dt = -2kN (amount: 3 * 0.5 at t=0);
    # q' = A + B
    expected = np.array([e, b0 + 4 * (1 - e), 1.5 * np.exp(-2 * k * t),
                         (b0 + 4) * t - 3 * (1 - e) / k])
    assert np.allclose(sol.y, expected, rtol=1e-8, atol=1e-9)


# ---------------------------------------------------------------------------
# unsupported features: one clear error each, naming the feature and the file
# ---------------------------------------------------------------------------
def test_an_event_that_makes_a_state_jump_raises(tmp_path):
    d = copy_problem(tmp_path)
    xml = table(d, "model_")
    doc = libsbml.readSBMLFromFile(str(xml))
    ev = doc.getModel().createEvent()
    ev.setId("dose"), ev.setUseValuesFromTriggerTime(True)
    tr = ev.createTrigger()
    tr.setMath(libsbml.parseL3Formula("time > 5")), tr.setInitialValue(False), tr.setPersistent(True)
    ea = ev.createEventAssignment()
    ea.setVariable("Pathogen"), ea.setMath(libsbml.parseL3Formula("1"))
    libsbml.writeSBMLToFile(doc, str(xml))
    with pytest.raises(UnsupportedFeatureError, match=r"model_Crauste.*SBML event dose \(when "
                       r"time > 5, sets Pathogen\) is not supported: it sets Pathogen, which "
                       r"the reactions or a rate rule change \(a jump of the state\)"):
        read_petab(d)


def test_unknown_prior_type_raises(tmp_path):
    d = copy_problem(tmp_path)
    f = table(d, "parameters_")
    df = pd.read_csv(f, sep="\t")
    df["objectivePriorType"] = "gamma"
    df["objectivePriorParameters"] = "0;1"
    df.to_csv(f, sep="\t", index=False)
    with pytest.raises(UnsupportedFeatureError, match=r"parameters_Crauste.*objectivePriorType "
                                                       r"'gamma'"):
        read_petab(d)


def test_state_dependent_sigma_on_a_collection_problem(tmp_path):
    """Crauste with σ = s·EarlyEffector for one observable: the import's objective at the
    nominal point is the independent simulation's NLL (a log-σ residual per datum of that
    observable)."""
    from petab_io.test_petab_features import objective_at_nominal
    d = copy_problem(tmp_path)
    f = table(d, "observables_")
    df = pd.read_csv(f, sep="\t")
    df.loc[0, "noiseFormula"] = "noiseParameter1_observable_EarlyEffector * EarlyEffector"
    df.to_csv(f, sep="\t", index=False)
    model = read_petab(d)
    pe = petab_problem(model)
    n = int(np.sum(model.measurements["observableId"] == "observable_EarlyEffector"))
    assert sum(c.endswith("_log_sigma") for c in pe.problem.obs_names) == n > 0
    assert objective_at_nominal(pe) == pytest.approx(
        PetabSimulator(model, rtol=1e-10, atol=1e-12).nll(), abs=1e-4)


def test_laplace_noise_raises(tmp_path):
    d = copy_problem(tmp_path)
    f = table(d, "observables_")
    df = pd.read_csv(f, sep="\t")
    df.loc[1, "noiseDistribution"] = "laplace"
    df.to_csv(f, sep="\t", index=False)
    with pytest.raises(UnsupportedFeatureError, match=r"observables_Crauste.*laplace"):
        read_petab(d)


def test_negative_infinite_time_raises(tmp_path):
    d = copy_problem(tmp_path)
    f = table(d, "measurementData_")
    df = pd.read_csv(f, sep="\t")
    df["time"] = df["time"].astype(float)
    df.loc[0, "time"] = -np.inf
    df.to_csv(f, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"measurementData_Crauste.*row 0: time -inf"):
        read_petab(d)


def _edit_sbml(d, edit):
    xml = table(d, "model_")
    doc = libsbml.readSBMLFromFile(str(xml))
    assert doc.setLevelAndVersion(3, 2, False)           # rateOf, conversion factors: L3
    edit(doc.getModel())
    libsbml.writeSBMLToFile(doc, str(xml))


def _kinetic_law(formula):
    def edit(m):
        kl = m.getReaction(0).getKineticLaw()
        kl.setMath(libsbml.parseL3Formula(f"({libsbml.formulaToL3String(kl.getMath())}) * "
                                          f"{formula}"))
    return edit


def _variable_compartment(m):
    m.getCompartment(0).setConstant(False)


def _conversion_factor(m):
    p = m.createParameter()
    p.setId("cf"), p.setValue(2.0), p.setConstant(True)
    m.setConversionFactor("cf")


@pytest.mark.parametrize("edit, feature", [
    (_kinetic_law("delay(Naive, 1) / Naive"), "delay"),
    (_kinetic_law("(1 + rateOf(Naive))"), "rateOf"),
    (_variable_compartment, "compartment of variable size"),
    (_conversion_factor, "conversion factor"),
], ids=["delay", "rateOf", "variable_compartment", "conversion_factor"])
def test_sbml_feature_raises(tmp_path, edit, feature):
    d = copy_problem(tmp_path)
    _edit_sbml(d, edit)
    with pytest.raises(UnsupportedFeatureError, match=rf"model_Crauste.*{feature}"):
        read_petab(d)


def _yaml_edit(d, edit):
    import yaml
    f = table(d, "Crauste_CellSystems2017.yaml")
    spec = yaml.safe_load(f.read_text())
    edit(spec)
    f.write_text(yaml.safe_dump(spec))


@pytest.mark.parametrize("edit, feature", [
    (lambda s: s["problems"][0].update(mapping_files=["mapping.tsv"]), "mapping tables"),
    (lambda s: s["problems"][0]["sbml_files"].append("other.xml"), "2 models"),
    (lambda s: s["problems"].append(dict(s["problems"][0])), "2 problems in one file"),
    (lambda s: s.update(extensions={"sciml": {"version": "0.1"}}), "extensions"),
    (lambda s: s.update(format_version=2), "format version 2"),
], ids=["mapping_tables", "several_models", "several_problems", "extensions", "version_2"])
def test_yaml_feature_raises(tmp_path, edit, feature):
    d = copy_problem(tmp_path)
    _yaml_edit(d, edit)
    with pytest.raises(UnsupportedFeatureError, match=rf"Crauste_CellSystems2017\.yaml.*{feature}"):
        read_petab(d)


def test_sigma_with_two_estimated_parameters(tmp_path):
    """sigma = sd_a * sd_b with both estimated: a general noise model of the two (their
    step of the alternation is a numerical minimization)."""
    d = copy_problem(tmp_path)
    f = table(d, "observables_")
    obs = pd.read_csv(f, sep="\t")
    obs.loc[obs["observableId"] == "observable_Naive", "noiseFormula"] = \
        "noiseParameter1_observable_Naive * sd_b"
    obs.to_csv(f, sep="\t", index=False)
    f = table(d, "measurementData_")
    df = pd.read_csv(f, sep="\t")
    df["noiseParameters"] = df["noiseParameters"].astype(object)
    df.loc[df["observableId"] == "observable_Naive", "noiseParameters"] = "sd_a"
    df.to_csv(f, sep="\t", index=False)
    f = table(d, "parameters_")
    par = pd.read_csv(f, sep="\t")
    extra = pd.DataFrame([dict(parameterId=n, parameterName=n, parameterScale="log10",
                               lowerBound=1e-2, upperBound=1e5, nominalValue=v, estimate=1)
                          for n, v in (("sd_a", 100.0), ("sd_b", 1.0))])
    pd.concat([par, extra]).to_csv(f, sep="\t", index=False)
    model = read_petab(d)
    assert np.isfinite(PetabSimulator(model, rtol=1e-8, atol=1e-10).nll())
    pe = petab_problem(model, noise="alternate")
    assert pe.noise_parameters == ["sd_a", "sd_b"] and pe._noise is not None
    joint = petab_problem(model)                   # the default: parameters of the estimation
    assert not joint.noise_parameters and {"sd_a", "sd_b"} <= set(joint.problem.parameter_names)
    with pytest.raises(ValueError, match="noise='both'"):
        petab_problem(model, noise="both")


def _lv_with_noise_parameters(tmp_path):
    """The exported Lotka–Volterra problem with one estimated noise parameter per
    observable (log10 scale); its folder."""
    from pyomo_odeest.petab_io import write_petab
    prob = _time_dependent_problem()
    folder = pathlib.Path(write_petab(prob, tmp_path / "lv")).parent
    f = table(folder, "measurements_")
    df = pd.read_csv(f, sep="\t")
    df["noiseParameters"] = np.where(df["observableId"] == "obs_x1", "sd_x1", "sd_x2")
    df.to_csv(f, sep="\t", index=False)
    f = table(folder, "parameters_")
    par = pd.read_csv(f, sep="\t")
    extra = pd.DataFrame([dict(parameterId=n, parameterScale="log10", lowerBound=1e-3,
                               upperBound=10.0, nominalValue=0.3, estimate=1)
                          for n in ("sd_x1", "sd_x2")])
    pd.concat([par, extra]).to_csv(f, sep="\t", index=False)
    return folder


def test_noise_parameters_stated_jointly_reach_the_alternations_minimum(tmp_path):
    """The default (noise='joint'): the noise parameters are parameters of the
    estimation, and one least-squares fit reaches the minimum of PEtab's NLL that the
    alternation (noise='alternate') reaches in many rounds; the objective on the
    import is PEtab's NLL by the independent simulation."""
    folder = _lv_with_noise_parameters(tmp_path)
    joint, alt = petab_problem(folder), petab_problem(folder, noise="alternate")
    assert {"sd_x1", "sd_x2"} <= set(joint.problem.parameter_names)
    sim = PetabSimulator(joint.model, rtol=1e-11, atol=1e-12)
    from pyomo_odeest.discretization.continuous import ContinuousModel
    J0 = ContinuousModel(joint.problem, method="LSODA", rtol=1e-11,
                         atol=1e-12).objective(joint.problem.u0)
    assert joint.nll(J0) == pytest.approx(sim.nll(), abs=1e-7)
    ls = dict(optimizer="least_squares", rtol=1e-10)
    one = estimate(joint.problem, "continuous", **ls)
    rounds = alt.fit("continuous", **ls)
    assert one.success and rounds.success and rounds.extra["petab_rounds"] > 2
    assert joint.simulated_nll(one) == pytest.approx(alt.simulated_nll(rounds), abs=1e-6)
    np.testing.assert_allclose(joint.scaled_estimates(one).to_numpy(),
                               alt.scaled_estimates(rounds).to_numpy(), atol=1e-3)


@pytest.mark.slow       # the direct L-BFGS-B reference takes minutes of simulations
def test_several_noise_parameters_estimated_jointly(tmp_path):
    """One estimated noise parameter per observable (log10 scale): fit() alternates the
    least-squares fit and the exact noise update; its NLL and estimates equal a direct
    minimization of PEtab's NLL by simulation over all parameters, noise included."""
    from scipy.optimize import minimize
    folder = _lv_with_noise_parameters(tmp_path)
    pe = petab_problem(folder, noise="alternate")
    assert pe.noise_parameters == ["sd_x1", "sd_x2"] and pe.sigma_parameter is None
    assert "sd_x1" not in pe.problem.parameter_names
    res = pe.fit("reduced_space", max_step=0.05, scheme="enright")
    assert res.success and res.extra["petab_rounds"] > 2
    sim = PetabSimulator(pe.model, rtol=1e-11, atol=1e-12)
    ours = pe.scaled_estimates(res).to_numpy()
    def nll(v):                # a trial point whose simulation fails is a bad point
        try:
            return sim.nll(v)
        except RuntimeError:
            return 1e10
    direct = minimize(nll, ours + 0.05, method="L-BFGS-B",
                      options=dict(ftol=1e-15, gtol=1e-9, maxiter=2000))
    assert sim.nll(ours) == pytest.approx(direct.fun, abs=2e-5)
    np.testing.assert_allclose(ours, direct.x, atol=2e-3)
    assert res.extra["petab_nll"] == pytest.approx(sim.nll(ours), abs=1e-3)   # discretization
    s = res.extra["petab_noise"]                       # measured: 0.216 and 0.315
    assert s["sd_x2"] > 1.2 * s["sd_x1"]


# ---------------------------------------------------------------------------
# export and round trip
# ---------------------------------------------------------------------------
def _time_dependent_problem():
    """Lotka-Volterra with a time-dependent forcing, an initial state that is a
    parameter, weights and a fixed parameter: every piece the export writes."""
    import pyomo.environ as pyo
    from pyomo_odeest import EstimationProblem, Parameter
    from pyomo_odeest.models import lotka_volterra_data
    data = lotka_volterra_data(seed=3)
    data.iloc[2, 0] = np.nan
    w = pd.DataFrame(2.0, index=data.index, columns=data.columns)
    w.iloc[:, 1] = 0.5
    return EstimationProblem(
        states=["x1", "x2"],
        parameters=[Parameter("p1", 0.9, lb=0.0, ub=5.0), Parameter("p2", 1.1),
                    Parameter("p3", 1.0, fixed=True), Parameter("p4", 0.95), Parameter("a0", 0.4)],
        rhs=lambda x, u, t: [-u.p1 * x.x1 + u.p2 * x.x1 * x.x2 + 0.01 * pyo.sin(t),
                             u.p3 * x.x2 - u.p4 * x.x1 * x.x2],
        initial={"x1": "a0", "x2": 1.0}, data=data, weights=w, name="lv_forced")


def test_export_round_trip(tmp_path):
    from pyomo_odeest.petab_io import write_petab
    prob = _time_dependent_problem()
    yaml_path = write_petab(prob, tmp_path / "lv")
    assert not petab.v1.lint_problem(petab.v1.Problem.from_yaml(yaml_path))
    model = read_petab(yaml_path)
    assert [p.id for p in model.parameters] == prob.parameter_names
    assert [p.estimate for p in model.parameters] == [not p.fixed for p in prob.parameters]
    assert np.allclose([p.nominal for p in model.parameters], prob.u0)
    assert model.parameters[0].lb == 0.0 and model.parameters[0].ub == 5.0
    # PEtab's NLL of the exported problem = J/2 + sum 1/2 log(2 pi / w), J from an
    # independent simulation of the original problem
    f = prob.numeric_rhs()
    u = prob.u0
    sol = solve_ivp(lambda t, x: f(x, u, t), (0.0, prob.T), prob.initial_state(u),
                    t_eval=prob.meas_times, rtol=1e-11, atol=1e-12)
    r = sol.y.T - prob.data.to_numpy()
    J = np.nansum(prob.weights * np.where(prob.mask, r, 0.0) ** 2)
    expected = J / 2 + np.sum(0.5 * np.log(2 * np.pi / prob.weights[prob.mask]))
    assert PetabSimulator(model, rtol=1e-11, atol=1e-12).nll() == pytest.approx(expected,
                                                                               rel=1e-9)
    # and back into an estimation problem: the same right-hand side and objective
    back = petab_problem(model).problem
    x, t = np.array([0.7, 1.3]), 2.5
    assert np.allclose(back.numeric_rhs()(x, back.u0, t), f(x, u, t), rtol=1e-14)
    assert np.allclose(back.initial_state(back.u0), prob.initial_state(u))


def _round_trip(prob, tmp_path):
    """Write ``prob``, lint it with petab and import it: PEtab's NLL of the import at the
    nominal parameters is J/2 + sum 1/2 log(2 pi / w) of the original (both discretized
    alike) and the reduced-space fits give the same estimates."""
    from pyomo_odeest import DiscreteModel, estimate
    from pyomo_odeest.petab_io import write_petab
    yaml_path = write_petab(prob, tmp_path / prob.name)
    assert not petab.v1.lint_problem(petab.v1.Problem.from_yaml(yaml_path))
    pe = petab_problem(yaml_path)

    def objective(P):
        return sum(DiscreteModel(sp, "adams_pc", 6, steps_per_interval=20).objective(P.u0)
                   for sp in (P.experiment_problems or [P]))
    w = np.concatenate([sp.weights[sp.mask] for sp in (prob.experiment_problems or [prob])])
    assert pe.nll(objective(pe.problem)) == pytest.approx(
        objective(prob) / 2 + np.sum(0.5 * np.log(2 * np.pi / w)), rel=1e-8)
    ours, back = (estimate(P, "reduced_space", scheme="adams_pc", qmax=6, steps_per_interval=20)
                  for P in (prob, pe.problem))
    assert ours.success and back.success
    free = [p.name for p in prob.parameters if not p.fixed]
    np.testing.assert_allclose(back.estimates[free], ours.estimates[free], rtol=1e-6)
    return pe, pathlib.Path(yaml_path).parent


def _experiments_problem():
    """x' = -k x + b F, y' = k x - c y in three experiments: k and x0 local (x0 fixed in e1),
    F a constant input per experiment, y(0) = 0.3 in e3 only, sigma or weights per
    experiment."""
    from pyomo_odeest import EstimationProblem, Experiment, Parameter
    t = np.linspace(0.5, 4.0, 8)
    rng = np.random.default_rng(5)

    def data(k, F, x0, y0):
        sol = solve_ivp(lambda _, z: [-k * z[0] + 0.5 * F, k * z[0] - 0.7 * z[1]], (0, 4),
                        [x0, y0], t_eval=t, rtol=1e-10, atol=1e-12)
        return pd.DataFrame(sol.y.T + 0.02 * rng.standard_normal((8, 2)), index=t,
                            columns=["x", "y"])

    def F(v):
        return {"F": PiecewiseConstant([0.0], [v])}
    return EstimationProblem(
        ["x", "y"], [Parameter("k", 1.0, lb=0.01, ub=10, local=True),
                     Parameter("b", 0.4, lb=0, ub=5), Parameter("c", 1.0, lb=0.01, ub=10),
                     Parameter("x0", 1.0, local=True)],
        rhs=lambda x, u, t: [-u.k * x.x + u.b * u.F, u.k * x.x - u.c * x.y],
        initial={"x": "x0", "y": 0.0}, data=None, name="decay", experiments=[
            Experiment("e1", data(0.8, 1.0, 1.0, 0.0), sigma=0.02, inputs=F(1.0),
                       parameters={"x0": Parameter("x0", 1.0, fixed=True)}),
            Experiment("e2", data(1.5, 2.0, 2.0, 0.0), sigma=0.05, inputs=F(2.0),
                       parameters={"k": 1.2}),
            Experiment("e3", data(1.2, 1.0, 0.5, 0.3), weights=4.0, inputs=F(1.0),
                       initial={"y": 0.3})])


def test_export_of_several_experiments_round_trip(tmp_path):
    """One condition per experiment; local parameters, the constant input and the initial
    state of e3 are its columns."""
    pe, folder = _round_trip(_experiments_problem(), tmp_path)
    c = petab.v1.get_condition_df(table(folder, "conditions_"))
    assert c["k"].tolist() == ["k_e1", "k_e2", "k_e3"] and c["x0"].tolist() == ["x0_e1",
                                                                                "x0_e2", "x0_e3"]
    assert c["F"].tolist() == [1.0, 2.0, 1.0]
    assert c["y"].isna().tolist() == [True, True, False] and c.at["e3", "y"] == 0.3
    assert pe.problem.experiment_names == ["e1", "e2", "e3"]


def _preequilibrated_problem():
    """x' = s - k x, y' = -k y, pre-equilibrated at s = 0.5 (x = 0.5/k, y = 0), y reset to y0."""
    from pyomo_odeest import EstimationProblem, Parameter, Preequilibration
    t = np.linspace(0.5, 4.0, 8)
    s, k, y0 = 1.6, 0.8, 0.9
    df = pd.DataFrame({"x": s / k + (0.5 - s) / k * np.exp(-k * t), "y": y0 * np.exp(-k * t)},
                      index=t) + 0.02 * np.random.default_rng(7).standard_normal((8, 2))
    return EstimationProblem(
        ["x", "y"], [Parameter("s", 1.0, lb=0, ub=10), Parameter("k", 1.0, lb=0.01, ub=10),
                     Parameter("y0", 1.0)],
        rhs=lambda x, u, t: [u.s - u.k * x.x, -u.k * x.y], initial={"x": 0.0, "y": "y0"},
        data=df, sigma=0.02, name="switched",
        preequilibration=Preequilibration(parameters={"s": 0.5}, reset=["y"]))


def test_export_of_a_preequilibration_round_trip(tmp_path):
    """The pre-equilibration condition sets the model's s (s_model: s is estimated, a row of
    the parameter table) to 0.5; the reset y is a column of the simulation condition."""
    pe, folder = _round_trip(_preequilibrated_problem(), tmp_path)
    c = petab.v1.get_condition_df(table(folder, "conditions_"))
    assert c["s_model"].tolist() == ["s", "0.5"] and c.at["c0", "y"] == "y0"
    assert c.index.tolist() == ["c0", "preeq"] and np.isnan(c.at["preeq", "y"])
    m = petab.v1.get_measurement_df(table(folder, "measurements_"))
    assert set(m["preequilibrationConditionId"]) == {"preeq"}
    assert pe.model.reset == {"c0": ["y"]}


def _preequilibrated_experiments():
    """A <-> B (rates k1 (1 + L) A, k2 B), C made at ks L A, degraded at kd C; L = 1 fixed.
    e1 pre-equilibrated at L = 0.1, e2 at L = 0 from C = 0.3 with C reset to 0.3 and a local
    total A0, e3 without pre-equilibration from B = 0.2."""
    from pyomo_odeest import EstimationProblem, Experiment, Parameter, Preequilibration
    k1, k2, ks, kd = 0.5, 0.3, 1.0, 0.8
    t = np.linspace(0.5, 5.0, 8)
    rng = np.random.default_rng(3)

    def steady(total, L):
        A = k2 * total / (k1 * (1 + L) + k2)
        return [A, total - A, ks * L * A / kd]

    def data(x0):
        sol = solve_ivp(lambda _, z: [-k1 * 2 * z[0] + k2 * z[1], k1 * 2 * z[0] - k2 * z[1],
                                      ks * z[0] - kd * z[2]], (0, 5), x0, t_eval=t,
                        rtol=1e-10, atol=1e-12)
        return pd.DataFrame(sol.y[[0, 2]].T + 0.01 * rng.standard_normal((8, 2)), index=t,
                            columns=["A", "C"])
    return EstimationProblem(
        ["A", "B", "C"], [Parameter("k1", 0.6, lb=0.01, ub=10), Parameter("k2", 0.4, lb=0.01,
                                                                          ub=10),
                          Parameter("ks", 1.2, lb=0.01, ub=10), Parameter("kd", 0.7, lb=0.01,
                                                                          ub=10),
                          Parameter("L", 1.0, fixed=True), Parameter("A0", 1.0, local=True)],
        lambda x, u, t: [-u.k1 * (1 + u.L) * x.A + u.k2 * x.B,
                         u.k1 * (1 + u.L) * x.A - u.k2 * x.B, u.ks * u.L * x.A - u.kd * x.C],
        {"A": "A0", "B": 0.0, "C": 0.0}, None, name="moiety", experiments=[
            Experiment("e1", data(steady(1.0, 0.1)), sigma=0.01,
                       parameters={"A0": Parameter("A0", 1.0, fixed=True)},
                       preequilibration=Preequilibration(parameters={"L": 0.1})),
            Experiment("e2", data(steady(1.5, 0.0)[:2] + [0.3]), sigma=0.01, initial={"C": 0.3},
                       parameters={"A0": Parameter("A0", 1.2, lb=0.1, ub=5)},
                       preequilibration=Preequilibration(parameters={"L": 0.0}, reset=["C"])),
            Experiment("e3", data([0.7, 0.2, 0.0]), sigma=0.01, initial={"B": 0.2})])


def test_export_of_experiments_with_their_own_preequilibration_round_trip(tmp_path):
    pe, folder = _round_trip(_preequilibrated_experiments(), tmp_path)
    c = petab.v1.get_condition_df(table(folder, "conditions_"))
    assert c.index.tolist() == ["e1", "e2", "e3", "preeq_e1", "preeq_e2"]
    assert c["L_model"].tolist() == ["L", "L", "L", "0.1", "0.0"]
    assert c.at["e2", "C"] == 0.3 and c.at["preeq_e2", "C"] == 0.3 and c.at["e3", "B"] == 0.2
    assert pe.model.preequilibration == {"e1": "preeq_e1", "e2": "preeq_e2"}
    assert pe.model.reset == {"e1": [], "e2": ["C"]}


def _refused_single(**changes):
    from pyomo_odeest import EstimationProblem, Parameter
    t = np.linspace(0.5, 2.0, 4)
    kw = {"states": ["x"], "parameters": [Parameter("s", 1.0), Parameter("k", 1.0)],
          "rhs": lambda x, u, t: [u.s - u.k * x.x], "initial": {"x": 0.0},
          "data": pd.DataFrame({"x": 1 - np.exp(-t)}, index=t)}
    return EstimationProblem(**{**kw, **changes})


def _refused_observable():
    from pyomo_odeest import EstimationProblem, Experiment, Parameter
    t = np.linspace(0.5, 2.0, 4)
    return EstimationProblem(
        ["x"], [Parameter("k", 1.0)], lambda x, u, t: [-u.k * x.x], {"x": 1.0}, None,
        observe=lambda x, u, t: {"z": u.F * x.x}, experiments=[
            Experiment(e, pd.DataFrame({"z": np.exp(-t)}, index=t),
                       inputs={"F": PiecewiseConstant([0.0], [v])})
            for e, v in (("e1", 1.0), ("e2", 2.0))])


@pytest.mark.parametrize("match, make", [
    pytest.param("least-squares", lambda: _refused_single(loss=GaussianNLL(0.01)), id="gaussian"),
    pytest.param("penalty", lambda: _refused_single(penalty=lambda u: (u.k - 1) ** 2),
                 id="penalty"),
    pytest.param(r"start at t = 0.*t0 = 0.2", lambda: _refused_single(t0=0.2), id="t0"),
    pytest.param(r"input 'F' \(PiecewiseLinear\) changes in time", lambda: _refused_single(
        rhs=lambda x, u, t: [u.s * u.F - u.k * x.x],
        inputs={"F": PiecewiseLinear([0.0, 1.0], [0.0, 1.0])}), id="input-linear-in-time"),
    pytest.param(r"Preequilibration\(rhs=\.\.\.\)", lambda: _refused_single(
        preequilibration=Preequilibration(rhs=lambda x, u, t: [1.0 - u.k * x.x])),
        id="preequilibration-rhs"),
    pytest.param(r"Preequilibration parameters\['s'\] is a function", lambda: _refused_single(
        preequilibration=Preequilibration(parameters={"s": lambda u: 2 * u.k})),
        id="preequilibration-function"),
    pytest.param(r"initial value of the reset state x is 2\*s.*numbers and parameter ids",
                 lambda: _refused_single(initial={"x": lambda u: 2 * u.s},
                                         preequilibration=Preequilibration(reset=["x"])),
                 id="expression-in-condition"),
    pytest.param(r"experiment 'e2': observable 'z' is 2\.0\*x", _refused_observable,
                 id="observable-per-experiment"),
])
def test_export_refuses_what_petab_v1_cannot_state(tmp_path, match, make):
    from pyomo_odeest.petab_io import write_petab
    with pytest.raises(ValueError, match=match):
        write_petab(make(), tmp_path / "out")


# ---------------------------------------------------------------------------
# estimation: one experiment per condition, NLL no worse than the reference
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bruno():
    return petab_problem(os.path.join(DATA, "Bruno_JExpBot2016"))


def test_import_maps_conditions_to_experiments(bruno):
    prob = bruno.problem
    assert prob.experiment_names == bruno.model.conditions
    assert len(prob.experiment_names) == 6
    assert bruno.sigma_parameter is None
    assert bruno.nll(0.0) == pytest.approx(bruno.constant)
    # problems travel to Dask workers (multistart): they pickle
    import pickle
    back = pickle.loads(pickle.dumps(bruno.problem))
    assert back.parameter_names == prob.parameter_names
    assert [p.l_sym for p in back.experiment_problems] == [p.l_sym for p in prob.experiment_problems]


@pytest.mark.parametrize("approach, shift", [("simultaneous", 0.0), ("reduced_space", 0.3)])
def test_fit_reaches_reference(bruno, approach, shift):
    from pyomo_odeest import estimate
    u0 = bruno.problem.u0.copy()
    free = bruno.problem.free_mask
    rng = np.random.default_rng(7)
    u0[free] += shift * rng.choice([-1.0, 1.0], size=free.sum())     # log10 units: x2 or /2
    res = estimate(bruno.problem, approach, steps_per_interval=5, u0=u0)
    assert res.success, res.status
    ref = REFERENCE["Bruno_JExpBot2016"]
    assert bruno.nll(res.objective) <= ref + 1e-3          # on the discretization
    assert bruno.simulated_nll(res) <= ref + 1e-5          # by an independent simulation


def test_every_approach_and_compare_approaches_take_an_imported_condition():
    """One condition of Bruno as a single-experiment problem: the simultaneous, reduced-space,
    multiple-shooting and continuous approaches through compare_approaches."""
    from pyomo_odeest import compare_approaches
    pe = petab_problem(os.path.join(DATA, "Bruno_JExpBot2016"), conditions="model1_data2")
    assert pe.problem.experiments is None and pe.conditions == ["model1_data2"]
    table, results = compare_approaches(
        pe.problem, approaches=("simultaneous", "reduced_space", "multiple_shooting",
                                "continuous"), steps_per_interval=5)
    assert table["success"].all(), table["status"]
    nll = {k: pe.nll(r.objective) for k, r in results.items()}
    # the same discrete equations: the same optimum
    assert nll["simultaneous"] == pytest.approx(nll["reduced_space"], abs=1e-7)
    # other discretizations of the same ODE: the same optimum up to their errors
    assert all(abs(v - nll["simultaneous"]) < 2e-2 for v in nll.values()), nll


def test_every_approach_takes_an_imported_problem_with_two_conditions():
    """Two conditions of Bruno = two experiments (with the condition-specific constants
    as fixed local coefficients): the simultaneous, reduced-space, multiple-shooting and
    continuous approaches through compare_approaches reach the same optimum up to
    their discretizations; with these two conditions only 4 of the 13 parameters are
    determined, and every approach's result says which are not."""
    from pyomo_odeest import compare_approaches
    pe = petab_problem(os.path.join(DATA, "Bruno_JExpBot2016"),
                       conditions=["model1_data1", "model1_data2"])
    assert pe.problem.experiment_names == ["model1_data1", "model1_data2"]
    table, results = compare_approaches(
        pe.problem, approaches=("simultaneous", "reduced_space", "multiple_shooting",
                                "continuous"), steps_per_interval=5)
    assert table["success"].all(), table["status"]
    nll = {k: pe.nll(r.objective) for k, r in results.items()}
    assert nll["simultaneous"] == pytest.approx(nll["reduced_space"], abs=1e-7)
    assert all(abs(v - nll["simultaneous"]) < 2e-2 for v in nll.values()), nll
    for r in results.values():
        rep = r.identifiability()
        # rank 5 on column-scaled sensitivities (4 before the rank test was scaled): far below
        # the 13 free parameters, and the parameters the data never see are named
        assert rep.rank <= 5 and "init_bcar2" in "".join(rep.warnings)
        assert any("do not depend on" in w for w in r.warnings)


def test_profiled_sigma_is_the_exact_minimiser():
    """Elowitz: one estimated sigma, profiled out. From residuals r at fixed theta,
    nll(objective) equals the simulated NLL at s* and no other s does better."""
    pe = petab_problem(os.path.join(DATA, "Elowitz_Nature2000"))
    assert pe.sigma_parameter == "sigma"
    assert "sigma" not in pe.problem.parameter_names
    sim = PetabSimulator(pe.model, rtol=1e-9, atol=1e-11)
    est = [p.id for p in pe.model.estimated]
    k = est.index("sigma")
    scaled = pe.model.nominal_scaled()
    terms = sim.terms(scaled)
    r = terms["scaled_residual"] * terms["sigma"]
    objective = float(np.sum(r**2 / pe._c**2))
    s_star = pe.profiled_sigma(objective)
    at = scaled.copy()
    at[k] = np.log10(s_star)
    assert pe.nll(objective) == pytest.approx(sim.nll(at), rel=1e-12)
    for factor in (0.97, 1.03):
        at[k] = np.log10(s_star * factor)
        assert sim.nll(at) > pe.nll(objective)
    assert pe.nll(objective) <= sim.nll(scaled)


def test_multistart_takes_an_imported_problem():
    from pyomo_odeest.runner import multistart
    pe = petab_problem(os.path.join(DATA, "Bruno_JExpBot2016"), conditions="model1_data2")
    prob = pe.problem
    box = {p.name: (p.value - 0.3, p.value + 0.3) for p in prob.parameters if not p.fixed}
    res = multistart(prob, n=2, approach="reduced_space", space="linear", bounds=box,
                     starts=[prob.u0], options=dict(steps_per_interval=5), seed=1)
    assert len(res.table) == 3 and res.best is not None and res.best.success
    # the minimum of this condition (same value as the simultaneous fit of the
    # compare_approaches test, on the same discretization)
    assert pe.nll(res.best.objective) == pytest.approx(-8.794082, abs=1e-5)


def test_uncertainty_of_an_imported_problem_with_six_conditions(bruno):
    """Bruno: six conditions = six experiments sharing 13 log10-scale parameters.
    The fit's covariance (Fisher information summed over the experiments), the
    identifiability report, the chi-square check and a profile interval."""
    from pyomo_odeest import estimate
    res = estimate(bruno.problem, "reduced_space", steps_per_interval=5)
    assert res.success, res.status
    assert bruno.nll(res.objective) <= REFERENCE["Bruno_JExpBot2016"] + 1e-3
    # the diagnostic's independent simulation is PEtab's likelihood too
    assert bruno.nll(res.extra["simulated_objective"]) == pytest.approx(
        bruno.simulated_nll(res), abs=1e-5)
    assert not any(w.startswith("discretization error") for w in res.warnings)
    chk = res.extra["noise_check"]                     # sigma known: J is a chi-square
    n = int(sum(sp.mask.sum() for sp in bruno.problem.experiment_problems))
    assert chk["chi2"] == pytest.approx(res.objective) and chk["dof"] == n - 13
    cov = res.covariance()
    iv = cov.intervals()
    assert (iv["status"] == "ok").sum() == 13 and np.all(iv.loc[iv["status"] == "ok", "se"] > 0)
    hess = res.covariance("hessian")
    np.testing.assert_allclose(hess.se, cov.se, rtol=0.25)   # small residuals: GN ~ Hessian
    rep = res.identifiability()
    assert rep.identifiable and rep.rank == 13 and rep.n_measurements == n
    pr = res.profile(parameters=["init_b10_1"])
    row = pr.intervals.loc["init_b10_1"]
    se = cov.se["init_b10_1"]
    assert row["shape"] == "ok"
    assert abs(row["lower"] - row["wald_lower"]) < 0.2 * se
    assert abs(row["upper"] - row["wald_upper"]) < 0.2 * se


@pytest.mark.slow       # ran over 10 minutes on the loaded machine after the merges
def test_borghans_coarse_grid_is_flagged_by_the_simulation_check():
    """Borghans (an oscillator): on Adams PC with 300 steps the discrete NLL at the
    nominal point is about -68.7 where the ODE gives -83.4; the result (zero
    iterations, at the nominal point) carries the discretization-error warning. On
    3000 steps the two agree and nothing is flagged."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, "Borghans_BiophysChem1997"))
    P = pe.problem
    for steps, flagged in ((300, True), (3000, False)):
        res = estimate(P, "reduced_space", scheme="adams_pc", max_step=(P.T - P.t0) / steps,
                       options={"max_iter": 0}, certify=False)
        disc, sim = pe.nll(res.objective), pe.nll(res.extra["simulated_objective"])
        assert sim == pytest.approx(-83.43, abs=0.05)      # the start (pushed into the bounds)
        assert bool(abs(disc - sim) > 10) is flagged
        assert any(w.startswith("discretization error") for w in res.warnings) is flagged


def test_crauste_enright_grid_and_a_capped_solve_say_what_they_are():
    """Crauste (stiff, states up to 1e5, three parameters at or near their bounds) on
    Enright's implicit scheme with steps of 0.05: at the nominal point (no iteration)
    the discrete NLL equals the independent simulation's within 0.1 (0.06 measured, the
    scheme's error on this grid) and nothing is flagged; a
    solve stopped after 10 iterations is not a fit (status, success, a message that
    says what to try)."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, "Crauste_CellSystems2017"))
    prob = pe.problem
    res = estimate(prob, "simultaneous", scheme="enright", max_step=0.05,
                   options={"max_iter": 0}, certify=False)       # this grid, unrefined
    assert pe.nll(res.objective) == pytest.approx(pe.simulated_nll(res), abs=0.1)
    assert not any(w.startswith("discretization error") for w in res.warnings)
    capped = estimate(prob, "simultaneous", scheme="enright", max_step=0.05,
                      u0=_perturbed_start(prob), options={"max_iter": 10})
    assert not capped.success
    assert capped.status.name == "MAX_ITERATIONS"
    assert any("try" in w for w in capped.warnings), capped.warnings


@pytest.mark.slow       # 2 to 20 minutes per start, by the machine
@pytest.mark.parametrize("shift,options", [
    (0.0, {}),
    (1e-6, {"bound_push": 1e-8, "bound_frac": 1e-8}),
    ("uniform", {"bound_push": 1e-8, "bound_frac": 1e-8}),
])
def test_crauste_stiff_fit_by_the_simultaneous_enright_block_is_a_fit_or_says_not(shift, options):
    """The full simultaneous fit from the nominal point, a start shifted by 1e-6 and a
    start perturbed by ±0.05 (seed 0).  Ipopt's path on this problem depends on
    round-off even with the states scaled (``scale_states``): the same call reached
    the optimum in 57 iterations on one machine and the iteration limit on another.
    What must hold on every machine: a result called a fit is at or below the
    reference NLL, by the discretization and by simulation, unflagged; a result that
    is not says so."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, "Crauste_CellSystems2017"))
    prob = pe.problem
    lb = np.array([p.lb for p in prob.parameters])
    ub = np.array([p.ub for p in prob.parameters])
    if shift == "uniform":
        u0 = _perturbed_start(prob)
    else:
        u0 = np.clip(np.array(prob.u0) + shift * np.random.default_rng(1).standard_normal(len(lb)),
                     lb, ub)
    res = estimate(prob, "simultaneous", scheme="enright", max_step=0.05, u0=u0,
                   options=dict(options, max_iter=400))
    if not res.success:
        pytest.xfail(f"not a fit on this machine, and reported as such: {res.status}")
    ref = REFERENCE["Crauste_CellSystems2017"]
    assert pe.nll(res.objective) <= ref
    assert pe.simulated_nll(res) <= ref
    assert not any(w.startswith("discretization error") for w in res.warnings)


def test_ill_conditioned_optimum_is_stationary_in_the_gauss_newton_metric():
    """Crauste at its optimum: the projected gradient at tighter tolerances is the
    integration error amplified by the sensitivities' largest singular value (3.8e3 ≫
    its limit 0.36 after a fit at rtol 1e-10), while the Gauss-Newton model predicts a
    decrease of 2.4e-6 (limit 1e-6·J): stationary, and said so.  The fit at the default
    rtol 1e-8 stops 0.0026 above the optimum: the decrement (0.005) keeps it not
    stationary."""
    from pyomo_odeest import estimate
    from pyomo_odeest.discretization.continuous import cvodes_available
    if not cvodes_available():
        pytest.skip("the measurements are of the CVODES engine")
    pe = petab_problem(os.path.join(DATA, "Crauste_CellSystems2017"))
    res = estimate(pe.problem, "continuous", optimizer="least_squares", rtol=1e-10, atol=1e-14)
    st = res.extra["stationarity"]
    assert res.status is Status.CONVERGED and "stationary in the Gauss-Newton metric" in res.message
    assert st["projected_gradient"] > 100 * st["limit"]
    assert st["gauss_newton_decrement"] <= st["decrement_limit"] < 1e-4
    assert pe.simulated_nll(res) <= REFERENCE["Crauste_CellSystems2017"]
    coarse = estimate(pe.problem, "continuous", optimizer="least_squares")
    st = coarse.extra["stationarity"]
    assert coarse.status is Status.NOT_STATIONARY
    assert st["gauss_newton_decrement"] > 100 * st["decrement_limit"]
    assert "Gauss-Newton predicted decrease" in coarse.message
    assert pe.simulated_nll(coarse) > pe.simulated_nll(res) + 1e-3


def _suite():
    """benchmarks/petab_suite.py as a module."""
    return benchmark_module("petab_suite")


def test_borghans_reference_is_not_the_optimum():
    """Borghans: the continuous approach (no grid, so no discretization artefact) from the
    nominal point, Ipopt limited-memory with a small monotone barrier and the start kept
    (bound push 1e-8), goes below the reference NLL in a few iterations by the independent
    simulation; the fit is not converged and is not reported as successful."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, "Borghans_BiophysChem1997"))
    res = estimate(pe.problem, "continuous", rtol=1e-8, atol=1e-10, scale=False,
                   options={"max_iter": 15, "bound_push": 1e-8, "bound_frac": 1e-8,
                            "obj_scaling_factor": 100.0, "mu_strategy": "monotone",
                            "mu_init": 1e-5})
    assert not res.success                # the iteration limit here; not a success either way
    ref = REFERENCE["Borghans_BiophysChem1997"]
    assert pe.simulated_nll(res) < ref - 1.0


def _least_squares_fit(name, start):
    """The continuous approach's Gauss-Newton trust region (LSODA rtol 1e-8, no parameter
    scaling) on a shipped problem from its nominal point or from a start perturbed by a
    uniform ±0.05 on the parameters' scales (seed 0, clipped to the bounds)."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, name))
    P = pe.problem
    u = _perturbed_start(P) if start == "perturbed" else np.array(P.u0, dtype=float)
    return pe, estimate(P, "continuous", optimizer="least_squares", u0=u, rtol=1e-8,
                        atol=1e-10, scale=False)


def _perturbed_start(P, spread=0.05, seed=0):
    """The nominal point of ``P`` with a uniform ±``spread`` added to every free parameter
    (on its PEtab scale), clipped to the bounds."""
    u = np.array(P.u0, dtype=float)
    free = P.free_mask
    lb = np.array([p.lb for p in P.parameters])[free]
    ub = np.array([p.ub for p in P.parameters])[free]
    u[free] = np.clip(u[free] + np.random.default_rng(seed).uniform(-spread, spread, free.sum()),
                      lb, ub)
    return u


@pytest.mark.parametrize("start", ["nominal", "perturbed"])
def test_borghans_least_squares_goes_below_the_reference_without_claiming_a_fit(start):
    """Borghans: the Gauss-Newton trust region on the continuous objective, from the
    nominal point and from a start perturbed by ±0.05 on the log10 scales (NLL -11.1),
    ends below the reference NLL by the independent simulation (-99.1 and -96.3) on its
    step test, where the gradient is far from zero: not reported as a success."""
    pe, res = _least_squares_fit("Borghans_BiophysChem1997", start)
    assert not res.success and res.status is Status.NOT_STATIONARY
    st = res.extra["stationarity"]
    assert st["projected_gradient"] > 100 * st["limit"], st
    ref = REFERENCE["Borghans_BiophysChem1997"]
    assert pe.simulated_nll(res) < ref - 10.0
    if start == "perturbed":
        assert pe.nll(res.extra["objective_start"]) > ref + 50.0
    # the trust region collapsed at a point that is not stationary: the result says
    # that J is rough at the fit's tolerances and which ones to refit at
    assert st["collapsed"] and "not smooth" in res.message and "rtol=1e-10" in res.message
    if start == "nominal":          # the advice holds: the refit at them goes further
        P = pe.problem
        tight = estimate(P, "continuous", optimizer="least_squares", u0=res.x, rtol=1e-10,
                         atol=1e-12, scale=False)
        assert pe.simulated_nll(tight) < pe.simulated_nll(res) - 1.0


@pytest.mark.parametrize("start", ["nominal", "perturbed"])
@pytest.mark.parametrize("name", ["Elowitz_Nature2000", "Bruno_JExpBot2016"])
def test_least_squares_fit_reaches_the_reference(name, start):
    """The continuous approach's Gauss-Newton trust region fits Elowitz (one condition,
    log10-normal noise, observable overrides) and Bruno (six conditions) from the nominal
    point and from a start perturbed by ±0.05 on the log10 scales (NLL -9.4 and 8.8):
    converged, with an NLL by the independent simulation no worse than the reference."""
    pe, res = _least_squares_fit(name, start)
    ref = REFERENCE[name]
    assert res.success, res.status
    if start == "perturbed":
        assert pe.nll(res.extra["objective_start"]) > ref + 10.0
    assert pe.simulated_nll(res) <= ref + 1e-6 * abs(ref)


# ---------------------------------------------------------------------------
# bad inputs: each names the file, the row or the id, and what to do
# ---------------------------------------------------------------------------
def _table_edit(prefix, edit):
    def apply(d):
        f = table(d, prefix)
        df = pd.read_csv(f, sep="\t")
        df = edit(df)
        df.to_csv(f, sep="\t", index=False)
    return apply


def _sbml_edit(edit):
    return lambda d: _edit_sbml(d, edit)


def _renamed_species(m):
    a = m.createInitialAssignment()
    a.setSymbol("Naive_old"), a.setMath(libsbml.parseL3Formula("2"))


def _undefined_in_rule(m):
    p = m.createParameter()
    p.setId("w"), p.setConstant(False)
    r = m.createAssignmentRule()
    r.setVariable("w"), r.setMath(libsbml.parseL3Formula("Naive * not_defined_anywhere"))
    kl = m.getReaction(0).getKineticLaw()
    kl.setMath(libsbml.parseL3Formula(f"({libsbml.formulaToL3String(kl.getMath())}) * (1 + w)"))


@pytest.mark.parametrize("edit, error, message", [
    (_table_edit("measurementData_", lambda df: df.drop(columns="time")), ValueError,
     r"measurementData_Crauste.*no column\(s\) \['time'\]"),
    (_table_edit("measurementData_", lambda df: df.drop(columns="measurement")), ValueError,
     r"measurementData_Crauste.*no column\(s\) \['measurement'\]"),
    (_table_edit("measurementData_", lambda df: df.iloc[:0]), ValueError,
     r"measurementData_Crauste.*has no rows"),
    (_table_edit("measurementData_", lambda df: df.assign(
        time=["day 1"] + list(df["time"].astype(str))[1:])), ValueError,
     r"measurementData_Crauste.*row 0: time 'day 1' is not a number"),
    (_table_edit("parameters_", lambda df: df.drop(columns="parameterScale")), ValueError,
     r"parameters_Crauste.*no column 'parameterScale'"),
    (_table_edit("parameters_", lambda df: df.assign(objectivePriorType="normal",
                                                     objectivePriorParameters="0;-1")),
     ValueError, r"parameters_Crauste.*parameter \w+: the scale .* must be > 0"),
    (_table_edit("parameters_", lambda df: df.assign(objectivePriorType="normal",
                                                     objectivePriorParameters="0")),
     ValueError, r"parameters_Crauste.*must be two numbers"),
    (_sbml_edit(_kinetic_law("undefined_k")), ValueError,
     r"model_Crauste.*names \['undefined_k'\], which are not defined in the model"),
    (_sbml_edit(_undefined_in_rule), ValueError,
     r"model_Crauste.*names \['not_defined_anywhere'\], which are not defined"),
    (_sbml_edit(_renamed_species), ValueError,
     r"model_Crauste.*initial assignment names 'Naive_old', which is not a species.*renamed"),
], ids=["no_time_column", "no_measurement_column", "empty_measurements", "text_time",
        "no_scale_column", "prior_negative_scale", "prior_one_number", "undefined_id_in_law",
        "undefined_id_in_rule", "renamed_species"])
def test_bad_petab_input_is_named(tmp_path, edit, error, message):
    d = copy_problem(tmp_path)
    edit(d)
    with pytest.raises(error, match=message) as info:
        read_petab(d)
    assert not isinstance(info.value, KeyError)


def test_suite_results_table_keeps_one_row_per_problem(tmp_path):
    """benchmarks/petab_suite.py --out: each run replaces its problems' rows and keeps the
    others; the best estimates round-trip through JSON."""
    import json
    suite = _suite()
    path = tmp_path / "suite.tsv"

    def row(name, nll):
        return dict(name=name, status="converged", best_nll=nll, flags=[],
                    estimates={"k": nll / 10})
    suite.write_results(str(path), [row("A", -1.0), row("B", -2.0)])
    suite.write_results(str(path), [row("B", -3.0)])
    tab = pd.read_csv(path, sep="\t").set_index("name")
    assert list(tab.index) == ["A", "B"] and tab.loc["B", "best_nll"] == -3.0
    assert json.loads(tab.loc["A", "estimates"]) == {"k": -0.1}


def test_borghans_continuous_fit_worse_than_its_start_says_so():
    """Borghans from the nominal point by the continuous approach's defaults: Ipopt first
    pushes init_A_state (1 - 4e-14 of [0, 1]) into the interior and has ended, converged,
    at NLL -54.31 where the start's is -83.43.  Whatever the path, a converged result
    above its start's objective carries the warning."""
    from pyomo_odeest import estimate
    pe = petab_problem(os.path.join(DATA, "Borghans_BiophysChem1997"))
    res = estimate(pe.problem, "continuous", max_wall_time=600)
    worse = res.objective > res.extra["objective_start"] + 1e-6 * abs(res.extra["objective_start"])
    flagged = any(w.startswith("worse than the start") for w in res.warnings)
    assert flagged == (worse and res.success)


def test_a_folder_with_several_yaml_files_takes_the_one_named_as_the_folder(tmp_path):
    """Zhao_QuantBiol2020 holds its problem and a test problem: the folder's own YAML
    is read; without one named as the folder, the error asks for the file."""
    d = copy_problem(tmp_path)
    own = d / "Crauste_CellSystems2017.yaml"
    shutil.copy(own, d / "another_problem.yaml")
    assert read_petab(d).name == "Crauste_CellSystems2017"
    own.rename(d / "renamed.yaml")
    with pytest.raises(ValueError, match=r"expected one PEtab YAML file in the folder, or one "
                                         r"named as the folder.*pass the YAML file"):
        read_petab(d)


def test_imported_problem_with_preequilibration_and_inputs_pickles():
    """Brannmark (a pre-equilibration per condition, the insulin dose as an input) pickles
    with the standard pickle, as the docs say problems do: its copy has the same
    pre-equilibrated initial states and right-hand sides (before, the SBML's
    pre-equilibration dynamics were a closure and the inputs' functions classes made at
    run time, and pickling failed)."""
    import pickle
    pe = petab_problem(os.path.join(DATA, "Brannmark_JBC2010"))
    copy = pickle.loads(pickle.dumps(pe))
    u = np.asarray(pe.problem.u0, dtype=float)
    from pyomo_odeest.symbolic._vectorfn import VectorFn
    for sp, sq in zip(pe.problem.experiment_problems, copy.problem.experiment_problems):
        x0 = sp.initial_state(u)
        np.testing.assert_array_equal(sq.initial_state(u), x0)
        f = [VectorFn(q.f_sym, q.x_sym, q.u_sym, q.t_sym) for q in (sp, sq)]
        for t in (0.5, 3.0, 20.0):             # the inputs evaluate again in the copy
            np.testing.assert_array_equal(f[1].point(x0, u, t), f[0].point(x0, u, t))
    assert copy.problem.parameter_names == pe.problem.parameter_names


def test_a_lsoda_piece_that_stalls_is_integrated_again_by_bdf(tmp_path, monkeypatch):
    """The independent simulation gives a LSODA piece LSODA_PIECE_EVALUATIONS
    evaluations, then integrates it by BDF (a point of PEtab's Brannmark problem, rates
    on their bounds, took LSODA more than 10⁷ evaluations and BDF 2,000): with a budget
    of 5 every piece is BDF's, and the NLL is the same."""
    from pyomo_odeest.petab_io import _likelihood
    model = read_petab(_lv_with_noise_parameters(tmp_path))
    ref = PetabSimulator(model, rtol=1e-11, atol=1e-12)
    nll = ref.nll()
    monkeypatch.setattr(_likelihood, "LSODA_PIECE_EVALUATIONS", 5)
    calls = []
    real = _likelihood.solve_ivp
    monkeypatch.setattr(_likelihood, "solve_ivp",
                        lambda *a, **kw: calls.append(kw["method"]) or real(*a, **kw))
    assert PetabSimulator(model, rtol=1e-11, atol=1e-12).nll() == pytest.approx(nll, rel=1e-7)
    assert calls[::2] == ["LSODA"] * (len(calls) // 2) and calls[1::2] == ["BDF"] * (len(calls) // 2)
    # the limit of the whole condition still stops it
    with pytest.raises(RuntimeError, match="evaluations"):
        PetabSimulator(model, rtol=1e-11, atol=1e-12, max_evaluations=50).nll()


def test_a_simulation_with_non_finite_states_is_a_failure_not_a_zero_nll(tmp_path, monkeypatch):
    """An integrator that reports success with NaN states (a Hill function of exponent
    64 overflowing on Elowitz's problem) fails the simulation, by LSODA and by BDF
    after it; the NLL is never the sum of NaN terms taken as 0."""
    from types import SimpleNamespace
    from pyomo_odeest.petab_io import _likelihood
    model = read_petab(_lv_with_noise_parameters(tmp_path))
    real = _likelihood.solve_ivp

    def nan_states(*a, **kw):
        sol = real(*a, **kw)
        return SimpleNamespace(t=sol.t, y=np.full_like(sol.y, np.nan), success=True,
                               message=sol.message)
    monkeypatch.setattr(_likelihood, "solve_ivp", nan_states)
    with pytest.raises(RuntimeError, match="non-finite states"):
        PetabSimulator(model, rtol=1e-8, atol=1e-10).nll()
    frame = PetabSimulator.terms
    monkeypatch.setattr(_likelihood, "solve_ivp", real)
    monkeypatch.setattr(PetabSimulator, "terms", lambda self, scaled=None: frame(
        self, scaled).assign(nll=np.nan))
    assert np.isnan(PetabSimulator(model, rtol=1e-8, atol=1e-10).nll())
