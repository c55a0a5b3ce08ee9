r"""Convergence of the discrete problems to the continuous one [GM-conv, Theorem 1].

With uniform steps :math:`h = T/k`, [GM-conv] proves that the discrete gradients
:math:`\nabla J_k(u)` converge to the continuous gradient :math:`\nabla J(u)`
and that accumulation points of discrete stationary points :math:`u_k` are
stationary points of the continuous problem.  :func:`convergence_study`
measures both on a sequence of grids:

* gradient error :math:`\|\nabla J_k(u) - \nabla J(u)\| / \|\nabla J(u)\|`
  at a fixed u (default: the problem's start values; at a stationary point,
  where :math:`\nabla J = 0`, the error is taken relative to
  :math:`\|\nabla J_{k_0}(u)\|` of the coarsest grid),
* parameter error :math:`\|u_k - u^*\| / \|u^*\|` with :math:`u_k` the
  minimizer of :math:`J_k` (reduced space, exact Hessian, from :math:`u^*`),
* the observed rate :math:`\log(e_{k-1}/e_k) / \log(h_{k-1}/h_k)`.

The continuous reference uses :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`
at tight tolerances.  For the Adams predictor–corrector with the order ramp on
a uniform grid the expected rate is ``scheme.startup_order`` = min(3, Q_max)
(the Heun first step limits it, see ``docs/schemes.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..discretization.discrete import DiscreteModel
from ..discretization._grid import make_grid
from ..problem._declaration import EstimationProblem
from ..approaches._reduced import estimate_reduced
from ..discretization.schemes import get_scheme

__all__ = ["ConvergenceStudy", "convergence_study", "uniform_grid"]


def uniform_grid(problem: EstimationProblem, k: int):
    """Uniform grid ``t_0 + i h``, ``h = (T - t_0)/k``, containing every measurement time.

    Raises ValueError if a measurement time is not a multiple of h.
    """
    t0, T = problem.t0, problem.T
    h = (T - t0) / k
    pos = (problem.meas_times - t0) / h
    if np.any(np.abs(pos - np.rint(pos)) > 1e-9 * max(1.0, k)):
        raise ValueError(f"k = {k}: the measurement times are not on the uniform grid h = {h:g}; "
                         "choose k as a multiple of the measurement spacing")
    grid = make_grid(problem.meas_times, t0=t0, T=T, max_step=h * (1 + 1e-12))
    if len(grid.t) != k + 1:
        raise ValueError(f"k = {k} does not give a uniform grid through the measurement times")
    return grid


@dataclass
class ConvergenceStudy:
    """Result of :func:`convergence_study`: ``table`` (DataFrame) and the references."""

    table: pd.DataFrame
    u_ref: np.ndarray
    grad_ref: np.ndarray
    u_star: np.ndarray | None
    expected_rate: int

    def plot(self, path=None, ax=None):
        """Log–log plot of the errors against h (matplotlib)."""
        from ._plots import _axes, _pyplot, _save
        fig, (ax,) = _axes(_pyplot(path), 1, ax, width=5, height=4)
        tab = self.table
        ax.loglog(tab["h"], tab["gradient_error"], "o-", label=r"$\|\nabla J_k - \nabla J\|$ (rel.)")
        if "parameter_error" in tab and tab["parameter_error"].notna().any():
            ax.loglog(tab["h"], tab["parameter_error"], "s-", label=r"$\|u_k - u^*\|$ (rel.)")
        h = tab["h"].to_numpy()
        e0 = tab["gradient_error"].iloc[0]
        ax.loglog(h, e0 * (h / h[0]) ** self.expected_rate, "k--",
                  label=f"slope {self.expected_rate}")
        ax.xaxis.set_minor_formatter("")        # the minor labels of a short decade overlap
        ax.set_xlabel("h")
        ax.set_ylabel("relative error")
        ax.legend()
        return _save(fig, path, dpi=110)


def _rates(h, e):
    """Observed orders ``log(e[a-1]/e[a]) / log(h[a-1]/h[a])`` (NaN first)."""
    return np.concatenate([[np.nan], np.log(e[:-1] / e[1:]) / np.log(h[:-1] / h[1:])])


def convergence_study(problem: EstimationProblem, ks=(20, 40, 80, 160, 320), scheme="adams_pc",
                      qmax=3, u=None, estimate=True, method="DOP853", rtol=1e-12, atol=1e-13,
                      continuous_options=None) -> ConvergenceStudy:
    """Table ``(k, h, gradient_error, grad_rate, parameter_error, param_rate)``.

    Parameters
    ----------
    problem : EstimationProblem
    ks : sequence of int
        Numbers of uniform steps (each a multiple of the measurement spacing).
    scheme, qmax : the discrete scheme (order policy with ramp).
    u : array, optional
        Point of the gradient comparison; default: the problem's start values.
    estimate : bool
        Also minimize every J_k and report the parameter errors.
    method, rtol, atol : integrator of the continuous reference.
    """
    from ..approaches import estimate_continuous
    from ..discretization.continuous import ContinuousModel

    sch = get_scheme(scheme, qmax)
    cm = ContinuousModel(problem, method=method, rtol=rtol, atol=atol)
    u_star = None
    if estimate:
        res = estimate_continuous(problem, optimizer="ipopt", hessian="soa", method=method,
                                  rtol=rtol, atol=atol, model=cm,
                                  options={"tol": 1e-12, **(continuous_options or {})})
        u_star = res.x
    u_ref = np.asarray(problem.u0 if u is None else u, dtype=float)
    g_ref = cm.gradient(u_ref, method="adjoint")
    rows = []
    gk_list = []
    for k in ks:
        dm = DiscreteModel(problem, sch, grid=uniform_grid(problem, k))
        gk = dm.gradient(u_ref)
        gk_list.append(gk)
        row = {"k": k, "h": (problem.T - problem.t0) / k}
        row["gradient_abs_error"] = float(np.linalg.norm(gk - g_ref))
        if estimate:
            r = estimate_reduced(problem, model=dm, u0=u_star, optimizer="ipopt", hessian="soa",
                                 options={"tol": 1e-12}, certify=False)   # this grid's optimum
            row["parameter_error"] = float(np.linalg.norm(r.x - u_star) / np.linalg.norm(u_star))
        rows.append(row)
    tab = pd.DataFrame(rows)
    scale = np.linalg.norm(g_ref)
    if scale <= 1e-8 * max(1.0, np.linalg.norm(gk_list[0])):      # stationary point
        scale = np.linalg.norm(gk_list[0])
    tab["gradient_error"] = tab["gradient_abs_error"] / scale
    tab["grad_rate"] = _rates(tab["h"].to_numpy(), tab["gradient_error"].to_numpy())
    if estimate:
        tab["param_rate"] = _rates(tab["h"].to_numpy(), tab["parameter_error"].to_numpy())
    cols = ["k", "h", "gradient_error", "grad_rate"] + (["parameter_error", "param_rate"] if estimate else [])
    return ConvergenceStudy(tab[cols], u_ref, g_ref, u_star, sch.startup_order)
