"""Helpers shared by the tests (importable as ``helpers``: ``tests/`` is on
pytest's ``pythonpath``)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pyomo.environ as pyo

import pyomo_odeest as po

#: The repository's root (examples/, docs/, benchmarks/ are below it).
ROOT = Path(__file__).resolve().parents[1]
#: Data shipped for the tests.
DATA = ROOT / "tests" / "data"


def rel(a, b):
    """Largest absolute difference relative to the largest entry of ``b``."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


def rel_norm(a, b):
    """Euclidean norm of the difference relative to the norm of ``b``."""
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def nonautonomous_problem():
    """Non-autonomous, parameter-dependent initial state, observation g nonlinear in x and u."""
    t = np.linspace(0.4, 2.0, 5)
    data = pd.DataFrame({"z": np.sin(t) + 1.0, "x": np.exp(-t)}, index=t)
    return po.EstimationProblem(
        states=["x", "y"],
        parameters=[po.Parameter("a", 0.8), po.Parameter("b", 1.2), po.Parameter("c", 0.3)],
        rhs=lambda x, u, t: [-u.a * x.x + pyo.sin(u.b * t) * x.y,
                             -x.x * x.y / (1 + x.x**2) + u.c * pyo.exp(-t)],
        initial={"x": lambda u: 1.0 + 0.5 * u.c, "y": 0.5},
        observe=lambda x, u, t: {"z": x.x * x.y + u.c * x.y**2, "x": x.x},
        data=data)


def likelihood_problem(gaussian=True, **extra):
    r"""Two states, time-dependent rhs, x0 = l(u), observation depending on u, one value missing.

    x' = -a x + b x y + 0.1 sin(c t),  y' = c (1 - y) - a b x y,
    x(0) = x0,  y(0) = b x0²,  z1 = x,  z2 = x + c y.

    Every second-derivative term of the Hessian is nonzero: f_xx, f_xu, f_uu
    (a·b, c·c), l_uu, φ_xx, φ_xu, φ_uu.
    """
    t = np.array([0.0, 0.5, 1.0, 2.0, 3.0, 4.5])
    data = pd.DataFrame({"z1": [0.8, 0.62, 0.55, 0.47, np.nan, 0.35],
                         "z2": [1.2, 1.01, 0.98, 0.93, 0.9, 0.88]}, index=t)
    loss = po.GaussianNLL([[0.04, 0.01], [0.01, 0.09]]) if gaussian else None
    return po.EstimationProblem(
        states=["x", "y"],
        parameters=[po.Parameter("a", 0.7), po.Parameter("b", 0.4), po.Parameter("c", 1.3),
                    po.Parameter("x0", 0.9)],
        rhs=lambda x, u, t: [-u.a * x.x + u.b * x.x * x.y + 0.1 * pyo.sin(u.c * t),
                             u.c * (1 - x.y) - u.a * u.b * x.x * x.y],
        initial={"x": "x0", "y": lambda u: u.b * u.x0**2},
        observe=lambda x, u, t: {"z1": x.x, "z2": x.x + u.c * x.y},
        data=data, loss=loss, **extra)


#: A point near the optimum of :func:`likelihood_problem`.
U_NL = np.array([0.9, 0.55, 1.1, 0.75])


AB_TIMES = np.linspace(0.5, 4.0, 8)


def ab_data(k1, k2, A0, B0, rng, times=AB_TIMES):
    from scipy.integrate import solve_ivp
    sol = solve_ivp(lambda t, x: [-k1 * x[0], k1 * x[0] - k2 * x[1]], (0, times[-1]), [A0, B0],
                    t_eval=times, rtol=1e-10, atol=1e-12)
    X = sol.y.T + 0.01 * rng.standard_normal((len(times), 2))
    return pd.DataFrame(X, index=times, columns=["A", "B"])


def ab_rhs(x, u, t):
    return [-u.k1 * x.A, u.k1 * x.A - u.k2 * x.B]


def three_experiments_problem(same_horizon=True):
    """A -> B in three experiments with a local A0 (one per experiment), noisy data."""
    rng = np.random.default_rng(3)
    t3 = AB_TIMES if same_horizon else np.linspace(0.4, 5.0, 6)
    exps = [po.Experiment("e1", ab_data(0.7, 0.3, 1.0, 0.0, rng)),
            po.Experiment("e2", ab_data(0.7, 0.3, 2.0, 0.0, rng), parameters={"A0": 1.5}),
            po.Experiment("e3", ab_data(0.7, 0.3, 0.5, 0.4, rng, t3), initial={"B": 0.4})]
    return po.EstimationProblem(
        states=["A", "B"],
        parameters=[po.Parameter("k1", 0.5, lb=0), po.Parameter("k2", 0.5, lb=0),
                    po.Parameter("A0", 1.0, lb=0, local=True)],
        rhs=ab_rhs, initial={"A": "A0", "B": 0.0}, data=None, experiments=exps)


def three_experiments_by_hand(problem):
    """The same three experiments as ONE single-experiment problem with 6 states."""
    names = problem.experiment_names
    states = [f"{s}_{e}" for e in names for s in ("A", "B")]
    data = pd.concat([sp.data.add_suffix(f"_{e}") for e, sp in
                      zip(names, problem.experiment_problems)], axis=1)
    initial = {}
    for e, sp in zip(names, problem.experiment_problems):
        initial[f"A_{e}"] = f"A0_{e}"
        initial[f"B_{e}"] = float(sp.l_sym[1])

    def rhs(x, u, t):
        out = []
        for e in names:
            out += [-u.k1 * x[f"A_{e}"], u.k1 * x[f"A_{e}"] - u.k2 * x[f"B_{e}"]]
        return out
    params = [po.Parameter(p.name, p.value, p.lb, p.ub) for p in problem.parameters]
    return po.EstimationProblem(states, params, rhs, initial, data)


def benchmark_module(name):
    """``benchmarks/<name>.py`` loaded as a module (the benchmarks are scripts, not a
    package)."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
