"""Import check of PEtab problems: does each import, and at its reference NLL?

For every problem folder: :func:`~pyomo_odeest.petab_io.petab_problem` (the import for
estimation), the NLL at the nominal parameters by the imported problem's own
simulation (the continuous approach's model, LSODA, rtol 1e-10, atol 1e-12, every
experiment: what the estimation minimizes, less the priors' penalty; a profiled σ at its
nominal value), and by the independent simulation of the
PEtab model (:func:`~pyomo_odeest.petab_io.petab_nll`) at the same point (a nominal value
outside its bounds moved onto them, as the import starts there); both compared with the
reference within 1e-3·max(1, |NLL|).  Each problem runs in a process of its own with a
time limit.  References: ``reference_nll`` of a ``references.tsv`` beside the folders,
or ``--references FILE``.

    python benchmarks/petab_import.py FOLDER... [--references FILE] [--timeout S] [--out TSV]
                                    [--engine scipy|cvodes]

``--engine cvodes``: the imported problem's own NLL by the continuous approach's
CVODES engine at its default tolerances instead of LSODA at rtol 1e-10 (does every
problem simulate on the engine the fits use?), and ``eval_s``: the median time of
one objective and its forward sensitivities at the nominal point (one iteration of the
least squares; ``amici_peer.py``'s ``eval_s`` is AMICI's objective and gradient), or
``eval_error`` where the sensitivities fail there (the NLL is reported all the same).
``--compare-forward`` (with ``--engine cvodes``): also ``eval_forward_s``, the same time
with the sensitivities by CasADi's forward derivative of the states' function
(``G.forward(k)``, the engine's earlier sensitivities) instead of the engine's one
augmented integration of states and sensitivities, timed alternately in the same
process, ``sens_difference``: the largest difference of the two sensitivity matrices
over the largest entry, and ``sens_error``, ``sens_error_forward``: each one's
difference from a solve at rtol 1e-12, atol 1e-14.

Output: one line per problem ``petab_import: name=... status=... nll_import=...
nll_petab=... reference=... difference=...`` (``difference``: (nll_import -
reference) / max(1, |reference|), which ``match`` bounds by 1e-3) and the table
(TSV) in ``--out``.  ``status``:
``match`` (the imported problem's nominal NLL is the reference), ``mismatch``,
``no_reference``, ``refused`` (the import raised; ``reason`` holds the message),
``time_limit``.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
#: objective + sensitivity evaluations timed per problem (``--engine cvodes``)
EVAL_REPEATS = 5


def yaml_of(folder):
    ys = sorted(f for f in os.listdir(folder) if f.endswith((".yaml", ".yml")))
    base = os.path.basename(folder.rstrip("/"))
    own = [f for f in ys if os.path.splitext(f)[0] == base]
    return os.path.join(folder, (own or ys)[0])


def evaluation_time(P, models, repeats=EVAL_REPEATS):
    """Median seconds of one objective and its forward sensitivities (the least squares'
    residuals and Jacobian: one iteration's integrations) at the nominal point, over
    every experiment; the first of ``repeats + 1`` calls (which builds the compiled
    functions) not counted.  The points differ by 1e-12 (relative), as the models keep
    their last sensitivities."""
    free = np.flatnonzero(P.free_mask)
    V = np.eye(len(P.u0))[:, free]
    times = []
    for k in range(repeats + 1):
        u = np.asarray(P.u0, dtype=float) * (1 + 1e-12 * k)
        t = time.perf_counter()
        for m in models:
            m.objective(u)
            m.sensitivities(u, V)
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))


def forward_comparison(P, subs, repeats=EVAL_REPEATS):
    """``(eval_s, eval_forward_s, sens_difference, sens_error, sens_error_forward)``:
    :func:`evaluation_time` with the engine's sensitivities (one augmented integration)
    and with CasADi's forward derivative of the states' function, alternately, the
    largest difference of their sensitivities, and each one's from a solve at rtol
    1e-12, atol 1e-14 (relative to the largest entry)."""
    import casadi as ca

    from pyomo_odeest.discretization.continuous import _cvodes

    class CasadiForward(_cvodes.CvodesModel):
        """The sensitivities as ``G.forward(k)`` with the engine's signature."""

        def _build_sensitivities(self, k):
            n, dyn, m = self.n, self._dynamic, len(self.grid)
            units = isinstance(k, tuple)          # unit directions at these positions
            nk = len(k) if units else k
            x0, S0 = ca.MX.sym("x0", n), ca.MX.sym("S0", n, nk)
            u, V = ca.MX.sym("u", self.p), ca.MX.sym("V", 0 if units else len(dyn), nk)
            rows = ca.DM.zeros(self.p, len(dyn))
            for j, i in enumerate(dyn):
                rows[int(i), j] = 1.0
            Vu = ca.DM.zeros(self.p, nk)
            for c, j in enumerate(k if units else ()):
                Vu[int(dyn[j]), c] = 1.0
            k = nk
            dX = self._f("G").forward(k)(x0=x0, u=u, fwd_x0=S0,
                                         fwd_u=Vu if units else ca.mtimes(rows, V))["fwd_X"]
            out = ca.vertcat(ca.MX(n, m), *ca.horzsplit(dX, m)) if m else ca.MX(n * (k + 1), 0)
            return ca.Function("F", [x0, S0, u, V], [out], ["x0", "S0", "u", "V"], ["X"])

        def _settings_key(self):           # its own compiled functions
            return super()._settings_key() + ("casadi_forward",)
    ours = [_cvodes.CvodesModel(sp) for sp in subs]
    theirs = [CasadiForward(sp) for sp in subs]
    to, tf = [], []
    for _ in range(2):
        to.append(evaluation_time(P, ours, repeats))
        tf.append(evaluation_time(P, theirs, repeats))
    free = np.flatnonzero(P.free_mask)
    V = np.eye(len(P.u0))[:, free]
    u = np.asarray(P.u0, dtype=float) * (1 + 1e-9)
    So = np.concatenate([m.sensitivities(u, V)[2].ravel() for m in ours])
    Sf = np.concatenate([m.sensitivities(u, V)[2].ravel() for m in theirs])
    tight = np.concatenate([_cvodes.CvodesModel(sp, rtol=1e-12, atol=1e-14)
                            .sensitivities(u, V)[2].ravel() for sp in subs])
    big = max(np.max(np.abs(tight)), 1e-300)
    return (min(to), min(tf), float(np.max(np.abs(So - Sf)) / max(np.max(np.abs(So)), 1e-300)),
            float(np.max(np.abs(So - tight)) / big), float(np.max(np.abs(Sf - tight)) / big))


def check(folder, queue, engine="scipy", compare_forward=False):
    from pyomo_odeest.discretization.continuous import ContinuousModel, continuous_model
    from pyomo_odeest.petab_io import petab_nll, petab_problem, read_petab
    from pyomo_odeest.petab_io._tables import scale_value
    out = {}
    t0 = time.perf_counter()
    try:
        model = read_petab(yaml_of(folder))
        pe = petab_problem(model)
        out["import_s"] = time.perf_counter() - t0
        P = pe.problem
        subs = P.experiment_problems if P.experiments else [P]
        models = [ContinuousModel(sp, method="LSODA", rtol=1e-10, atol=1e-12)
                  if engine == "scipy" else continuous_model(sp, engine="cvodes")
                  for sp in subs]
        J = sum(m.objective(P.u0) for m in models)
        if engine == "cvodes":
            try:              # the NLL stands where the sensitivities cannot be had
                out["eval_s"] = evaluation_time(P, models)
                if compare_forward:
                    (out["eval_s"], out["eval_forward_s"], out["sens_difference"],
                     out["sens_error"], out["sens_error_forward"]) = forward_comparison(P, subs)
            except Exception as err:        # noqa: BLE001 - the reason is the result
                out["eval_error"] = f"{type(err).__name__}: {err}"
        if pe.sigma_parameter is None:
            out["nll_import"] = float(pe.nll(J))
        else:       # σ = c·s at the nominal s (pe.nll would profile s out)
            s = model.parameter(pe.sigma_parameter).nominal
            out["nll_import"] = float(np.sum(0.5 * np.log(2 * np.pi * (pe._c * s) ** 2))
                                      + pe._jac + J / (2 * s**2))
        # the estimation's objective holds the priors (their penalty); PEtab's NLL does not
        out["nll_import"] -= model.prior_nll()
        # at the same point: the import's start (nominal values, moved into the bounds
        # where the table's lie outside them), a profiled σ at its nominal value
        start = dict(zip(P.parameter_names, np.asarray(P.u0, dtype=float)))
        scaled = [start[p.id] if p.id in start and p.id != pe.sigma_parameter
                  else scale_value(p.nominal, p.scale) for p in model.estimated]
        out["nll_petab"] = float(petab_nll(model, scaled=scaled))
    except Exception as err:        # noqa: BLE001 - the reason is the result
        out["error"] = f"{type(err).__name__}: {err}"
    out["wall_s"] = time.perf_counter() - t0
    queue.put(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--references", default=None)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--engine", choices=("scipy", "cvodes"), default="scipy",
                    help="the imported problem's own simulation: LSODA at rtol 1e-10 (scipy) "
                         "or the continuous approach's CVODES at its defaults (cvodes)")
    ap.add_argument("--compare-forward", action="store_true",
                    help="with --engine cvodes: also time the sensitivities by CasADi's "
                         "forward derivative (eval_forward_s, sens_difference)")
    a = ap.parse_args(argv)
    if a.compare_forward and a.engine != "cvodes":
        ap.error("--compare-forward needs --engine cvodes")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from petab_suite import problem_folders
    folders = problem_folders(a.folders)
    ref = {}
    files = [a.references] if a.references else [
        os.path.join(d, "references.tsv") for d in {os.path.dirname(f) for f in folders}]
    for f in files:
        if f and os.path.exists(f):
            ref.update(pd.read_csv(f, sep="\t", index_col="problem")["reference_nll"].to_dict())
    rows = []
    ctx = mp.get_context("fork")
    for folder in folders:
        name = os.path.basename(folder)
        q = ctx.Queue()
        proc = ctx.Process(target=check, args=(folder, q, a.engine, a.compare_forward))
        t0 = time.perf_counter()
        proc.start()
        proc.join(a.timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            res = {"error": f"time limit {a.timeout:g} s", "wall_s": a.timeout}
            status = "time_limit"
        else:
            res = json.loads(q.get()) if not q.empty() else {"error": "no result"}
            status = "refused" if "error" in res else None
        r = ref.get(name, np.nan)
        nll = res.get("nll_import", np.nan)
        if status is None:
            status = ("no_reference" if not np.isfinite(r) else
                      "match" if abs(nll - r) <= 1e-3 * max(1.0, abs(r)) else "mismatch")
        row = dict(problem=name, status=status, nll_import=nll,
                   nll_petab=res.get("nll_petab", np.nan), reference=r,
                   import_s=res.get("import_s", np.nan), eval_s=res.get("eval_s", np.nan),
                   eval_forward_s=res.get("eval_forward_s", np.nan),
                   sens_difference=res.get("sens_difference", np.nan),
                   sens_error=res.get("sens_error", np.nan),
                   sens_error_forward=res.get("sens_error_forward", np.nan),
                   wall_s=time.perf_counter() - t0, reason=res.get("error", ""),
                   eval_error=res.get("eval_error", ""))
        rows.append(row)
        row["difference"] = (nll - r) / max(1.0, abs(r))
        print(f"petab_import: name={name} status={status} nll_import={nll:.10g} "
              f"nll_petab={row['nll_petab']:.10g} reference={r:.10g} "
              f"difference={row['difference']:.2g} eval_s={row['eval_s']:.4f} "
              + (f"eval_forward_s={row['eval_forward_s']:.4f} "
                 f"sens_difference={row['sens_difference']:.2g} "
                 f"sens_error={row['sens_error']:.3g} "
                 f"sens_error_forward={row['sens_error_forward']:.3g} " if a.compare_forward else "")
              + f"wall_s={row['wall_s']:.1f}" + (f" reason={row['reason'][:300]}"
                                               if row["reason"] else "")
              + (f" eval_error={row['eval_error'][:300]}" if row["eval_error"] else ""),
              flush=True)
    tab = pd.DataFrame(rows)
    if a.out:
        tab.to_csv(a.out, sep="\t", index=False)
    n = int((tab["status"] == "match").sum())
    print(f"petab_import: problems={len(tab)} match={n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
