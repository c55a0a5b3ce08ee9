r"""The compiled engine of :class:`~pyomo_odeest.discretization.discrete.DiscreteModel` (numba).

With numba installed (the ``compiled`` extra), the forward simulation of the
scheme, the Jacobians of f at every block and the block sweeps — discrete
adjoint and gradient [GM-grad, eqs. (52), (54)], sensitivities [GM-grad,
eq. (51)] and the second-order adjoint of [GM-grad, §2.5] — run as machine
code on the same equations; the numpy code of :mod:`._simulation`,
:mod:`._first_order` and :mod:`._second_order` stays the fallback and the
reference.  The problem-independent sweeps live in :mod:`._sweeps`; the
simulation and the Jacobians, with the point kernels of f, ∂f/∂x, ∂f/∂u
(ḟ, ∂ḟ/∂x, ∂ḟ/∂u) and the inputs given as data (one cubic per piece), are
generated per problem into a module file of the kernel cache
(:data:`SIMULATION_TEMPLATE`, :data:`JACOBIANS_TEMPLATE`).  See
docs/reduced_space.md, section "Compiled engine".
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time
import warnings

import numpy as np

from ...problem._inputs import (NotPolynomial, input_applications, input_coefficients,
                                input_pieces)
from ...symbolic._codegen import NotCompilable, input_source, kernel_source
from ...symbolic._store import cache_dir

__all__ = ["numba_available", "SimulationKernel", "build_simulation_kernel", "ENGINES",
           "COMPILE_SECONDS", "NotCompilable", "AUTO_MIN_BLOCKS"]

#: ``engine='auto'`` compiles models of at least this many blocks (LV with Adams PC:
#: 2 blocks per step).  Smaller models take numpy's sweeps milliseconds, less than
#: the 1–2 s a new process spends importing numba and loading cached kernels.
AUTO_MIN_BLOCKS = 1000

#: Engine names accepted by :class:`DiscreteModel` (``'auto'``: numba when installed).
ENGINES = ("auto", "numba", "numpy")

#: Wall time spent building (generating, compiling or loading) simulation kernels
#: in this process, per kernel hash (seconds); the benchmark reports it.
COMPILE_SECONDS = {}

_LOCK = threading.Lock()
_MODULES = {}


def numba_available():
    """True if numba can be imported."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    except Exception as err:          # a broken install, or a module shadowing one numba probes
        warnings.warn(f"numba is installed but fails to import ({err!r}); the discrete model "
                      f"runs on its numpy engine", RuntimeWarning, stacklevel=3)
        return False
    return True


#: The simulation loop of :meth:`Simulation.simulate` / ``_newton`` for numba; the
#: generated module defines ``_f``, ``_fx`` (and ``_fd``, ``_fdx``) above it.
SIMULATION_TEMPLATE = '''
@njit(cache=True, error_model="numpy", nogil=True)
def _newton(W, b, rhs, c, d, u, tb, fx_rows, fx_cols, fdx_rows, fdx_cols, tol, max_it):
    n = rhs.shape[0]
    v = rhs.copy()
    fv = np.empty(n)
    jv = np.empty(fx_rows.shape[0])
    djv = np.empty(fdx_rows.shape[0])
    J = np.empty((n, n))
    dv = np.empty((n, 1))
    for it in range(1, max_it + 1):
        _f(v, u, tb, fv)
        r = v - rhs - c * fv
        J[:, :] = 0.0
        for i in range(n):
            J[i, i] = 1.0
        _fx(v, u, tb, jv)
        for k in range(jv.shape[0]):
            J[fx_rows[k], fx_cols[k]] -= c * jv[k]
        if d != 0.0:
            _fd(v, u, tb, fv)
            r -= d * fv
            _fdx(v, u, tb, djv)
            for k in range(djv.shape[0]):
                J[fdx_rows[k], fdx_cols[k]] -= d * djv[k]
        if not (np.all(np.isfinite(r)) and np.all(np.isfinite(J))):
            break
        for i in range(n):
            dv[i, 0] = -r[i]
        if not lu_solve(J, dv):
            break
        big = 0.0                      # each state's change against its own magnitude
        for i in range(n):
            v[i] += dv[i, 0]
            rel = abs(dv[i, 0]) / (1.0 + abs(v[i]))
            if rel > big:
                big = rel
        if big <= tol:
            W[b] = v
            return it
    return -1


@njit(cache=True, error_model="numpy", nogil=True)
def _known_terms(rhs, W, u, blk_time, b, ptr, pt, c, V, done, fdot):
    """Add the terms of block b at earlier points to rhs (f, or fdot, evaluated once
    per point into V); returns the sum of the coefficients at b itself."""
    s = 0.0
    for e in range(ptr[b], ptr[b + 1]):
        p = pt[e]
        if p == b:
            s += c[e]
            continue
        if not done[p]:
            if fdot:
                _fd(W[p], u, blk_time[p], V[p])
            else:
                _f(W[p], u, blk_time[p], V[p])
            done[p] = True
        for i in range(rhs.shape[0]):
            rhs[i] += c[e] * V[p, i]
    return s


@njit(cache=True, error_model="numpy", nogil=True)
def simulate(W, u, blk_time, base, implicit, f_ptr, f_pt, f_c, d_ptr, d_pt, d_c,
             fx_rows, fx_cols, fdx_rows, fdx_cols, tol, max_it):
    """Fill W[1:] block by block; returns (status, block, newton iterations),
    status 0 = done, 1 = non-finite state, 2 = Newton failure."""
    nb, n = W.shape
    Fv = np.empty((nb, n))
    Fdone = np.zeros(nb, dtype=np.bool_)
    Dv = np.empty((nb, n))
    Ddone = np.zeros(nb, dtype=np.bool_)
    rhs = np.empty(n)
    total = 0
    for b in range(1, nb):
        rhs[:] = W[base[b]]
        cs = _known_terms(rhs, W, u, blk_time, b, f_ptr, f_pt, f_c, Fv, Fdone, False)
        ds = _known_terms(rhs, W, u, blk_time, b, d_ptr, d_pt, d_c, Dv, Ddone, True)
        if not implicit[b]:
            W[b] = rhs
        else:
            it = _newton(W, b, rhs, cs, ds, u, blk_time[b], fx_rows, fx_cols,
                         fdx_rows, fdx_cols, tol, max_it)
            if it < 0:
                return 2, b, total
            total += it
        for i in range(n):
            if not np.isfinite(W[b, i]):
                return 1, b, total
    return 0, -1, total
'''

#: The Jacobians of f (and ḟ) at every block, C-ordered as the sweeps of
#: :mod:`._sweeps` take them; the generated module defines ``_fx``, ``_fu``, ``_fdx``,
#: ``_fdu`` (those of ḟ write nothing without ḟ: arrays of no columns).
JACOBIANS_TEMPLATE = '''
@njit(cache=True, error_model="numpy", nogil=True)
def jacobians(W, u, blk_time, fxv, fuv, fdxv, fduv):
    """Fill row b of f_x, f_u, ḟ_x, ḟ_u with their values at the point W[b]."""
    for b in range(W.shape[0]):
        _fx(W[b], u, blk_time[b], fxv[b])
        _fu(W[b], u, blk_time[b], fuv[b])
        _fdx(W[b], u, blk_time[b], fdxv[b])
        _fdu(W[b], u, blk_time[b], fduv[b])
'''

#: ∇_w F and ∇_u F of the measurement misfit (the ``gradients`` of
#: :class:`~pyomo_odeest.problem._misfit.MeasurementMisfit` summed into blocks); the
#: generated module defines ``_g``, ``_gx``, ``_gu``.
MISFIT_TEMPLATE = '''
@njit(cache=True, error_model="numpy", nogil=True)
def _measured(values, measured, rows):
    """Zero the values of a Jacobian of g in the rows of observables not measured."""
    for k in range(values.shape[0]):
        if not measured[rows[k]]:
            values[k] = 0.0


@njit(cache=True, error_model="numpy", nogil=True)
def misfit_gradients(W, blk, u, t, zbar, mask, weights, A, gx_rows, gx_cols, gu_rows, gu_cols,
                     Fw, Fu):
    """Add g_xᵀ (2 A_j r_j) to Fw[blk[j]] and g_uᵀ (2 A_j r_j) to Fu for every
    measurement time j, r_j = g(W[blk[j]], u, t[j]) - zbar[j] where measured (0
    elsewhere, as the Jacobians' rows); A_j = diag(weights[j]), or A[j] when weights
    has no rows."""
    no = zbar.shape[1]
    r = np.empty(no)
    v = np.empty(no)
    gxv = np.empty(gx_rows.shape[0])
    guv = np.empty(gu_rows.shape[0])
    for j in range(blk.shape[0]):
        x = W[blk[j]]
        _g(x, u, t[j], r)
        for o in range(no):
            r[o] = r[o] - zbar[j, o] if mask[j, o] else 0.0
        for o in range(no):
            if weights.shape[0]:
                v[o] = 2.0 * (weights[j, o] * r[o])
            else:
                s = 0.0
                for o2 in range(no):
                    s += A[j, o, o2] * r[o2]
                v[o] = 2.0 * s
        _gx(x, u, t[j], gxv)
        _measured(gxv, mask[j], gx_rows)
        add_transposed(Fw[blk[j]], v, 1, gx_rows, gx_cols, gxv, 1.0)
        _gu(x, u, t[j], guv)
        _measured(guv, mask[j], gu_rows)
        add_transposed(Fu, v, 1, gu_rows, gu_cols, guv, 1.0)
'''

_HEADER = '''"""Generated by pyomo_odeest.discretization.discrete._compiled: point kernels of one
problem's right-hand side (and observation function), the simulation loop of the
discrete scheme, the Jacobians at every block (and the misfit's gradients)."""
import math
import numpy as np
from numba import njit
from pyomo_odeest.discretization.discrete._sweeps import add_transposed, lu_solve

'''


_DECORATOR = '@njit(cache=True, error_model="numpy", nogil=True)'


def _jit(name, src):
    return f'{_DECORATOR}\n{src}\n'


def _zero_kernel(name):
    return _jit(name, f"def {name}(x, u, t, out):\n    return\n")


def _inputs(eq, exprs):
    """The inputs given as data in ``exprs``: ``({application: function name}, sources)``,
    each a cubic per piece between the switching times (the same polynomials as the
    CVODES engine's, :func:`~pyomo_odeest.problem._inputs.input_coefficients`)."""
    P = eq.problem
    inner, lo, width = input_pieces(P)
    # at T and after: the input's own value at T (right-continuous, as the numpy engine
    # evaluates it: a slope that ends at T is 0 there)
    T = float(P.T)
    inner, lo, width = np.append(inner, T), np.append(lo, T), np.append(width, 1.0)
    names, parts = {}, []
    for k, app in enumerate(input_applications(exprs)):
        if app.args != (P.t_sym,):
            raise NotCompilable(f"input {app} is not evaluated at time t")
        try:
            C = [input_coefficients(app, a, a + w) for a, w in zip(lo[:-1], width[:-1])]
        except NotPolynomial as err:
            raise NotCompilable(str(err)) from None
        C.append([float(type(app)._imp_(T)), 0.0, 0.0, 0.0])
        names[app] = f"_input{k}"
        parts.append(input_source(names[app], inner, lo, width, C, _DECORATOR) + "\n\n")
    return names, parts


def kernel_text(eq):
    """Source of the generated module of the model ``eq`` (a DiscreteEquations): with
    the misfit's gradients when its observation function compiles, without them
    otherwise."""
    P = eq.problem
    kernels = {"_f": P.f_sym, "_fx": eq.fx.exprs, "_fu": eq.fu.exprs}
    if eq.needs_fdot:
        kernels.update(_fd=eq._fd_sym, _fdx=eq.fdx.exprs, _fdu=eq.fdu.exprs)
    try:
        return _module_text(eq, dict(kernels, _g=P.g_sym, _gx=eq.gx.exprs, _gu=eq.gu.exprs))
    except NotCompilable:
        return _module_text(eq, kernels)


def _module_text(eq, kernels):
    """The module of the point kernels ``kernels`` (name -> expressions; ḟ's write
    nothing when absent) and the templates that use them."""
    P = eq.problem
    xs, us, ts = P.x_sym, P.u_sym, P.t_sym
    names, parts = _inputs(eq, [e for exprs in kernels.values() for e in exprs])
    parts = [_HEADER] + parts
    for name in ("_f", "_fx", "_fu", "_fd", "_fdx", "_fdu", "_g", "_gx", "_gu"):
        if name in kernels:
            parts.append(_jit(name, kernel_source(name, kernels[name], xs, us, ts, names)))
        elif name.startswith("_fd"):
            parts.append(_zero_kernel(name))
    parts += [SIMULATION_TEMPLATE, JACOBIANS_TEMPLATE]
    if "_g" in kernels:
        parts.append(MISFIT_TEMPLATE)
    return "".join(parts)


class SimulationKernel:
    """The compiled ``simulate``, ``jacobians`` (and ``misfit_gradients``) of one problem
    structure, with its build time."""

    def __init__(self, module, key, seconds):
        self.simulate = module.simulate
        self._jacobians = module.jacobians
        self._misfit_gradients = getattr(module, "misfit_gradients", None)
        self.key = key
        self.seconds = seconds

    def jacobians(self, eq, W, u, t):
        """``{"fx", "fu"[, "fdx", "fdu"]}``: the values (npts, nnz) of the Jacobians of
        f (ḟ) of the model ``eq`` at the points ``W`` (npts, n) and times ``t`` (the
        entries of :meth:`~._equations.DiscreteEquations._point_values`)."""
        nb = W.shape[0]
        keys = ("fx", "fu", "fdx", "fdu") if eq.needs_fdot else ("fx", "fu")
        out = {k: np.empty((nb, getattr(eq, k).nnz)) for k in keys}
        none = np.empty((nb, 0))
        self._jacobians(np.ascontiguousarray(W, dtype=float), np.asarray(u, dtype=float),
                        np.ascontiguousarray(t, dtype=float), out["fx"], out["fu"],
                        out.get("fdx", none), out.get("fdu", none))
        return out

    def misfit_gradients(self, eq, W, u):
        """``(∇_w F, Σ_j ∇_u φ_j)``, shapes (nblocks, n) and (m,), of the misfit of the
        model ``eq`` at the blocks ``W`` (without the penalty's part), or None when the
        observation function has no compiled form."""
        if self._misfit_gradients is None:
            return None
        Fw, Fu = np.zeros(W.shape), np.zeros(eq.m)
        self._misfit_gradients(np.ascontiguousarray(W, dtype=float), eq.meas_blk,
                               np.asarray(u, dtype=float), *_misfit_arrays(eq), Fw, Fu)
        return Fw, Fu


def _misfit_arrays(eq):
    """The data of the misfit of ``eq`` as ``misfit_gradients`` takes them (from
    :meth:`~._equations.DiscreteEquations.compiled_arrays`)."""
    a = eq.compiled_arrays()
    return tuple(a[k] for k in ("meas_t", "zbar", "mask", "weights", "A", "gx_rows", "gx_cols",
                                "gu_rows", "gu_cols"))


def build_simulation_kernel(eq):
    """Generate, compile (or load from numba's cache) the simulation of ``eq``.

    Cached per process by the hash of the generated text; raises
    :class:`~pyomo_odeest.symbolic._codegen.NotCompilable` for expressions
    without a compiled form.
    """
    P = eq.problem            # the text once per problem and scheme family (a multistart
    text = P._numeric(       # builds a model per start)
        ("kernel_text", P.f_sym, P.g_sym, eq.needs_fdot, float(P.t0), float(P.T),
         tuple(np.asarray(P.switch_times, dtype=float).tolist())), lambda: kernel_text(eq))
    key = hashlib.sha1(text.encode()).hexdigest()[:20]
    with _LOCK:
        mod = _MODULES.get(key)
        if mod is not None:
            return SimulationKernel(mod, key, 0.0)
        t0 = time.perf_counter()
        path = os.path.join(cache_dir("kernels", env="PYOMO_ODEEST_KERNEL_CACHE"),
                            f"sim_{key}.py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(text)
            os.replace(tmp, path)
        name = f"_pyomo_odeest_kernel_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _warm_up(mod, eq)
        seconds = time.perf_counter() - t0
        COMPILE_SECONDS[key] = seconds
        _MODULES[key] = mod
        return SimulationKernel(mod, key, seconds)


def _warm_up(mod, eq):
    """Compile (or load) the module's functions for the argument types of the model,
    on a one-block trajectory (no step is taken, no measurement time)."""
    n = eq.n
    a = eq.compiled_arrays()
    W = np.zeros((1, n))
    SimulationKernel(mod, "", 0.0).jacobians(eq, W, np.zeros(eq.m), np.zeros(1))
    if hasattr(mod, "misfit_gradients"):
        t, zbar, mask, weights, A = _misfit_arrays(eq)[:5]
        mod.misfit_gradients(W, eq.meas_blk[:0], np.zeros(eq.m), t[:0], zbar[:0], mask[:0],
                             weights[:0], A[:0], *_misfit_arrays(eq)[5:], np.zeros((1, n)),
                             np.zeros(eq.m))
    mod.simulate(W, np.zeros(eq.m), np.zeros(1), np.zeros(1, dtype=np.int64),
                 np.zeros(1, dtype=np.bool_), np.zeros(2, dtype=np.int64), a["f_pt"][:0],
                 a["f_c"][:0], np.zeros(2, dtype=np.int64), a["d_pt"][:0], a["d_c"][:0],
                 a["fx_rows"], a["fx_cols"], a["fdx_rows"], a["fdx_cols"], 1e-13, 30)

