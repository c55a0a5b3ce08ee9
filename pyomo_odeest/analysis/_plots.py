"""Plots of profiles and confidence bands (matplotlib, optional: ``pip install matplotlib``)."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_profiles", "plot_bands"]


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


def _axes(plt, n, ax, width=4.0, height=3.2):
    if ax is None:
        fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
        return fig, list(axes[0])
    axes = list(np.atleast_1d(ax))
    if len(axes) < n:
        raise ValueError(f"need {n} axes, got {len(axes)}")
    return axes[0].figure, axes


def plot_profiles(profile, parameters=None, ax=None, wald=True, path=None):
    """λ(θ) of each profiled parameter, the threshold, the LR interval and
    (``wald``) the quadratic approximation of the Wald interval."""
    plt = _pyplot(path)
    names = list(profile.curves) if parameters is None else list(parameters)
    fig, axes = _axes(plt, len(names), ax)
    iv = profile.intervals
    for a, name in zip(axes, names):
        df = profile.curves[name]
        a.plot(df["value"], df["lr"], "o-", ms=3, label="profile λ")
        a.axhline(profile.threshold, color="k", lw=0.8, ls=":", label=f"{profile.level:.0%} threshold")
        row = iv.loc[name]
        for v in (row["lower"], row["upper"]):
            if np.isfinite(v):
                a.axvline(v, color="C0", lw=0.8, ls="--")
        if wald and "wald_lower" in iv.columns and np.isfinite(row["wald_lower"]):
            th = row["estimate"]
            half = (row["wald_upper"] - row["wald_lower"]) / 2
            x = np.linspace(df["value"].min(), df["value"].max(), 200)
            a.plot(x, profile.threshold * ((x - th) / half) ** 2, color="C1", lw=1,
                   label="Wald (quadratic)")
        a.set_xlabel(name)
        a.set_ylabel("λ = 2 ΔNLL")
        a.set_ylim(0, 2.0 * profile.threshold)
        a.set_title(f"{name}: {row['shape']}")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def plot_bands(bands, data=None, ax=None, path=None):
    """Each quantity over time with its confidence band (and data points)."""
    plt = _pyplot(path)
    names = list(bands.value.columns)
    fig, axes = _axes(plt, len(names), ax)
    t = bands.value.index.to_numpy()
    for a, name in zip(axes, names):
        a.fill_between(t, bands.lower[name], bands.upper[name], alpha=0.3,
                       label=f"{bands.level:.0%} band")
        a.plot(t, bands.value[name], lw=1.2, label="fit")
        if data is not None and name in data.columns:
            a.plot(data.index, data[name], "k.", ms=5, label="data")
        a.set_xlabel("time")
        a.set_title(name)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
