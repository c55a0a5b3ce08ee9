"""The runner on a LocalCluster with 2 worker processes: multistart, failures,
a killed worker, an interrupted run, seeds identical to serial mode."""
import os
import signal
import time

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")

from pyomo_odeest import estimate                                    # noqa: E402
from pyomo_odeest.models import oscillator_problem                   # noqa: E402
from pyomo_odeest.runner import (RunInterruptedWarning, Runner, multistart,   # noqa: E402
                                 task_index)

pytestmark = pytest.mark.extras

STARTS = dict(n=2, starts=[[3.0]], bounds={"omega": (0.5, 1.6)}, seed=7)


@pytest.fixture(scope="module")
def runner():
    with Runner(n_workers=2, progress=False) as rn:
        yield rn


@pytest.fixture(scope="module")
def osc():
    return oscillator_problem()


@pytest.fixture(scope="module")
def ms_dask(runner, osc):
    return multistart(osc, runner=runner, **STARTS)


def test_cluster_has_two_worker_processes(runner):
    pids = runner.client.run(os.getpid)
    assert len(pids) == 2 and len(set(pids.values())) == 2 and os.getpid() not in pids.values()


def test_multistart_finds_the_optimum_a_bad_start_misses(ms_dask, osc):
    tab = ms_dask.table
    single = tab.iloc[0]                      # the user's start omega0 = 3
    assert single["start_omega"] == 3.0 and single["success"]
    assert single["p_omega"] == pytest.approx(2.972, abs=1e-3)      # a spurious minimum
    assert "inconsistent with the noise level" in single["warnings"]
    assert int(single["cluster"]) > 0
    assert ms_dask.best.x[0] == pytest.approx(1.0038, abs=1e-3)
    assert ms_dask.best.objective < single["objective"] / 100 and not ms_dask.best.warnings
    assert ms_dask.hits == int((tab["cluster"] == 0).sum()) >= 1
    assert tab["worker"].str.startswith("tcp://").all()
    assert {"start_omega", "p_omega", "objective", "status", "iterations", "wall_s", "approach",
            "worker", "seed"} <= set(tab.columns)


def test_same_seeds_give_identical_tables_in_serial_and_distributed(ms_dask, osc):
    serial = multistart(osc, runner=Runner(mode="serial", progress=False), **STARTS)
    drop = ["wall_s", "worker"]
    pd.testing.assert_frame_equal(serial.table.drop(columns=drop),
                                  ms_dask.table.drop(columns=drop), check_exact=True)
    pd.testing.assert_frame_equal(serial.clusters, ms_dask.clusters, check_exact=True)


def test_a_raising_task_is_reported_and_the_others_finish(runner, osc):
    run = runner.map(estimate, [osc, "not a problem", osc], approach="simultaneous",
                     u0=[1.2])
    assert list(run.table["status"] == "error") == [True if i == 1 else False for i in range(3)]
    assert "ProblemError" in run.table.loc[1, "error"] and "Traceback" in run.table.loc[1, "traceback"]
    assert run.table.loc[[0, 2], "success"].all()
    assert run.table.loc[0, "objective"] == run.table.loc[2, "objective"]


def test_profile_likelihood_segments_run_on_the_cluster(runner, osc):
    from pyomo_odeest import profile_likelihood
    fit = estimate(osc, "reduced_space", u0=[1.2])
    kw = dict(approach="reduced_space", max_points=4)
    serial = profile_likelihood(fit, **kw)
    dist = profile_likelihood(fit, runner=runner, **kw)
    pd.testing.assert_frame_equal(serial.intervals, dist.intervals, check_exact=True)


def test_address_and_client_reach_the_same_cluster(runner):
    with Runner(address=runner.client.scheduler.address, progress=False) as by_address:
        assert by_address.n_workers == 2
        assert list(by_address.map(abs, [-1, -2]).table["value"]) == [1, 2]
    with Runner(client=runner.client, progress=False) as by_client:
        assert by_client.client is runner.client
    assert runner.client.status == "running"          # a given client is not closed
    with pytest.raises(ValueError, match="either address= or client="):
        Runner(address="tcp://x:1", client=runner.client)


def test_interrupted_run_keeps_finished_rows(runner):
    seen = []

    def stop_after_two(row):
        seen.append(row["task"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.warns(RunInterruptedWarning):
        run = runner.map(time.sleep, [0.2, 0.2] + [30.0] * 4, on_row=stop_after_two)
    tab = run.table.set_index("task")
    assert run.interrupted and sorted(seen) == [0, 1]
    assert (tab.loc[[0, 1], "status"] == "done").all()
    assert (tab.loc[[2, 3, 4, 5], "status"] == "cancelled").all()


def _sleep_then(seconds):
    time.sleep(seconds)
    return seconds


def test_task_timeout_kills_a_task_on_the_cluster(runner):
    """task_timeout on the cluster: each task in a process forked by its worker, killed
    at the limit; the worker lives on and the other tasks finish."""
    runner.task_timeout = 2.0
    try:
        t0 = time.perf_counter()
        run = runner.map(_sleep_then, [0.1, 120.0, 0.2])
    finally:
        runner.task_timeout = None
    assert time.perf_counter() - t0 < 60.0
    assert list(run.table["status"]) == ["done", "time_limit", "done"]
    assert "task_timeout after 2 s" in run.table.loc[1, "error"]
    assert len(runner.client.run(os.getpid)) == 2


def test_killed_worker_tasks_are_retried_elsewhere(runner):
    """(Last test of the module: it kills one of the shared cluster's workers.)"""
    client = runner.client
    pids = client.run(os.getpid)
    state = {}

    def kill_the_other_worker(row):
        if state:
            return
        victim = next(a for a in pids if a != row["worker"])
        state["victim"] = victim
        state["running"] = [task_index(k) for k in client.processing()[victim]]
        os.kill(pids[victim], signal.SIGKILL)

    run = runner.map(time.sleep, [0.3] + [1.0] * 5, on_row=kill_the_other_worker)
    tab = run.table.set_index("task")
    assert run.complete and (tab["status"] == "done").all() and len(tab) == 6
    assert state["running"], "the killed worker had no task"
    for i in state["running"]:
        assert tab.loc[i, "worker"] != state["victim"]         # finished elsewhere
