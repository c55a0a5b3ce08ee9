"""fit_petab: one call from a PEtab problem to a checked fit, its rules, its result and
its command line (``pyomo-odeest petab``)."""
import importlib.util
import json
import os
import types

import numpy as np
import pandas as pd
import pytest
from helpers import benchmark_module

pytest.importorskip("petab")
pytest.importorskip("libsbml")

from pyomo_odeest import EstimationResult, PetabFit, fit_petab  # noqa: E402
from pyomo_odeest.cli import main as cli_main  # noqa: E402
from pyomo_odeest.petab_io import _fit, petab_problem  # noqa: E402

pytestmark = pytest.mark.extras

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "petab")
REFERENCE = pd.read_csv(os.path.join(DATA, "references.tsv"), sep="\t",
                        index_col="problem")["reference_nll"]
PREEQ = os.path.join(DATA, "Preequilibration_handwritten")
BRUNO = os.path.join(DATA, "Bruno_JExpBot2016")


def _suite():
    """benchmarks/petab_suite.py as a module."""
    return benchmark_module("petab_suite")


def _fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


@pytest.fixture(scope="module")
def preeq_fit():
    """The hand-written pre-equilibration problem (4 log10 rates) from 2 starts."""
    return fit_petab(PREEQ, starts=2, progress=False)


# ---------------------------------------------------------------------------
# the call and its result
# ---------------------------------------------------------------------------
def test_fit_petab_result_has_the_table_the_best_fit_and_its_checks(preeq_fit):
    """The least squares (first approach) converges from both starts; the table has one
    row per fit with the NLL by its own integration and by the independent simulation;
    the best is an EstimationResult at the lowest simulated NLL, below the start; the
    later approaches are not run."""
    fit = preeq_fit
    assert isinstance(fit, PetabFit) and fit.status == _fit.CONVERGED and fit.success
    tab = fit.table
    assert list(tab.columns[:len(_fit.TABLE_COLUMNS)]) == _fit.TABLE_COLUMNS
    assert len(tab) == 2 and set(tab["approach"]) == {_fit.LEAST_SQUARES}
    assert list(tab["start_id"]) == [0, 1] and tab["converged"].all()
    assert (tab["time_s"] > 0).all() and (tab["iterations"] >= 1).all()
    assert fit.setup_s == fit.estimation.setup_s and 0 < fit.setup_s < fit.wall_s
    assert fit.best.timings["build_s"] > 0                   # the models' set-up of the fit
    assert fit.best_nll == pytest.approx(tab["nll_simulated"].min(), rel=0, abs=0)
    assert fit.best_nll < fit.nominal_nll - 1.0
    assert isinstance(fit.best, EstimationResult) and fit.best.success
    names = fit.estimation.problem.parameter_names
    best = tab.loc[tab["nll_simulated"].idxmin()]
    np.testing.assert_allclose(fit.best.estimates[names].to_numpy(float),
                               best[[f"p_{k}" for k in names]].to_numpy(float))
    assert fit.estimation.simulated_nll(fit.best, priors=True) == pytest.approx(fit.best_nll,
                                                                                rel=1e-12)
    c = fit.checks
    assert c["agrees"] and abs(c["nll_difference"]) < 1e-3 and c["gain_over_start"] > 1.0
    assert c["reference_gap"] is None and "stationarity" in c
    text = fit.summary()
    assert text.splitlines()[0] == f"PEtab fit of {fit.name}: converged"
    assert f"best NLL {fit.best_nll:.6f} by {_fit.LEAST_SQUARES}" in text
    assert list(fit.estimates().index) == ["k1", "k2", "ks", "kd"]


def test_fit_petab_result_pickles(preeq_fit):
    """The fit pickles with the standard pickle (the imported problem's simulator, a
    cache of compiled functions, is made again on use) and its copy answers the same."""
    import pickle
    copy = pickle.loads(pickle.dumps(preeq_fit))
    assert copy.status == preeq_fit.status and copy.best_nll == preeq_fit.best_nll
    pd.testing.assert_frame_equal(copy.table, preeq_fit.table)
    assert copy.estimation.simulated_nll(copy.best, priors=True) == pytest.approx(
        preeq_fit.best_nll, rel=1e-12)


def test_fit_petab_writes_its_folder(preeq_fit, tmp_path):
    """to_folder: the table (CSV), the outcome (JSON), the best result (JSON) and the
    waterfall and fit figures."""
    pytest.importorskip("matplotlib")
    out = preeq_fit.to_folder(tmp_path / "out")
    for f in ("table.csv", "fit.json", "best_result.json", "waterfall.png", "fit.png"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    tab = pd.read_csv(out / "table.csv")
    assert len(tab) == 2 and tab["nll_simulated"].min() == pytest.approx(preeq_fit.best_nll)
    info = json.loads((out / "fit.json").read_text())
    assert info["status"] == "converged" and info["success"] is True
    assert info["setup_s"] == pytest.approx(preeq_fit.setup_s)
    assert info["best_nll"] == pytest.approx(preeq_fit.best_nll)
    assert info["settings"]["starts"] == 2 and info["best"]["approach"] == _fit.LEAST_SQUARES
    assert set(info["best"]["petab_estimates"]) == {"k1", "k2", "ks", "kd"}
    assert EstimationResult.from_json((out / "best_result.json").read_text()).objective == \
        pytest.approx(preeq_fit.best.objective)


def test_fit_petab_waterfall_is_the_multistart_on_the_simulated_nll(preeq_fit):
    """The waterfall is the package's, over every fit's NLL by simulation: both starts at
    the best minimum."""
    pytest.importorskip("matplotlib")
    ms = preeq_fit.multistart()
    assert ms.hits == 2 and len(ms.clusters) == 1
    assert ms.clusters["objective"].iloc[0] == pytest.approx(preeq_fit.best_nll)
    fig = preeq_fit.plot_waterfall()
    assert "2 starts: 2 at the best, 0 not converged" in fig.axes[0].get_title()


@pytest.mark.slow
def test_fit_petab_profiles_at_the_best_fit(preeq_fit, tmp_path):
    """Profiles through the package's profile likelihood at the best fit: each interval
    holds its estimate; written with the folder."""
    pytest.importorskip("matplotlib")
    prof = preeq_fit.profiles(["k1"], max_points=8)
    row = prof.intervals.loc["k1"]
    assert row["estimate"] == pytest.approx(float(preeq_fit.best.estimates["k1"]))
    assert not (row["lower"] > row["estimate"]) and not (row["upper"] < row["estimate"])
    out = preeq_fit.to_folder(tmp_path, profiles=prof)
    assert (out / "profiles.csv").is_file() and (out / "profiles.png").is_file()


def test_fit_petab_refuses_profiles_and_a_fit_it_does_not_have(tmp_path):
    """A fit stopped by its time budget before any fit ran is not converged: no
    profiles, no best; its status, flags and skipped stages say so."""
    fit = fit_petab(PREEQ, max_problem_time=1e-3, progress=False)
    assert fit.status == _fit.NOT_STATIONARY and not fit.success
    assert fit.flags == ["no_fit_better_than_its_start", "time_budget"]
    assert fit.skipped == list(_fit.DEFAULT_APPROACHES) and fit.best is None
    assert fit.best_nll == fit.nominal_nll and fit.table.empty
    with pytest.raises(ValueError, match="profiles need a converged fit"):
        fit.profiles()
    with pytest.raises(ValueError, match="no fit has finite estimates"):
        fit.estimates()
    assert fit.failures == ("not_run:continuous_least_squares;not_run:reduced_space;"
                            "not_run:simultaneous")
    info = json.loads((fit.to_folder(tmp_path, figures=False) / "fit.json").read_text())
    assert info["best"] is None and info["flags"] == fit.flags


@pytest.mark.parametrize("kw, message", [
    (dict(starts=0), r"starts must be an integer >= 1 \(the nominal point"),
    (dict(starts=2.5), r"starts must be an integer >= 1"),
    (dict(approaches="simultaneous,foo"), r"approaches must name one or more of"),
    (dict(approaches=[]), r"approaches must name one or more of .*got none"),
    (dict(approaches="reduced_space,reduced_space"), r"lists one twice"),
    (dict(spread=0), r"spread must be a finite number > 0"),
    (dict(max_wall_time=-1), r"max_wall_time must be a finite number >= 0 \(0: no limit\)"),
    (dict(grid="fine"), r"grid must be 'auto' or 'uniform'"),
    (dict(scheme="rk4"), r"scheme must be one of"),
    (dict(refine=-1), r"refine must be an integer >= 0"),
    (dict(options={"simultaneous": 3}), r"options maps an approach"),
    (dict(noise="profiled"), r"noise must be one of \['joint', 'alternate'\]"),
])
def test_fit_petab_settings_are_checked_before_anything_runs(kw, message):
    with pytest.raises(ValueError, match=message):
        fit_petab(os.path.join(DATA, "no_such_problem"), **kw)


def test_fit_petab_names_a_missing_problem():
    with pytest.raises(FileNotFoundError, match="PEtab problem .*no_such_problem not found"):
        fit_petab(os.path.join(DATA, "no_such_problem"))
    with pytest.raises(TypeError, match="fit_petab takes a PEtab folder"):
        fit_petab(42)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the backstop forks")
def test_fit_petab_kills_a_fit_its_own_limit_cannot_stop(monkeypatch):
    """A fit of the discrete approaches runs in a child process killed at KILL_FACTOR x
    its limit + KILL_GRACE (here 0.5 s: inside the model's set-up, which no limit of the
    fit's own stops); the start says ``time_limit`` and the problem failed."""
    monkeypatch.setattr(_fit, "KILL_FACTOR", 0.0)
    monkeypatch.setattr(_fit, "KILL_GRACE", 0.5)
    fit = fit_petab(BRUNO, approaches=["reduced_space"], starts=1, progress=False)
    tab = fit.table
    assert list(tab["status"]) == ["time_limit"] and "task_timeout after 0.5 s" in \
        fit.raw["error"].iloc[0]
    assert fit.status == _fit.FAILED and fit.best is None
    assert fit.failures == "reduced_space:time_limit"


def test_each_fits_limit_is_its_estimates_deadline(monkeypatch):
    """A fit's limit is the estimate's own ``max_wall_time`` (one deadline over its
    refinement rounds and their set-up), not Ipopt's option, which each round's
    solve would get afresh (Fujita's simultaneous start then built round after round
    until the backstop killed it at 4.5 x its limit).  The least squares' later starts
    stop at the level of the first one's minimum (``stop_at_first``), the other
    approaches' do not (they do not take ``known_minimum``)."""
    import pyomo_odeest.runner as runner_mod
    seen, first = [], []

    def record(prob, **kw):
        seen.append(kw["options"])
        first.append(kw.get("stop_at_first", False))
        raise RuntimeError("recorded")
    monkeypatch.setattr(runner_mod, "multistart", record)
    for approach in ("simultaneous", _fit.LEAST_SQUARES):
        with pytest.raises(RuntimeError, match="recorded"):
            fit_petab(BRUNO, approaches=[approach], starts=1, max_wall_time=33.0,
                      progress=False)
    assert [o["max_wall_time"] for o in seen] == [33.0, 33.0]
    assert "max_wall_time" not in seen[0].get("options", {})
    assert first == [False, True]


@pytest.mark.slow
def test_fit_petab_reproduces_the_suite_on_bruno():
    """Bruno from the suite's four starts with the defaults: the least squares converges
    from every start at -46.6881814 (the suite's best before it called fit_petab:
    -46.6881814286332), no worse than the reference; the other approaches are not run."""
    fit = fit_petab(BRUNO, reference=REFERENCE["Bruno_JExpBot2016"], progress=False)
    assert fit.status == _fit.CONVERGED and fit.success and not fit.flags
    assert fit.best_nll == pytest.approx(-46.6881814286332, rel=1e-6)
    assert fit.best_nll <= fit.reference + 1e-6 * abs(fit.reference)
    tab = fit.table
    assert len(tab) == 4 and tab["converged"].all()
    assert set(tab["approach"]) == {_fit.LEAST_SQUARES}


# ---------------------------------------------------------------------------
# the rules (formerly the suite's)
# ---------------------------------------------------------------------------
def test_grid_rules_and_the_approaches_own_bound_push(monkeypatch):
    """A start that puts a free parameter on one of its bounds (Borghans' init_A_state =
    1 - 4e-14 of [0, 1], Crauste's mu_LE and mu_P) stays where it is through the
    approaches' own rule (``start_push``: at most 1e-8), so ``fits`` passes no
    ``bound_push`` of its own (one, 1e-8 with ``bound_frac`` 1e-8, overrode the finer
    push and left Brannmark's simultaneous start at a regularization of 1e6 for 120 s);
    Bruno starts inside its box and keeps Ipopt's default."""
    from pyomo_odeest.approaches._base import start_push
    expect = {"Borghans_BiophysChem1997": True, "Crauste_CellSystems2017": True,
              "Bruno_JExpBot2016": False}
    for name, on in expect.items():
        prob = petab_problem(os.path.join(DATA, name)).problem
        push = start_push(prob.u0, *prob.bounds())
        assert (push["bound_push"] <= 1e-8) if on else push == {}
    pe = petab_problem(os.path.join(DATA, "Crauste_CellSystems2017"))
    seen = {}

    def multistart(prob, **kw):                  # the options a start gets, then stop
        seen.update(kw["options"])
        raise StopIteration

    monkeypatch.setattr("pyomo_odeest.runner.multistart", multistart)
    settings = _fit.FitSettings(max_wall_time=0)
    run = _fit._Run(pe, settings, types.SimpleNamespace(task_timeout=None),
                    _fit.Budget(None), "Crauste")
    for approach in ("simultaneous", "reduced_space"):
        seen.clear()
        with pytest.raises(StopIteration):
            _fit.fits(run, approach, None)
        assert seen and "bound_push" not in seen.get("options", {})
    # the first grid follows LSODA's steps at the start: Borghans' calcium spikes get
    # steps far below horizon/300 where they rise; Bruno's slow dynamics keep horizon/300
    auto = types.SimpleNamespace(grid_points=300, grid="auto")
    uniform = types.SimpleNamespace(grid_points=300, grid="uniform")
    prob = petab_problem(BRUNO).problem
    assert _fit.first_grid(prob, uniform) == (None, pytest.approx(prob.T / 300))
    grids, h = _fit.first_grid(prob, auto)
    assert set(grids) == set(prob.experiment_names) and h == pytest.approx(prob.T / 300)
    prob = petab_problem(os.path.join(DATA, "Borghans_BiophysChem1997")).problem
    grid, h = _fit.first_grid(prob, auto)
    assert np.min(grid.h) < 0.005 < h <= prob.T / 300 * (1 + 1e-12)
    assert np.all(np.isin(prob.meas_times, grid.t))
    assert len(grid.t) - 1 < (prob.T - prob.t0) / 0.005        # coarse where it settles


def test_status_says_what_the_result_is():
    """A converged fit worse than its own start is never a fit (Borghans: -54.31 from a
    start at -83.32); a better point that did not converge is the best found, flagged;
    with nothing finite, failed; the reference gap is a flag."""
    def tab(*rows):
        return pd.DataFrame([dict(success=s, nll_simulated=v, warnings="") for s, v in rows])
    status, _, value, flags = _fit.assess(tab((True, -54.31)), -83.32, None)
    assert status == _fit.NOT_STATIONARY and value == -83.32
    assert flags == ["no_fit_better_than_its_start"] and not _fit.solved(status, flags)
    status, _, value, _ = _fit.assess(tab((True, -90.0), (False, -104.0)), -83.32, None)
    assert status == _fit.NOT_STATIONARY and value == -104.0
    status, _, value, flags = _fit.assess(tab((True, -104.88), (False, -90.0)), -83.32, -83.32)
    assert status == _fit.CONVERGED and value == -104.88 and _fit.solved(status, flags)
    status, _, _, flags = _fit.assess(tab((True, -90.0)), -83.32, -104.0)
    assert status == _fit.CONVERGED and flags == ["worse_than_reference"]
    assert _fit.assess(tab((False, np.nan)), -83.32, None)[0] == _fit.FAILED
    # a start whose discretization and simulation disagree is not a value found (Crauste:
    # reduced space stopped at its time limit with NLL 240.80 on its grid, 13.37 by LSODA)
    rows = pd.DataFrame([dict(success=False, nll_simulated=13.37, nll_discrete=240.80,
                              warnings=""),
                         dict(success=True, nll_simulated=190.964039, nll_discrete=190.963979,
                              warnings="")])
    status, _, value, flags = _fit.assess(rows, 190.963978, 190.965219)
    assert status == _fit.CONVERGED and value == 190.964039 and not flags


def test_time_budget_shares_what_is_left():
    import time as _time
    budget = _fit.Budget(100.0, workers=0)
    assert budget.fit_limit(120.0, 4) == pytest.approx(25.0, abs=0.5)   # 4 starts in turn
    assert budget.fit_limit(10.0, 4) == 10.0                              # the fit's own limit
    assert _fit.Budget(100.0, workers=2).fit_limit(120.0, 4) == pytest.approx(50.0, abs=0.5)
    assert _fit.Budget(None).fit_limit(0.0) is None and _fit.Budget(None).allows("x")
    said = []
    budget = _fit.Budget(100.0, log=said.append)
    budget.start = _time.perf_counter() - 101.0                            # spent
    assert not budget.allows("simultaneous") and budget.skipped == ["simultaneous"]
    assert said == ["  not run: simultaneous (the problem's time budget of 100 s is spent)"]


def _run(approaches):
    """The shared state of the stages, without a problem (for the table rules)."""
    pe = types.SimpleNamespace(problem=types.SimpleNamespace(parameter_names=["k"]))
    return _fit._Run(pe, types.SimpleNamespace(approaches=approaches), None,
                     _fit.Budget(None), "P")


def test_polish_runs_the_first_approach_from_the_best_point_of_another(monkeypatch):
    """When no fit converged to the best point found and that point came from another
    approach, the first approach runs once from it; not when the best converged, nor
    when the first approach found it."""
    calls = []

    def fake_fits(run, approach, starts, tol=None, stage="multistart"):
        calls.append((approach, np.asarray(starts[0])))
        return pd.DataFrame([dict(approach=approach, success=True, nll_simulated=-66.58,
                                  nll_discrete=-66.58, status="converged", p_k=starts[0][0])])
    monkeypatch.setattr(_fit, "fits", fake_fits)
    run = _run([_fit.LEAST_SQUARES, "reduced_space"])

    def tab(approach, success, nll, k):
        return pd.DataFrame([dict(approach=approach, success=success, nll_simulated=nll,
                                  nll_discrete=nll, status="s", p_k=k)])
    explorer = [tab(_fit.LEAST_SQUARES, False, -53.2, 1.0), tab("reduced_space", False, -66.5, 2.0)]
    out = _fit.polish(run, explorer, -53.08, None)
    assert calls[0][0] == _fit.LEAST_SQUARES and calls[0][1][0] == 2.0 and len(out) == 3
    assert _fit.assess(pd.concat(out, ignore_index=True), -53.08, None)[0] == _fit.CONVERGED
    # not converged but lower: again from where it stopped, at most POLISH_ROUNDS times;
    # not lower: no restart
    for step, rounds in ((0.01, _fit.POLISH_ROUNDS), (0.0, 1)):
        calls.clear()

        def descending(run, approach, starts, tol=None, stage="multistart"):
            calls.append(starts[0][0])
            return tab(approach, False, -66.5 - step * len(calls), starts[0][0] + 1.0)
        monkeypatch.setattr(_fit, "fits", descending)
        _fit.polish(_run([_fit.LEAST_SQUARES, "reduced_space"]), explorer, -53.08, None)
        assert calls == [2.0 + k for k in range(rounds)]
    monkeypatch.setattr(_fit, "fits", fake_fits)
    for tables in ([tab(_fit.LEAST_SQUARES, False, -66.5, 1.0), tab("reduced_space", False, -60.0, 2.0)],
                   [tab("reduced_space", True, -66.5, 2.0)], []):
        calls.clear()
        assert _fit.polish(run, tables, -53.08, None) is tables and not calls
    # the first approach's best start stopped at its iteration limit: continued from there
    at_limit = tab(_fit.LEAST_SQUARES, False, -53.2, 1.0).assign(status="max_iterations")
    out = _fit.polish(run, [at_limit], -53.08, None)
    assert len(calls) == 1 and calls[0][0] == _fit.LEAST_SQUARES and calls[0][1][0] == 1.0
    assert len(out) == 2
    # ... at the tolerances it was refitted at
    tols = []
    monkeypatch.setattr(_fit, "fits", lambda run, approach, starts, tol=None, stage="": (
        tols.append(tol) or fake_fits(run, approach, starts)))
    from pyomo_odeest.discretization.continuous import default_tolerances
    r0, a0 = default_tolerances()
    _fit.polish(run, [at_limit.assign(rtol=r0 / 100, atol=a0 / 100)], -53.08, None)
    _fit.polish(run, [at_limit.assign(p_k=3.0)], -53.08, None)
    assert tols[0] == (r0 / 100, a0 / 100) and tols[1] is None


def test_continuous_tolerances_are_refined_from_the_best_start():
    """The continuous approaches (no grid) are refitted with the tolerances / 100 when
    their fits did not converge to the best value they found, no worse than the problem's
    start: from the best start by simulation, or from the problem's start when that is
    better; not once they converged, nor when nothing is finite or the best ran out of
    evaluations (not a matter of tolerances)."""
    from pyomo_odeest.discretization.continuous import default_tolerances
    prob = petab_problem(BRUNO).problem
    names = prob.parameter_names

    def row(success, nll, shift, rtol=np.nan, warnings=""):
        return dict(success=success, nll_simulated=nll, warnings=warnings, rtol=rtol,
                    **{f"p_{k}": v + shift for k, v in zip(names, prob.u0)})

    def refit(rows, start, tol=None):
        return _fit.tolerance_refit(pd.DataFrame(rows), tol, prob, start)
    r0, a0 = default_tolerances()
    rows = [row(False, -40.0, 0.1), row(False, -45.0, 0.2), row(True, np.nan, 0.3)]
    tol, starts = refit(rows, -30.0)
    assert tol == (r0 / 100, a0 / 100)
    np.testing.assert_allclose(starts[0], prob.u0 + 0.2)          # the best finite start
    assert refit(rows + [row(True, -46.0, 0.0)], -30.0) is None
    assert refit([row(True, -46.0, 0.0, warnings="discretization error: ...")], -30.0)
    _, starts = refit([row(True, -54.3, 0.1), row(False, -97.7, 0.2)], -83.3)
    np.testing.assert_allclose(starts[0], prob.u0 + 0.2)
    _, starts = refit([row(True, -54.3, 0.1)], -83.3)
    np.testing.assert_allclose(starts[0], prob.u0)
    tol2, starts2 = refit(rows + [row(False, -50.0, 0.4, rtol=tol[0])], -30.0, tol)
    assert tol2 == (r0 / 1e4, a0 / 1e4)
    np.testing.assert_allclose(starts2[0], prob.u0 + 0.4)
    assert refit(rows + [row(False, np.nan, 0.0, rtol=tol[0])], -30.0, tol) is None
    stopped = dict(row(False, -50.0, 0.4), status="max_iterations")
    assert refit(rows + [stopped], -30.0) is None


# ---------------------------------------------------------------------------
# the command line and the suite
# ---------------------------------------------------------------------------
def test_cli_petab_fits_and_writes_its_folder(tmp_path, capsys):
    """``pyomo-odeest petab FOLDER``: the fits' lines, the summary, the folder (table,
    JSON, figures); exit 0 for a converged fit."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    code = cli_main(["petab", PREEQ, "--starts", "2", "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "PEtab fit of Preequilibration_handwritten: converged" in text
    assert text.count(f"Preequilibration_handwritten {_fit.LEAST_SQUARES}") == 2
    for f in ("table.csv", "fit.json", "best_result.json", "waterfall.png", "fit.png"):
        assert (out / f).is_file(), f
    info = json.loads((out / "fit.json").read_text())
    assert info["name"] == "Preequilibration_handwritten" and info["status"] == "converged"
    assert len(pd.read_csv(out / "table.csv")) == 2


def test_cli_petab_progress_and_not_converged_exit_1(tmp_path, capsys):
    """``--progress`` reports the fits on standard error (one line each when it is not a
    terminal); a fit that is not converged (here: the time budget spent at the import)
    exits 1 with one error line, its folder written; ``--quiet``: no line per fit."""
    code = cli_main(["petab", os.path.join(PREEQ, "problem.yaml"), "--max-problem-time",
                     "0.001", "--out", str(tmp_path), "--no-plot", "--progress", "--quiet"])
    cap = capsys.readouterr()
    assert code == 1
    assert cap.err.strip().splitlines()[-1].startswith(
        "error: the fit is best_found_not_stationary (no_fit_better_than_its_start, "
        "time_budget)")
    assert (tmp_path / "fit.json").is_file() and not (tmp_path / "waterfall.png").exists()
    code = cli_main(["petab", PREEQ, "--starts", "1", "--approaches", _fit.LEAST_SQUARES,
                     "--out", str(tmp_path), "--no-plot", "--progress", "--quiet"])
    cap = capsys.readouterr()
    assert code == 0 and "petab Preequilibration_handwritten: 1/1 done, 0 failed" in cap.err
    assert f"Preequilibration_handwritten {_fit.LEAST_SQUARES}" not in cap.out


@pytest.mark.parametrize("args, message", [
    (["petab", os.path.join(DATA, "no_such_problem")],
     r"^error: PEtab problem .*no_such_problem not found"),
    (["petab", PREEQ, "--starts", "0"], r"^error: argument --starts: 0 is out of range"),
    (["petab", PREEQ, "--approaches", "foo"], r"^error: approaches must name one or more"),
    (["petab", PREEQ, "--max-wall-time", "-1"], r"^error: argument --max-wall-time: -1.0 "
                                                r"must be a finite number >= 0"),
    (["petab", DATA], r"^error: .*petab holds no PEtab YAML file"),
    (["petab"], r"^error: the following arguments are required: problem"),
    (["petab", PREEQ, "--noise", "both"], r"^error: argument --noise: invalid choice"),
])
def test_cli_petab_usage_errors_are_one_line_exit_2(args, message, capsys, tmp_path):
    code = cli_main(args + ["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert pytest.importorskip("re").match(message, err), err


@pytest.mark.parametrize("args, message", [
    ([os.path.join(DATA, "no_such_problem")], r"^error: .*no_such_problem is not a folder"),
    ([PREEQ, "--starts", "0"], r"^error: starts must be an integer >= 1 \(the nominal point"),
])
def test_suite_usage_errors_are_one_line_exit_2(args, message, capsys):
    """benchmarks/petab_suite.py on a missing folder or with ``--starts 0``: one line,
    exit 2, before any fit."""
    import re
    code = _suite().main(args + ["--out", ""])
    cap = capsys.readouterr()
    assert code == 2 and len(cap.err.strip().splitlines()) == 1 and not cap.out
    assert re.match(message, cap.err), cap.err


def test_suite_is_a_caller_of_fit_petab_and_keeps_its_lines(capsys):
    """benchmarks/petab_suite.py prints the fits' lines, one ``petab_problem:`` line per
    problem with its fields and the ``petab_suite:`` summary line; a problem whose time
    budget is spent at the import is the best value known (its start), flagged."""
    suite = _suite()
    code = suite.main([BRUNO, "--max-problem-time", "1e-3", "--out", ""])
    out = capsys.readouterr().out.splitlines()
    line = [ln for ln in out if ln.startswith("petab_problem:")][0]
    fields = _fields(line)
    assert code == 1 and fields["status"] == _fit.NOT_STATIONARY
    assert fields["name"] == "Bruno_JExpBot2016"
    assert fields["best_nll"] == fields["nominal_nll"] and fields["best_approach"] == "-"
    assert float(fields["reference_nll"]) == pytest.approx(REFERENCE["Bruno_JExpBot2016"],
                                                           abs=1e-6)
    assert fields["flags"] == "no_fit_better_than_its_start,time_budget"
    assert fields["failures"] == ("not_run:continuous_least_squares;not_run:reduced_space;"
                                  "not_run:simultaneous")
    assert out[-1].startswith("petab_suite: problems=1 imported=1 median_wall_s=")


def test_suite_checks_the_stored_estimates_with_todays_package(tmp_path, capsys):
    """``--check-stored`` fits nothing: it evaluates the best estimates stored in the TSV
    by the independent simulation (Bruno's nominal point, stored with its reference
    NLL, gives it back to 1e-6; a stored value off by 1 is reported off by 1), skips a
    problem without a stored row, and refuses to run without a TSV."""
    import json
    suite = _suite()
    from pyomo_odeest.petab_io import petab_problem
    P = petab_problem(BRUNO).problem
    est = dict(zip(P.parameter_names, map(float, P.u0)))
    ref = REFERENCE["Bruno_JExpBot2016"]
    out = tmp_path / "suite.tsv"
    rows = [dict(name="Bruno_JExpBot2016", status="converged", best_nll=ref + 1.0,
                 reference=ref, nominal_nll=ref, best_approach="x", wall_s=1.0,
                 best_rtol=np.nan, best_step=np.nan, flags="", estimates=json.dumps(est))]
    pd.DataFrame(rows).to_csv(out, sep="\t", index=False)
    code = suite.main([BRUNO, PREEQ, "--check-stored", "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[-1] == "petab_stored: problems=1"
    (line,) = [ln for ln in lines if ln.startswith("petab_stored: name=")]
    f = _fields(line)
    assert f["name"] == "Bruno_JExpBot2016"
    assert float(f["simulated_nll"]) == pytest.approx(ref, abs=1e-5)
    assert float(f["difference"]) == pytest.approx(-1.0 / abs(ref + 1.0), rel=0.01)
    assert suite.main([BRUNO, "--check-stored", "--out", ""]) == 2


def test_docs_snippet_runs_as_written(tmp_path, monkeypatch):
    """The Python block of docs/petab.md, "Fitting a problem: fit_petab", run in a
    folder of its own (the shipped problems' path made absolute): its folder written."""
    import re
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    text = open(os.path.join(root, "docs", "petab.md")).read()
    section = text.split("## Fitting a problem: `fit_petab`", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    code = code.replace('"tests/data/petab/', '"' + os.path.abspath(DATA) + os.sep)
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(compile(code, "petab.md", "exec"), ns)
    assert ns["fit"].status == _fit.CONVERGED
    assert (tmp_path / "preeq_fit" / "table.csv").is_file()
    assert (tmp_path / "preeq_fit" / "waterfall.png").is_file()


@pytest.mark.parametrize("engine", ["scipy", "cvodes"])
def test_import_check_states_how_close_the_nominal_nll_is(engine, capsys):
    """benchmarks/petab_import.py on Bruno with either engine of the imported problem's
    own simulation: one ``petab_import:`` line with the relative difference from the
    reference (a ``match`` is within 1e-3, here within 1e-6), and the summary line."""
    pytest.importorskip("casadi")
    spec = importlib.util.spec_from_file_location(
        "petab_import", os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                                     "petab_import.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    extra = ["--compare-forward"] if engine == "cvodes" else []
    assert mod.main([BRUNO, "--engine", engine] + extra) == 0
    out = capsys.readouterr().out.splitlines()
    fields = _fields(out[0])
    assert fields["status"] == "match" and abs(float(fields["difference"])) < 1e-6
    # the independent simulation at the import's own start
    assert abs(float(fields["nll_petab"]) - float(fields["nll_import"])) < 1e-5
    assert out[-1] == "petab_import: problems=1 match=1"
    if engine == "cvodes":          # the two ways give the same sensitivities
        assert float(fields["sens_difference"]) < 1e-6
        assert float(fields["sens_error"]) < 1e-6 and float(fields["sens_error_forward"]) < 1e-6
        assert float(fields["eval_s"]) > 0 and float(fields["eval_forward_s"]) > 0


def test_evaluator_families_benchmark_shares_the_conditions_families(capsys):
    """benchmarks/evaluator_families.py on Bruno (two conditions): the families of the
    two blocks are shared, the rows' values are the same, and the last line says so."""
    mod = benchmark_module("evaluator_families")
    assert mod.main([BRUNO, "--repeats", "1"]) == 0
    fields = _fields(capsys.readouterr().out.splitlines()[-1])
    before, after = map(int, fields["families"].split("->"))
    assert after < before and fields["problem"] == "Bruno_JExpBot2016"
    assert {"constraints_ratio", "jacobian_ratio", "hessian_ratio"} <= set(fields)


@pytest.mark.parametrize("name", ["Bruno_JExpBot2016", "Elowitz_Nature2000", "Schwen_PONE2014",
                                  "Weber_BMC2015", "Brannmark_JBC2010"])
def test_the_peer_benchmark_starts_where_fit_petab_starts(name):
    """benchmarks/amici_peer.py draws its starts over the package's free parameters (every
    estimated one but a profiled σ: Elowitz's sigma; the noise parameters of Schwen,
    Weber and Brannmark are fitted jointly) in the same order, and they are
    fit_petab's starts."""
    import petab.v1 as petab
    from pyomo_odeest.petab_io._fit import start_box
    from pyomo_odeest.runner import multistart_starts
    peer = benchmark_module("amici_peer")
    folder = os.path.join(DATA, name)
    pp = petab.Problem.from_yaml(peer.yaml_of(folder))
    params = peer.suite_start_parameters(pp)
    prob = petab_problem(folder).problem
    free = [n for n, f in zip(prob.parameter_names, prob.free_mask) if f]
    assert [p[0] for p in params] == free
    ours = multistart_starts(prob, n=3, space="linear", bounds=start_box(prob, 0.3),
                             starts=[prob.u0], seed=0)[free]
    theirs = peer.suite_starts(params, 4, 0.3, 0)
    np.testing.assert_allclose(theirs[free].to_numpy(), ours.to_numpy(), rtol=1e-12, atol=1e-14)
