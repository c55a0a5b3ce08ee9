"""Figures for a report (matplotlib, optional: ``pip install matplotlib``).

* :func:`plot_result` (``result.plot()``): per observable and experiment the
  data (with σ error bars when σ is known), the fitted curve on the grid of
  the result's discretization (optionally its confidence band), and below it
  the residuals (standardized, residual/σ, when σ is known);
* :func:`plot_fits`: several results over the same data;
* :func:`plot_bands`: confidence bands (several experiments: one panel per
  experiment and quantity);
* :func:`plot_profiles`: profile likelihoods as their computed points, a
  monotone interpolation between them, the threshold and the intervals;
* :func:`plot_waterfall`: sorted end objectives of a multistart.

Every time axis is labelled ``time`` (in the units of the data).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["plot_result", "plot_fits", "plot_profiles", "plot_bands", "plot_waterfall",
           "TIME_LABEL"]

#: The label of every time axis.
TIME_LABEL = "time"


def _pyplot(path=None):
    try:
        import matplotlib
        if path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover
        raise ImportError("plots need matplotlib: pip install matplotlib "
                          "(or pip install 'pyomo_odeest[plot]')") from err
    return plt


def _axes(plt, n, ax, width=4.0, height=3.2, ncols=None):
    """``n`` axes in rows of ``ncols`` (default: one row), or the given ``ax``."""
    if ax is None:
        nc = n if ncols is None else max(1, min(ncols, n))
        nr = int(np.ceil(n / nc))
        fig, axes = plt.subplots(nr, nc, figsize=(width * nc, height * nr), squeeze=False)
        axes = list(axes.ravel())
        for a in axes[n:]:
            a.set_visible(False)
        return fig, axes[:n]
    axes = list(np.atleast_1d(ax))
    if len(axes) < n:
        raise ValueError(f"need {n} axes, got {len(axes)}")
    return axes[0].figure, axes


def _save(fig, path, dpi=120):
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi)
    return fig


# ---------------------------------------------------------------------------
# data, σ and fitted curves per experiment
# ---------------------------------------------------------------------------
def _experiments(problem):
    """``[(name, subproblem)]``: one per experiment (name None for a problem without)."""
    if getattr(problem, "experiments", None):
        return list(zip(problem.experiment_names, problem.experiment_problems))
    return [(None, problem)]


def _sigma(sp):
    """Standard deviations of the measurements (frame like ``sp.data``) or None
    when σ is not known."""
    if not getattr(sp, "sigma_known", False):
        return None
    cov = getattr(sp, "cov", None)
    if cov is not None:                                   # Gaussian NLL: its covariance
        sd = np.sqrt(np.diag(np.asarray(cov, dtype=float)))
        return pd.DataFrame(np.broadcast_to(sd, sp.data.shape), index=sp.data.index,
                            columns=sp.data.columns)
    with np.errstate(divide="ignore"):
        s = 1.0 / np.sqrt(np.asarray(sp.weights, dtype=float))
    return pd.DataFrame(np.where(sp.mask, s, np.nan), index=sp.data.index, columns=sp.data.columns)


def _curves(result, problem):
    """Observables on the grid of the result's discretization: experiment name -> frame."""
    dm = result.backend.discrete_model
    u = np.asarray(result.estimates.reindex(problem.parameter_names), dtype=float)
    models = dm.models if getattr(problem, "experiments", None) else [dm]
    out = {}
    for (name, sp), m in zip(_experiments(problem), models):
        X = m.simulate(u).X
        Y = m.misfit.g(X, u, m.t)
        out[name] = pd.DataFrame(Y, index=pd.Index(np.asarray(m.t, float), name=TIME_LABEL),
                                 columns=sp.obs_names)
    return out


def _part(frame, name):
    """The rows of experiment ``name`` of a frame indexed by (experiment, time)."""
    if frame is None or name is None:
        return frame
    return frame.loc[name]


def _draw_data(a, sp, obs, sigma):
    d = sp.data[obs]
    keep = d.notna()
    t = d.index.to_numpy(float)[keep.to_numpy()]
    y = d.to_numpy(float)[keep.to_numpy()]
    if sigma is not None:
        a.errorbar(t, y, yerr=sigma[obs].to_numpy(float)[keep.to_numpy()], fmt="o", color="k",
                   ms=3.5, lw=0.8, capsize=2, label="data ± σ", zorder=3)
    else:
        a.plot(t, y, "o", color="k", ms=3.5, label="data", zorder=3)


def _panels(problem):
    return [(name, sp, obs) for name, sp in _experiments(problem) for obs in sp.obs_names]


def _title(name, obs):
    return obs if name is None else f"{name}: {obs}"


def plot_result(result, residuals=True, bands=False, level=0.95, problem=None, ncols=3,
                path=None):
    """The fit of ``result``: one panel per observable and experiment with the
    data (σ error bars when σ is known), the fitted curve (with ``bands`` its
    delta-method confidence band at ``level``) and, with ``residuals``, a
    residual panel below (residual/σ when σ is known).  Returns the figure."""
    from ._uncertainty import _problem_of
    plt = _pyplot(path)
    P = _problem_of(result, problem)
    panels = _panels(P)
    curves = _curves(result, P)
    band = None
    if bands:
        from ._prediction import prediction_bands
        band = prediction_bands(result, level=level, problem=P)
    n = len(panels)
    nc = max(1, min(ncols, n))
    nr = int(np.ceil(n / nc))
    rows = 2 if residuals else 1
    fig = plt.figure(figsize=(4.2 * nc, (4.0 if residuals else 3.0) * nr), layout="constrained")
    outer = fig.add_gridspec(nr, nc)
    res_frame = result.residuals
    for k, (name, sp, obs) in enumerate(panels):
        r, c = divmod(k, nc)
        cell = outer[r, c].subgridspec(rows, 1, height_ratios=[3, 1] if residuals else [1],
                                       hspace=0.0)
        a = fig.add_subplot(cell[0])
        sig = _sigma(sp)
        curve = curves[name]
        if band is not None:
            lo, hi = _part(band.lower, name)[obs], _part(band.upper, name)[obs]
            a.fill_between(lo.index.to_numpy(float), lo, hi, alpha=0.25, color="C0",
                           label=f"{band.level:.0%} band")
        a.plot(curve.index, curve[obs], color="C0", lw=1.3, label="fit")
        _draw_data(a, sp, obs, sig)
        a.set_title(_title(name, obs))
        a.set_ylabel(obs)
        if k == 0:
            a.legend(fontsize=8)
        if residuals:
            a.tick_params(labelbottom=False)
            b = fig.add_subplot(cell[1], sharex=a)
            rr = _part(res_frame, name)
            if rr is not None and obs in rr.columns:
                v = -rr[obs]                              # data − fit
                t = v.index.to_numpy(float)
                if sig is not None:
                    v = v / sig[obs].reindex(v.index).to_numpy(float)
                b.axhline(0.0, color="0.5", lw=0.8)
                b.plot(t, v.to_numpy(float), "o", color="C3", ms=3)
            b.set_ylabel("residual / σ" if sig is not None else "residual")
            b.set_xlabel(TIME_LABEL)
        else:
            a.set_xlabel(TIME_LABEL)
    return _save(fig, path)


def plot_fits(problem, results, ax=None, path=None):
    """Data (σ error bars when σ is known) and the fitted curves of several
    results (mapping label -> result), one panel per observable and experiment."""
    plt = _pyplot(path)
    panels = _panels(problem)
    fig, axes = _axes(plt, len(panels), ax, width=4.5, height=3.5, ncols=3)
    curves = {}
    for label, res in results.items():
        try:
            curves[label] = _curves(res, problem)
        except Exception:                     # noqa: BLE001 - a result that cannot be simulated
            continue
    for a, (name, sp, obs) in zip(axes, panels):
        for label, cv in curves.items():
            a.plot(cv[name].index, cv[name][obs], lw=1.2, label=label)
        _draw_data(a, sp, obs, _sigma(sp))
        a.set_xlabel(TIME_LABEL)
        a.set_ylabel(obs)
        a.set_title(_title(name, obs))
    axes[0].legend(fontsize=8)
    return _save(fig, path, dpi=110)


# ---------------------------------------------------------------------------
# bands, profiles, waterfall
# ---------------------------------------------------------------------------
def plot_bands(bands, data=None, ax=None, path=None):
    """Each quantity over time with its confidence band (and data points); with
    several experiments (frames indexed by (experiment, time)) one panel per
    experiment and quantity.  ``data``: a frame like ``bands.value`` (indexed
    by time, or by (experiment, time)) or a problem (its data, with σ error bars
    when σ is known)."""
    plt = _pyplot(path)
    names = list(bands.value.columns)
    multi = isinstance(bands.value.index, pd.MultiIndex)
    exps = list(dict.fromkeys(bands.value.index.get_level_values(0))) if multi else [None]
    problem = data if hasattr(data, "obs_names") else None
    subs = dict(_experiments(problem)) if problem is not None else {}
    panels = [(e, q) for e in exps for q in names          # an experiment may lack a quantity
              if _part(bands.value, e)[q].notna().any()]
    fig, axes = _axes(plt, len(panels), ax, ncols=len(names) if multi else None)
    for a, (e, q) in zip(axes, panels):
        v, lo, hi = (_part(f, e)[q] for f in (bands.value, bands.lower, bands.upper))
        t = v.index.to_numpy(float)
        a.fill_between(t, lo, hi, alpha=0.3, label=f"{bands.level:.0%} band")
        a.plot(t, v, lw=1.2, label="fit")
        if problem is not None:
            sp = subs.get(e, problem)
            if q in sp.obs_names:
                _draw_data(a, sp, q, _sigma(sp))
        elif data is not None:
            d = _part(data, e)
            if q in d.columns:
                a.plot(d.index, d[q], "k.", ms=5, label="data")
        a.set_xlabel(TIME_LABEL)
        a.set_title(_title(e, q))
    axes[0].legend(fontsize=8)
    return _save(fig, path)


def plot_profiles(profile, parameters=None, ax=None, wald=True, path=None):
    """Profile of each parameter: the computed points (markers), a monotone
    interpolation between them, the threshold, the likelihood-ratio interval
    and (``wald``) the quadratic approximation of the Wald interval."""
    from scipy.interpolate import PchipInterpolator
    plt = _pyplot(path)
    names = list(profile.curves) if parameters is None else list(parameters)
    fig, axes = _axes(plt, len(names), ax)
    iv = profile.intervals
    scaled = getattr(profile, "scale", "known") == "residual"
    for a, name in zip(axes, names):
        df = profile.curves[name].sort_values("value")
        x, y = df["value"].to_numpy(float), df["lr"].to_numpy(float)
        row = iv.loc[name]
        if len(x) == 0:
            a.set_title(f"{name}: no successful re-optimization")
            a.set_xlabel(name)
            continue
        a.plot(x, y, "o", color="C0", ms=4, label=f"profile ({len(x)} points)")
        if len(x) >= 2:
            # interpolate the signed root (nearly linear), not λ itself
            th = float(row["estimate"])
            s = np.sign(x - th) * np.sqrt(np.clip(y, 0, None))
            xx = np.linspace(x[0], x[-1], 300)
            a.plot(xx, PchipInterpolator(x, s)(xx) ** 2, color="C0", lw=1, alpha=0.8)
        a.axhline(profile.threshold, color="k", lw=0.8, ls=":",
                  label=f"{profile.level:.0%} threshold {profile.threshold:.3g}")
        for v in (row["lower"], row["upper"]):
            if np.isfinite(v):
                a.axvline(v, color="C0", lw=0.8, ls="--")
        if wald and "wald_lower" in iv.columns and np.isfinite(row["wald_lower"]):
            th = row["estimate"]
            half = (row["wald_upper"] - row["wald_lower"]) / 2
            xw = np.linspace(x.min(), x.max(), 200)
            a.plot(xw, profile.threshold * ((xw - th) / half) ** 2, color="C1", lw=1, ls="-.",
                   label="Wald (quadratic)")
        a.set_xlabel(name)
        a.set_ylabel("λ / s² (σ unknown)" if scaled else "λ = 2 ΔNLL")
        a.set_ylim(0, 2.0 * profile.threshold)
        a.set_title(f"{name}: {row['shape']}")
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def plot_waterfall(multistart, ax=None, path=None):
    """Waterfall of a multistart: the end objectives of the converged starts minus
    the best, sorted (log scale; the best minimum's plateau at the floor, its width
    the number of starts that found it), coloured by the minimum (cluster) reached."""
    plt = _pyplot(path)
    from ._diagnostics import end_objective
    tab = multistart.table
    tab = tab.assign(objective=end_objective(tab))       # the ODE's objective where known
    ok = tab[tab["success"].astype(bool) & tab["objective"].notna()].sort_values("objective")
    fig, (a,) = _axes(plt, 1, ax, width=5.5, height=3.5)
    y = ok["objective"].to_numpy(float)
    best = float(y.min()) if len(y) else 0.0
    floor = 1e-10 * max(1.0, abs(best))
    dy = np.maximum(y - best, floor)
    rank = np.arange(1, len(y) + 1)
    a.plot(rank, dy, color="0.6", lw=0.8, zorder=1)
    cl = ok["cluster"].astype(float).to_numpy()
    for c in np.unique(cl[np.isfinite(cl)]):
        sel = cl == c
        obj = float(multistart.clusters["objective"].loc[int(c)])
        lab = (f"best minimum, J = {obj:.6g}" if c == 0 else
               f"minimum {int(c)}, J = {obj:.6g}" if c < 6 else None)
        a.plot(rank[sel], dy[sel], "o", ms=5, color=f"C{int(c) % 10}", label=lab, zorder=2)
    a.set_yscale("log")
    a.set_ylim(bottom=floor / 3)
    nfail = len(tab) - len(ok)
    a.set_xlabel("start (sorted by end objective)")
    a.set_ylabel("objective − best")
    eq = getattr(multistart, "equivalent", False)
    a.set_title(f"{len(tab)} starts: {multistart.hits} at the best"
                + (" (equivalent parameter sets)" if eq else "")
                + f", {nfail} not converged", fontsize=10)
    if len(y):
        a.legend(fontsize=8)
    return _save(fig, path)
