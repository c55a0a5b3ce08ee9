"""Side-by-side comparison of estimation approaches on one problem.

:func:`compare_approaches` runs the simultaneous block and the reduced-space
(single-shooting) backend — and any other registered approach — from the same
start on the same scheme and grid, and returns a pandas table::

    approach | method | p1 ... | objective | status | iterations |
    fevals | gevals | wall_s

``continuous_adjoint`` optimizes the same J on the adaptively integrated ODE
[MHV's optimize-then-discretize reference]; the scheme and grid settings
do not apply to it.

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

from ..approaches._reduced import estimate_reduced
from ..approaches._shooting import estimate_multiple_shooting
from ..approaches._simultaneous import estimate_simultaneous
from ..symbolic import lambdify

__all__ = ["compare_approaches", "plot_fits", "APPROACHES"]


def _simultaneous(problem, **kw):
    return estimate_simultaneous(problem, **kw)


def _reduced(problem, **kw):
    return estimate_reduced(problem, **kw)


def _multiple_shooting(problem, **kw):
    return estimate_multiple_shooting(problem, **kw)


_DISCRETIZATION = ("scheme", "qmax", "grid", "max_step", "steps_per_interval")


def _continuous(problem, **kw):
    """The continuous-adjoint backend; it integrates adaptively, so the
    discretization settings of the comparison do not apply to it."""
    from ..approaches.continuous import estimate_continuous
    for key in _DISCRETIZATION:
        kw.pop(key, None)
    return estimate_continuous(problem, **kw)


def _adaptive(problem, **kw):
    """The adaptive step-size model (55); it chooses its own grid, so only ``qmax`` of the
    discretization settings applies to it (default 2 when not given)."""
    from ..transcription._adaptive_block import estimate_adaptive
    for key in ("scheme", "grid", "max_step", "steps_per_interval"):
        kw.pop(key, None)
    if kw.get("qmax") is None:
        kw.pop("qmax", None)
    return estimate_adaptive(problem, **kw)


#: name -> (callable, default keyword arguments); extended by other backends.
APPROACHES = {
    "simultaneous": (_simultaneous, {}),
    "reduced_space": (_reduced, {"optimizer": "ipopt", "hessian": "soa"}),
    "reduced_space_lbfgs": (_reduced, {"optimizer": "ipopt", "hessian": None}),
    "multiple_shooting": (_multiple_shooting, {"jacobian": "adjoint"}),
    "continuous_adjoint": (_continuous, {"optimizer": "ipopt", "hessian": "soa"}),
    "continuous_adjoint_lbfgs": (_continuous, {"optimizer": "ipopt", "hessian": None}),
    "continuous_least_squares": (_continuous, {"optimizer": "least_squares"}),
    "adaptive": (_adaptive, {}),
}


def compare_approaches(problem, approaches=("simultaneous", "reduced_space"), scheme="adams_pc",
                       qmax=None, grid=None, max_step=None, steps_per_interval=None, u0=None,
                       options=None):
    """Run several approaches from the same start; return ``(table, results)``.

    ``approaches`` are names in :data:`APPROACHES` or ``(label, callable,
    kwargs)`` triples.  A failing approach is reported in the table with its
    status (it does not stop the comparison).
    """
    rows, results = [], {}
    common = dict(scheme=scheme, qmax=qmax, grid=grid, max_step=max_step,
                  steps_per_interval=steps_per_interval, u0=u0)
    for a in approaches:
        if isinstance(a, str):
            if a not in APPROACHES:
                raise ValueError(f"unknown approach {a!r}; known: {sorted(APPROACHES)}")
            label, (fn, kw) = a, APPROACHES[a]
        else:
            label, fn, kw = a
        kwargs = dict(common)
        kwargs.update(kw)
        if options:
            kwargs["options"] = options
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                res = fn(problem, **kwargs)
            except Exception as err:          # reported, not hidden
                rows.append({"approach": label, "method": "", "status": f"error: {err}",
                             "success": False})
                continue
        results[label] = res
        row = {"approach": label, "method": res.method}
        row.update({k: float(v) for k, v in res.estimates.items()})
        ev = res.evaluations
        row.update(objective=res.objective, status=res.status, success=res.success,
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
    g = lambdify((problem.x_sym, problem.u_sym, problem.t_sym), list(problem.g_sym), "numpy")
    Z = np.array([np.broadcast_to(np.asarray(g(x, u, tt), dtype=float), (len(problem.g_sym),))
                  for x, tt in zip(X, t)])
    return pd.DataFrame(Z, index=t, columns=problem.obs_names)
