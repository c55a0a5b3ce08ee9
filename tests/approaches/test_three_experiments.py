"""The default approach on three experiments with measured feeds: a fed-batch series
reaction A -> B -> C (:func:`pyomo_odeest.models.fed_batch_problem`), each experiment
with its own piecewise feed, solved by the simultaneous approach from states
simulated per experiment at the start values."""
import numpy as np
import pytest

from pyomo_odeest import estimate
from pyomo_odeest.models import FED_BATCH_TRUE, fed_batch_problem


@pytest.mark.parametrize("start, observed", [((0.3, 1.0), ("A", "B")),
                                             ((6.0, 0.03), ("B",))])
def test_three_experiments_with_feeds_by_the_default_approach(start, observed):
    P = fed_batch_problem(start, observed)
    assert len(P.experiments) == 3 and all(e.inputs for e in P.experiments)
    res = estimate(P)                                      # the default: simultaneous
    assert res.approach == "simultaneous"
    assert res.success, res.summary()
    assert res.extra["init"] == {"e1": "simulate", "e2": "simulate", "e3": "simulate"}
    ref = estimate(P, "reduced_space")
    assert ref.success
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-5)
    np.testing.assert_allclose(res.x, list(FED_BATCH_TRUE.values()), rtol=0.05)
    assert not [w for w in res.warnings if "not converged" in w]


def test_simultaneous_not_converged_says_what_to_try():
    P = fed_batch_problem((6.0, 0.03), ("B",))
    res = estimate(P, options={"max_iter": 2})
    assert not res.success
    advice = [w for w in res.warnings if w.startswith("not converged")]
    assert advice and "approach='reduced_space'" in advice[0] and "u0=" in advice[0]
