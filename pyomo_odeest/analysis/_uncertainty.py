r"""Parameter covariance, standard errors, Wald intervals and the delta method.

See docs/uncertainty.md ("What is computed", "Where the derivatives come
from", "Several experiments").  Every loss is :math:`J(u) = \kappa\,\mathrm{NLL}(u) + c`
(:func:`nll_factor`); with the precision :math:`P_j` of the measurements and
the sensitivities :math:`S_j = \mathrm dz(\tau_j)/\mathrm du` the Fisher
information is :math:`F = \sum_j S_j^\top P_j S_j` (+ a penalty's Hessian / κ)
and the covariance is :math:`F^{-1}` (``'fim'``), :math:`\kappa\,(\nabla^2 J)^{-1}`
(``'hessian'``) or :math:`s^2 F^{-1}` (``'residual'``, ``scale='residual'``).
Singularity is decided on the scaled matrix :math:`D F D`,
:math:`D = \operatorname{diag}(F_{kk}^{-1/2})`; parameters at a bound are held there.

The derivatives come from the result's backend without re-solving: discrete
sensitivities and second-order adjoint [GM-grad, §2.5, eq. (51)], the KKT
system at the solution (simultaneous, multiple shooting), or the continuous
sensitivities and second-order adjoint [MHV, eqs. (8), (19)–(20)].
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..problem._declaration import GaussianNLL
from ..approaches._backend import kkt_reduced_hessian
from ..problem._misfit import MeasurementMisfit
from ..problem._noise import noise_level_known

__all__ = ["Covariance", "Curvature", "ExperimentCurvature", "covariance", "confidence_intervals", "curvature", "backend_curvature",
           "delta_method", "kkt_reduced_hessian", "nll_factor", "COVARIANCE_METHODS",
           "bound_status", "COVARIANCE_SCALES", "resolve_scale", "parameter_scales",
           "POOR_FACTOR"]

COVARIANCE_METHODS = ("fim", "gauss_newton", "hessian", "residual")
COVARIANCE_SCALES = ("auto", "known", "residual")
#: Condition numbers of the scaled information matrix above which it is called
#: ill-conditioned (a warning) and numerically singular (pseudo-inverse, infinite se).
ILL_CONDITIONED, SINGULAR = 1e8, 1e12
#: A parameter on a log scale (a positive parameter, a log-parameter) is
#: ``'poorly determined'`` when its interval spans more than this factor (one
#: decade: the data do not fix its order of magnitude); see docs/uncertainty.md.
POOR_FACTOR = 10.0
_LN10 = float(np.log(10.0))


def _log_factors(exprs, syms) -> dict:
    """``{p: ℓ}`` for the symbols ``syms``: ℓ when ``p`` enters the expressions
    ``exprs`` only through ``exp(±p + …)`` (ℓ = 1) or ``10**(±p + …)`` (ℓ = ln 10),
    an exponent that may itself sit in another (a Hill coefficient ``10**n`` in
    ``x**(10**n)``): ``p`` is the natural or decimal logarithm of a positive
    quantity; else None.  One walk of the expressions for every symbol (shared
    subexpressions once): each node gives the symbols it holds outside their
    exponents."""
    import sympy
    syms = set(syms)
    levels = {p: set() for p in syms}
    memo, mark = {}, sympy.Dummy("q", positive=True)

    def exponent(e):
        """``(argument, log of the base)`` of exp(·) or c**(·) with c > 0; else None."""
        if isinstance(e, sympy.exp):
            return e.args[0], 1.0
        if isinstance(e, sympy.Pow) and e.base.is_number and e.base.is_positive:
            return e.exp, float(sympy.log(e.base))
        return None

    def level(ex, p):
        """ℓ of ``p`` in the exponent ``ex`` (a coefficient ±1 times the base's log)."""
        arg, base_log = ex
        c = sympy.diff(arg, p)
        if not (c.is_number and c.is_real):
            return None
        ell = abs(float(c)) * base_log
        return next((k for k in (1.0, _LN10) if abs(ell - k) <= 1e-9 * k), None)

    def outside(e):
        if e in memo:
            return memo[e]
        ex = exponent(e)
        if e.is_Symbol:
            out = {e} & syms
        elif ex is not None:
            inner, out = outside(ex[0]), set()
            for p in inner:         # bare in the argument: this exponent is p's, or p's not one
                arg = ex[0].replace(lambda a: (exponent(a) is not None and p in a.free_symbols
                                               and level(exponent(a), p) is not None),
                                    lambda *a: mark)       # inside p's own exponents: gone
                ell = level((arg, ex[1]), p)
                if ell is None:
                    out.add(p)
                else:
                    levels[p].add(ell)
        else:
            out = set().union(*(outside(a) for a in e.args))
        memo[e] = out
        return out

    found, bad = set(), set()
    for e in exprs:
        e = sympy.sympify(e)
        found |= e.free_symbols & syms
        bad |= outside(e)
    return {p: (next(iter(levels[p])) if p in found and p not in bad and len(levels[p]) == 1
                else None) for p in syms}


def parameter_scales(problem) -> dict:
    """``{name: scale}`` of the free parameters, the scale on which their Wald
    intervals are computed and judged: ``'log'`` (a log-parameter: the model
    uses it only as ``exp(p)``), ``'log10'`` (only as ``10**p``), ``'positive'``
    (declared ``lb ≥ 0``: the interval of ``log u``, mapped back) or ``'linear'``."""
    subs = problem.subproblems
    exprs = [e for sp in subs for e in (tuple(sp.f_sym) + tuple(sp.l_sym) + tuple(sp.g_sym))]
    exprs.append(problem.penalty_sym)
    free = tuple(sym for p, sym in zip(problem.parameters, problem.u_sym) if not p.fixed)
    # one walk of every expression: once per problem (its numeric cache), not per result
    ells = problem._numeric(("log_factors", tuple(exprs), free),
                            lambda: _log_factors(exprs, free))
    return {p.name: ("log" if ells[sym] == 1.0 else "log10" if ells[sym] is not None else
                     "positive" if p.lb is not None and p.lb >= 0 else "linear")
            for p, sym in zip(problem.parameters, problem.u_sym) if not p.fixed}


def nll_factor(problem) -> float:
    """κ in ``J = κ·NLL + c``: 1 for :class:`GaussianNLL`, 2 for least squares."""
    return 1.0 if isinstance(problem.loss, GaussianNLL) else 2.0


# ---------------------------------------------------------------------------
# curvature of J at the estimates, per approach
# ---------------------------------------------------------------------------
@dataclass
class Curvature:
    """Derivatives of J at the estimates with respect to the free parameters.

    Attributes
    ----------
    names : list of str
        Free parameters (columns of ``S`` and ``H``).
    u : ndarray
        All parameter values (problem order).
    free : ndarray of int
        Positions of ``names`` in the problem's parameters.
    S : ndarray (N, n_obs, p)
        Sensitivities of the observations at the measurement times.
    residuals : ndarray (N, n_obs)
        r_j = z_j − z̄_j (0 where not measured).
    H : ndarray (p, p) or None
        Exact Hessian of J (computed on request).
    source : str
        Where the derivatives come from.
    """

    problem: object
    names: list
    u: np.ndarray
    free: np.ndarray
    S: np.ndarray
    residuals: np.ndarray
    misfit: MeasurementMisfit
    H: np.ndarray | None = None
    source: str = ""

    @property
    def kappa(self):
        return nll_factor(self.problem)

    @property
    def n_measured(self) -> int:
        """Number of measured values m."""
        return int(self.problem.mask.sum())

    def fim(self) -> np.ndarray:
        """Fisher information :math:`\\sum_j S_j^\\top P_j S_j` (+ R''/κ)."""
        F = 2.0 / self.kappa * np.einsum("jop,joq->pq", self.S, self.misfit.AS(self.S))
        if self.misfit.has_penalty:
            F = F + self.misfit.penalty_hessian(self.u)[np.ix_(self.free, self.free)] / self.kappa
        return 0.5 * (F + F.T)

    def chi2(self) -> float:
        """:math:`\\sum_j r_j^\\top P_j r_j` (weighted sum of squared residuals)."""
        r = self.residuals
        return float(2.0 / self.kappa * np.sum(r * self.misfit.Ar(r)))

    def scaled_rows(self) -> np.ndarray:
        """Rows :math:`P_j^{1/2} S_j` of the weighted sensitivity matrix ((Σ n_obs) × p),
        one row per measured value."""
        S, P = self.S, self.problem
        mask = P.mask
        if self.misfit.A is None:
            w = np.sqrt(2.0 / self.kappa * self.misfit.A_diag)
            return (w[:, :, None] * S)[mask]
        rows = []
        for j in range(S.shape[0]):
            o = np.flatnonzero(mask[j])
            L = np.linalg.cholesky(2.0 / self.kappa * self.misfit.A[j][np.ix_(o, o)])
            rows.append(L.T @ S[j][o])
        return np.vstack(rows) if rows else np.zeros((0, S.shape[2]))

    def scaled_residuals(self) -> np.ndarray:
        r""":math:`\rho = P_j^{1/2} r_j`, one per row of :meth:`scaled_rows`:
        :math:`\tfrac12\lVert\rho\rVert^2` is the misfit part of the NLL, ``scaled_rows``
        its Jacobian (the Gauss–Newton model of the NLL)."""
        r, P = self.residuals, self.problem
        mask = P.mask
        if self.misfit.A is None:
            return (np.sqrt(2.0 / self.kappa * self.misfit.A_diag) * r)[mask]
        out = []
        for j in range(r.shape[0]):
            o = np.flatnonzero(mask[j])
            L = np.linalg.cholesky(2.0 / self.kappa * self.misfit.A[j][np.ix_(o, o)])
            out.append(L.T @ r[j][o])
        return np.concatenate(out) if out else np.zeros(0)


@dataclass
class ExperimentCurvature:
    r"""Derivatives of :math:`J = \sum_e J_e` for a problem with several experiments:
    one :class:`Curvature` per experiment (``parts``, over the same free
    parameters) with the interface of one — :meth:`fim`, :meth:`chi2`,
    :meth:`scaled_rows` and ``n_measured`` are sums (stacks) over the parts;
    ``H`` is the Hessian of the sum."""

    problem: object
    names: list
    u: np.ndarray
    free: np.ndarray
    parts: list
    H: np.ndarray | None = None
    source: str = ""

    @property
    def kappa(self):
        return nll_factor(self.problem)

    @property
    def n_measured(self) -> int:
        return int(sum(c.n_measured for c in self.parts))

    def fim(self) -> np.ndarray:
        return sum(c.fim() for c in self.parts)

    def chi2(self) -> float:
        return float(sum(c.chi2() for c in self.parts))

    def scaled_rows(self) -> np.ndarray:
        return np.vstack([c.scaled_rows() for c in self.parts])

    def scaled_residuals(self) -> np.ndarray:
        return np.concatenate([c.scaled_residuals() for c in self.parts])


def _problem_of(result, problem=None):
    """``problem`` if given, else the :class:`EstimationProblem` of ``result``."""
    P = problem if problem is not None else result.problem
    if P is not None:
        return P
    raise ValueError(f"cannot find the EstimationProblem of this {result.approach!r} result; "
                     "pass problem=... explicitly")


def curvature(result, hessian=False, problem=None) -> Curvature:
    """Sensitivities (and with ``hessian`` the exact Hessian of J) at ``result``'s
    estimates, from the result's backend (``result.backend``: the model of the
    approach that produced it; see the module docstring)."""
    P = _problem_of(result, problem)
    u = np.asarray(result.estimates.reindex(P.parameter_names), dtype=float)
    try:
        return backend_curvature(P, result.backend, u, hessian)
    except (RuntimeError, ArithmeticError) as exc:
        if getattr(result, "success", True):
            raise
        # the point of a failed estimation is often one the model cannot be simulated at
        msg = (f"the {result.approach!r} result's estimates are not an optimum (status "
               f"{result.status}) and its model cannot be evaluated there ({exc}); "
               "uncertainty, profiles and identifiability need a converged result: "
               "re-estimate (another start u0, or another approach) first")
        try:
            err = type(exc)(msg)
        except TypeError:                       # an exception class with other arguments
            raise RuntimeError(msg) from exc
        raise err from exc


def backend_curvature(P, be, u, hessian=False, source=None) -> Curvature:
    """Sensitivities (and with ``hessian`` the exact Hessian of J) of problem ``P`` at
    the parameters ``u`` from a backend ``be`` (the protocol of the approaches'
    backends); one :class:`Curvature`, or an :class:`ExperimentCurvature` for
    several experiments."""
    free = np.flatnonzero(P.free_mask)
    names = [P.parameter_names[k] for k in free]
    source = source or be.source
    parts = [Curvature(sp_, names, u, free, S, r, mf, None, source)
             for sp_, S, r, mf in be.observation_sensitivities(u, free)]
    H = be.hessian(u, free) if hessian else None
    if not P.experiments:
        parts[0].H = H
        return parts[0]
    return ExperimentCurvature(P, names, u, free, parts, H, source)


# ---------------------------------------------------------------------------
# bounds
# ---------------------------------------------------------------------------
def bound_status(problem, u, rtol=1e-6):
    """``{name: 'lower'|'upper'}`` for free parameters within ``rtol`` of a bound."""
    out = {}
    for p, v in zip(problem.parameters, u):
        if p.fixed:
            continue
        if p.lb is not None and v - p.lb <= rtol * max(1.0, abs(p.lb)):
            out[p.name] = "lower"
        elif p.ub is not None and p.ub - v <= rtol * max(1.0, abs(p.ub)):
            out[p.name] = "upper"
    return out


# ---------------------------------------------------------------------------
# the covariance object
# ---------------------------------------------------------------------------
@dataclass
class Covariance:
    """Covariance of the estimates (see docs/uncertainty.md).

    Attributes
    ----------
    matrix : DataFrame
        Covariance of the estimated parameters (free and not at a bound).
    estimates : Series
        All parameter values.
    method : str
    dof : int
        m − p (measured values minus estimated parameters).
    s2 : float
        χ²/(m − p) (the residual variance factor; used by ``'residual'``).
    at_bound : dict
        name -> 'lower' | 'upper'.
    fixed : list
        Parameters fixed in the problem.
    condition : float
        Condition number of the scaled information matrix that was inverted.
    warnings : list of str
    scale : str
        ``'known'`` (σ known: the inverse Fisher information, normal quantiles)
        or ``'residual'`` (σ unknown: scaled by ``s2``, Student t with ``dof``).
    non_identifiable : list of str
        Parameters with infinite variance (in a null direction of the information).
    estimable : tuple or None
        For a singular information matrix: ``(pinv, null)``, the (scaled)
        pseudo-inverse :math:`C^+` and the null directions (columns) in the
        parameters' own units.  A quantity whose gradient :math:`a` is orthogonal
        to every null direction depends only on identifiable combinations of the
        parameters, and its variance is :math:`a^\top C^+ a` (see
        :meth:`variance_of`).
    """

    matrix: pd.DataFrame
    estimates: pd.Series
    method: str
    dof: int
    s2: float
    at_bound: dict = field(default_factory=dict)
    fixed: list = field(default_factory=list)
    condition: float = np.nan
    source: str = ""
    warnings: list = field(default_factory=list)
    scale: str = "known"
    non_identifiable: list = field(default_factory=list)
    estimable: tuple | None = field(default=None, repr=False)
    #: name -> 'log' | 'log10' | 'positive' | 'linear' (:func:`parameter_scales`)
    scales: dict = field(default_factory=dict)
    #: name -> (lb, ub) of the estimated parameters (None: no bound)
    bounds: dict = field(default_factory=dict)

    def variance_of(self, A):
        r"""Variances :math:`a_k^\top C a_k` of the quantities whose gradients with
        respect to the parameters of :attr:`matrix` are the rows of ``A``
        (shape ``(..., p)``).  With a singular information matrix, a quantity
        whose gradient is orthogonal to the null directions (an estimable
        function: it depends only on identifiable combinations) gets
        :math:`a^\top C^+ a`; any other gets ``inf``."""
        A = np.asarray(A, dtype=float)
        if self.estimable is None:
            C = self.matrix.to_numpy()
            return np.einsum("...m,mn,...n->...", A, C, A)
        pinv, null = self.estimable
        var = np.einsum("...m,mn,...n->...", A, pinv, A)
        # the null directions carry the parameters' scales: compare with |a| |v|
        lean = np.abs(A @ null) if null.size else np.zeros(A.shape[:-1] + (0,))
        size = np.linalg.norm(A, axis=-1)[..., None] * np.linalg.norm(null, axis=0)
        inestimable = np.any(lean > 1e-6 * np.maximum(size, 1e-300), axis=-1)
        return np.where(inestimable, np.inf, var)

    @property
    def scale_note(self) -> str:
        """One line saying which σ the covariance assumes."""
        if self.scale == "residual":
            return (f"σ unknown: scaled by the residual variance s² = χ²/(m−p) = {self.s2:.4g} "
                    f"({self.dof} degrees of freedom, Student t)")
        return "σ known: inverse Fisher information (normal quantiles)"

    @property
    def names(self):
        return list(self.matrix.index)

    @property
    def se(self) -> pd.Series:
        """Standard errors of the estimated parameters."""
        return pd.Series(np.sqrt(np.clip(np.diag(self.matrix.to_numpy()), 0, None)),
                         index=self.matrix.index, name="se")

    @property
    def correlation(self) -> pd.DataFrame:
        d = self.se.to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            R = self.matrix.to_numpy() / np.outer(d, d)
        return pd.DataFrame(R, index=self.matrix.index, columns=self.matrix.columns)

    def quantile(self, level=0.95, dist=None):
        """Two-sided quantile of ``dist`` ('t' with ``dof`` degrees of freedom or
        'normal'; default: 't' for ``scale='residual'``, else 'normal')."""
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level}")
        dist = dist or ("t" if self.scale == "residual" else "normal")
        if dist == "t":
            if self.dof <= 0:
                raise ValueError(f"Student t needs m − p > 0 degrees of freedom; got {self.dof}")
            return float(stats.t.ppf(0.5 + level / 2, self.dof))
        if dist == "normal":
            return float(stats.norm.ppf(0.5 + level / 2))
        raise ValueError(f"dist must be 't' or 'normal', got {dist!r}")

    def intervals(self, level=0.95, dist=None, poor_factor=POOR_FACTOR) -> pd.DataFrame:
        r"""Wald intervals of every parameter, each on its own scale (:attr:`scales`):
        ``estimate ± q·se`` for a linear parameter and a log-parameter (whose own
        scale is the log), :math:`u\,e^{\pm q\,\mathrm{se}/u}` (the interval of
        :math:`\log u`, mapped back) for a positive one, so that it never crosses
        0; every interval is cut at the parameter's declared bounds.

        ``status``: ``'ok'``; ``'poorly determined'`` when the interval does not
        fix the parameter on its scale: on a log scale (positive parameters,
        log-parameters) when it spans more than a factor ``poor_factor``
        (``factor`` column: upper/lower of the positive quantity), on the linear
        scale when it holds both signs (q·se > |u|); ``'not identifiable'`` in a
        null direction of the information; rows of fixed parameters and of
        parameters at a bound have no interval and say why.  ``attrs`` hold
        ``level``, ``method``, ``scale``, ``quantile``, ``poor_factor`` and the
        covariance's ``warnings``."""
        q = self.quantile(level, dist)
        se = self.se
        rows = []
        for name, v in self.estimates.items():
            if name in se.index:
                s = float(se[name])
                kind = self.scales.get(name, "linear")
                if kind == "positive" and not v > 0:
                    kind = "linear"
                with np.errstate(over="ignore", invalid="ignore"):
                    if kind == "positive":
                        f = np.exp(q * s / v)
                        lo, hi, logw = v / f, v * f, 2 * q * s / v
                    else:
                        lo, hi = v - q * s, v + q * s
                        logw = 2 * q * s * (_LN10 if kind == "log10" else 1.0)
                lb, ub = self.bounds.get(name, (None, None))
                lo = lo if lb is None else max(lo, lb)
                hi = hi if ub is None else min(hi, ub)
                factor = (np.nan if kind == "linear" else np.inf if not np.isfinite(logw)
                          else float(np.exp(min(logw, 700.0))))
                if name in self.non_identifiable or not np.isfinite(s):
                    status = "not identifiable"
                elif (logw > np.log(poor_factor) if kind != "linear" else q * s > abs(v)):
                    status = "poorly determined"
                else:
                    status = "ok"
                rows.append((name, v, s, lo, hi, kind, factor, status))
            elif name in self.at_bound:
                rows.append((name, v, np.nan, np.nan, np.nan, self.scales.get(name, "linear"),
                             np.nan, f"at {self.at_bound[name]} bound"))
            else:
                rows.append((name, v, np.nan, np.nan, np.nan, "linear", np.nan, "fixed"))
        df = pd.DataFrame(rows, columns=["parameter", "estimate", "se", "lower", "upper",
                                         "scale", "factor", "status"])
        df.attrs.update(level=level, method=self.method, scale=self.scale, quantile=q,
                        poor_factor=poor_factor, warnings=list(self.warnings))
        return df.set_index("parameter")

    def delta(self, fn, level=0.95, dist=None, names=None, rel_step=1e-6):
        """Delta method for derived quantities, see :func:`delta_method`."""
        return delta_method(self, fn, level=level, dist=dist, names=names, rel_step=rel_step)

    def __repr__(self):
        se = ", ".join(f"{k}={v:.3g}" for k, v in self.se.items())
        return f"Covariance(method={self.method!r}, scale={self.scale!r}, se: {se})"


def resolve_scale(problem, scale="auto", method="fim") -> str:
    """``'known'`` or ``'residual'``: what ``scale`` (see docs/uncertainty.md)
    means for ``problem`` (``method='residual'`` always scales)."""
    if scale not in COVARIANCE_SCALES:
        raise ValueError(f"scale must be one of {COVARIANCE_SCALES}, got {scale!r}")
    if method == "residual":
        if scale == "known":
            raise ValueError("method='residual' scales by the residual variance; it cannot "
                             "take scale='known' (use method='fim')")
        return "residual"
    if scale == "auto":
        return "known" if noise_level_known(problem) else "residual"
    return scale


def covariance(result, method="fim", problem=None, bound_rtol=1e-6, curv: Curvature | None = None,
               scale="auto", report=True) -> Covariance:
    """Covariance of ``result``'s estimates.

    Parameters
    ----------
    result : EstimationResult
        From any approach.
    method : 'fim' | 'gauss_newton' | 'hessian' | 'residual'
        See docs/uncertainty.md (``'residual'`` is ``'fim'`` with ``scale='residual'``).
    problem : EstimationProblem, optional
        Needed only when the result does not carry it.
    bound_rtol : float
        Relative distance to a bound below which a parameter counts as at the bound.
    curv : Curvature or ExperimentCurvature, optional
        Precomputed derivatives (reused across methods).
    scale : 'auto' | 'known' | 'residual'
        σ known (inverse information), σ unknown (scaled by the residual
        variance), or ``'auto'``: known when the data give σ, else residual.
    report : bool
        Append the covariance's warnings (singular, ill-conditioned, not
        positive definite) to ``result.warnings`` (once each).
    """
    if method not in COVARIANCE_METHODS:
        raise ValueError(f"method must be one of {COVARIANCE_METHODS}, got {method!r}")
    if curv is None or (method == "hessian" and curv.H is None):
        curv = curvature(result, hessian=(method == "hessian"), problem=problem)
    P = curv.problem
    kind = resolve_scale(P, scale, method)
    u = curv.u
    at_bound = bound_status(P, u, bound_rtol)
    keep = np.array([n not in at_bound for n in curv.names], dtype=bool)
    names = [n for n, k in zip(curv.names, keep) if k]
    m_obs = curv.n_measured
    dof = m_obs - len(names)
    chi2 = curv.chi2()
    s2 = chi2 / dof if dof > 0 else np.nan
    notes, own = [], []
    cert = (getattr(result, "extra", None) or {}).get("certificate")
    if isinstance(cert, dict) and cert.get("available") and not cert.get("certified"):
        notes.append(f"the grid does not resolve the ODE at the estimates ({cert['summary']}): "
                     "the covariance is that of an optimum of the discretization only")
    elif not getattr(result, "success", True):
        notes.append(f"the estimation did not converge ({result.status}): the covariance "
                     "describes the curvature at a point that is not an optimum")
    if kind == "residual" and dof <= 0:
        if scale == "residual" or method == "residual":
            raise ValueError(f"scaling by the residual variance needs more measurements "
                             f"({m_obs}) than estimated parameters ({len(names)})")
        kind = "known"
        own.append(f"σ is not given and no degrees of freedom are left ({m_obs} measured "
                   f"values, {len(names)} parameters): the covariance takes the weights as "
                   f"1/σ², which may be arbitrary")
    Iinfo = (curv.H / curv.kappa if method == "hessian" else curv.fim())[np.ix_(keep, keep)]
    C, cond, bad, estimable = _inverse(Iinfo, names, own)
    if estimable is not None and kind == "residual":
        # a singular information matrix: the fit spends rank(F) degrees of
        # freedom, not one per parameter (the residual variance of the
        # identifiable reparametrization)
        dof = m_obs - (len(names) - estimable[1].shape[1])
        s2 = chi2 / dof if dof > 0 else np.nan
    if kind == "residual":
        C = s2 * C
        if estimable is not None:
            estimable = (s2 * estimable[0], estimable[1])
    if method == "hessian" and len(names) and np.any(np.linalg.eigvalsh(Iinfo) <= 0):
        own.append("the Hessian of the NLL is not positive definite at the estimates "
                   "(not a strict local minimum): the covariance is not meaningful")
    if report and own and getattr(result, "warnings", None) is not None:
        for w in own:
            if f"covariance: {w}" not in result.warnings:
                result.warnings.append(f"covariance: {w}")
    est = pd.Series(u, index=P.parameter_names, name="estimate")
    bounds = {p.name: (p.lb, p.ub) for p in P.parameters if p.name in names}
    return Covariance(pd.DataFrame(C, index=names, columns=names), est,
                      "fim" if method == "gauss_newton" else method, dof, s2, at_bound,
                      [p.name for p in P.parameters if p.fixed], cond, curv.source,
                      notes + own, kind, bad, estimable, parameter_scales(P), bounds)


def _inverse(M, names, notes):
    """Inverse of the information matrix ``M`` (of parameters ``names``), decided
    and computed on the scaled matrix :math:`DMD`, :math:`D = \\operatorname{diag}(M_{kk}^{-1/2})`.
    Returns ``(C, condition of DMD, names of non-identifiable parameters,
    estimable)``; a singular matrix gives the pseudo-inverse with infinite
    variance in its null directions, and ``estimable = (pinv, null)`` for
    :meth:`Covariance.variance_of` (None when the matrix is regular)."""
    if M.size == 0:
        return np.zeros((0, 0)), np.nan, [], None
    diag = np.diag(M).copy()
    d = np.where(diag > 0, 1.0 / np.sqrt(np.where(diag > 0, diag, 1.0)), 0.0)
    Ms = d[:, None] * M * d[None, :]
    ev, V = np.linalg.eigh(0.5 * (Ms + Ms.T))
    cond = float(ev[-1] / ev[0]) if ev[0] > 0 else np.inf
    regular = np.isfinite(cond) and cond <= SINGULAR and np.all(diag > 0)
    Cs = np.linalg.inv(Ms) if regular else np.linalg.pinv(Ms, rcond=1.0 / SINGULAR, hermitian=True)
    C = d[:, None] * Cs * d[None, :]
    C = 0.5 * (C + C.T)
    if regular:
        if cond > ILL_CONDITIONED:
            notes.append(f"the information matrix is ill-conditioned (condition number "
                         f"{cond:.3g} after scaling the parameters): standard errors are "
                         f"large and strongly correlated; see identifiability_report")
        return C, cond, [], None
    null = ev <= max(ev[-1], 0.0) / SINGULAR
    zero = diag <= 0
    Vn = V[:, null]
    in_null = (np.abs(Vn).sum(axis=1) > 1e-8) | zero
    bad = [n for n, b in zip(names, in_null) if b]
    from ._identifiability import format_direction
    dirs = "; ".join(format_direction(pd.Series(Vn[:, i], index=names)) for i in range(Vn.shape[1]))
    notes.append(f"the information matrix is numerically singular (condition number {cond:.3g} "
                 f"after scaling the parameters): not identifiable"
                 + (f" along {dirs}" if dirs else "")
                 + (f"; no information on {[n for n, z in zip(names, zero) if z]}" if zero.any() else "")
                 + f"; standard errors of {bad} are infinite. Fix a parameter, add data or a "
                 "penalty; see identifiability_report")
    # null directions in the parameters' own units: M (D v) = D^-1 Ms v = 0; a
    # parameter without information is a null direction of its own
    null = np.hstack([d[:, None] * Vn, np.eye(len(names))[:, zero]])
    pinv, C = C, C.copy()
    idx = np.flatnonzero(in_null)
    C[idx, :] = np.nan
    C[:, idx] = np.nan
    C[idx, idx] = np.inf
    return C, cond, bad, (pinv, null)


def confidence_intervals(result, level=0.95, method="fim", dist=None, problem=None,
                         scale="auto") -> pd.DataFrame:
    """Wald intervals of ``result``'s parameters (see :meth:`Covariance.intervals`)."""
    return covariance(result, method, problem=problem, scale=scale).intervals(level, dist)


def delta_method(cov: Covariance, fn, level=0.95, dist=None, names=None, rel_step=1e-6,
                 jacobian=None) -> pd.DataFrame:
    r"""Estimate, standard error and Wald interval of derived quantities :math:`q = f(u)`.

    :math:`\operatorname{Var} q \approx \nabla f^\top C\, \nabla f`, the gradient by
    central differences (``rel_step·max(1, |u_k|)``) unless ``jacobian(u)`` is given.

    Parameters
    ----------
    fn : callable
        ``fn(u)`` with ``u`` a Series of all parameter values (by name); returns a
        number or a 1-d array.
    names : list of str, optional
        Names of the outputs.
    """
    u = cov.estimates.astype(float)
    est_names = cov.names
    def f(v):
        return np.atleast_1d(np.asarray(fn(v), dtype=float))

    q0 = f(u.copy())
    if jacobian is not None:
        G = np.atleast_2d(np.asarray(jacobian(u.copy()), dtype=float))
        G = G.reshape(len(q0), -1)
        G = pd.DataFrame(G, columns=u.index)[est_names].to_numpy()
    else:
        G = np.zeros((len(q0), len(est_names)))
        for a, name in enumerate(est_names):
            h = rel_step * max(1.0, abs(u[name]))
            up, dn = u.copy(), u.copy()
            up[name] += h
            dn[name] -= h
            G[:, a] = (f(up) - f(dn)) / (2 * h)
    V = G @ cov.matrix.to_numpy() @ G.T
    se = np.sqrt(np.clip(np.diag(V), 0, None))
    q = cov.quantile(level, dist)
    names = list(names) if names is not None else [f"q{i}" for i in range(len(q0))]
    return pd.DataFrame({"estimate": q0, "se": se, "lower": q0 - q * se, "upper": q0 + q * se},
                        index=pd.Index(names, name="quantity"))
