"""The compiled adjoint gradient [GM-grad, eqs. (52), (54)] — the backward sweep over the
weighted sums of the terms' adjoints, the compiled Jacobians of f at every block and the
compiled misfit gradients at the measurement times — equals the numpy engine's (the
reference) to 1e-12 and central differences of the objective."""

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import pytest

import pyomo_odeest as po
from pyomo_odeest import make_grid
from pyomo_odeest.discretization import ExperimentModels
from pyomo_odeest.discretization.discrete import DiscreteModel
from helpers import U_NL, likelihood_problem, three_experiments_problem

try:
    import numba  # noqa: F401
    HAVE_NUMBA = True
except ImportError:
    HAVE_NUMBA = False

SCHEMES = [("adams_pc", 4), ("adams_moulton", 3), ("enright", None),
           ("semi_implicit_enright", None)]


def rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def losses():
    """The misfit's weightings: Gaussian with a full Σ (the matrices A_j) and with a
    diagonal one, least squares with given σ and with weights only (σ unknown); with a
    penalty R(u) in the last."""
    full = likelihood_problem(gaussian=True)
    return {
        "gaussian_full": full,
        "gaussian_diagonal": _with(full, loss=po.GaussianNLL([[0.04, 0.0], [0.0, 0.09]])),
        "sigma_known": _with(full, loss=None, sigma={"z1": 0.2, "z2": 0.3}),
        "weights_only": _with(full, loss=None, weights={"z1": 2.0, "z2": 0.5},
                              penalty=lambda u: 3.0 * (u.a - 0.5) ** 2 + 2.0 * u.b * u.c),
    }


def _with(base, **changes):
    """The problem of :func:`likelihood_problem` with another loss, σ, weights or penalty."""
    kw = dict(states=["x", "y"], parameters=base.parameters,
              rhs=lambda x, u, t: [-u.a * x.x + u.b * x.x * x.y + 0.1 * pyo.sin(u.c * t),
                                   u.c * (1 - x.y) - u.a * u.b * x.x * x.y],
              initial={"x": "x0", "y": lambda u: u.b * u.x0 ** 2},
              observe=lambda x, u, t: {"z1": x.x, "z2": x.x + u.c * x.y},
              data=base.data, loss=base.loss)
    kw.update(changes)
    return po.EstimationProblem(**kw)


def both(prob, scheme, qmax, grid):
    a = DiscreteModel(prob, scheme, qmax, grid=grid, engine="numpy")
    b = DiscreteModel(prob, scheme, qmax, grid=grid, engine="numba")
    assert a.engine == "numpy" and b.engine == "numba"
    return a, b


def jittered_grid(prob, per=5):
    return make_grid(prob.meas_times, prob.t0, prob.T, steps_per_interval=per, jitter=0.35,
                     seed=4)


@pytest.mark.parametrize("loss", ["gaussian_full", "gaussian_diagonal", "sigma_known",
                                  "weights_only"])
@pytest.mark.parametrize("scheme,qmax", SCHEMES)
def test_numpy_adjoint_gradient_equals_central_differences(scheme, qmax, loss):
    """The reference itself (runs without numba): the numpy engine's adjoint gradient
    against central differences of J_k and the transposed sparse solve."""
    prob = losses()[loss]
    dm = DiscreteModel(prob, scheme, qmax, grid=jittered_grid(prob), engine="numpy")
    g = dm.gradient(U_NL, "adjoint")
    assert rel(g, dm.gradient(U_NL, "transposed_solve")) < 1e-12
    assert rel(g, dm.gradient(U_NL, "fd")) < 1e-6


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("loss", ["gaussian_full", "gaussian_diagonal", "sigma_known",
                                  "weights_only"])
@pytest.mark.parametrize("scheme,qmax", SCHEMES)
def test_compiled_adjoint_gradient_equals_numpy(scheme, qmax, loss):
    """Variable-order Adams PC, Adams–Moulton, Enright and its semi-implicit variant on a
    non-uniform grid; x_0 = l(u), g depending on u, one value missing; every weighting."""
    prob = losses()[loss]
    a, b = both(prob, scheme, qmax, jittered_grid(prob))
    ta, tb = a.simulate(U_NL), b.simulate(U_NL)
    assert b._compiled().misfit_gradients(b, tb.W, U_NL) is not None    # the compiled misfit
    Fa, Fb = a._dF(ta.W, U_NL), b._dF(tb.W, U_NL)
    assert rel(Fb[0], Fa[0]) < 1e-12 and rel(Fb[1], Fa[1]) < 1e-12
    g = b.gradient(U_NL, "adjoint", tb)
    assert rel(g, a.gradient(U_NL, "adjoint", ta)) < 1e-12
    assert rel(b.adjoint(tb), a.adjoint(ta)) < 1e-12
    assert rel(g, b.gradient(U_NL, "transposed_solve", tb)) < 1e-12
    assert rel(g, b.gradient(U_NL, "fd")) < 1e-6
    # the same sweep with m right-hand sides: the second-order adjoint
    assert rel(b.hessian(U_NL, "soa"), a.hessian(U_NL, "soa")) < 1e-12


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.parametrize("scheme,qmax", [("adams_pc", 4), ("semi_implicit_enright", None)])
def test_compiled_gradient_of_several_experiments(scheme, qmax):
    """Three experiments (own grids, horizons and initial states): the sum of the
    experiments' compiled gradients equals numpy's and central differences."""
    prob = three_experiments_problem(same_horizon=False)
    u = np.array([0.65, 0.35, 1.1, 1.8, 0.45])[:len(prob.parameters)]

    def models(engine):
        return ExperimentModels(prob, [
            DiscreteModel(sp, scheme, qmax, grid=jittered_grid(sp, 4), engine=engine)
            for sp in prob.experiment_problems])
    a, b = models("numpy"), models("numba")
    g = b.gradient(u, "adjoint")
    assert rel(g, a.gradient(u, "adjoint")) < 1e-12
    assert rel(g, b.gradient(u, "fd")) < 1e-6


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_compiled_misfit_sums_the_times_of_a_shared_block():
    """Measurement times whose states are one block add their sources there (the
    kernel's sum, as the numpy engine's sparse sum)."""
    prob = likelihood_problem(gaussian=True)
    a, b = both(prob, "adams_pc", 4, jittered_grid(prob))
    W = b.simulate(U_NL).W
    blk = b.meas_blk.copy()
    blk[2] = blk[1] = blk[0]
    for dm in (a, b):
        dm._set_measurement_blocks(blk)
    Fx, Fu = a.misfit.gradients(W[blk], U_NL)
    Fw = np.zeros_like(W)
    np.add.at(Fw, blk, Fx)
    for dm in (a, b):
        got_w, got_u = dm._dF(W, U_NL)
        assert rel(got_w, Fw) < 1e-12
        assert rel(got_u, Fu + dm.misfit.penalty_gradient(U_NL)) < 1e-12


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_compiled_misfit_ignores_what_is_not_measured():
    """z = log10(y) is -inf at t0 where only x is measured: the compiled misfit masks the
    residual and the Jacobian's row as the numpy one does."""
    t = np.array([0.0, 0.5, 1.0, 2.0])
    data = pd.DataFrame({"x": [1.0, 0.62, 0.4, 0.15], "z": [np.nan, -0.5, -0.3, -0.2]},
                        index=t)
    prob = po.EstimationProblem(
        ["x", "y"], [po.Parameter("k", 0.9), po.Parameter("c", 0.5)],
        lambda x, u, t: [-u.k * x.x, u.c * x.x - 0.3 * x.y], {"x": 1.0, "y": 0.0},
        observe=lambda x, u, t: {"x": x.x, "z": pyo.log10(x.y)}, data=data)
    u = np.array([0.9, 0.5])
    a, b = both(prob, "adams_pc", 3, make_grid(t, 0.0, 2.0, steps_per_interval=8))
    g = b.gradient(u, "adjoint")
    assert np.all(np.isfinite(g))
    assert rel(g, a.gradient(u, "adjoint")) < 1e-12


@pytest.mark.extras
@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed (extra 'compiled')")
def test_an_observation_without_compiled_form_keeps_the_numpy_misfit():
    """An observation through an input that is not piecewise cubic has no compiled form:
    the simulation and the sweeps stay compiled, the misfit's gradients are numpy's."""
    from pyomo_odeest.problem._inputs import Input, _implemented

    class Decay(Input):
        def expression(self, t_sym, symbol_of_parameter):
            return _implemented("decay", lambda t: np.exp(-np.asarray(t, dtype=float)))(t_sym)

    t = np.linspace(0.5, 3.0, 6)
    data = pd.DataFrame({"z": np.exp(-t) * 0.8, "x": np.exp(-0.5 * t)}, index=t)
    prob = po.EstimationProblem(
        ["x", "y"], [po.Parameter("k", 0.5), po.Parameter("a", 1.2)],
        lambda x, u, t: [-u.k * x.x, u.a * x.x - x.y], {"x": 1.0, "y": 0.0},
        observe=lambda x, u, t: {"z": u.D * x.y, "x": x.x}, data=data, inputs={"D": Decay()})
    u = np.array([0.6, 1.1])
    a, b = both(prob, "adams_pc", 4, make_grid(t, 0.0, 3.0, steps_per_interval=5))
    tb = b.simulate(u)
    assert b._compiled().misfit_gradients(b, tb.W, u) is None
    assert rel(b.gradient(u, "adjoint", tb), a.gradient(u, "adjoint")) < 1e-12
