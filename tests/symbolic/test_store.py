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
    from pyomo_odeest.symbolic import _store
    return _store.STORE_COUNTS, tmp_path / "generated"


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
    again = observation_functions(G, X, U, T)
    assert counts == {"loaded": 0, "built": 2, "rejected": 1}
    for a, b in zip(reference, values(again)):
        np.testing.assert_array_equal(a, b)
    stored("observations", "unused", lambda: None)      # the store still works
    observation_functions(G, X, U, T)
    assert counts["loaded"] == 1                          # the replaced file is read


def test_expressions_of_undefined_functions_are_not_stored(store):
    counts, folder = store
    inp = sympy.Function("w")(T)
    observation_functions([X[0] * inp], X, U, T)
    assert counts == {"loaded": 0, "built": 0, "rejected": 0}
    assert not os.path.exists(folder) or not os.listdir(folder)
