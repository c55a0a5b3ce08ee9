"""Runner in serial mode, pickling and JSON of problems and results, the χ² check.

No Dask needed: these tests run in a bare environment."""
import math
import os
import pickle
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import EstimationResult, estimate
from pyomo_odeest.models import lotka_volterra_problem, oscillator_data, oscillator_problem
from pyomo_odeest.problem import ProblemError, noise_check
from pyomo_odeest.runner import (RunInterruptedWarning, Runner, bootstrap, cluster_end_points, multistart,
                                 multistart_starts, profile_points)



@pytest.fixture(scope="module")
def osc():
    return oscillator_problem()


def _same_result(a: EstimationResult, b: EstimationResult):
    assert (a.approach, a.method, a.scheme_label, a.status, a.success, a.iterations) == \
        (b.approach, b.method, b.scheme_label, b.status, b.success, b.iterations)
    assert a.objective == b.objective
    pd.testing.assert_series_equal(a.estimates, b.estimates, check_exact=True)
    for f in ("states", "fitted", "residuals", "adjoint"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None)
        if x is not None:
            pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert a.multipliers.keys() == b.multipliers.keys()
    for k in a.multipliers:
        pd.testing.assert_frame_equal(a.multipliers[k], b.multipliers[k], check_exact=True)
    assert a.warnings == b.warnings
    assert a.evaluations == b.evaluations


def test_result_pickle_and_json_round_trip(osc, tmp_path):
    res = estimate(osc, "simultaneous", u0=[1.2])
    assert res.model is not None
    back = pickle.loads(pickle.dumps(res))            # the numbers, not the Pyomo model
    _same_result(res, back)
    assert back.model is None and "model" in back.extra["not_pickled"]
    # the problem travels with the result: its analyses work after unpickling
    # (without the block the sensitivities come from the discrete model: same to rounding)
    pd.testing.assert_frame_equal(back.covariance().matrix, res.covariance().matrix,
                                  check_exact=False, rtol=1e-6)
    for again in (EstimationResult.from_json(res.to_json()),
                  EstimationResult.from_json(res.to_json(tmp_path / "r.json"))):
        _same_result(res, again)
        assert again.model is None
    assert again.extra["noise_check"]["chi2"] == res.extra["noise_check"]["chi2"]
    lean = res.lean()
    assert lean.model is None and "model" in lean.extra["not_pickled"]
    assert res.model is not None                      # the original keeps its model


def test_live_objects_are_not_pickled_and_listed(osc):
    res = estimate(osc, "multiple_shooting", u0=[1.2], jacobian="adjoint")
    res.extra["simulator"] = lambda u: u                  # a live object
    assert res.backend is not None                        # the model behind the analyses
    back = pickle.loads(pickle.dumps(res))
    assert "simulator" not in back.extra and "_backend" not in back.__dict__
    assert "simulator" in back.extra["not_pickled"]
    del res.extra["simulator"]
    _same_result(res, back)
    pd.testing.assert_frame_equal(back.extra["node_values"], res.extra["node_values"])
    j = EstimationResult.from_json(res.to_json())
    _same_result(res, j)
    for a, b in zip(res.extra["node_trajectories"], j.extra["node_trajectories"]):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    with pytest.raises(ValueError, match="unknown field"):
        EstimationResult.from_dict({**res.to_dict(), "bogus": 1})


def test_problem_pickles_after_use_and_estimates_identically():
    cloudpickle = pytest.importorskip("cloudpickle")
    prob = lotka_volterra_problem(p0=(1, 1, 1, 1))
    first = estimate(prob, "multiple_shooting", jacobian="adjoint")   # fills a cache
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        blob = dumps(prob)
        assert len(blob) < 20000                          # the cache is not pickled
        again = estimate(loads(blob), "multiple_shooting", jacobian="adjoint")
        assert again.objective == first.objective
        np.testing.assert_array_equal(again.x, first.x)


def test_problem_with_user_lambda_pickles_by_cloudpickle():
    cloudpickle = pytest.importorskip("cloudpickle")
    from pyomo_odeest import EstimationProblem, Parameter
    prob = EstimationProblem(states=["x"], parameters=[Parameter("k", 0.5, 0.01, 5)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 1.0},
                             data=pd.DataFrame({"x": np.exp(-np.arange(1, 6.0))},
                                               index=np.arange(1, 6.0)))
    back = cloudpickle.loads(cloudpickle.dumps(prob))
    r1, r2 = estimate(prob, "reduced_space"), estimate(back, "reduced_space")
    assert r1.x[0] == pytest.approx(1.0, rel=1e-3) and r2.objective == r1.objective


def test_chi2_flags_a_spurious_minimum_and_passes_the_optimum(osc):
    bad = estimate(osc, "simultaneous", u0=[3.0])
    good = estimate(osc, "simultaneous", u0=[1.2])
    assert bad.success and good.success                 # both "converged"
    assert bad.objective > 100 * good.objective
    assert any("inconsistent with the noise level" in w for w in bad.warnings)
    assert "WARNING" in bad.summary() and not good.warnings
    chk = noise_check(osc, good)
    # χ² of the weighted residuals = the least-squares objective when σ is given
    assert chk["chi2"] == pytest.approx(good.objective, rel=1e-10)
    assert chk["dof"] == 20 - 1 and chk["consistent"]
    # without σ there is nothing to test
    plain = lotka_volterra_problem()
    assert not noise_check(plain, good)["applicable"]


def test_starts_design():
    prob = lotka_volterra_problem()
    b = {f"p{k}": (0.3, 2.0) for k in range(1, 5)}
    S = multistart_starts(prob, 16, "sobol", "log", b, seed=3, starts=[[1, 1, 1, 1]])
    assert S.shape == (17, 4) and list(S.iloc[0]) == [1, 1, 1, 1]
    assert S.to_numpy().min() >= 0.3 and S.to_numpy().max() <= 2.0
    # log space: about half of the starts below the geometric midpoint
    assert 6 <= int((S.iloc[1:, 0] < math.sqrt(0.6)).sum()) <= 10
    L = multistart_starts(prob, 8, "lhs", "linear", b, seed=3)
    # Latin hypercube: one start per stratum of each coordinate
    strata = np.floor((L.to_numpy() - 0.3) / (1.7 / 8)).astype(int)
    assert all(sorted(strata[:, k]) == list(range(8)) for k in range(4))
    pd.testing.assert_frame_equal(S, multistart_starts(prob, 16, "sobol", "log", b, seed=3,
                                                       starts=[[1, 1, 1, 1]]))
    with pytest.raises(ProblemError, match="finite bounds"):
        multistart_starts(prob, 4)
    with pytest.raises(ProblemError, match="positive bounds"):
        multistart_starts(prob, 4, space="log", bounds={**b, "p4": (-1, 1)})


def test_serial_multistart_error_row_and_interrupt(osc):
    rn = Runner(mode="serial", progress=False)
    ms = multistart(osc, n=2, runner=rn, starts=[[3.0], [1.2]], seed=5)
    assert ms.hits >= 1 and ms.best.x[0] == pytest.approx(1.0038, abs=1e-3)
    assert int(ms.table.loc[0, "cluster"]) > 0             # the bad start's minimum
    # a failing task becomes a row; the others finish
    run = rn.map(estimate, ["not a problem", osc], approach="simultaneous")
    assert list(run.table["status"] == "error") == [True, False]
    assert "ProblemError" in run.table.loc[0, "error"] and run.table.loc[1, "success"]
    # an interrupted run keeps the finished rows
    n = {"rows": 0}

    def stop_after_one(row):
        n["rows"] += 1
        if n["rows"] == 1:
            raise KeyboardInterrupt

    with pytest.warns(RunInterruptedWarning, match="interrupted"):
        run = rn.map(math.sqrt, [4.0, 9.0, 16.0], on_row=stop_after_one)
    assert run.interrupted and not run.complete
    assert list(run.table["status"]) == ["done", "cancelled", "cancelled"]
    assert run.table.loc[0, "value"] == 2.0


def test_bootstrap_and_profile_serial(osc):
    fit = estimate(osc, "simultaneous", u0=[1.2])
    seen = []
    for kind in ("residual", "case"):
        bs = bootstrap(osc, n=2, kind=kind, fit=fit, seed=11)
        assert bs.table["success"].all()
        est = bs.estimates["omega"].to_numpy()
        assert np.all(np.abs(est - fit.x[0]) < 0.02) and np.ptp(est) > 0
        seen.append(est)
    assert not np.array_equal(seen[0], seen[1])
    again = bootstrap(osc, n=2, kind="case", fit=fit, seed=11)      # same seeds, same samples
    np.testing.assert_array_equal(again.estimates["omega"].to_numpy(), seen[1])
    # the profile point at the estimate gives the minimum objective
    prof = profile_points(osc, "omega", [fit.x[0] - 0.01, fit.x[0], fit.x[0] + 0.01],
                          approach="simultaneous", u_start=fit.x)
    obj = prof.table["objective"].to_numpy()
    assert prof.table["success"].all()
    assert obj[1] == pytest.approx(fit.objective, rel=1e-8) and obj[0] > obj[1] < obj[2]


def test_profile_likelihood_through_the_runner(osc):
    from pyomo_odeest import profile_likelihood
    fit = estimate(osc, "reduced_space", u0=[1.2])
    kw = dict(approach="reduced_space", max_points=4)
    plain = profile_likelihood(fit, **kw)
    ran = profile_likelihood(fit, runner=Runner(mode="serial", progress=False), **kw)
    pd.testing.assert_frame_equal(plain.intervals, ran.intervals, check_exact=True)
    with pytest.raises(RuntimeError, match="1 of 2 tasks failed"):
        Runner(mode="serial", progress=False)(math.sqrt, [4.0, -1.0])


def test_cluster_end_points_groups_by_tolerance():
    tab = pd.DataFrame({"p_a": [1.0, 1.0 + 1e-5, 2.0, 1.0], "objective": [3.0, 3.0, 1.0, np.nan],
                        "success": [True, True, True, True]})
    labels, clusters = cluster_end_points(tab, ["a"])
    assert list(labels.iloc[:3]) == [1, 1, 0] and np.isnan(labels.iloc[3])
    assert list(clusters["hits"]) == [1, 2]


def test_variant_checks_its_arguments():
    prob = oscillator_problem(data=oscillator_data(1))
    with pytest.raises(ProblemError, match="shape"):
        prob.variant(values=np.zeros((3, 1)))
    with pytest.raises(ProblemError, match="not a parameter"):
        prob.variant(fix={"nope": 1.0})
    v = prob.variant(fix={"omega": 2.0})
    assert v.parameters[0].fixed and not prob.parameters[0].fixed


def test_several_experiments_pickle_and_fix():
    from pyomo_odeest import EstimationProblem, Experiment, Parameter
    t = np.linspace(0.5, 3.0, 6)
    exps = [Experiment("e1", pd.DataFrame({"x": 2.0 * np.exp(-0.7 * t)}, index=t)),
            Experiment("e2", pd.DataFrame({"x": 1.0 * np.exp(-0.7 * t)}, index=t),
                       parameters={"x0": 1.0})]
    prob = EstimationProblem(states=["x"], parameters=[Parameter("k", 0.5, 0, 5),
                                                      Parameter("x0", 2.0, 0, 5, local=True)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "x0"}, data=None,
                             experiments=exps)
    back = pickle.loads(pickle.dumps(prob))
    r1, r2 = estimate(prob, "reduced_space"), estimate(back, "reduced_space")
    assert r1.objective == r2.objective and r1.x[0] == pytest.approx(0.7, rel=1e-4)
    fixed = prob.variant(fix={"k": 0.6})
    r3 = estimate(fixed, "reduced_space")
    assert r3.estimates["k"] == 0.6 and r3.objective > r1.objective
    assert not prob.parameters[0].fixed
    with pytest.raises(ProblemError, match="mapping experiment name"):
        prob.variant(values=np.zeros((6, 1)))
    with pytest.raises(ProblemError, match="not experiments"):
        prob.variant(values={"e9": np.zeros((6, 1))})
    # resampling within one experiment leaves the others as they are
    v = prob.variant(values={"e2": np.ones((6, 1))}, multiplicity={"e1": np.arange(6.0)})
    np.testing.assert_array_equal(v.experiment_problems[1].data.to_numpy(), np.ones((6, 1)))
    np.testing.assert_array_equal(v.experiment_problems[0].data, prob.experiment_problems[0].data)
    np.testing.assert_array_equal(v.experiment_problems[0].weights[:, 0], np.arange(6.0))
    np.testing.assert_array_equal(v.experiment_problems[1].weights,
                                  prob.experiment_problems[1].weights)


def test_bootstrap_of_several_experiments_resamples_within_each():
    """Residual and case bootstrap of two experiments (shared k, local x0): every
    sample refits all parameters; the spread of k agrees with its Wald standard
    error (a near-linear problem), and every experiment keeps its own design."""
    from pyomo_odeest import EstimationProblem, Experiment, Parameter
    rng = np.random.default_rng(5)
    t = np.linspace(0.25, 3.0, 12)
    exps = [Experiment(f"e{i}", pd.DataFrame(
        {"x": x0 * np.exp(-0.7 * t) + 0.02 * rng.standard_normal(t.size)}, index=t),
        parameters={"x0": x0}) for i, x0 in enumerate((2.0, 1.0))]
    prob = EstimationProblem(states=["x"], parameters=[Parameter("k", 0.5, 0, 5),
                                                      Parameter("x0", 1.5, 0, 5, local=True)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "x0"}, data=None,
                             experiments=exps, sigma=0.02)
    fit = estimate(prob, "reduced_space")
    chk = fit.extra["noise_check"]                 # χ² over both experiments, 24 - 3 dof
    assert chk["applicable"] and chk["dof"] == 21 and chk["consistent"]
    r = fit.residuals["x"].to_numpy()
    assert chk["chi2"] == pytest.approx(float(np.sum(r**2)) / 0.02**2, rel=1e-10)
    se = fit.covariance().se
    bs = bootstrap(prob, n=20, kind="residual", approach="reduced_space", fit=fit, seed=3)
    est = bs.estimates                   # 20 samples: the spread's own error is about 16 %
    assert len(est) == 20 and list(est.columns) == ["k", "x0_e0", "x0_e1"]
    assert est["k"].std() == pytest.approx(se["k"], rel=0.35)
    assert est["x0_e0"].std() == pytest.approx(se["x0_e0"], rel=0.35)
    case = bootstrap(prob, n=6, kind="case", approach="reduced_space", fit=fit, seed=4)
    assert case.table["success"].all() and case.estimates["k"].std() > 0


def test_variants_share_the_numeric_functions_not_the_data():
    """A variant (other data, weights or fixed parameters) reuses the functions built
    from the symbolic problem, and computes with its own data: a model of the variant
    built after one of the original gives the variant's objective."""
    from pyomo_odeest.discretization.discrete import DiscreteModel
    prob = oscillator_problem(data=oscillator_data(1))
    u = prob.u0 * 1.05
    J = DiscreteModel(prob, steps_per_interval=4).objective(u)
    half = prob.variant(multiplicity=0.5 * np.ones(len(prob.meas_times)))
    shifted = prob.variant(values=prob.data.to_numpy() + 0.1)
    assert half._numeric_cache is prob._numeric_cache
    assert DiscreteModel(half, steps_per_interval=4).misfit.gx is \
        DiscreteModel(prob, steps_per_interval=4).misfit.gx
    c = DiscreteModel(prob, steps_per_interval=4).const
    assert DiscreteModel(half, steps_per_interval=4).objective(u) - c == \
        pytest.approx(0.5 * (J - c), rel=1e-12)
    assert DiscreteModel(shifted, steps_per_interval=4).objective(u) != pytest.approx(J)
    assert DiscreteModel(prob, steps_per_interval=4).objective(u) == J


def _sleep_then(seconds):
    import time
    time.sleep(seconds)
    return seconds


@pytest.mark.skipif(not hasattr(os, "fork"), reason="task_timeout forks")
def test_task_timeout_kills_a_task_and_the_run_goes_on():
    """A task past ``task_timeout`` is killed wherever it is (here in a sleep no limit of
    its own can stop): its row says ``time_limit``, the next task runs, the run keeps
    its order; without the attribute, tasks run in this process."""
    import time
    rn = Runner(mode="serial", progress=False, task_timeout=1.0)
    t0 = time.perf_counter()
    run = rn.map(_sleep_then, [0.05, 60.0, 0.1])
    assert time.perf_counter() - t0 < 30.0
    assert list(run.table["status"]) == ["done", "time_limit", "done"]
    assert "task_timeout after 1 s" in run.table.loc[1, "error"]
    assert list(run.table["value"].iloc[[0, 2]]) == [0.05, 0.1]
    rn.task_timeout = None
    assert rn.map(lambda _: os.getpid(), [0]).table.loc[0, "value"] == os.getpid()
    with pytest.raises(ValueError, match="task_timeout"):
        Runner(mode="serial", task_timeout=0)


@pytest.mark.parametrize("value", ["5", -1.0, 0, float("nan"), -float("inf"), True, [5]])
def test_task_timeout_is_checked_where_it_is_given(value):
    with pytest.raises(ValueError, match="task_timeout must be a number of seconds > 0"):
        Runner(mode="serial", task_timeout=value)
    rn = Runner(mode="serial", progress=False)
    with pytest.raises(ValueError, match="task_timeout must be a number of seconds > 0"):
        rn.task_timeout = value
    assert rn.task_timeout is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="task_timeout forks")
def test_infinite_task_timeout_isolates_without_a_limit():
    """``inf``: no time limit, but each task in a process of its own (documented)."""
    rn = Runner(mode="serial", progress=False, task_timeout=float("inf"))
    run = rn.map(_pid_after, [0.2, 0.0])
    assert list(run.table["status"]) == ["done", "done"]
    assert os.getpid() not in set(run.table["value"])
    rn.task_timeout = np.float64(3)
    assert rn.task_timeout == 3.0 and isinstance(rn.task_timeout, float)


def _pid_after(seconds):
    import time
    time.sleep(seconds)
    return os.getpid()


def _kill_myself(_):
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


def _write_pid_and_sleep(path):
    import time
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)


def _alive(pid) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for_file(path, seconds=30.0):
    import time
    t0 = time.monotonic()
    while not (os.path.exists(path) and open(path).read().strip()):
        assert time.monotonic() - t0 < seconds, f"{path} was not written"
        time.sleep(0.05)
    return int(open(path).read())


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="task_timeout forks (Linux)")
def test_a_task_process_killed_under_a_serial_task_timeout_is_named(tmp_path):
    """The task's own process dies (by the task itself, or killed from outside): the row
    says so, with the signal, and does not speak of lost workers or runs again."""
    import signal
    import threading
    rn = Runner(mode="serial", progress=False, task_timeout=60.0)
    path = str(tmp_path / "pid")

    def kill_it():
        os.kill(_wait_for_file(path), signal.SIGTERM)

    killer = threading.Thread(target=kill_it)
    killer.start()
    outside = rn.map(_write_pid_and_sleep, [path]).table.loc[0]
    killer.join()
    itself = rn.map(_kill_myself, [0]).table.loc[0]
    for row, sig in ((outside, "signal 15 (SIGTERM)"), (itself, "signal 9 (SIGKILL)")):
        assert row["status"] == "error"
        assert f"died with {sig}" in row["error"]
        assert "killed from outside" in row["error"] and "without task_timeout" in row["error"]
        assert "worker" not in row["error"] and "run again" not in row["error"]
        assert "mode='serial'" not in row["error"]


_INTERRUPTED_RUN = """
import os, sys, time
from pyomo_odeest.runner import Runner

def task(path):
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)

run = Runner(mode="serial", progress=False, task_timeout=300).map(task, [sys.argv[1]])
print("statuses", list(run.table["status"]), run.interrupted, flush=True)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="task_timeout forks (Linux)")
def test_sigint_to_a_serial_run_ends_the_task_process_too(tmp_path):
    """``kill -INT`` sent to the process alone (a notebook's "interrupt kernel") while a
    task runs in its forked process under ``task_timeout``: the run returns interrupted
    and the task's process is gone, not left running."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    script, path = tmp_path / "run.py", str(tmp_path / "pid")
    script.write_text(_INTERRUPTED_RUN)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    # a test worker may ignore SIGINT (pytest-xdist's do), and an ignored SIGINT is
    # inherited: Python then installs no KeyboardInterrupt handler in the run
    proc = subprocess.Popen([sys.executable, str(script), path], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child = None
    try:
        child = _wait_for_file(path, 120.0)
        assert _alive(child) and child != proc.pid
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert "statuses ['cancelled'] True" in out, err
        t0 = time.monotonic()
        while _alive(child) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        assert not _alive(child), "the task's process outlived the interrupted run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the backstop forks (Linux)")
def test_multistart_stops_a_start_that_runs_for_minutes(monkeypatch):
    """24 starts of the oscillator on the continuous approach (SciPy's integrators):
    23 starts with ω in [0.5, 2] take about a second each; the start ω = 3000 makes
    every simulation stiff-oscillatory and runs for minutes (more than 200 s measured
    with max_wall_time=20, whose checks fall between long iterations).  The default
    per-start limit (10 x the first start's time, at least 5 s) stops it: the whole
    multistart ends within 3 x the time of the other starts, that start reported
    ``time_limit``, the others as without a limit.  (On CVODES that start fails at once
    on the step limit per output interval: ``test_cvodes.py``.)"""
    import time
    import pyomo_odeest.discretization.continuous._cvodes as cv
    monkeypatch.setattr(cv, "cvodes_available", lambda: False)
    prob = oscillator_problem(omega0=1.2, bounds=(0.1, 1e4))
    t0 = time.perf_counter()
    ms = multistart(prob, n=22, approach="continuous", runner=Runner(mode="serial",
                                                                     progress=False),
                    starts=[[1.2], [3000.0]], bounds={"omega": (0.5, 2.0)}, seed=1)
    total = time.perf_counter() - t0
    tab = ms.table
    assert len(tab) == 24
    slow, others = tab.iloc[1], tab.drop(index=1)
    assert slow["start_omega"] == 3000.0 and slow["status"] == "time_limit"
    assert ms.start_time_limit == pytest.approx(max(10 * tab.loc[0, "wall_s"], 5.0))
    assert (others["status"] != "time_limit").all() and others["success"].all()
    assert total < 3 * others["wall_s"].sum(), (total, others["wall_s"].sum())
    assert ms.best.x[0] == pytest.approx(1.0038, abs=1e-3)
    assert "stopped at the per-start time limit" in ms.summary()


def test_multistart_starts_are_quiet_and_their_warnings_summarized_once(osc, capfd,
                                                                        monkeypatch):
    """On a terminal the starts print no progress lines of their own and no optimizer
    log (``tee=True`` shows it); a warning raised in several starts is reported once."""
    monkeypatch.setattr(type(sys.stderr), "isatty", lambda self: True, raising=False)
    multistart(osc, n=0, starts=[[1.2], [3.0]], runner=Runner(mode="serial", progress=False),
               start_time_limit=None)
    out = capfd.readouterr()
    assert out.out == "" and out.err == "", out
    multistart(osc, n=0, starts=[[1.2]], runner=Runner(mode="serial", progress=False),
               start_time_limit=None, tee=True)
    assert "Ipopt" in capfd.readouterr().out
    # a library warning inside every start (numpy's overflow, as a model's
    # evaluation at a far start gives it) is caught in the start and reported once
    from pyomo_odeest.runner import _studies
    real = _studies.estimate_task

    def overflowing(*args, **kw):
        np.exp(np.array([1000.0]))                        # RuntimeWarning: overflow
        return real(*args, **kw)

    monkeypatch.setattr(_studies, "estimate_task", overflowing)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ms = multistart(osc, n=0, starts=[[1.2], [3.0], [0.8]],
                        runner=Runner(mode="serial", progress=False))
    texts = [f"{w.category.__name__}: {w.message}" for w in seen]
    assert not [t for t in texts if t.startswith("RuntimeWarning")], texts
    assert len([t for t in texts if "inside the starts" in t]) == 1, texts
    assert ms.caught_warnings == {"RuntimeWarning: overflow encountered in exp": 3}
    assert "3 warning(s) inside the starts: 3x RuntimeWarning: overflow" in ms.summary()


def test_multistart_stops_later_starts_at_the_first_ones_minimum():
    """``stop_at_first``: the first start converges alone; every other start stops at
    the first accepted iterate within the decrement limit of its objective (the least
    squares' ``known_minimum``), so the later starts take fewer iterations and end no
    higher than that level; the clusters still find the one minimum.  Starts that do not
    take ``known_minimum`` are refused before any start runs."""
    from pyomo_odeest.nlp import decrement_limit
    from pyomo_odeest.problem import misfit_constant
    p = lotka_volterra_problem()
    box = {k: (0.7, 1.5) for k in p.parameter_names}
    kw = dict(n=4, approach="continuous", space="linear", bounds=box, seed=0,
              starts=[np.full(4, 1.05)],
              options=dict(optimizer="least_squares", engine="scipy"))
    plain = multistart(p, **kw)
    fast = multistart(p, stop_at_first=True, **kw)
    first = fast.table.iloc[0]
    assert first["status"] == "converged"
    level = float(first["objective"]) + decrement_limit(float(first["objective"])
                                                       - misfit_constant(p))
    later = fast.table.iloc[1:]
    assert (later["objective"].astype(float) <= level * (1 + 1e-12)).all()
    assert later["iterations"].sum() < plain.table.iloc[1:]["iterations"].sum()
    stopped = [fast.run.outputs[int(t)].message for t in later["task"]]
    n_at = sum("stopped at the level of a known minimum" in m for m in stopped)
    assert n_at >= 1 and fast.known_minimum == float(first["objective"])
    assert f"{n_at} start(s) stopped at the level of the first start's minimum" in \
        fast.summary()
    assert plain.known_minimum is None and "level of the first" not in plain.summary()
    assert len(fast.clusters) >= 1 and abs(fast.clusters["objective"].iloc[0]
                                           - plain.clusters["objective"].iloc[0]) <= level - \
        float(first["objective"])
    with pytest.raises(ValueError, match="stop_at_first needs starts that take known_minimum"):
        multistart(p, n=2, approach="simultaneous", stop_at_first=True)
    with pytest.raises(ValueError, match="stop_at_first needs"):
        multistart(p, stop_at_first=True, **{**kw, "options": {}})
