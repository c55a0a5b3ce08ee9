"""Cost of likelihood gradients on [MHV]'s diagonal linear model (its Figures 1 and 2).

Problem [MHV, eqs. (24)–(27)]: x' = diag(φ) x, x(0) = 1 on [0, 100],
φ_i ~ U[-1.1, -0.1], every state observed at ``n_obs`` regularly spread
times, data perturbed as in eq. (27), Gaussian log-likelihood with Σ = I.

For each random draw (a new φ and new data) the gradient is computed at the
drawn φ by

* ``fd``    central finite differences of J (2p forward solves),
* ``sens``  forward sensitivities [MHV, eq. (8)],
* ``adj``   the continuous adjoint with jumps at the measurement times
            (eqs. (15)–(16)),

all on the compiled engine by default (``--engine cvodes``:
:class:`pyomo_odeest.discretization.continuous.CvodesModel`, SUNDIALS CVODES
through CasADi, as [MHV] used CVODES: forward sensitivities by CasADi's forward
mode, the adjoint by its reverse mode with the jumps as seeds; by CVODES's
Adams–Moulton method, the one for non-stiff problems such as this model,
``--method BDF`` for the package's default BDF), or with
``--engine scipy`` on :class:`pyomo_odeest.discretization.continuous.ContinuousModel`
(SciPy's BDF with exact Jacobians, ``--method LSODA`` for the package's SciPy
default), rtol = 1e-8, atol = 1e-10; and by

* ``disc``  the package's discrete adjoint (simulation + backward sweep of
            [GM-grad], eqs. (52)/(54)) of the Adams predictor–corrector,
            Q_max = 4, steps of at most 0.5.

Sweeps: (a) p = 2, 7, 12, 17, 22, 32, ..., 122 with 11 observation times
([MHV]'s sizes 2, 12, ..., 122 plus 7 and 17, which locate the crossover to 5
parameters); (b) 2, 12, ..., 122 observation times with p = 50.  Each model is built and warmed up (all
functions compiled) at the start value before timing; the timed calls are
made at the drawn φ in the order adj, sens, fd, disc, each after the model's
stored forward solution is forgotten, so each method pays its own forward
solve (before, the forward sensitivities reused the solve the adjoint had just
made at the same φ).  [MHV] used 100 draws per point; the default here is 3
(``--draws``) and finite differences are timed on the first ``--fd-draws``
(default 1) draws only, because they cost 2p solves.

Output: a table of median times (s) and the median relative error of each
continuous gradient against the closed form (eq. (25)); the figures
``docs/img/mhv_parameters.png`` and ``docs/img/mhv_observations.png``;
last line

    mhv: crossover_p=... adjoint_speedup_at_p122=... discrete_adjoint_obs_slope=...

``crossover_p``: smallest p of sweep (a) from which the continuous adjoint is
faster than forward sensitivities at every larger p; ``adjoint_speedup_at_p122``:
median time of sens / adj at p = 122; ``discrete_adjoint_obs_slope``: slope of
log(time) of ``disc`` against log(number of observations) in sweep (b)
(0 = flat, 1 = proportional).

Times are CPU times of the process (``time.process_time``; ``--clock wall``
for wall-clock time): every method runs in this one thread, and on a shared,
loaded machine the wall-clock time of the same call varies by a factor 2–3
with the load while its CPU time does not.

BLAS runs single-threaded (``OPENBLAS_NUM_THREADS=1`` etc. unless set): the
gradients factor small dense matrices (the adjoint's n + p Jacobian), and
on a loaded 2-core machine OpenBLAS's worker threads spin-wait, which made a
244 × 244 LU take 0.12 s instead of about 1 ms (at p = 122 the adjoint
took 15 s with threads and 0.44 s without, forward sensitivities 10 s and
0.78 s).

Usage: python benchmarks/mhv_figures.py [--draws N] [--fd-draws M] [--quick] [--no-plot]
       [--engine cvodes|scipy] [--method BDF|LSODA|Radau] [--clock cpu|wall]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")          # before numpy is imported

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from pyomo_odeest.discretization.continuous import (continuous_model,  # noqa: E402
                                                cvodes_available)
from pyomo_odeest.discretization.discrete import DiscreteModel  # noqa: E402
from pyomo_odeest.models._diagonal_linear import (diagonal_linear_exact_gradient,  # noqa: E402
                                                 diagonal_linear_problem)

RTOL, ATOL, METHOD = 1e-8, 1e-10, "BDF"
METHODS = ("fd", "sens", "adj", "disc")


CLOCK = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = CLOCK["cpu"]


def _timed(fn):
    t = _clock()
    out = fn()
    return _clock() - t, out


def _rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def measure(p, n_obs, draw, with_fd, method=METHOD, engine="cvodes"):
    """Times (s) and relative errors of the gradient methods for one draw."""
    prob = diagonal_linear_problem(p, n_obs=n_obs, seed=1000 * p + 7 * n_obs + draw)
    u = np.asarray(prob.true_values, dtype=float)
    cm = continuous_model(prob, engine, method=method,
                          rtol=RTOL, atol=ATOL)
    dm = DiscreteModel(prob, "adams_pc", 4, max_step=0.5)
    u0 = prob.u0
    cm.gradient(u0, "adjoint")                       # compile everything once
    cm.gradient(u0, "sensitivity")                   # (the directions' function too)
    dm.gradient(u0)
    exact = diagonal_linear_exact_gradient(u, prob)
    times, errs = {}, {}

    def cold(model):
        """Forget the model's forward solution and sensitivities: every method pays its
        own."""
        model._fwd_key = None
        if hasattr(model, "_sens"):
            model._sens = (None, None)
        return model
    times["adj"], g = _timed(lambda: cold(cm).gradient(u, "adjoint"))
    errs["adj"] = _rel(g, exact)
    times["sens"], g = _timed(lambda: cold(cm).gradient(u, "sensitivity"))
    errs["sens"] = _rel(g, exact)
    if with_fd:
        times["fd"], g = _timed(lambda: cold(cm).gradient(u, "fd"))
        errs["fd"] = _rel(g, exact)
    times["disc"], _ = _timed(lambda: dm.gradient(u))
    return times, errs


def sweep(configs, draws, fd_draws, label, method=METHOD, engine="cvodes"):
    rows = []
    for p, n_obs in configs:
        T = {m: [] for m in METHODS}
        E = {m: [] for m in METHODS}
        for d in range(draws):
            t, e = measure(p, n_obs, d, d < fd_draws, method, engine)
            for m in t:
                T[m].append(t[m])
            for m in e:
                E[m].append(e[m])
        row = dict(p=p, n_obs=n_obs,
                   **{m: float(np.median(T[m])) if T[m] else np.nan for m in METHODS},
                   **{f"err_{m}": float(np.median(E[m])) if E[m] else np.nan
                      for m in ("fd", "sens", "adj")})
        rows.append(row)
        print(f"{label:>3} p={p:4d} obs={n_obs:4d}  fd={row['fd']:8.3f}  sens={row['sens']:7.3f}"
              f"  adj={row['adj']:7.3f}  disc={row['disc']:7.4f}   rel.err fd={row['err_fd']:.1e}"
              f" sens={row['err_sens']:.1e} adj={row['err_adj']:.1e}", flush=True)
    return rows


def crossover(rows):
    """Smallest p from which adj < sens for every larger p (None if never)."""
    faster = [r["adj"] < r["sens"] for r in rows]
    for i in range(len(rows)):
        if all(faster[i:]):
            return rows[i]["p"]
    return None


def slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def plot(rows_p, rows_o, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    names = dict(fd="finite differences", sens="forward sensitivity (8)",
                 adj="continuous adjoint (15)–(16)", disc="discrete adjoint (52)/(54), Adams PC")
    paths = []
    for rows, key, xlabel, fname in ((rows_p, "p", "number of parameters p (11 observations)",
                                      "mhv_parameters.png"),
                                     (rows_o, "n_obs", "number of observation times (p = 50)",
                                      "mhv_observations.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        x = [r[key] for r in rows]
        for m in METHODS:
            y = [r[m] for r in rows]
            if not np.all(np.isnan(y)):
                ax.semilogy(x, y, "o-", label=names[m], ms=4)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time of one gradient [s] (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(outdir, fname)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--fd-draws", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="few sizes, one draw (smoke test)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--engine", default="cvodes" if cvodes_available() else "scipy",
                    choices=("cvodes", "scipy"),
                    help="engine of the continuous gradients (default: cvodes when CasADi "
                         "is installed)")
    ap.add_argument("--method", default=None, choices=("Adams", "BDF", "LSODA", "Radau"),
                    help="integrator method of the continuous gradients: CVODES's Adams "
                         "(default) or BDF with --engine cvodes; SciPy's BDF (default), "
                         "LSODA or Radau with --engine scipy")
    ap.add_argument("--clock", default="cpu", choices=("cpu", "wall"))
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(__file__), "..", "docs", "img"))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    global _clock
    _clock = CLOCK[args.clock]
    sizes = [2, 12, 22] if args.quick else list(range(2, 123, 10))
    sizes_p = [2, 12, 22] if args.quick else sorted(set(sizes) | {7, 17})
    draws = 1 if args.quick else args.draws
    fd_draws = min(draws, args.fd_draws)
    if args.method is None:
        args.method = "Adams" if args.engine == "cvodes" else METHOD
    integrator = (f"CVODES {args.method} (CasADi)" if args.engine == "cvodes"
                  else f"solve_ivp {args.method}")
    print(f"integrator {integrator}, rtol={RTOL:g}, atol={ATOL:g}; {args.clock} time; "
          f"{draws} draws per point "
          f"(finite differences on {fd_draws}); discrete: adams_pc, qmax 4, h <= 0.5; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; load average "
          f"{os.getloadavg()[0]:.1f}")
    p_last = sizes_p[-1]
    rows_p = sweep([(p, 11) for p in sizes_p], draws, fd_draws, "(a)", args.method, args.engine)
    rows_o = sweep([(50 if not args.quick else 12, k) for k in sizes], draws, fd_draws, "(b)",
                   args.method, args.engine)
    if not args.no_plot:
        for path in plot(rows_p, rows_o, args.outdir):
            print("figure:", os.path.normpath(path))
    obs = [r["n_obs"] for r in rows_o]
    s_disc = slope(obs, [r["disc"] for r in rows_o])
    s_adj = slope(obs, [r["adj"] for r in rows_o])
    s_sens = slope(obs, [r["sens"] for r in rows_o])
    last = rows_p[-1]
    cp = crossover(rows_p)
    print(f"observation-count slopes (log-log): continuous adjoint {s_adj:.2f}, "
          f"forward sensitivity {s_sens:.2f}, discrete adjoint {s_disc:.2f}")
    print(f"at p={p_last}: fd/sens = {last['fd'] / last['sens']:.1f}, "
          f"sens/adj = {last['sens'] / last['adj']:.2f}, adj/disc = {last['adj'] / last['disc']:.1f}")
    # [MHV]'s qualitative findings, reproduced or not
    verdict = [
        ("continuous adjoint overtakes forward sensitivity (seed: from p ~ 10)",
         cp is not None, f"from p = {cp}" if cp is not None else "not within p <= %d" % p_last),
        ("continuous adjoint cost grows with the number of observations",
         s_adj > 0.2, f"log-log slope {s_adj:.2f}"),
        ("forward sensitivity cost independent of the number of observations",
         abs(s_sens) < 0.2, f"slope {s_sens:.2f}"),
        ("discrete adjoint cost flat in the number of observations",
         abs(s_disc) < 0.2, f"slope {s_disc:.2f}"),
        ("finite differences cost about as much as forward sensitivity (seed: FD ~ SE)",
         last["fd"] / last["sens"] < 2.0, f"fd/sens = {last['fd'] / last['sens']:.1f} at p = {p_last}"),
    ]
    for claim, ok, detail in verdict:
        print(f"{'reproduced  ' if ok else 'CONTRADICTED'} {claim}: {detail}")
    print(f"mhv: crossover_p={cp} adjoint_speedup_at_p{p_last}={last['sens'] / last['adj']:.2f} "
          f"discrete_adjoint_obs_slope={s_disc:.3f}")


if __name__ == "__main__":
    main()
