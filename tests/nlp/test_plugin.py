"""``odeest_ipopt`` follows Pyomo's solver and results contract, and Pyomo's
own estimation tools (parmest, pyomo.contrib.doe) run on it end to end."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.opt import SolutionStatus, SolverStatus, TerminationCondition

import pyomo_odeest
from pyomo_odeest.nlp._cyipopt_adapter import ipopt_version

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def small():
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(3)
    m.x = pyo.Var(m.I, initialize=3.0)
    m.c = pyo.Constraint(expr=sum(m.x[i] for i in m.I) >= 6)
    m.o = pyo.Objective(expr=sum((m.x[i] - 0.5 * i) ** 2 for i in m.I))
    return m


def test_load_solutions_false_then_load_from():
    m = small()
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    m.ipopt_zL_out = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    res = pyo.SolverFactory("odeest_ipopt").solve(m, load_solutions=False,
                                                 options={"tol": 1e-10})
    # nothing loaded
    assert [m.x[i].value for i in m.I] == [3.0, 3.0, 3.0] and len(m.dual) == 0
    assert len(res.solution) == 1
    assert res.solution(0).status == SolutionStatus.optimal
    m.solutions.load_from(res)
    # KKT by hand: x_i = i/2 + t, sum = 6 -> t = 1; dual = -2t (lower bound active)
    for i in m.I:
        assert m.x[i].value == pytest.approx(0.5 * i + 1.0, abs=1e-7)
    assert m.dual[m.c] == pytest.approx(-2.0, abs=1e-6)
    assert m.x[1] in m.ipopt_zL_out


def test_load_solutions_true_leaves_results_solution_empty_as_pyomo():
    m = small()
    res = pyo.SolverFactory("odeest_ipopt").solve(m)
    assert len(res.solution) == 0
    assert m.x[3].value == pytest.approx(2.5, abs=1e-6)


def test_results_carry_iterations_time_and_ipopt_status():
    m = small()
    opt = pyo.SolverFactory("odeest_ipopt")
    res = opt.solve(m, symbolic_solver_labels=True, keepfiles=False, warmstart=True,
                    report_timing=False)
    assert res.solver.status == SolverStatus.ok
    assert res.solver.termination_condition == TerminationCondition.optimal
    assert res.solver.iterations == opt.last_info["iterations"] > 0
    assert res.solver.ipopt_status == "Solve_Succeeded" and res.solver.return_code == 0
    assert "terminated successfully" in res.solver.message
    assert res.solver.wallclock_time > 0
    res = opt.solve(small(), options={"max_iter": 1})
    assert res.solver.termination_condition == TerminationCondition.maxIterations
    assert res.solver.iterations == 1


def test_solver_api():
    opt = pyo.SolverFactory("odeest_ipopt")
    assert opt.available() and opt.license_is_valid() and opt.warm_start_capable()
    assert opt.version() == ipopt_version() and opt.version()[0] == 3


def test_keywords_accepted_or_refused_clearly(tmp_path):
    opt = pyo.SolverFactory("odeest_ipopt")
    log = tmp_path / "ipopt.log"
    res = opt.solve(small(), logfile=str(log), timelimit=100, options_string="max_iter=2")
    assert res.solver.iterations == 2 and "iter" in log.read_text()
    with pytest.raises(ValueError, match="unknown keyword 'foo'; accepted:"):
        opt.solve(small(), foo=1)
    with pytest.raises(ValueError, match="no solution file"):
        opt.solve(small(), solnfile="x.sol")
    with pytest.raises(ValueError, match="suffix 'rc' is not available"):
        opt.solve(small(), suffixes=["rc"])
    # the options of tools written for the executable are made safe
    res = opt.solve(small(), options={"linear_solver": "ma57", "halt_on_ampl_error": "yes"})
    assert res.solver.termination_condition == TerminationCondition.optimal


def test_use_as_ipopt_is_explicit_and_reversible():
    before = pyo.SolverFactory._cls.get("ipopt")
    with pyomo_odeest.use_as_ipopt():
        opt = pyo.SolverFactory("ipopt")
        assert isinstance(opt, pyomo_odeest.OdeestIpoptSolver)
        m = small()
        opt.options["tol"] = 1e-10
        opt.solve(m)
        assert m.x[1].value == pytest.approx(1.5, abs=1e-7)
    assert pyo.SolverFactory._cls.get("ipopt") is before


def _example(name):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_parmest_rooney_biegler():
    pytest.importorskip("pyomo.contrib.parmest.parmest")
    r = _example("parmest_rooney_biegler").run(bootstrap_samples=3)
    th = r["theta"]
    # parmest's documented estimate
    assert th["asymptote"] == pytest.approx(19.1426, abs=5e-4)
    assert th["rate_constant"] == pytest.approx(0.5311, abs=5e-4)
    # covariance by finite differences = Gauss-Newton (J^T J)^-1 with sigma = 1
    A, B = th["asymptote"], th["rate_constant"]
    t = np.array([1, 2, 3, 4, 5, 7.0])
    J = np.column_stack([1 - np.exp(-B * t), A * t * np.exp(-B * t)])
    np.testing.assert_allclose(r["cov"].values, np.linalg.inv(J.T @ J), rtol=2e-3)
    boot = r["bootstrap"]
    assert boot.shape == (3, 2) and np.all(np.isfinite(boot.values))
    # objective on the grid and the likelihood-ratio test
    obj_at = r["obj_at_theta"]
    assert (obj_at["obj"] >= r["obj"] - 1e-9).all()
    assert r["lr"][0.95].sum() >= r["lr"][0.8].sum() >= 1


def test_doe_fim_matches_gauss_newton():
    pytest.importorskip("pyomo.contrib.doe")
    r = _example("doe_lotka_volterra").run()
    assert r["rel_err"] < 1e-3
    assert np.all(np.diag(r["fim_doe"]) > 1.0)


def test_mumps_defaults_apply_unless_the_options_name_them(monkeypatch):
    """solve_with_ipopt gives Ipopt the measured MUMPS defaults; options naming a MUMPS
    setting (or another linear solver) win; the estimate does not depend on the ordering."""
    from pyomo_odeest import estimate_simultaneous
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.nlp import MUMPS_DEFAULTS, _cyipopt_adapter as ca
    seen = []
    real = ca._add_options

    def spy(nlp, opts):
        seen.append(dict(opts))
        return real(nlp, opts)
    monkeypatch.setattr(ca, "_add_options", spy)
    prob = lotka_volterra_problem()
    a = estimate_simultaneous(prob, "adams_pc", 3, steps_per_interval=2)
    assert all(seen[-1][k] == v for k, v in MUMPS_DEFAULTS.items())
    other = 0 if MUMPS_DEFAULTS["mumps_pivot_order"] != 0 else 2
    b = estimate_simultaneous(prob, "adams_pc", 3, steps_per_interval=2,
                              options={"mumps_pivot_order": other})
    assert seen[-1]["mumps_pivot_order"] == other
    np.testing.assert_allclose(a.x, b.x, rtol=1e-8)


def test_a_callback_naming_iterate_sees_the_current_point_in_the_model():
    """``iterate()`` loads Ipopt's current point into the model's variables; the
    values match the iterates Ipopt reports (its objective at that point)."""
    m = small()
    seen = []

    def watch(iter_count, obj_value, inf_pr, inf_du, mu, iterate):
        x = iterate()
        seen.append((obj_value, pyo.value(m.o), [m.x[i].value for i in m.I], list(x)))
        return True

    pyo.SolverFactory("odeest_ipopt").solve(m, intermediate_callback=watch)
    assert len(seen) > 2
    for obj, obj_model, vals, x in seen:
        assert obj_model == pytest.approx(obj, rel=1e-12)
        assert vals == pytest.approx(x, rel=0, abs=0)
    assert seen[0][2] != seen[-1][2]           # the point moves


class _Stopper:
    """A fork-safe callback that stops at iteration 2 and records it in ``state``."""

    forkable = True

    def __init__(self):
        self.state = {}
        self.pid = None

    def __call__(self, iter_count, obj_value, inf_pr, inf_du, mu, iterate):
        import os
        iterate()
        if iter_count == 2:
            self.state = dict(iteration=iter_count, pid=os.getpid())
            return False
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="isolated solves fork")
def test_a_forkable_callback_runs_in_the_isolated_solve_and_its_state_comes_back():
    import os
    m = small()
    cb = _Stopper()
    opt = pyo.SolverFactory("odeest_ipopt")
    res = opt.solve(m, intermediate_callback=cb, timelimit=60.0)
    assert res.solver.termination_condition == TerminationCondition.userInterrupt
    assert cb.state["iteration"] == 2
    assert cb.state["pid"] != os.getpid()      # it ran in the isolated process
    # a callback that does not say it is fork-safe runs in this process
    seen = []
    opt.solve(small(), timelimit=60.0,
              intermediate_callback=lambda **kw: seen.append(os.getpid()) or True)
    assert set(seen) == {os.getpid()}
