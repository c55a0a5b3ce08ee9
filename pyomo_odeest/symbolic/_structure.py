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
from pyomo.core.expr import relational_expr as rel
from pyomo.core.expr.template_expr import GetItemExpression, IndexTemplate
from pyomo.environ import value

__all__ = ["UnsupportedExpressionError", "walk", "to_sympy"]


class UnsupportedExpressionError(TypeError):
    """An expression uses something the evaluator cannot differentiate."""


_UNARY = {name: getattr(sympy, name) for name in (
    "exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh")}
_UNARY["log10"] = lambda a: sympy.log(a) / sympy.log(10)

#: n-ary operators whose structure is ``(op, *sub-trees of the arguments)``
#: (AbsExpression before the unary functions it derives from)
_OPERATORS = (((ne.SumExpression, ne.LinearExpression), "+"),
              ((ne.ProductExpression, ne.MonomialTermExpression), "*"),
              (ne.DivisionExpression, "/"), (ne.NegationExpression, "neg"),
              (ne.AbsExpression, "abs"))


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
    if isinstance(node, ne.Expr_ifExpression):
        cond, then, other = node.args
        if not template and (cond.__class__ in native_numeric_types
                             or not cond.is_potentially_variable()):
            # a condition that cannot vary selects its branch once
            return walk(then if value(cond) else other, leaves, template)
        return ("if", _condition(cond, leaves, template), walk(then, leaves, template),
                walk(other, leaves, template))
    if not template and not node.is_potentially_variable():
        leaves.append(("C", float(value(node))))
        return "C"
    for types, op in _OPERATORS:
        if isinstance(node, types):
            return (op,) + tuple(walk(a, leaves, template) for a in node.args)
    if isinstance(node, ne.PowExpression):
        base, expo = node.args
        sb = walk(base, leaves, template)
        if expo.__class__ in native_numeric_types:
            e = float(expo)
            return ("^k", sb, int(e) if e.is_integer() else e)
        return ("^", sb, walk(expo, leaves, template))
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


def _condition(node, leaves, template):
    """The structure of the condition of an ``Expr_if``: ``('<', a, b)`` or
    ``('<=', a, b)`` (``a < b``, ``a <= b``)."""
    if isinstance(node, rel.InequalityExpression) and node.nargs() == 2:
        return (("<" if node.strict else "<="),) + tuple(walk(a, leaves, template)
                                                         for a in node.args)
    raise UnsupportedExpressionError(
        f"the condition {node} of an Expr_if is not supported (supported: one inequality "
        "a < b or a <= b; nest Expr_if for 'and' and 'or')")


def children(structure):
    """The sub-trees of a structure node (the exponent of ``^k`` and the name
    of a unary function are not sub-trees)."""
    op = structure[0]
    if op == "^k":
        return (structure[1],)
    if op == "f":
        return (structure[2],)
    return structure[1:]


_NODE_VALUE = {
    "+": lambda s, a: sympy.Add(*a),
    "*": lambda s, a: a[0] * a[1],
    "/": lambda s, a: a[0] / a[1],
    "^k": lambda s, a: a[0] ** sympy.sympify(s[2]),
    "^": lambda s, a: a[0] ** a[1],
    "neg": lambda s, a: -a[0],
    "abs": lambda s, a: sympy.Abs(a[0]),
    "f": lambda s, a: _UNARY[s[1]](a[0]),
    "if": lambda s, a: sympy.Piecewise((a[1], a[0]), (a[2], True)),
    "<": lambda s, a: sympy.StrictLessThan(a[0], a[1]),
    "<=": lambda s, a: sympy.LessThan(a[0], a[1]),
}


def node_value(structure, args):
    """The sympy value of a structure node whose sub-trees evaluate to ``args``."""
    rule = _NODE_VALUE.get(structure[0])
    if rule is None:
        raise AssertionError(f"unknown structure node {structure[0]!r}")
    return rule(structure, args)


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
