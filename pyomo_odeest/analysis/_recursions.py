r"""The papers' gradient recursions, implemented as printed (in one place).

These are the independent check of the reduced-space adjoint of
:class:`~pyomo_odeest.discretization.discrete.DiscreteModel` and of Ipopt's multipliers.
They work on the scheme written in the papers' form
``x_{i+1} = x_i + h_i F_i(x_{i+1}, x_i, ..., x_{i-Q_i+1}; u)`` with dense
n×n matrices (clarity over speed).

* Explicit predictor–corrector [GM-grad, §2.3.1]: the predictor is
  eliminated, ``F_i = K_0 f(y_{i+1}) + Σ_j K_j f(x_{i-j+1})`` with
  ``y_{i+1} = x_i + h_i Σ_j Π_j f(x_{i-j+1})``; sensitivities eq. (51),
  gradient (53); adjoint eq. (52), gradient (54).
* Implicit Adams–Moulton and Enright [GM-grad, §2.3.2]: ``F_i`` depends on
  ``x_{i+1}``, and (52) becomes implicit:
  ``[I − h_{j-1} D_{x_j}F_{j-1}]ᵀ p_j = p_{j+1} + Σ_i h_i D_{x_j}F_iᵀ p_{i+1} − ∇Φ_j``.
  For Enright ``D_{x_{i+1}}F_i = ρ_0 f_x + h σ ḟ_x`` with
  ``ḟ_x = D_x(f_x f) = f_xx·f + f_x²`` for stationary systems (the paper's
  bracket); the non-stationary term ``f_tx`` is included here.  The paper
  prints the h² coefficient as ``ρ_0``; it is the separate coefficient σ.
* Semi-implicit predictor–corrector–recorrector [GM-grad, §2.3.2]: the
  multipliers p (recorrector), q (predictor), q^c (corrector) of
  ``q^c_{i+1} = h² σ ḟ_x(y^c_{i+1})ᵀ p_{i+1}``,
  ``q_{i+1} = h K_0 f_x(y_{i+1})ᵀ q^c_{i+1}``,
  ``[I − h ρ_0 f_x(x_i)]ᵀ p_i = p_{i+1} + q_{i+1} + q^c_{i+1} − ∇Φ_i
  + Σ h [Π q + K q^c + ρ p] f_x(x_i)ᵀ`` (the printed index ranges of the
  double sum have typos; the sum runs over the steps that use x_i).

Sign convention: ``p`` solves ``pᵀ D_xG = −D_xF`` with
``G = (x_0 − l(u), x_{i+1} − x_i − h_i F_i)``; it equals Ipopt's multiplier of
the same constraint in the block (Lagrangian ``J + λᵀ G``).
"""
from __future__ import annotations

import numpy as np

from ..discretization.discrete._first_order import GRADIENT_METHODS

__all__ = ["paper_adjoint", "paper_gradient", "paper_sensitivity_gradient"]


def _coefs(stage):
    """{('past', lag) | ('new',) | ('stage', name): coefficient} for f and ḟ terms."""
    def key(p):
        if p.kind == "past":
            return ("past", p.lag)
        if p.kind == "new":
            return ("new",)
        return ("stage", p.stage)
    return ({key(p): c for p, c in stage.f_terms}, {key(p): c for p, c in stage.fdot_terms})


def _dense_at(name):
    """Method ``(x, t) ->`` the dense matrix of the model's function ``name`` at one point."""
    def at(self, x, t):
        fn = getattr(self.dm, name)
        return fn.dense(fn.point(x, self.u, t))[0]
    return at


class _Local:
    """Dense f_x, f_u, ḟ_x, ḟ_u at single points."""

    def __init__(self, dm, u):
        self.dm, self.u = dm, u

    fx, fu, fdx, fdu = (_dense_at(n) for n in ("fx", "fu", "fdx", "fdu"))


def _phi_derivatives(dm, traj):
    """∇_xΦ_i (k+1, n) on the grid and Σ_i ∇_uΦ_i (m,)."""
    Fw, Fu = dm._dF(traj.W, traj.u)
    return Fw[dm.xblk], Fu


def _composite(dm, traj):
    """D_{x_{i-j+1}}F_i (dict lag -> n×n, lag -1 = x_{i+1}) and D_uF_i for every step."""
    L = _Local(dm, traj.u)
    X, t = traj.X, dm.t
    name = dm.scheme.name
    out = []
    for sf in dm.formulas:
        i = sf.i
        h = t[i + 1] - t[i]
        Dx, Du = {}, None
        if name == "adams_pc":
            pi, _ = _coefs(sf.stage("y"))
            kc, _ = _coefs(sf.stage("x"))
            y = traj.W[dm.stage_blk[("y", i)]]
            fxy, fuy = L.fx(y, t[i + 1]), L.fu(y, t[i + 1])
            K0 = kc[("stage", "y")]
            Du = K0 * fuy
            dy_du = 0
            for (kind, lag), c in pi.items():
                fx_, fu_ = L.fx(X[i - lag], t[i - lag]), L.fu(X[i - lag], t[i - lag])
                # D_{x_{i-lag}} y = δ_{lag,0} I + h Π f_x
                Dx[lag] = Dx.get(lag, 0) + K0 * fxy @ (h * c * fx_)
                dy_du = dy_du + h * c * fu_
            Dx[0] = Dx.get(0, 0) + K0 * fxy
            Du = Du + K0 * fxy @ dy_du
            for key, c in kc.items():
                if key[0] == "past":
                    lag = key[1]
                    Dx[lag] = Dx.get(lag, 0) + c * L.fx(X[i - lag], t[i - lag])
                    Du = Du + c * L.fu(X[i - lag], t[i - lag])
        elif name in ("adams_moulton", "enright"):
            fc, dc = _coefs(sf.stage("x"))
            Du = 0
            for key, c in fc.items():
                if key[0] == "past":
                    lag = key[1]
                    Dx[lag] = Dx.get(lag, 0) + c * L.fx(X[i - lag], t[i - lag])
                    Du = Du + c * L.fu(X[i - lag], t[i - lag])
                else:      # ('new',): ρ_0 f(x_{i+1}) / K_0 f(x_{i+1})
                    Dx[-1] = Dx.get(-1, 0) + c * L.fx(X[i + 1], t[i + 1])
                    Du = Du + c * L.fu(X[i + 1], t[i + 1])
            for key, c in dc.items():   # h σ ḟ(x_{i+1}): F_i carries h_i σ
                assert key == ("new",)
                Dx[-1] = Dx.get(-1, 0) + h * c * L.fdx(X[i + 1], t[i + 1])
                Du = Du + h * c * L.fdu(X[i + 1], t[i + 1])
        else:
            raise ValueError(f"no composite form for scheme {name!r}")
        out.append((h, Dx, Du))
    return out


def paper_adjoint(dm, traj):
    """Adjoint p_0..p_k of eq. (52) (explicit) or its implicit form (§2.3.2).

    For the semi-implicit scheme returns ``(p, q, qc)``; otherwise ``p``.
    """
    if dm.scheme.name == "semi_implicit_enright":
        return _semi_implicit(dm, traj)[:3]
    return _adjoint_composite(dm, traj, _composite(dm, traj))


def _adjoint_composite(dm, traj, comp):
    k, n = dm.k, dm.n
    dPhi, _ = _phi_derivatives(dm, traj)
    p = np.zeros((k + 1, n))
    for j in range(k, -1, -1):
        rhs = -dPhi[j].copy()
        if j < k:
            rhs += p[j + 1]
        for i in range(j, k):                      # steps that use x_j as a past point
            h, Dx, _ = comp[i]
            lag = i - j
            if lag in Dx:
                rhs += h * Dx[lag].T @ p[i + 1]
            elif lag > max([l for l in Dx if l >= 0], default=-1):
                break
        if j >= 1 and -1 in comp[j - 1][1]:          # implicit: x_j in F_{j-1}
            h, Dx, _ = comp[j - 1]
            p[j] = np.linalg.solve((np.eye(n) - h * Dx[-1]).T, rhs)
        else:
            p[j] = rhs
    return p


def _grad_54(dm, traj, p, comp):
    """Eq. (54): ∇J = −l_uᵀ p_0 − Σ h_i D_uF_iᵀ p_{i+1} + Σ D_uΦ_i."""
    _, Fu = _phi_derivatives(dm, traj)
    lu = dm.lu.dense(dm.lu.point(np.zeros(0), traj.u, dm.t[0]))[0]
    g = Fu - lu.T @ p[0]
    for i, (h, _, Du) in enumerate(comp):
        g -= h * Du.T @ p[i + 1]
    return g


def paper_gradient(dm, traj):
    """∇J_k by the papers' adjoint formulas ((52)/(54), or §2.3.2)."""
    if dm.scheme.name == "semi_implicit_enright":
        return _semi_implicit(dm, traj)[3]
    comp = _composite(dm, traj)
    p = _adjoint_composite(dm, traj, comp)
    return _grad_54(dm, traj, p, comp)


def paper_sensitivity_gradient(dm, traj):
    """∇J_k by eq. (51) (M_{i+1} = M_i + h_i[Σ D_{x}F_i M + D_uF_i], implicit if
    F_i depends on x_{i+1}) and eq. (53)."""
    if dm.scheme.name == "semi_implicit_enright":
        raise ValueError("the semi-implicit scheme has no printed sensitivity recursion; "
                         "use DiscreteModel.gradient(method='sensitivity')")
    comp = _composite(dm, traj)
    k, n, m = dm.k, dm.n, dm.m
    lu = dm.lu.dense(dm.lu.point(np.zeros(0), traj.u, dm.t[0]))[0]
    M = np.zeros((k + 1, n, m))
    M[0] = lu
    for i, (h, Dx, Du) in enumerate(comp):
        rhs = M[i] + h * Du
        for lag, D in Dx.items():
            if lag >= 0:
                rhs = rhs + h * D @ M[i - lag]
        M[i + 1] = np.linalg.solve(np.eye(n) - h * Dx[-1], rhs) if -1 in Dx else rhs
    dPhi, Fu = _phi_derivatives(dm, traj)
    return Fu + np.einsum("in,inm->m", dPhi, M)


def _semi_implicit(dm, traj):
    """[GM-grad], §2.3.2, semi-implicit model: multipliers p, q, q^c and the gradient."""
    L = _Local(dm, traj.u)
    X, t, k, n = traj.X, dm.t, dm.k, dm.n
    dPhi, Fu = _phi_derivatives(dm, traj)
    p = np.zeros((k + 1, n))
    q = np.zeros((k + 1, n))
    qc = np.zeros((k + 1, n))
    coef = []
    for sf in dm.formulas:
        i = sf.i
        pi, _ = _coefs(sf.stage("y"))
        kc, _ = _coefs(sf.stage("yc"))
        rc, rd = _coefs(sf.stage("x"))
        coef.append((t[i + 1] - t[i], pi, kc, rc, rd))
    Y = {i: traj.W[dm.stage_blk[("y", i)]] for i in range(k)}
    YC = {i: traj.W[dm.stage_blk[("yc", i)]] for i in range(k)}
    for j in range(k, -1, -1):
        rhs = -dPhi[j].copy()
        if j < k:
            rhs += p[j + 1] + q[j + 1] + qc[j + 1]
        fxj = L.fx(X[j], t[j])
        for i in range(j, k):
            h, pi, kc, rc, rd = coef[i]
            lag = ("past", i - j)
            w = (pi.get(lag, 0.0) * q[i + 1] + kc.get(lag, 0.0) * qc[i + 1]
                 + rc.get(lag, 0.0) * p[i + 1])
            rhs += h * fxj.T @ w
        if j >= 1:
            h, pi, kc, rc, rd = coef[j - 1]
            p[j] = np.linalg.solve((np.eye(n) - h * rc[("new",)] * fxj).T, rhs)
            # multipliers of the corrector and the predictor of step j-1
            qc[j] = h * h * rd[("stage", "yc")] * L.fdx(YC[j - 1], t[j]).T @ p[j]
            q[j] = h * kc[("stage", "y")] * L.fx(Y[j - 1], t[j]).T @ qc[j]
        else:
            p[j] = rhs
    lu = dm.lu.dense(dm.lu.point(np.zeros(0), traj.u, t[0]))[0]
    g = Fu - lu.T @ p[0]
    for i in range(k):
        h, pi, kc, rc, rd = coef[i]
        g -= h * kc[("stage", "y")] * L.fu(Y[i], t[i + 1]).T @ qc[i + 1]
        g -= h * rc[("new",)] * L.fu(X[i + 1], t[i + 1]).T @ p[i + 1]
        g -= h * h * rd[("stage", "yc")] * L.fdu(YC[i], t[i + 1]).T @ p[i + 1]
        for key in set(pi) | set(kc) | set(rc):
            if key[0] != "past":
                continue
            r = i - key[1]
            w = pi.get(key, 0.0) * q[i + 1] + kc.get(key, 0.0) * qc[i + 1] + rc.get(key, 0.0) * p[i + 1]
            g -= h * L.fu(X[r], t[r]).T @ w
    return p, q, qc, g


GRADIENT_METHODS["recursion"] = paper_gradient
