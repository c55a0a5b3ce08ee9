"""Plots of confidence bands and profiles (matplotlib, the ``plot`` extra)."""
import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.extras

from pyomo_odeest import EstimationProblem, Parameter, estimate  # noqa: E402
from pyomo_odeest.models import lotka_volterra_data  # noqa: E402
from pyomo_odeest.models._lotka_volterra import LV_X0, lv_rhs  # noqa: E402


def test_band_and_profile_plots():
    data = lotka_volterra_data(seed=3, variance=0.05**2)
    P = EstimationProblem(states=["x1", "x2"], parameters=[Parameter(f"p{k}", 1.0) for k in range(1, 5)],
                          rhs=lv_rhs, initial=dict(zip(["x1", "x2"], LV_X0)), data=data, sigma=0.05)
    res = estimate(P, "reduced_space", max_step=0.5)
    fig = res.prediction_bands().plot(data=P.data)
    assert len(fig.axes) == 2
    pr = res.profile(parameters=["p1"], target_step=1.0)
    fig = pr.plot()
    assert len(fig.axes) == 1
    line = fig.axes[0].lines[0]
    np.testing.assert_allclose(line.get_xdata(), pr.curves["p1"]["value"])
