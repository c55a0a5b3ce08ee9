r"""Local identifiability: the weighted, scaled sensitivity matrix and its singular values.

With :math:`S_j = \mathrm dz(\tau_j)/\mathrm du`, the precision :math:`P_j` of the
measurements and :math:`D = \operatorname{diag}(d_k)`, :math:`R = (P_j^{1/2} S_j)_j\, D`
has :math:`R^\top R = D F D`: with :math:`d_k = |u_k|` (1 where :math:`u_k = 0`) the
Fisher information of :math:`\log u`, and for a log-parameter (the model uses
only :math:`e^{u_k}` or :math:`10^{u_k}`: :func:`~._uncertainty.parameter_scales`)
:math:`d_k = 1` (or :math:`1/\ln 10`), so that every column is in natural-log
units; the standard error along a right singular vector :math:`v_i` is
:math:`1/s_i` (relative units).  A poorly determined or null direction is
named as a combination of log-parameters (``lk2 + 0.5·lk3``) or logs of
positive parameters (``log k2 + 0.5·log k3``); when it involves two
parameters, the combination the data do determine is named too
(``lk3 − 0.5·lk2``, i.e. ``exp(lk3)/exp(lk2)^0.5``; :attr:`IdentifiabilityReport.combinations`).  The numerical rank is decided
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
    combinations : list of dict
        One per null or poorly determined direction: ``direction`` (the
        direction, a Series over the parameters, largest component 1, in
        natural-log units where the parameter is positive or a
        log-parameter), ``free`` (its name: along it the data do not determine
        the parameters), ``se`` (the standard error along the unit direction),
        and where it involves two parameters ``identifiable`` (the combination
        that is determined, a Series with the larger coefficient 1), its name
        ``identifiable_name`` and ``quantity`` (the same as a product of
        powers of the positive quantities).
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
    combinations: list = field(default_factory=list)

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
    from ._uncertainty import parameter_scales
    kinds = parameter_scales(curv.problem)
    kinds = [kinds.get(n, "linear") for n in names]
    if scale == "relative":
        d = np.abs(curv.u[curv.free])
        d = np.where(d > 0, d, 1.0)
        d = np.array([1.0 if k == "log" else 1.0 / _LN10 if k == "log10" else x
                      for k, x in zip(kinds, d)])
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
        notes.append(f"poorly determined (standard error > {1 / poor:.3g} in relative or log "
                     f"units) along: {dirs}")
    combos = []
    if scale == "relative":
        for v in null + poor_dirs:
            i = int(v.name[1:]) - 1
            combos.append(_combination(v, kinds, 1 / s[i] if s[i] > 0 else np.inf))
        named = [c for c in combos if "identifiable_name" in c]
        if named:
            notes.append("only combinations are determined: " + "; ".join(
                f"{c['identifiable_name']} ({c['quantity']}), not {c['free']} (se "
                f"{c['se']:.3g} in log units)" for c in named))
    zero = [n for n, c in zip(names, np.linalg.norm(R, axis=0)) if c <= 1e-12 * max(smax, 1e-300)]
    if zero:
        notes.append(f"the observations do not depend on {zero}")
    return IdentifiabilityReport(pd.Series(s, index=[f"s{i + 1}" for i in range(p)],
                                           name="singular_value"),
                                 V, null, poor_dirs, rank, p, m, n_inf, cond, notes, combos)


_LN10 = float(np.log(10.0))


def _nice(c, tol=0.03):
    """``c`` rounded to a simple fraction (halves, thirds, quarters) when within ``tol``
    (relative) of one, else to two significant digits."""
    for den in (1, 2, 3, 4):
        f = round(c * den) / den
        if f != 0 and abs(c - f) <= tol * max(1.0, abs(c)):
            return float(f)
    return float(f"{c:.2g}")


def _term(c, name, kind, first):
    sign = ("" if c > 0 else "−") if first else (" + " if c > 0 else " − ")
    mag = "" if abs(c) == 1 else f"{abs(c):g}·"
    label = name if kind == "log" else f"log 10^{name}" if kind == "log10" else f"log {name}"
    return f"{sign}{mag}{label}"


def _render(coef, kinds):
    """``'lk3 − 0.5·lk2'`` and ``'exp(lk3)/exp(lk2)^0.5'`` of natural-log coefficients
    ``coef`` (a Series) over parameters of the scales ``kinds``."""
    lin = "".join(_term(c, n, kinds[n], i == 0) for i, (n, c) in enumerate(coef.items()))
    num, den = [], []
    for n, c in coef.items():
        k = kinds[n]
        q = (f"exp({n})" if k == "log" else f"10^{n}" if k == "log10" else n)
        e = abs(c)
        (num if c > 0 else den).append(q if e == 1 else f"{q}^{e:g}")
    prod = "·".join(num) or "1"
    if den:
        prod += "/" + (den[0] if len(den) == 1 else "(" + "·".join(den) + ")")
    return lin, prod


def _combination(v, kinds, se, tol=0.05):
    """The readable form of a poorly determined unit direction ``v`` (columns in
    natural-log units where the parameter is positive or a log-parameter)."""
    kinds = dict(zip(v.index, kinds))
    w = v[np.abs(v) >= tol]
    w = w.reindex(w.abs().sort_values(ascending=False).index)
    w = w / w.iloc[0]
    w = w.map(_nice)
    w = w[w != 0]
    out = dict(direction=w, free=_render(w, kinds)[0], se=float(se))
    logs = all(kinds[n] != "linear" for n in w.index)
    if len(w) == 2 and logs:
        a, b = w.index
        ident = pd.Series({a: -w[b], b: w[a]})
        ident = ident / ident.abs().max()
        if ident.iloc[0] < 0 and ident.iloc[1] < 0:
            ident = -ident
        ident = ident.reindex(ident.sort_values(ascending=False).index).map(_nice)
        out["identifiable"] = ident
        out["identifiable_name"], out["quantity"] = _render(ident, kinds)
    return out


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
