"""The store of generated code (pyomo_odeest/symbolic/_store.py): an entry is generated once
and read back in later runs with the same values; a file that does not match its key or
checksum is generated again, never used."""
import glob
import json
import os

import numpy as np
import pytest
import sympy

from pyomo_odeest.symbolic._lambdify import from_code, generated_code, lambdify
from pyomo_odeest.symbolic._store import CACHE_ENV, STORE_COUNTS, cache_dir, stored
from pyomo_odeest.symbolic._vectorfn import observation_functions

X = sympy.symbols("x0:3", real=True)
U = sympy.symbols("u0:40", real=True)
T = sympy.Symbol("t", real=True)
G = [sympy.exp(U[3]) * X[0] / (1 + X[1] ** 2) - 10 ** U[30] * T,
     sympy.Piecewise((X[2], X[0] > U[1]), (sympy.log(U[7]) * X[1], True)),
     sympy.Max(X[1], U[5]) + sympy.Abs(X[2] - U[39]) ** 1.5]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An empty store in a temporary cache directory; the counts of this test."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr("pyomo_odeest.symbolic._store.STORE_COUNTS",
                        dict.fromkeys(STORE_COUNTS, 0))
    monkeypatch.setattr("pyomo_odeest.symbolic._vectorfn._CANONICAL", {})
    from pyomo_odeest.symbolic import _store
    return _store.STORE_COUNTS, tmp_path / "generated"


def new_process():
    """Forget the functions this process generated (a new process reads the store)."""
    from pyomo_odeest.symbolic import _vectorfn
    _vectorfn._CANONICAL.clear()


def values(fns):
    rng = np.random.default_rng(0)
    Xv, uv, tv = rng.uniform(0.5, 2.0, (4, 3)), rng.uniform(0.5, 2.0, 40), np.linspace(0, 1, 4)
    g, gx, gu = fns
    return [g(Xv, uv, tv), gx.values(Xv, uv, tv), gu.values(Xv, uv, tv), g.point(Xv[0], uv, 0.5)]


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_dir("generated") == str(tmp_path / "c" / "generated")
    monkeypatch.setenv("MY_KERNELS", str(tmp_path / "k"))
    assert cache_dir("kernels", env="MY_KERNELS") == str(tmp_path / "k")


def test_generated_code_makes_the_same_function():
    f = lambdify((X, U, T), G, cse=True)
    g = from_code(json.loads(json.dumps(generated_code(f))))
    Xv, uv = np.array([[1.2, 0.3], [0.4, 2.0], [1.5, 0.1]]), np.linspace(0.5, 2, 40)
    for a, b in zip(f(Xv, uv, np.array([0.0, 1.0])), g(Xv, uv, np.array([0.0, 1.0]))):
        np.testing.assert_array_equal(a, b)


def test_second_build_reads_the_store_with_identical_values(store):
    counts, folder = store
    first = observation_functions(G, X, U, T)
    assert counts == {"loaded": 0, "built": 1, "rejected": 0}
    assert len(glob.glob(str(folder / "observations_*.json"))) == 1
    assert observation_functions(G, X, U, T) is not None     # this process's: no file read
    assert counts == {"loaded": 0, "built": 1, "rejected": 0}
    new_process()
    second = observation_functions(G, X, U, T)
    assert counts == {"loaded": 1, "built": 1, "rejected": 0}
    for a, b in zip(values(first), values(second)):
        np.testing.assert_array_equal(a, b)
    assert (second[1].rows.tolist(), second[2].cols.tolist()) == \
        (first[1].rows.tolist(), first[2].cols.tolist())
    assert second[1].exprs == first[1].exprs and second[2].exprs == first[2].exprs
    # other expressions are another entry
    observation_functions(G[:2], X, U, T)
    assert counts["built"] == 2


@pytest.mark.parametrize("damage", ["truncate", "edit", "other_key", "not_json"])
def test_a_damaged_entry_is_built_again_and_replaced(store, damage):
    counts, folder = store
    reference = values(observation_functions(G, X, U, T))
    path, = glob.glob(str(folder / "observations_*.json"))
    text = open(path).read()
    record = json.loads(text)
    if damage == "truncate":
        text = text[: len(text) // 2]
    elif damage == "edit":                    # a changed number, the checksum kept
        record["content"] = record["content"].replace("exp(", "log(", 1)
        text = json.dumps(record)
    elif damage == "other_key":
        record["key"] = record["key"] + " "
        text = json.dumps(record)
    else:
        text = "\x00\x01 not a record"
    with open(path, "w") as fh:
        fh.write(text)
    new_process()
    again = observation_functions(G, X, U, T)
    assert counts == {"loaded": 0, "built": 2, "rejected": 1}
    for a, b in zip(reference, values(again)):
        np.testing.assert_array_equal(a, b)
    stored("observations", "unused", lambda: None)      # the store still works
    new_process()
    observation_functions(G, X, U, T)
    assert counts["loaded"] == 1                          # the replaced file is read


def test_expressions_of_undefined_functions_are_not_stored(store):
    counts, folder = store
    inp = sympy.Function("w")(T)
    observation_functions([X[0] * inp], X, U, T)
    assert counts == {"loaded": 0, "built": 0, "rejected": 0}
    assert not os.path.exists(folder) or not os.listdir(folder)


def test_observations_that_differ_in_parameters_and_numbers_share_one_function(store):
    """Two experiments whose observations read other parameters (PEtab's overrides of
    observable parameters) and other numbers (data inside a noise formula) share one
    generated function: one entry built, and each evaluates its own expressions, with
    its parameter Jacobian in its own columns of u."""
    counts, folder = store
    mine = [10 ** U[2] * X[0] + U[9] - 3.25, (X[1] - 0.5) / (0.1 * 10 ** U[9]),
            sympy.exp(U[17]) * T]
    theirs = [10 ** U[4] * X[0] + U[33] - 7.5, (X[1] - 1.75) / (0.1 * 10 ** U[33]),
              sympy.exp(U[1]) * T]
    a = observation_functions(mine, X, U, T)
    b = observation_functions(theirs, X, U, T)
    assert counts == {"loaded": 0, "built": 1, "rejected": 0}
    rng = np.random.default_rng(1)
    Xv, uv, tv = rng.uniform(0.5, 2.0, (5, 3)), rng.uniform(-1.0, 1.0, 40), np.linspace(0, 2, 5)
    for exprs, (g, gx, gu) in ((mine, a), (theirs, b)):
        ref = sympy.lambdify((X, U, T), exprs, "numpy")
        want = np.array([np.broadcast_to(v, (5,)) for v in ref(Xv.T, uv, tv)]).T
        np.testing.assert_allclose(g(Xv, uv, tv), want, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(g.point(list(Xv[1]), list(uv), float(tv[1])), want[1],
                                   rtol=1e-14)
        for jac, wrt in ((gx, X), (gu, U)):
            dense = jac.dense(jac.values(Xv, uv, tv))
            for r, e in enumerate(exprs):
                for c, s in enumerate(wrt):
                    d = sympy.lambdify((X, U, T), sympy.diff(e, s), "numpy")(Xv.T, uv, tv)
                    np.testing.assert_allclose(dense[:, r, c], np.broadcast_to(d, (5,)),
                                               rtol=1e-13, atol=1e-14)
            assert [jac.exprs[k] == sympy.diff(exprs[r], wrt[c])
                    for k, (r, c) in enumerate(zip(jac.rows, jac.cols))] == [True] * jac.nnz


def test_a_number_in_an_exponent_stays_a_number(store):
    """x**2.0's derivative is 0 at x = 0; with the exponent a symbol q sympy writes
    q*x**q/x, NaN there: exponents are not made arguments."""
    from pyomo_odeest.symbolic._vectorfn import canonical_form
    exprs = [X[0] ** 2.0 + 2.0 * U[1], 3.5 * X[1] ** 1.5]
    cexprs, used, q, consts = canonical_form(exprs, U)
    assert used == [1] and consts.tolist() == [3.5]       # 2.0 is an exponent somewhere
    g, gx, gu = observation_functions(exprs, X, U, T)
    Xv = np.array([[0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(gx.dense(gx.values(Xv, np.ones(40), np.zeros(1)))[0][:, :2],
                                  np.zeros((2, 2)))
