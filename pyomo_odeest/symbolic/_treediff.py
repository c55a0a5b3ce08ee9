"""First and second derivatives of a structure by forward differentiation of
its tree.

:func:`to_sympy` builds one sympy expression for a structure; differentiating
that expression twice with ``sympy.diff`` re-walks and re-simplifies the whole
expression for every slot and every pair of slots, which costs tenths of a
second for a rational right-hand side's second derivative ḟ (Enright's
schemes).  Here every node of the tree gets its own symbol ``w_n = op(children)``
and the chain rule is applied once per node, to *symbols*:

    dw/ds_k        = Σ_i ∂op/∂c_i · dc_i/ds_k,
    d²w/ds_k ds_l  = Σ_i ∂op/∂c_i · d²c_i/ds_k ds_l
                     + Σ_{i,j} ∂²op/∂c_i∂c_j · dc_i/ds_k · dc_j/ds_l,

with the local partials of each operator written out below (the unary
functions' are derived by sympy once per function).  Derivatives are carried
sparsely (only slots a node depends on) and every non-trivial result is a new
symbol, so each expression built is a few symbols deep; an expression bound
twice gets the same symbol (repeated sub-trees, such as a denominator shared
by several terms, are computed once).  The result is a list
of assignments in dependence order (the shape ``sympy.cse`` returns), ready for
the ``cse=`` argument of :func:`~pyomo_odeest.symbolic.lambdify`.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from ._structure import _UNARY, children, node_value

__all__ = ["TreeDerivatives", "differentiate_structure"]

_Z = sympy.Symbol("z")


@lru_cache(maxsize=None)
def _unary_partials(name):
    """``(g', g'')`` of the unary function ``name``, in the symbol ``z``."""
    d1 = sympy.diff(_UNARY[name](_Z), _Z)
    return d1, sympy.diff(d1, _Z)


class TreeDerivatives:
    """Assignments, value, gradient and Hessian of one structure.

    ``assignments``: ``[(symbol, expression)]`` in dependence order;
    ``value``: the expression of the root; ``d1``: ``{k: expr}`` over the
    differentiated slots with a non-zero derivative; ``d2``: ``{(k, l): expr}``,
    ``k <= l``, non-zero second derivatives.  Every expression refers to slot
    symbols and assignment symbols only.
    """

    def __init__(self):
        self.assignments = []
        self._bound = {}
        self._n = 0
        self.value = None
        self.d1 = {}
        self.d2 = {}

    def bind(self, expr):
        """A symbol for ``expr`` (``expr`` itself when it is atomic; the same
        symbol for an expression bound before, so repeated sub-trees and their
        derivatives are computed once)."""
        if expr.is_Atom:
            return expr
        s = self._bound.get(expr)
        if s is None:
            self._n += 1
            s = self._bound[expr] = sympy.Dummy(f"w{self._n}")
            self.assignments.append((s, expr))
        return s

    def cse_for(self, outputs):
        """A ``cse`` callable for ``lambdify`` returning the assignments that
        ``outputs`` need."""
        needed = set()
        for e in outputs:
            needed |= e.free_symbols
        keep = []
        for s, e in reversed(self.assignments):
            if s in needed:
                keep.append((s, e))
                needed |= e.free_symbols
        keep.reverse()
        return lambda exprs: (keep, exprs)


def _rule(s, args):
    """Value, local first partials ``[∂op/∂a_i]`` and local second partials
    ``{(i, j): ∂²op/∂a_i∂a_j}`` (``i <= j``) of node ``s`` with argument
    symbols ``args``."""
    op, value = s[0], node_value(s, args)
    if op == "+":
        return value, [sympy.S.One] * len(args), {}
    if op == "*":
        a, b = args
        return value, [b, a], {(0, 1): sympy.S.One}
    if op == "/":
        a, b = args
        return value, [1 / b, -a / b**2], {(0, 1): -1 / b**2, (1, 1): 2 * a / b**3}
    if op == "neg":
        return value, [sympy.S.NegativeOne], {}
    if op == "abs":
        # |a|'' is a Dirac delta, zero wherever |a| is differentiable
        return value, [sympy.sign(args[0])], {}
    if op == "^k":
        a, k = args[0], sympy.sympify(s[2])
        return value, [k * a ** (k - 1)], {(0, 0): k * (k - 1) * a ** (k - 2)}
    if op == "^":
        a, b = args
        la = sympy.log(a)
        return value, [b * a ** (b - 1), value * la], {
            (0, 0): b * (b - 1) * a ** (b - 2), (0, 1): a ** (b - 1) * (1 + b * la),
            (1, 1): value * la**2}
    d1, d2 = _unary_partials(s[1])                      # op == "f"
    return value, [d1.subs(_Z, args[0])], {(0, 0): d2.subs(_Z, args[0])}


def differentiate_structure(structure, symbols, wrt):
    """Value, first and second derivatives of ``structure`` (see
    :class:`TreeDerivatives`).

    ``symbols`` are consumed in leaf order (as by :func:`to_sympy`; a symbol
    may occur several times); ``wrt``: the symbols to differentiate by.
    """
    out = TreeDerivatives()
    it = iter(symbols)
    wrt = {s: i for i, s in enumerate(wrt)}
    zero = sympy.S.Zero

    def plain(s):
        """The sympy value of a sub-tree that is not differentiated (a condition)."""
        if s == "V" or s == "C":
            return next(it)
        return node_value(s, [plain(c) for c in children(s)])

    def node(s):
        """``(value symbol, {k: d1}, {(k, l): d2})`` of a sub-tree."""
        if s == "V" or s == "C":
            v = next(it)
            k = wrt.get(v)
            return v, ({} if k is None else {k: sympy.S.One}), {}
        if s[0] == "if":
            # the condition is not differentiated (its derivative is zero wherever
            # the branch is defined); each branch enters with weight 1 where it holds
            cond = plain(s[1])
            kids = [node(s[2]), node(s[3])]
            value = sympy.Piecewise((kids[0][0], cond), (kids[1][0], True))
            g1 = [sympy.Piecewise((sympy.S.One, cond), (zero, True)),
                  sympy.Piecewise((zero, cond), (sympy.S.One, True))]
            g2 = {}
        else:
            kids = [node(c) for c in children(s)]
            value, g1, g2 = _rule(s, [c[0] for c in kids])
        w = out.bind(value)
        if all(not c[1] for c in kids):
            return w, {}, {}
        if w is not value:           # exp' = exp, (a^b)_b = a^b log a: reuse the node
            g1 = [g.xreplace({value: w}) for g in g1]
            g2 = {ij: g.xreplace({value: w}) for ij, g in g2.items()}
        g1 = [out.bind(g) if not g.is_Atom and c[1] else g for g, c in zip(g1, kids)]
        grad, hess = {}, {}
        for gi, c in zip(g1, kids):
            for k, t in c[1].items():
                grad[k] = grad.get(k, zero) + gi * t
            for kl, t in c[2].items():
                hess[kl] = hess.get(kl, zero) + gi * t
        for (i, j), gij in g2.items():
            if gij == 0:
                continue
            ti, tj = kids[i][1], kids[j][1]
            if not ti or not tj:
                continue
            gij = out.bind(gij)
            for k, a in ti.items():
                for l, b in tj.items():
                    if i == j and l < k:
                        continue
                    term = gij * a * b
                    if i != j and k == l:
                        term = 2 * term
                    key = (k, l) if k <= l else (l, k)
                    hess[key] = hess.get(key, zero) + term
        grad = {k: out.bind(e) for k, e in grad.items() if e != 0}
        hess = {kl: out.bind(e) for kl, e in hess.items() if e != 0}
        return w, grad, hess

    out.value, out.d1, out.d2 = node(structure)
    return out
