"""Numeric code generated from sympy in a namespace no user name enters.

``sympy.lambdify`` prints each symbol under its own name into Python source
that also names numpy's functions (``array``, ``exp``, ``select``, ...) and
the common subexpressions of ``cse``: a parameter called ``array`` shadowed
numpy's ``array`` in the generated code.  :func:`lambdify` therefore renames
every symbol to ``_s0, _s1, ...`` and every undefined function (inputs, steady
states) to ``_f0, _f1, ...`` before printing, so the generated code holds only
names the package chose, whatever the user's names are.  Every numeric function
of the package is generated through it.
"""
from __future__ import annotations

import sympy
from sympy.core.function import AppliedUndef
from sympy.matrices import MatrixBase
from sympy.utilities.lambdify import implemented_function

__all__ = ["lambdify"]


class _Renamer:
    """One consistent renaming of symbols and undefined functions."""

    def __init__(self):
        self.symbols = {}
        self.functions = {}

    def symbol(self, s):
        new = self.symbols.get(s)
        if new is None:
            new = self.symbols[s] = sympy.Symbol(f"_s{len(self.symbols)}", **s.assumptions0)
        return new

    def function(self, cls):
        new = self.functions.get(cls)
        if new is None:
            name = f"_f{len(self.functions)}"
            imp = getattr(cls, "_imp_", None)
            new = self.functions[cls] = (implemented_function(name, imp) if imp is not None
                                         else sympy.Function(name))
        return new

    def expr(self, e):
        if isinstance(e, MatrixBase):
            return e.applyfunc(self.expr)
        if isinstance(e, (list, tuple)):
            return type(e)(self.expr(a) for a in e)
        if not isinstance(e, sympy.Basic):
            return e
        if isinstance(e, sympy.Symbol):
            return self.symbol(e)
        e = e.xreplace({s: self.symbol(s) for s in e.free_symbols if isinstance(s, sympy.Symbol)})
        if e.atoms(AppliedUndef):
            e = e.replace(lambda a: isinstance(a, AppliedUndef),
                          lambda a: self.function(type(a))(*a.args))
        return e


def lambdify(args, expr, modules="numpy", cse=False):
    """``sympy.lambdify(args, expr, modules, cse=cse)`` on renamed symbols.

    ``args`` may be nested (tuples of symbols, as ``sympy.lambdify`` takes
    them); ``expr`` an expression, a matrix or (nested) lists of them; ``cse``
    False, True or a callable returning ``(assignments, outputs)`` (its
    assignments are renamed with the same map).
    """
    ren = _Renamer()
    new_args = ren.expr(tuple(args) if isinstance(args, list) else args)
    new_expr = ren.expr(expr)
    if callable(cse):
        inner = cse

        def cse(exprs):
            assignments, outputs = inner(exprs)
            return [(ren.expr(s), ren.expr(e)) for s, e in assignments], outputs
    return sympy.lambdify(new_args, new_expr, modules=modules, cse=cse)
