r"""SEIRD study of [SEIRD] (Examples 2 and 3): CG and BFGS with adjoint gradients.

.. math::

    \dot S = -\beta SI/N,\quad \dot E = \beta SI/N - \sigma E,\quad
    \dot I = \sigma E - (\gamma + \mu) I,\quad \dot R = \gamma I,\quad \dot D = \mu I,

:math:`N = 1`, :math:`t \in [0, 100]` days, :math:`I, R, D` measured every
2 days with relative Gaussian noise :math:`\eta \in \{0.05, 0.1, 0.2\}`
(one draw, ``seed=0``, the same :math:`\varepsilon` scaled by :math:`\eta`).
Settings: :mod:`pyomo_odeest.models._seird`; discussion: ``docs/seird.md``.

Two experiments:

* ``params``: the rates :math:`u = (\beta, \sigma, \gamma, \mu)`, initial
  state known [SEIRD, Example 2];
* ``params+x0``: rates and :math:`x_0 = (S_0, E_0, I_0, R_0, D_0)` with the
  initial-state term and the conservation penalty of [SEIRD], eq. (6)
  (Example 3).

Methods: the reduced cost :math:`J(u)` (discrete adjoint gradient of the
Adams predictor–corrector scheme, h = 1 day) minimized in log-parameters
:math:`\theta = \log u` by CG (Fletcher–Reeves, Polak–Ribière) and BFGS with
the secant line search of [SEIRD], eq. (25), and with a strong-Wolfe search;
and the simultaneous (full-discretization) problem solved by Ipopt.  Then the
same BFGS run with and without the conservation penalty.

Usage: ``python examples/seird.py [output_dir] [--full]`` (PNG figures written
there, default the current directory); ``PYOMO_ODEEST_EXAMPLE_QUICK=1`` runs a
small version (noise 0.05, secant line searches, one noise draw of the penalty
study).  For rates + x0 at noise 0.1 and 0.2 the
CG runs (20-45 s each) are made only with ``--full``; the default run takes
about 1-2.5 minutes (70 s of CPU).  Last line::

    seird: bfgs_iters=... cg_fr_iters=... cg_pr_iters=... max_rel_err=...

(noise 0.05, parameters only, secant line search; ``max_rel_err`` over all
methods of that case and the four rates).
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np
import pandas as pd

from pyomo_odeest.models._seird import (SEIRD_PARAMS, SEIRD_STATES, SEIRD_TRUE, SEIRD_X0,
                                       fit_reduced, seird_data, seird_problem)
from pyomo_odeest.approaches._simultaneous import estimate_simultaneous

#: PYOMO_ODEEST_EXAMPLE_QUICK=1 (the test of the examples): noise 0.05 only, the secant
#: runs, one draw of the penalty study (seed 1: its measured S0 = 1.08 > N)
QUICK = os.environ.get("PYOMO_ODEEST_EXAMPLE_QUICK") == "1"
NOISES = (0.05,) if QUICK else (0.05, 0.1, 0.2)
SPI = 2                                   # steps per 2-day interval: h = 1 day
U_TRUE = np.array([SEIRD_TRUE[p] for p in SEIRD_PARAMS])
X0_TRUE = np.array([SEIRD_X0[s] for s in SEIRD_STATES])
SECANT = (("CG-FR", "cg-fr", "secant"), ("CG-PR", "cg-pr", "secant"), ("BFGS", "bfgs", "secant"))
WOLFE_BFGS = (("BFGS", "bfgs", "wolfe"),)
WOLFE_CG = (("CG-FR", "cg-fr", "wolfe"), ("CG-PR", "cg-pr", "wolfe"))


def true_vector(experiment):
    return U_TRUE if experiment == "params" else np.concatenate([U_TRUE, X0_TRUE])


def row(method, ls, noise, experiment, nit, nfev, obj, u, secs, converged):
    ut = true_vector(experiment)
    err = u / ut - 1.0
    r = dict(method=method, search=ls, noise=noise, experiment=experiment, iters=nit,
             nfev=nfev, objective=obj, converged=converged, seconds=secs)
    for name, e in zip(list(SEIRD_PARAMS) + [f"{s}0" for s in SEIRD_STATES], err):
        r[name] = e
    return r


def x0_errors(u):
    """(‖x̂0 − x0‖₂/‖x0‖₂, max_c |x̂0_c/x0_c − 1|, per-compartment relative errors)."""
    x = u[4:]
    rel = x / X0_TRUE - 1.0
    return np.linalg.norm(x - X0_TRUE) / np.linalg.norm(X0_TRUE), np.max(np.abs(rel)), rel


def methods_for(noise, experiment, full):
    """CG at every noise level for the rates; for rates + x0 beyond noise 0.05 only with
    ``full`` (those CG runs take 20-45 s each; [SEIRD]'s Example 4 also uses BFGS only).
    Small-size mode: the secant runs for the rates, BFGS/secant for rates + x0."""
    if QUICK:
        return SECANT if experiment == "params" else (SECANT[2],)
    if noise == NOISES[0]:
        return SECANT + WOLFE_BFGS + WOLFE_CG
    if experiment == "params" or full:
        return SECANT + WOLFE_BFGS
    return (SECANT[2],) + WOLFE_BFGS


def run_all(full=False):
    rows, hist, est = [], {}, {}
    for noise in NOISES:
        data = seird_data(noise, seed=0)
        for experiment in ("params", "params+x0"):
            prob = seird_problem(data, estimate_initial=experiment != "params",
                                 steps_per_interval=SPI)
            for name, m, ls in methods_for(noise, experiment, full):
                t = time.perf_counter()
                res = fit_reduced(prob, m, ls, steps_per_interval=SPI)
                secs = time.perf_counter() - t
                rows.append(row(name, ls, noise, experiment, res.nit, res.nfev, res.fun, res.u,
                                secs, res.success))
                hist[(name, ls, noise, experiment)] = res.history.to_frame()
                est[(name, ls, noise, experiment)] = (res.nit, res.u)
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sim = estimate_simultaneous(prob, steps_per_interval=SPI)
            rows.append(row("simultaneous", "ipopt", noise, experiment, sim.iterations,
                            sim.evaluations.get("objective", np.nan), sim.objective, sim.x,
                            time.perf_counter() - t, sim.success))
    return pd.DataFrame(rows), hist, est


def penalty_effect(est):
    """BFGS/secant on params+x0 with (runs of the table, ``est``) and without the
    conservation term (all else equal: data, weights, start, grid, optimizer)."""
    out = []
    for noise in NOISES:
        data = seird_data(noise, seed=0)
        xm = np.array([data.attrs["x0_measured"][s] for s in SEIRD_STATES])
        n_meas, max_meas, _ = x0_errors(np.concatenate([U_TRUE, xm]))
        for cons in (True, False):
            if cons:
                nit, u = est[("BFGS", "secant", noise, "params+x0")]
            else:
                prob = seird_problem(data, estimate_initial=True, conservation=False,
                                     steps_per_interval=SPI)
                res = fit_reduced(prob, "bfgs", "secant", steps_per_interval=SPI)
                nit, u = res.nit, res.u
            nrm, mx, rel = x0_errors(u)
            out.append(dict(noise=noise, conservation="with" if cons else "without",
                            iters=nit, x0_err_norm=nrm, x0_err_max=mx,
                            **{f"{s}0": e for s, e in zip(SEIRD_STATES, rel)},
                            max_param_err=np.max(np.abs(u[:4] / U_TRUE - 1.0)),
                            sum_x0_minus_N=float(u[4:].sum() - 1.0),
                            meas_err_norm=n_meas))
    return pd.DataFrame(out)


def penalty_draws(noise=0.1, seeds=range(1, 11)):
    """Mean |relative error| over noise draws, with and without the conservation term.

    BFGS/Wolfe (the cheapest converging method), params+x0, data seeds ``seeds``.
    """
    acc = {"with": [], "without": [], "measured x0_bar": []}
    for seed in seeds:
        data = seird_data(noise, seed=seed)
        xm = np.array([data.attrs["x0_measured"][s] for s in SEIRD_STATES])
        acc["measured x0_bar"].append(np.concatenate([np.full(4, np.nan), xm / X0_TRUE - 1.0,
                                                      [x0_errors(np.r_[U_TRUE, xm])[0]]]))
        for cons in (True, False):
            prob = seird_problem(data, estimate_initial=True, conservation=cons,
                                 steps_per_interval=SPI)
            res = fit_reduced(prob, "bfgs", "wolfe", steps_per_interval=SPI)
            acc["with" if cons else "without"].append(
                np.concatenate([res.u[:4] / U_TRUE - 1.0, res.u[4:] / X0_TRUE - 1.0,
                                [x0_errors(res.u)[0]]]))
    cols = list(SEIRD_PARAMS) + [f"{s}0" for s in SEIRD_STATES] + ["x0_err_norm"]
    return pd.DataFrame({k: np.nanmean(np.abs(np.array(v)), axis=0) if k != "measured x0_bar"
                         else np.abs(np.array(v)).mean(axis=0) for k, v in acc.items()},
                        index=cols).T


def figure(hist, experiment, noise, path, title, cg="CG-FR"):
    """[SEIRD] Figures 2/4(/5): objective, gradient norm, rates (and x0) vs iteration.

    Secant line search; the rate (and initial-state) panels compare ``cg``
    (solid) with BFGS (dashed), as [SEIRD]'s figures do.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with_x0 = experiment != "params"
    fig, ax = plt.subplots(1, 4 if with_x0 else 3, figsize=(20 if with_x0 else 15, 4.2))
    styles = {"CG-FR": ("tab:blue", "-"), "CG-PR": ("tab:green", "-"), "BFGS": ("tab:red", "--")}
    fmin = min(h["f"].min() for (m, ls, nz, ex), h in hist.items()
               if nz == noise and ex == experiment)
    for (m, ls, nz, ex), h in hist.items():
        if nz != noise or ex != experiment or ls != "secant":
            continue
        c, lsty = styles[m]
        ax[0].semilogy(h.index, h["f"] - fmin + 1e-12, lsty, color=c, label=f"{m} ({len(h) - 1} it)")
        ax[1].semilogy(h.index, h["gnorm"], lsty, color=c, label=m)
    for (m, ls, nz, ex), h in hist.items():
        if nz != noise or ex != experiment or ls != "secant" or m not in (cg, "BFGS"):
            continue
        lsty = "-" if m.startswith("CG") else "--"
        U = np.exp(h[[c for c in h.columns if c.startswith("x") and c[1:].isdigit()]].to_numpy())
        for j, p in enumerate(SEIRD_PARAMS):
            ax[2].plot(h.index, U[:, j] / U_TRUE[j], lsty, color=f"C{j}",
                       label=f"{p} ({m})")
        if with_x0:
            for j, st in enumerate(SEIRD_STATES):
                ax[3].plot(h.index, U[:, 4 + j] / X0_TRUE[j], lsty, color=f"C{j}",
                           label=f"{st}0 ({m})")
    ax[0].set(xlabel="iteration", ylabel=r"$J(u_k) - J_{\min}$", title="objective")
    ax[1].set(xlabel="iteration", ylabel=r"$\|\nabla_\theta J\|_\infty$", title="gradient norm")
    ax[2].set(xlabel="iteration", ylabel=r"$u_k / u_{\rm true}$",
              title=f"rates: {cg} (solid), BFGS (dashed)")
    ax[2].set_xscale("symlog", linthresh=10)
    if with_x0:
        ax[3].set(xlabel="iteration", ylabel=r"$x_{0,k} / x_{0,\rm true}$",
                  title=f"initial state: {cg} (solid), BFGS (dashed)")
        ax[3].set_xscale("symlog", linthresh=10)
    for a in ax:
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fmt_table(df):
    cols = ["method", "search", "noise", "experiment", "iters", "nfev", "objective", "converged"]
    errs = [c for c in list(SEIRD_PARAMS) + [f"{s}0" for s in SEIRD_STATES] if c in df]
    out = df[cols + errs + ["seconds"]].copy()
    for c in errs:
        out[c] = out[c].map(lambda v: "" if pd.isna(v) else f"{v:+.4f}")
    out["objective"] = out["objective"].map(lambda v: f"{v:.4f}")
    out["seconds"] = out["seconds"].map(lambda v: f"{v:.1f}")
    return out.to_string(index=False)


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    full = "--full" in argv
    args = [a for a in argv[1:] if a != "--full"]
    outdir = args[0] if args else "."
    os.makedirs(outdir, exist_ok=True)
    t0 = time.perf_counter()
    pd.set_option("display.width", 250)
    table, hist, est = run_all(full)
    print("Relative errors u/u_true - 1 (rates; initial state for params+x0); "
          "iters = optimizer iterations (Ipopt for simultaneous)")
    for experiment in ("params", "params+x0"):
        sub = table[table.experiment == experiment].dropna(axis=1, how="all")
        print(f"\n== experiment: {experiment} ==")
        print(fmt_table(sub))

    pen = penalty_effect(est)
    print("\n== conservation penalty (BFGS/secant, params+x0; same data, start and weights) ==")
    print("x0_err_norm = |x0_hat - x0|_2 / |x0|_2, x0_err_max = max_c |x0_hat_c/x0_c - 1|; "
          "meas_err_norm = the same norm for the measured x0_bar")
    fmtd = pen.copy()
    for c in fmtd.columns:
        if fmtd[c].dtype.kind == "f" and c != "noise":
            fmtd[c] = fmtd[c].map(lambda v: f"{v:+.2e}" if c in ("sum_x0_minus_N",) else f"{v:.4f}")
    print(fmtd.to_string(index=False))
    for noise in NOISES:
        w = pen[(pen.noise == noise) & (pen.conservation == "with")].iloc[0]
        wo = pen[(pen.noise == noise) & (pen.conservation == "without")].iloc[0]
        print(f"noise {noise}: initial-state error with penalty {w.x0_err_norm:.5f}, "
              f"without {wo.x0_err_norm:.5f} (max componentwise {w.x0_err_max:.4f} vs "
              f"{wo.x0_err_max:.4f})")

    draws_seeds = range(1, 2) if QUICK else range(1, 11)
    draws = penalty_draws(seeds=draws_seeds)
    print(f"\n== conservation penalty over {len(draws_seeds)} noise draws (noise 0.1, seeds "
          f"{draws_seeds[0]}-{draws_seeds[-1]}, BFGS/wolfe): "
          "mean |relative error| ==")
    print(draws.to_string(float_format=lambda v: f"{v:.4f}", na_rep=""))

    figure(hist, "params", 0.05, os.path.join(outdir, "seird_fig2_params.png"),
           "SEIRD, rates only, noise 0.05 (cf. [SEIRD] Fig. 2)")
    figure(hist, "params+x0", 0.05, os.path.join(outdir, "seird_fig4_params_x0.png"),
           "SEIRD, rates + initial state, noise 0.05 (cf. [SEIRD] Figs. 4-5)", cg="CG-PR")
    print(f"\nfigures: {outdir}/seird_fig2_params.png, {outdir}/seird_fig4_params_x0.png; "
          f"total {time.perf_counter() - t0:.0f} s")

    base = table[(table.noise == 0.05) & (table.experiment == "params")]
    sec = base[base.search == "secant"].set_index("method")
    max_err = float(np.max(np.abs(base[list(SEIRD_PARAMS)].to_numpy())))
    print(f"seird: bfgs_iters={int(sec.loc['BFGS', 'iters'])} "
          f"cg_fr_iters={int(sec.loc['CG-FR', 'iters'])} "
          f"cg_pr_iters={int(sec.loc['CG-PR', 'iters'])} max_rel_err={max_err:.4f}")


if __name__ == "__main__":
    main()
