r"""The continuous model on a compiled engine: SUNDIALS CVODES through CasADi's integrator.

:class:`CvodesModel` is a :class:`~pyomo_odeest.discretization.continuous.ContinuousModel`
whose integrations run in compiled code: the right-hand side :math:`f(x, u, t)`
of the problem's sympy form is rendered once into a CasADi ``SX`` expression
graph, and CasADi's ``integrator('cvodes', ...)`` (BDF, Newton with the exact
sparse Jacobian CasADi derives from that graph) integrates it.  Everything
around the integrations stays the package's own: the initial state
:math:`l(u)` with its derivatives (so estimated initial states and the
steady state of a pre-equilibration enter exactly as in the SciPy path), and
the misfit :math:`\varphi_j` with its first and second derivatives
(:class:`~pyomo_odeest.problem._misfit.MeasurementMisfit`).

The map from :math:`(x_0, u)` to the states at the output grid (the
measurement times after :math:`t_0` and the switching times of the inputs)
is one CasADi ``MX`` function :math:`G`, one CVODES integrator per piece
between switching times.  Its derivatives are CVODES's: forward
sensitivities [MHV, eq. (8)] by the states and sensitivity equations integrated as
one ODE under one error test; the adjoint [MHV, eqs.
(15)–(16)] ``G.reverse(1)`` seeded with :math:`\nabla_x\varphi_j`; the Hessian
by forward-over-adjoint ``G.reverse(1).forward(k)``, the second-order adjoint
:math:`\mu, Q` of [MHV, eqs. (18)–(20)].  Inputs given as data enter each piece
as cubic polynomials in :math:`t`; a right-hand side with a function that has
no CasADi counterpart raises :class:`CvodesUnavailable`.  Details: the table in
docs/continuous.md, "The compiled engine".
"""
from __future__ import annotations

import contextlib
import functools
import io
import math
import operator
import re
import sys

import numpy as np
import sympy

from ...problem._inputs import NotPolynomial, input_applications, input_coefficients
from ._functions import IntegrationError
from ._model import ContinuousModel

__all__ = ["CvodesModel", "CvodesUnavailable", "cvodes_available", "sympy_to_casadi",
           "ENGINES", "resolve_engine", "continuous_model", "integrator_name"]

ENGINES = ("cvodes", "scipy")


class CvodesUnavailable(RuntimeError):
    """The CVODES engine cannot take this problem (or CasADi is not installed)."""


def cvodes_available() -> bool:
    """True when CasADi (with its SUNDIALS CVODES plugin) imports."""
    try:
        import casadi  # noqa: F401
    except ImportError:
        return False
    return True


#: CVODES's own lines in what CasADi writes on a failure (not the dump of the inputs)
_CVODES_LINE = re.compile(r"^\s*(At t|Internal t|The )")
_CVODES_FLAG = re.compile(r"(CVodeB?\w*|IDA\w*) returned \"(CV_\w+)\"")

_TOLERANCES = "the tolerances (rtol=, atol= of the continuous approach)"
_STIFF_REMEDY = (f"try other {_TOLERANCES}, or the reduced space approach "
                 "('reduced_space', e.g. with scheme='enright': it solves the discretized "
                 "equations, with no adaptive integration to fail)")
#: CVODES's return flags: what each means here, and what to do.
CVODES_FLAGS = {
    "CV_TOO_MUCH_WORK": (
        "CVODES used up its step limit ({max_num_steps}) between two output times without "
        "reaching the next one",
        f"loosen {_TOLERANCES} (an rtol below about 1e-12 is beyond double precision for "
        "most models) or raise the step limit: model=CvodesModel(problem, "
        "max_num_steps=...); another start does not help when the tolerances are the cause"),
    "CV_TOO_MUCH_ACC": (
        "the tolerances ask for more accuracy than double precision gives",
        f"loosen {_TOLERANCES}"),
    "CV_ERR_FAILURE": (
        "the local error test failed again and again: the solution changes too fast "
        "for the tolerances (a stiff or non-smooth model at these parameter values)",
        _STIFF_REMEDY),
    "CV_CONV_FAILURE": (
        "the Newton iteration of the implicit steps failed again and again: the model is "
        "stiff (or not smooth) at these parameter values",
        _STIFF_REMEDY),
    "CV_NO_FWD": (
        "the backward (adjoint) integration found no forward solution to integrate back "
        "along: the forward integration that stores it did not complete, typically a "
        "stiff model (a very large rate constant) at these parameter values, so neither "
        "the gradient nor the sensitivities could be computed there",
        _STIFF_REMEDY),
    "CV_BAD_TB0": (
        "the backward (adjoint) integration was asked to start outside the forward "
        "solution's time span (the forward integration stopped early)",
        _STIFF_REMEDY),
}


def cvodes_failure(text):
    """``(flag, meaning, remedy)`` of a CVODES failure named in ``text`` (an
    :class:`IntegrationError`'s message, a result's message), or None."""
    m = re.search(r"\b(CV_[A-Z_]+)\b", str(text or ""))
    if m is None or m.group(1) not in CVODES_FLAGS:
        return None
    meaning, remedy = CVODES_FLAGS[m.group(1)]
    return m.group(1), meaning, remedy


def _casadi():
    try:
        import casadi
    except ImportError:
        raise CvodesUnavailable("the CVODES engine needs CasADi: pip install "
                                "'pyomo_odeest[sundials]' (or use engine='scipy')") from None
    return casadi


# ---------------------------------------------------------------------------
# sympy -> CasADi
# ---------------------------------------------------------------------------
def _operators(ca):
    """CasADi counterparts of sympy's functions: unary ones, and those folded over their
    arguments (binary ones included)."""
    unary = {sympy.exp: ca.exp, sympy.log: ca.log, sympy.sin: ca.sin, sympy.cos: ca.cos,
             sympy.tan: ca.tan, sympy.sinh: ca.sinh, sympy.cosh: ca.cosh, sympy.tanh: ca.tanh,
             sympy.asin: ca.asin, sympy.acos: ca.acos, sympy.atan: ca.atan,
             sympy.asinh: ca.asinh, sympy.acosh: ca.acosh, sympy.atanh: ca.atanh,
             sympy.Abs: ca.fabs, sympy.sign: ca.sign, sympy.floor: ca.floor,
             sympy.ceiling: ca.ceil, sympy.erf: ca.erf, sympy.Not: ca.logic_not}
    folded = {sympy.Add: operator.add, sympy.Mul: operator.mul, sympy.atan2: ca.atan2,
              sympy.Max: ca.fmax, sympy.Min: ca.fmin, sympy.And: ca.logic_and,
              sympy.Or: ca.logic_or, sympy.StrictLessThan: ca.lt, sympy.LessThan: ca.le,
              sympy.StrictGreaterThan: ca.gt, sympy.GreaterThan: ca.ge,
              sympy.Equality: ca.eq, sympy.Unequality: ca.ne}
    return unary, folded


def sympy_to_casadi(exprs, table):
    r"""CasADi expressions of the sympy expressions ``exprs``.

    ``table`` maps sympy atoms (symbols, input applications) to CasADi
    expressions.  Covered: numbers, ``+ * **``, the elementary functions
    (exp, log, trigonometric and hyperbolic with inverses, Abs, sign, floor,
    ceiling, erf), ``Max``/``Min``, ``Heaviside``, ``Piecewise`` with
    relational and boolean conditions.  Anything else raises
    :class:`CvodesUnavailable` naming it.  Common subexpressions are
    converted once.
    """
    ca = _casadi()
    unary, folded = _operators(ca)
    cache = {}

    def conv(e):
        if e in table:
            return table[e]
        hit = cache.get(e)
        if hit is not None:
            return hit
        out = _conv(e)
        cache[e] = out
        return out

    def _conv(e):
        if e.is_Number or isinstance(e, sympy.NumberSymbol):
            return float(e)
        if e is sympy.true or e is sympy.false:
            return 1.0 if e is sympy.true else 0.0
        if e.is_Symbol:
            raise CvodesUnavailable(f"symbol {e} of the right-hand side is neither a state, "
                                    f"a parameter nor time")
        if e.is_Pow:
            b, x = e.args
            if x == sympy.Rational(1, 2):
                return ca.sqrt(conv(b))
            if x == -1:
                return 1 / conv(b)
            if x.is_Integer:
                return conv(b) ** int(x)
            return conv(b) ** conv(x)
        f = type(e)
        if f in unary:
            return unary[f](conv(e.args[0]))
        if f in folded:
            return functools.reduce(folded[f], [conv(a) for a in e.args])
        if f is sympy.Heaviside:
            a = conv(e.args[0])
            h0 = float(e.args[1]) if len(e.args) > 1 and e.args[1] is not sympy.nan else 0.5
            return ca.if_else(a > 0, 1.0, ca.if_else(a < 0, 0.0, h0))
        if f is sympy.Piecewise:
            out = None
            for val, cond in reversed(e.args):
                v = conv(val)
                if out is None or cond is sympy.true:
                    out = v if cond is sympy.true else ca.if_else(conv(cond), v, np.nan)
                else:
                    out = ca.if_else(conv(cond), v, out)
            return out
        if not e.free_symbols and not e.atoms(sympy.Function):
            return float(e)
        raise CvodesUnavailable(f"no CasADi counterpart for {f.__name__} in the right-hand "
                                f"side (in {e}); use engine='scipy'")

    return [conv(sympy.sympify(e)) for e in exprs]


class _Trajectory:
    """The forward solution of one parameter vector: ``sol(times)`` integrates
    again with ``times`` as the output grid (CVODES keeps no dense output)."""

    def __init__(self, model, u):
        self._model, self._u = model, u

    def sol(self, t):
        t = np.asarray(t, dtype=float)
        X = self._model._states_at(self._u, np.atleast_1d(t))
        return X if t.ndim else X[:, 0]


class CvodesModel(ContinuousModel):
    r""":class:`~pyomo_odeest.discretization.continuous.ContinuousModel` integrated by CVODES.

    Same interface and conventions as the SciPy model (objective, gradient by
    ``'adjoint'``, ``'sensitivity'`` or ``'fd'``, :meth:`sensitivities`,
    Hessians with ``'soa'`` = forward-over-adjoint here, simulation); see
    the module docstring for how each derivative is computed.

    Parameters
    ----------
    problem : EstimationProblem
        One experiment (use one model per experiment).
    rtol, atol : float
        CVODES tolerances of the states, sensitivities and adjoints
        (default 1e-8 and 1e-12; AMICI's defaults are rtol 1e-8, atol 1e-16
        on its scaled states).
    max_num_steps : int or None
        CVODES's step limit per output interval.  None (default): 10,000 at
        rtol 1e-8 (:data:`MAX_NUM_STEPS`, the limit CasADi and AMICI set), times
        ``sqrt(1e-8 / rtol)`` at tighter tolerances (the steps of an order-q
        method grow like rtol^(-1/(q+1)), at most rtol^(-1/2)), read at each
        integration, so a check at the tolerances / 100 may take ten times as
        many.  A start or a trial point where the model needs more fails after
        that many steps (Crauste's PEtab problem from a Sobol start: 0.1 s, where
        a limit of 100,000 took 2.1 s).  A number: that limit at every tolerance.
    linear_solver : str
        CasADi linear solver of the Newton iterations (``'csparse'``, sparse
        LU of the exact Jacobian; ``'qr'``, CasADi's default).
    **kwargs
        Passed to :class:`ContinuousModel` (``fd_step``,
        ``hessian_fd_step``).
    method : str
        CVODES's linear multistep method: ``'BDF'`` (default; stiff problems) or
        ``'Adams'`` (Adams–Moulton, for non-stiff problems: [MHV]'s diagonal model,
        ``benchmarks/mhv_figures.py``).  :meth:`reference` integrates by SciPy's BDF,
        or LSODA for ``'Adams'``; kept as ``cvodes_method``.

    Notes
    -----
    :meth:`adjoint` with ``times`` integrates once more, cut at those times
    (see :meth:`_lambda_at`).  Counters: ``forward``, ``sensitivity``,
    ``adjoint``, ``soa`` count calls of the compiled functions.
    """

    engine = "cvodes"

    def __init__(self, problem, rtol=1e-8, atol=1e-12, max_num_steps=None,
                 linear_solver="csparse", method="BDF", **kwargs):
        if method not in CVODES_METHODS:
            raise ValueError(f"CVODES's method is one of {CVODES_METHODS}, got {method!r}")
        super().__init__(problem, method="BDF", rtol=rtol, atol=atol, **kwargs)
        #: CVODES's method (``method`` stays the SciPy integrator of the inherited paths)
        self.cvodes_method = method
        self._max_num_steps = None if max_num_steps is None else int(max_num_steps)
        self.linear_solver = str(linear_solver)
        # the symbolic DAE, the parameters it depends on and the compiled functions (per
        # tolerances) are one per problem content, measurement times and switching times:
        # every model of the same experiment (the starts of a multistart, a refit) shares
        # them, so only the first builds CasADi's integrators and their derivatives
        key = ("cvodes", tuple(self.problem.f_sym), tuple(self.problem.l_sym), tuple(self._X),
               tuple(self._U), self._t, float(self.t0), np.asarray(self.tau).tobytes(),
               np.asarray(self.switches).tobytes())
        (self._dae, self._dae_unit, self._apps, self._dynamic,
         self._by_tolerance) = self.problem._numeric(key, self._symbolic_dae)
        # output grid: measurement times after t0 and switching times, in pieces
        self._pieces, self.grid = self._make_pieces(np.unique(self.tau[self.tau > self.t0]))
        self._col = np.array([int(np.searchsorted(self.grid, tt)) if tt > self.t0 else -1
                              for tt in self.tau], dtype=int)
        self._fun_key = None
        self._funs = {}
        self._lhess = None
        self._ref = None
        self._grids = {}
        self._sens = (None, None)          # the last sensitivities: (key, value)

    def _symbolic_dae(self):
        """``(dae, dae_unit, apps, dynamic, functions)``: CasADi's DAE of f (inputs as
        cubics on each piece), the same on the unit interval, the input applications,
        the parameters f or l depend on, and the (empty) cache of compiled functions."""
        ca = _casadi()
        n, p = self.n, self.p
        X = ca.SX.sym("x", n)
        U = ca.SX.sym("u", p)
        t = ca.SX.sym("t")
        apps = input_applications(self.problem.f_sym)
        for a in apps:
            if a.args != (self._t,):
                raise CvodesUnavailable(f"input {a} is not evaluated at time t; use "
                                        f"engine='scipy'")
        lo, w = ca.SX.sym("lo"), ca.SX.sym("w")
        C = ca.SX.sym("c", 4 * len(apps))
        s = (t - lo) / w
        table = {sym: X[i] for i, sym in enumerate(self._X)}
        table.update({sym: U[i] for i, sym in enumerate(self._U)})
        table[self._t] = t
        for k, a in enumerate(apps):
            table[a] = C[4 * k] + s * (C[4 * k + 1] + s * (C[4 * k + 2] + s * C[4 * k + 3]))
        ode = ca.vertcat(*sympy_to_casadi(self.problem.f_sym, table))
        extra = ca.vertcat(lo, w, C) if apps else ca.SX(0, 1)
        dae = dict(x=X, p=ca.vertcat(U, extra), t=t, ode=ode)
        # the same on the unit interval: t = a + h·σ, dx/dσ = h f (one integrator
        # object for any interval [a, a + h])
        a, h, sig = ca.SX.sym("a"), ca.SX.sym("h"), ca.SX.sym("sigma")
        dae_unit = dict(x=X, p=ca.vertcat(U, extra, a, h), t=sig,
                        ode=h * ca.substitute(ode, t, a + h * sig))
        #: the parameters f or l depend on (the others cannot move the states)
        used = set().union(*(sympy.sympify(e).free_symbols
                             for e in list(self.problem.f_sym) + list(self.problem.l_sym)))
        dynamic = np.array([i for i, sym in enumerate(self._U) if sym in used], dtype=int)
        return dae, dae_unit, apps, dynamic, {}

    @property
    def max_num_steps(self) -> int:
        """The step limit per output interval at the current tolerances (see the class's
        ``max_num_steps``)."""
        if self._max_num_steps is not None:
            return self._max_num_steps
        return int(MAX_NUM_STEPS * max(1.0, math.sqrt(1e-8 / self.rtol)))

    @property
    def settings(self) -> dict:
        """The keyword arguments that build this model again on its problem (CVODES's
        method, not the SciPy integrator of the inherited paths)."""
        return dict(super().settings, method=self.cvodes_method,
                    max_num_steps=self._max_num_steps, linear_solver=self.linear_solver)

    def _integration_functions(self):
        """Nothing to lambdify: CVODES evaluates the compiled right-hand side."""

    # -- compiled functions ---------------------------------------------------
    def _make_pieces(self, out_times):
        """``([(a, b, grid)], grid)``: pieces between switching times up to the last of the
        (sorted) ``out_times``, each with its output times, and all their output times."""
        last = float(out_times[-1]) if len(out_times) else self.t0
        sw = self.switches[(self.switches > self.t0) & (self.switches < last)]
        edges = np.concatenate([[self.t0], sw, [last]]) if last > self.t0 else np.zeros(0)
        pieces = []
        for a, b in zip(edges[:-1], edges[1:]):
            g = out_times[(out_times > a) & (out_times <= b)]
            if b < last:
                g = np.union1d(g, [b])
            if len(g):
                pieces.append((float(a), float(b), g))
        return pieces, np.concatenate([g for _, _, g in pieces]) if pieces else np.zeros(0)

    def _piece_data(self, a, b):
        """The inputs on the piece [a, b] as cubics: a, b - a and their coefficients."""
        if not self._apps:
            return np.zeros(0)
        try:
            cs = [input_coefficients(app, a, b) for app in self._apps]
        except NotPolynomial as err:
            raise CvodesUnavailable(f"{err}; use engine='scipy'") from None
        return np.concatenate([[a, b - a], *cs])

    def _opts(self):
        # second_order_correction=False: in CasADi's forward derivatives of an
        # integrator (the Hessian's forward-over-adjoint), the Newton matrix of the
        # augmented system is block diagonal, I - γ·diag(J, ..., J), as in CVODES's own
        # forward sensitivities; the step's solution is the same (Newton converges to
        # it) for 25-60 % less time (docs/performance.md, "The PEtab suite against AMICI")
        return dict(reltol=self.rtol, abstol=self.atol, max_num_steps=self.max_num_steps,
                    linear_solver=self.linear_solver, disable_internal_warnings=True,
                    linear_multistep_method=self.cvodes_method.lower(),
                    second_order_correction=False)

    def _chain(self, dae, pieces, name, z0, u, extra):
        """The MX values of ``dae``'s states (from ``z0``) at the pieces' output times,
        one CVODES integrator per piece, each started where the last ended; its
        parameters are ``u``, the piece's input data and ``extra``."""
        ca = _casadi()
        zs, outs = z0, []
        opts = self._opts()
        for i, (a, b, g) in enumerate(pieces):
            F = ca.integrator(f"{name}_{i}", "cvodes", dae, a, list(g), opts)
            r = F(x0=zs, p=ca.vertcat(u, ca.DM(self._piece_data(a, b)), extra))
            outs.append(r["xf"])
            zs = r["xf"][:, -1]
        return ca.horzcat(*outs) if outs else ca.MX(z0.numel(), 0)

    def _build(self, pieces, name):
        """The MX function (x0, u) -> states at the pieces' output times (n, m)."""
        ca = _casadi()
        x0, u = ca.MX.sym("x0", self.n), ca.MX.sym("u", self.p)
        out = self._chain(self._dae, pieces, name, x0, u, ca.MX(0, 1))
        return ca.Function(name, [x0, u], [out], ["x0", "u"], ["X"])

    def _build_sensitivities(self, k):
        r"""The MX function (x0, S0, u, V) -> the states and forward sensitivities
        :math:`S = (\partial x/\partial u)V` at the output grid, ``(n + n k, m)``: the
        states and the sensitivity equations :math:`\dot S = f_x S + f_u V` [MHV, eq. (8)]
        integrated as one ODE, every component under CVODES's error test (as CVODES's
        own forward sensitivities with their error control on).

        ``k`` is the number of directions, their rows ``V`` those of the parameters f
        depends on (an input); or a tuple of the positions of those parameters whose
        unit vectors are the directions (no ``V``: :math:`f_u V` is then columns of
        :math:`f_u`, not a product with a dense ``V`` in every right-hand side).

        One integration per piece.  CasADi's forward derivative of :meth:`_build`
        (``G.forward(k)``, the engine's earlier sensitivities) integrates the states
        once more inside its graph besides the augmented system; this one took
        0.46-0.94 of its time on eight PEtab problems (``python
        benchmarks/petab_import.py --engine cvodes --compare-forward``)."""
        ca = _casadi()
        dae, n, dyn = self._dae, self.n, self._dynamic
        x, t, ode = dae["x"], dae["t"], dae["ode"]
        U = dae["p"][:self.p]
        units = isinstance(k, tuple)
        nk = len(k) if units else k
        S = ca.SX.sym("S", n, nk)
        dS = ca.mtimes(ca.jacobian(ode, x), S)
        if units:
            Vd, extra = None, ca.SX(0, 1)
            if nk:
                dS += ca.jacobian(ode, ca.vertcat(*[U[int(dyn[j])] for j in k]))
        else:
            Vd = ca.SX.sym("V", len(dyn), nk)
            extra = ca.vec(Vd)
            if len(dyn):
                dS += ca.mtimes(ca.jacobian(ode, ca.vertcat(*[U[i] for i in dyn])), Vd)
        aug = dict(x=ca.vertcat(x, ca.vec(S)), p=ca.vertcat(dae["p"], extra), t=t,
                   ode=ca.vertcat(ode, ca.vec(dS)))
        x0, S0 = ca.MX.sym("x0", n), ca.MX.sym("S0", n, nk)
        u, V = ca.MX.sym("u", self.p), ca.MX.sym("V", 0 if units else len(dyn), nk)
        out = self._chain(aug, self._pieces, f"S{nk}", ca.vertcat(x0, ca.vec(S0)), u,
                          ca.MX(0, 1) if units else ca.vec(V))
        return ca.Function(f"S{nk}", [x0, S0, u, V], [out], ["x0", "S0", "u", "V"], ["X"])

    def _settings_key(self):
        """What the compiled functions depend on besides the problem (their cache key)."""
        return (self.rtol, self.atol, self.max_num_steps, self.linear_solver,
                self.cvodes_method)

    def _f(self, kind, k=0):
        """The compiled function ``kind`` ('G', 'sens', 'adj', 'fwdadj'), rebuilt when the
        tolerances change."""
        key = self._settings_key()
        if key != self._fun_key:          # kept per tolerances (a stationarity check at
            self._fun_key = key            # tighter ones goes back to the fit's)
            self._funs, self._grids = self._by_tolerance.setdefault(key, ({}, {}))
        name = (kind, k)
        if name not in self._funs:
            self._funs[name] = {"G": lambda: self._build(self._pieces, "G"),
                                "sens": lambda: self._build_sensitivities(k),
                                "adj": lambda: self._f("G").reverse(1),
                                "fwdadj": lambda: self._f("adj").forward(k)}[kind]()
        return self._funs[name]

    def _call(self, fn, **kw):
        """``fn(**kw)`` as arrays.  A failure is an :class:`IntegrationError` with CVODES's
        message (where it stopped); CasADi's dump of the failing function's inputs, which
        it writes to standard error, is not passed on."""
        err_out = io.StringIO()
        try:
            with contextlib.redirect_stderr(err_out):
                out = fn(**kw)
        except RuntimeError as err:
            msg = str(err).strip().splitlines()
            where = [ln.strip() for ln in err_out.getvalue().splitlines()
                     if _CVODES_LINE.match(ln)]
            text = msg[-1] if msg else ""
            flag = _CVODES_FLAG.search(text)
            if flag is not None and flag.group(2) in CVODES_FLAGS:
                meaning, remedy = CVODES_FLAGS[flag.group(2)]
                meaning = meaning.format(max_num_steps=f"max_num_steps={self.max_num_steps}")
                raise IntegrationError(
                    f"CVODES failed: {flag.group(1)} returned {flag.group(2)}"
                    + (f" ({where[0]})" if where else "") + f" (rtol={self.rtol:g}, "
                    f"atol={self.atol:g}): {meaning}; {remedy}") from None
            raise IntegrationError("CVODES failed: " + text
                                   + (f" ({where[0]})" if where else "")) from None
        if err_out.getvalue():
            sys.stderr.write(err_out.getvalue())
        out = {k: np.array(v, dtype=float) for k, v in out.items()}
        for k, v in out.items():
            if not np.all(np.isfinite(v)):
                raise IntegrationError(f"CVODES: non-finite values in {k}")
        return out

    # -- forward -------------------------------------------------------------
    def _forward(self, u):
        key = (u.tobytes(), self.rtol, self.atol)
        if self._fwd_key == key:
            return self._fwd
        x0 = self.l.dense(u)
        Xm = np.tile(x0, (len(self.tau), 1))
        if len(self.grid):
            Xg = self._call(self._f("G"), x0=x0, u=u)["X"].reshape(self.n, -1)
            sel = self._col >= 0
            Xm[sel] = Xg[:, self._col[sel]].T
        self.counts["forward"] += 1
        self._fwd_key, self._fwd = key, (_Trajectory(self, u), Xm)
        return self._fwd

    def _states_at(self, u, times):
        """States (n, m) at arbitrary ``times`` (in [t0, ...]), by their own output grid."""
        times = np.asarray(times, dtype=float)
        if np.any(times < self.t0):
            raise ValueError(f"times before t0 = {self.t0:g}")
        out_t = np.unique(times[times > self.t0])
        key = out_t.tobytes()
        self._f("G")              # the cache of the current tolerances (shared), first
        if key not in self._grids:
            pieces, grid = self._make_pieces(out_t)
            self._grids[key] = (self._build(pieces, "sim"), grid)
        fn, grid = self._grids[key]
        x0 = self.l.dense(u)
        X = np.tile(x0[:, None], (1, len(times)))
        if len(grid):
            Xg = self._call(fn, x0=x0, u=u)["X"].reshape(self.n, -1)
            pos = times > self.t0
            X[:, pos] = Xg[:, np.searchsorted(grid, times[pos])]
        return X

    def sensitivities(self, u=None, V=None):
        r"""Forward sensitivities :math:`S = (\partial x/\partial u)V` at the measurement
        times [MHV, eq. (8)], by CVODES (:meth:`_build_sensitivities`); the states ``Xm``
        are the forward solve's, as the objective's.

        Returns ``(trajectory, Xm, Sm)`` with ``Xm`` (N, n) and ``Sm`` (N, n, k).
        """
        u = self._u(u)
        V = np.eye(self.p) if V is None else np.asarray(V, dtype=float).reshape(self.p, -1)
        # the last call's, at the same point, directions and tolerances (a fit's start
        # check and its optimizer's first Jacobian are at one point)
        key = (u.tobytes(), V.shape, V.tobytes(), self._settings_key())
        if self._sens[0] == key:
            return self._sens[1]
        n, N = self.n, len(self.tau)
        traj, Xm = self._forward(u)
        S0 = self.l_u.dense(u) @ V
        Sm = np.tile(S0, (N, 1, 1))
        # directions that move no parameter of f or l leave the states alone (S = 0):
        # an experiment of many sees few of the parameters (PEtab's conditions)
        live = np.flatnonzero(np.any(V[self._dynamic] != 0, axis=0))
        if len(self.grid) and len(live):
            m, kl = len(self.grid), len(live)
            Vd = V[np.ix_(self._dynamic, live)]
            # unit directions (the free parameters'): their positions are the function's
            pos = np.argmax(Vd != 0, axis=0)
            units = bool(np.all(np.count_nonzero(Vd, axis=0) == 1)
                         and np.all(Vd[pos, np.arange(kl)] == 1.0))
            fn = self._f("sens", tuple(int(i) for i in pos) if units else kl)
            out = self._call(fn, x0=self.l.dense(u), S0=S0[:, live], u=u,
                             V=np.zeros((0, kl)) if units else Vd)["X"]
            Sg = out[n:].reshape(kl, n, m).transpose(1, 0, 2)     # (n, directions, m)
            rows = np.flatnonzero(self._col >= 0)
            Sm[rows[:, None, None], np.arange(n)[None, :, None], live[None, None, :]] = \
                np.transpose(Sg[:, :, self._col[rows]], (2, 0, 1))
        self.counts["sensitivity"] += 1
        for a in (Xm, Sm):                 # shared with the next call at the same point
            a.setflags(write=False)
        self._sens = (key, (traj, Xm, Sm))
        return traj, Xm, Sm

    # -- adjoint ---------------------------------------------------------------
    def _seeds(self, jumps):
        """Jumps (N, ...) at the measurement times as seeds on the output grid (..., m),
        and the sum of those at t0 (applied to λ(t0) or μ(t0) directly)."""
        shape = np.shape(jumps)[1:]
        seeds, at0 = np.zeros(shape + (len(self.grid),)), np.zeros(shape)
        for j, c in enumerate(self._col):
            if c >= 0:
                seeds[..., c] += jumps[j]
            else:
                at0 += jumps[j]
        return seeds, at0

    def _adjoint_sweep(self, u, traj, jumps):
        """λ(t0), q and :meth:`_lambda_at` by the CVODES adjoint [MHV, eqs. (15)–(16)]."""
        seeds, lam = self._seeds(jumps)
        q = np.zeros(self.p)
        if len(self.grid):
            s = self._adjoint_scale(seeds)
            out = self._call(self._f("adj"), x0=self.l.dense(u), u=u, adj_X=s * seeds)
            lam = lam + out["adj_x0"].reshape(-1) / s
            q = out["adj_u"].reshape(-1) / s
        return lam, q, lambda times: self._lambda_at(u, times, jumps, lam)

    def _lambda_at(self, u, times, jumps, lam0):
        r""":math:`\lambda(t^-)` at ``times``, (m, n) (left limits, i.e. after the
        jump at a measurement time), by CVODES.

        The horizon is cut at the measurement, switching and requested times
        into intervals, each integrated by one integrator of the unit interval
        (:math:`t = a + h\sigma`), and a perturbation :math:`D_k` is
        added to the state at the end of interval k (before the measurement
        there reads it): :math:`\partial J/\partial D_k = \lambda(t_k^-)`, all
        of them from one reverse sweep with the jumps as seeds.
        """
        ca = _casadi()
        last = float(self.grid[-1]) if len(self.grid) else self.t0
        inner = times[(times > self.t0) & (times <= last)]
        sw = self.switches[(self.switches > self.t0) & (self.switches < last)]
        edges = np.unique(np.concatenate([self.grid, inner, sw]))
        L = np.zeros((len(times), self.n))
        L[times <= self.t0] = lam0
        if len(edges):
            key = ("lambda", edges.tobytes())
            self._f("G")                          # resets the cache on new tolerances
            if key not in self._grids:
                x0 = ca.MX.sym("x0", self.n)
                uu = ca.MX.sym("u", self.p)
                D = ca.MX.sym("D", self.n, len(edges))
                F = ca.integrator("unit", "cvodes", self._dae_unit, 0.0, [1.0], self._opts())
                starts = np.concatenate([[self.t0], edges[:-1]])
                data = np.column_stack([np.concatenate([self._piece_data(a, b), [a, b - a]])
                                        for a, b in zip(starts, edges)])
                xk, pk, dk = (ca.MX.sym("xk", self.n), ca.MX.sym("pk", F.size1_in(2)),
                              ca.MX.sym("dk", self.n))
                step = ca.Function("step", [xk, pk, dk], [F(x0=xk, p=pk)["xf"] + dk])
                P = ca.vertcat(ca.repmat(uu, 1, len(edges)), ca.DM(data))
                X = step.mapaccum("chain", len(edges))(x0, P, D)
                fn = ca.Function("lam", [x0, uu, D], [X], ["x0", "u", "D"], ["X"])
                self._grids[key] = fn.reverse(1)
            rev = self._grids[key]
            seeds = np.zeros((self.n, len(edges)))
            for j, tt in enumerate(self.tau):
                if tt > self.t0:
                    seeds[:, int(np.searchsorted(edges, tt))] += jumps[j]
            s = self._adjoint_scale(seeds)
            adjD = self._call(rev, x0=self.l.dense(u), u=u, D=np.zeros((self.n, len(edges))),
                              adj_X=s * seeds)["adj_D"].reshape(self.n, -1) / s
            pos = (times > self.t0) & (times <= last)
            L[pos] = adjD[:, np.searchsorted(edges, times[pos])].T
        return L

    def _adjoint_scale(self, seeds):
        r"""Factor :math:`s \le 1` of the adjoint's seeds (the sweep is linear in them).

        CVODES has one absolute tolerance ``atol`` for the states and the adjoint.
        Integrating :math:`s\lambda` with
        :math:`s = \text{atol}/(\text{adjoint\_atol}\cdot\text{rtol}\cdot\|\text{jumps}\|_\infty)`
        and dividing the result by :math:`s` gives the adjoint the absolute tolerance
        of the SciPy sweep (:func:`~pyomo_odeest.discretization.continuous._functions._segment_atol`).
        """
        big = float(np.max(np.abs(seeds), initial=0.0))
        want = self.adjoint_atol * self.rtol * big
        return self.atol / want if want > self.atol else 1.0

    # -- second order ------------------------------------------------------------
    def _l_uu(self):
        if self._lhess is None:
            self._lhess = self.problem.initial_hessian()
        return self._lhess

    def _second_order_sweep(self, u, V, traj, jl, jM):
        r"""λ(t0), μ(t0) and Q by forward-over-adjoint: the forward derivative of the
        CVODES adjoint sweep in the directions :math:`(l_u V, V)`, seeded with
        :math:`\varphi_{xx}S_j + \varphi_{xu}V` (``jM``) [MHV, eqs. (18)–(20)]."""
        n, k = self.n, V.shape[1]
        seeds, lam = self._seeds(jl)
        dseeds, M = self._seeds(jM)
        Q = np.zeros((self.p, k))
        if len(self.grid) and k:
            x0 = self.l.dense(u)
            base = self._call(self._f("adj"), x0=x0, u=u, adj_X=seeds)
            lam = lam + base["adj_x0"].reshape(-1)
            out = self._call(self._f("fwdadj", k), x0=x0, u=u, adj_X=seeds,
                             fwd_x0=self.l_u.dense(u) @ V, fwd_u=V,
                             fwd_adj_X=dseeds.reshape(n, -1))
            M = M + out["fwd_adj_x0"].reshape(n, k)
            Q = out["fwd_adj_u"].reshape(self.p, k)
        return lam, M, Q

    # -- cross-check -------------------------------------------------------------
    def reference(self):
        """The SciPy :class:`ContinuousModel` of the same problem (BDF, or LSODA for
        ``method='Adams'``; same tolerances), built once: the fallback and cross-check of
        this engine."""
        if self._ref is None or (self._ref.rtol, self._ref.atol) != (self.rtol, self.atol):
            self._ref = ContinuousModel(self.problem, method="BDF" if self.cvodes_method == "BDF"
                                        else "LSODA", rtol=self.rtol, atol=self.atol)
        return self._ref


# ---------------------------------------------------------------------------
# engine selection
# ---------------------------------------------------------------------------
def resolve_engine(engine=None, method=None):
    """``'cvodes'`` or ``'scipy'``: ``engine`` if given, else ``'cvodes'`` when CasADi
    imports and no SciPy ``method`` is named (``method='Adams'``, CVODES's own, needs
    CasADi)."""
    if engine is None:
        if method == "Adams":
            engine = "cvodes"
        else:
            return "cvodes" if method is None and cvodes_available() else "scipy"
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES} (or None), got {engine!r}")
    if engine == "cvodes" and method not in (None,) + CVODES_METHODS:
        raise ValueError(f"engine 'cvodes' integrates by CVODES's {' or '.join(CVODES_METHODS)};"
                         f" method={method!r} names a SciPy integrator: use engine='scipy' "
                         f"with it")
    if engine == "scipy" and method == "Adams":
        raise ValueError("method 'Adams' is CVODES's: use engine='cvodes' (or None)")
    return engine


#: CVODES's linear multistep methods (``method=`` of the cvodes engine)
CVODES_METHODS = ("BDF", "Adams")
#: CVODES's step limit per output interval at rtol 1e-8 (:class:`CvodesModel`'s
#: ``max_num_steps=None``): CVODES's own limit as CasADi and AMICI set it
MAX_NUM_STEPS = 10_000

#: default integration tolerances ``(rtol, atol)`` per engine
DEFAULT_TOLERANCES = {"cvodes": (1e-8, 1e-12), "scipy": (1e-10, 1e-12)}


def default_tolerances(engine=None, method=None):
    """``(rtol, atol)`` that :func:`continuous_model` uses on the engine that
    :func:`resolve_engine` picks for ``engine`` and ``method``."""
    return DEFAULT_TOLERANCES[resolve_engine(engine, method)]


def continuous_model(problem, engine=None, method=None, rtol=None, atol=None, **kwargs):
    """The continuous model of one experiment on the engine ``engine`` (see
    :func:`resolve_engine`): a :class:`CvodesModel` (default rtol 1e-8, atol 1e-12)
    or a :class:`ContinuousModel` (default ``'LSODA'``, rtol 1e-10, atol 1e-12)."""
    engine = resolve_engine(engine, method)
    r0, a0 = DEFAULT_TOLERANCES[engine]
    rtol, atol = r0 if rtol is None else rtol, a0 if atol is None else atol
    if engine == "cvodes":
        return CvodesModel(problem, rtol=rtol, atol=atol, method=method or "BDF", **kwargs)
    return ContinuousModel(problem, method="LSODA" if method is None else method,
                           rtol=rtol, atol=atol, **kwargs)


def integrator_name(model):
    """``'CVODES BDF (CasADi 3.x)'`` or ``'solve_ivp LSODA'`` (for results)."""
    if getattr(model, "engine", None) == "cvodes":
        return f"CVODES {model.cvodes_method} (CasADi {_casadi().__version__})"
    return f"solve_ivp {model.method}"
