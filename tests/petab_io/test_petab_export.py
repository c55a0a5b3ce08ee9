"""write_petab: what it writes is what the problem states (scales, bounds, inputs switched
in time), and it writes into its folder or says why not."""
import math
import os

import numpy as np
import pandas as pd
import pytest

petab = pytest.importorskip("petab")
pytest.importorskip("libsbml")

from pyomo_odeest import EstimationProblem, Experiment, Parameter  # noqa: E402
from pyomo_odeest.petab_io import petab_problem, read_petab, write_petab  # noqa: E402
from pyomo_odeest.problem import PiecewiseConstant  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from petab_io.test_petab import _round_trip  # noqa: E402

pytestmark = pytest.mark.extras

A, B, X0, SIGMA = 0.3, 0.5, 0.5, 0.05     # u = log10 of the rates: F(t) 10^A - 10^B x


def closed(t, t_on, a=A, b=B):
    """x' = 10^a F(t) - 10^b x, F = 0 before t_on and 1 after, x(0) = X0."""
    sol = solve_ivp(lambda s, x: [10**a * (s >= t_on) - 10**b * x[0]], (0, max(t)), [X0],
                    t_eval=t, rtol=1e-11, atol=1e-12, max_step=0.01)
    return sol.y[0]


def switched_problem(switch_times=(2.0,)):
    """One experiment per switching time; log10 rates without bounds."""
    t = np.linspace(0.5, 6.0, 12)
    rng = np.random.default_rng(3)

    def data(t_on):
        return pd.DataFrame({"x": closed(t, t_on) + SIGMA * rng.standard_normal(len(t))},
                            index=t)

    def F(t_on):
        return {"F": PiecewiseConstant([0.0, t_on], [0.0, 1.0])}
    kw = dict(states=["x"], parameters=[Parameter("a", 0.2), Parameter("b", 0.4)],
              rhs=lambda x, u, t: [10**u.a * u.F - 10**u.b * x.x], initial={"x": X0},
              name="switched")
    if len(switch_times) == 1:
        return EstimationProblem(**kw, data=data(switch_times[0]), sigma=SIGMA,
                                 inputs=F(switch_times[0]))
    return EstimationProblem(**kw, data=None, experiments=[
        Experiment(f"e{i + 1}", data(t_on), sigma=SIGMA, inputs=F(t_on))
        for i, t_on in enumerate(switch_times)])


@pytest.mark.parametrize("switch_times", [(2.0,), (2.0, 3.5)], ids=["one", "two"])
def test_switched_input_log10_unbounded_round_trip(tmp_path, switch_times):
    """Same NLL (the import's discretized objective against the original's), log10 scales,
    no invented bounds, and the input read back as an input switched at its time."""
    prob = switched_problem(switch_times)
    pe, folder = _round_trip(prob, tmp_path)
    par = pd.read_csv(folder / "parameters_switched.tsv", sep="\t", index_col="parameterId")
    assert par["parameterScale"].tolist() == ["log10", "log10"]
    assert par["lowerBound"].tolist() == [0.0, 0.0]
    assert par["upperBound"].tolist() == [math.inf, math.inf]
    np.testing.assert_allclose(par["nominalValue"], [10**0.2, 10**0.4], rtol=1e-14)
    model = read_petab(folder / "switched.yaml")
    assert [p.scale for p in model.parameters] == ["log10", "log10"]
    back = pe.problem
    assert [(p.lb, p.ub) for p in back.parameters if not p.fixed] == [(None, None)] * 2
    np.testing.assert_allclose(back.u0[back.free_mask], prob.u0, rtol=1e-14)
    subs = back.experiment_problems or [back]
    for sp, t_on in zip(subs, switch_times):
        assert t_on in set(np.round(sp.switch_times, 12))
    # the written problem's NLL by PEtab's own simulation: the closed form's
    t = np.linspace(0.5, 6.0, 12)
    nll = 0.0
    for sp, t_on in zip(prob.experiment_problems or [prob], switch_times):
        r = closed(t, t_on, a=0.2, b=0.4) - sp.data["x"].to_numpy()
        nll += np.sum(0.5 * np.log(2 * np.pi * SIGMA**2) + 0.5 * (r / SIGMA) ** 2)
    assert pe.simulated_nll() == pytest.approx(nll, rel=1e-7)


def test_declared_scale_that_the_formulas_do_not_show_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"scales\['a'\] = 'log'.*exp\(a\)"):
        write_petab(switched_problem(), tmp_path / "out", scales={"a": "log"})


def test_name_cannot_leave_the_folder(tmp_path):
    out = tmp_path / "inner" / "out"
    with pytest.raises(ValueError, match=r"name='\.\./escaped' must be a plain file name"):
        write_petab(switched_problem(), out, name="../escaped")
    assert not (tmp_path / "inner" / "escaped.yaml").exists()
    assert not out.exists()


def test_model_that_cannot_be_written_is_an_error(tmp_path):
    out = tmp_path / "out"
    (out / "model_switched.xml").mkdir(parents=True)    # a folder where the file would go
    with pytest.raises(OSError, match=r"SBML model could not be written.*model_switched\.xml"):
        write_petab(switched_problem(), out)
    assert not (out / "switched.yaml").exists()
