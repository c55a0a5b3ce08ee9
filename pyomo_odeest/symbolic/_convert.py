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

__all__ = ["pyomo_to_sympy", "sympy_to_pyomo", "unrenderable"]


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

    def branch(cond, then, other):
        """``then`` where the sympy condition ``cond`` holds, else ``other`` (Expr_if on
        one inequality each; 'and', 'or', 'not' and equalities as nested Expr_if)."""
        if cond == sympy.true:
            return then
        if cond == sympy.false:
            return other
        if isinstance(cond, sympy.And):
            first, rest = cond.args[0], sympy.And(*cond.args[1:])
            return branch(first, branch(rest, then, other), other)
        if isinstance(cond, sympy.Or):
            first, rest = cond.args[0], sympy.Or(*cond.args[1:])
            return branch(first, then, branch(rest, then, other))
        if isinstance(cond, sympy.Not):
            return branch(cond.args[0], other, then)
        if isinstance(cond, sympy.Equality):
            a, b = cond.args
            return branch(sympy.And(sympy.Le(a, b), sympy.Ge(a, b)), then, other)
        if isinstance(cond, sympy.Unequality):
            return branch(sympy.Eq(*cond.args), other, then)
        if isinstance(cond, (sympy.StrictLessThan, sympy.StrictGreaterThan,
                             sympy.LessThan, sympy.GreaterThan)):
            lo, hi = ((cond.lhs, cond.rhs) if isinstance(cond, (sympy.StrictLessThan,
                                                                sympy.LessThan))
                      else (cond.rhs, cond.lhs))
            strict = isinstance(cond, (sympy.StrictLessThan, sympy.StrictGreaterThan))
            a, b = conv(lo), conv(hi)
            return pyo.Expr_if((a < b) if strict else (a <= b), then, other)
        raise UnsupportedExpressionError(f"cannot render the condition {cond} in Pyomo")

    def conv(e):
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e.is_Symbol:
            r = objects[e]
        elif e.is_Integer:
            r = int(e)
        elif e.is_Number or isinstance(e, sympy.NumberSymbol):
            r = float(e)                # numbers and the constants pi, E, ...
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
        elif isinstance(e, sympy.Piecewise):
            r = conv(e.args[-1][0]) if e.args[-1][1] == sympy.true else float("nan")
            for val, cond in reversed(e.args[:-1] if e.args[-1][1] == sympy.true else e.args):
                r = branch(cond, conv(val), r)
        elif isinstance(e, (sympy.Max, sympy.Min)):
            r = conv(e.args[0])
            for a in e.args[1:]:
                ca = conv(a)
                r = (pyo.Expr_if(r >= ca, r, ca) if isinstance(e, sympy.Max)
                     else pyo.Expr_if(r <= ca, r, ca))
        elif not e.free_symbols and e.is_number:
            r = float(e)
        else:
            raise UnsupportedExpressionError(f"cannot render {e.func} in Pyomo")
        memo[e] = r
        return r

    return conv(sympy.sympify(expr))


_CONDITIONS = (sympy.And, sympy.Or, sympy.Not, sympy.Equality, sympy.Unequality,
               sympy.StrictLessThan, sympy.StrictGreaterThan, sympy.LessThan, sympy.GreaterThan)


def unrenderable(expr):
    """The first sub-expression of ``expr`` that :func:`sympy_to_pyomo` cannot render
    (None when it renders)."""
    seen = set()

    def find(e, condition=False):
        if e in seen:
            return None
        seen.add(e)
        if condition:
            if e in (sympy.true, sympy.false):
                return None
            if not isinstance(e, _CONDITIONS):
                return e
        elif e.is_Symbol or e.is_Number or isinstance(e, sympy.NumberSymbol):
            return None
        elif not (e.is_Add or e.is_Mul or e.is_Pow or isinstance(e, (
                sympy.Abs, sympy.Piecewise, sympy.Max, sympy.Min)) or e.func in _PYO_FUNC
                  or (not e.free_symbols and e.is_number)):
            return e
        if isinstance(e, sympy.Piecewise):
            for val, cond in e.args:
                bad = find(val) or find(cond, condition=True)
                if bad is not None:
                    return bad
            return None
        for a in e.args:
            bad = find(a, condition=isinstance(e, (sympy.And, sympy.Or, sympy.Not)))
            if bad is not None:
                return bad
        return None

    return find(sympy.sympify(expr))
