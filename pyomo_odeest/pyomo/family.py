"""A family: many rows that share one symbolic expression.

A family holds a sympy expression ``e(s_0, ..., s_{K-1})`` in K slot symbols
and an integer array ``idx`` of shape ``(rows, K)``: row ``r`` evaluates
``e(w[idx[r, 0]], ..., w[idx[r, K-1]])`` where ``w = [x, pool]`` is the vector of
free variables followed by the constant pool (fixed variables, parameters,
numbers).  Its first and second derivatives are derived symbolically once and
lambdified (numpy, common-subexpression elimination) so that every callback is
one vectorised call per family.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

__all__ = ["Family", "compile_family"]

_CACHE: dict = {}


def _drop_delta(d):
    """Drop ``DiracDelta`` terms (the derivative of ``sign`` away from 0).

    ``abs`` is differentiated as ``sign``; its second derivative contains
    ``DiracDelta``, which is zero wherever ``abs`` is differentiable and which
    numpy cannot evaluate.
    """
    if d.has(sympy.DiracDelta):
        d = d.replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
    return d


@dataclass
class _Compiled:
    nslots: int
    value: object                      # f(*slots) -> array or scalar
    d1_slots: tuple                    # slots with a non-zero first derivative
    d1: object                         # f(*slots) -> list, aligned with d1_slots
    d1_const: tuple                    # None or the constant value, per entry
    d2_pairs: tuple                    # (a, b), a <= b, non-zero second derivative
    d2: object
    d2_const: tuple


def _lambdify(syms, exprs):
    consts = tuple(
        float(e) if not e.free_symbols else None for e in exprs
    )
    live = [e for e, c in zip(exprs, consts) if c is None]
    fn = sympy.lambdify(syms, live, modules="numpy", cse=True) if live else None
    return fn, consts


def _leaf_count(s):
    """Number of slots (leaves) of a structure."""
    if s == "V" or s == "C":
        return 1
    op = s[0]
    if op == "f":
        return _leaf_count(s[2])
    if op == "^k":
        return _leaf_count(s[1])
    return sum(_leaf_count(c) for c in s[1:])


def _additive_terms(s, off=0, sign=1.0, out=None):
    """``[(sign, term structure, first slot)]``: the terms of nested sums and
    negations at the top of ``s`` (each term's slots are contiguous)."""
    out = [] if out is None else out
    if isinstance(s, tuple) and s[0] == "+":
        for c in s[1:]:
            _additive_terms(c, off, sign, out)
            off += _leaf_count(c)
    elif isinstance(s, tuple) and s[0] == "neg":
        _additive_terms(s[1], off, -sign, out)
    else:
        out.append((sign, s, off))
    return out


def compile_family(structure, kinds, sympy_builder, split=True):
    """Compile (and cache by structure) the value and derivatives of a shape.

    ``kinds`` gives 'V' or 'C' per slot; only 'V' slots are differentiated.
    With ``split`` (default), a sum is compiled term by term (each term shape
    once, cached across rows, components and models: the ``k`` terms
    ``h c_j f(P_j)`` of a stage equation share one compiled ``f`` term) and
    terms of one shape are evaluated together (:class:`_SumCompiled`);
    ``split=False`` compiles the whole expression at once.
    """
    if split:
        terms = _additive_terms(structure)
        if len(terms) > 1:
            key = ("split", structure)
            hit = _CACHE.get(key)
            if hit is None:
                hit = _CACHE[key] = _SumCompiled(len(kinds), [
                    (sign, compile_family(term, kinds[off:off + _leaf_count(term)],
                                          sympy_builder, split=False), off)
                    for sign, term, off in terms])
            return hit
    key = structure
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    K = len(kinds)
    syms = sympy.symbols(f"s0:{K}", real=True) if K else ()
    expr = sympy_builder(structure, syms)
    vslots = [k for k in range(K) if kinds[k] == "V"]
    d1_slots, d1_exprs = [], []
    for k in vslots:
        d = _drop_delta(sympy.diff(expr, syms[k]))
        if d != 0:
            d1_slots.append(k)
            d1_exprs.append(d)
    d2_pairs, d2_exprs = [], []
    for a, da in zip(d1_slots, d1_exprs):
        if not da.free_symbols:
            continue
        for b in d1_slots:
            if b < a or syms[b] not in da.free_symbols:
                continue
            d = _drop_delta(sympy.diff(da, syms[b]))
            if d != 0:
                d2_pairs.append((a, b))
                d2_exprs.append(d)
    value_fn = sympy.lambdify(syms, expr, modules="numpy", cse=True)
    d1_fn, d1_const = _lambdify(syms, d1_exprs)
    d2_fn, d2_const = _lambdify(syms, d2_exprs)
    comp = _Compiled(K, value_fn, tuple(d1_slots), d1_fn, d1_const,
                     tuple(d2_pairs), d2_fn, d2_const)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = comp
    return comp


class _SumCompiled:
    """A sum of compiled terms, presented as one compiled expression.

    Every slot belongs to exactly one term, so first and second derivatives
    are those of the terms (cross-term second derivatives vanish).  Terms of
    one compiled shape are evaluated in one call on stacked arguments.
    """

    def __init__(self, nslots, parts):
        self.nslots = nslots
        groups = {}
        for sign, comp, off in parts:
            g = groups.setdefault(id(comp), (comp, [], []))
            g[1].append(sign)
            g[2].append(off)
        self.groups = [(comp, np.array(signs), offs) for comp, signs, offs in groups.values()]
        d1, d2 = [], []
        for comp, _, offs in self.groups:
            for off in offs:
                d1.extend(off + k for k in comp.d1_slots)
                d2.extend((off + a, off + b) for a, b in comp.d2_pairs)
        self.d1_slots = tuple(d1)
        self.d1_const = (None,) * len(d1)
        self.d2_pairs = tuple(d2)
        self.d2_const = (None,) * len(d2)

    @staticmethod
    def _stacked(comp, offs, args):
        nrows = max((np.size(a) for a in args), default=1)
        if len(offs) == 1:
            return [args[offs[0] + k] for k in range(comp.nslots)], nrows
        return [np.concatenate([np.broadcast_to(np.asarray(args[o + k], dtype=float), (nrows,))
                                for o in offs]) for k in range(comp.nslots)], nrows

    def value(self, *args):
        total = 0.0
        for comp, signs, offs in self.groups:
            sa, nrows = self._stacked(comp, offs, args)
            v = np.broadcast_to(np.asarray(comp.value(*sa), dtype=float), (len(offs) * nrows,))
            total = total + signs @ v.reshape(len(offs), nrows)
        return total

    def _derivs(self, which, args):
        out = []
        for comp, signs, offs in self.groups:
            fn, consts = (comp.d1, comp.d1_const) if which == 1 else (comp.d2, comp.d2_const)
            if not consts:
                continue
            sa, nrows = self._stacked(comp, offs, args)
            vals = [v.reshape(len(offs), nrows) for v in
                    _expand(fn, consts, sa, len(offs) * nrows)]
            for p, sign in enumerate(signs.tolist()):
                out.extend(v[p] if sign == 1.0 else sign * v[p] for v in vals)
        return out

    def d1(self, *args):
        return self._derivs(1, args)

    def d2(self, *args):
        return self._derivs(2, args)


def _expand(fn, consts, args, nrows):
    """Evaluate a list-valued lambdified function, filling constant entries."""
    out = []
    live = iter(fn(*args) if fn is not None else ())
    for c in consts:
        v = next(live) if c is None else c
        out.append(np.broadcast_to(np.asarray(v, dtype=float), (nrows,)))
    return out


@dataclass
class Family:
    """Rows sharing one compiled expression (see module docstring)."""

    name: str
    compiled: _Compiled
    idx: np.ndarray                    # (rows, K) positions into w = [x, pool]
    components: list = field(default_factory=list)   # one Pyomo object per row

    @property
    def nrows(self):
        return self.idx.shape[0]

    def slot_args(self, w):
        return [w[self.idx[:, k]] for k in range(self.idx.shape[1])]

    def values(self, args):
        v = self.compiled.value(*args)
        return np.broadcast_to(np.asarray(v, dtype=float), (self.nrows,))

    def first(self, args):
        c = self.compiled
        return _expand(c.d1, c.d1_const, args, self.nrows)

    def second(self, args):
        c = self.compiled
        return _expand(c.d2, c.d2_const, args, self.nrows)
