"""The command line runs the Lotka–Volterra example from its problem file."""
import json
from pathlib import Path

import pandas as pd
import pytest

from pyomo_odeest.cli import main

EX = Path(__file__).resolve().parents[1] / "examples"


def test_cli_writes_csv_json_png(tmp_path):
    out = tmp_path / "lv"
    rc = main([str(EX / "lotka_volterra_model.py"), str(EX / "lotka_volterra_data.csv"),
               "--out", str(out)])
    assert rc == 0
    est = pd.read_csv(out / "estimates.csv", index_col=0)
    assert (est["estimate"] - 1.0).abs().max() < 0.1
    assert (out / "fit.png").stat().st_size > 10_000
    info = json.loads((out / "result.json").read_text())
    assert info["status"] == "Solve_Succeeded" and info["approach"] == "simultaneous"
    assert pd.read_csv(out / "states.csv").shape[0] == 101


def test_cli_compare_and_options(tmp_path):
    out = tmp_path / "cmp"
    main([str(EX / "lotka_volterra_model.py"), str(EX / "lotka_volterra_data.csv"), "--approach",
          "compare", "--scheme", "enright", "--qmax", "3", "--steps-per-interval", "5", "--no-plot",
          "--max-iter", "60",
          "--out", str(out)])
    tab = pd.read_csv(out / "comparison.csv", index_col=0)
    assert "simultaneous" in tab.index and "reduced_space" in tab.index
    assert not (out / "fit.png").exists()


def test_cli_bad_input(tmp_path):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope.py"), str(EX / "lotka_volterra_data.csv")])
    with pytest.raises(SystemExit):
        main([str(EX / "lotka_volterra_model.py"), str(EX / "lotka_volterra_data.csv"),
              "--scheme", "rk4"])
    bad = tmp_path / "bad.csv"
    bad.write_text("time,x1,prey\n1,0.5,0.5\n")
    with pytest.raises(SystemExit, match="prey"):
        main([str(EX / "lotka_volterra_model.py"), str(bad), "--out", str(tmp_path / "o")])
