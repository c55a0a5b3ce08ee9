"""Progress lines and the time limit are the pipeline's (``Approach.estimate``): every
approach, the front door's names and a user's class alike, prints them with
``progress=True`` (also when standard error is not a terminal, as under pytest) and
stops at ``max_wall_time``, whatever its solve hook tells its optimizer."""
import re

import numpy as np
import pandas as pd
import pytest

import pyomo_odeest as po
from pyomo_odeest import APPROACH_NAMES, EstimationProblem, Parameter, Status

from user_approaches import PlainIpoptReduced

T = np.linspace(0.5, 3.0, 6)
#: small fits: a few steps per interval, one solve (no refinement rounds)
OPTS = {"simultaneous": dict(steps_per_interval=5, certify=False),
        "reduced_space": dict(steps_per_interval=5, certify=False),
        "multiple_shooting": dict(steps_per_interval=5, nodes=(0.0, 3.0), certify=False),
        "continuous": {},
        "adaptive": dict(certify=False),
        PlainIpoptReduced: dict(steps_per_interval=5, certify=False)}
#: a line of the optimizers' iteration progress (Ipopt's or a SciPy optimizer's)
ITERATION = re.compile(r"^\S+\s+iter\s+\d+\s+objective\s", re.M)


def decay():
    """x' = -k x, x(0) = 2, data exact at k = 0.7."""
    return EstimationProblem(["x"], [Parameter("k", 0.5, lb=0.0), Parameter("c", 2.0, fixed=True)],
                             rhs=lambda x, u, t: [-u.k * x.x], initial={"x": "c"},
                             data=pd.DataFrame({"x": 2 * np.exp(-0.7 * T)}, index=T), sigma=0.05)


def _name(approach):
    return approach if isinstance(approach, str) else approach.name


@pytest.mark.parametrize("approach", APPROACH_NAMES + (PlainIpoptReduced,),
                         ids=lambda a: _name(a))
def test_progress_true_prints_lines_in_every_approach(approach, capsys):
    res = po.estimate(decay(), approach, progress=True, **OPTS[approach])
    err = capsys.readouterr().err
    name = _name(approach)
    assert res.success and res.approach == name, res.summary()
    assert len(ITERATION.findall(err)) >= 2, err                # the first and the last
    start = re.search(rf"^{name}: solving for 1 parameter \(built in [\d.]+ s\)$", err, re.M)
    end = re.search(rf"^{name}: converged after \d+ iterations in [\d.]+ s$", err, re.M)
    assert start and end and start.start() < ITERATION.search(err).start() < end.start(), err


@pytest.mark.parametrize("progress", [None, False])
def test_no_progress_lines_unless_asked_off_a_terminal(progress, capsys):
    """Standard error is not a terminal here: None (the default) and False are silent."""
    res = po.estimate(decay(), PlainIpoptReduced, progress=progress,
                      **OPTS[PlainIpoptReduced])
    assert res.success
    assert capsys.readouterr().err == ""


def test_a_user_solve_hook_stops_at_max_wall_time():
    """The user's hook calls Ipopt without a time limit; the pipeline's deadline holds."""
    res = po.estimate(decay(), PlainIpoptReduced, max_wall_time=1e-9,
                      **OPTS[PlainIpoptReduced])
    assert res.status is Status.TIME_LIMIT and not res.success
    assert any("time limit" in w for w in res.warnings)
