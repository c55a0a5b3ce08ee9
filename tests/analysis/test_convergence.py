"""[GM-conv], Theorem 1: discrete gradients and minimizers converge to the continuous ones."""

import numpy as np
import pytest

from pyomo_odeest import convergence_study
from pyomo_odeest.analysis._convergence import uniform_grid
from pyomo_odeest.models import lotka_volterra_problem



@pytest.mark.parametrize("qmax", [2, 3])
def test_gradient_and_minimizer_converge_at_the_scheme_order(qmax):
    prob = lotka_volterra_problem(p0=(0.8,) * 4)
    st = convergence_study(prob, ks=(20, 40, 80, 160, 320), qmax=qmax)
    tab = st.table
    assert st.expected_rate == qmax                       # min(3, qmax) with the ramp
    rates = tab["grad_rate"].to_numpy()[1:]
    assert len(rates) >= 4
    assert np.all(np.abs(rates - qmax) < 0.3), tab
    assert np.all(np.diff(tab["parameter_error"].to_numpy()) < 0)
    assert tab["parameter_error"].iloc[-1] < 1e-3
    # the continuous minimizer is a stationary point of J
    assert np.linalg.norm(st.u_star - 1.0) < 0.1


def test_uniform_grid_requires_measurement_times_on_it():
    prob = lotka_volterra_problem()
    assert len(uniform_grid(prob, 40).t) == 41
    with pytest.raises(ValueError, match="not on the uniform grid"):
        uniform_grid(prob, 25)
