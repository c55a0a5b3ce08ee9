"""Pyomo's PyNumero ASL interface built against a system ASL (pyomo_odeest.nlp._pynumero_asl),
and Pyomo's own ASL-based tools checked against odeest's evaluator and solver."""
import numpy as np
import pyomo.environ as pyo
import pytest

from pyomo_odeest import initialize_block
from pyomo_odeest.models import lotka_volterra_problem
from pyomo_odeest.transcription import build_block
from pyomo_odeest import PyomoNLPEvaluator
from pyomo_odeest.nlp._pynumero_asl import (PynumeroBuildError, build_pynumero_asl,
                                             pynumero_asl_available)


def test_missing_headers_are_named(tmp_path):
    with pytest.raises(PynumeroBuildError, match="libamplsolver-dev"):
        build_pynumero_asl(tmp_path, include_dir=str(tmp_path / "nowhere"))


def test_build_into_a_directory_gives_a_loadable_library(tmp_path):
    try:
        path = build_pynumero_asl(tmp_path)
    except PynumeroBuildError as err:
        pytest.skip(f"no system ASL here: {err}")
    import ctypes
    lib = ctypes.cdll.LoadLibrary(str(path))
    assert hasattr(lib, "EXTERNAL_AmplInterface_new")


def _lv_model():
    m = pyo.ConcreteModel()
    m.est = build_block(lotka_volterra_problem(), "adams_pc", 4, steps_per_interval=2)
    initialize_block(m.est)                     # states from the data (the simultaneous default)
    return m


@pytest.mark.extras
def test_pynumero_derivatives_equal_odeests_on_the_package_block():
    """The ASL's first and second derivatives of the discretized LV problem (through
    PyomoNLP) equal odeest's vectorised evaluator's, row by row and column by column."""
    if not pynumero_asl_available():
        pytest.skip("PyNumero's ASL interface is not built")
    from pyomo.contrib.pynumero.interfaces.pyomo_nlp import PyomoNLP
    m = _lv_model()
    rng = np.random.default_rng(3)
    nlp = PyomoNLP(m)
    ev = PyomoNLPEvaluator(m)
    rpos = {id(c): i for i, c in enumerate(ev.constraint_rows)}
    cpos = {id(v): j for j, v in enumerate(ev.variables)}
    ri = np.array([rpos[id(c)] for c in nlp.get_pyomo_constraints()])
    ci = np.array([cpos[id(v)] for v in nlp.get_pyomo_variables()])
    x = np.array([v.value for v in ev.variables]) * (1 + 0.1 * rng.standard_normal(ev.n))
    lam = rng.standard_normal(ev.m)
    nlp.set_primals(x[ci])
    nlp.set_duals(lam[ri])
    r, c = ev.jacobian_structure()
    from scipy.sparse import coo_matrix
    J = coo_matrix((ev.jacobian(x), (r, c)), shape=(ev.m, ev.n)).toarray()[np.ix_(ri, ci)]
    assert np.abs(nlp.evaluate_jacobian().toarray() - J).max() <= 1e-11 * np.abs(J).max()
    assert abs(nlp.evaluate_objective() - ev.objective(x)) <= 1e-12 * abs(ev.objective(x))
    assert np.allclose(nlp.evaluate_grad_objective(), ev.gradient(x)[ci], rtol=1e-12, atol=1e-12)
    hr, hc = ev.hessian_structure()
    H = coo_matrix((ev.hessian(x, lam, 1.0), (hr, hc)), shape=(ev.n, ev.n)).toarray()
    H = H + np.tril(H, -1).T                     # odeest stores the lower triangle
    Hn = nlp.evaluate_hessian_lag().toarray()
    Hn = Hn + np.tril(Hn, -1).T if np.allclose(np.triu(Hn, 1), 0) else Hn
    assert np.abs(Hn - H[np.ix_(ci, ci)]).max() <= 1e-10 * max(1.0, np.abs(H).max())


@pytest.mark.extras
def test_pyomo_cyipopt_interface_and_odeest_ipopt_agree():
    """With the ASL interface built, Pyomo's own SolverFactory('cyipopt') runs here; on the
    package's LV block it reaches odeest_ipopt's optimum."""
    if not pynumero_asl_available():
        pytest.skip("PyNumero's ASL interface is not built")
    opts = {"tol": 1e-10, "print_level": 0}
    a, b = _lv_model(), _lv_model()
    ra = pyo.SolverFactory("odeest_ipopt").solve(a, options=opts)
    rb = pyo.SolverFactory("cyipopt", options=opts).solve(b)
    assert str(ra.solver.termination_condition) == "optimal"
    assert str(rb.solver.termination_condition) == "optimal"
    ua = np.array([pyo.value(a.est.u[k]) for k in a.est.u])
    ub = np.array([pyo.value(b.est.u[k]) for k in b.est.u])
    assert np.abs(ua - ub).max() <= 1e-9 * np.abs(ua).max()   # measured: 2e-16
