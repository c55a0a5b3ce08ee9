r"""The equations of model (55) [GM-grad, §2.4] in symbolic and lambdified form.

Variable-step Adams predictor–corrector coefficients as rational functions of
the step ratio, the increment :math:`F_i`, the error estimate :math:`E`, the
initial step :math:`Q(x_0, u)`, :math:`l(u)`, :math:`f` with its partials, the
misfit terms :math:`\varphi_j`, and the per-step derivatives every adjoint uses.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy

from ...problem._misfit import misfit_constant, misfit_sym
from ...problem._declaration import EstimationProblem
from ._controller import QMAX_ADAPTIVE, StepController
from ...symbolic import lambdify

__all__ = ["RHO", "adams_pc_coefficients", "AdaptiveEquations"]

RHO = sympy.Symbol("rho", positive=True)


@lru_cache(maxsize=None)
def adams_pc_coefficients(Q: int):
    r"""Adams–Bashforth :math:`(\pi_1..\pi_Q)` and Adams–Moulton
    :math:`(K_0, K_1..K_Q)` coefficients as sympy functions of
    :math:`\rho = h_i/(t_i - t_{i-1})`.

    Derived from the order conditions of :mod:`pyomo_odeest.discretization.schemes`
    (scaled nodes :math:`s = 0, -1/\rho` and :math:`s = 1` for the new point):
    :math:`\sum_j \pi_j s_j^m = 1/(m+1)`, :math:`m < Q`, and
    :math:`\sum_j K_j s_j^m = 1/(m+1)`, :math:`m \le Q`.  For :math:`Q = 2`:
    :math:`\pi = (1 + \rho/2, -\rho/2)`,
    :math:`K = \big(\tfrac{2\rho+3}{6(\rho+1)}, \tfrac{\rho+3}{6}, -\tfrac{\rho^2}{6(\rho+1)}\big)`.
    """
    if Q not in (1, 2):
        raise ValueError(f"adaptive model supports Q in (1, 2), got {Q}")
    past = [sympy.Integer(0), -1 / RHO][:Q]
    a = sympy.symbols(f"a0:{Q}")
    eqs = [sum(a[j] * past[j] ** m for j in range(Q)) - sympy.Rational(1, m + 1) for m in range(Q)]
    sol = sympy.solve(eqs, a, dict=True)[0]
    pi = tuple(sympy.simplify(sol[a[j]]) for j in range(Q))
    nodes = [sympy.Integer(1)] + past
    b = sympy.symbols(f"b0:{Q + 1}")
    eqs = [sum(b[j] * nodes[j] ** m for j in range(Q + 1)) - sympy.Rational(1, m + 1)
           for m in range(Q + 1)]
    sol = sympy.solve(eqs, b, dict=True)[0]
    K = tuple(sympy.factor(sympy.simplify(sol[b[j]])) for j in range(Q + 1))
    return pi, K


def _lamb(args, exprs):
    return lambdify(args, exprs, modules="numpy", cse=True)


class AdaptiveEquations:
    """Symbolic pieces of model (55) and their numeric evaluation (base of
    :class:`~pyomo_odeest.discretization.adaptive.AdaptiveModel`)."""

    def __init__(self, problem: EstimationProblem, controller: StepController | None = None,
                 qmax: int = 2):
        if not isinstance(problem, EstimationProblem):
            raise TypeError("AdaptiveModel needs an EstimationProblem")
        if controller is None:
            controller = StepController()
        if not isinstance(controller, StepController):
            raise TypeError("controller must be a StepController")
        if isinstance(qmax, bool) or qmax not in QMAX_ADAPTIVE:
            raise ValueError(f"qmax must be one of {QMAX_ADAPTIVE}, got {qmax!r}")
        if len(problem.meas_times) == 0:
            raise ValueError("the adaptive model needs measurement times (data)")
        self.problem = problem
        self.controller = controller
        self.qmax = int(qmax)
        self.q = int(controller.q) if controller.q is not None else self.qmax - 1
        self.n = len(problem.states)
        self.m = len(problem.parameters)
        self.t0 = float(problem.t0)
        meas = np.asarray(problem.meas_times, dtype=float)
        self.targets = np.unique(np.concatenate([meas[meas > self.t0], [float(problem.T)]]))
        self._symbolic()

    # -- symbolic pieces --------------------------------------------------
    def _symbolic(self):
        P, c = self.problem, self.controller
        n = self.n
        xi = sympy.symbols(f"_xi0:{n}", real=True, cls=sympy.Dummy)
        xm = sympy.symbols(f"_xm0:{n}", real=True, cls=sympy.Dummy)
        yv = sympy.symbols(f"_yv0:{n}", real=True, cls=sympy.Dummy)
        xcv = sympy.symbols(f"_xcv0:{n}", real=True, cls=sympy.Dummy)
        h, ti, tm = sympy.symbols("_h _ti _tm", real=True, cls=sympy.Dummy)
        u = tuple(P.u_sym)
        self.sym = dict(xi=xi, xm=xm, yv=yv, xcv=xcv, h=h, ti=ti, tm=tm, u=u)

        def f_at(z, tau):
            sub = dict(zip(P.x_sym, z))
            sub[P.t_sym] = tau
            return [fk.xreplace(sub) for fk in P.f_sym]

        floor2 = sympy.Float((c.floor * c.eps) ** 2, 17)
        a2 = sympy.Float(c.scale ** 2, 17)
        milne = sympy.Float(c.milne, 17)
        self.exprs = {}
        self._fn = {}
        self._coef = {}
        args = (xi, xm, u, h, ti, tm)
        for Q in range(1, self.qmax):
            pi, K = adams_pc_coefficients(Q)
            c_all = list(pi) + list(K)
            self._coef[Q] = (_lamb((RHO,), [sympy.sympify(v) for v in c_all]),
                             _lamb((RHO,), [sympy.diff(v, RHO) for v in c_all]), Q)
            rho = h / (ti - tm)
            pi = [sympy.sympify(v).subs(RHO, rho) for v in pi]
            K = [sympy.sympify(v).subs(RHO, rho) for v in K]
            pts = [(xi, ti), (xm, tm)][:Q]
            fp = [f_at(z, tau) for z, tau in pts]
            Y = [xi[s] + h * sum(pi[j] * fp[j][s] for j in range(Q)) for s in range(n)]
            fy = f_at(Y, ti + h)
            F = [K[0] * fy[s] + sum(K[j + 1] * fp[j][s] for j in range(Q)) for s in range(n)]
            fyv = f_at(yv, ti + h)
            Fv = [K[0] * fyv[s] + sum(K[j + 1] * fp[j][s] for j in range(Q)) for s in range(n)]
            XC = [xi[s] + h * F[s] for s in range(n)]
            d = [h * (K[0] * fy[s] + sum((K[j + 1] - pi[j]) * fp[j][s] for j in range(Q)))
                 for s in range(n)]
            E = milne * sympy.sqrt(sum(d[s] ** 2 / (a2 + xi[s] ** 2) for s in range(n)) / n + floor2)
            self.exprs[Q] = dict(Y=Y, F=F, Fv=Fv, XC=XC, E=E)
            # the same estimate on explicit trial stage values (used by the Pyomo block)
            self.exprs["Ed"] = milne * sympy.sqrt(
                sum((xcv[s] - yv[s]) ** 2 / (a2 + xi[s] ** 2) for s in range(n)) / n + floor2)
            Fm = sympy.Matrix(F)
            Em = sympy.Matrix([E])
            groups = [sympy.Matrix(xi), sympy.Matrix(xm), sympy.Matrix(u), sympy.Matrix([h]),
                      sympy.Matrix([ti]), sympy.Matrix([tm])]
            dF = [Fm.jacobian(g) if len(g) else sympy.zeros(n, 0) for g in groups]
            dE = [Em.jacobian(g) if len(g) else sympy.zeros(1, 0) for g in groups]
            self._fn[Q] = dict(
                Y=_lamb(args, Y), XC=_lamb(args, XC), E=_lamb(args, E),
                dF=_lamb(args, [Fm] + dF), dE=_lamb(args, [E] + dE))
        # Q(x0, u)
        x0s = tuple(P.x_sym)
        if c.h0 is not None:
            Qe = sympy.Float(c.h0, 17)
        else:
            f0 = f_at(x0s, sympy.Float(self.t0, 17))
            Qe = (sympy.Float(c.h0_factor * c.eps ** (1.0 / (self.q + 1)), 17)
                  / sympy.sqrt(1 + sum(f0[s] ** 2 / (a2 + x0s[s] ** 2) for s in range(n)) / n))
        self.Q_expr = Qe
        Qm = sympy.Matrix([Qe])
        self._Q = _lamb((x0s, u), [Qe, Qm.jacobian(sympy.Matrix(x0s)),
                                   Qm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(1, 0)])
        # l(u)
        lm = sympy.Matrix(P.l_sym)
        self._l = _lamb((u,), [lm, lm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(n, 0)])
        # f and its partials (general form)
        fm = sympy.Matrix(P.f_sym)
        xs = sympy.Matrix(x0s)
        self._f = _lamb((x0s, u, P.t_sym), [fm, fm.jacobian(xs),
                                            fm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(n, 0),
                                            fm.diff(P.t_sym)])
        # misfit φ_j(x, u)
        self._phi = []
        for j in range(len(P.meas_times)):
            phi = sympy.sympify(misfit_sym(P, j))
            pm = sympy.Matrix([phi])
            self._phi.append(_lamb((x0s, u), [phi, pm.jacobian(xs),
                                              pm.jacobian(sympy.Matrix(u)) if u else sympy.zeros(1, 0)]))
        self.const = misfit_constant(P)

    # -- numeric helpers ---------------------------------------------------
    def _check_u(self, u):
        u = np.asarray(self.problem.u0 if u is None else u, dtype=float).reshape(-1)
        if u.shape != (self.m,):
            raise ValueError(f"u must have {self.m} entries (parameters {self.problem.parameter_names})")
        return u

    def Qfun(self, x0, u):
        """:math:`Q(x_0, u)`, :math:`D_xQ`, :math:`D_uQ`."""
        v, qx, qu = self._Q(x0, u)
        return float(v), np.asarray(qx, float).reshape(-1), np.asarray(qu, float).reshape(-1)

    def ctl(self, which, e, level):
        """Value and derivative of the controller function ``which`` ('R' or 'r') at ``e``.

        ``level`` is the frozen table level (ignored by smooth functions).
        """
        fn = self.controller.R if which == "R" else self.controller.r
        eps = self.controller.eps
        if fn.smooth:
            return fn.value(e, eps, self.q), fn.deriv(e, eps, self.q)
        return fn.value(e, eps, self.q, level), 0.0

    def _hist(self, X, T, i, Q):
        xm = X[i - 1] if Q == 2 else X[i]
        tm = T[i - 1] if Q == 2 else T[i] - 1.0
        return xm, tm

    def initial_state(self, u):
        return np.asarray(self._l(u)[0], dtype=float).reshape(-1)

    # -- per-step derivatives and misfit ---------------------------------------
    def _step_derivs(self, run, i):
        Q = int(run.Q[i])
        xm, tm = self._hist(run.x, run.t, i, Q)
        out = self._fn[Q]["dF"](run.x[i], xm, run.u, run.h[i], run.t[i], tm)
        F, Fxi, Fxm, Fu, Fh, Fti, Ftm = [np.asarray(a, float) for a in out]
        return Q, F.reshape(-1), Fxi, Fxm, Fu, Fh.reshape(-1), Fti.reshape(-1), Ftm.reshape(-1)

    def _trial_derivs(self, run, i, jj):
        Q = int(run.Q[i])
        xm, tm = self._hist(run.x, run.t, i, Q)
        out = self._fn[Q]["dE"](run.x[i], xm, run.u, run.H[i][jj], run.t[i], tm)
        return [np.asarray(a, float).reshape(-1) for a in out]

    def _coef_values(self, Q, run_or_none, i, h=None, ti=None, tm=None):
        """(π, K, dπ/dρ, dK/dρ, ρ) of step i (or of the given h, t_i, t_{i-1})."""
        cf, dcf, _ = self._coef[Q]
        if run_or_none is not None:
            h = run_or_none.h[i]
            ti = run_or_none.t[i]
            tm = run_or_none.t[i - 1] if Q == 2 else ti - 1.0
        rho = h / (ti - tm)
        cv = np.array(cf(rho), dtype=float).reshape(-1)
        dv = np.array(dcf(rho), dtype=float).reshape(-1)
        return cv[:Q], cv[Q:], dv[:Q], dv[Q:], rho

    def _phi_parts(self, run):
        Phix = np.zeros((run.k + 1, self.n))
        Phiu = np.zeros(self.m)
        val = self.const
        for j, gi in enumerate(run.J):
            v, dx, du = self._phi[j](run.x[gi], run.u)
            val += float(v)
            Phix[gi] += np.asarray(dx, float).reshape(-1)
            Phiu += np.asarray(du, float).reshape(-1)
        return val, Phix, Phiu
