"""An exception raised in any callback stops Ipopt and reaches the caller.

For every callback (objective, gradient, constraints, Jacobian, Hessian,
intermediate) and for ``RuntimeError``, ``MemoryError`` and
``KeyboardInterrupt``: the exception is re-raised by the solve within a
bounded number of further callbacks and a bounded time, and nothing is loaded
into the model.  A real SIGINT during a long solve ends it within about a
second.  The same holds for the reduced-space, multiple-shooting and
continuous approaches, which drive cyipopt through the same adapter.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pyomo.environ as pyo
import pytest

import pyomo_odeest  # noqa: F401  (registers 'odeest_ipopt')
from pyomo_odeest import PyomoNLPEvaluator, solve_with_ipopt

CALLBACKS = ["objective", "gradient", "constraints", "jacobian", "hessian", "intermediate"]
ERRORS = [RuntimeError, MemoryError, KeyboardInterrupt]


def model(n=6):
    """A constrained Rosenbrock chain that needs a few dozen iterations."""
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(n)
    m.x = pyo.Var(m.I, initialize=lambda m, i: -1.2 if i % 2 else 1.0)
    m.o = pyo.Objective(expr=sum(100 * (m.x[i + 1] - m.x[i] ** 2) ** 2 + (1 - m.x[i]) ** 2
                                 for i in m.I if i < n))
    m.c = pyo.Constraint(expr=sum(m.x[i] ** 2 for i in m.I) <= 10 * n)
    return m


class Faulty:
    """Wraps an evaluator; raises ``exc`` in ``where`` at its ``at``-th call and
    counts the calls made after that."""

    def __init__(self, ev, where, exc, at=3):
        self.ev, self.where, self.exc, self.at = ev, where, exc, at
        self.calls = 0
        self.after = 0
        for k in ("n", "m", "x0", "x_lb", "x_ub", "g_lb", "g_ub"):
            setattr(self, k, getattr(ev, k))

    def _wrap(self, name, *args):
        if self.calls >= self.at:
            self.after += 1
        if name == self.where:
            self.calls += 1
            if self.calls == self.at:
                raise self.exc(f"injected into {name}")
        return True if name == "intermediate" else getattr(self.ev, name)(*args)

    def objective(self, x):
        return self._wrap("objective", x)

    def gradient(self, x):
        return self._wrap("gradient", x)

    def constraints(self, x):
        return self._wrap("constraints", x)

    def jacobian(self, x):
        return self._wrap("jacobian", x)

    def hessian(self, x, lam, obj_factor=1.0):
        return self._wrap("hessian", x, lam, obj_factor)

    def jacobian_structure(self):
        return self.ev.jacobian_structure()

    def hessian_structure(self):
        return self.ev.hessian_structure()

    def intermediate(self, **kw):
        return self._wrap("intermediate")


@pytest.mark.parametrize("exc", ERRORS, ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", CALLBACKS)
def test_exception_in_each_callback_is_reraised(where, exc):
    ev = PyomoNLPEvaluator(model())
    ref = solve_with_ipopt(ev, options={"tol": 1e-10})
    assert ref.iterations > 10                     # the fault comes early in the solve
    f = Faulty(ev, where, exc)
    t = time.perf_counter()
    with pytest.raises(exc, match=f"injected into {where}"):
        solve_with_ipopt(f, options={"tol": 1e-10},
                         intermediate=f.intermediate if where == "intermediate" else None)
    assert time.perf_counter() - t < 5.0
    assert f.calls == f.at                         # raised once; never evaluated again
    # callbacks after the fault fail at once without reaching the evaluator
    assert f.after == 0


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt], ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["hessian", "intermediate"])
def test_pyomo_solve_raises_and_loads_nothing(where, exc, monkeypatch):
    m = model()
    start = {i: m.x[i].value for i in m.I}
    calls = []

    def boom(*a, **k):
        calls.append(1)
        if len(calls) == 4:
            raise exc("stop here")
        return True if where == "intermediate" else orig(*a, **k)

    orig = PyomoNLPEvaluator.hessian
    if where == "hessian":
        monkeypatch.setattr(PyomoNLPEvaluator, "hessian", lambda self, *a: boom(self, *a))
        cb = None
    else:
        cb = boom
    opt = pyo.SolverFactory("odeest_ipopt")
    with pytest.raises(exc, match="stop here"):
        opt.solve(m, intermediate_callback=cb)
    assert {i: m.x[i].value for i in m.I} == start


class Slow:
    """An evaluator whose callbacks take 20 ms (Python time, so signals land in them)."""

    def __init__(self, ev):
        self.ev = ev
        for k in ("n", "m", "x0", "x_lb", "x_ub", "g_lb", "g_ub"):
            setattr(self, k, getattr(ev, k))

    def __getattr__(self, name):
        fn = getattr(self.ev, name)

        def slow(*a):
            time.sleep(0.02)
            return fn(*a)
        return slow


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler for the test (a process started in the background
    by a non-interactive shell inherits SIGINT ignored, and Python keeps it so)."""
    prev = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, prev)


def test_sigint_ends_a_solve_within_a_second(python_sigint_handler):
    ev = Slow(PyomoNLPEvaluator(model(20)))
    sent = []

    def interrupt():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, interrupt)
    t = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            solve_with_ipopt(ev, options={"tol": 1e-30, "max_iter": 5000})
    finally:
        timer.cancel()
    done = time.perf_counter()
    assert sent and done - sent[0] < 1.0, done - sent[0]
    assert done - t < 3.0
    # the process' own SIGINT handler is back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------------------
# the approaches that drive cyipopt
# ---------------------------------------------------------------------------
def _lv():
    from pyomo_odeest.models import lotka_volterra_problem
    return lotka_volterra_problem(p0=[0.8, 0.8, 0.8, 0.8])


def _break(monkeypatch, cls, method, exc, at=3):
    orig = getattr(cls, method)
    calls = []

    def faulty(self, *a, **k):
        calls.append(1)
        if len(calls) == at:
            raise exc(f"injected into {cls.__name__}.{method}")
        return orig(self, *a, **k)

    monkeypatch.setattr(cls, method, faulty)
    return calls


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt], ids=lambda e: e.__name__)
@pytest.mark.parametrize("approach", ["reduced", "shooting", "continuous"])
def test_approaches_reraise(approach, exc, monkeypatch):
    prob = _lv()
    if approach == "reduced":
        from pyomo_odeest import estimate_reduced
        from pyomo_odeest.approaches import ReducedSpaceNLP
        calls = _break(monkeypatch, ReducedSpaceNLP, "hessian", exc)
        run = lambda: estimate_reduced(prob, "adams_pc", qmax=2, steps_per_interval=2,  # noqa
                                       hessian="gauss_newton")
    elif approach == "shooting":
        from pyomo_odeest import estimate_multiple_shooting
        from pyomo_odeest.approaches import MultipleShootingNLP
        calls = _break(monkeypatch, MultipleShootingNLP, "jacobian", exc)
        run = lambda: estimate_multiple_shooting(prob, "adams_pc", qmax=2,  # noqa: E731
                                                 steps_per_interval=2)
    else:
        from pyomo_odeest import estimate_continuous
        from pyomo_odeest.approaches._continuous import _ScaledObjective
        calls = _break(monkeypatch, _ScaledObjective, "gradient", exc)
        run = lambda: estimate_continuous(prob, rtol=1e-6, atol=1e-8)  # noqa: E731
    t = time.perf_counter()
    with pytest.raises(exc, match="injected into"):
        run()
    assert time.perf_counter() - t < 30
    assert len(calls) == 3


def test_int_option_where_ipopt_takes_a_number():
    m = model()
    res = pyo.SolverFactory("odeest_ipopt").solve(
        m, options={"bound_relax_factor": 0, "tol": 1, "max_iter": np.int64(500),
                    "acceptable_tol": 1})
    assert res.solver.termination_condition in (pyo.TerminationCondition.optimal,
                                                pyo.TerminationCondition.locallyOptimal)
    with pytest.raises(ValueError, match="no_such_option"):
        pyo.SolverFactory("odeest_ipopt").solve(model(), options={"no_such_option": 1})
    with pytest.raises(ValueError, match="max_iter"):
        pyo.SolverFactory("odeest_ipopt").solve(model(), options={"max_iter": 2.5})


class _Linear:
    """f(x) = g·x on bounds only (no constraints)."""

    def __init__(self, g, x0):
        self.g, self.x0 = np.asarray(g, float), np.asarray(x0, float)
        self.n, self.m = self.g.size, 0
        self.x_lb, self.x_ub = np.full(self.n, -np.inf), np.full(self.n, np.inf)

    def gradient(self, x):
        return self.g


def test_first_quasi_newton_step_stays_within_the_start_magnitudes():
    """σ₀ such that the first step -obj_factor·∇f/σ₀ (in Ipopt's scaled variables) moves
    no variable by more than its start magnitude (1 at a start of 0)."""
    from pyomo_odeest.nlp._cyipopt_adapter import first_quasi_newton_scale
    ev = _Linear([1000.0, 1.0], [0.5, 0.0])
    # Ipopt's gradient-based scaling: factor 100/1000; steps 0.1·[1000, 1]/σ₀ ≤ [0.5, 1]
    assert first_quasi_newton_scale(ev, ev.x0) == pytest.approx(200.0)
    assert first_quasi_newton_scale(ev, ev.x0, options={"nlp_scaling_max_gradient": 10}) == \
        pytest.approx(20.0)
    assert first_quasi_newton_scale(ev, ev.x0, options={"nlp_scaling_method": "none"}) == \
        pytest.approx(2000.0)
    # user scaling: x_s = [2, 1]·x, f_s = 0.05 f: ∇_s f_s = 0.05·[500, 1]; reach [1, 1]
    assert first_quasi_newton_scale(ev, ev.x0, [2.0, 1.0], 0.05) == pytest.approx(25.0)
    assert first_quasi_newton_scale(_Linear([0.1, 0.2], [1.0, 3.0]), [1.0, 3.0]) is None


def test_limited_memory_solve_from_a_far_start_of_a_bound_constrained_model():
    """The misfit of x' = -k x (σ = 0.05, exact data at k = 0.7) in closed form, from
    k = 0.5, k >= 0: with Ipopt's σ₀ = 1 the first step goes far into the flat region
    (k > 100) and the solve stalls there; with the start-magnitude rule it converges."""
    t = np.linspace(0.5, 3.0, 6)
    m = pyo.ConcreteModel()
    m.k = pyo.Var(initialize=0.5, bounds=(0, None))
    m.o = pyo.Objective(expr=sum((2 * pyo.exp(-m.k * tj) - 2 * np.exp(-0.7 * tj)) ** 2
                                 for tj in t) / 0.05 ** 2)
    ev = PyomoNLPEvaluator(m)
    opts = {"hessian_approximation": "limited-memory", "max_iter": 100}
    r = solve_with_ipopt(ev, options=opts)
    assert r.status_name == "Solve_Succeeded"
    assert float(r.x[0]) == pytest.approx(0.7, abs=1e-5)
    old = solve_with_ipopt(ev, options=dict(opts, limited_memory_init_val=1.0))
    assert abs(float(old.x[0]) - 0.7) > 1.0              # Ipopt's default first step
