"""Figures for a report: result.plot(), bands of several experiments, profiles with
their points, the multistart waterfall; equivalent minima in a multistart."""
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from pyomo_odeest import EstimationProblem, Experiment, Parameter, estimate  # noqa: E402

T = np.linspace(0.5, 6.0, 12)


def _two_experiments(sigma=0.02):
    """x' = −k x with a local x(0) per experiment, y = x observed; the second
    experiment also measures z' = k x − 0.2 z."""
    rng = np.random.default_rng(4)
    frames = []
    for x0 in (1.0, 2.0):
        x = x0 * np.exp(-0.5 * T)
        z = x0 * 0.5 / (0.2 - 0.5) * (np.exp(-0.5 * T) - np.exp(-0.2 * T))
        frames.append(pd.DataFrame({"x": x, "z": z}, index=pd.Index(T, name="time"))
                      + sigma * rng.standard_normal((len(T), 2)))
    exps = [Experiment("low", frames[0][["x"]], sigma=sigma),
            Experiment("high", frames[1], sigma=sigma)]
    return EstimationProblem(["x", "z"], [Parameter("k", 0.3, lb=0),
                                          Parameter("x0", 1.5, local=True)],
                             rhs=lambda x, u, t: [-u.k * x.x, u.k * x.x - 0.2 * x.z],
                             initial={"x": "x0", "z": 0.0}, data=None, experiments=exps)


@pytest.fixture(scope="module")
def fit():
    P = _two_experiments()
    res = estimate(P, "reduced_space", max_step=0.1)
    assert res.success
    return P, res


def test_result_plot_panels_error_bars_and_residuals(fit, tmp_path):
    P, res = fit
    fig = res.plot(path=tmp_path / "fit.png")
    assert (tmp_path / "fit.png").stat().st_size > 0
    # three panels (low: x; high: x, z), each with a residual panel below
    assert len(fig.axes) == 6
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles == ["low: x", "high: x", "high: z"]
    top = [a for a in fig.axes if a.get_title()]
    # σ known: error bars (an errorbar container) on every data panel
    assert all(a.containers for a in top)
    residual_axes = [a for a in fig.axes if not a.get_title()]
    assert all(a.get_xlabel() == "time" for a in residual_axes)
    assert all(a.get_ylabel() == "residual / σ" for a in residual_axes)
    # the residual panel shows (data − fit)/σ at the measurement times
    pts = residual_axes[0].lines[-1]
    expected = -res.residuals.loc["low"]["x"].dropna() / 0.02
    np.testing.assert_allclose(pts.get_ydata(), expected.to_numpy(), rtol=1e-10)
    fig = res.plot(bands=True, residuals=False)
    assert len(fig.axes) == 3 and all(a.get_xlabel() == "time" for a in fig.axes)


def test_prediction_bands_for_two_experiments(fit):
    P, res = fit
    bands = res.prediction_bands()
    assert list(dict.fromkeys(bands.value.index.get_level_values(0))) == ["low", "high"]
    # x(t) = x0_e exp(−k t): the band of x at t = 0 is the interval of the local x0
    cov = res.covariance()
    for e in ("low", "high"):
        se0 = bands.se.loc[e]["x"].iloc[0]
        assert se0 == pytest.approx(cov.se[f"x0_{e}"], rel=1e-6)
    fig = bands.plot(data=P)
    shown = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in shown] == ["low: x", "high: x", "high: z"]
    assert all(a.get_xlabel() == "time" and a.containers for a in shown)   # data ± σ


def test_profile_plot_shows_computed_points_and_threshold(fit):
    P, res = fit
    pr = res.profile(parameters=["k"], max_points=10)
    fig = pr.plot()
    a = fig.axes[0]
    pts = a.lines[0]
    np.testing.assert_allclose(pts.get_xdata(), pr.curves["k"]["value"].sort_values())
    assert pts.get_marker() == "o" and pts.get_linestyle() == "None"
    assert any(np.allclose(line.get_ydata(), pr.threshold) for line in a.lines[1:]
               if len(line.get_ydata()) == 2)


def _symmetric_problem():
    """y = x1 + x2 with x1' = −k1 x1, x2' = −k2 x2, x1(0) = x2(0) = 1: (k1, k2) and
    (k2, k1) are two isolated minima with the same objective and the same fit."""
    t = np.linspace(0.2, 5, 15)
    y = np.exp(-0.3 * t) + np.exp(-1.2 * t)
    y = y + 0.01 * np.random.default_rng(1).standard_normal(len(t))
    return EstimationProblem(["x1", "x2"], [Parameter("k1", 0.5, lb=0.05, ub=5),
                                            Parameter("k2", 1.0, lb=0.05, ub=5)],
                             rhs=lambda x, u, t: [-u.k1 * x.x1, -u.k2 * x.x2],
                             initial={"x1": 1.0, "x2": 1.0},
                             observe=lambda x, u, t: {"y": x.x1 + x.x2},
                             data=pd.DataFrame({"y": y}, index=pd.Index(t, name="time")),
                             sigma=0.01)


def test_equivalent_minima_are_not_spurious_and_waterfall(tmp_path):
    from pyomo_odeest.runner import multistart
    P = _symmetric_problem()
    ms = multistart(P, n=0, approach="reduced_space", options=dict(max_step=0.05),
                    starts=[[0.2, 1.5], [1.5, 0.2], [0.4, 0.9], [2.0, 0.1]])
    ok = ms.table[ms.table["success"].astype(bool)]
    assert len(ok) >= 3
    np.testing.assert_allclose(ok["objective"], ok["objective"].min(), rtol=1e-6)
    assert (ok["p_k1"] < ok["p_k2"]).any() and (ok["p_k1"] > ok["p_k2"]).any()
    assert ms.spurious.empty and ms.equivalent and len(ms.clusters) == 1
    assert int(ms.clusters["parameter_sets"].iloc[0]) == 2
    assert "equivalent minima" in ms.summary()
    fig = ms.plot(path=tmp_path / "waterfall.png")
    assert fig.axes[0].get_xlabel().startswith("start")
    # by parameters alone the minimum holding the swapped values would be "spurious"
    from pyomo_odeest.runner import cluster_end_points
    _, by_parameters = cluster_end_points(ms.table, P.parameter_names)
    assert len(by_parameters) == 2


def test_clustering_by_fit_needs_the_same_objective():
    from pyomo_odeest.runner import cluster_end_points
    tab = pd.DataFrame({"p_a": [1.0, 2.0, 3.0], "objective": [1.0, 1.0, 2.0],
                        "success": [True, True, True]})
    same = np.array([1.0, 2.0, 3.0])
    labels, cl = cluster_end_points(tab, ["a"], fits={0: same, 1: same + 1e-9, 2: same})
    assert list(labels) == [0, 0, 1] and list(cl["parameter_sets"]) == [2, 1]
    labels, _ = cluster_end_points(tab, ["a"], fits={0: same, 1: same + 0.1, 2: same})
    assert list(labels) == [0, 1, 2]                 # other fit, same objective: distinct
    labels, _ = cluster_end_points(tab, ["a"])       # without fits: by parameters only
    assert list(labels) == [0, 1, 2]
