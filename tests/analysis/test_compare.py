"""``compare_approaches`` side by side (``benchmarks/choosing.py``, the table of
docs/choosing.md)."""
import importlib.util
import re

from helpers import ROOT


def test_choosing_benchmark_quick_every_approach_converges_to_the_same_fit(capsys):
    """benchmarks/choosing.py --quick: on the Lotka–Volterra problem from p = 0.8 every
    approach (simultaneous, reduced space, multiple shooting, continuous with Ipopt and
    with least squares) converges (a success: converged, or Ipopt's acceptable level,
    which the continuous approach's integration error can make it stop at), to
    objectives within the discretization's 1e-3, and the last line keeps its form."""
    spec = importlib.util.spec_from_file_location("choosing", ROOT / "benchmarks" / "choosing.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    rows = [ln for ln in out if re.match(r"^(simultaneous|reduced_space|multiple_shooting|"
                                         r"continuous)", ln)]
    assert len(rows) == 5 and all(re.search(r" (converged|acceptable) / ", ln) for ln in rows), rows
    last = dict(kv.split("=") for kv in out[-1].split(": ", 1)[1].split())
    assert out[-1].startswith("choosing: ") and set(last) == {"lv_fastest", "lv_spread", "engine"}
    assert float(last["lv_spread"]) < 1e-3


def test_compare_approaches_takes_approach_classes_and_objects():
    """A user's approach class or object sits in the comparison beside the names,
    labelled by its ``name`` (or the triple's label), with the common settings it takes."""
    import numpy as np
    import pyomo_odeest as po
    from pyomo_odeest.models import lotka_volterra_problem
    from pyomo_odeest.approaches import approach_class

    class Mine(approach_class("reduced_space")):
        name = "mine"

    problem = lotka_volterra_problem(p0=(0.8,) * 4)
    table, results = po.compare_approaches(
        problem, ["reduced_space", Mine, ("mine_lbfgsb", Mine(optimizer="L-BFGS-B"), None)],
        steps_per_interval=5, progress=False)
    assert list(table.index) == ["reduced_space", "mine", "mine_lbfgsb"]
    assert table["success"].all(), table["status"]
    assert results["mine"].approach == "mine" and results["mine_lbfgsb"].method != results["mine"].method
    ref = results["reduced_space"].estimates.to_numpy()
    for key in ("mine", "mine_lbfgsb"):
        np.testing.assert_allclose(results[key].estimates.to_numpy(), ref, rtol=1e-4)
