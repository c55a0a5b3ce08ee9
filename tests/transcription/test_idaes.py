"""IDAES dynamic CSTR: odeest.adams (variant 'moulton') on an IDAES flowsheet, estimation of the
pre-exponential factor with odeest_ipopt, IDAES's structural diagnostics (examples/idaes_cstr.py).
"""
import importlib.util
import time
from pathlib import Path

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.dae import ContinuousSet, DerivativeVar
from pyomo.util.check_units import assert_units_consistent

import pyomo_odeest  # noqa: F401
from pyomo_odeest import DaeSchemeError

pytestmark = pytest.mark.extras
pytest.importorskip("idaes")

EX = Path(__file__).resolve().parents[2] / "examples" / "idaes_cstr.py"
TIMES = [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("idaes_cstr", EX)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cstr_estimate_square_model_and_diagnostics(ex):
    from idaes.core.util.model_statistics import degrees_of_freedom

    start = time.perf_counter()
    m = ex.build_model(times=TIMES, steps_per_interval=2, qmax=3)
    assert len(m.fs.time) == 9                      # measurement times kept, 2 steps each
    assert degrees_of_freedom(m) == 0               # square at fixed A
    ex.initialize(m)                                # simulation at A_TRUE
    data = ex.outlet(m)                             # noise-free, same discretization
    assert np.all(np.diff(data) > 0)                # product rises after the feed step

    a_est, status, iters, _ = ex.estimate(m, data, 0.5 * ex.A_TRUE)
    assert status == "Solve_Succeeded"
    # Noise-free data from the same discretized model: A_TRUE is an exact zero-residual
    # minimizer, so only Ipopt's tolerance (tol=1e-10 on the scaled KKT system) limits the
    # error; the sensitivity d(outlet)/dA is ~1e-6 mol/m3 per m3/mol/s, i.e. O(1) relative,
    # hence 1e-6 relative is a loose bound (measured: ~1e-13).
    assert abs(a_est - ex.A_TRUE) / ex.A_TRUE < 1e-6
    assert iters < 50

    # back to the square model at the estimate: IDAES's structural checks are clean
    assert m.fs.reactions.arrhenius.fixed and degrees_of_freedom(m) == 0
    text, dt = ex.diagnostics(m, numerical=False)
    warnings, _ = dt._collect_structural_warnings()
    assert warnings == [], text                     # DOF, units, structural singularity, evals
    assert "0 WARNINGS" in text
    dt.assert_no_structural_warnings()
    # the only caution: variables fixed to 0 (feed-free components' accumulation at t0,
    # water accumulation everywhere, heat duty, pressure drop)
    cautions = dt._collect_structural_cautions()
    assert len(cautions) == 1 and "fixed to 0" in cautions[0], cautions
    assert time.perf_counter() - start < 60


def test_idaes_initializer_pointed_at_odeest_ipopt_agrees_with_block_decomposition(ex):
    ys = []
    for method in ("scc", "idaes"):
        m = ex.build_model(times=TIMES, steps_per_interval=2)
        assert ex.initialize(m, method) <= 2          # the final square solve starts converged
        ys.append(ex.outlet(m))
    assert np.max(np.abs(ys[0] - ys[1])) < 1e-8


def _asl():
    from pyomo_odeest.nlp._pynumero_asl import pynumero_asl_available
    if not pynumero_asl_available():
        pytest.skip("PyNumero's ASL interface is not built (python -m pyomo_odeest.nlp._pynumero_asl)")


def test_idaes_numerical_report_unpatched_and_its_jacobian_equals_odeests(ex):
    """IDAES's own numerical checks run on the transformed flowsheet (no patching), and the
    Jacobian they read through PyNumero's ASL equals odeest's evaluator's, scaled and not."""
    _asl()
    from idaes.core.scaling.util import get_jacobian
    m = ex.build_model(times=[0.0, 1.0], steps_per_interval=2)
    ex.initialize(m)
    ex.apply_idaes_scaling(m)
    text, _ = ex.diagnostics(m, numerical=True)
    assert "Jacobian Condition Number" in text and "skipped" not in text
    for scaled in (False, True):
        jac, nlp = get_jacobian(m, include_scaling_factors=scaled)
        ours, cons, vars_ = ex.odeest_jacobian(m, include_scaling_factors=scaled)
        rpos = {id(c): i for i, c in enumerate(cons)}
        cpos = {id(v): j for j, v in enumerate(vars_)}
        ri = [rpos[id(c)] for c in nlp.get_pyomo_constraints()]
        ci = [cpos[id(v)] for v in nlp.get_pyomo_variables()]
        assert jac.shape == ours.shape and jac.shape[0] == jac.shape[1]   # square model
        diff = abs(jac.toarray() - ours.toarray()[np.ix_(ri, ci)])
        assert diff.max() <= 1e-10 * max(1.0, abs(jac).max()), diff.max()


def test_numerical_report_says_how_to_get_it_without_pynumero(ex, monkeypatch):
    from pyomo_odeest.nlp import _pynumero_asl as pynumero_asl
    monkeypatch.setattr(pynumero_asl, "pynumero_asl_available", lambda: False)
    m = ex.build_model(times=[0.0, 1.0], steps_per_interval=2)
    ex.initialize(m)
    text, _ = ex.diagnostics(m, numerical=True)
    assert "pyomo_odeest.nlp._pynumero_asl" in text and "Jacobian Condition" not in text


def test_water_is_index_reduced(ex):
    m = ex.build_model(times=[0.0, 1.0], steps_per_interval=2)
    cv = m.fs.unit.control_volume
    assert all(cv.material_accumulation[t, "Liq", "H2O"].fixed for t in m.fs.time)
    eqs = cv.material_accumulation_odeest_eq_x
    assert not any(c.active for k, c in eqs.items() if k[-1] == "H2O")
    assert all(c.active for k, c in eqs.items() if k[-1] != "H2O")


# --- the dae.py rules the IDAES recipe relies on (plain Pyomo) ---------------------------------
def _first_order(fix_d0, skip_ode0, units=False):
    """x' = k (u - x) on [0, 2]; with dx[0] fixed to 0 and the ODE at 0 kept, x(0) = u."""
    m = pyo.ConcreteModel()
    m.t = ContinuousSet(initialize=[0.0, 1.0, 2.0])
    u_x = pyo.units.mol if units else None
    u_d = pyo.units.mol / pyo.units.s if units else None
    m.k = pyo.Var(initialize=0.7, units=1 / pyo.units.s if units else None)
    m.k.fix()
    m.x = pyo.Var(m.t, initialize=1.0, units=u_x)
    m.dx = DerivativeVar(m.x, wrt=m.t, units=u_d)
    u = 2.0 * pyo.units.mol if units else 2.0

    def ode(m, t):
        if skip_ode0 and t == 0:
            return pyo.Constraint.Skip
        return m.dx[t] == m.k * (u - m.x[t])
    m.ode = pyo.Constraint(m.t, rule=ode)
    if fix_d0:
        m.dx[0].fix(0.0)
    return m


@pytest.mark.parametrize("family,variant", [
    ("odeest.adams", "pc"), ("odeest.adams", "moulton"),
    ("odeest.enright", "implicit"), ("odeest.enright", "semi_implicit")])
def test_fixed_derivative_at_t0_is_data(family, variant):
    m = _first_order(fix_d0=True, skip_ode0=False)
    pyo.TransformationFactory(family).apply_to(m, wrt=m.t, variant=variant, qmax=3,
                                               steps_per_interval=4)
    pyo.SolverFactory("odeest_ipopt").solve(m, options={"tol": 1e-12})
    # the ODE at t0 became algebraic: steady state x(0) = u, and it stays there
    assert all(abs(pyo.value(m.x[t]) - 2.0) < 1e-9 for t in m.t)


def test_free_derivative_without_equation_is_still_rejected():
    m = _first_order(fix_d0=False, skip_ode0=True)
    with pytest.raises(DaeSchemeError, match="no ODE constraint defines"):
        pyo.TransformationFactory("odeest.adams").apply_to(m, wrt=m.t, variant="moulton")


@pytest.mark.parametrize("family,variant", [("odeest.adams", "pc"), ("odeest.adams", "moulton"),
                                            ("odeest.enright", "semi_implicit")])
def test_scheme_equations_are_unit_consistent(family, variant):
    m = _first_order(fix_d0=False, skip_ode0=False, units=True)
    m.x[0].fix(0.0)
    pyo.TransformationFactory(family).apply_to(m, wrt=m.t, variant=variant, qmax=3,
                                               steps_per_interval=2)
    assert_units_consistent(m)
    pyo.SolverFactory("odeest_ipopt").solve(m, options={"tol": 1e-12})
    x2 = 2.0 * (1 - np.exp(-0.7 * 2.0))
    assert abs(pyo.value(m.x[2.0]) - x2) < 1e-3


def test_idaes_scaling_factors_are_used_by_odeest_ipopt(ex):
    """IDAES stores its scaling factors in `scaling_factor` Suffixes on the unit's blocks;
    odeest_ipopt passes them to Ipopt as user scaling, and the estimate does not change."""
    from pyomo.core.base.suffix import SuffixFinder
    from pyomo_odeest.nlp._plugin import user_scaling
    from pyomo_odeest import PyomoNLPEvaluator

    m = ex.build_model(times=TIMES, steps_per_interval=2, qmax=3)
    ex.initialize(m)
    data = ex.outlet(m)
    a_plain, status, _, _ = ex.estimate(m, data, 0.5 * ex.A_TRUE)
    assert status == "Solve_Succeeded"
    ex.apply_idaes_scaling(m)
    vol = m.fs.unit.control_volume.volume[m.fs.time.first()]
    assert SuffixFinder("scaling_factor", context=m).find(vol) == 1e3
    ev = PyomoNLPEvaluator(m)
    sc = user_scaling(m, ev)
    gs = sc["g_scaling"]                            # NaN: no factor (gradient-based rule)
    assert np.sum(sc["x_scaling"] != 1.0) > 10 and np.sum(np.isfinite(gs) & (gs != 1.0)) > 10
    a_scaled, status, _, _ = ex.estimate(m, data, 0.5 * ex.A_TRUE)
    assert status == "Solve_Succeeded"
    assert abs(a_scaled - a_plain) / ex.A_TRUE < 1e-6
