"""Pyomo expressions as (structure, leaves) pairs, and structures as sympy.

A Pyomo expression is split into

* a *structure*: a hashable nested tuple that records the operators and the
  kind of every leaf (``'V'`` a variable reference, ``'C'`` a constant) but not
  which variable or which number sits there, and
* a list of *leaves* in walk order.

Expressions with equal structures differ only in their leaves, so they can be
evaluated together: the structure is turned into a sympy expression in slot
symbols ``s0, s1, ...`` once, differentiated once, lambdified once, and
evaluated on arrays that hold, for every row, the value of each slot.  Both the
rows of a templatized indexed constraint (one template, many index values) and
unrelated scalar constraints that happen to share a shape are handled this way.
"""
from __future__ import annotations

import sympy
from pyomo.common.numeric_types import native_numeric_types
from pyomo.core.base.var import Var
from pyomo.core.expr import numeric_expr as ne
from pyomo.core.expr.template_expr import GetItemExpression, IndexTemplate
from pyomo.environ import value

__all__ = ["UnsupportedExpressionError", "walk", "to_sympy"]


class UnsupportedExpressionError(TypeError):
    """An expression uses something the evaluator cannot differentiate."""


_UNARY = {
    "exp": sympy.exp,
    "log": sympy.log,
    "log10": lambda a: sympy.log(a) / sympy.log(10),
    "sqrt": sympy.sqrt,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "asin": sympy.asin,
    "acos": sympy.acos,
    "atan": sympy.atan,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "tanh": sympy.tanh,
    "asinh": sympy.asinh,
    "acosh": sympy.acosh,
    "atanh": sympy.atanh,
}

_SUM_TYPES = (ne.SumExpression, ne.LinearExpression)
_PROD_TYPES = (ne.ProductExpression, ne.MonomialTermExpression)


def walk(node, leaves, template=False):
    """Return the structure of ``node`` and append its leaves to ``leaves``.

    Leaves are tuples ``(kind, payload)``:

    ``('V', VarData)``       a scalar variable (free or fixed),
    ``('C', float)``         a constant,
    ``('G', GetItemExpression)`` a templated component access ``x[i+1]``,
    ``('T', IndexTemplate)`` the value of a template index used as a number.

    With ``template=False`` every sub-expression that cannot vary (Params,
    fixed-value sub-trees) is folded to one constant leaf.  With
    ``template=True`` nothing is folded, because sub-trees such as ``p[i]``
    look constant but depend on the row.
    """
    cls = node.__class__
    if cls in native_numeric_types:
        leaves.append(("C", float(node)))
        return "C"
    if not node.is_expression_type():
        if isinstance(node, IndexTemplate):
            leaves.append(("T", node))
            return "C"
        if node.is_variable_type():
            leaves.append(("V", node))
            return "V"
        if node.is_numeric_type():
            leaves.append(("C", float(value(node))))
            return "C"
        raise UnsupportedExpressionError(
            f"unsupported leaf {node!r} of type {type(node).__name__}"
        )
    if node.is_named_expression_type():
        return walk(node.expr, leaves, template)
    if isinstance(node, GetItemExpression):
        base = node.args[0]
        leaves.append(("G", node))
        return "V" if base.ctype is Var else "C"
    if not template and not node.is_potentially_variable():
        leaves.append(("C", float(value(node))))
        return "C"
    if isinstance(node, _SUM_TYPES):
        return ("+",) + tuple(walk(a, leaves, template) for a in node.args)
    if isinstance(node, _PROD_TYPES):
        a, b = node.args
        return ("*", walk(a, leaves, template), walk(b, leaves, template))
    if isinstance(node, ne.DivisionExpression):
        a, b = node.args
        return ("/", walk(a, leaves, template), walk(b, leaves, template))
    if isinstance(node, ne.PowExpression):
        base, expo = node.args
        sb = walk(base, leaves, template)
        if expo.__class__ in native_numeric_types:
            e = float(expo)
            return ("^k", sb, int(e) if e.is_integer() else e)
        return ("^", sb, walk(expo, leaves, template))
    if isinstance(node, ne.NegationExpression):
        return ("neg", walk(node.args[0], leaves, template))
    if isinstance(node, ne.AbsExpression):
        return ("abs", walk(node.args[0], leaves, template))
    if isinstance(node, ne.UnaryFunctionExpression):
        name = node.getname()
        if name not in _UNARY:
            raise UnsupportedExpressionError(
                f"function '{name}' is not differentiable or not supported"
            )
        return ("f", name, walk(node.args[0], leaves, template))
    if isinstance(node, ne.ExternalFunctionExpression):
        raise UnsupportedExpressionError(
            f"external function '{node.getname()}' has no symbolic form; "
            "ExternalFunction components are not supported"
        )
    raise UnsupportedExpressionError(
        f"expression type {type(node).__name__} is not supported ({node})"
    )


def children(structure):
    """The sub-trees of a structure node (the exponent of ``^k`` and the name
    of a unary function are not sub-trees)."""
    op = structure[0]
    if op == "^k":
        return (structure[1],)
    if op == "f":
        return (structure[2],)
    return structure[1:]


def node_value(structure, args):
    """The sympy value of a structure node whose sub-trees evaluate to ``args``."""
    op = structure[0]
    if op == "+":
        return sympy.Add(*args)
    if op == "*":
        return args[0] * args[1]
    if op == "/":
        return args[0] / args[1]
    if op == "^k":
        return args[0] ** sympy.sympify(structure[2])
    if op == "^":
        return args[0] ** args[1]
    if op == "neg":
        return -args[0]
    if op == "abs":
        return sympy.Abs(args[0])
    if op == "f":
        return _UNARY[structure[1]](args[0])
    raise AssertionError(f"unknown structure node {op!r}")


def to_sympy(structure, symbols):
    """Build the sympy expression of ``structure`` with one symbol per leaf.

    ``symbols`` is consumed in leaf order (the order of :func:`walk`).
    """
    it = iter(symbols)

    def build(s):
        if s == "V" or s == "C":
            return next(it)
        return node_value(s, [build(c) for c in children(s)])

    return build(structure)
