r"""Is a fit consistent with the stated noise level?  A χ² test of the weighted residuals.

With known standard deviations σ (weights :math:`1/\sigma^2`) or a known
covariance Σ (:class:`~pyomo_odeest.problem._declaration.GaussianNLL`), the
weighted residual sum at the true parameters,

.. math::

    \chi^2 = \sum_j r_j^\top \Sigma_j^{-1} r_j
           = \sum_{j,o} \frac{(z_o(\tau_j) - \bar z_{jo})^2}{\sigma_{jo}^2},

is χ²-distributed with *n* degrees of freedom (n measured values, summed over
the experiments of a problem with several); at a
least-squares estimate of *p* free parameters, approximately with
*n − p* (exact for a model linear in the parameters).  A fit whose χ² lies in
the upper tail (p-value below ``alpha``) explains the data worse than the
noise can: typically a spurious local minimum (or a wrong model or σ).  One in
the lower tail fits better than the noise allows (σ overstated, or
over-fitting).

:func:`noise_check` computes the statistic (``applicable=False`` when σ is
not known); :func:`pyomo_odeest.analysis._diagnostics.chi2_warning` turns an
inconsistent fit into a warning of the result.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from ._declaration import EstimationProblem, GaussianNLL

__all__ = ["noise_check", "noise_level_known"]


def noise_level_known(problem) -> bool:
    """True when the misfit is a χ² statistic: every experiment's measurements
    have given standard deviations σ (or the loss is the Gaussian NLL with its
    covariance).  With weights only (or neither), σ is known up to a common
    factor and the uncertainty analyses scale by the residual variance."""
    return all(getattr(sp, "sigma_known", False) for sp in problem.subproblems)


def noise_check(problem: EstimationProblem, result, alpha: float = 0.01) -> dict:
    """χ² of the weighted residuals of ``result`` and its tail probabilities.

    Returns a dict: ``applicable`` (σ known and residuals available), ``chi2``,
    ``dof`` (measured values − free parameters), ``p_upper`` = P(χ²_dof ≥ chi2),
    ``p_lower`` = P(χ²_dof ≤ chi2), ``consistent`` (both above ``alpha``; None if
    not applicable) and ``message``.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    out = dict(applicable=False, chi2=np.nan, dof=0, p_upper=np.nan, p_lower=np.nan,
               consistent=None, message="")
    subs = problem.subproblems
    if not noise_level_known(problem):
        out["message"] = "noise level unknown (no sigma given): no chi-square test"
        return out
    res = getattr(result, "residuals", None)
    if res is None:
        out["message"] = "result has no residuals: no chi-square test"
        return out
    chi2, n = 0.0, 0
    for e, sp in enumerate(subs):
        part = res.loc[problem.experiment_names[e]] if sp is not problem else res
        c, k = _weighted_sum(sp, part)
        chi2, n = chi2 + c, n + k
    dof = n - int(np.sum(problem.free_mask))
    out.update(chi2=chi2, dof=dof)
    if dof <= 0 or not np.isfinite(chi2):
        out["message"] = (f"chi-square test not possible (dof = {dof}, chi2 = {chi2})")
        return out
    p_up, p_lo = float(stats.chi2.sf(chi2, dof)), float(stats.chi2.cdf(chi2, dof))
    out.update(applicable=True, p_upper=p_up, p_lower=p_lo,
               consistent=bool(p_up >= alpha and p_lo >= alpha))
    if p_up < alpha:
        out["message"] = (f"misfit inconsistent with the noise level: chi2 = {chi2:.4g} on "
                          f"{dof} dof, P(chi2 >= this) = {p_up:.2e} < {alpha} (a spurious local "
                          f"minimum, or a wrong model or sigma)")
    elif p_lo < alpha:
        out["message"] = (f"misfit smaller than the noise level explains: chi2 = {chi2:.4g} on "
                          f"{dof} dof, P(chi2 <= this) = {p_lo:.2e} < {alpha} (sigma overstated?)")
    else:
        out["message"] = f"chi2 = {chi2:.4g} on {dof} dof (P upper {p_up:.3f}): consistent"
    return out


def _weighted_sum(problem, res):
    """χ² and the number of measured values of one single-experiment problem."""
    r = res.reindex(index=problem.data.index, columns=problem.obs_names).to_numpy(dtype=float)
    mask = problem.mask
    if isinstance(problem.loss, GaussianNLL):
        chi2 = 0.0
        for j in range(mask.shape[0]):
            o = np.flatnonzero(mask[j])
            if len(o):
                chi2 += float(r[j, o] @ np.linalg.solve(problem.cov[np.ix_(o, o)], r[j, o]))
        return chi2, int(mask.sum())
    w = np.asarray(problem.weights, dtype=float)
    used = mask & (w > 0)
    return float(np.sum(w[used] * r[used] ** 2)), int(used.sum())
