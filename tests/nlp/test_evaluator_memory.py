"""Memory of the simultaneous route: what the evaluator and the block keep.

The evaluator releases its set-up data (column dictionary, per-component
look-up tables, pool chunks), holds index arrays as 32-bit integers and drops
the arguments gathered at a point once Ipopt has asked for the Hessian there;
the block's coefficient Params drop the Python lists they were built from.
These tests check that nothing a user reads changed, and bound the memory the
evaluator keeps (``benchmarks/setup_phases.py --memory`` measures the whole
process).
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pyomo.environ as pyo
import pytest

from pyomo_odeest import PyomoNLPEvaluator, initialize_block
from pyomo_odeest.models import lotka_volterra_problem
from pyomo_odeest import build_block, make_grid
from pyomo_odeest.transcription._block import _batch_tags


def lv_model(steps_per_interval, scheme="adams_moulton", qmax=2):
    prob = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    m = pyo.ConcreteModel()
    m.est = build_block(prob, scheme, qmax, steps_per_interval=steps_per_interval)
    initialize_block(m.est)
    return m


def test_evaluator_keeps_little_per_variable():
    """At 10⁴ variables the evaluator keeps under 400 bytes per NLP variable
    (Python allocations, after a round of callbacks); it kept about 600 after
    set-up and 750 after the callbacks before its set-up data was released."""
    m = lv_model(500)
    PyomoNLPEvaluator(m)                     # compiled terms cached: not counted
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ev = PyomoNLPEvaluator(m)
        x = ev.x0
        ev.objective(x)
        ev.constraints(x)
        ev.jacobian(x)
        ev.hessian(x, np.ones(ev.m))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert ev.n == 10006
    assert kept / ev.n < 400


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize("scheme,qmax", [("adams_moulton", 2), ("semi_implicit_enright", 3)])
def test_structure_and_values_after_release(scheme, qmax, chunk, monkeypatch):
    """int32 structure; the same Jacobian and Hessian as the row-by-row
    reference evaluator; values at a point do not depend on the order of the
    callbacks (the gathered arguments are dropped after the Hessian).  With rows
    evaluated 7 at a time (``ROW_CHUNK``; 16384 by default, more than these models
    have) the pieces written chunk by chunk, masked pieces and the sums over every
    row give the same values."""
    if chunk is not None:
        monkeypatch.setattr("pyomo_odeest.nlp._family.ROW_CHUNK", chunk)
    m = lv_model(3, scheme, qmax)
    for s in ("x1", "x2"):                   # rows reading a constant there: masked pieces
        m.est.x[5, s].fix()
    ev = PyomoNLPEvaluator(m)
    ref = PyomoNLPEvaluator(m, templatize=False)
    for a in ev.jacobian_structure() + ev.hessian_structure():
        assert a.dtype == np.int32
    rng = np.random.default_rng(0)
    x = ev.x0 * (1 + 0.1 * rng.standard_normal(ev.n))
    lam = rng.standard_normal(ev.m)
    perm = np.array([ref.column(v) for v in ev.variables])   # ev column -> ref column
    rowmap = {id(c): k for k, c in enumerate(ref.constraint_rows)}
    rperm = np.array([rowmap[id(c)] for c in ev.constraint_rows])
    xr = np.empty(ref.n)
    xr[perm] = x
    lr = np.empty(ref.m)
    lr[rperm] = lam

    def dense(rows, cols, vals, shape):
        out = np.zeros(shape)
        np.add.at(out, (np.asarray(rows), np.asarray(cols)), vals)
        return out

    J1 = dense(*ev.jacobian_structure(), ev.jacobian(x), (ev.m, ev.n))
    H1 = dense(*ev.hessian_structure(), ev.hessian(x, lam, 1.0), (ev.n, ev.n))
    J2 = dense(*ev.jacobian_structure(), ev.jacobian(x), (ev.m, ev.n))   # after the Hessian
    Jr = dense(*ref.jacobian_structure(), ref.jacobian(xr), (ref.m, ref.n))
    Hr = dense(*ref.hessian_structure(), ref.hessian(xr, lr, 1.0), (ref.n, ref.n))
    np.testing.assert_array_equal(J1, J2)
    np.testing.assert_allclose(J1, Jr[np.ix_(rperm, perm)], rtol=1e-13, atol=1e-13)
    sym = lambda H: H + H.T - np.diag(np.diag(H))            # noqa: E731
    np.testing.assert_allclose(sym(H1), sym(Hr)[np.ix_(perm, perm)], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ev.constraints(x), ref.constraints(xr)[rperm], rtol=1e-13,
                               atol=1e-13)


def test_column_after_release():
    m = lv_model(2)
    b = m.est
    ev = PyomoNLPEvaluator(m)
    for k, v in enumerate(ev.variables):
        assert ev.column(v) == k
    b.u["p1"].fix(0.9)
    ev = PyomoNLPEvaluator(m)
    with pytest.raises(KeyError, match="not a free variable"):
        ev.column(b.u["p1"])
    assert ev.variables[ev.column(b.x[3, "x2"])] is b.x[3, "x2"]


def test_params_keep_values_after_release():
    """t, h and the coefficients hold the grid's and the scheme's values, in
    the block and in a clone, though their initializers dropped the lists."""
    m = lv_model(4, "adams_pc", 3)
    b = m.est
    t = np.asarray(b.grid.t)
    np.testing.assert_array_equal([pyo.value(b.t[i]) for i in range(len(t))], t)
    np.testing.assert_array_equal([pyo.value(b.h[i]) for i in range(len(t) - 1)], np.diff(t))
    c = m.clone()
    checked = 0
    batches = b.scheme.batches(t, b.grid.restarts)
    for batch, tag in zip(batches, _batch_tags(batches)):
        for sname, f_terms, _ in batch.stages:
            for blk in (b, c.est):
                for j, (_, coef) in enumerate(f_terms):
                    cf = blk.component(f"cf_{sname}_{tag}_{j}")
                    got = [pyo.value(cf[int(i)]) for i in batch.steps]
                    np.testing.assert_array_equal(got, coef)
                    checked += 1
    assert checked > 0


def test_params_store_only_entries_other_than_their_most_common_value():
    """A coefficient column on a grid of equal steps within its intervals (the nodes
    within round-off of integers are made integers) is its default and the entries
    of the steps where the step changes, yet lists every step with its value;
    -0.0 and NaN are never taken for the default."""
    from pyomo_odeest.transcription._block import _add_param
    lv = lotka_volterra_problem(p0=(0.9, 0.9, 0.9, 0.9))
    grid = make_grid(lv.meas_times, lv.t0, lv.T, max_step=0.03, extra_times=(0.3, 2.7, 5.55))
    h = np.diff(grid.t)
    changes = int(np.sum(np.abs(np.diff(h)) > 1e-12))
    assert 8 <= changes <= 13 and len(h) > 300
    m = pyo.ConcreteModel()
    b = m.est = build_block(lv, "adams_pc", 4, grid=grid)
    columns = [c for c in b.component_objects(pyo.Param) if c.local_name.startswith("cf_")]
    # only the (at most Q - 1 = 3) steps after each change of step have coefficients
    # other than the classical ones
    assert columns and all(len(c._data) <= 3 * changes for c in columns)
    assert max(len(list(c.keys())) for c in columns) > 300
    m2 = pyo.ConcreteModel()
    vals = [1.0, 1.0, -0.0, 0.0, 0.0, float("nan"), 0.0]
    _add_param(m2, "p", (range(len(vals)),), vals.__getitem__)
    got = [m2.p[i] for i in range(len(vals))]
    assert m2.p.default() == 0.0 and len(m2.p._data) == 4       # 1, 1, -0.0, nan stored
    assert str(got[2]) == "-0.0" and np.isnan(got[5]) and got[:2] == [1.0, 1.0]


@pytest.mark.parametrize("scheme,qmax", [("adams_pc", 4), ("enright", 3)])
def test_slots_at_equal_spacing_are_views_of_w(scheme, qmax):
    """After the set-up a family keeps a slot read at equally spaced positions of
    ``w`` as its first position and spacing: its arguments are read-only views of
    ``w`` (no copy), equal to the gathered ones, and its positions rebuild exactly;
    the other slots keep their positions.  Most arguments of a scheme's step rows
    are spaced equally."""
    m = lv_model(20, scheme, qmax)
    ev = PyomoNLPEvaluator(m)
    w = ev._w
    w[: ev.n] = ev.x0 * 1.01
    views = total = 0
    for fam in ev.con_families + ev.obj_families:
        pos = fam.positions()
        assert pos.shape == (fam.nrows, fam.compiled.nslots)
        args = fam.slot_args(w)
        for k, a in enumerate(args):
            np.testing.assert_array_equal(a, w[pos[:, k]])
            total += fam.nrows
            if fam.nrows > 1 and np.shares_memory(a, w):
                views += fam.nrows
                assert not a.flags.writeable
    assert views >= 0.5 * total


def test_set_up_data_is_freed_without_a_garbage_collection():
    """The registry's look-up tables refer back to it: the cycle is broken when the
    set-up ends, so its column dictionary is freed then, not at Python's next
    collection (at 10⁵ steps it held about 250 bytes per variable until then)."""
    from pyomo_odeest.nlp._evaluator import _Registry
    m = lv_model(5)
    gc.collect()
    gc.disable()
    try:
        ev = PyomoNLPEvaluator(m)
        alive = [o for o in gc.get_objects() if isinstance(o, _Registry)]
    finally:
        gc.enable()
    assert ev.n > 0
    assert alive == []


def test_release_free_memory_runs_where_the_c_library_has_it():
    """glibc's ``malloc_trim`` is found on Linux; elsewhere the call does nothing."""
    import sys
    from pyomo_odeest.nlp._memory import release_free_memory
    assert release_free_memory() is sys.platform.startswith("linux")


@pytest.mark.parametrize("chunk", [None, 3])
def test_rows_reading_one_variable_through_two_slots(chunk, monkeypatch):
    """Rows ``x_i · x_p(i)`` with ``p(i) = i`` in every other row: one family whose two
    slots read the same column there (its Hessian entry counts twice) and a fixed
    variable in some rows (masked pieces); in chunks of 3 rows the Jacobian and the
    Hessian of the Lagrangian equal the closed form."""
    if chunk is not None:
        monkeypatch.setattr("pyomo_odeest.nlp._family.ROW_CHUNK", chunk)
    n = 11
    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(n + 1), initialize=lambda m, i: 1.0 + 0.1 * i)
    m.x[n].fix(3.0)
    p = [i if i % 2 == 0 else i + 1 for i in range(n)]
    m.c = pyo.Constraint(range(n), rule=lambda m, i: m.x[i] * m.x[p[i]] == 1.0)
    m.o = pyo.Objective(expr=sum(m.x[i] ** 2 for i in range(n)))
    ev = PyomoNLPEvaluator(m)
    col = {i: ev.column(m.x[i]) for i in range(n)}
    x = ev.x0.copy()
    xv = {i: x[col[i]] for i in range(n)}
    xv[n] = 3.0
    lam = np.linspace(0.5, 1.5, ev.m)
    row = {id(c): k for k, c in enumerate(ev.constraint_rows)}
    J = np.zeros((ev.m, ev.n))
    J[ev.jacobian_structure()] = ev.jacobian(x)
    H = np.zeros((ev.n, ev.n))
    np.add.at(H, ev.hessian_structure(), ev.hessian(x, lam, 1.0))
    H = H + H.T - np.diag(np.diag(H))
    Jw, Hw = np.zeros_like(J), np.zeros_like(H)
    for i in range(n):
        r = row[id(m.c[i])]
        Hw[col[i], col[i]] += 2.0
        if p[i] == i:
            Jw[r, col[i]] = 2 * xv[i]
            Hw[col[i], col[i]] += 2 * lam[r]
        else:
            Jw[r, col[i]] = xv[p[i]]
            if p[i] < n:
                Jw[r, col[p[i]]] = xv[i]
                Hw[col[i], col[p[i]]] += lam[r]
                Hw[col[p[i]], col[i]] += lam[r]
    np.testing.assert_allclose(J, Jw, rtol=1e-15)
    np.testing.assert_allclose(H, Hw, rtol=1e-15)


def test_peers_benchmark_prints_the_floor_beside_the_memory():
    """benchmarks/peers.py with our method only, at a small N: its last line carries
    ``bytes_per_var`` and the floor measured in the same run (Ipopt alone plus the least
    Pyomo model), whose ratio it prints."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
    out = subprocess.run([sys.executable, str(script), "1000", "--methods", "ours",
                          "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    fields = dict(kv.split("=") for kv in last.split()[1:])
    assert last.startswith("peers: N=1000 ")
    mem, floor = float(fields["bytes_per_var"]), float(fields["floor_bytes_per_var"])
    assert mem > 0 and floor > 0
    assert float(fields["over_floor"]) == pytest.approx(mem / floor, rel=2e-3)
