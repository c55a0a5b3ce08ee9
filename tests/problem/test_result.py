"""The JSON form of a result: every frame keeps its index (with several experiments
the ``(experiment, time)`` levels), and a tampered file is refused field by field."""
import json

import numpy as np
import pandas as pd
import pytest

from pyomo_odeest import EstimationProblem, EstimationResult, Experiment, Parameter, estimate


@pytest.fixture(scope="module")
def two_experiments():
    t = np.linspace(0.5, 3.0, 6)
    exps = [Experiment("e1", pd.DataFrame({"x": 2.0 * np.exp(-0.7 * t)}, index=t)),
            Experiment("e2", pd.DataFrame({"x": 1.0 * np.exp(-0.7 * t[:4])}, index=t[:4]),
                       parameters={"x0": 1.0})]
    prob = EstimationProblem(states=["x"], parameters=[Parameter("k", 0.5, 0, 5),
                                                      Parameter("x0", 2.0, 0, 5, local=True)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "x0"}, data=None,
                             experiments=exps)
    return {a: estimate(prob, a) for a in ("simultaneous", "reduced_space")}


def _frames(res):
    out = {f: getattr(res, f) for f in ("states", "fitted", "residuals", "adjoint")}
    out.update({f"multipliers[{k}]": v for k, v in res.multipliers.items()})
    return {k: v for k, v in out.items() if v is not None}


def test_frames_of_two_experiments_round_trip(two_experiments, tmp_path):
    for approach, res in two_experiments.items():
        frames = _frames(res)
        assert isinstance(res.states.index, pd.MultiIndex)
        assert any(k.startswith("multipliers") for k in frames) or approach != "simultaneous"
        for back in (EstimationResult.from_json(res.to_json()),
                     EstimationResult.from_json(res.to_json(tmp_path / f"{approach}.json"))):
            again = _frames(back)
            assert again.keys() == frames.keys()
            for k, v in frames.items():
                pd.testing.assert_frame_equal(v, again[k], check_exact=True, obj=k)
            pd.testing.assert_series_equal(back.estimates, res.estimates, check_exact=True)
            pd.testing.assert_frame_equal(back.states.loc["e1"], res.states.loc["e1"])
            pd.testing.assert_frame_equal(back.residuals.loc["e2"], res.residuals.loc["e2"])
            assert back.status is res.status


def test_tables_of_mixed_columns_keep_their_types():
    res = EstimationResult("simultaneous", "m", None, pd.Series({"k": 1.0}), 0.5,
                           "converged", 3, extra={"table": pd.DataFrame(
                               {"name": ["a", "b"], "value": [1.5, 2.0], "n": [1, 2],
                                "ok": [True, False]}, index=pd.Index([0.5, 1.0], name="t"))})
    back = EstimationResult.from_json(res.to_json())
    pd.testing.assert_frame_equal(back.extra["table"], res.extra["table"], check_exact=True)


@pytest.fixture(scope="module")
def text(two_experiments):
    return json.loads(two_experiments["reduced_space"].to_json())


@pytest.mark.parametrize("field, value, match", [
    ("status", "weird", "'status' must be one of"),
    ("status", 3, "'status'"),
    ("estimates", [0.7, 2.0], "'estimates' must be a mapping of parameter names"),
    ("estimates", {"__dict__": [["k", "fast"]]}, "'estimates'"),
    ("estimates", 0.7, "'estimates'"),
    ("objective", "small", "'objective' must be a number"),
    ("iterations", 2.5, "'iterations' must be an integer"),
    ("approach", ["reduced_space"], "'approach' must be a string"),
    ("warnings", "none", "'warnings' must be a list of strings"),
    ("states", [[1.0, 2.0]], "'states' must be a table"),
    ("multipliers", {"__dict__": [["x", 1.0]]}, "'multipliers' must be a mapping"),
    ("timings", [1.0], "'timings' must be a mapping"),
    ("scheme", 5, "'scheme' must be null or"),
    ("fitted", {"__frame__": {"index": {"levels": ["t"], "values": [0.5]},
                              "columns": {"levels": [None], "values": ["x"]},
                              "numeric": True, "data": [[1.0], [2.0]]}},
     "field 'fitted' cannot be read: ValueError: a frame of 1 rows and 1 columns holds 2"),
    ("residuals", {"__frame__": {"index": {"levels": ["experiment", "time"],
                                           "values": [["e1"]]},
                                 "columns": {"levels": [None], "values": ["x"]},
                                 "numeric": True, "data": [[1.0]]}},
     "field 'residuals' cannot be read: .*2 levels"),
    ("extra", {"__frame__": {"index": [0.5]}}, "field 'extra' cannot be read: KeyError"),
    ("adjoint", {"__series__": {"index": {"levels": [None], "values": [1, 2]}, "name": None,
                                "data": [1.0]}}, "field 'adjoint' cannot be read: .*shape"),
])
def test_tampered_fields_are_refused_by_name(text, field, value, match):
    bad = dict(text, **{field: value})
    with pytest.raises(ValueError, match=match):
        EstimationResult.from_json(json.dumps(bad))


def test_missing_fields_and_a_non_mapping_are_refused(text, tmp_path):
    with pytest.raises(ValueError, match=r"missing field\(s\) \['status'\]"):
        EstimationResult.from_dict({k: v for k, v in text.items() if k != "status"})
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="needs a mapping"):
        EstimationResult.from_json(path)


def test_estimates_as_a_plain_mapping_are_read():
    """A hand-written file may give the estimates as ``{name: value}``."""
    back = EstimationResult.from_dict({"approach": "simultaneous", "method": "m",
                                       "scheme": None, "estimates": {"k": 0.7, "x0": 2},
                                       "objective": 1.0, "status": "converged",
                                       "iterations": 4})
    pd.testing.assert_series_equal(back.estimates, pd.Series({"k": 0.7, "x0": 2.0}))
    assert "k=0.7" in back.summary()
