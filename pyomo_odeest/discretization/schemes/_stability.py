r"""Absolute stability of the schemes and the search for steps beyond it (stiffness).

:func:`amplification` is the spectral radius of a scheme's step map on the test
equation :math:`\dot x = \lambda x`; :func:`stiff_point` looks along a
trajectory for the step whose :math:`h_i \lambda` (an eigenvalue of
:math:`\partial f/\partial x`) lies farthest outside the region.  The post-solve
check (docs/checks.md, "stiffness") and the simultaneous approach's choice of
scheme at the start both use them.
"""
from __future__ import annotations

import numpy as np
import sympy

from ...symbolic import lambdify
from ._families import SCHEMES

__all__ = ["amplification", "stiff_point", "stable_schemes", "stiff_switch", "STABILITY_POINTS"]

#: Largest number of grid points at which :func:`stiff_point` looks.
STABILITY_POINTS = 400


def amplification(scheme, z) -> float:
    r"""Spectral radius of the scheme's step map for :math:`\dot x = \lambda x`, :math:`z = h\lambda`.

    On the test equation :math:`f = \lambda x` and
    :math:`\dot f = \lambda^2 x`, every stage of the step formula
    (:class:`~pyomo_odeest.discretization.schemes.StepFormula`) is linear in
    the past values :math:`x_i, \dots, x_{i-Q+1}`; the step is the
    companion matrix of that recursion.  The scheme is absolutely stable
    at ``z`` when the returned radius is at most 1 (the region of
    absolute stability).  ``inf`` when an implicit stage is singular.
    """
    sf = scheme.formulas(np.arange(scheme.qmax + 1, dtype=float))[-1]   # full order, uniform grid
    q = max(sf.order_q, 1)
    z = complex(z)
    vals = {}

    def value(p, stage_name):
        if p.kind == "past":
            e = np.zeros(q, dtype=complex)
            e[p.lag] = 1.0
            return e
        if p.kind == "stage" and p.stage != stage_name:
            return vals[p.stage]
        return None                                     # the stage itself (implicit)

    for st in sf.stages:
        rest = np.zeros(q, dtype=complex)
        rest[0] = 1.0                                   # x_i
        a = 0.0
        for terms, zz in ((st.f_terms, z), (st.fdot_terms, z * z)):
            for p, c in terms:
                v = value(p, st.name)
                if v is None:
                    a += zz * c
                else:
                    rest = rest + zz * c * v
        if abs(1.0 - a) < 1e-300:
            return float("inf")
        vals[st.name] = rest / (1.0 - a)
    C = np.zeros((q, q), dtype=complex)
    C[0] = vals["x"]
    C[np.arange(1, q), np.arange(q - 1)] = 1.0
    return float(np.max(np.abs(np.linalg.eigvals(C))))


def stiff_point(problem, scheme, t, X, u):
    r"""The worst step of the trajectory ``X`` on grid ``t`` for ``scheme``:
    ``(radius, h*lambda, t_i, h_i, beyond)`` where :math:`h_i\lambda` lies outside
    the absolute stability region (``beyond``) or on its edge (radius above 0.98
    while :math:`|e^{h\lambda}| < 0.5`); None when no step does.  Looks at most at
    :data:`STABILITY_POINTS` points; only eigenvalues with negative real part count."""
    t = np.asarray(t, dtype=float)
    X = np.asarray(X, dtype=float)
    h = np.diff(t)
    if len(t) < 2 or not np.all(np.isfinite(X)):
        return None
    jac = problem._numeric(("f_x", problem.f_sym), lambda: lambdify(
        (problem.x_sym, problem.u_sym, problem.t_sym),
        sympy.Matrix(problem.f_sym).jacobian(problem.x_sym), "numpy"))
    idx = np.unique(np.linspace(0, len(h) - 1, min(len(h), STABILITY_POINTS)).astype(int))
    worst = None
    cache = {}
    for i in idx:
        with np.errstate(all="ignore"):
            Jm = np.asarray(jac(X[i], u, t[i]), dtype=float)
        if not np.all(np.isfinite(Jm)):
            continue
        for lam in np.linalg.eigvals(Jm):
            z = h[i] * lam
            if not z.real < -1e-3:
                continue
            key = (round(z.real, 3), round(z.imag, 3))
            if key not in cache:
                cache[key] = amplification(scheme, z)
            rho = cache[key]
            beyond = rho > 1.0 + 1e-9
            edge = rho > 0.98 and abs(np.exp(z)) < 0.5
            if (beyond or edge) and (worst is None or rho > worst[0]):
                worst = (rho, z, t[i], h[i], beyond)
    return worst


def stable_schemes(scheme, z) -> list:
    """Names of the other schemes (same ``qmax``) stable at ``z`` (radius below 0.98)."""
    return [name for name, cls in SCHEMES.items()
            if name != scheme.name and amplification(cls(scheme.qmax), z) < 0.98]


#: the scheme a stiff start switches to, where it is stable
STIFF_SCHEME = "enright"


def stiff_switch(problem, scheme, t, X, u, where="at the start"):
    r"""The reason to solve on :data:`STIFF_SCHEME` instead of ``scheme``, or None.

    The rule every approach on a grid applies at its start when the user did not
    choose the scheme: some step of the trajectory ``X`` (grid ``t``, parameters
    ``u``) puts :math:`h\lambda` outside the absolute stability region of ``scheme``
    (:func:`stiff_point`) where Enright's scheme is stable.  Enright's schemes are
    never switched from.  ``where`` names the trajectory in the reason (the refinement
    stage applies the rule at the estimates too)."""
    if scheme.name in ("enright", "semi_implicit_enright"):
        return None
    worst = stiff_point(problem, scheme, t, X, u)
    if worst is None or not worst[4] or STIFF_SCHEME not in stable_schemes(scheme, worst[1]):
        return None
    rho, z, ti, hi, _ = worst
    return (f"stiff {where}: at t={ti:.4g} the step h={hi:.3g} gives "
            f"h*lambda={z.real:.3g}{z.imag:+.3g}j, outside the stability region "
            f"of {scheme.name} (amplification {rho:.3g}); solved with "
            f"scheme={STIFF_SCHEME!r} (give scheme= to choose)")
