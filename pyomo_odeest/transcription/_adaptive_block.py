r"""Model (55) of [GM-grad] as a Pyomo Block for a frozen accept/reject pattern.

For the pattern :math:`(j_i, \text{clips}, \text{table levels})` of an
adaptive run (:mod:`pyomo_odeest.discretization.adaptive`) every relation of (55) becomes an
explicit equality constraint:

=================================  ===========================================================
component                          meaning [GM-grad, eq. (55)]
=================================  ===========================================================
``b.x[i, s]``, ``b.y[i, s]``       states :math:`x_i` (i = 0..k), predictors :math:`y_{i+1}`
                                   of step i
``b.t[i]``                         accepted times (``t[0]`` fixed at :math:`t_0`)
``b.h[i]``, ``b.e[i]``             accepted step :math:`h_i` and error :math:`e_i`
``b.H[i, j]``, ``b.eta[i, j]``     trial step :math:`h_{i,j}` and error :math:`e_{i,j}`,
                                   j = 1..j_i
``b.u[p]``                         parameters
``b.x0_eq[s]``                     :math:`x_0 = l(u)`                      (multiplier p_0)
``b.pred_eq[i, s]``                predictor of step i                     (q_{i+1})
``b.corr_eq[i, s]``                :math:`x_{i+1} = x_i + h_i F_i`          (p_{i+1})
``b.time_eq[i]``                   :math:`t_{i+1} = t_i + h_i`              (θ_{i+1})
``b.trial_eq[i, j]``               :math:`h_{i,j}` = Q / R(e_{i-1})h_{i-1} / r(e_{i,j-1})h_{i,j-1}
                                   / :math:`\tau - t_i` (``b.trial_kind[i, j]``)  (α_{i,j})
``b.yt[i, j, s]``, ``b.xt[...]``  trial predictor / corrector of trial j (explicit stage
                                   values of :math:`E`)
``b.trial_pred_eq[i, j, s]``,      their equations (same scheme with :math:`h_{i,j}`)
``b.trial_corr_eq[i, j, s]``
``b.err_eq[i, j]``                 :math:`e_{i,j} = C_M\|\tilde x^c_{i,j} - \tilde y_{i,j}\|_{x_i}`,
                                   i.e. :math:`E(\mathbf x_i, u, h_{i,j})`   (γ_{i,j})
``b.accept_h_eq[i]``               :math:`h_i = h_{i,j_i}`                   (δ_i)
``b.accept_e_eq[i]``               :math:`e_i = e_{i,j_i}`                   (β_i)
``b.misfit``, ``b.objective``      :math:`J_{h,k}` at the measurement times (grid points)
=================================  ===========================================================

The trial stage values are unknowns defined by their own equations, so
eliminating them gives back :math:`e_{i,j} = E(\mathbf x_i, u, h_{i,j})` of
(55) and does not change any other multiplier; they keep every constraint
small, which keeps the symbolic derivatives of the NLP evaluator cheap.

Every body is ``lhs - rhs`` with the defined unknown on the left, so Ipopt's
``dual`` (Lagrangian :math:`J + \lambda^\top c`) equals the multipliers of
the Lagrangian of §2.4: the multiplier of ``corr_eq[i, s]`` is
:math:`p_{i+1}`, of ``trial_eq[i, j]`` is :math:`\alpha_{i,j}`, and so on
(:func:`compare_block_multipliers`).  The acceptance tests are *not*
constraints (only the bounds :math:`h_i, h_{i,j}, e_i, e_{i,j} \ge 0`, never active
at a solution since :math:`e \ge C_M\phi\varepsilon`; the bounds on the errors keep
Ipopt's iterates where the controller's :math:`\log e` is defined):
:func:`~pyomo_odeest.approaches.estimate_adaptive` re-runs the integrator at the
solution and rebuilds when the pattern changed (docs/adaptive.md, "Limitations observed").
"""
from __future__ import annotations


import numpy as np
import pyomo.environ as pyo
import sympy

from ..discretization.adaptive import (AdaptiveAdjoint, AdaptiveModel, AdaptiveRun,
                       max_relative_discrepancy)
from ..symbolic._convert import sympy_to_pyomo
from ._block import add_misfit, set_parameter_vars
from ._initial_state import add_initial_condition

__all__ = ["build_adaptive_block", "run_from_block", "block_multipliers",
           "compare_block_multipliers", "adaptive_constraint"]


def build_adaptive_block(am: AdaptiveModel, run: AdaptiveRun, block=None, parameters=None):
    """Render model (55) for the pattern of ``run`` (values of ``run`` as start point).

    Parameters
    ----------
    am : AdaptiveModel
    run : AdaptiveRun
        Defines the frozen pattern and the initial values.
    block : Block, optional
        Constructed block to fill (a new concrete block otherwise).
    parameters : IndexedVar, optional
        Parameter variables shared with other blocks (several experiments,
        :func:`~pyomo_odeest.transcription._experiments.build_experiment_blocks`):
        ``b.u`` is then a Reference to them, set to ``run.u``.

    Returns
    -------
    Block with the components of the module docstring and the attributes
    ``amodel``, ``pattern``, ``targets`` (landing time of each step) and
    ``J`` (grid index of each measurement time).
    """
    P = am.problem
    pat = run.pattern
    k = run.k
    S = P.states
    sy = am.sym
    b = block if block is not None else pyo.Block(concrete=True)
    b.amodel = am
    b.problem = P
    b.pattern = pat
    b.targets = am.step_targets(pat)
    b.J = run.J.copy()
    b.S = pyo.Set(initialize=S, ordered=True)
    b.P = pyo.Set(initialize=P.parameter_names, ordered=True)
    b.K = pyo.RangeSet(0, k)
    b.steps = pyo.RangeSet(0, k - 1)
    trials = [(i, jj + 1) for i in range(k) for jj in range(pat.j[i])]
    b.trials = pyo.Set(initialize=trials, dimen=2, ordered=True)
    b.trial_kind = {(i, j): pat.kind(i, j - 1) for i, j in trials}

    b.x = pyo.Var(b.K, b.S, initialize={(i, s): float(run.x[i, a]) for i in range(k + 1)
                                        for a, s in enumerate(S)})
    b.y = pyo.Var(b.steps, b.S, initialize={(i, s): float(run.y[i, a]) for i in range(k)
                                            for a, s in enumerate(S)})
    b.t = pyo.Var(b.K, initialize={i: float(run.t[i]) for i in range(k + 1)})
    b.t[0].fix(float(run.t[0]))
    b.h = pyo.Var(b.steps, initialize={i: float(run.h[i]) for i in range(k)}, bounds=(0.0, None))
    # e, eta >= C_M*floor*eps > 0 wherever the equations hold: the bound 0, never active at
    # a solution, keeps Ipopt's iterates inside the domain of the controller's log(e) (a
    # step to e <= 0 is otherwise cut back as an evaluation error, and Ipopt's restoration
    # phase can stall on such errors)
    b.e = pyo.Var(b.steps, initialize={i: float(run.e[i]) for i in range(k)}, bounds=(0.0, None))
    b.H = pyo.Var(b.trials, initialize={(i, j): float(run.H[i][j - 1]) for i, j in trials},
                  bounds=(0.0, None))
    b.eta = pyo.Var(b.trials, initialize={(i, j): float(run.eta[i][j - 1]) for i, j in trials},
                    bounds=(0.0, None))
    b.yt = pyo.Var(b.trials, b.S, initialize={(i, j, s): float(run.yt[i][j - 1][a])
                                              for i, j in trials for a, s in enumerate(S)})
    b.xt = pyo.Var(b.trials, b.S, initialize={(i, j, s): float(run.xc[i][j - 1][a])
                                              for i, j in trials for a, s in enumerate(S)})
    if parameters is not None:
        b.u = pyo.Reference(parameters[:])
    else:
        b.u = pyo.Var(b.P)
    set_parameter_vars(b.u, P.parameters, run.u)

    usub = {sym: b.u[p] for sym, p in zip(P.u_sym, P.parameter_names)}

    def objects(i, hvar):
        Q = int(run.Q[i])
        o = dict(usub)
        o.update({sy["xi"][a]: b.x[i, s] for a, s in enumerate(S)})
        o[sy["h"]] = hvar
        o[sy["ti"]] = b.t[i]
        if Q == 2:
            o.update({sy["xm"][a]: b.x[i - 1, s] for a, s in enumerate(S)})
            o[sy["tm"]] = b.t[i - 1]
        return Q, o

    # x0 = l(u)
    add_initial_condition(b, P, usub)

    def predictor(i, s, h):
        """The predictor of state s for step i taken with step ``h``."""
        Q, o = objects(i, h)
        return sympy_to_pyomo(am.exprs[Q]["Y"][S.index(s)], o)

    def corrector(i, s, h, y):
        """x_i + h F_i of state s for step i taken with step ``h`` and predictor ``y``."""
        Q, o = objects(i, h)
        o.update(zip(sy["yv"], y))
        return b.x[i, s] + h * sympy_to_pyomo(am.exprs[Q]["Fv"][S.index(s)], o)

    b.pred_eq = pyo.Constraint(b.steps, b.S,
                               rule=lambda b, i, s: b.y[i, s] == predictor(i, s, b.h[i]))
    b.corr_eq = pyo.Constraint(b.steps, b.S, rule=lambda b, i, s: b.x[i + 1, s] == corrector(
        i, s, b.h[i], [b.y[i, z] for z in S]))
    b.time_eq = pyo.Constraint(b.steps, rule=lambda b, i: b.t[i + 1] == b.t[i] + b.h[i])

    c = am.controller
    esym = sympy.Symbol("_e", positive=True)
    xsub0 = dict(usub)
    xsub0.update({xs: b.x[0, s] for xs, s in zip(P.x_sym, S)})
    Q_py = sympy_to_pyomo(am.Q_expr, xsub0) if am.Q_expr.free_symbols else float(am.Q_expr)

    def trial_rule(b, i, j):
        kind = b.trial_kind[i, j]
        if kind == "Q":
            return b.H[i, j] == Q_py
        if kind == "clip":
            return b.H[i, j] == float(b.targets[i]) - b.t[i]
        if kind == "R":
            fac = c.R.sym(esym, c.eps, am.q, pat.levels[i][0])
            ev, hv = b.e[i - 1], b.h[i - 1]
        else:
            fac = c.r.sym(esym, c.eps, am.q, pat.levels[i][j - 1])
            ev, hv = b.eta[i, j - 1], b.H[i, j - 1]
        f = sympy_to_pyomo(fac, {esym: ev}) if fac.free_symbols else float(fac)
        return b.H[i, j] == f * hv

    Ed = am.exprs["Ed"]

    def err_rule(b, i, j):
        o = {sy["xi"][a]: b.x[i, s] for a, s in enumerate(S)}
        o.update({sy["yv"][a]: b.yt[i, j, s] for a, s in enumerate(S)})
        o.update({sy["xcv"][a]: b.xt[i, j, s] for a, s in enumerate(S)})
        return b.eta[i, j] == sympy_to_pyomo(Ed, o)

    b.trial_eq = pyo.Constraint(b.trials, rule=trial_rule)
    b.trial_pred_eq = pyo.Constraint(b.trials, b.S, rule=lambda b, i, j, s: b.yt[i, j, s] == (
        predictor(i, s, b.H[i, j])))
    b.trial_corr_eq = pyo.Constraint(b.trials, b.S, rule=lambda b, i, j, s: b.xt[i, j, s] == (
        corrector(i, s, b.H[i, j], [b.yt[i, j, z] for z in S])))
    b.err_eq = pyo.Constraint(b.trials, rule=err_rule)
    b.accept_h_eq = pyo.Constraint(b.steps, rule=lambda b, i: b.h[i] == b.H[i, pat.j[i]])
    b.accept_e_eq = pyo.Constraint(b.steps, rule=lambda b, i: b.e[i] == b.eta[i, pat.j[i]])

    add_misfit(b, P, usub, run.J, run.t)
    b.objective = pyo.Objective(expr=b.misfit)
    return b


def adaptive_constraint(b, kind, i, j=None, state=None):
    """The ConstraintData of relation ``kind`` of step ``i`` (trial ``j``, 1-based; ``state``).

    ``kind``: ``'x0'``, ``'pred'``, ``'corr'``, ``'time'``, ``'trial'``, ``'trial_pred'``,
    ``'trial_corr'``, ``'err'``, ``'accept_h'``, ``'accept_e'``.
    """
    comp = b.component(f"{kind}_eq")
    if comp is None:
        raise KeyError(f"unknown relation {kind!r}")
    index = {"x0": (state,), "pred": (i, state), "corr": (i, state), "trial": (i, j), "err": (i, j),
             "trial_pred": (i, j, state), "trial_corr": (i, j, state)}
    return comp[index.get(kind, (i,))]


def run_from_block(b) -> AdaptiveRun:
    """The block's current values as an :class:`~pyomo_odeest.discretization.adaptive.AdaptiveRun`."""
    am, pat = b.amodel, b.pattern
    S = list(b.S)
    k = pat.k
    v = pyo.value
    u = np.array([v(b.u[p]) for p in b.P], dtype=float)
    X = np.array([[v(b.x[i, s]) for s in S] for i in range(k + 1)])
    Y = np.array([[v(b.y[i, s]) for s in S] for i in range(k)])
    t = np.array([v(b.t[i]) for i in range(k + 1)])
    H = [np.array([v(b.H[i, j + 1]) for j in range(pat.j[i])]) for i in range(k)]
    eta = [np.array([v(b.eta[i, j + 1]) for j in range(pat.j[i])]) for i in range(k)]
    Qs = np.array([min(i + 1, am.qmax - 1) for i in range(k)], dtype=int)
    yt, xc = [], []
    for i in range(k):
        Q = int(Qs[i])
        xm, tm = am._hist(X, t, i, Q)
        for out, fn in ((yt, am._fn[Q]["Y"]), (xc, am._fn[Q]["XC"])):   # trial stage values
            out.append(np.array([np.asarray(fn(X[i], xm, u, h, t[i], tm), float).reshape(-1)
                                 for h in H[i]]))
    return AdaptiveRun(u=u, t=t, x=X, y=Y, h=np.array([v(b.h[i]) for i in range(k)]),
                       e=np.array([v(b.e[i]) for i in range(k)]), H=H, eta=eta, yt=yt, xc=xc,
                       Q=Qs, pattern=pat, J=np.asarray(b.J, dtype=int))


def block_multipliers(b, dual) -> AdaptiveAdjoint:
    """Ipopt's multipliers of the block arranged as p, q, θ, α, γ, β, δ (gradient by eq. (59))."""
    pat = b.pattern
    S = list(b.S)
    k = pat.k
    g = dual.get
    p = np.array([[g(b.x0_eq[s], np.nan) for s in S]]
                 + [[g(b.corr_eq[i, s], np.nan) for s in S] for i in range(k)])
    q = np.array([[g(b.pred_eq[i, s], np.nan) for s in S] for i in range(k)])
    theta = np.array([0.0] + [g(b.time_eq[i], np.nan) for i in range(k)])
    alpha = [np.array([g(b.trial_eq[i, j + 1], np.nan) for j in range(pat.j[i])]) for i in range(k)]
    gamma = [np.array([g(b.err_eq[i, j + 1], np.nan) for j in range(pat.j[i])]) for i in range(k)]
    beta = np.array([g(b.accept_e_eq[i], np.nan) for i in range(k)])
    delta = np.array([g(b.accept_h_eq[i], np.nan) for i in range(k)])
    run = run_from_block(b)
    grad = b.amodel.gradient_from_multipliers(run, p, alpha, gamma)
    return AdaptiveAdjoint(p=p, q=q, theta=theta, alpha=alpha, gamma=gamma, beta=beta,
                           delta=delta, gradient=grad)


def compare_block_multipliers(model, block=None) -> dict:
    r"""Ipopt's duals of a solved adaptive block versus the recursion (56)–(58).

    The recursion is evaluated at the block's own values.  Returns a dict:
    per family (``p, q, theta, alpha, gamma, beta, delta``) the relative
    discrepancy :math:`\max|\lambda - \mu| / \|\mu\|_\infty`, ``'max'`` over
    all families, ``'general'`` the same for the sparse transposed solve
    versus the recursion, and the multiplier objects ``'duals'``,
    ``'recursion'``.
    """
    b = block if block is not None else model.est
    dual = getattr(model, "dual", None)
    if dual is None or not len(dual):
        raise ValueError("the model has no dual suffix values; solve it with "
                         "model.dual = Suffix(direction=Suffix.IMPORT)")
    run = run_from_block(b)
    rec = b.amodel.adjoint(run)
    duals = block_multipliers(b, dual)
    out = max_relative_discrepancy(duals, rec)
    out["general"] = max_relative_discrepancy(b.amodel.general_adjoint(run), rec)["max"]
    out["duals"] = duals
    out["recursion"] = rec
    return out
