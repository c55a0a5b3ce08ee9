"""Any multistep scheme of the package rendered as a CasADi NLP (for benchmarks).

The stage equations are read from the scheme's step batches
(``MultistepScheme.batches``), the same data :func:`pyomo_odeest.transcription._block.build_block`
renders into Pyomo, so both sides solve the same NLP: variables ``u``, the
states ``x_i`` and one vector per non-``x`` stage and step (the predictor ``y``,
the corrector ``yc``), constraints ``x_0 = l(u)`` and per step and stage

    v - x_i - h_i Σ_j c_j f(P_j) - h_i² Σ_j d_j ḟ(P_j) = 0,

with ḟ = D_x f · f (an autonomous right-hand side), and the least-squares
misfit at the measurement grid points.  The steps of one batch are one
``Function.map`` call.  Needs ``casadi`` (``pip install -e ".[bench]"``).
"""
from __future__ import annotations

import numpy as np


def casadi_nlp(f, n_states, n_params, scheme, t, x0, data_idx, data, expand):
    """``(nlp dict, variable layout)`` of ``scheme`` on grid ``t``.

    ``f(x, u)``: the right-hand side on CasADi symbols (autonomous);
    ``x0``: the initial state (numbers); ``data_idx``: grid indices of the
    measurements, ``data``: ``(n_states, len(data_idx))``.  The layout lists
    ``("u", None)``, ``("x", None)`` and ``("stage", name)`` blocks in the
    order of the NLP vector (each stage block column-major over steps).
    """
    import casadi as ca
    SX = ca.SX if expand else ca.MX
    n, k = n_states, len(t) - 1
    batches = scheme.batches(np.asarray(t, dtype=float))
    stage_names = [name for name in scheme.stage_names if name != "x"]
    U = SX.sym("u", n_params)
    X = SX.sym("X", n, k + 1)
    S = {name: SX.sym(name, n, k) for name in stage_names}
    xs, us = SX.sym("xs", n), SX.sym("us", n_params)
    f_fn = ca.Function("f", [xs, us], [f(xs, us)])
    fd_fn = ca.Function("fdot", [xs, us], [ca.jtimes(f(xs, us), xs, f(xs, us))])
    h = np.diff(np.asarray(t, dtype=float))
    rows = [X[:, 0] - ca.DM(x0)]
    for b in batches:
        steps = np.asarray(b.steps)
        # symbols of one step: x_i, past points, x_{i+1}, stage values, u, h, coefficients
        lags = sorted({p.lag for _, ft, dt in b.stages for p, _ in ft + dt if p.kind == "past"} | {0})
        sym_past = {lag: SX.sym(f"xm{lag}", n) for lag in lags}
        sym_new = SX.sym("xn", n)
        sym_st = {name: SX.sym(f"s_{name}", n) for name in stage_names}
        hs = SX.sym("h")
        coef_syms, coef_vals, res = [], [], []

        def point(p):
            if p.kind == "past":
                return sym_past[p.lag]
            if p.kind == "new":
                return sym_new
            return sym_st[p.stage]

        for name, ft, dt in b.stages:
            rhs = sym_past[0]
            for j, (p, c) in enumerate(ft):
                cs = SX.sym(f"c_{name}_{j}")
                coef_syms.append(cs)
                coef_vals.append(np.asarray(c, dtype=float))
                rhs = rhs + hs * cs * f_fn(point(p), us)
            for j, (p, d) in enumerate(dt):
                ds = SX.sym(f"d_{name}_{j}")
                coef_syms.append(ds)
                coef_vals.append(np.asarray(d, dtype=float))
                rhs = rhs + hs**2 * ds * fd_fn(point(p), us)
            v = sym_new if name == "x" else sym_st[name]
            res.append(v - rhs)
        ins = ([sym_past[lag] for lag in lags] + [sym_new] + [sym_st[s] for s in stage_names]
               + [us, hs] + coef_syms)
        step = ca.Function("step", ins, [ca.vertcat(*res)])
        args = ([X[:, (steps - lag).tolist()] for lag in lags] + [X[:, (steps + 1).tolist()]]
                + [S[s][:, steps.tolist()] for s in stage_names]
                + [ca.repmat(U, 1, len(steps)), ca.DM(h[steps]).T]
                + [ca.DM(np.broadcast_to(c, steps.shape)).T for c in coef_vals])
        rows.append(ca.vec(step.map(len(steps))(*args)))
    obj = ca.sumsqr(X[:, list(map(int, data_idx))] - ca.DM(data))
    w = ca.vertcat(U, ca.vec(X), *[ca.vec(S[s]) for s in stage_names])
    layout = [("u", None), ("x", None)] + [("stage", s) for s in stage_names]
    return {"x": w, "f": obj, "g": ca.vertcat(*rows)}, layout
