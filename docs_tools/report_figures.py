"""Draw the report figures of docs/uncertainty.md into docs/img/.

``python docs_tools/report_figures.py`` (about a minute): the fed-batch problem
with three experiments and measured feeds (:func:`pyomo_odeest.models.fed_batch_problem`,
σ = 0.01 given) fitted by the default approach — ``result.plot()`` with bands,
the bands of the three experiments, the profiles of k1 and k2 — and the
multistart waterfall of a problem with two equivalent minima
(y = exp(−k1 t) + exp(−k2 t): (k1, k2) and (k2, k1) fit the data identically: one minimum, two parameter
sets) and the waterfall of 32 starts on the harmonic oscillator, whose misfit
has spurious local minima in ω.
Prints one summary line.
"""
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pyomo_odeest import EstimationProblem, Parameter, estimate  # noqa: E402
from pyomo_odeest.models import fed_batch_problem, oscillator_problem  # noqa: E402
from pyomo_odeest.runner import multistart  # noqa: E402

IMG = ROOT / "docs" / "img"


def symmetric_problem():
    t = np.linspace(0.2, 5, 15)
    y = np.exp(-0.3 * t) + np.exp(-1.2 * t) + 0.01 * np.random.default_rng(1).standard_normal(15)
    return EstimationProblem(["x1", "x2"], [Parameter("k1", 0.5, lb=0.05, ub=5),
                                            Parameter("k2", 1.0, lb=0.05, ub=5)],
                             rhs=lambda x, u, t: [-u.k1 * x.x1, -u.k2 * x.x2],
                             initial={"x1": 1.0, "x2": 1.0},
                             observe=lambda x, u, t: {"y": x.x1 + x.x2},
                             data=pd.DataFrame({"y": y}, index=pd.Index(t, name="time")),
                             sigma=0.01, name="two_exponentials")


def main():
    t0 = time.perf_counter()
    P = fed_batch_problem(sigma=0.01)
    res = estimate(P)
    res.plot(bands=True, path=IMG / "report_fit.png")
    res.prediction_bands().plot(data=P, path=IMG / "report_bands_experiments.png")
    pr = res.profile()
    pr.plot(path=IMG / "report_profiles.png")
    ms = multistart(symmetric_problem(), n=16, approach="reduced_space", space="log",
                    options=dict(max_step=0.05), seed=0)
    osc = multistart(oscillator_problem(), n=32, approach="reduced_space", space="log",
                     bounds={"omega": (0.2, 5.0)}, options=dict(max_step=0.1), seed=0)
    osc.plot(path=IMG / "report_waterfall.png")
    print(osc.summary())
    print(res.summary())
    print(res.confidence_intervals())
    print(pr.intervals)
    print(ms.summary())
    print(f"report_figures: success={res.success} k1={res.x[0]:.4f} k2={res.x[1]:.4f} "
          f"profile_points={sum(len(c) for c in pr.curves.values())} "
          f"symmetric_minima={len(ms.clusters)} equivalent={ms.equivalent} "
          f"oscillator_minima={len(osc.clusters)} oscillator_hits={osc.hits} "
          f"seconds={time.perf_counter() - t0:.1f}")


if __name__ == "__main__":
    main()
