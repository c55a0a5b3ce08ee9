"""Side-by-side comparison of estimation approaches on one problem.

:func:`compare_approaches` runs several approaches of
:data:`~pyomo_odeest.APPROACH_NAMES` from the same start on the same scheme
and grid (the discretization options go to the approaches that take them) and
returns a pandas table::

    approach | method | p1 ... | objective | status | iterations |
    fevals | gevals | wall_s

``continuous`` optimizes the same J on the adaptively integrated ODE [MHV's
optimize-then-discretize reference]; ``adaptive`` chooses its own grid.
Choosing an approach: see docs/choosing.md.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..approaches._estimate import APPROACH_NAMES, approach_options, estimate

__all__ = ["compare_approaches", "plot_fits"]


def _is_approach(a) -> bool:
    """An approach class or object (:class:`~pyomo_odeest.approaches.Approach`)."""
    from ..approaches._base import Approach
    return isinstance(a, Approach) or (isinstance(a, type) and issubclass(a, Approach))


def _entry(i, a):
    """``(label, approach, options)`` of the entry ``approaches[i]`` of
    :func:`compare_approaches`; a ValueError naming the entry and the expected form."""
    form = ("an approach name (one of " + ", ".join(APPROACH_NAMES) + "), an approach "
            "class or object, or a (label, approach, options) triple such as "
            "('continuous_least_squares', 'continuous', {'optimizer': 'least_squares'})")
    if isinstance(a, str):
        label, name, kw = a, a, {}
    elif _is_approach(a):
        label, name, kw = a.name, a, {}
    elif isinstance(a, (tuple, list)) and len(a) == 3:
        label, name, kw = a
        if not isinstance(label, str):
            raise ValueError(f"approaches[{i}] = {a!r}: the label must be a string; expected "
                             f"{form}")
        if kw is None:
            kw = {}
        if not isinstance(kw, Mapping):
            raise ValueError(f"approaches[{i}] = {a!r}: the options must be a mapping of "
                             f"estimate() keywords (or None); expected {form}")
    else:
        raise ValueError(f"approaches[{i}] = {a!r} is not {form}")
    if not _is_approach(name) and name not in APPROACH_NAMES:
        raise ValueError(f"approaches[{i}]: unknown approach {name!r}; known: "
                         f"{list(APPROACH_NAMES)}, or an approach class or object")
    return label, name, dict(kw)


def compare_approaches(problem, approaches=("simultaneous", "reduced_space"), scheme="adams_pc",
                       qmax=None, grid=None, max_step=None, steps_per_interval=None, u0=None,
                       options=None, progress=None):
    """Run several approaches from the same start; return ``(table, results)``.

    ``approaches`` are names in :data:`~pyomo_odeest.APPROACH_NAMES` (each with its
    default options), approach classes or objects (as :func:`~pyomo_odeest.estimate`
    takes them; labelled by their ``name``) or ``(label, approach, options)`` triples
    (e.g. ``("continuous_least_squares", "continuous", {"optimizer": "least_squares"})``);
    the table and ``results`` are keyed by the name (or label).  The common
    settings go to each approach that takes them.  A failing approach is
    reported in the table with its status (it does not stop the comparison).  ``progress``: one line per
    finished approach on standard error (None: when it is a terminal).
    """
    from ..nlp._progress import TaskProgress, progress_enabled
    entries = [_entry(i, a) for i, a in enumerate(
        (approaches,) if isinstance(approaches, str) else approaches)]
    prog = TaskProgress(len(entries), progress_enabled(progress), "compare")
    rows, results = [], {}
    common = dict(scheme=scheme, qmax=qmax, grid=grid, max_step=max_step,
                  steps_per_interval=steps_per_interval, u0=u0, options=options)
    for label, name, kw in entries:
        takes = approach_options(name)
        kwargs = {k: v for k, v in common.items() if k in takes and v is not None}
        kwargs.update(kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                res = estimate(problem, name, **kwargs)
            except Exception as err:          # reported, not hidden
                rows.append({"approach": label, "method": "", "status": f"error: {err}",
                             "success": False})
                prog.update(False, f"{label}: error")
                continue
        results[label] = res
        row = {"approach": label, "method": res.method}
        row.update({k: float(v) for k, v in res.estimates.items()})
        ev = res.evaluations
        row.update(objective=res.objective, status=str(res.status), success=res.success,
                   iterations=res.iterations,
                   fevals=ev.get("objective", ev.get("simulations", np.nan)),
                   gevals=ev.get("gradient", ev.get("gradients", np.nan)),
                   wall_s=res.timings.get("total_s", np.nan))
        rows.append(row)
        prog.update(bool(res.success), f"{label}: {res.status}, {row['wall_s']:.1f} s")
    prog.close()
    return pd.DataFrame(rows).set_index("approach"), results


def plot_fits(problem, results, ax=None, path=None):
    """Data and fitted trajectories of several results (see
    :func:`~pyomo_odeest.analysis._plots.plot_fits`)."""
    from ._plots import plot_fits as draw
    return draw(problem, results, ax=ax, path=path)
