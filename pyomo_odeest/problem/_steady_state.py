r"""A steady state as a function of the parameters: the pre-equilibrated initial state.

See docs/experiments.md, section "Pre-equilibration: a steady state as initial state"
(conservation laws, the Newton and simulation solves, the stability test, limits).
The steady state :math:`x_{ss}(u)` of :math:`\dot x = f_P(x, u)` started at
:math:`x_P(u)` solves the square system

.. math::

    G(x, u) = \begin{pmatrix} f_{P,\bar R}(x, u) \\ W\,(x - x_P(u)) \end{pmatrix} = 0,

with :math:`W` the conserved moieties (:func:`conservation_laws`) and :math:`R` as many
redundant rows of :math:`f_P`, chosen by a pivoted QR factorization of :math:`W`.
Derivatives follow from the implicit function theorem:
:math:`x_u = -G_x^{-1} G_u` and, with :math:`z = (x, u)` and
:math:`Z_u = \binom{x_u}{I}`,
:math:`x_{u_j u_k} = -G_x^{-1}\,\sum_{ab} G_{z_a z_b}\,Z_{u,aj}\,Z_{u,bk}`.

Symbolically, the components of :math:`x_{ss}` are sympy functions of the
parameters with a numeric implementation (``_imp_``, used by ``lambdify``)
whose derivatives (``fdiff``) are these sensitivities, so every consumer of
the initial state :math:`l(u)` evaluates the steady state and its exact
derivatives without knowing about it; the Pyomo block replaces them by
variables constrained by :math:`G = 0` (:attr:`SteadyState.G_sym`, the
constraints ``steady_state_eq`` of
:func:`~pyomo_odeest.transcription._initial_state.add_initial_condition`).
"""
from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np
import scipy.linalg
import sympy
from scipy.integrate import solve_ivp

from ._validation import ProblemError
from ..symbolic import lambdify

__all__ = ["SteadyState", "SteadyStateError", "conservation_laws", "zero_face"]

_counter = itertools.count()


class SteadyStateError(ProblemError):
    """No (stable, nonsingular) steady state of the pre-equilibration was found."""


class _Budget(Exception):
    """The simulation to steady state used up its evaluations."""


def conservation_laws(f_sym, x_sym, u_sym, x_ref, u_ref, samples=6, rtol=1e-9, seed=0):
    r"""Rows :math:`W` (orthonormal, ``(k, n)``) spanning the constant vectors
    :math:`w` with :math:`w^\top f(x, u) \equiv 0`.

    :math:`w^\top f \equiv 0` implies :math:`w^\top f = 0` and
    :math:`w^\top f_x = 0` at every point, so :math:`W` is the left null space of
    :math:`[f_x(p_1), f(p_1), \dots]` over random points :math:`p_i` near
    ``(x_ref, u_ref)`` (singular values below ``rtol`` times the largest count as
    zero).  A law whose coefficients depend on the parameters is not found (the
    steady-state Jacobian is then singular and reported as such)."""
    n = len(x_sym)
    fm = sympy.Matrix(f_sym)
    fn = lambdify((tuple(x_sym), tuple(u_sym)), [fm, fm.jacobian(list(x_sym))], "numpy")
    rng = np.random.default_rng(seed)
    x_ref = np.abs(np.asarray(x_ref, dtype=float))
    u_ref = np.asarray(u_ref, dtype=float)
    cols = []
    for _ in range(samples):
        x = x_ref * rng.uniform(0.5, 1.5, n) + rng.uniform(0.1, 1.0, n)
        u = u_ref * rng.uniform(0.8, 1.25, u_ref.size) + np.where(
            u_ref == 0, rng.uniform(0.1, 0.5, u_ref.size), 0.0)
        with np.errstate(all="ignore"):
            f, fx = (np.asarray(a, dtype=float) for a in fn(x, u))
        M = np.column_stack([fx.reshape(n, n), f.reshape(n, 1)])
        if np.all(np.isfinite(M)):
            cols.append(M)
    if len(cols) < 2:
        raise ProblemError("pre-equilibration: the rhs is not finite at points near the "
                           "initial state; cannot detect conservation laws")
    U, s, _ = np.linalg.svd(np.hstack(cols))
    rank = int(np.sum(s > rtol * s[0])) if s.size and s[0] > 0 else 0
    W = U[:, rank:].T.copy()
    W[np.abs(W) < 1e-12] = 0.0
    return W


def zero_face(f_sym, x0_sym, x_sym):
    r"""Indices of the states that start at 0 and stay there: the largest set Z with
    :math:`x_{0,j} \equiv 0` and :math:`f_j(x)|_{x_Z = 0} \equiv 0` for every j in Z.

    The face :math:`x_Z = 0` is invariant, so the pre-equilibration never leaves it and
    its steady state has :math:`x_Z = 0` for every parameter value.  Fixing those states
    removes the directions along which the steady state is not isolated: a complex of a
    species absent during pre-equilibration (an inhibitor) that nothing consumes has a
    zero column in :math:`f_x`, and Newton's Jacobian would be singular there
    (Raimundez_PCB2020's ``EGFR_MMET_METinh``)."""
    zero = {j for j, e in enumerate(x0_sym) if sympy.sympify(e) == 0}
    while zero:
        at = {x_sym[j]: sympy.Integer(0) for j in zero}
        moving = {j for j in zero
                  if not _vanishes(sympy.sympify(f_sym[j]).xreplace(at))}
        if not moving:
            break
        zero -= moving
    return tuple(sorted(zero))


def _vanishes(e):
    return e == 0 or sympy.expand(e) == 0


def second_entries(exprs, syms, skip=()):
    """``[(r, a, b, d)]``: the second derivatives ``d`` of ``exprs[r]`` in ``syms[a]`` and
    ``syms[b]`` (``a <= b``) that are not identically zero (rows in ``skip`` left out)."""
    entries = []
    for r, e in enumerate(exprs):
        if r in skip:
            continue
        e = sympy.sympify(e)
        for a, sa in enumerate(syms):
            if sa not in e.free_symbols:
                continue
            da = sympy.diff(e, sa)
            for b in range(a, len(syms)):
                d = sympy.diff(da, syms[b]) if syms[b] in da.free_symbols else 0
                if d != 0:
                    entries.append((r, a, b, d))
    return entries


def _rebuild(ss, i, idx, args):
    return ss.function(i, idx)(*args)


class SteadyState:
    r"""The steady state :math:`x_{ss}(u)` of ``f_sym`` reached from ``x0_sym``
    (see the module docstring).

    Parameters
    ----------
    f_sym : sequence of sympy expressions in ``x_sym`` and ``u_sym``
        The dynamics during pre-equilibration (no time, no inputs).
    x0_sym : sequence of sympy expressions in ``u_sym``
        Where the pre-equilibration starts.
    x_sym, u_sym : the problem's state and parameter symbols.
    u_ref : array
        Parameter values near which conservation laws are detected (the start values).
    name : str
        Named in error messages.
    """

    def __init__(self, f_sym, x0_sym, x_sym, u_sym, u_ref, name="ode"):
        self.f_sym = tuple(sympy.sympify(e) for e in f_sym)
        self.x0_sym = tuple(sympy.sympify(e) for e in x0_sym)
        self.x_sym, self.name = tuple(x_sym), name
        n = len(self.x_sym)
        allowed = set(self.x_sym) | set(u_sym)
        bad = set().union(*[e.free_symbols for e in self.f_sym + self.x0_sym]) - allowed
        bad |= set().union(*[e.free_symbols for e in self.x0_sym]) & set(self.x_sym)
        if bad:
            raise ProblemError(f"{name}: pre-equilibration needs autonomous dynamics and a start "
                               f"depending on parameters only; uses {sorted(map(str, bad))} "
                               f"(time, inputs or states)")
        used = set().union(*[e.free_symbols for e in self.f_sym + self.x0_sym])
        #: the parameters the steady state depends on (arguments of its functions)
        self.u_sym = tuple(s for s in u_sym if s in used)
        u_ref = np.asarray(u_ref, dtype=float)
        ua = np.array([u_ref[list(u_sym).index(s)] for s in self.u_sym])
        x0_ref = np.asarray(lambdify((self.u_sym,), list(self.x0_sym), "numpy")(ua),
                            dtype=float)
        #: states that start at 0 and stay there (:func:`zero_face`): fixed at 0
        self.zero = zero_face(self.f_sym, self.x0_sym, self.x_sym)
        off = [i for i in range(n) if i not in self.zero]
        # conservation laws: rows w with w^T f ≡ 0 of the dynamics on the zero face (the
        # states off it, those on it at 0).  Found on the face itself: the laws of the whole
        # space restricted to the states off the face span them too, but where two laws
        # differ only on the face their restrictions nearly cancel, and orthonormalizing
        # them amplifies their round-off into a law the dynamics do not keep (Isensee's
        # pre-equilibration: a "law" violated by 2.7e-4 along the trajectory, a steady
        # state with |f| = 1.5e-5 and a nominal NLL 0.089 off)
        if self.zero:
            at = {self.x_sym[j]: sympy.Integer(0) for j in self.zero}
            W = conservation_laws([sympy.sympify(self.f_sym[i]).xreplace(at) for i in off],
                                  [self.x_sym[i] for i in off], self.u_sym, x0_ref[off], ua)
        else:
            W = conservation_laws(self.f_sym, self.x_sym, self.u_sym, x0_ref, ua)
        k = W.shape[0]
        piv = [off[int(i)] for i in scipy.linalg.qr(W, pivoting=True)[2][:k]] if k else []
        self.replaced = tuple(sorted(piv + list(self.zero)))
        #: the invariants of the pre-equilibration: conservation laws, then one row per state
        #: of the zero face (its steady state is the class of ``x0`` they fix)
        self.W = np.zeros((k + len(self.zero), n))
        self.W[:k, off] = W
        self.W[k + np.arange(len(self.zero)), list(self.zero)] = 1.0
        laws = [sum(sympy.Float(float(w), 17) * (x - x0) for w, x, x0 in
                    zip(row, self.x_sym, self.x0_sym) if w != 0) for row in self.W]
        #: the square steady-state system G(x, u) = 0
        self.G_sym = tuple([e for i, e in enumerate(self.f_sym) if i not in self.replaced]
                           + [sympy.sympify(e) for e in laws])
        assert len(self.G_sym) == n
        self._init_numeric()

    # -- numeric set-up (rebuilt after unpickling) -----------------------------
    def _init_numeric(self):
        xs, us = self.x_sym, self.u_sym
        Gm = sympy.Matrix(self.G_sym)
        fm = sympy.Matrix(self.f_sym)
        self._G = lambdify((xs, us), [Gm, Gm.jacobian(list(xs)),
                                            Gm.jacobian(list(us)) if us else sympy.zeros(len(xs), 0)],
                                 "numpy", cse=True)
        self._f = lambdify((xs, us), [fm, fm.jacobian(list(xs))], "numpy", cse=True)
        self._x0 = lambdify((us,), list(self.x0_sym), "numpy")
        self._Gzz = None
        self._cache = OrderedDict()
        self._classes = {}
        self._key = next(_counter)
        self._N = scipy.linalg.null_space(self.W) if self.W.size else np.eye(len(xs))

    def __getstate__(self):
        keep = ("f_sym", "x0_sym", "x_sym", "u_sym", "name", "W", "replaced", "G_sym", "zero")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_numeric()

    # -- evaluation --------------------------------------------------------------
    def _eval(self, x, u):
        with np.errstate(all="ignore"):
            g, gx, gu = self._G(x, u)
        return (np.asarray(g, dtype=float).reshape(-1), np.asarray(gx, dtype=float),
                np.asarray(gu, dtype=float).reshape(len(self.x_sym), len(self.u_sym)))

    def _newton(self, x, u, maxit=60):
        """Damped Newton from ``x``; the root, or None."""
        g = self._eval(x, u)[0]
        for _ in range(maxit):
            if not np.all(np.isfinite(g)):
                return None
            gx = self._eval(x, u)[1]
            if not np.all(np.isfinite(gx)) or np.linalg.cond(gx) > 1e14:
                return None
            dx = np.linalg.solve(gx, -g)
            nrm, lam = np.linalg.norm(g), 1.0
            while lam >= 1e-6:
                xn = x + lam * dx
                gn = self._eval(xn, u)[0]
                if np.all(np.isfinite(gn)) and np.linalg.norm(gn) <= (1 - 1e-4 * lam) * nrm:
                    break
                lam *= 0.5
            else:
                return x if np.linalg.norm(dx) <= 1e-12 * (1 + np.linalg.norm(x)) else None
            x, g = xn, gn
            if lam == 1.0 and np.max(np.abs(dx)) <= 1e-13 * (1 + np.max(np.abs(x))):
                return x
        return x if np.linalg.norm(g) <= 1e-10 * (1 + np.linalg.norm(x)) else None

    def _stable(self, x, u):
        """Asymptotically stable on the conservation class of ``x``."""
        fx = np.asarray(self._f(x, u)[1], dtype=float)
        N = self._N
        if N.shape[1] == 0:
            return True
        return bool(np.max(np.linalg.eigvals(N.T @ fx @ N).real) < 0)

    def _simulate(self, x0, u, budget=200_000):
        """Integrate the pre-equilibration dynamics until ‖f‖ ≤ 1e-8 + 1e-6‖x‖ (t ≤ 1e10,
        at most ``budget`` evaluations of f): the state, or None and why not."""
        calls = [0]

        def rhs(t, x):
            calls[0] += 1
            if calls[0] > budget:
                raise _Budget()
            return np.asarray(self._f(x, u)[0], dtype=float).reshape(-1)

        def jac(t, x):
            return np.asarray(self._f(x, u)[1], dtype=float)
        x, t = np.array(x0, dtype=float), 0.0
        bound = 1e12 * (1 + np.max(np.abs(x)))

        def escape(t, x):
            return bound - np.max(np.abs(x))
        escape.terminal = True
        for T in 10.0 ** np.arange(1, 11):
            try:
                with np.errstate(all="ignore"):
                    sol = solve_ivp(rhs, (t, T), x, method="LSODA", jac=jac, rtol=1e-9,
                                    atol=1e-12, events=escape, t_eval=[T])
            except _Budget:
                return None, (f"the simulation does not settle within {budget} evaluations "
                              f"of f (t < {T:.3g}; oscillating?)")
            if sol.status == 1:
                return None, (f"the simulation diverges (|x| > {bound:.3g} at "
                              f"t={sol.t_events[0][0]:.3g})")
            if not sol.success or not sol.y.size or not np.all(np.isfinite(sol.y[:, -1])):
                return None, f"the simulation fails after t={t:.3g}: {sol.message}"
            x, t = sol.y[:, -1], T
            fn, xn = np.linalg.norm(np.asarray(self._f(x, u)[0], dtype=float)), np.linalg.norm(x)
            # settled: f small against x, and x would not move by 0.1 % in another time T at
            # this rate (x' = k grows without end but has |f| <= 1e-6 |x| once x > 1e6 k)
            if fn <= 1e-8 + 1e-6 * xn and fn * T <= 1e-3 * (1.0 + xn):
                return x, None
        fn = np.linalg.norm(np.asarray(self._f(x, u)[0], dtype=float))
        return None, f"no steady state reached by t={t:.3g} (|f| = {fn:.3g})"

    def _solve(self, u):
        x0 = np.asarray(self._x0(u), dtype=float).reshape(-1)
        if not np.all(np.isfinite(x0)):
            raise SteadyStateError(f"{self.name}: pre-equilibration start x_P(u) = {x0} is not "
                                   f"finite at {self._at(u)}")
        x = self._newton(x0, u)
        if x is not None and self._stable(x, u):
            return x
        xs, why = self._simulate(x0, u)
        if xs is None:
            raise SteadyStateError(f"{self.name}: no steady state of the pre-equilibration at "
                                   f"{self._at(u)}: Newton from the start finds no stable root and {why}; "
                                   f"a pre-equilibration needs dynamics that come to rest "
                                   f"(f(x, u) = 0 at a stable state): check its parameters and "
                                   f"right-hand side")
        x = self._newton(xs, u)
        if x is None:
            raise SteadyStateError(f"{self.name}: the pre-equilibration settles near {xs} at "
                                   f"{self._at(u)}, but its steady-state Jacobian is singular "
                                   f"(Newton does not converge): a conservation law with "
                                   f"parameter-dependent coefficients, or a non-isolated "
                                   f"steady state?")
        if not self._stable(x, u):
            raise SteadyStateError(f"{self.name}: the steady state at {self._at(u)} is not "
                                   f"asymptotically stable")
        return x

    def _at(self, u):
        return "u = {" + ", ".join(f"{s}: {v:.6g}" for s, v in zip(self.u_sym, u)) + "}"

    def _entry(self, u):
        u = np.asarray(u, dtype=float).reshape(-1)
        key = u.tobytes()
        hit = self._cache.get(key)
        if hit is None:
            hit = {"x": self._solve(u)}
            self._cache[key] = hit
            if len(self._cache) > 16:
                self._cache.popitem(last=False)
        return u, hit

    def _get(self, u, what):
        """The cached ``x``, ``xu`` or ``xuu`` at ``u`` (not a copy)."""
        u, hit = self._entry(u)
        if what != "x" and "xu" not in hit:
            _, gx, gu = self._eval(hit["x"], u)
            hit["gx"] = gx
            hit["xu"] = -np.linalg.solve(gx, gu)
        if what == "xuu" and "xuu" not in hit:
            xu = hit["xu"]
            n, m = xu.shape
            Z = np.vstack([xu, np.eye(m)])
            Gzz = self._second_derivatives(hit["x"], u)
            T = np.einsum("rab,aj,bk->rjk", Gzz, Z, Z)
            hit["xuu"] = -np.linalg.solve(hit["gx"], T.reshape(n, m * m)).reshape(n, m, m)
        return hit[what]

    def state(self, u):
        """:math:`x_{ss}(u)` (``u``: values of :attr:`u_sym`)."""
        return self._get(u, "x").copy()

    def sensitivity(self, u):
        """:math:`\\partial x_{ss}/\\partial u` ``(n, len(u_sym))`` by the implicit function theorem."""
        return self._get(u, "xu").copy()

    def second(self, u):
        """:math:`\\partial^2 x_{ss}/\\partial u^2` ``(n, m, m)``."""
        return self._get(u, "xuu").copy()

    def _second_derivatives(self, x, u):
        if self._Gzz is None:
            entries = second_entries(self.G_sym, self.x_sym + self.u_sym)
            fn = lambdify((self.x_sym, self.u_sym), [e for *_, e in entries] or [0],
                                "numpy", cse=True)
            self._Gzz = (entries, fn)
        entries, fn = self._Gzz
        nz = len(self.x_sym) + len(self.u_sym)
        out = np.zeros((len(self.G_sym), nz, nz))
        vals = np.asarray(fn(x, u), dtype=float).reshape(-1) if entries else []
        for (r, a, b, _), v in zip(entries, vals):
            out[r, a, b] = v
            out[r, b, a] = v
        return out

    def value(self, u, i, idx=()):
        """Component ``i`` of :math:`x_{ss}` (``idx = ()``) or of its derivative in
        the parameters ``idx`` (positions in :attr:`u_sym`, at most two)."""
        if len(idx) == 0:
            return float(self._get(u, "x")[i])
        if len(idx) == 1:
            return float(self._get(u, "xu")[i, idx[0]])
        if len(idx) == 2:
            return float(self._get(u, "xuu")[i, idx[0], idx[1]])
        raise ProblemError(f"{self.name}: derivatives of order {len(idx)} of a pre-equilibrated "
                           f"initial state are not available (at most second order)")

    # -- symbolic ------------------------------------------------------------------
    def function(self, i, idx=()):
        """The sympy function class of component ``i`` (derivative ``idx``)."""
        key = (i, tuple(sorted(idx)))
        cls = self._classes.get(key)
        if cls is None:
            ss = self

            def imp(*u):
                return ss.value(np.array(u, dtype=float), key[0], key[1])

            def fdiff(fself, argindex=1):
                return ss.function(key[0], key[1] + (argindex - 1,))(*fself.args)

            def derivative(fself, sym):
                # the arguments are distinct parameter symbols: d/du_j is fdiff(j) alone
                # (sympy's chain rule over every argument costs O(m) per call)
                if all(a.is_Symbol for a in fself.args):
                    return fdiff(fself, fself.args.index(sym) + 1) if sym in fself.args \
                        else sympy.Integer(0)
                return sympy.Function._eval_derivative(fself, sym)

            def reduce(fself, *_):
                return (_rebuild, (ss, key[0], key[1], fself.args))

            name = f"steady_state{self._key}_x{i}" + "".join(f"_d{j}" for j in key[1])
            cls = type(name, (sympy.Function,), {
                "nargs": len(self.u_sym), "fdiff": fdiff, "_imp_": staticmethod(imp),
                "_eval_derivative": derivative, "is_commutative": True, "is_real": True,
                "__reduce__": reduce, "__reduce_ex__": reduce})
            self._classes[key] = cls
        return cls

    def expressions(self):
        """:math:`x_{ss}(u)` as sympy expressions (functions of :attr:`u_sym`; numbers
        when it depends on no parameter)."""
        n = len(self.x_sym)
        if not self.u_sym:
            x = self.state(np.zeros(0))
            return tuple(sympy.Float(float(v), 17) for v in x)
        return tuple(self.function(i)(*self.u_sym) for i in range(n))

    def applications(self, exprs):
        """The steady-state function applications in ``exprs``, with their component."""
        out = {}
        for e in exprs:
            for a in sympy.sympify(e).atoms(sympy.Function):
                for (i, idx), cls in self._classes.items():
                    if type(a) is cls:
                        if idx:
                            raise ProblemError(f"{self.name}: a derivative of the steady state "
                                               f"appears in an expression")
                        out[a] = i
        return out

    def __repr__(self):
        return (f"SteadyState({self.name}: {len(self.x_sym)} states, "
                f"{self.W.shape[0] - len(self.zero)} conservation laws, {len(self.zero)} states "
                f"fixed at 0, parameters {[str(s) for s in self.u_sym]})")
