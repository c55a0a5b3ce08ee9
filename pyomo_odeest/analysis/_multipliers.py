r"""Ipopt's multipliers versus the discrete adjoint of [GM-grad].

With the block's equations ``G = v − x_i − h_i F_i`` and ``x_0 − l(u)`` and the
objective unscaled, **the multiplier of the equation defining x_i is p_i of
eq. (52)**, the stage multipliers are q, q^c of §2.3.2, and eq. (54) turns them
into ∇J_k(u); see docs/multipliers.md.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyomo.environ as pyo

from ..transcription._block import build_block, scheme_constraint
from ..discretization.discrete import DiscreteModel, Trajectory
from ._recursions import paper_adjoint
from ..transcription import initialize_block
from ..nlp._plugin import OdeestIpoptSolver
from ..problem._status import status_from_ipopt

__all__ = ["MultiplierReport", "validate_multipliers", "adjoint_from_duals", "block_trajectory"]


def block_trajectory(b, dm: DiscreteModel) -> Trajectory:
    """The block's current values as a trajectory of ``dm`` (same layout)."""
    S = b.problem.states
    W = np.zeros((dm.nblocks, dm.n))
    W[0] = [pyo.value(b.x[0, s]) for s in S]
    for (stage, i), blk in dm.stage_blk.items():
        comp = b.x if stage == "x" else b.component(stage)
        idx = i + 1 if stage == "x" else i
        W[blk] = [pyo.value(comp[idx, s]) for s in S]
    u = np.array([pyo.value(b.u[p]) for p in b.problem.parameter_names])
    return Trajectory(u=u, W=W, X=W[dm.xblk])


def _block_duals(b, dual, dm):
    """Multipliers of every block equation, arranged like ``dm``'s blocks."""
    S = b.problem.states
    L = np.full((dm.nblocks, dm.n), np.nan)
    L[0] = [dual.get(b.x0_eq[s], np.nan) for s in S]
    for (stage, i), blk in dm.stage_blk.items():
        L[blk] = [dual.get(scheme_constraint(b, i, s, stage), np.nan) for s in S]
    return L


class MultiplierReport:
    """Discrepancies between Ipopt's multipliers and the adjoint.

    Attributes
    ----------
    table : DataFrame indexed by (stage, step) with, per state, the Ipopt
        multiplier, the recursion/adjoint value and the relative discrepancy
        ``|λ − p| / max(|p|_∞, tiny)``.
    max_rel_recursion : largest discrepancy of the x-equations against the
        papers' recursion (eq. (52) / §2.3.2).
    max_rel_adjoint : largest discrepancy of all equations (x and stages)
        against the general adjoint ``(∂G/∂w)ᵀ p = −∇_w F``.
    gradient_from_duals, gradient_adjoint : ∇J_k(u) by eq. (54) from the duals
        and from the reduced-space adjoint.
    """

    def __init__(self, table, max_rel_recursion, max_rel_adjoint, worst, grad_duals, grad_adj):
        self.table = table
        self.max_rel_recursion = max_rel_recursion
        self.max_rel_adjoint = max_rel_adjoint
        self.worst = worst
        self.gradient_from_duals = grad_duals
        self.gradient_adjoint = grad_adj

    def __repr__(self):
        return (f"MultiplierReport(max_rel_recursion={self.max_rel_recursion:.3e}, "
                f"max_rel_adjoint={self.max_rel_adjoint:.3e}, worst={self.worst})")


def validate_multipliers(model, dm: DiscreteModel | None = None) -> MultiplierReport:
    """Compare the ``dual`` suffix of a solved block model with the adjoint.

    ``model`` is a solved model holding the block as ``model.est`` and an
    IMPORT ``dual`` suffix (what :func:`estimate_simultaneous` returns in
    ``result.model``).  The adjoint is computed at the block's own solution
    (states and stages as Ipopt returned them).
    """
    b = model.est
    dual = getattr(model, "dual", None)
    if dual is None or not len(dual):
        raise ValueError("the model has no dual suffix values; solve it with "
                         "model.dual = Suffix(direction=Suffix.IMPORT)")
    dm = dm or DiscreteModel(b.problem, b.scheme, grid=b.grid)
    traj = block_trajectory(b, dm)
    lam = _block_duals(b, dual, dm)
    P = dm.adjoint(traj)
    pa = paper_adjoint(dm, traj)
    p_rec = pa[0] if isinstance(pa, tuple) else pa
    scale = max(np.max(np.abs(P)), 1e-300)
    rel_adj = np.abs(lam - P) / scale
    rel_rec = np.abs(lam[dm.xblk] - p_rec) / max(np.max(np.abs(p_rec)), 1e-300)
    S = b.problem.states
    table = pd.DataFrame(
        np.stack([lam, P, rel_adj], axis=2).reshape(dm.nblocks, -1),
        index=pd.MultiIndex.from_arrays([dm.blk_stage, dm.blk_step.astype(int)],
                                        names=["stage", "step"]),
        columns=pd.MultiIndex.from_product([S, ["ipopt", "adjoint", "rel_err"]]))
    wb, ws = np.unravel_index(np.argmax(rel_adj), rel_adj.shape)
    worst = dict(stage=dm.blk_stage[wb], step=int(dm.blk_step[wb]), state=S[ws],
                 rel_err=float(rel_adj[wb, ws]))
    pv = dm._point_values(traj.W, traj.u)
    Fw, Fu = dm._dF(traj.W, traj.u)
    g_duals = dm._gradient_from_adjoint(lam, traj, Fu, pv)
    g_adj = dm._gradient_from_adjoint(P, traj, Fu, pv)
    return MultiplierReport(table, float(np.max(rel_rec)), float(np.max(rel_adj)), worst,
                            g_duals, g_adj)


def adjoint_from_duals(problem, u, scheme="adams_pc", qmax=None, grid=None, max_step=None,
                       steps_per_interval=None, options=None):
    """Fix u, solve the block for the states with Ipopt, and read the adjoint from the duals.

    Returns ``(report, gradient)`` where ``gradient`` is ∇J_k(u) by eq. (54)
    from Ipopt's multipliers and ``report`` the :class:`MultiplierReport`.
    """
    u = np.asarray(u, dtype=float)
    m = pyo.ConcreteModel()
    m.est = build_block(problem, scheme, qmax, grid, max_step, steps_per_interval)
    for p, v in zip(problem.parameter_names, u):
        m.est.u[p].fix(float(v))
    initialize_block(m.est, u, "auto")
    m.dual = pyo.Suffix(direction=pyo.Suffix.IMPORT)
    s = OdeestIpoptSolver()
    s.solve(m, options={"tol": 1e-12, **(options or {})})
    if not status_from_ipopt(s.last_info["status"]).success:
        raise RuntimeError(f"solving the block at fixed u failed: {s.last_info['status']}")
    rep = validate_multipliers(m)
    return rep, rep.gradient_from_duals
