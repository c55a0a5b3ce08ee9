r"""Forward part of :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`: the symbolic
set-up, the forward integration of :math:`\dot x = f(x, u, t)`, :math:`x(t_0) = l(u)`
and the objective :math:`J(u)` [MHV, eqs. (1)–(5)]."""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
import sympy
from scipy.integrate import solve_ivp

from ...problem._misfit import MeasurementMisfit, misfit_constant, observations
from ...problem._declaration import EstimationProblem, require_single_experiment
from ._functions import (ODE_METHODS, _IMPLICIT, _SPARSE_OK, IntegrationError, _check_bounded,
                        _contract, _dense_values, _diff_entries, _SymArray, _SymBundle)

__all__ = ["Forward"]


class _PiecewiseSolution:
    """Solutions of consecutive pieces as one: ``y[:, -1]`` is the end of the
    integration, ``sol(t)`` the dense output of the piece that holds ``t``
    (the later piece at a common end point)."""

    def __init__(self, pieces, dense):
        self.y = pieces[-1][1].y
        #: the accepted step points of all pieces, in the order of integration
        self.t = np.concatenate([p[1].t for p in pieces])
        order = sorted(pieces, key=lambda p: p[0])
        self._sols = [p[1].sol for p in order]
        self._starts = np.array([p[0] for p in order[1:]])
        if not dense:
            self.sol = None

    def sol(self, t):
        t = np.asarray(t, dtype=float)
        k = np.searchsorted(self._starts, t, side="right")
        if t.ndim == 0:
            return self._sols[int(k)](float(t))
        out = None
        for piece in np.unique(k):
            sel = k == piece
            v = _dense_values(self._sols[int(piece)], t[sel])
            if out is None:
                out = np.empty((v.shape[0], len(t)))
            out[:, sel] = v
        return out if out is not None else np.zeros((0, 0))


def _values(result, t):
    """Dense output of a solve (one piece or a :class:`_PiecewiseSolution`) at the
    times ``t``, (n, m), through :func:`_dense_values`."""
    t = np.asarray(t, dtype=float)
    if isinstance(result, _PiecewiseSolution):
        return result.sol(t)
    return _dense_values(result.sol, t)


def _capped(fn, c):
    """``fn(t, y)`` evaluated at ``min(t, c)`` (None stays None)."""
    return None if fn is None else (lambda t, y: fn(min(t, c), y))


class Forward:
    """Symbolic set-up, forward solves and objective (base of ``ContinuousModel``)."""

    def __init__(self, problem: EstimationProblem, method="LSODA", rtol=1e-10, atol=1e-12,
                 fd_step=1e-6, hessian_fd_step=1e-4, max_step=np.inf, sparse_jacobian=400,
                 adjoint_atol=0.1):
        if not isinstance(problem, EstimationProblem):
            raise TypeError("ContinuousModel needs an EstimationProblem")
        require_single_experiment(problem, "ContinuousModel (use one per experiment)")
        if method not in ODE_METHODS:
            raise ValueError(f"method must be one of {ODE_METHODS}, got {method!r}")
        if not (rtol > 0 and atol > 0):
            raise ValueError("rtol and atol must be positive")
        self.problem = problem
        self.method = method
        self.rtol, self.atol = float(rtol), float(atol)
        self.fd_step = float(fd_step)
        self.hessian_fd_step = float(hessian_fd_step)
        self.max_step = max_step
        self.sparse_jacobian = int(sparse_jacobian)
        self.adjoint_atol = float(adjoint_atol)
        self.n = len(problem.states)
        self.p = len(problem.parameters)
        self.t0, self.T = float(problem.t0), float(problem.T)
        self.tau = np.asarray(problem.meas_times, dtype=float)
        #: switching times of the inputs: every integration restarts there
        self.switches = np.asarray(problem.switch_times, dtype=float)
        self.constant = misfit_constant(problem)

        X, U, t = problem.x_sym, problem.u_sym, problem.t_sym
        self._X, self._U, self._t = X, U, t
        self._L = problem._numeric(("adjoint_symbols", self.n), lambda: tuple(
            sympy.Dummy(f"lam{i}", real=True) for i in range(self.n)))
        n, p = self.n, self.p
        self._args = (X, U, t)
        self._e_f = [((i,), sympy.sympify(e)) for i, e in enumerate(problem.f_sym)]

        def initial():
            e_l = [((i,), sympy.sympify(e)) for i, e in enumerate(problem.l_sym)]
            return _SymArray(e_l, (n,), (U,)), _SymArray(_diff_entries(e_l, U), (n, p), (U,))
        #: l and l_u (built once per problem: a multistart builds a model per start)
        self.l, self.l_u = problem._numeric(("l_u", problem.l_sym, tuple(U)), initial)
        self._second = None
        #: Σ φ_j and R(u) with their derivatives (shared with the discrete backend)
        self.misfit = MeasurementMisfit(problem)
        self._fwd_key = None
        self._fwd = None
        self.counts = dict(forward=0, sensitivity=0, adjoint=0, soa=0, nfev=0, njev=0)
        self._integration_functions()

    @property
    def settings(self) -> dict:
        """The keyword arguments that build this model again on its problem
        (``type(model)(model.problem, **model.settings)``: the same integrations)."""
        return dict(method=self.method, rtol=self.rtol, atol=self.atol, fd_step=self.fd_step,
                    hessian_fd_step=self.hessian_fd_step, max_step=self.max_step,
                    sparse_jacobian=self.sparse_jacobian, adjoint_atol=self.adjoint_atol)

    def _integration_functions(self):
        r"""The lambdified :math:`f, f_x, f_u` and adjoint contractions of the SciPy
        integrations (a compiled engine replaces them by its own); built once per
        problem."""
        self.__dict__.update(self.problem._numeric(
            ("integration", tuple(self.problem.f_sym)), self._build_integration_functions))

    def _build_integration_functions(self):
        X, U, n, p, args = self._X, self._U, self.n, self.p, self._args
        t = self._t
        e_fx = _diff_entries(self._e_f, X)
        e_fu = _diff_entries(self._e_f, U)
        fx_syms = set().union(*(e.free_symbols for _, e in e_fx))
        return dict(
            _e_fx=e_fx, _e_fu=e_fu,
            #: f, f_x (forward right-hand side and its Jacobian)
            f=_SymArray(self._e_f, (n,), args), f_x=_SymArray(e_fx, (n, n), args),
            # adjoint: h_x = f_x^T λ (its right-hand side) and h_u = f_u^T λ (its
            # quadrature, evaluated at many points at once), h = λ^T f
            _adj_x=_SymArray(_contract(e_fx, self._L), (n,), args + (self._L,)),
            _adj_u=_SymArray(_contract(e_fu, self._L), (p,), args + (self._L,)),
            #: f_x free of x (a linear ODE) / of x and t (time-invariant too): the
            #: adjoint's backward system then needs no x(t) / is a fixed matrix
            _fx_has_x=bool(fx_syms & set(X)), _fx_const=not (fx_syms & (set(X) | {t})),
            _sens=_SymBundle([(self._e_f, (n,)), (e_fx, (n, n)), (e_fu, (n, p))], args))

    # -- lazily built symbolic pieces ---------------------------------------
    def _second_derivatives(self):
        r"""Bundles with :math:`f_{xx}, f_{xu}, f_{uu}, l_{uu}` and the λ-contractions
        (built on first use, once per problem)."""
        if self._second is None:
            P = self.problem
            self._second = P._numeric(("second", tuple(P.f_sym), tuple(P.l_sym)),
                                      self._build_second_derivatives)
        return self._second

    def _build_second_derivatives(self):
        X, U, L = self._X, self._U, self._L
        n, p = self.n, self.p
        fxx = _diff_entries(self._e_fx, X)
        fxu = _diff_entries(self._e_fx, U)
        fuu = _diff_entries(self._e_fu, U)
        args = self._args
        return dict(
            # sensitivity Jacobian: f_x, f_xx, f_xu
            sens_jac=_SymBundle([(self._e_fx, (n, n)), (fxx, (n, n, n)),
                                 (fxu, (n, n, p))], args),
            # second-order adjoint rhs: f_x, f_u, h_xx, h_xu, h_uu
            soa=_SymBundle([(self._e_fx, (n, n)), (self._e_fu, (n, p)),
                            (_contract(fxx, L), (n, n)), (_contract(fxu, L), (n, p)),
                            (_contract(fuu, L), (p, p))], args + (L,)),
            # its Jacobian: f_x, f_u, f_xx, f_xu, f_uu
            soa_jac=_SymBundle([(self._e_fx, (n, n)), (self._e_fu, (n, p)),
                                (fxx, (n, n, n)), (fxu, (n, n, p)), (fuu, (n, p, p))],
                               args),
            l_uu=self.problem.initial_hessian())

    # -- integration ---------------------------------------------------------
    def _u(self, u):
        u = np.asarray(self.problem.u0 if u is None else u, dtype=float).reshape(-1)
        if u.shape != (self.p,):
            raise ValueError(f"parameter vector must have length {self.p} (all parameters, "
                             f"fixed ones included), got {u.shape}")
        if not np.all(np.isfinite(u)):
            raise ValueError(f"parameter vector is not finite: {u}")
        return u

    def _jac_format(self, dim):
        return self.method in _SPARSE_OK and dim > self.sparse_jacobian

    def _solve(self, fun, jac, t_span, y0, dense=True, atol=None):
        r"""Integrate over ``t_span`` (forward or backward), restarting at every
        switching time :math:`\sigma` of the inputs inside it.

        Each piece :math:`[a, b]` between switching times is integrated with
        the right-hand side evaluated at :math:`\min(t, b^-)` when :math:`b` is
        a switching time (:math:`b^-` the preceding floating-point number), so
        the integrator sees one smooth piece of every input, as the grids of
        the discrete schemes do (their twin points :math:`\sigma^-`).  The
        states, sensitivities and adjoints are continuous at :math:`\sigma`
        (fixed switching times): a restart, no jump.  Returns the solution of
        one piece, or a :class:`_PiecewiseSolution` of several.
        """
        if not len(self.switches):
            return self._solve_piece(fun, jac, t_span, y0, dense, atol)
        a, b = float(t_span[0]), float(t_span[1])
        lo, hi = min(a, b), max(a, b)
        inner = self.switches[(self.switches > lo) & (self.switches < hi)]
        edges = np.concatenate([[lo], inner, [hi]])
        if a > b:
            edges = edges[::-1]
        pieces, y = [], np.asarray(y0, dtype=float)
        for s, e in zip(edges[:-1], edges[1:]):
            top = max(s, e)
            if np.any(self.switches == top):
                top = float(np.nextafter(top, -np.inf))
                f, jj = _capped(fun, top), _capped(jac, top)
            else:
                f, jj = fun, jac
            sol = self._solve_piece(f, jj, (s, e), y, dense, atol)
            pieces.append((min(s, e), sol))
            y = sol.y[:, -1]
        return pieces[0][1] if len(pieces) == 1 else _PiecewiseSolution(pieces, dense)

    def _solve_piece(self, fun, jac, t_span, y0, dense=True, atol=None):
        kw = dict(method=self.method, rtol=self.rtol, dense_output=dense,
                  atol=self.atol if atol is None else atol,
                  max_step=self.max_step)
        if self.method in _IMPLICIT and jac is not None:
            kw["jac"] = jac
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            try:
                sol = solve_ivp(fun, t_span, np.asarray(y0, dtype=float), **kw)
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:   # _Diverged too
                raise IntegrationError(f"{self.method} failed on {t_span}: {err}") from None
        self.counts["nfev"] += int(sol.nfev)
        self.counts["njev"] += int(sol.njev)
        if sol.status < 0 or not np.all(np.isfinite(sol.y[:, -1])):
            raise IntegrationError(f"{self.method} failed on {t_span}: {sol.message}")
        return sol

    def _forward(self, u):
        """State solution with dense output (cached for the last u)."""
        key = u.tobytes()
        if self._fwd_key == key:
            return self._fwd
        f, fx = self.f, self.f_x
        x0 = self.l.dense(u)
        ul = u.tolist()        # python floats: the lambdified code runs ~3x faster

        def rhs(t, x):
            _check_bounded(x)
            return f.dense(x.tolist(), ul, t)
        sparse = self._jac_format(self.n)

        def jac(t, x):
            J = fx.dense(x.tolist(), ul, t)
            return sp.csc_matrix(J) if sparse else J
        sol = self._solve(rhs, jac, (self.t0, self.T), x0)
        Xm = np.atleast_2d(sol.sol(self.tau).T).reshape(len(self.tau), self.n)
        Xm[self.tau == self.t0] = x0
        self.counts["forward"] += 1
        self._fwd_key, self._fwd = key, (sol, Xm)
        return self._fwd

    def simulate(self, u=None, times=None):
        """States x(t) at ``times`` (default: the measurement times) as a DataFrame."""
        u = self._u(u)
        sol, Xm = self._forward(u)
        if times is None:
            times, X = self.tau, Xm
        else:
            times = np.asarray(times, dtype=float)
            X = np.atleast_2d(sol.sol(times).T).reshape(len(times), self.n)
        return pd.DataFrame(X, index=pd.Index(times, name="time"), columns=self.problem.states)

    def observations(self, u=None):
        r""":math:`z(\tau_j) = g(x(\tau_j), u, \tau_j)` as a DataFrame (like ``problem.data``)."""
        u = self._u(u)
        _, Xm = self._forward(u)
        return observations(self.problem, Xm, u)

    # -- objective -----------------------------------------------------------
    def objective(self, u=None):
        r""":math:`J(u) = \sum_j \varphi_j(x(\tau_j), u) + R(u) + c` [MHV, eqs. (2), (4)]."""
        return self._misfit(self._u(u)) + self.constant

    def _misfit(self, u):
        """Σ_j φ_j + R(u) without the constant (what finite differences difference)."""
        _, Xm = self._forward(u)
        return self.misfit.value(Xm, u) + self.misfit.penalty(u)
