"""Side-by-side comparison of estimation approaches on one problem.

:func:`compare_approaches` runs several approaches of
:data:`~pyomo_odeest.APPROACH_NAMES` from the same start on the same scheme
and grid (the discretization options go to the approaches that take them) and
returns a pandas table::

    approach | method | p1 ... | objective | status | iterations |
    fevals | gevals | wall_s

``continuous`` optimizes the same J on the adaptively integrated ODE [MHV's
optimize-then-discretize reference]; ``adaptive`` chooses its own grid.

Choosing an approach: the simultaneous block converges from poor starts (the
states are free, so no trajectory has to exist at intermediate parameters) and
its cost grows with the grid; the reduced-space backend has few variables and
cheap iterations but needs every intermediate parameter to give a finite
simulation.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..approaches._estimate import APPROACH_NAMES, approach_options, estimate

__all__ = ["compare_approaches", "plot_fits"]


def compare_approaches(problem, approaches=("simultaneous", "reduced_space"), scheme="adams_pc",
                       qmax=None, grid=None, max_step=None, steps_per_interval=None, u0=None,
                       options=None):
    """Run several approaches from the same start; return ``(table, results)``.

    ``approaches`` are names in :data:`~pyomo_odeest.APPROACH_NAMES` (each with its
    default options) or ``(label, name, options)`` triples (e.g.
    ``("continuous_least_squares", "continuous", {"optimizer": "least_squares"})``);
    the table and ``results`` are keyed by the name (or label).  The common
    settings go to each approach that takes them.  A failing approach is
    reported in the table with its status (it does not stop the comparison).
    """
    rows, results = [], {}
    common = dict(scheme=scheme, qmax=qmax, grid=grid, max_step=max_step,
                  steps_per_interval=steps_per_interval, u0=u0, options=options)
    for a in approaches:
        label, name, kw = (a, a, {}) if isinstance(a, str) else a
        if name not in APPROACH_NAMES:
            raise ValueError(f"unknown approach {name!r}; known: {list(APPROACH_NAMES)}")
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
    return pd.DataFrame(rows).set_index("approach"), results


def plot_fits(problem, results, ax=None, path=None):
    """Data and fitted trajectories of several results (matplotlib, optional)."""
    try:
        import matplotlib
        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover
        raise ImportError("plots need matplotlib: pip install matplotlib") from err
    obs = problem.obs_names
    if ax is None:
        fig, axes = plt.subplots(1, len(obs), figsize=(5 * len(obs), 3.5), squeeze=False)
        axes = axes[0]
    else:
        axes = np.atleast_1d(ax)
        fig = axes[0].figure
    for a, name in zip(axes, obs):
        a.plot(problem.meas_times, problem.data[name], "ko", label="data")
        for label, res in results.items():
            if res.states is None:
                continue
            X = res.states.to_numpy()
            t = res.states.index.to_numpy()
            zt = _obs_on_grid(problem, X, res.x, t)[name]
            a.plot(t, zt, label=label)
        a.set_xlabel("t")
        a.set_title(name)
    axes[0].legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def _obs_on_grid(problem, X, u, t):
    import sympy
    g = sympy.lambdify((problem.x_sym, problem.u_sym, problem.t_sym), list(problem.g_sym), "numpy")
    Z = np.array([np.broadcast_to(np.asarray(g(x, u, tt), dtype=float), (len(problem.g_sym),))
                  for x, tt in zip(X, t)])
    return pd.DataFrame(Z, index=t, columns=problem.obs_names)
