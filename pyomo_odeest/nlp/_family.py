"""A family: many rows that share one symbolic expression.

A family holds a sympy expression ``e(s_0, ..., s_{K-1})`` in K slot symbols
and an integer array ``idx`` of shape ``(rows, K)``: row ``r`` evaluates
``e(w[idx[r, 0]], ..., w[idx[r, K-1]])`` where ``w = [x, pool]`` is the vector of
free variables followed by the constant pool (fixed variables, parameters,
numbers).  Its first and second derivatives are derived symbolically once, by
forward differentiation of the structure's tree
(:func:`~pyomo_odeest.symbolic._treediff.differentiate_structure`), and
lambdified (numpy, straight-line code over the tree's shared nodes) so that
every callback is one vectorised call per family.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from ..symbolic._structure import to_sympy
from ..symbolic._treediff import differentiate_structure
from ..symbolic import lambdify

__all__ = ["Family", "compile_family", "slot_classes", "row_chunk", "ROW_CHUNK"]

_CACHE: dict = {}


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


def _lambdify(syms, exprs, tree):
    consts = tuple(float(e) if not e.free_symbols else None for e in exprs)
    live = [e for e, c in zip(exprs, consts) if c is None]
    fn = lambdify(syms, live, modules="numpy", cse=tree.cse_for(live)) if live else None
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


def _has_var(s):
    if s == "V":
        return True
    if s == "C" or not isinstance(s, tuple):
        return False
    return any(_has_var(c) for c in s[1:])


def _additive_terms(s, slots, sign=1.0, out=None):
    """``[(sign, term structure, its slots)]``: the terms of the sums at the
    top of ``s`` (through negations, and through products with a factor free
    of variables, such as ``(h^2 d) * (a + b)``: that factor's slots are then
    shared by the terms).  ``slots``: the slots of ``s`` in walk order."""
    out = [] if out is None else out
    if isinstance(s, tuple) and s[0] == "+":
        off = 0
        for c in s[1:]:
            cnt = _leaf_count(c)
            _additive_terms(c, slots[off:off + cnt], sign, out)
            off += cnt
        return out
    if isinstance(s, tuple) and s[0] == "neg":
        return _additive_terms(s[1], slots, -sign, out)
    if isinstance(s, tuple) and s[0] == "*":
        na = _leaf_count(s[1])
        sa, sb = slots[:na], slots[na:]
        for j, (fac, other) in enumerate(((s[1], s[2]), (s[2], s[1]))):
            if _has_var(fac):
                continue
            fslots, oslots = (sa, sb) if j == 0 else (sb, sa)
            inner = _additive_terms(other, oslots)
            if len(inner) > 1:
                for sg, t, ts in inner:
                    out.append((sign * sg, ("*", fac, t) if j == 0 else ("*", t, fac),
                                fslots + ts if j == 0 else ts + fslots))
                return out
    out.append((sign, s, slots))
    return out


def _term_classes(classes, slots):
    """Slot classes of a term reading ``slots`` (first equal slot, relative)."""
    first, out = {}, []
    for j, k in enumerate(slots):
        out.append(first.setdefault(classes[k], j))
    return tuple(out)


def compile_family(structure, kinds, split=True, classes=None):
    """Compile (and cache by structure) the value and derivatives of a shape.

    ``kinds`` gives 'V' or 'C' per slot; only 'V' slots are differentiated.
    ``classes`` (optional, one entry per slot: the first slot that reads the
    same column of ``w`` in every row) lets slots that always hold the same
    variable share one symbol, so each variable is differentiated once, not
    once per occurrence (a parameter occurring twenty times in ``f``).
    With ``split`` (default), a sum is compiled term by term (each term shape
    once, cached across rows, components and models: the ``k`` terms
    ``h c_j f(P_j)`` of a stage equation share one compiled ``f`` term) and
    terms of one shape are evaluated together (:class:`_SumCompiled`);
    ``split=False`` compiles the whole expression at once.
    """
    K = len(kinds)
    classes = None if classes is None or tuple(classes) == tuple(range(K)) else tuple(classes)
    if split:
        terms = _additive_terms(structure, tuple(range(K)))
        if len(terms) > 1:
            key = ("split", structure, classes)
            hit = _CACHE.get(key)
            if hit is None:
                parts = []
                for sign, term, slots in terms:
                    sub = None if classes is None else _term_classes(classes, slots)
                    parts.append((sign, compile_family(term, tuple(kinds[k] for k in slots),
                                                       split=False, classes=sub),
                                  slots))
                hit = _CACHE[key] = _SumCompiled(K, parts)
            return hit
    key = (structure, classes)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    comp = _compile(structure, kinds, classes)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = comp
    return comp


def _select(fn, sel):
    """``fn`` called with the arguments at positions ``sel`` only."""
    if fn is None:
        return None
    return lambda *args: fn(*[args[k] for k in sel])


def _compile(structure, kinds, classes):
    K = len(kinds)
    syms = sympy.symbols(f"s0:{K}", real=True) if K else ()
    reps = list(range(K)) if classes is None else sorted(set(classes))
    slot_syms = syms if classes is None else [syms[c] for c in classes]
    vslots = [k for k in reps if kinds[k] == "V"]
    tree = differentiate_structure(structure, slot_syms, [syms[k] for k in vslots])
    d1_slots = [vslots[i] for i in sorted(tree.d1)]
    d1_exprs = [tree.d1[i] for i in sorted(tree.d1)]
    d2_pairs, d2_exprs = [], []
    for i in sorted(tree.d1):
        for j in sorted(tree.d1):
            if j >= i and (i, j) in tree.d2:
                d2_pairs.append((vslots[i], vslots[j]))
                d2_exprs.append(tree.d2[i, j])
    arg_syms = [syms[k] for k in reps]
    value_fn = lambdify(arg_syms, to_sympy(structure, slot_syms), modules="numpy", cse=True)
    d1_fn, d1_const = _lambdify(arg_syms, d1_exprs, tree)
    d2_fn, d2_const = _lambdify(arg_syms, d2_exprs, tree)
    if classes is not None:
        value_fn, d1_fn, d2_fn = (_select(f, reps) for f in (value_fn, d1_fn, d2_fn))
    return _Compiled(K, value_fn, tuple(d1_slots), d1_fn, d1_const,
                     tuple(d2_pairs), d2_fn, d2_const)


def slot_classes(idx, kinds):
    """Per slot, the first slot of the same kind whose column ``idx[:, k]`` is
    equal in every row (see :func:`compile_family`)."""
    first, out = {}, []
    for k in range(idx.shape[1]):
        c = idx[:, k]
        key = (kinds[k], c.tobytes() if c.size and not np.all(c == c[0])
               else (int(c[0]) if c.size else None))
        out.append(first.setdefault(key, k))
    return tuple(out)


class _SumCompiled:
    """A sum of compiled terms, presented as one compiled expression.

    Every variable slot belongs to exactly one term (only factors free of
    variables are shared), so first and second derivatives are those of the
    terms (cross-term second derivatives vanish).  Terms of
    one compiled shape are evaluated in one call on stacked arguments.
    """

    def __init__(self, nslots, parts):
        self.nslots = nslots
        groups = {}
        for sign, comp, slots in parts:
            g = groups.setdefault(id(comp), (comp, [], []))
            g[1].append(sign)
            g[2].append(tuple(slots))
        # per group: the slots each term reads, as one (term slots, terms) gather
        self.groups = [(comp, np.array(signs), maps,
                        np.array(maps, dtype=np.intp).reshape(len(maps), comp.nslots).T.copy())
                       for comp, signs, maps in groups.values()]
        d1, d2 = [], []
        for comp, _, maps, _ in self.groups:
            for mp in maps:
                d1.extend(mp[k] for k in comp.d1_slots)
                d2.extend((mp[a], mp[b]) for a, b in comp.d2_pairs)
        self.d1_slots = tuple(d1)
        self.d1_const = (None,) * len(d1)
        self.d2_pairs = tuple(d2)
        self.d2_const = (None,) * len(d2)

    @staticmethod
    def rows(args):
        """The slot arguments as one ``(slots, rows)`` array (scalars broadcast)."""
        if isinstance(args, np.ndarray) and args.ndim == 2:
            return args
        A = np.stack(np.broadcast_arrays(*[np.asarray(a, dtype=float) for a in args]))
        return A.reshape(len(args), -1)

    @staticmethod
    def _gathered(A, gather):
        """A group's terms' arguments from the family's ``(slots, rows)`` array ``A``:
        per term slot, the terms' rows one after another (one gather per group)."""
        return A[gather].reshape(gather.shape[0], gather.shape[1] * A.shape[1])

    def value_at(self, A):
        """The sum at the rows of ``A`` (:meth:`rows`)."""
        total = 0.0
        nrows = A.shape[1]
        for comp, signs, maps, gather in self.groups:
            v = np.broadcast_to(np.asarray(comp.value(*self._gathered(A, gather)), dtype=float),
                                (len(maps) * nrows,))
            total = total + signs @ v.reshape(len(maps), nrows)
        return total

    def derivs_at(self, which, A):
        """First (``which`` 1) or second derivatives at the rows of ``A``, aligned with
        :attr:`d1_slots` or :attr:`d2_pairs`."""
        out = []
        nrows = A.shape[1]
        for comp, signs, maps, gather in self.groups:
            fn, consts = (comp.d1, comp.d1_const) if which == 1 else (comp.d2, comp.d2_const)
            if not consts:
                continue
            vals = [v.reshape(len(maps), nrows) for v in
                    _expand(fn, consts, self._gathered(A, gather), len(maps) * nrows)]
            for p, sign in enumerate(signs.tolist()):
                out.extend(v[p] if sign == 1.0 else sign * v[p] for v in vals)
        return out

    def value(self, *args):
        return self.value_at(self.rows(args))

    def d1(self, *args):
        return self.derivs_at(1, self.rows(args))

    def d2(self, *args):
        return self.derivs_at(2, self.rows(args))


def _expand(fn, consts, args, nrows):
    """Evaluate a list-valued lambdified function, filling constant entries."""
    out = []
    live = iter(fn(*args) if fn is not None else ())
    shape = (nrows,)
    for c in consts:
        v = next(live) if c is None else c
        if not (isinstance(v, np.ndarray) and v.shape == shape and v.dtype == np.float64):
            v = np.broadcast_to(np.asarray(v, dtype=float), shape)
        out.append(v)
    return out


#: rows of a family evaluated in one call: the generated code's intermediate arrays (one
#: per common subexpression and per output) then take a few MB, not one array of every
#: row each (about 300 bytes per NLP variable at 10⁵ steps in one call)
ROW_CHUNK = 16384


@dataclass
class Family:
    """Rows sharing one compiled expression (see module docstring)."""

    name: str
    compiled: _Compiled
    idx: np.ndarray                    # (rows, K) positions into w = [x, pool]
    components: list = field(default_factory=list)   # one Pyomo object per row
    #: after :meth:`compress`: per slot ``(start, stride)`` (the slot reads
    #: ``w[start + stride * r]`` in row ``r``) or the slot's positions; ``idx`` is
    #: then None and :meth:`positions` rebuilds it
    _cols: list = None
    _nrows: int = 0

    @property
    def nrows(self):
        return self._nrows if self.idx is None else self.idx.shape[0]

    def compress(self):
        """Keep the positions of a slot that reads ``w`` at equally spaced positions
        (a state of every step, a parameter of every row) as its first position and
        spacing: :meth:`slot_args` then reads it through a strided view of ``w``
        instead of a gathered copy (no index array kept, no copy per evaluation)."""
        idx = self.idx
        if idx is None or idx.shape[0] < 2:
            return
        cols = []
        for k in range(idx.shape[1]):
            c = idx[:, k]
            step = int(c[1]) - int(c[0])
            if np.array_equal(np.diff(c), np.full(c.size - 1, step, dtype=c.dtype)):
                cols.append((int(c[0]), step))
            else:
                cols.append(np.ascontiguousarray(c))
        self._cols, self._nrows, self.idx = cols, idx.shape[0], None

    def positions(self):
        """The ``(rows, K)`` positions into ``w`` (rebuilt after :meth:`compress`)."""
        if self.idx is not None:
            return self.idx
        r = np.arange(self._nrows)
        return np.stack([c[0] + c[1] * r if isinstance(c, tuple) else c for c in self._cols],
                        axis=1)

    def slot_args(self, w):
        """The rows' arguments: one ``(slots, rows)`` array gathered from ``w``, or
        after :meth:`compress` a list of one array per slot, read-only strided views
        of ``w`` where the slot's positions are equally spaced (valid until ``w`` is
        written)."""
        if self.idx is not None:
            return w[self.idx.T]
        n, item = self._nrows, w.itemsize
        return [np.lib.stride_tricks.as_strided(w[c[0]:], shape=(n,), strides=(c[1] * item,),
                                                writeable=False)
                if isinstance(c, tuple) else w[c] for c in self._cols]

    def values(self, args, nrows=None):
        """The rows' values at ``args`` (:meth:`slot_args`, or a :func:`row_chunk` of
        ``nrows`` rows of them)."""
        c = self.compiled
        v = c.value_at(c.rows(args)) if isinstance(c, _SumCompiled) else c.value(*args)
        return np.broadcast_to(np.asarray(v, dtype=float),
                               (self.nrows if nrows is None else nrows,))

    def _derivatives(self, which, args, nrows):
        c = self.compiled
        if isinstance(c, _SumCompiled):      # one array of the rows per entry
            return c.derivs_at(which, c.rows(args))
        fn, consts = (c.d1, c.d1_const) if which == 1 else (c.d2, c.d2_const)
        return _expand(fn, consts, args, self.nrows if nrows is None else nrows)

    def first(self, args, nrows=None):
        return self._derivatives(1, args, nrows)

    def second(self, args, nrows=None):
        return self._derivatives(2, args, nrows)

    def chunks(self, size=None):
        """``(r0, r1)`` row ranges of at most ``size`` (default :data:`ROW_CHUNK`) rows
        covering the family."""
        size = ROW_CHUNK if size is None else int(size)
        n = self.nrows
        return [(r, min(r + size, n)) for r in range(0, n, size)] or [(0, 0)]


def row_chunk(args, r0, r1):
    """Rows ``r0:r1`` of a family's arguments (:meth:`Family.slot_args`): views."""
    if isinstance(args, np.ndarray) and args.ndim == 2:
        return args[:, r0:r1]
    return [a[r0:r1] for a in args]
