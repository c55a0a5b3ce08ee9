r"""Local identifiability: the weighted, scaled sensitivity matrix and its singular values.

With :math:`S_j = \mathrm dz(\tau_j)/\mathrm du`, the precision :math:`P_j` of the
measurements and :math:`D = \operatorname{diag}(|u_k|)` (1 where :math:`u_k = 0`),
:math:`R = (P_j^{1/2} S_j)_j\, D` has :math:`R^\top R = D F D`, the Fisher
information of :math:`\log u`; the standard error along a right singular vector
:math:`v_i` is :math:`1/s_i` (relative units).  The numerical rank is decided
with the columns of R scaled to unit norm.  See docs/uncertainty.md, "Identifiability".
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._uncertainty import Curvature, ExperimentCurvature, curvature

__all__ = ["IdentifiabilityReport", "identifiability_report", "format_direction"]


@dataclass
class IdentifiabilityReport:
    """Outcome of :func:`identifiability_report`.

    Attributes
    ----------
    singular_values : Series
        Singular values of R, largest first.
    directions : DataFrame
        Right singular vectors (columns, in the order of ``singular_values``),
        rows = parameters.
    null_directions : list of Series
        Directions with ``s_i < rtol·s_max`` (numerically non-identifiable).
    poor_directions : list of Series
        Directions with ``s_i < poor`` (practically non-identifiable), not
        counting the null ones.
    rank : int
        Numerical rank of R.
    n_parameters, n_measurements, n_informative : int
    condition : float
        s_max / s_min.
    warnings : list of str
    """

    singular_values: pd.Series
    directions: pd.DataFrame
    null_directions: list
    poor_directions: list
    rank: int
    n_parameters: int
    n_measurements: int
    n_informative: int
    condition: float
    warnings: list = field(default_factory=list)

    @property
    def identifiable(self) -> bool:
        """True when R has full numerical rank and enough informative measurements."""
        return self.rank == self.n_parameters and self.n_informative >= self.n_parameters

    def summary(self) -> str:
        sv = ", ".join(f"{s:.3g}" for s in self.singular_values)
        lines = [f"{self.n_parameters} free parameters, {self.n_measurements} measured values "
                 f"({self.n_informative} informative); rank {self.rank}; singular values "
                 f"(relative parameters) {sv}; condition {self.condition:.3g}"]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self):
        return f"IdentifiabilityReport({self.summary()})"


def format_direction(v: pd.Series, tol=0.05) -> str:
    """``'0.707·p1 − 0.707·p2'``: the components of a unit direction above ``tol``,
    largest first, sign chosen so that the largest is positive."""
    v = v[np.abs(v) >= tol]
    if len(v) == 0:
        return "0"
    v = v.reindex(v.abs().sort_values(ascending=False).index)
    if v.iloc[0] < 0:
        v = -v
    out = f"{v.iloc[0]:.3g}·{v.index[0]}"
    for n, c in list(v.items())[1:]:
        out += f" {'−' if c < 0 else '+'} {abs(c):.3g}·{n}"
    return out


def identifiability_report(result=None, *, problem=None, estimates=None, rtol=1e-7, poor=1.0,
                           scale="relative", discretization=None,
                           curv: Curvature | ExperimentCurvature | None = None
                           ) -> IdentifiabilityReport:
    """Identifiability of the free parameters at ``result``'s estimates.

    Cheap: one sensitivity computation of the result's approach (no
    optimization, no Hessian).

    Parameters
    ----------
    result : EstimationResult, optional
    problem, estimates : optional
        Instead of a result: the problem and the parameter values (a mapping or
        array in problem order), discretized by ``discretization`` (keywords of
        :class:`~pyomo_odeest.discretization.discrete.DiscreteModel`: ``scheme``,
        ``qmax``, ``grid``, ``max_step``, ``steps_per_interval``; default: the
        problem's default discretization; with several experiments one
        model per experiment, ``grid`` a mapping experiment -> Grid).
    rtol : float
        Relative singular-value threshold of numerical rank deficiency.
    poor : float
        Absolute singular-value threshold (relative parameters) below which a
        direction is reported as practically non-identifiable.
    scale : 'relative' | 'absolute'
        Scale the columns by ``|u_k|`` (default) or not.
    """
    if curv is None:
        if result is not None:
            curv = curvature(result, problem=problem)
        else:
            if problem is None or estimates is None:
                raise ValueError("give a result, or problem= and estimates=")
            curv = _curvature_at(problem, estimates, discretization or {})
    names = curv.names
    R = curv.scaled_rows()
    if scale == "relative":
        d = np.abs(curv.u[curv.free])
        d = np.where(d > 0, d, 1.0)
    elif scale == "absolute":
        d = np.ones(len(names))
    else:
        raise ValueError(f"scale must be 'relative' or 'absolute', got {scale!r}")
    R = R * d[None, :]
    p = len(names)
    m = curv.n_measured
    rows = np.linalg.norm(R, axis=1) if R.size else np.zeros(0)
    n_inf = int(np.sum(rows > 1e-10 * max(rows.max(initial=0.0), 1e-300))) if m else 0
    _, s, Vt = np.linalg.svd(R, full_matrices=R.shape[0] < p)
    s = np.concatenate([s, np.zeros(p - len(s))])           # fewer rows than parameters
    smax = s[0] if len(s) else 0.0
    rank = _equilibrated_rank(R, rtol) if smax > 0 else 0
    is_null = np.arange(p) >= rank
    V = pd.DataFrame(Vt.T, index=names, columns=[f"v{i + 1}" for i in range(p)])
    null = [V.iloc[:, i].rename(f"v{i + 1}") for i in range(p) if is_null[i]]
    poor_dirs = [V.iloc[:, i].rename(f"v{i + 1}") for i in range(p)
                 if not is_null[i] and s[i] < poor]
    cond = float(smax / s[-1]) if len(s) and s[-1] > 0 else np.inf
    notes = []
    if m < p:
        notes.append(f"fewer measured values ({m}) than free parameters ({p}): "
                     "the estimates are not determined by the data")
    elif n_inf < p:
        notes.append(f"fewer informative measurements ({n_inf} of {m} with non-zero "
                     f"sensitivity) than free parameters ({p})")
    if rank < p:
        dirs = "; ".join(format_direction(v) for v in null)
        notes.append(f"sensitivity matrix is numerically rank-deficient (rank {rank} < {p}, "
                     f"condition {cond:.3g}); not identifiable along: {dirs}")
    if poor_dirs:
        dirs = "; ".join(f"{format_direction(v)} (relative se {1 / s[int(v.name[1:]) - 1]:.3g})"
                         for v in poor_dirs)
        notes.append(f"poorly determined (relative standard error > {1 / poor:.3g}) along: {dirs}")
    zero = [n for n, c in zip(names, np.linalg.norm(R, axis=0)) if c <= 1e-12 * max(smax, 1e-300)]
    if zero:
        notes.append(f"the observations do not depend on {zero}")
    return IdentifiabilityReport(pd.Series(s, index=[f"s{i + 1}" for i in range(p)],
                                           name="singular_value"),
                                 V, null, poor_dirs, rank, p, m, n_inf, cond, notes)


def _equilibrated_rank(R, rtol):
    """Numerical rank of ``R`` with its columns scaled to unit norm (a zero column
    counts as rank-deficient)."""
    norms = np.linalg.norm(R, axis=0)
    if not np.any(norms > 0):
        return 0
    Rn = R[:, norms > 0] / norms[norms > 0]
    sn = np.linalg.svd(Rn, compute_uv=False)
    return int(np.sum(sn > rtol * sn[0]))


def _curvature_at(problem, estimates, discretization):
    from ..approaches import DiscreteBackend
    from ..approaches._reduced import discrete_model
    from ._uncertainty import backend_curvature
    if isinstance(estimates, (dict, pd.Series)):
        est = pd.Series(estimates)
        missing = [n for n in problem.parameter_names if n not in est.index]
        if missing:
            raise ValueError(f"estimates lack parameters {missing}")
        u = est.reindex(problem.parameter_names).to_numpy(dtype=float)
    else:
        u = np.asarray(estimates, dtype=float).reshape(-1)
        if len(u) != len(problem.parameters):
            raise ValueError(f"estimates must have {len(problem.parameters)} values "
                             f"(parameters {problem.parameter_names})")
    be = DiscreteBackend(problem, discrete_model(problem, **discretization))
    return backend_curvature(problem, be, u, source=(
        f"discrete sensitivities ({discretization or 'default discretization'})"))
