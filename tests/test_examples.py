"""Every file of ``examples/`` runs as its usage line says and ends with its summary line.

The long studies run in their small-size mode (``PYOMO_ODEEST_EXAMPLE_QUICK=1``, read by
each example that has one); examples that need an optional package are marked ``extras``
and skipped where it is not installed; the model file runs through the command line.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"

#: script -> (first word of its last line, optional modules it needs, extra arguments;
#: "{out}" is the test's temporary directory; an output directory "{out}/figures" does not
#: exist before the run: the example creates it)
SCRIPTS = {
    "adaptive_tolerance.py": (None, (), []),
    "convergence.py": ("convergence:", (), ["{out}/figures"]),
    "doe_lotka_volterra.py": ("doe:", ("pyomo.contrib.doe",), []),
    "hiv.py": ("hiv:", (), ["{out}/figures"]),
    "idaes_cstr.py": ("idaes_cstr:", ("idaes",), []),
    "lotka_volterra_study.py": ("lv_study:", (), ["{out}/lv_study.png"]),
    "multi_experiment.py": ("multi_experiment:", (), []),
    "parmest_rooney_biegler.py": ("parmest:", ("pyomo.contrib.parmest.parmest",), []),
    "seird.py": ("seird:", (), ["{out}"]),
    "uncertainty.py": (None, (), ["--plots", "{out}/figures"]),
}
#: problem files of the command line -> their data file
MODEL_FILES = {"lotka_volterra_model.py": "lotka_volterra_data.csv"}
#: optional packages beyond the test extra (pyomo.contrib.doe and parmest come with Pyomo but
#: need its optional dependencies)
EXTRAS = {"doe_lotka_volterra.py", "idaes_cstr.py", "parmest_rooney_biegler.py"}


def _env():
    env = dict(os.environ, PYOMO_ODEEST_EXAMPLE_QUICK="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=1800)
    tail = "\n".join((r.stdout + "\n" + r.stderr).strip().splitlines()[-40:])
    assert r.returncode == 0, tail
    return r


def test_every_example_file_is_run_here():
    files = {p.name for p in EX.glob("*.py")}
    assert files == set(SCRIPTS) | set(MODEL_FILES), (
        files ^ (set(SCRIPTS) | set(MODEL_FILES)))


def _params():
    for name in sorted(SCRIPTS):
        marks = [pytest.mark.extras] if name in EXTRAS else []
        yield pytest.param(name, marks=marks, id=name[:-3])


@pytest.mark.parametrize("name", list(_params()))
def test_example_runs(name, tmp_path):
    last, needs, args = SCRIPTS[name]
    for mod in needs:
        pytest.importorskip(mod)
    if name == "uncertainty.py" or "{out}" in "".join(args):
        pytest.importorskip("matplotlib")
    args = [a.replace("{out}", str(tmp_path)) for a in args]
    r = _run([sys.executable, str(EX / name), *args], tmp_path)
    if last is not None:
        assert r.stdout.strip().splitlines()[-1].startswith(last), r.stdout[-2000:]


@pytest.mark.parametrize("name", sorted(MODEL_FILES))
def test_model_file_runs_through_the_command_line(name, tmp_path):
    out = tmp_path / "out"
    _run([sys.executable, "-m", "pyomo_odeest.cli", str(EX / name), str(EX / MODEL_FILES[name]),
          "--out", str(out), "--no-plot"], tmp_path)
    assert (out / "estimates.csv").exists()
