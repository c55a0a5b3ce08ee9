"""Numeric code generated from sympy in a namespace no user name enters.

``sympy.lambdify`` prints each symbol under its own name into Python source
that also names numpy's functions (``array``, ``exp``, ``select``, ...) and
the common subexpressions of ``cse``: a parameter called ``array`` shadowed
numpy's ``array`` in the generated code.  :func:`lambdify` therefore renames
every symbol to ``_s0, _s1, ...`` and every undefined function (inputs, steady
states) to ``_f0, _f1, ...`` before printing, so the generated code holds only
names the package chose, whatever the user's names are.  An argument that is a
vector of symbols (the states, the parameters) is one name ``_v0, _v1, ...`` of
the generated code, whose first lines take the entries the expressions use
(``_s3 = _v1[3]``): the source neither lists nor unpacks the symbols no expression
uses (Isensee's PEtab problem has 907 parameters, a condition's functions use a
few tens of them), so its generation and its calls do not grow with the vector's
length.  Every numeric function of the package is generated through it.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re

import sympy
from sympy.core.function import AppliedUndef
from sympy.matrices import MatrixBase
from sympy.utilities.lambdify import implemented_function

__all__ = ["lambdify", "generated_code", "from_code"]


class _Renamer:
    """One consistent renaming of symbols and undefined functions."""

    def __init__(self):
        self.symbols = {}
        self.functions = {}
        self.names = 0                  # symbol names given (or reserved for vector entries)
        self.vectors = 0
        #: vector entries: symbol -> (indexed name, position, number of its new name)
        self.entries = {}
        #: assignments (new symbol, indexed entry) of the entries used, in order of use
        self.unpack = []

    def vector(self, syms):
        """A vector argument: one indexed name; an entry used by an expression becomes a
        renamed symbol assigned from it (:attr:`unpack`)."""
        base = sympy.IndexedBase(f"_v{self.vectors}")
        self.vectors += 1
        for i, s in enumerate(syms):
            if s not in self.symbols and s not in self.entries:
                self.entries[s] = (base, i, self.names + i)
        self.names += len(syms)
        return base

    def args(self, args):
        """The renamed arguments (a tuple of them): each tuple of symbols inside as one
        indexed name, the rest renamed."""
        return tuple(self._arg(a) for a in args)

    def _arg(self, a):
        if isinstance(a, (list, tuple)):
            if a and all(isinstance(s, sympy.Symbol) for s in a):
                return self.vector(a)
            return tuple(self._arg(b) for b in a)
        return self.expr(a)

    def symbol(self, s):
        new = self.symbols.get(s)
        if new is None:
            entry = self.entries.get(s)
            number = self.names if entry is None else entry[2]
            new = self.symbols[s] = sympy.Symbol(f"_s{number}", **s.assumptions0)
            if entry is None:
                self.names += 1
            else:
                self.unpack.append((new, entry[0][entry[1]]))
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

    ``args`` is a tuple of arguments, each a symbol or a (nested) tuple of them, as
    ``sympy.lambdify`` takes them; a tuple of symbols is passed as one sequence or
    array and indexed along its first axis.  ``expr`` is an expression, a matrix or
    (nested) lists of them; ``cse`` False, True or a callable returning
    ``(assignments, outputs)`` (its assignments are renamed with the same map).
    """
    ren = _Renamer()
    new_args = ren.args(args if isinstance(args, (list, tuple)) else (args,))
    new_expr = ren.expr(expr)

    def assignments(exprs):
        """The used vector entries, then the common subexpressions (if ``cse``)."""
        if callable(cse):
            pairs, outputs = cse(exprs)
            pairs = [(ren.expr(s), ren.expr(e)) for s, e in pairs]
        elif cse:
            pairs, outputs = sympy.cse(exprs, list=False)
        else:
            pairs, outputs = [], exprs
        return ren.unpack + pairs, outputs
    return sympy.lambdify(new_args, new_expr, modules=modules, cse=assignments)


def generated_code(fn) -> dict:
    """The code of a function made by :func:`lambdify` from expressions that call no
    undefined function, as JSON-serializable data: its source and the modules of the
    names it uses beyond numpy's (``{'reduce': '_functools'}``).  :func:`from_code`
    makes the function again."""
    base = _namespace()
    imports = {}
    for name in fn.__code__.co_names:
        if name in fn.__globals__ and name not in base:
            obj = fn.__globals__[name]
            module = getattr(obj, "__module__", None)
            if module is None or getattr(importlib.import_module(module), name, None) is not obj:
                raise ValueError(f"generated code uses {name!r}, which is not importable")
            imports[name] = module
    return {"source": inspect.getsource(fn), "imports": imports}


@functools.lru_cache(maxsize=None)
def _namespace():
    """The namespace ``sympy.lambdify`` runs numpy code in (before the imports of the code
    it prints)."""
    return sympy.lambdify((), sympy.Integer(0), modules="numpy").__globals__


def from_code(code):
    """The function of :func:`generated_code`'s ``code``."""
    source = code["source"]
    name = re.match(r"\s*def (\w+)\(", source).group(1)
    ns = dict(_namespace())
    for k, module in code["imports"].items():
        ns[k] = getattr(importlib.import_module(module), k)
    exec(compile(source, f"<generated {name}>", "exec"), ns)
    return ns[name]
