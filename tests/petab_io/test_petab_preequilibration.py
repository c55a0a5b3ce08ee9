"""PEtab pre-equilibration on the hand-written problem ``Preequilibration_handwritten``
(see its ``generate.py``): NLL against an independent SciPy computation, fits of every
approach against an independent maximum-likelihood fit, species reset, errors."""
import os
import shutil

import numpy as np
import pandas as pd
import pytest

petab = pytest.importorskip("petab")
libsbml = pytest.importorskip("libsbml")

from scipy.integrate import solve_ivp  # noqa: E402
from scipy.optimize import least_squares  # noqa: E402

from pyomo_odeest import DiscreteModel, estimate  # noqa: E402
from pyomo_odeest.petab_io import (PetabSimulator, UnsupportedFeatureError, petab_problem,  # noqa: E402
                                read_petab, write_petab)

pytestmark = pytest.mark.extras

FOLDER = os.path.join(os.path.dirname(__file__), "..", "data", "petab", "Preequilibration_handwritten")
L = {"pre": 0.1, "stim1": 1.0, "stim2": 2.0, "ctrl": 0.5}
SIGMA = {"obs_A": 0.02, "obs_C": 0.05}
NOMINAL = np.log10([0.7, 0.4, 1.5, 0.6])          # k1, k2, ks, kd on their log10 scale


def rhs(t, x, k, Lv):
    k1, k2, ks, kd = k
    A, B, C = x
    return [-k1 * (1 + Lv) * A + k2 * B, k1 * (1 + Lv) * A - k2 * B, ks * Lv * A - kd * C]


def independent_simulation(scaled):
    """Measurement rows with the simulated observable: the pre-equilibration by integrating
    from the SBML initial state to t = 1e5 (no Newton, no closed form), C reset in stim2."""
    k = 10.0 ** np.asarray(scaled)
    x0 = [1.0, 0.0, 0.0]
    ss = solve_ivp(rhs, (0, 1e5), x0, args=(k, L["pre"]), method="LSODA", rtol=1e-12,
                   atol=1e-14).y[:, -1]
    meas = pd.read_csv(os.path.join(FOLDER, "measurements.tsv"), sep="\t")
    sim = meas.copy()
    for cond, start in (("stim1", ss), ("stim2", [ss[0], ss[1], 0.5]), ("ctrl", x0)):
        rows = meas["simulationConditionId"] == cond
        t = np.unique(meas.loc[rows, "time"])
        X = solve_ivp(rhs, (0, t[-1]), start, args=(k, L[cond]), t_eval=t, rtol=1e-12,
                      atol=1e-14).y
        for i in np.flatnonzero(rows):
            j = np.searchsorted(t, meas.at[i, "time"])
            sim.at[i, "measurement"] = X[0 if meas.at[i, "observableId"] == "obs_A" else 2, j]
    sim = sim.rename(columns={"measurement": "simulation"})
    return meas, sim


def residuals(scaled):
    meas, sim = independent_simulation(scaled)
    sig = meas["observableId"].map(SIGMA).to_numpy()
    return (sim["simulation"] - meas["measurement"]).to_numpy() / sig


def independent_nll(scaled):
    meas, _ = independent_simulation(scaled)
    sig = meas["observableId"].map(SIGMA).to_numpy()
    return float(np.sum(0.5 * np.log(2 * np.pi * sig ** 2)) + 0.5 * np.sum(residuals(scaled) ** 2))


@pytest.fixture(scope="module")
def imported():
    return petab_problem(FOLDER)


def test_model_reads_preequilibration_and_reset():
    m = read_petab(FOLDER)
    assert m.preequilibration == {"stim1": "pre", "stim2": "pre"}
    assert m.reset == {"stim1": [], "stim2": ["C"]}


def test_nominal_nll_against_independent_computation(imported):
    import petab.v1 as pv1
    expected = independent_nll(NOMINAL)
    _, sim = independent_simulation(NOMINAL)
    prob = pv1.Problem.from_yaml(os.path.join(FOLDER, "problem.yaml"))
    assert -pv1.calculate_llh(prob.measurement_df, sim, prob.observable_df,
                              prob.parameter_df) == pytest.approx(expected, rel=1e-12)
    # the package's own simulation check (pre-equilibration by simulation)
    assert PetabSimulator(imported.model).nll() == pytest.approx(expected, rel=1e-9)
    # the discretized problem (Newton steady state, the species reset) on a fine grid
    # (discretization error 8e-6, 1e-6, 1.3e-7 absolute at 40, 80, 160 steps per interval)
    P = imported.problem
    J = sum(DiscreteModel(sp, "adams_pc", 6, steps_per_interval=160).objective(P.u0)
            for sp in P.experiment_problems)
    assert imported.nll(J) == pytest.approx(expected, rel=1e-8)


def test_conditions_of_one_preequilibration_share_one_steady_state(monkeypatch):
    """stim1 and stim2 are pre-equilibrated by the same condition: its steady state (and the
    problem's numeric functions) are built once for both, and the import says its time."""
    from pyomo_odeest.problem._steady_state import SteadyState
    built = []
    init = SteadyState.__init__
    monkeypatch.setattr(SteadyState, "__init__",
                        lambda self, *a, **k: built.append(init(self, *a, **k)))
    pe = petab_problem(FOLDER)
    stim1, stim2 = (pe.problem.experiment_problem(c) for c in ("stim1", "stim2"))
    assert len(built) == 1
    assert stim1.steady_state is stim2.steady_state
    assert stim1._numeric_cache is stim2._numeric_cache
    assert 0 < pe.setup_s < 60


def test_reset_species_and_kept_steady_state(imported):
    k1, k2, ks, kd = 10.0 ** NOMINAL
    A = k2 / (k1 * (1 + L["pre"]) + k2)
    ss = [A, 1 - A, ks * L["pre"] * A / kd]
    x0 = {n: sp.initial_state(imported.problem.u0) for n, sp in
          zip(imported.problem.experiment_names, imported.problem.experiment_problems)}
    np.testing.assert_allclose(x0["stim1"], ss, rtol=1e-12)                 # NaN: kept
    np.testing.assert_allclose(x0["stim2"], [ss[0], ss[1], 0.5], rtol=1e-12)  # reset
    np.testing.assert_allclose(x0["ctrl"], [1.0, 0.0, 0.0])                 # none
    single = petab_problem(FOLDER, conditions="stim2").problem               # one condition
    np.testing.assert_allclose(single.initial_state(single.u0), [ss[0], ss[1], 0.5], rtol=1e-12)


@pytest.fixture(scope="module")
def reference_fit():
    """Maximum likelihood by SciPy on the independent simulation."""
    r = least_squares(residuals, NOMINAL + 0.1, xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return r.x, independent_nll(r.x)


@pytest.mark.parametrize("approach", ["simultaneous", "reduced_space", "multiple_shooting",
                                      "continuous"])
def test_fits_reach_the_independent_maximum_likelihood(imported, reference_fit, approach):
    x_ref, nll_ref = reference_fit
    start = imported.problem.variant(start=dict(zip(["k1", "k2", "ks", "kd"], NOMINAL + 0.15)))
    opts = {} if approach == "continuous" else dict(scheme="adams_pc", qmax=6,
                                                    steps_per_interval=20)
    res = estimate(start, approach, **opts)
    assert res.success, res.status
    est = res.estimates[["k1", "k2", "ks", "kd"]].to_numpy()
    np.testing.assert_allclose(est, x_ref, atol=1e-4)
    assert imported.simulated_nll(res) == pytest.approx(nll_ref, abs=1e-6)


def test_several_preequilibrations_of_one_condition_raise(tmp_path):
    d = tmp_path / "p"
    shutil.copytree(FOLDER, d)
    f = d / "measurements.tsv"
    df = pd.read_csv(f, sep="\t")
    df.loc[df.index[0], "preequilibrationConditionId"] = "ctrl"
    df.to_csv(f, sep="\t", index=False)
    with pytest.raises(UnsupportedFeatureError, match=r"measurements.tsv.*stim1.*several "
                                                      r"pre-equilibrations"):
        read_petab(d)


def test_export_of_an_imported_preequilibration_raises(tmp_path):
    """The import states the pre-equilibration by its own rhs (L = 0.1 substituted, L being
    fixed), which a PEtab pre-equilibration condition cannot set."""
    single = petab_problem(FOLDER, conditions="stim1").problem
    with pytest.raises(ValueError, match=r"Preequilibration\(rhs=\.\.\.\)"):
        write_petab(single, tmp_path / "out")
