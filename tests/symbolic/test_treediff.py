"""Forward differentiation of structures against sympy.diff of the whole
expression, on random trees of every operator."""
import mpmath
import numpy as np
import pytest
import sympy

from pyomo_odeest.symbolic import differentiate_structure, to_sympy
from pyomo_odeest.symbolic._structure import _UNARY

_SAFE_UNARY = ["exp", "log", "log10", "sqrt", "sin", "cos", "tan", "atan", "sinh", "cosh",
               "tanh", "asinh"]


def _random_structure(rng, depth):
    if depth == 0 or rng.random() < 0.2:
        return "V" if rng.random() < 0.7 else "C"
    op = rng.choice(["+", "*", "/", "^k", "^", "neg", "abs", "f"])
    sub = lambda: _random_structure(rng, depth - 1)      # noqa: E731
    if op == "+":
        return ("+",) + tuple(sub() for _ in range(int(rng.integers(2, 5))))
    if op in ("*", "/"):
        return (op, sub(), sub())
    if op == "^k":
        k = [2, 3, -1, 0.5, 1.5][int(rng.integers(5))]
        return ("^k", sub() if float(k).is_integer() else ("f", "exp", sub()), k)
    if op == "^":
        return ("^", ("f", "exp", sub()), sub())       # positive base
    if op in ("neg", "abs"):
        return (op, sub())
    name = _SAFE_UNARY[int(rng.integers(len(_SAFE_UNARY)))]
    if name in ("log", "log10", "sqrt"):
        return ("f", name, ("f", "exp", sub()))         # positive argument
    if name in ("exp", "sinh", "cosh", "tan"):
        return ("f", name, ("f", "sin", sub()))         # bounded argument
    return ("f", name, sub())


def _kinds(s, out):
    if s in ("V", "C"):
        out.append(s)
    elif s[0] == "f":
        _kinds(s[2], out)
    elif s[0] == "^k":
        _kinds(s[1], out)
    else:
        for c in s[1:]:
            _kinds(c, out)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_tree_derivatives_match_sympy(seed):
    rng = np.random.default_rng(seed)
    s = _random_structure(rng, 4)
    kinds = _kinds(s, [])
    base = sympy.symbols(f"a0:{len(kinds) + 1}", real=True)
    # repeated symbols: a leaf may read the same variable as another leaf
    leaf_syms = [base[int(rng.integers(0, max(1, len(kinds) // 2) + 1))] for _ in kinds]
    wrt = sorted({v for v, k in zip(leaf_syms, kinds) if k == "V"}, key=str)
    tree = differentiate_structure(s, leaf_syms, wrt)
    expr = to_sympy(s, leaf_syms)
    base = list(base)
    point = {b: sympy.Float(rng.uniform(0.3, 1.2) * (1 if rng.random() < 0.7 else -1), 30)
             for b in base}
    assigned = {}
    for w, e in tree.assignments:
        assigned[w] = e.xreplace(point).xreplace(assigned).evalf(30)

    def num(e):
        return float(sympy.sympify(e).xreplace(point).xreplace(assigned).evalf(30))

    # reference: the whole expression differentiated numerically in 40 digits
    mpmath.mp.dps = 40
    f = sympy.lambdify(base, expr, modules="mpmath")
    x0 = [mpmath.mpf(str(point[b])) for b in base]
    pos = [base.index(v) for v in wrt]

    def ref(*orders):
        o = [0] * len(base)
        for p in orders:
            o[p] += 1
        return float(mpmath.diff(f, x0, tuple(o)))

    assert num(tree.value) == pytest.approx(ref(), rel=1e-12, abs=1e-12)
    for i in range(len(wrt)):
        got = num(tree.d1[i]) if i in tree.d1 else 0.0
        assert got == pytest.approx(ref(pos[i]), rel=1e-10, abs=1e-10)
        for j in range(i, len(wrt)):
            got = num(tree.d2[i, j]) if (i, j) in tree.d2 else 0.0
            assert got == pytest.approx(ref(pos[i], pos[j]), rel=1e-9, abs=1e-9)


def test_every_unary_function_is_differentiated():
    z = sympy.Symbol("z", real=True)
    for name in _UNARY:
        tree = differentiate_structure(("f", name, "V"), [z], [z])
        x = 1.4 if name == "acosh" else 0.4
        assigned = {}
        for w, e in tree.assignments:
            assigned[w] = e.subs(z, x).xreplace(assigned).evalf(30)
        g = _UNARY[name](z)
        assert float(sympy.sympify(tree.d1[0]).subs(z, x).xreplace(assigned)) == pytest.approx(
            float(sympy.diff(g, z).subs(z, x)), rel=1e-13)
        assert float(sympy.sympify(tree.d2[0, 0]).subs(z, x).xreplace(assigned)) == pytest.approx(
            float(sympy.diff(g, z, 2).subs(z, x)), rel=1e-13)


def test_sparsity_is_structural():
    a, b, c = sympy.symbols("a b c", real=True)
    # a*b + c: d/dc constant, no second derivative in c, none in (a, a)
    tree = differentiate_structure(("+", ("*", "V", "V"), "V"), [a, b, c], [a, b, c])
    assert set(tree.d1) == {0, 1, 2} and tree.d1[2] == 1
    assert set(tree.d2) == {(0, 1)}
    # linear in a constant leaf: no Hessian at all
    tree = differentiate_structure(("*", "C", "V"), [b, a], [a])
    assert tree.d2 == {} and tree.d1[0] == b
