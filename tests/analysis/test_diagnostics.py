"""The post-solve checks' warnings (``pyomo_odeest.analysis._diagnostics``) that the
other test modules do not cover: a converged result worse than its start."""
import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest import EstimationProblem, Parameter
from pyomo_odeest.analysis._diagnostics import start_warning


def _decay():
    t = np.linspace(0.5, 3.0, 6)
    return EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.0)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0},
                             data=pd.DataFrame({"x": 2 * np.exp(-0.7 * t)}, index=t), sigma=0.05)


@pytest.mark.parametrize("approach", ["simultaneous", "reduced_space", "continuous"])
def test_the_start_objective_is_on_the_result_scale(approach):
    """The objective at the start is recorded on the scale of ``result.objective``:
    started at the optimum, the two agree; from k = 0.5 the start's is the larger and
    nothing is flagged."""
    far = po.estimate(_decay(), approach)
    assert far.success and far.extra["objective_start"] > 100 * far.objective + 1.0
    at = po.estimate(_decay(), approach, u0=far.estimates)
    assert at.extra["objective_start"] == pytest.approx(far.objective, rel=1e-6, abs=1e-14)
    assert not start_warning(far) and not any(w.startswith("worse than") for w in far.warnings)


def test_a_converged_result_worse_than_its_start_is_flagged():
    res = po.estimate(_decay(), "reduced_space")
    res.extra["objective_start"] = res.objective - 1.0       # as if the start had been better
    (w,) = start_warning(res)
    assert w.startswith("worse than the start") and "bound_push" in w
    res.status = po.Status.MAX_ITERATIONS                     # not converged: its own warning
    assert start_warning(res) == []
