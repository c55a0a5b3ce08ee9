"""Conversions between Pyomo expressions and sympy, used by the problem layer.

The user writes the right-hand side ``f(x, u, t)``, the observation ``g`` and
the initial state ``l(u)`` as ordinary Python on Pyomo objects.  They are
called once on scratch Pyomo variables, converted to sympy (the single
symbolic source of truth), differentiated there (for instance
``D_x f · f + ∂f/∂t`` for Enright's scheme), and rendered back into Pyomo
expressions on the block's variables, or lambdified for the simulators.
"""
from __future__ import annotations

import operator
from functools import reduce

import sympy
import pyomo.environ as pyo

from ._structure import _UNARY, UnsupportedExpressionError, to_sympy, walk

__all__ = ["pyomo_to_sympy", "sympy_to_pyomo"]


def _number(v):
    if float(v).is_integer() and abs(v) < 2**53:
        return sympy.Integer(int(v))
    return sympy.Float(v, 17)


def pyomo_to_sympy(expr, symbol_of):
    """Sympy form of a Pyomo expression.

    ``symbol_of`` maps ``id(VarData)`` to a sympy symbol.  Every variable of
    ``expr`` must be in the map; Params and numbers become sympy numbers.
    """
    if isinstance(expr, (int, float)):
        return _number(expr)
    leaves = []
    s = walk(expr, leaves)
    syms = []
    for kind, payload in leaves:
        if kind == "V":
            sym = symbol_of.get(id(payload))
            if sym is None:
                raise UnsupportedExpressionError(
                    f"expression uses '{payload.name}', which is not a state, "
                    "parameter or time")
            syms.append(sym)
        elif kind == "C":
            syms.append(_number(payload))
        else:  # pragma: no cover - only on template expressions
            raise UnsupportedExpressionError("templated expression")
    return to_sympy(s, syms)


#: sympy function -> Pyomo function (``sqrt`` and ``log10`` have no sympy class)
_PYO_FUNC = {getattr(sympy, n): getattr(pyo, n) for n in _UNARY if n not in ("sqrt", "log10")}


def sympy_to_pyomo(expr, objects):
    """Pyomo expression of a sympy expression.

    ``objects`` maps sympy symbols to Pyomo objects (variables, templated
    component accesses such as ``b.x[i-1, 'x1']``, Params or numbers).
    """
    memo = {}

    def conv(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Symbol:
            r = objects[e]
        elif e.is_Integer:
            r = int(e)
        elif e.is_Number:
            r = float(e)
        elif e.is_Add:
            r = reduce(operator.add, [conv(a) for a in e.args])
        elif e.is_Mul:
            num, den = [], []
            for a in e.args:
                if a.is_Pow and a.exp.is_Number and a.exp < 0:
                    den.append(conv(a.base ** (-a.exp)))
                elif a.is_Rational and not a.is_Integer and a.p == 1:
                    den.append(int(a.q))
                else:
                    num.append(conv(a))
            r = reduce(operator.truediv, den, reduce(operator.mul, num) if num else 1)
        elif e.is_Pow:
            b, x = e.args
            if x == -1:
                r = 1 / conv(b)
            elif x == sympy.Rational(1, 2):
                r = pyo.sqrt(conv(b))
            else:
                r = conv(b) ** conv(x)
        elif isinstance(e, sympy.Abs):
            r = abs(conv(e.args[0]))
        elif e.func in _PYO_FUNC:
            r = _PYO_FUNC[e.func](conv(e.args[0]))
        else:
            raise UnsupportedExpressionError(f"cannot render {e.func} in Pyomo")
        memo[e] = r
        return r

    return conv(sympy.sympify(expr))
