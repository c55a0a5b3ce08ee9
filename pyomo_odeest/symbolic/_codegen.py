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

import sympy
from sympy.core.function import AppliedUndef
from sympy.printing.pycode import PythonCodePrinter

__all__ = ["NotCompilable", "kernel_source"]


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

    def _print_Half(self, expr):
        return "0.5"


def kernel_source(name, exprs, x_sym, u_sym, t_sym):
    """Source of ``def name(x, u, t, out)`` writing ``out[i] = exprs[i](x, u, t)``.

    Raises :class:`NotCompilable` when an expression holds an applied function
    without a printable implementation (inputs given as data).
    """
    exprs = [sympy.sympify(e) for e in exprs]
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
    for i, s in enumerate(xs):
        if s in used:
            lines.append(f"    _x{i} = x[{i}]")
    for i, s in enumerate(us):
        if s in used:
            lines.append(f"    _u{i} = u[{i}]")
    if tt in used:
        lines.append("    _t = t")
    for sym, r in replacements:
        lines.append(f"    {sym} = {text(r)}")
    for i, e in enumerate(reduced):
        lines.append(f"    out[{i}] = {text(e)}")
    lines.append("    return")
    return "\n".join(lines) + "\n"
