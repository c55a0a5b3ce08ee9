r"""The measurement misfit and the parameter penalty, vectorised over the measurement times.

Every loss of the package is a quadratic form in the residuals
[GM-grad, eq. (1); [MHV], eqs. (2)–(5)]:

.. math::

    \varphi_j(x, u) = r_j^\top A_j\, r_j,\qquad
    r_j = g(x, u, \tau_j) - \bar z_j,

with :math:`A_j = \operatorname{diag}(w_j)` for weighted least squares (zero
weight where a value is missing) and :math:`A_j = \tfrac12\Sigma_{oo}^{-1}`
on the quantities ``o`` observed at :math:`\tau_j` for the Gaussian negative
log-likelihood (whose log-determinant is the constant
:func:`~pyomo_odeest.problem._misfit.misfit_constant`).  The optional penalty
:math:`R(u)` of the problem is added once.  This is the same function as
:func:`~pyomo_odeest.problem._misfit.misfit_sym` (the Pyomo block's objective); here it
is evaluated from the derivatives of the observation function :math:`g`
alone, so its cost and set-up do not grow with the number of measurement
times:

.. math::

    \nabla_x\varphi_j = 2\,g_x^\top A_j r_j,\qquad
    \nabla_u\varphi_j = 2\,g_u^\top A_j r_j,\qquad
    \nabla^2_{(x,u)}\varphi_j = 2\,(g_x, g_u)^\top A_j (g_x, g_u)
        + \sum_o 2(A_j r_j)_o\,\nabla^2 g_o .
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import sympy

from ..symbolic._vectorfn import observation_functions, second_derivatives
from ._declaration import EstimationProblem, GaussianNLL
from ._inputs import evaluate_inputs
from ..symbolic import lambdify

__all__ = ["MeasurementMisfit", "PenaltySquares", "penalty_squares", "interval", "misfit_sym",
           "misfit_constant", "observations"]


def _penalty_functions(pen, us):
    """``(has_penalty, indices, R, dR, d2R)`` of the penalty ``pen`` in the parameters
    ``us``.  R's derivatives are taken in the parameters it depends on only (priors on
    20 of 907 parameters: 400 second derivatives, not 822 649)."""
    has = bool(pen.free_symbols) or pen != 0
    free = pen.free_symbols
    idx = np.array([i for i, v in enumerate(us) if v in free], dtype=int)
    sub = [us[i] for i in idx]
    if not has:                                   # without a penalty: never called
        return has, idx, None, None, None
    return (has, idx, lambdify((us,), pen, "numpy"),
            lambdify((us,), [sympy.diff(pen, v) for v in sub], "numpy"),
            lambdify((us,), sympy.hessian(pen, sub) if sub else [], "numpy"))


class MeasurementMisfit:
    r""":math:`\sum_j \varphi_j` and :math:`R(u)` of a problem with their derivatives.

    Arrays of states at the measurement times are ``Xm`` of shape
    ``(N, n)`` (row j: :math:`x(\tau_j)`).

    Attributes
    ----------
    g, gx, gu
        :math:`g` and its sparse Jacobians (see :mod:`pyomo_odeest.symbolic._vectorfn`).
    zbar : (N, n_obs)
        Measurements, 0 where missing.
    A : (N, n_obs, n_obs) or None
        Gaussian weights :math:`\tfrac12\Sigma_{oo}^{-1}` (None for least squares).
    A_diag : (N, n_obs) or None
        Least-squares weights (None for the Gaussian loss).
    weights : (N, n_obs) or None
        The diagonals of the :math:`A_j` when every :math:`A_j` is diagonal (least
        squares, or a Gaussian loss whose :math:`\Sigma_{oo}` is diagonal), else None:
        then :math:`A_j r_j` is a product of arrays.
    const : float
        The loss constant (log-determinant term).
    """

    def __init__(self, problem: EstimationProblem):
        P = problem
        self.problem = P
        xs, us, ts = tuple(P.x_sym), tuple(P.u_sym), P.t_sym
        self._syms = (xs, us, ts)
        # the symbolic parts are built once per problem and its variants (a multistart
        # builds a model per start, PEtab's noise fit a variant per round)
        self.g, self.gx, self.gu = P._numeric(("misfit", P.g_sym, xs, us, ts),
                                              lambda: observation_functions(P.g_sym, xs, us, ts))
        self.t = np.asarray(P.meas_times, dtype=float)
        zbar = P.data.to_numpy(dtype=float) if len(self.t) else np.zeros((0, len(P.obs_names)))
        self.zbar = np.where(P.mask, zbar, 0.0)
        no = len(P.obs_names)
        if isinstance(P.loss, GaussianNLL):
            A = np.zeros((len(self.t), no, no))
            for j in range(len(self.t)):
                o = np.flatnonzero(P.mask[j])
                A[j][np.ix_(o, o)] = 0.5 * np.linalg.inv(P.cov[np.ix_(o, o)])
            self.A, self.A_diag = A, None
            diagonal = np.diagonal(A, axis1=1, axis2=2)
            self.weights = diagonal.copy() if np.count_nonzero(A) == np.count_nonzero(
                diagonal) else None
        else:
            self.A, self.A_diag = None, np.where(P.mask, np.asarray(P.weights, dtype=float), 0.0)
            self.weights = self.A_diag
        self.const = misfit_constant(P)
        pen = sympy.sympify(P.penalty_sym)
        (self.has_penalty, self._pen_idx, self._R, self._dR,
         self._d2R) = P._numeric(("penalty", pen, us), lambda: _penalty_functions(pen, us))
        self._second = self._second_each = None
        self._root = None

    # -- the quadratic form -------------------------------------------------
    def Ar(self, r):
        r""":math:`A_j r_j` for all j (r: (N, n_obs))."""
        if self.weights is not None:
            return self.weights * r
        return np.einsum("jab,jb->ja", self.A, r)

    def AS(self, S):
        r""":math:`A_j S_j` for all j (S: (N, n_obs, k))."""
        if self.weights is not None:
            return self.weights[:, :, None] * S
        return np.einsum("jab,jbm->jam", self.A, S)

    def residuals(self, Xm, u):
        r""":math:`r_j = g(x_j, u, \tau_j) - \bar z_j` (N, n_obs), 0 where nothing is
        measured (an observable need not be finite where it is not measured: the log of
        a state that is 0 at t0)."""
        with np.errstate(all="ignore"):           # masked: no warning for what is not used
            return np.where(self.problem.mask, self.g(Xm, u, self.t) - self.zbar, 0.0)

    def _measured(self, jac, Xm, u):
        """Values (N, nnz) of the sparse Jacobian ``jac`` of g at ``Xm``, 0 in the rows of
        observables that are not measured at that time."""
        with np.errstate(all="ignore"):
            return np.where(self.problem.mask[:, jac.rows], jac.values(Xm, u, self.t), 0.0)

    def _second_values(self, part, Xm, u, Ar2):
        r"""Values of the second derivatives ``part`` (1: xx, 2: xu, 3: uu) of
        :math:`\lambda^\top g` at ``lam = Ar2`` (0 where nothing is measured).  At a
        time where an unmeasured observable's second derivatives are not finite
        (0·inf, 0/0), the sum is taken over the measured observables, each with its
        own second derivatives (built on first need)."""
        jac = self.second_order()[part]
        with np.errstate(all="ignore"):           # non-finite rows are redone below
            vals = jac.values(Xm, u, self.t, Ar2)
        bad = np.flatnonzero(~np.all(np.isfinite(vals), axis=1))
        if len(bad) == 0:
            return vals
        if self._second_each is None:
            g = self.problem.g_sym
            self._second_each = self.problem._numeric(
                ("misfit_second_each", g) + self._syms,
                lambda: [second_derivatives([g[o]], *self._syms) for o in range(len(g))])
        where = {rc: e for e, rc in enumerate(zip(jac.rows, jac.cols))}
        for j in bad:
            vals[j] = 0.0
            for o in np.flatnonzero(self.problem.mask[j]):
                each = self._second_each[o][part]
                v = each.values(Xm[j:j + 1], u, self.t[j:j + 1], Ar2[j:j + 1, o:o + 1])[0]
                for e, rc in enumerate(zip(each.rows, each.cols)):
                    vals[j, where[rc]] += v[e]
        return vals

    # -- as a sum of squares -------------------------------------------------
    def root(self):
        r""":math:`W_j` with :math:`W_j^\top W_j = 2A_j` (N, n_obs, n_obs), or for
        least squares its diagonal :math:`\sqrt{2w_j}` (N, n_obs): then
        :math:`\varphi_j = \tfrac12\lVert W_j r_j\rVert^2`."""
        if self._root is None:
            if self.A is None:
                self._root = np.sqrt(2 * self.A_diag)
            else:
                lam, Q = np.linalg.eigh(2 * self.A)               # A_j is symmetric PSD
                self._root = np.sqrt(np.clip(lam, 0.0, None))[:, :, None] * \
                    np.transpose(Q, (0, 2, 1))
        return self._root

    def weighted_residuals(self, Xm, u):
        r""":math:`\rho_j = W_j r_j` (N, n_obs): :math:`\sum_j\varphi_j = \tfrac12\sum_j\lVert\rho_j\rVert^2`."""
        W, r = self.root(), self.residuals(Xm, u)
        return W * r if self.A is None else np.einsum("jab,jb->ja", W, r)

    def observation_sensitivities(self, Xm, u, S, columns=None):
        r""":math:`\partial z_j/\partial u = g_x S_j + g_u` at the measurement times
        (N, n_obs, k), with ``S`` (N, n, k) the state sensitivities to the parameters
        ``columns`` (default: all p)."""
        Gu = self.gu.dense(self._measured(self.gu, Xm, u))
        if columns is not None:
            Gu = Gu[:, :, columns]
        return self.gx.matmat(self._measured(self.gx, Xm, u), S) + Gu

    def weighted_jacobian(self, Xm, u, S, columns):
        r""":math:`\partial\rho_j/\partial u_c = W_j(g_x S_j + g_u)_{:,c}` (N, n_obs, k) for the
        parameters ``columns``, with ``S`` (N, n, k) the state sensitivities to them."""
        R = self.observation_sensitivities(Xm, u, S, columns)
        W = self.root()
        return W[:, :, None] * R if self.A is None else np.einsum("jab,jbk->jak", W, R)

    def value(self, Xm, u):
        r""":math:`\sum_j\varphi_j` (without the constant and the penalty)."""
        if len(self.t) == 0:
            return 0.0
        r = self.residuals(Xm, u)
        return float(np.sum(r * self.Ar(r)))

    def gradients(self, Xm, u):
        r""":math:`\nabla_x\varphi_j` (N, n) and :math:`\sum_j\nabla_u\varphi_j` (p,)."""
        N, p = len(self.t), len(u)
        if N == 0:
            return np.zeros((0, Xm.shape[1] if Xm.ndim == 2 else 0)), np.zeros(p)
        Ar2 = 2 * self.Ar(self.residuals(Xm, u))
        Fx = self.gx.matvec_T(self._measured(self.gx, Xm, u), Ar2)
        Fu = self.gu.sum_matvec_T(self._measured(self.gu, Xm, u), Ar2)
        return Fx, Fu

    def second_order(self):
        """``(lam, Hxx, Hxu, Huu)`` of :math:`\\lambda^\\top g` (built on first use, once
        per problem)."""
        if self._second is None:
            P = self.problem
            self._second = P._numeric(("misfit_second", P.g_sym) + self._syms,
                                      lambda: second_derivatives(P.g_sym, *self._syms))
        return self._second

    def directional_second(self, Xm, u, S, V):
        r"""Second derivatives of :math:`\varphi_j` applied to a direction.

        For state directions ``S`` (N, n, k) and parameter directions ``V``
        (p, k) returns

        .. math::

            M_j = \varphi_{j,xx}S_j + \varphi_{j,xu}V \;(N, n, k),\qquad
            Q = \sum_j \varphi_{j,ux}S_j + \varphi_{j,uu}V \;(p, k).
        """
        N = len(self.t)
        n, p, k = Xm.shape[1], len(u), V.shape[1]
        if N == 0:
            return np.zeros((0, n, k)), np.zeros((p, k))
        r = self.residuals(Xm, u)
        Ar2 = 2 * self.Ar(r)
        gxv = self._measured(self.gx, Xm, u)
        guv = self._measured(self.gu, Xm, u)
        Z = self.gx.matmat(gxv, S) + self.gu.dense(guv) @ V           # (N, n_obs, k)
        AZ2 = 2 * self.AS(Z)
        _, hxx, hxu, huu = self.second_order()
        hxxv, hxuv, huuv = (self._second_values(k, Xm, u, Ar2) for k in (1, 2, 3))
        Hxu = hxu.dense(hxuv)                                          # (N, n, p)
        M = self.gx.matmat_T(gxv, AZ2) + hxx.matmat(hxxv, S) + Hxu @ V
        Q = (np.einsum("jop,jok->pk", self.gu.dense(guv), AZ2)
             + np.einsum("jxp,jxk->pk", Hxu, S) + huu.dense(huuv).sum(axis=0) @ V)
        return M, Q

    # -- penalty ------------------------------------------------------------
    def penalty(self, u):
        """:math:`R(u)` (0 without a penalty)."""
        return float(self._R(u)) if self.has_penalty else 0.0

    def penalty_gradient(self, u):
        g = np.zeros(len(u))
        if len(self._pen_idx):
            g[self._pen_idx] = np.asarray(self._dR(u), dtype=float).reshape(-1)
        return g

    def penalty_hessian(self, u):
        p = len(u)
        H = np.zeros((p, p))
        k = len(self._pen_idx)
        if k:
            H[np.ix_(self._pen_idx, self._pen_idx)] = np.asarray(
                self._d2R(u), dtype=float).reshape(k, k)
        return H

    def penalty_residuals(self, cols, base, lb=None, ub=None):
        """R(u) as squares of the free parameters ``u[cols]`` within the bounds ``lb``,
        ``ub`` (theirs; default unbounded), the others at their values in ``base``: a
        :class:`PenaltySquares`, or ``None`` (:func:`penalty_squares`)."""
        return penalty_squares(sympy.sympify(self.problem.penalty_sym), self._syms[1], cols,
                               base, lb, ub)


class PenaltySquares:
    r"""A penalty bounded below on a box as squares:
    :math:`R(u) = c + \tfrac12\lVert L(u_F - m)\rVert^2 + \tfrac12\sum_k s_k(u_F)^2`.

    The quadratic terms of R (Gaussian priors on the estimation scale) give the
    linear rows :math:`L(u_F - m)`, one per positive eigenvalue of their Hessian.
    Every other term :math:`t_k` (log σ of an estimated σ, a prior that is not
    Gaussian, a linear part along that Hessian's null space) is bounded below on the
    box by interval arithmetic, :math:`t_k \ge \ell_k`, and becomes the row
    :math:`s_k = \sqrt{2(t_k - \ell_k) + 1}`, the form AMICI gives the log σ
    terms of its residuals: exact in value and gradient
    (:math:`\nabla s_k = \nabla t_k / s_k`), a Gauss–Newton approximation in
    curvature.
    """

    def __init__(self, L, m, terms, syms):
        self.L, self.m = L, m
        self.n_terms = len(terms)
        self.size = L.shape[0] + len(terms)
        self._terms, self._syms, self._fns = terms, syms, None
        self._lo = np.array([lo for _, lo in terms])

    def _functions(self):
        """The terms and their gradients, compiled on first use."""
        if self._fns is None:
            ts, syms = [t for t, _ in self._terms], self._syms
            self._fns = (lambdify((syms,), ts, "numpy"), lambdify((syms,), [
                [sympy.diff(t, v) if v in t.free_symbols else 0 for v in syms] for t in ts],
                "numpy"))
        return self._fns

    def _s(self, uF):
        t = np.asarray(self._functions()[0](uF), float)
        return np.sqrt(np.maximum(2.0 * (t - self._lo), 0.0) + 1.0)

    def residuals(self, uF):
        rows = [self.L @ (uF - self.m)]
        if self.n_terms:
            rows.append(self._s(uF))
        return np.concatenate(rows)

    def jacobian(self, uF):
        rows = [self.L]
        if self.n_terms:
            dt = np.asarray(self._functions()[1](uF), float).reshape(self.n_terms, len(uF))
            rows.append(dt / self._s(uF)[:, None])
        return np.vstack(rows)


def interval(e, box):
    """Bounds ``(lo, hi)`` of the sympy expression ``e`` for its symbols within ``box``
    (``{symbol: (lo, hi)}``), by interval arithmetic over sums, products, powers,
    ``exp``, ``log``, ``sin`` and ``cos``; ``(-inf, inf)`` for what it cannot bound."""
    inf = np.inf
    if e.is_Number:
        v = float(e)
        return (v, v) if not np.isnan(v) else (-inf, inf)
    if e.is_Symbol:
        return box.get(e, (-inf, inf))
    if e.is_Add or e.is_Mul:
        lo, hi = interval(e.args[0], box)
        for a in e.args[1:]:
            alo, ahi = interval(a, box)
            if e.is_Add:
                lo, hi = lo + alo, hi + ahi
            else:
                with np.errstate(invalid="ignore"):       # 0 * inf: 0 (inf bounds a finite value)
                    c = np.nan_to_num(np.outer([lo, hi], [alo, ahi]), nan=0.0, posinf=inf,
                                      neginf=-inf)
                lo, hi = c.min(), c.max()
        return (lo, hi) if not (np.isnan(lo) or np.isnan(hi)) else (-inf, inf)
    if isinstance(e, (sympy.sin, sympy.cos)):
        return -1.0, 1.0
    if isinstance(e, (sympy.exp, sympy.log)):
        lo, hi = interval(e.args[0], box)
        if isinstance(e, sympy.exp):
            with np.errstate(over="ignore"):
                return float(np.exp(lo)), float(np.exp(hi))
        return (-inf, inf) if hi <= 0 else (float(np.log(lo)) if lo > 0 else -inf,
                                            float(np.log(hi)))
    if e.is_Pow:
        b, x = e.args
        if b.is_Number and b.is_positive and b.is_finite:  # b**x: monotone in x
            return interval(sympy.exp(x * sympy.log(b)), box)
        if x.is_Number and x.is_finite:
            lo, hi = interval(b, box)
            n = float(x)
            with np.errstate(divide="ignore", over="ignore"):
                if n == int(n) and int(n) % 2 == 0 and n > 0 and lo < 0 < hi:
                    return 0.0, max(lo ** n, hi ** n)
                if n == int(n) and n > 0:
                    v = (lo ** n, hi ** n)
                    return min(v), max(v)
                if lo > 0 or (lo == 0 and n > 0):
                    v = (np.power(lo, n), np.power(hi, n))
                    return min(v), max(v)
    return -inf, inf


def penalty_squares(pen, us, cols, base, lb=None, ub=None):
    """The penalty ``pen`` (sympy, in the parameters ``us``) as :class:`PenaltySquares`
    of the free parameters ``us[cols]`` within ``lb``, ``ub`` (default unbounded), the
    others at their values in ``base``; ``None`` when a term is not bounded below there
    (R not bounded below, or not provably so)."""
    cols = np.asarray(cols, dtype=int)
    k = len(cols)
    lb = np.full(k, -np.inf) if lb is None else np.asarray(lb, dtype=float)
    ub = np.full(k, np.inf) if ub is None else np.asarray(ub, dtype=float)
    syms = [us[i] for i in cols]
    free_cols = set(cols.tolist())
    fixed = {v: sympy.Float(float(base[i]), 17) for i, v in enumerate(us) if i not in free_cols}
    pen = sympy.sympify(pen).xreplace(fixed)
    c, rest = pen.as_coeff_Mul()
    parts = [c * t for t in sympy.Add.make_args(rest)] if rest.is_Add else [pen]
    quad, other = [], []
    for t in parts:
        free = t.free_symbols
        if not free:
            continue
        sub = sorted(free, key=str)
        (quad if t.is_polynomial(*sub) and sympy.Poly(t, *sub).total_degree() <= 2
         else other).append(t)
    Q = sympy.Add(*quad)
    zero = dict.fromkeys(syms, 0)
    H = np.array(sympy.hessian(Q, syms).xreplace(zero), dtype=float) if quad else np.zeros((k, k))
    g = np.array([sympy.diff(Q, v).xreplace(zero) for v in syms], dtype=float) if quad \
        else np.zeros(k)
    lam, V = np.linalg.eigh(0.5 * (H + H.T))
    tol = 1e-12 * max(1.0, float(np.max(np.abs(lam), initial=0.0)))
    L, m = np.zeros((0, k)), np.zeros(k)
    if np.any(lam < -tol):                      # not convex: a bounded term like the others
        other.append(Q)
    elif quad:
        keep = lam > tol
        Vk, lk = V[:, keep], lam[keep]
        m = -Vk @ ((Vk.T @ g) / lk)             # H m = -g on the range of H
        L = np.sqrt(lk)[:, None] * Vk.T
        gn = g + H @ m                          # linear along H's null space
        if np.linalg.norm(gn) > 1e-9 * max(1.0, np.linalg.norm(g)):
            other.append(sympy.Add(*[sympy.Float(float(a), 17) * v for a, v in zip(gn, syms)]))
    box = {v: (lo, hi) for v, lo, hi in zip(syms, lb, ub)}
    terms = []
    for t in other:
        lo = interval(t, box)[0]
        if not np.isfinite(lo):
            return None
        terms.append((t, lo))
    return PenaltySquares(L, m, terms, syms)


def misfit_sym(problem: EstimationProblem, j: int):
    r"""φ_j of measurement time τ_j as a sympy expression in (x, u).

    Least squares: :math:`\sum_o w_{jo} (g_o(x, u, τ_j) - \bar z_{jo})^2`;
    Gaussian NLL: :math:`\tfrac12 r^\top Σ_{oo}^{-1} r` over the quantities
    observed at τ_j [MHV, eq. (2)–(5)]; the constant is in
    :func:`misfit_constant`.
    """
    tau = float(problem.meas_times[j])
    obs = np.flatnonzero(problem.mask[j])
    zbar = problem.data.to_numpy()[j]
    r = [evaluate_inputs(problem.g_sym[o].subs(problem.t_sym, tau)) - sympy.Float(zbar[o], 17)
         for o in obs]
    if isinstance(problem.loss, GaussianNLL):
        S = problem.cov[np.ix_(obs, obs)]
        Si = np.linalg.inv(S)
        Si = 0.5 * (Si + Si.T)
        m = len(obs)
        # exact zeros of Σ⁻¹ (diagonal or block-diagonal Σ) contribute no term:
        # the expression has O(nnz) rather than O(m²) terms
        return sympy.Rational(1, 2) * sum(
            sympy.Float(Si[a, a], 17) * r[a]**2 for a in range(m)) + sum(
            sympy.Float(Si[a, b], 17) * r[a] * r[b]
            for a in range(m) for b in range(a + 1, m) if Si[a, b] != 0.0)
    w = problem.weights[j]
    return sum(sympy.Float(w[o], 17) * ri**2 for o, ri in zip(obs, r))


def misfit_constant(problem: EstimationProblem) -> float:
    """Constant part of the objective (the log-determinant of the Gaussian NLL);
    summed over the experiments of a problem with several."""
    if problem.experiments:
        return float(sum(misfit_constant(sp) for sp in problem.experiment_problems))
    if not isinstance(problem.loss, GaussianNLL):
        return 0.0
    c = 0.0
    for j in range(len(problem.meas_times)):
        obs = np.flatnonzero(problem.mask[j])
        S = problem.cov[np.ix_(obs, obs)]
        c += 0.5 * np.linalg.slogdet(2 * np.pi * S)[1]
    return float(c)


def observations(problem: EstimationProblem, Xmeas, u):
    """z_j = g(x_{J(j)}, u, τ_j) as a DataFrame indexed by measurement time (a value that
    is not finite, e.g. the log of a state that is 0 where it is not measured, as it is)."""
    g = problem._numeric(("g", problem.g_sym), lambda: lambdify(
        (problem.x_sym, problem.u_sym, problem.t_sym), list(problem.g_sym), "numpy"))
    with np.errstate(all="ignore"):
        Z = np.array([np.broadcast_to(np.asarray(g(x, u, tau), dtype=float),
                                      (len(problem.g_sym),))
                      for x, tau in zip(Xmeas, problem.meas_times)])
    return pd.DataFrame(Z, index=pd.Index(problem.meas_times, name="time"), columns=problem.obs_names)
