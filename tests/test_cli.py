"""The command line: the Lotka–Volterra example end to end, and every error as
one ``error: ...`` line with exit code 2 (usage) or 1 (failed estimation)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pyomo_odeest.cli import main

EX = Path(__file__).resolve().parents[1] / "examples"
LV = [str(EX / "lotka_volterra_model.py"), str(EX / "lotka_volterra_data.csv")]

DECAY = '''
from pyomo_odeest import Parameter
states = ["x"]
parameters = [Parameter("k", 0.7, lb=0.0)]
def rhs(x, u, t):
    return [-u.k * x.x]
initial = {"x": 2.0}
'''


def test_cli_writes_csv_json_png(tmp_path):
    out = tmp_path / "lv"
    rc = main(LV + ["--out", str(out)])
    assert rc == 0
    est = pd.read_csv(out / "estimates.csv", index_col=0)
    assert (est["estimate"] - 1.0).abs().max() < 0.1
    assert (out / "fit.png").stat().st_size > 10_000
    info = json.loads((out / "result.json").read_text())
    assert info["success"] and info["approach"] == "simultaneous"
    assert isinstance(info["warnings"], list)
    assert pd.read_csv(out / "states.csv").shape[0] == 101


@pytest.fixture
def noisy_decay(tmp_path):
    t = np.linspace(0.5, 3.0, 6)
    noise = np.array([0.021, -0.013, 0.008, -0.017, 0.011, 0.004])
    data = tmp_path / "noisy.csv"
    pd.DataFrame({"time": t, "x": 2 * np.exp(-t) + noise}).to_csv(data, index=False)
    model = tmp_path / "model.py"
    model.write_text(DECAY)
    return tmp_path, model, data


def test_cli_approaches_are_the_front_doors():
    from pyomo_odeest.approaches import APPROACH_NAMES
    from pyomo_odeest.cli import APPROACHES, _parser
    assert APPROACHES == tuple(APPROACH_NAMES) + ("compare",)
    for a in APPROACHES:
        assert _parser().parse_args(["m.py", "d.csv", "--approach", a]).approach == a


def test_cli_estimates_have_standard_errors_and_intervals(noisy_decay, capsys):
    """estimates.csv, result.json and the printed table carry the standard errors and
    intervals of the result's own covariance."""
    from pyomo_odeest import EstimationProblem, Parameter, estimate
    tmp, model, data = noisy_decay
    out = tmp / "se"
    assert main([str(model), str(data), "--approach", "reduced_space", "--level", "0.9",
                 "--no-plot", "--out", str(out)]) == 0
    assert "se" in capsys.readouterr().out
    est = pd.read_csv(out / "estimates.csv", index_col=0)
    assert {"estimate", "se", "lower", "upper"} <= set(est.columns)
    d = pd.read_csv(data).set_index("time")
    prob = EstimationProblem(states=["x"], parameters=[Parameter("k", 0.7, lb=0.0)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": 2.0}, data=d)
    ref = estimate(prob, "reduced_space", steps_per_interval=10).confidence_intervals(0.9)
    assert est.loc["k", "se"] > 0
    assert est.loc["k", "se"] == pytest.approx(ref.loc["k", "se"], rel=1e-3)
    assert est.loc["k", "lower"] == pytest.approx(ref.loc["k", "lower"], rel=1e-3)
    assert est.loc["k", "lower"] < est.loc["k", "estimate"] < est.loc["k", "upper"]
    info = json.loads((out / "result.json").read_text())
    assert info["standard_errors"]["k"] == pytest.approx(est.loc["k", "se"])
    assert info["level"] == 0.9


def test_cli_compare_writes_one_table_of_every_approach(noisy_decay, capsys):
    """``--approach compare``: one row per approach of ``estimate`` (estimates, standard
    errors, objective, status, time), no single approach's estimates.csv; options an
    approach does not take are named in a note."""
    from pyomo_odeest.approaches import APPROACH_NAMES
    tmp, model, data = noisy_decay
    out = tmp / "cmp"
    rc = main([str(model), str(data), "--approach", "compare", "--scheme", "enright",
               "--qmax", "3", "--steps-per-interval", "5", "--no-plot", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0
    assert "the continuous approach does not take" in err and "scheme" in err
    tab = pd.read_csv(out / "comparison.csv", index_col=0)
    assert list(tab.index) == list(APPROACH_NAMES)
    assert {"status", "success", "objective", "iterations", "wall_s", "k", "se_k"} <= set(tab.columns)
    ok = tab[tab["success"]]
    assert {"simultaneous", "reduced_space", "multiple_shooting", "continuous"} <= set(ok.index)
    assert (ok["k"] - ok["k"].mean()).abs().max() < 1e-2
    assert (ok["se_k"] > 0).all() and (ok["wall_s"] > 0).all()
    assert not (out / "estimates.csv").exists()
    info = json.loads((out / "result.json").read_text())
    assert set(info) == set(APPROACH_NAMES)
    assert info["reduced_space"]["standard_errors"]["k"] == pytest.approx(ok.loc["reduced_space", "se_k"])


@pytest.fixture
def decay_files(tmp_path):
    t = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
    data = tmp_path / "data.csv"
    pd.DataFrame({"time": t, "x": 2 * np.exp(-t)}).to_csv(data, index=False)
    model = tmp_path / "model.py"
    model.write_text(DECAY)
    return tmp_path, model, data


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


USAGE_ERRORS = [
    ("steps_zero", ["--steps-per-interval", "0"], "steps-per-interval.*out of range"),
    ("qmax_zero", ["--qmax", "0"], r"qmax.*valid 2\.\.8"),
    ("qmax_99", ["--qmax", "99"], r"qmax.*valid 2\.\.8"),
    ("max_step_negative", ["--max-step", "-1"], "max-step.*positive"),
    ("max_step_text", ["--max-step", "small"], "max-step.*not a number"),
    ("tol_zero", ["--tol", "0"], "tol.*positive"),
    ("scheme_unknown", ["--scheme", "rk4"], "invalid choice: 'rk4'"),
    ("approach_unknown", ["--approach", "bayes"], "invalid choice: 'bayes'"),
    ("both_grids", ["--max-step", "0.1", "--steps-per-interval", "2"], "not allowed with"),
]


@pytest.mark.parametrize("case", USAGE_ERRORS, ids=[c[0] for c in USAGE_ERRORS])
def test_cli_bad_options_are_one_error_line(case, decay_files, capsys):
    tmp, model, data = decay_files
    _, extra, pattern = case
    rc = main([str(model), str(data), "--out", str(tmp / "o")] + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert __import__("re").search(pattern, err[0]), err


BAD_FILES = [
    ("model_missing", lambda d: (str(d / "nope.py"), None), "model file .*nope.py not found"),
    ("model_syntax", lambda d: (_write(d, "m.py", "states = [\n"), None), r"line \d+: syntax error"),
    ("model_raises", lambda d: (_write(d, "m.py", "import nonexistent_module_xyz\n"), None),
     "failed to run: ModuleNotFoundError"),
    ("model_incomplete", lambda d: (_write(d, "m.py", "states = ['x']\n"), None),
     "must define parameters, rhs, initial"),
    ("model_bad_options", lambda d: (_write(d, "m.py", DECAY + "options = {'qmx': 3}\n"), None),
     r"unknown key\(s\) \['qmx'\]"),
    ("model_options_qmax_zero", lambda d: (_write(d, "m.py", DECAY + "options = {'qmax': 0}\n"),
                                           None), r"qmax must be an integer in \[2, 8\], got 0"),
    ("model_options_steps_zero", lambda d: (_write(
        d, "m.py", DECAY + "options = {'steps_per_interval': 0}\n"), None),
     "steps_per_interval must be an integer >= 1, got 0"),
    ("data_missing", lambda d: (None, str(d / "nope.csv")), "data file .*nope.csv not found"),
    ("data_empty", lambda d: (None, _write(d, "e.csv", "")), "is empty"),
    ("data_header_only", lambda d: (None, _write(d, "e.csv", "time,x\n")), "no rows"),
    ("data_no_time", lambda d: (None, _write(d, "e.csv", "t,x\n1,2\n")), "needs a 'time' column"),
    ("data_malformed", lambda d: (None, _write(d, "e.csv", 'time,x\n1,"2\n3,4,5,6\n')),
     "not a readable CSV"),
    ("data_non_numeric", lambda d: (None, _write(d, "e.csv", "time,x\n1,0.7\n2,abc\n")),
     r"column 'x'.*'abc'"),
    ("data_unknown_column", lambda d: (None, _write(d, "e.csv", "time,x,prey\n1,0.5,0.5\n")),
     "prey"),
    ("data_duplicate_time", lambda d: (None, _write(d, "e.csv", "time,x\n1,0.7\n1,0.6\n")),
     "duplicates"),
]


@pytest.mark.parametrize("case", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_cli_bad_files_are_one_error_line(case, decay_files, capsys):
    tmp, model, data = decay_files
    _, make, pattern = case
    m, d = make(tmp)
    rc = main([m or str(model), d or str(data), "--out", str(tmp / "o"), "--no-plot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert __import__("re").search(pattern, err[0]), err


def test_cli_failed_estimation_exit_1(decay_files, capsys):
    tmp, model, data = decay_files
    rc = main([str(model), str(data), "--max-iter", "1", "--no-plot", "--out", str(tmp / "o")])
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.strip().startswith("error: the estimation did not converge")
    assert "WARNING: not converged" in captured.out


def test_cli_penalty_in_model_file_is_used(decay_files):
    tmp, model, data = decay_files
    pen = _write(tmp, "pen.py", DECAY + "def penalty(u):\n    return 1e4 * (u.k - 0.5) ** 2\n")
    for m, out in ((str(model), "a"), (pen, "b")):
        assert main([m, str(data), "--no-plot", "--out", str(tmp / out)]) == 0
    plain = pd.read_csv(tmp / "a" / "estimates.csv", index_col=0)["estimate"]["k"]
    pulled = pd.read_csv(tmp / "b" / "estimates.csv", index_col=0)["estimate"]["k"]
    assert plain == pytest.approx(1.0, abs=1e-3)
    assert abs(pulled - 0.5) < 0.01


@pytest.mark.parametrize("approach", ["reduced_space", "multiple_shooting"])
def test_cli_tee_for_every_approach(approach, decay_files, capfd):
    tmp, model, data = decay_files
    rc = main([str(model), str(data), "--approach", approach, "--tee", "--no-plot",
               "--out", str(tmp / approach)])
    assert rc == 0
    assert "iter    objective" in capfd.readouterr().out


def test_cli_zero_is_not_replaced_by_a_default(decay_files, capsys):
    """``--max-iter 0`` is a value (Ipopt stops at once), not 'use the default'."""
    tmp, model, data = decay_files
    rc = main([str(model), str(data), "--max-iter", "0", "--no-plot", "--out", str(tmp / "z")])
    assert rc == 1
    info = json.loads((tmp / "z" / "result.json").read_text())
    assert info["iterations"] == 0 and info["status"] == "max_iterations"
