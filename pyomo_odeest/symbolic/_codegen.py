"""Python source of scalar point kernels generated from the problem's sympy expressions.

The compiled engine of the discrete model
(:mod:`pyomo_odeest.discretization.discrete`) jit-compiles these kernels with
numba: ``def name(x, u, t, out)`` writes the values of the expressions at one
point ``(x, u, t)`` into ``out`` (common subexpressions eliminated once, as
:func:`sympy.lambdify` does for the numpy path).  The expressions are the same
objects the numpy path lambdifies (one source of truth); only the printer
differs: ``math`` functions on floats and ``if``/``else`` for ``Piecewise``.
"""
from __future__ import annotations

import numpy as np
import sympy
from sympy.core.function import AppliedUndef
from sympy.printing.pycode import PythonCodePrinter

__all__ = ["NotCompilable", "kernel_source", "input_source"]


class NotCompilable(ValueError):
    """The expressions use a function with no compiled implementation (e.g. an
    input given as data, evaluated by a Python callable)."""


class _Printer(PythonCodePrinter):
    """``math.*`` on floats; ``Abs`` as ``abs``; rationals as float literals."""

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "inline": True,
                          "allow_unknown_functions": False, "strict": True})

    def _print_Rational(self, expr):
        return repr(float(expr.p) / float(expr.q))


def kernel_source(name, exprs, x_sym, u_sym, t_sym, inputs=None):
    """Source of ``def name(x, u, t, out)`` writing ``out[i] = exprs[i](x, u, t)``.

    ``inputs``: a mapping input application (``F(t)``) -> name of a compiled
    function of ``t`` defined beside the kernel (:func:`input_source`), called
    once per evaluation.  Raises :class:`NotCompilable` when an expression holds
    another applied function without a printable implementation.
    """
    inputs = dict(inputs or {})
    marks = {app: sympy.Dummy(f"in{k}") for k, app in enumerate(inputs)}
    exprs = [sympy.sympify(e).xreplace(marks) for e in exprs]
    for e in exprs:
        undef = e.atoms(AppliedUndef)
        if undef:
            raise NotCompilable(f"{name}: functions {sorted(map(str, undef))} have no compiled form")
    xs = [sympy.Dummy(f"x{i}") for i in range(len(x_sym))]
    us = [sympy.Dummy(f"u{i}") for i in range(len(u_sym))]
    tt = sympy.Dummy("t")
    sub = dict(zip(x_sym, xs))
    sub.update(zip(u_sym, us))
    sub[t_sym] = tt
    exprs = [e.xreplace(sub) for e in exprs]
    replacements, reduced = sympy.cse(exprs, symbols=sympy.numbered_symbols("_c"))
    names = {s: f"_x{i}" for i, s in enumerate(xs)}
    names.update({s: f"_u{i}" for i, s in enumerate(us)})
    names[tt] = "_t"
    names.update({m: f"_in{k}" for k, m in enumerate(marks.values())})
    pr = _Printer()

    def text(e):
        e = e.xreplace({s: sympy.Symbol(nm) for s, nm in names.items()})
        try:
            return pr.doprint(e)
        except Exception as err:          # sympy raises PrintMethodNotImplementedError etc.
            raise NotCompilable(f"{name}: {err}") from None

    lines = [f"def {name}(x, u, t, out):"]
    used = set().union(*[e.free_symbols for e in exprs]) if exprs else set()
    used |= {s for _, r in replacements for s in r.free_symbols}
    for v, syms in (("x", xs), ("u", us)):
        lines += [f"    _{v}{i} = {v}[{i}]" for i, s in enumerate(syms) if s in used]
    if tt in used or any(m in used for m in marks.values()):
        lines.append("    _t = t")
    for k, (app, m) in enumerate(marks.items()):
        if m in used:
            lines.append(f"    _in{k} = {inputs[app]}(_t)")
    for sym, r in replacements:
        lines.append(f"    {sym} = {text(r)}")
    for i, e in enumerate(reduced):
        lines.append(f"    out[{i}] = {text(e)}")
    lines.append("    return")
    return "\n".join(lines) + "\n"


def input_source(name, inner, lo, width, coefficients, decorator=""):
    """Source of ``def name(t)``: an input given as data, as the cubic
    :math:`\\sum_m c_{im} s^m`, :math:`s = (t - lo_i)/width_i`, of its piece
    ``i = searchsorted(inner, t, side='right')`` (right-continuous), with the
    pieces and coefficients of :func:`~pyomo_odeest.problem._inputs.input_pieces`
    and :func:`~pyomo_odeest.problem._inputs.input_coefficients` written into the
    module as constant arrays (exact round trip of every float); ``decorator``: a
    line put above the ``def``."""
    def arr(a):
        return "np.array([" + ", ".join(repr(float(v)) for v in np.ravel(a)) + "])"
    C = np.asarray(coefficients, dtype=float).reshape(-1, 4)
    return (f"{name}_inner = {arr(inner) if len(inner) else 'np.zeros(0)'}\n"
            f"{name}_lo = {arr(lo)}\n{name}_w = {arr(width)}\n"
            f"{name}_c = {arr(C)}.reshape({len(C)}, 4)\n\n\n"
            + (f"{decorator}\n" if decorator else "") +
            f"def {name}(t):\n"
            f"    i = np.searchsorted({name}_inner, t, side='right')\n"
            f"    s = (t - {name}_lo[i]) / {name}_w[i]\n"
            f"    return {name}_c[i, 0] + s * ({name}_c[i, 1] + s * ({name}_c[i, 2] "
            f"+ s * {name}_c[i, 3]))\n")
