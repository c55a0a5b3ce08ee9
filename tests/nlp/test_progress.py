"""Progress on long work (lines per block of Ipopt iterations, a count of finished
tasks) shown where a person watches, and wall-time limits for the solvers."""
import io
import re
import time

import numpy as np
import pyomo.environ as pyo
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.nlp import solve_with_ipopt
from pyomo_odeest.nlp._progress import IterationProgress, TaskProgress, progress_enabled
from pyomo_odeest.optimizers import WALL_TIME_STATUS, SolveClock


def _rosenbrock_chain(n=8):
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(n)
    m.x = pyo.Var(m.I, initialize=lambda m, i: -1.2 if i % 2 else 1.0)
    m.o = pyo.Objective(expr=sum(100 * (m.x[i + 1] - m.x[i] ** 2) ** 2 + (1 - m.x[i]) ** 2
                                 for i in m.I if i < n))
    return PyomoNLPEvaluator(m)


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_on_for_a_terminal_only():
    assert progress_enabled(None, _Tty()) is True
    assert progress_enabled(None, io.StringIO()) is False
    assert progress_enabled(True, io.StringIO()) is True
    assert progress_enabled(False, _Tty()) is False
    with pytest.raises(TypeError, match="progress"):
        progress_enabled("yes")


def test_ipopt_progress_lines(capsys):
    ev = _rosenbrock_chain()
    r = solve_with_ipopt(ev, options={"tol": 1e-10}, progress=5)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("ipopt")]
    assert r.status_name == "Solve_Succeeded" and r.iterations > 5
    its = [int(re.search(r"iter\s+(\d+)", ln).group(1)) for ln in lines]
    assert its[0] == 0 and all(i % 5 == 0 for i in its[:-1]) and its[-1] == r.iterations
    assert "Solve_Succeeded" in lines[-1]
    for key in ("objective", "inf_pr", "inf_du"):
        assert all(key in ln for ln in lines)
    assert re.search(r"\d+\.\d s", lines[-1])
    # not a terminal and progress not asked for: silent
    solve_with_ipopt(_rosenbrock_chain(), options={"tol": 1e-10})
    assert "ipopt" not in capsys.readouterr().err


def _slow_hessian_chain(n=40, sleep=0.05):
    """A Rosenbrock chain whose Hessian takes ``sleep`` seconds."""
    ev = _rosenbrock_chain(n)
    fast = ev.hessian

    def hessian(*a):
        time.sleep(sleep)
        return fast(*a)
    ev.hessian = hessian
    return ev


def test_ipopt_max_wall_time():
    ev = _slow_hessian_chain()
    r = solve_with_ipopt(ev, options={"tol": 1e-14}, max_wall_time=0.1)
    assert r.status_name == "Maximum_WallTime_Exceeded"
    with pytest.raises(ValueError, match="max_wall_time"):
        solve_with_ipopt(ev, max_wall_time=-1)


def test_ipopt_max_wall_time_holds_inside_an_iteration():
    """Ipopt checks max_wall_time between iterations; a line search whose objective
    evaluations take 0.3 s each (every trial step rejected: the objective is NaN past
    the start) would run its trials past the limit.  The evaluations stop at it."""
    ev = _rosenbrock_chain(4)
    fast = ev.objective
    x_start = ev.x0.copy()

    def objective(x):
        if not np.allclose(x, x_start):
            time.sleep(0.3)
            return float("nan")
        return fast(x)
    ev.objective = objective
    t0 = time.perf_counter()
    r = solve_with_ipopt(ev, options={"tol": 1e-14}, max_wall_time=0.5)
    assert time.perf_counter() - t0 < 1.5
    assert r.status_name == "Maximum_WallTime_Exceeded"
    assert "evaluations stopped" in r.message


def test_scipy_wall_time_and_progress():
    out = io.StringIO()

    def slow(x):
        time.sleep(0.02)
        return rosen(x), rosen_der(x)
    clock = SolveClock(max_wall_time=0.2, progress=True)
    clock.lines.stream = out
    sol = minimize(slow, np.full(20, -1.0), jac=True, method="L-BFGS-B", callback=clock,
                   options={"maxiter": 10000, "gtol": 1e-14, "ftol": 0})
    assert clock.exceeded and clock.status(sol.message) == WALL_TIME_STATUS
    assert not sol.success and sol.nit < 10000
    assert out.getvalue().startswith("scipy")
    # the package's own optimizers: callback(x) returning True stops
    from pyomo_odeest.optimizers import minimize_bfgs
    clock = SolveClock(max_wall_time=0.1, progress=False)
    res = minimize_bfgs(lambda x: slow(x)[0], lambda x: slow(x)[1], np.full(20, -1.0),
                        gtol=1e-14, max_iter=10000, callback=clock.stop)
    assert clock.exceeded and res.nit < 10000


def test_task_progress_lines_when_not_a_terminal():
    out = io.StringIO()
    p = TaskProgress(3, True, "compare", stream=out)     # not a terminal: lines, no bar
    for ok in (True, False, True):
        p.update(ok, "note")
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("compare: 3/3 done, 1 failed")
    line = IterationProgress("ipopt", 2, stream=out)
    for i in range(5):
        line(i, 1.0 / (i + 1))
    assert out.getvalue().count("ipopt") == 3      # iterations 0, 2, 4 (the last shown)
    line.finish("Solve_Succeeded")
    assert out.getvalue().count("ipopt") == 4      # ... and the outcome


def test_compare_and_profile_show_progress(capsys):
    import pandas as pd
    from pyomo_odeest import EstimationProblem, Parameter, compare_approaches
    t = np.linspace(0.5, 4, 8)
    P = EstimationProblem(["x"], [Parameter("k", 0.3, lb=0)], rhs=lambda x, u, t: [-u.k * x.x],
                          initial={"x": 1.0}, sigma=0.01,
                          data=pd.DataFrame({"x": np.exp(-0.7 * t)}, index=t))
    tab, res = compare_approaches(P, max_step=0.1, progress=True)
    err = capsys.readouterr().err
    assert "compare: 2/2 done" in err
    res["reduced_space"].profile(max_points=6, progress=True)
    assert "profile: 2/2 done" in capsys.readouterr().err


def test_a_solve_scope_sets_progress_and_a_deadline_for_every_solve_in_it(capsys):
    """The estimation pipeline's scope: ``progress=None`` means the scope's setting and
    every solve inside stops at its deadline, though nobody passes either."""
    from pyomo_odeest.nlp._progress import current_scope, solve_scope, time_left
    assert current_scope() is None and time_left() is None and time_left(3.0) == 3.0
    with solve_scope(progress=True, max_wall_time=0.5):
        assert progress_enabled(None, io.StringIO()) is True
        assert progress_enabled(False) is False                     # said explicitly
        assert 0 < time_left() <= 0.5 and time_left(0.1) <= 0.1
        with solve_scope(max_wall_time=10):                        # the outer deadline holds
            assert time_left() <= 0.5 and progress_enabled() is True
        assert TaskProgress(1, True, "x", stream=io.StringIO()).tty is False
        assert SolveClock().max_wall_time <= 0.5
        r = solve_with_ipopt(_slow_hessian_chain(), options={"tol": 1e-14})
    assert current_scope() is None
    assert r.status_name == "Maximum_WallTime_Exceeded"
    assert "Maximum_WallTime_Exceeded" in capsys.readouterr().err


class _StuckHessian:
    """min sum((x - (1, 2, 3))^2) s.t. x0 = x1, whose ``stuck``-th Hessian call does
    not return for ``seconds`` (a factorization that cannot be interrupted)."""
    forkable = True

    def __init__(self, stuck=None, seconds=20.0, action=None):
        self.n, self.m = 3, 1
        self.x0 = np.zeros(3)
        self.x_lb, self.x_ub = np.full(3, -10.0), np.full(3, 10.0)
        self.g_lb = self.g_ub = np.zeros(1)
        self.calls, self.stuck, self.seconds, self.action = 0, stuck, seconds, action

    def objective(self, x):
        return float(np.sum((x - np.arange(1, 4)) ** 2))

    def gradient(self, x):
        return 2 * (x - np.arange(1, 4))

    def constraints(self, x):
        return np.array([x[0] - x[1]])

    def jacobian_structure(self):
        return np.array([0, 0]), np.array([0, 1])

    def jacobian(self, x):
        return np.array([1.0, -1.0])

    def hessian_structure(self):
        return np.arange(3), np.arange(3)

    def hessian(self, x, lam, obj_factor):
        self.calls += 1
        if self.calls == self.stuck:
            if self.action is not None:
                self.action()
            time.sleep(self.seconds)
        return np.full(3, 2.0 * obj_factor)


def test_max_wall_time_holds_inside_one_step_of_compiled_code():
    """One step that ignores every deadline (here a Hessian call that sleeps 20 s;
    in practice MUMPS asking for memory again and again inside one factorization)
    is killed HARD_LIMIT_GRACE seconds after the limit, and the result is Ipopt's
    last iterate, as a stop between iterations would give it."""
    from pyomo_odeest.nlp._cyipopt_adapter import HARD_LIMIT_GRACE
    t0 = time.perf_counter()
    r = solve_with_ipopt(_StuckHessian(stuck=2), max_wall_time=1.0)
    wall = time.perf_counter() - t0
    assert wall < 1.0 + HARD_LIMIT_GRACE + 2.0
    assert r.status_name == "Maximum_WallTime_Exceeded" and r.iterations == 1
    assert "inside iteration 2" in r.message and "factorization" in r.message
    first = solve_with_ipopt(_StuckHessian(), options={"max_iter": 1})
    np.testing.assert_allclose(r.x, first.x, rtol=1e-14)
    np.testing.assert_allclose(r.mult_g, first.mult_g, rtol=1e-12)
    np.testing.assert_allclose(r.obj, first.obj, rtol=1e-14)


def test_an_isolated_solve_is_the_solve_in_this_process(capsys):
    """A solve under a time limit runs in a forked process; what it returns, its
    counts and its progress lines (printed here, whatever standard error is) are
    those of the same solve in this process."""
    here = solve_with_ipopt(_rosenbrock_chain(6), options={"tol": 1e-12}, isolate=False,
                            progress=5, max_wall_time=100)
    err_here = capsys.readouterr().err
    there = solve_with_ipopt(_rosenbrock_chain(6), options={"tol": 1e-12}, progress=5,
                             max_wall_time=100)
    err_there = capsys.readouterr().err
    assert there.status_name == here.status_name == "Solve_Succeeded"
    np.testing.assert_array_equal(there.x, here.x)
    assert there.iterations == here.iterations and there.counts == here.counts
    strip = lambda text: [re.sub(r"\s+\d+\.\d s.*$", "", ln) for ln in text.splitlines()]  # noqa: E731
    assert strip(err_there) == strip(err_here) and len(strip(err_here)) >= 3


def test_an_isolated_solve_reraises_and_names_a_dead_process():
    def boom(x):
        raise RuntimeError("a bug in the user's callback")
    ev = _StuckHessian()
    ev.gradient = boom
    with pytest.raises(RuntimeError, match="a bug in the user's callback"):
        solve_with_ipopt(ev, max_wall_time=30)
    import os
    import signal
    ev = _StuckHessian(stuck=2, action=lambda: os.kill(os.getpid(), signal.SIGKILL))
    r = solve_with_ipopt(ev, max_wall_time=30)
    assert r.status_name == "Internal_Error" and "SIGKILL" in r.message
    assert "out-of-memory" in r.message and r.iterations == 1
