"""Products of the sparse Jacobians with vectors equal those of their dense matrices."""
import numpy as np
import pytest
import sympy

from pyomo_odeest.symbolic import sparse_jacobian

x, y, t = sympy.symbols("x y t")


@pytest.mark.parametrize("exprs,distinct", [([x ** 2, 3 * y], True),
                                            ([x * y, x + y ** 2, 3 * y], False)])
def test_matvec_T_with_and_without_shared_columns(exprs, distinct):
    J = sparse_jacobian(exprs, [x, y], [x, y], [], t)
    assert J.distinct_cols == distinct
    rng = np.random.default_rng(0)
    X = rng.uniform(0.5, 2.0, (7, 2))
    vals = J.values(X, np.zeros(0), np.zeros(7))
    v = rng.standard_normal((7, len(exprs)))
    dense = np.einsum("kab,ka->kb", J.dense(vals), v)
    np.testing.assert_allclose(J.matvec_T(vals, v), dense, rtol=1e-14)
    np.testing.assert_allclose(J.sum_matvec_T(vals, v), dense.sum(axis=0), rtol=1e-14)
