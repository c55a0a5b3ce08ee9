"""An ASL-free evaluator of Pyomo NLPs with exact first and second derivatives.

Everything is read from the data stored in the model passed in; constraint
rules are never called again.  Rows are read in one pass over their stored
expressions (:func:`_flatten`), rows of equal signature share one compiled
:class:`~pyomo_odeest.nlp._family.Family`, rows stored as a template are
evaluated from that template, and the sparsity is computed once: see
docs/solver.md, section "How a model becomes callbacks".

Fixed variables, Params and numbers live in a constant pool after the free
variables, ``w = [x, pool]``; their values are read when the evaluator is
built.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from operator import itemgetter

import numpy as np
import sympy
from pyomo.common.numeric_types import native_numeric_types
from pyomo.core.base.constraint import Constraint
from pyomo.core.base.objective import Objective
from pyomo.core.base.param import Param
from pyomo.core.base.var import Var
from pyomo.core.expr import numeric_expr as ne
from pyomo.core.expr import relational_expr as re_
from pyomo.core.expr.template_expr import GetItemExpression, IndexTemplate, resolve_template
from pyomo.environ import value

try:                      # Pyomo >= 6.9 (TEMPLATIZE_CONSTRAINTS)
    from pyomo.core.base.constraint import TemplateDataMixin as _TemplateDataMixin
except ImportError:       # pragma: no cover - older Pyomo
    class _TemplateDataMixin:   # noqa: D101 - nothing is an instance of it
        pass

from ._family import Family, compile_family, row_chunk, slot_classes
from ._memory import RELEASE_MEMORY_MIN_VARIABLES, release_free_memory
from ._protocol import EvaluationError, NLPEvaluator, finite
from ..symbolic._structure import UnsupportedExpressionError, to_sympy, walk
from ..symbolic import lambdify

__all__ = ["PyomoNLPEvaluator", "UnsupportedModelError"]

INF = np.inf


class UnsupportedModelError(ValueError):
    """The model contains a component the evaluator cannot handle."""


# --------------------------------------------------------------------------
# column registry: free variables get columns, constants get pool entries
# --------------------------------------------------------------------------
class _Registry:
    """Assigns positions in ``w = [x, pool]``.

    Free variables get columns ``0..n-1`` in first-seen order; pool entries are
    returned as negative references ``-1 - k`` until :meth:`finalize` knows n.
    """

    def __init__(self):
        self.variables = []
        self.col_of = {}
        self.pool_chunks = []
        self.pool_size = 0
        self._const_pos = {}
        self.comp_index = {}

    def pool_scalar(self, v):
        v = float(v)
        pos = self._const_pos.get(v)
        if pos is None:
            pos = self.pool_array(np.array([v]))[0]
            self._const_pos[v] = pos
        return pos

    def pool_array(self, arr):
        arr = np.asarray(arr, dtype=float)
        start = self.pool_size
        self.pool_chunks.append(arr)
        self.pool_size += arr.size
        return -1 - np.arange(start, start + arr.size)

    def position(self, data):
        """Position of a VarData, ParamData or number."""
        if data.__class__ in (int, float) or isinstance(data, (int, float, np.number)):
            return self.pool_scalar(data)
        if not data.is_variable_type():
            return self.pool_scalar(value(data))
        key = id(data)
        pos = self.col_of.get(key)
        if pos is not None:
            return pos
        if data.fixed:
            if data.value is None:
                raise UnsupportedModelError(
                    f"fixed variable '{data.name}' has no value")
            pos = self.pool_array(np.array([float(data.value)]))[0]
        else:
            if not data.is_continuous():
                raise UnsupportedModelError(
                    f"variable '{data.name}' has domain {data.domain}: "
                    "integer and binary variables are not supported (NLP only)")
            pos = len(self.variables)
            self.variables.append(data)
        self.col_of[key] = pos
        return pos

    def release(self):
        """Drop the look-up tables (which refer back to the registry) and the column
        dictionary: what the evaluator keeps is copied out by then."""
        self.comp_index.clear()
        self.col_of.clear()
        self._const_pos.clear()
        self.pool_chunks = []

    def component_index(self, comp):
        ci = self.comp_index.get(id(comp))
        if ci is None:
            ci = _ComponentIndex(comp, self)
            self.comp_index[id(comp)] = ci
        return ci


class _Const:
    """An index value shared by every row of a template (``x[i, 'a']``'s ``'a'``)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _ComponentIndex:
    """Vectorised look-up from index values to positions in ``w``.

    Every index dimension is coded as integers: integer dimensions by their
    value, other dimensions (state names, ...) by the order of their distinct
    values; the codes address a dense table of ordinals when it is not much
    larger than the component (a dictionary of keys otherwise).  The values
    of a Param are read into the constant pool in one piece.
    """

    def __init__(self, comp, registry):
        self.comp = comp
        self.registry = registry
        keys = list(comp.keys())
        datas = list(comp.values())
        self.is_param = comp.ctype is Param
        self.datas = None if self.is_param else datas
        self.pos = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
        self.table = None
        self.dict = None
        self.codes = None
        if not keys:
            self.dim = 0
        elif isinstance(keys[0], tuple):
            lens = set(map(len, keys))
            self.dim = len(keys[0]) if len(lens) == 1 else -1
            columns = ([list(map(itemgetter(d), keys)) for d in range(self.dim)]
                       if self.dim > 0 else None)
        else:
            self.dim = 1
            columns = None if any(isinstance(k, tuple) for k in keys) else [keys]
        if columns is not None:
            codes, lo, shape, cols = [], [], [], []
            for col in columns:
                if set(map(type, col)) == {int}:
                    arr = np.array(col, dtype=np.int64)
                    codes.append(None)
                else:
                    cmap = {v: j for j, v in enumerate(dict.fromkeys(col))}
                    arr = np.fromiter(map(cmap.__getitem__, col), dtype=np.int64,
                                      count=len(col))
                    codes.append(cmap)
                cols.append(arr)
                lo.append(int(arr.min()))
                shape.append(int(arr.max()) - int(arr.min()) + 1)
            if np.prod(np.array(shape, dtype=float)) <= 4 * len(keys) + 64:
                self.codes = codes
                self.lo = np.array(lo, dtype=np.int64)
                self.table = np.full(tuple(shape), -1, dtype=np.int64)
                self.table[tuple(c - l for c, l in zip(cols, lo))] = np.arange(len(keys))
        if self.table is None:
            self.dict = {(k if isinstance(k, tuple) else (k,)): o for o, k in enumerate(keys)}
        if self.is_param:
            self._pool_param(datas)

    def _pool_param(self, vals):
        try:
            arr = np.array([v if v.__class__ in native_numeric_types else value(v)
                            for v in vals], dtype=float)
        except (TypeError, ValueError):
            self.datas = vals          # entry by entry (the error names the entry)
            return
        if arr.size:
            self.pos[:] = self.registry.pool_array(arr)

    def _dim_ints(self, d, c, nrows):
        """Integer codes of the index values ``c`` of dimension ``d``."""
        cmap = self.codes[d]
        if c.__class__ is _Const:
            v = c.value
            if cmap is None:
                if v.__class__ is not int and not (isinstance(v, (float, np.number))
                                                   and float(v) == int(v)):
                    raise KeyError("non-integer index")
                code = int(v)
            else:
                code = cmap[v]
            return np.full(nrows, code - self.lo[d], dtype=np.int64)
        c = np.asarray(c)
        if cmap is not None:
            return np.fromiter((cmap[v] for v in c.tolist()), dtype=np.int64,
                               count=c.size) - self.lo[d]
        if c.dtype.kind not in "iuf":
            raise KeyError("non-numeric index")
        ci = np.rint(c.astype(float)).astype(np.int64)
        if c.dtype.kind == "f" and not np.all(ci == c):
            raise KeyError("non-integer index")
        return ci - self.lo[d]

    def ordinals(self, cols, nrows=None):
        """``cols``: one array (or :class:`_Const`) per index dimension."""
        if len(cols) != self.dim:
            raise KeyError("index dimension mismatch")
        if nrows is None:
            nrows = next((np.size(c) for c in cols if c.__class__ is not _Const), 1)
        if self.table is not None:
            ints = []
            for d, c in enumerate(cols):
                ci = self._dim_ints(d, c, nrows)
                if np.any(ci < 0) or np.any(ci >= self.table.shape[d]):
                    raise KeyError("index out of range")
                ints.append(ci)
            o = self.table[tuple(ints)]
            if np.any(o < 0):
                raise KeyError("index not in component")
            return o
        full = [[c.value] * nrows if c.__class__ is _Const else np.asarray(c).tolist()
                for c in cols]
        return np.fromiter((self.dict[r] for r in zip(*full)), dtype=np.int64, count=nrows)

    def positions(self, ordinals):
        missing = self.pos[ordinals] == np.iinfo(np.int64).min
        if missing.any():
            position = self.registry.position
            datas = self.datas
            for o in np.unique(ordinals[missing]).tolist():
                self.pos[o] = position(datas[o])
        return self.pos[ordinals]


# --------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------
def _relational_parts(expr):
    """(body, lb, ub) of a template relational expression, or None.

    The body has the orientation of ``ConstraintData.body`` (see
    ``ConstraintData.to_bounded_expression``): ``lhs - rhs`` unless only the
    right-hand side holds variables, as in ``const <= expr`` (how Pyomo stores
    ``expr >= const``), where it is ``rhs - lhs``.  Rows then agree with the
    general path in sign, so Jacobians and ``dual`` values do too.
    """
    if isinstance(expr, (re_.EqualityExpression, re_.InequalityExpression)):
        a, b = expr.args
        eq = isinstance(expr, re_.EqualityExpression)
        if not _is_constant(b) and _is_constant(a):
            return b - a, 0.0, (0.0 if eq else INF)
        return a - b, (0.0 if eq else -INF), 0.0
    if isinstance(expr, re_.RangedExpression):
        lo, body, hi = expr.args
        if _has_template(lo) or _has_template(hi):
            return None
        return body, float(value(lo)), float(value(hi))
    return None


def _has_template(e):
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, (IndexTemplate, GetItemExpression)):
            return True
        if getattr(n, "is_expression_type", lambda: False)():
            stack.extend(n.args)
    return False


_INDEX_FN = {}     # structure of an index expression -> its numpy function


class _TemplateResolver:
    """Positions of the leaves of a template for every row of a constraint."""

    def __init__(self, registry, templates, keys):
        self.registry = registry
        nd = len(templates)
        tk = [k if isinstance(k, tuple) else (k,) for k in keys]
        if any(len(k) != nd for k in tk):
            raise KeyError("index dimension does not match the template")
        self.nrows = len(tk)
        self.values = {}
        for d, t in enumerate(templates):
            col = [k[d] for k in tk]
            try:
                arr = np.array(col)
                if arr.dtype.kind not in "iuf":
                    arr = np.array(col, dtype=object)
            except Exception:
                arr = np.array(col, dtype=object)
            self.values[id(t)] = arr

    def index_values(self, e):
        """Values of the index expression ``e`` for every row: an array, or a
        :class:`_Const` when ``e`` holds no index template."""
        if e.__class__ in native_numeric_types or isinstance(e, (str, tuple)):
            return _Const(e)
        if isinstance(e, IndexTemplate):
            return self.values[id(e)]
        leaves = []
        s = walk(e, leaves, template=True)
        fn = _INDEX_FN.get(s)
        if fn is None:
            syms = sympy.symbols(f"i0:{len(leaves)}")
            fn = _INDEX_FN[s] = lambdify(syms, to_sympy(s, syms), modules="numpy")
        args = []
        for kind, payload in leaves:
            if kind == "T":
                a = self.values[id(payload)]
                if a.dtype == object:
                    raise KeyError("arithmetic on non-numeric index")
                args.append(a)
            elif kind == "C":
                args.append(payload)
            else:
                raise KeyError("component access inside an index expression")
        return np.broadcast_to(np.asarray(fn(*args)), (self.nrows,))

    def leaf_positions(self, kind, payload):
        if kind == "C":
            return np.full(self.nrows, self.registry.pool_scalar(payload), dtype=np.int64)
        if kind == "V":
            return np.full(self.nrows, self.registry.position(payload), dtype=np.int64)
        if kind == "T":
            a = self.values[id(payload)]
            if a.dtype == object:
                raise KeyError("non-numeric index used as a number")
            return self.registry.pool_array(a.astype(float))
        # 'G': templated component access
        base = payload.args[0]
        if base.ctype not in (Var, Param) or not base.is_indexed():
            raise KeyError("unsupported templated component")
        cols = [self.index_values(a) for a in payload.args[1:]]
        ci = self.registry.component_index(base)
        return ci.positions(ci.ordinals(cols, self.nrows))


def _flatten_sum(expr, out):
    """Top-level terms of a sum (named expressions unwrapped)."""
    while getattr(expr, "is_named_expression_type", lambda: False)():
        expr = expr.expr
    if isinstance(expr, (ne.SumExpression, ne.LinearExpression)) and expr.is_potentially_variable():
        for a in expr.args:
            _flatten_sum(a, out)
    else:
        out.append(expr)
    return out


class _Group:
    """Rows of one structure collected on the general path."""

    def __init__(self, structure, kinds):
        self.structure = structure
        self.kinds = kinds
        self.rows = []        # list of position lists
        self.objs = []        # one Pyomo object (or None) per row
        self.bounds = []

    def family(self, name, split):
        idx = np.array(self.rows, dtype=np.int64).reshape(len(self.rows), len(self.kinds))
        comp = compile_family(self.structure, self.kinds, split=split,
                              classes=slot_classes(idx, self.kinds) if split else None)
        return Family(name, comp, idx, self.objs)


def _merged_families(con_fams):
    """Families that share one compiled expression (the same equation of the scheme in
    each experiment's block, each order of the start-up steps ...) as one family: its
    rows are theirs, stacked in the order the families came.  Each family costs a
    Python call per slot and derivative at every evaluation, whatever its number of
    rows: a model of many experiments or conditions otherwise pays that per block
    (the rows keep their Pyomo objects, so the multipliers and names follow them)."""
    groups = {}
    for item in con_fams:
        groups.setdefault(id(item[0].compiled), []).append(item)
    out = []
    for items in groups.values():
        if len(items) == 1:
            out.append(items[0])
            continue
        fams = [f for f, _, _ in items]
        names = list(dict.fromkeys(f.name for f in fams))
        name = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} more)"
        merged = Family(name, fams[0].compiled, np.concatenate([f.idx for f in fams]),
                        [c for f in fams for c in f.components])
        out.append((merged, np.concatenate([lb for _, lb, _ in items]),
                    np.concatenate([ub for _, _, ub in items])))
    return out


def _kinds(leaves):
    return tuple("V" if k == "V" or (k == "G" and p.args[0].ctype is Var) else "C"
                 for k, p in leaves)


# --------------------------------------------------------------------------
# stored expressions: signatures, bounds, stored templates
# --------------------------------------------------------------------------
class _SignatureMismatch(ValueError):
    """Rows of one signature could not be turned into one family."""


_NATIVE, _EXPR, _SUM, _VAR, _LEAF, _NAMED, _POW, _UNARY_FN = range(8)   # order matters
_NODE_KIND = {}


def _node_kind(cls, node):
    if cls in native_numeric_types:
        k = _NATIVE
    elif not node.is_expression_type():
        k = _VAR if node.is_variable_type() else _LEAF
    elif node.is_named_expression_type():
        k = _NAMED
    elif issubclass(cls, (ne.SumExpression, ne.LinearExpression)):
        k = _SUM
    elif issubclass(cls, ne.PowExpression):
        k = _POW
    elif issubclass(cls, ne.UnaryFunctionExpression):
        k = _UNARY_FN
    else:
        k = _EXPR
    _NODE_KIND[cls] = k
    return k


def _flatten(expr, reg=None):
    """``(signature, leaves)`` of a stored expression, read in one pass.

    The signature lists, in prefix order, the class of every node, the
    number of terms of every sum, the numeric exponent of every power with a
    constant exponent and the name of every unary function: everything
    :func:`~pyomo_odeest.symbolic._structure.walk` (``template=True``) bases
    its structure on.  Two expressions with equal signatures therefore have
    the same structure and differ only in their leaves (variables, Params,
    numbers), which are returned in walk order.  With ``reg``, free
    variables get their columns in first-seen order, as on the general path.
    """
    sig, leaves = [], []
    add, leaf = sig.append, leaves.append
    stack = [expr]
    pop, push = stack.pop, stack.append
    kinds = _NODE_KIND
    col_of = reg.col_of if reg is not None else None
    while stack:
        n = pop()
        c = n.__class__
        k = kinds.get(c)
        if k is None:
            k = _node_kind(c, n)
        add(c)
        if k == _EXPR or k == _SUM:
            a = n.args
            if k == _SUM:
                add(len(a))
            for x in reversed(a):
                push(x)
        elif k == _VAR:
            leaf(n)
            if col_of is not None and id(n) not in col_of:
                reg.position(n)
        elif k <= _LEAF:                 # a number, Param, constant
            leaf(n)
        elif k == _NAMED:
            push(n.expr)
        elif k == _POW:
            b, e = n.args
            if e.__class__ in native_numeric_types:
                add(e)
            else:
                push(e)
            push(b)
        else:
            add(n.getname())
            push(n.args[0])
    return tuple(sig), leaves


def _is_constant(e):
    return e.__class__ in native_numeric_types or not e.is_potentially_variable()


# which argument of the stored relational expression is the body
_BODY_ARG = {"left": 0, "right": 1, "ranged": 1}


def _bounded_mode(rel, d):
    """How ``rel`` maps to ``lb <= body <= ub`` (as ``ConstraintData.to_bounded_expression``):
    ``'ranged'`` (lb, body, ub), ``'left'`` (body = lhs, bound = rhs),
    ``'right'`` (body = rhs, bound = lhs) or ``'diff'`` (body = lhs - rhs)."""
    if isinstance(rel, re_.RangedExpression):
        return "ranged"
    if not isinstance(rel, (re_.EqualityExpression, re_.InequalityExpression)):
        raise UnsupportedModelError(
            f"constraint '{d.name}' stores {type(rel).__name__}, not a relational expression")
    a, b = rel.args
    if _is_constant(b):
        return "left"
    if _is_constant(a):
        return "right"
    return "diff"


def _bound_values(mode, rels, datas):
    """Lower and upper bounds of rows stored as ``rels`` (all of one mode)."""
    n = len(rels)
    rep = rels[0]
    eq = isinstance(rep, re_.EqualityExpression)
    if mode == "diff":
        return np.zeros(n) if eq else np.full(n, -INF), np.zeros(n)

    def side(j):
        if not _is_constant(rep.args[j]):          # ranged bound with fixed variables
            for r, d in zip(rels, datas):
                if not r.args[j].is_fixed():
                    raise UnsupportedModelError(
                        f"constraint '{d.name}' is a ranged inequality with a variable "
                        "bound; write it as two inequalities")
        v = np.array([value(r.args[j]) for r in rels], dtype=float)
        if np.isnan(v).any():
            d = datas[int(np.flatnonzero(np.isnan(v))[0])]
            raise ValueError(f"constraint '{d.name}' has a NaN bound")
        return v

    if mode == "ranged":
        return side(0), side(2)
    if mode == "left":
        v = side(1)
        return (v if eq else np.full(n, -INF)), v
    v = side(0)
    return v, (v if eq else np.full(n, INF))


def _instantiate(info, index):
    """The concrete relational expression of row ``index`` of a constraint stored
    as the template ``info = (expression, index templates)`` (never by calling
    the rule, which may refer to another model)."""
    expr, templates = info
    for t in templates:
        t.set_value(index)
    try:
        return resolve_template(expr)
    finally:
        for t in templates:
            t.set_value()


# --------------------------------------------------------------------------
# the evaluator
# --------------------------------------------------------------------------
class PyomoNLPEvaluator(NLPEvaluator):
    """Exact, vectorised callbacks for a Pyomo model (no ASL).

    Parameters
    ----------
    model : pyomo Block
        Active constraints and the (at most one) active objective below it are
        included; deactivated components are ignored.
    templatize : bool
        Group rows by the signature of their stored expressions and evaluate
        stored templates vectorised (default ``True``).  With ``False`` every
        row is walked on its own (the reference path of the tests).

    Attributes
    ----------
    variables : list of VarData, in column order.
    constraint_rows : list of ConstraintData, in row order.
    sense : +1 (minimize) or -1 (maximize); :meth:`objective` returns the
        objective of the *minimization* form ``sense * f``.
    stats : dict with set-up timings and family counts.
    """

    #: a solve may run in a forked process (:func:`~pyomo_odeest.nlp.solve_with_ipopt`,
    #: ``isolate``): nothing read after a solve is changed by its evaluations
    forkable = True

    def __init__(self, model, templatize=True):
        t_start = time.perf_counter()
        self.model = model
        _check_supported(model)
        self._reg = _Registry()
        self.stats = {"template_families": 0, "grouped_families": 0, "general_families": 0,
                      "template_rows": 0, "grouped_rows": 0, "general_rows": 0,
                      "fallbacks": []}
        con_fams = []        # (Family, lb array, ub array)
        groups = {}

        rows = []            # (ConstraintData, stored relational expression)
        for con in model.component_objects(Constraint, active=True, descend_into=True):
            stored = {}      # id(template info) -> (info, [TemplateConstraintData])
            for d in con.values():
                if not d.active:
                    continue
                if isinstance(d, _TemplateDataMixin):
                    info = d._expr
                    stored.setdefault(id(info), (info, []))[1].append(d)
                else:
                    rows.append((d, d.expr))
            for info, tds in stored.values():
                fam = None
                if templatize:
                    try:
                        fam = self._template_family(con.name, info, tds)
                    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                            UnsupportedExpressionError) as err:
                        self.stats["fallbacks"].append((con.name, str(err).split("\n")[0]))
                if fam is not None:
                    con_fams.append(fam)
                else:
                    rows.extend((d, _instantiate(info, d.index())) for d in tds)
        rows = [(d, rel) for d, rel in rows if rel is not None]
        if templatize:
            self._grouped_rows(rows, con_fams, groups)
        else:
            for d, rel in rows:
                self._general_row(d, rel, groups)

        for g in groups.values():
            b = np.array(g.bounds, dtype=float).reshape(-1, 2)
            con_fams.append((g.family("general", templatize), b[:, 0], b[:, 1]))
            self.stats["general_families"] += 1
            self.stats["general_rows"] += len(g.rows)

        # objective
        objs = list(model.component_data_objects(Objective, active=True, descend_into=True))
        if len(objs) > 1:
            raise UnsupportedModelError(
                f"{len(objs)} active objectives ({', '.join(o.name for o in objs[:3])}...); "
                "deactivate all but one")
        self.objective_component = objs[0] if objs else None
        self.sense = 1.0
        obj_fams = []
        if objs:
            obj = objs[0]
            self.sense = 1.0 if obj.sense == 1 else -1.0
            terms = _flatten_sum(obj.expr, [])
            if templatize:
                try:
                    obj_fams = self._grouped_terms(terms)
                except UnsupportedExpressionError as err:
                    raise UnsupportedModelError(f"objective '{obj.name}': {err}") from None
            else:
                ogroups = {}
                for term in terms:
                    self._walked(term, ogroups, f"objective '{obj.name}'")
                obj_fams = [g.family("objective", False) for g in ogroups.values()]

        n_fams = len(con_fams)
        con_fams = _merged_families(con_fams)
        self.stats["merged_families"] = n_fams - len(con_fams)
        self._finalize(con_fams, obj_fams)
        # the registry (column dictionary, per-component look-up tables, pool
        # chunks now copied into ``_w``) is set-up data: released here, the
        # columns of :meth:`column` are rebuilt from ``variables`` on demand; its
        # look-up tables refer to it, so the cycle is broken for it to be freed now,
        # not at the next garbage collection
        self._reg.release()
        self._reg = None
        self._col_of = None
        if self.n >= RELEASE_MEMORY_MIN_VARIABLES:
            release_free_memory()             # the set-up's temporaries
        self.stats["setup_s"] = time.perf_counter() - t_start

    # -- building ----------------------------------------------------------
    def _template_family(self, name, info, datas):
        """One family from a constraint stored as a template (Pyomo's
        ``TEMPLATIZE_CONSTRAINTS``): the stored template expression is the
        constraint's data, shared by ``datas`` (rows still holding it)."""
        tmpl, templates = info
        parts = _relational_parts(tmpl)
        if parts is None:
            raise ValueError("template is not a supported relational expression")
        body, lb, ub = parts
        leaves = []
        s = walk(body, leaves, template=True)
        keys = [d.index() for d in datas]
        res = _TemplateResolver(self._reg, templates, keys)
        cols = [res.leaf_positions(k, p) for k, p in leaves]
        idx = np.stack(cols, axis=1) if cols else np.zeros((len(keys), 0), np.int64)
        kinds = _kinds(leaves)
        comp = compile_family(s, kinds, classes=slot_classes(idx, kinds))
        n = len(keys)
        self.stats["template_families"] += 1
        self.stats["template_rows"] += n
        return (Family(name, comp, idx, datas), np.full(n, lb), np.full(n, ub))

    def _general_row(self, d, rel, groups):
        """Walk one row (stored relational expression ``rel`` of ``d``) on its own."""
        mode = _bounded_mode(rel, d)
        a = rel.args
        body = a[0] - a[1] if mode == "diff" else a[_BODY_ARG[mode]]
        lo, hi = _bound_values(mode, [rel], [d])
        g = self._walked(body, groups, f"constraint '{d.name}'")
        g.objs.append(d)
        g.bounds.append((float(lo[0]), float(hi[0])))

    def _walked(self, expr, groups, what):
        """Walk ``expr`` on its own and add it as a row of the group of its structure."""
        leaves = []
        try:
            s = walk(expr, leaves)
        except UnsupportedExpressionError as err:
            raise UnsupportedModelError(f"{what}: {err}") from None
        g = groups.get(s)
        if g is None:
            g = groups[s] = _Group(s, _kinds(leaves))
        reg = self._reg
        g.rows.append([reg.position(p) if k == "V" else reg.pool_scalar(p) for k, p in leaves])
        return g

    def _grouped_rows(self, rows, con_fams, groups):
        """Rows whose stored expressions have the same signature (operators,
        leaf types, arities, exponents, function names) share one family; the
        leaves of every row are read from its own stored expression."""
        for items, leaves in self._by_signature(rows, itemgetter(1)):
            ds, rels = zip(*items)
            try:
                fam = self._stored_family(ds, rels, leaves)
            except (UnsupportedExpressionError, _SignatureMismatch) as err:
                self.stats["fallbacks"].append((ds[0].parent_component().name,
                                                str(err).split("\n")[0]))
                for d, rel in items:
                    self._general_row(d, rel, groups)
                continue
            con_fams.append(fam)
            self.stats["grouped_families"] += 1
            self.stats["grouped_rows"] += len(ds)

    def _stored_family(self, ds, rels, leaves):
        rep = rels[0]
        mode = _bounded_mode(rep, ds[0])
        counts = [len(_flatten(a)[1]) for a in rep.args]
        offs = np.concatenate([[0], np.cumsum(counts)]).tolist()
        wleaves = []
        if mode == "diff":
            sa, sb = (walk(a, wleaves, template=True) for a in rep.args)
            structure, slots = ("+", sa, ("neg", sb)), range(offs[2])
        else:
            j = _BODY_ARG[mode]
            structure = walk(rep.args[j], wleaves, template=True)
            slots = range(offs[j], offs[j + 1])
        lo, hi = _bound_values(mode, rels, ds)
        idx, kinds = self._slot_positions(structure, wleaves, slots, leaves)
        comp = compile_family(structure, kinds, classes=slot_classes(idx, kinds))
        name = ds[0].parent_component().name
        return Family(name, comp, idx, list(ds)), lo, hi

    def _grouped_terms(self, terms):
        """Objective terms grouped by signature (see :meth:`_grouped_rows`)."""
        fams = []
        for ts, leaves in self._by_signature(terms, lambda t: t):
            wleaves = []
            structure = walk(ts[0], wleaves, template=True)
            idx, kinds = self._slot_positions(structure, wleaves, range(len(leaves[0])), leaves)
            fams.append(Family("objective", compile_family(structure, kinds,
                                                            classes=slot_classes(idx, kinds)), idx))
        return fams

    def _by_signature(self, items, expr):
        """``[(items, their flattened leaves)]`` per signature of ``expr(item)``."""
        by_sig = {}
        reg = self._reg
        for it in items:
            sig, leaves = _flatten(expr(it), reg)
            g = by_sig.get(sig)
            if g is None:
                g = by_sig[sig] = ([], [])
            g[0].append(it)
            g[1].append(leaves)
        return by_sig.values()

    def _slot_positions(self, structure, wleaves, slots, leaves):
        """Positions in ``w`` of the body slots of every row, and the slot kinds.

        ``wleaves``: the leaves :func:`walk` found in the representative row
        (they must be the representative's flattened leaves at ``slots``);
        ``leaves``: the flattened leaves of every row.
        """
        rep = leaves[0]
        if len(wleaves) != len(slots):
            raise _SignatureMismatch("walked and flattened leaves differ")
        for (kw, p), k in zip(wleaves, slots):
            o = rep[k]
            if kw == "V":
                ok = p is o
            elif kw == "C":
                ok = (o.__class__ in native_numeric_types or not o.is_variable_type()) \
                    and _same_number(float(value(o)), p)
            else:
                ok = False
            if not ok:
                raise _SignatureMismatch("walked and flattened leaves differ")
        kinds = _kinds(wleaves)
        reg = self._reg
        col_of = reg.col_of
        nrows = len(leaves)
        idx = np.empty((nrows, len(slots)), dtype=np.int64)
        for j, (k, kind) in enumerate(zip(slots, kinds)):
            col = [lv[k] for lv in leaves]
            if kind == "V":
                pos = [col_of.get(id(o)) for o in col]
                if None in pos:
                    pos = [reg.position(o) if p is None else p for o, p in zip(col, pos)]
                idx[:, j] = pos
            else:
                vals = np.array([o if o.__class__ in native_numeric_types else value(o)
                                 for o in col], dtype=float)
                if nrows > 1 and np.all(vals == vals[0]):
                    idx[:, j] = reg.pool_scalar(vals[0])
                else:
                    idx[:, j] = reg.pool_array(vals)
        return idx, kinds

    def _finalize(self, con_fams, obj_fams):
        reg = self._reg
        n = len(reg.variables)
        self.n = n
        self.variables = reg.variables
        pool = np.concatenate(reg.pool_chunks) if reg.pool_chunks else np.zeros(0)
        reg.pool_chunks = []
        self._w = np.concatenate([np.zeros(n), pool])
        del pool
        # positions in w, Jacobian/Hessian structure and scatter maps are held
        # as 32-bit integers whenever w fits (half the memory of int64)
        itype = _index_type(self._w.size)
        self.con_families = [fam for fam, _, _ in con_fams]
        self.obj_families = obj_fams
        for fam in self.con_families + obj_fams:
            fam.idx = np.where(fam.idx >= 0, fam.idx, n + (-1 - fam.idx)).astype(itype, copy=False)
        self.constraint_rows = []
        row0 = 0
        for fam in self.con_families:
            fam.row0 = row0
            row0 += fam.nrows
            self.constraint_rows.extend(fam.components)
        self.m = row0
        self.g_lb = np.concatenate([lb for _, lb, _ in con_fams] or [np.zeros(0)])
        self.g_ub = np.concatenate([ub for _, _, ub in con_fams] or [np.zeros(0)])
        self._refuse_nonfinite_constants()

        # variable bounds and start
        lb = np.array([(-INF if v.lb is None else v.lb) for v in reg.variables], dtype=float)
        ub = np.array([(INF if v.ub is None else v.ub) for v in reg.variables], dtype=float)
        x0 = np.array([(0.0 if v.value is None else v.value) for v in reg.variables], dtype=float)
        crossed = np.flatnonzero(lb > ub)
        if crossed.size:
            v = reg.variables[int(crossed[0])]
            raise ValueError(f"variable '{v.name}' has lower bound {v.lb} > upper bound {v.ub}: "
                             "no value satisfies its bounds; correct them")
        self.x_lb, self.x_ub = lb, ub
        self.x0 = np.clip(x0, lb, ub)

        # Jacobian structure: per family, slots reading the same column in
        # every row (a parameter in every term of a stage equation) are summed
        # into one entry; families hold disjoint rows, so entries are unique
        # unless one row reads one variable through two different slot columns
        jr, jc, self._jac_plan = [], [], []
        dup = False
        for fam in self.con_families:
            rows = np.arange(fam.row0, fam.row0 + fam.nrows, dtype=_index_type(self.m))
            plan, gcols = [], []
            for poss, cols in _merged_slots(fam.idx, fam.compiled.d1_slots):
                mask = cols < n
                allm = bool(mask.all())
                plan.append((poss, None if allm else mask))
                jr.append(rows if allm else rows[mask])
                jc.append(cols if allm else cols[mask])
                gcols.append(np.where(mask, cols, -1 - len(gcols)))
            self._jac_plan.append(plan)
            if len(gcols) > 1 and not dup:
                srt = np.sort(np.stack(gcols, axis=1), axis=1)
                dup = bool(np.any(srt[:, 1:] == srt[:, :-1]))
        jr = np.concatenate(jr) if jr else np.zeros(0, itype)
        jc = np.concatenate(jc) if jc else np.zeros(0, itype)
        if not dup:
            self._jac_rows, self._jac_cols, self._jac_inv = jr, jc, None
        else:
            ukey, inv = _unique_inverse(jr.astype(np.int64) * max(n, 1) + jc)
            del jr, jc
            self._jac_rows = (ukey // max(n, 1)).astype(_index_type(self.m))
            self._jac_cols = (ukey % max(n, 1)).astype(itype)
            self._jac_inv = inv.astype(_index_type(inv.size))

        # gradient plan
        self._grad_plan = []
        for fam in self.obj_families:
            for k in fam.compiled.d1_slots:
                cols = fam.idx[:, k]
                mask = cols < n
                self._grad_plan.append((None if mask.all() else mask, cols[mask]))

        # Hessian structure (lower triangle): per family, slot pairs that read
        # the same two columns in every row are summed first; a pair of
        # row-invariant columns (parameter x parameter) is one entry
        hr, hc, self._hess_plan = [], [], []
        for fam in self.obj_families + self.con_families:
            pairs = fam.compiled.d2_pairs
            fplan = []
            self._hess_plan.append(fplan)
            if not pairs:
                continue
            slots = sorted({k for pr in pairs for k in pr})
            gid, gcol = {}, []
            for g, (poss, cols) in enumerate(_merged_slots(fam.idx, slots)):
                gcol.append((cols, cols.size > 0 and bool(np.all(cols == cols[0]))))
                for q in poss:
                    gid[slots[q]] = g
            by_pair = {}
            for q, (a, b) in enumerate(pairs):
                ga, gb = gid[a], gid[b]
                entry = by_pair.setdefault((min(ga, gb), max(ga, gb)), ([], []))
                entry[0].append(q)
                entry[1].append(2.0 if (ga == gb and a != b) else 1.0)
            for (ga, gb), (poss, wts) in by_pair.items():
                (ca, ka), (cb, kb) = gcol[ga], gcol[gb]
                if ka and kb:
                    ca0, cb0 = int(ca[0]), int(cb[0])
                    if ca0 >= n or cb0 >= n:
                        continue
                    fplan.append((poss, wts, "sum", 2.0 if (ga != gb and ca0 == cb0) else 1.0))
                    hr.append(np.array([max(ca0, cb0)]))
                    hc.append(np.array([min(ca0, cb0)]))
                    continue
                mask = (ca < n) & (cb < n)
                allm = bool(mask.all())
                ca_, cb_ = (ca, cb) if allm else (ca[mask], cb[mask])
                factor = None
                if ga != gb:
                    same = ca_ == cb_
                    if same.any():
                        factor = np.where(same, 2.0, 1.0)
                fplan.append((poss, wts, None if allm else mask, factor))
                hr.append(np.maximum(ca_, cb_))
                hc.append(np.minimum(ca_, cb_))
        hr = np.concatenate(hr).astype(np.int64, copy=False) if hr else np.zeros(0, np.int64)
        hc = np.concatenate(hc) if hc else np.zeros(0, np.int64)
        hkey = hr * max(n, 1) + hc
        del hr, hc
        hukey, hinv = _unique_inverse(hkey)
        del hkey
        self._hess_rows = (hukey // max(n, 1)).astype(itype)
        self._hess_cols = (hukey % max(n, 1)).astype(itype)
        self._hess_inv = hinv.astype(_index_type(hukey.size))
        del hinv
        self._hess_nnz = hukey.size
        self._cache_x = None
        # where each piece of the plans starts in the entries before merging (the
        # callbacks write the pieces chunk of rows by chunk of rows)
        self._jac_offsets = _piece_offsets(
            self._jac_plan, [f.nrows for f in self.con_families], lambda piece: piece[1],
            self._jac_rows.size if self._jac_inv is None else self._jac_inv.size, "Jacobian")
        self._hess_offsets = _piece_offsets(
            self._hess_plan, [f.nrows for f in self.obj_families + self.con_families],
            lambda piece: piece[2], self._hess_inv.size, "Hessian")
        # the structure is fixed: slots read at equally spaced positions (most of a
        # scheme's) keep no index array and are read as views of w
        for fam in self.con_families + self.obj_families:
            fam.compress()
        self.stats.update(n=n, m=self.m, jac_nnz=int(self._jac_rows.size),
                          hess_nnz=int(self._hess_nnz))

    def _refuse_nonfinite_constants(self):
        """A NaN or infinite number, Param or fixed variable in a constraint or the
        objective makes its rows NaN at every point: refused, naming the component."""
        bad = ~np.isfinite(self._w)
        bad[: self.n] = False
        if not bad.any():
            return
        for fam in self.con_families + self.obj_families:
            rows = np.flatnonzero(bad[fam.idx].any(axis=1)) if fam.idx.size else []
            if len(rows):
                r = int(rows[0])
                if any(fam is o for o in self.obj_families):
                    what = "objective" + (f" '{self.objective_component.name}'"
                                          if self.objective_component is not None else "")
                else:
                    what = f"constraint '{fam.components[r].name}'"
                v = self._w[fam.idx[r][bad[fam.idx[r]]][0]]
                raise ValueError(f"{what} contains the non-finite number {v} (a number, a "
                                 "Param or a fixed variable): it cannot be evaluated anywhere; "
                                 "give it a finite value")

    def nonfinite_components(self, x):
        """Names of the objective and constraint rows that are not finite at ``x``."""
        oargs, cargs = self._args(np.asarray(x, dtype=float))
        out = []
        with _quiet():
            for f, a in zip(self.obj_families, oargs):
                if not np.all(np.isfinite(f.values(a))):
                    out.append("the objective")
                    break
            for f, a in zip(self.con_families, cargs):
                v = np.asarray(f.values(a), dtype=float).reshape(-1)
                out += [f"constraint '{f.components[int(r)].name}'"
                        for r in np.flatnonzero(~np.isfinite(v))[:3]]
        return out

    # -- evaluation ----------------------------------------------------------
    def _args(self, x):
        x = np.asarray(x, dtype=float)
        if self._cache_x is not None and np.array_equal(x, self._cache_x):
            return self._cache_args
        w = self._w
        w[: self.n] = x
        self._cache_args = ([f.slot_args(w) for f in self.obj_families],
                            [f.slot_args(w) for f in self.con_families])
        self._cache_x = x.copy()
        return self._cache_args

    def objective(self, x):
        oargs, _ = self._args(x)
        with _evaluating():
            tot = sum(float(np.sum(f.values(a))) for f, a in zip(self.obj_families, oargs))
        return finite(self.sense * tot, "objective")

    def gradient(self, x):
        oargs, _ = self._args(x)
        g = np.zeros(self.n)
        plan = iter(self._grad_plan)
        with _evaluating():
            for f, a in zip(self.obj_families, oargs):
                for d in f.first(a):
                    mask, cols = next(plan)
                    g += np.bincount(cols, weights=d if mask is None else d[mask],
                                     minlength=self.n)
        return finite(self.sense * g, "gradient")

    def constraints(self, x):
        _, cargs = self._args(x)
        if not self.con_families:
            return np.zeros(0)
        c = np.empty(self.m)
        with _evaluating():
            for f, a in zip(self.con_families, cargs):
                for r0, r1 in f.chunks():
                    c[f.row0 + r0:f.row0 + r1] = f.values(row_chunk(a, r0, r1), r1 - r0)
        return finite(c, "constraint value")

    def jacobian_structure(self):
        return self._jac_rows, self._jac_cols

    def _arg_source(self, x):
        """``args(j, family)``: the gathered arguments of family ``j`` (objective
        families first), from the cache at the cached point, otherwise gathered
        when asked, so that one family's arguments are alive at a time."""
        x = np.asarray(x, dtype=float)
        if self._cache_x is not None and np.array_equal(x, self._cache_x):
            cached = self._cache_args[0] + self._cache_args[1]
            return lambda j, f: cached[j]
        self._cache_x = self._cache_args = None
        w = self._w
        w[: self.n] = x
        return lambda j, f: f.slot_args(w)

    def jacobian(self, x):
        args = self._arg_source(x)
        nobj = len(self.obj_families)
        v = np.empty(self._jac_rows.size if self._jac_inv is None else self._jac_inv.size)
        with _evaluating():
            for k, (f, fplan, offs) in enumerate(zip(self.con_families, self._jac_plan,
                                                     self._jac_offsets)):
                a = args(nobj + k, f)
                pos = list(offs)
                for r0, r1 in f.chunks():      # rows in chunks: bounded temporaries
                    ds = f.first(row_chunk(a, r0, r1), r1 - r0)
                    for p, (poss, mask) in enumerate(fplan):
                        d = ds[poss[0]]
                        for q in poss[1:]:
                            d = d + ds[q]
                        if mask is not None:
                            d = d[mask[r0:r1]]
                        v[pos[p]:pos[p] + d.size] = d
                        pos[p] += d.size
                    del ds
                del a
        if self._jac_inv is not None:
            v = np.bincount(self._jac_inv, weights=v, minlength=self._jac_rows.size)
        # Ipopt factorizes after the Jacobian (least-squares multipliers) and
        # after the Hessian: the gathered arguments (a float per slot and row)
        # are dropped then, not held through MUMPS's peak
        self._cache_x = self._cache_args = None
        return finite(v, "Jacobian entry")

    def hessian_structure(self):
        return self._hess_rows, self._hess_cols

    def hessian(self, x, lam, obj_factor=1.0):
        args = self._arg_source(x)
        lam = np.asarray(lam, dtype=float)
        nobj = len(self.obj_families)
        v = np.zeros(self._hess_inv.size)              # entries before merging
        with _evaluating():
            for j, (f, fplan, offs) in enumerate(zip(self.obj_families + self.con_families,
                                                     self._hess_plan, self._hess_offsets)):
                if not fplan:
                    continue
                a = args(j, f)
                pos = list(offs)
                for r0, r1 in f.chunks():      # rows in chunks: bounded temporaries
                    wgt = (obj_factor * self.sense if j < nobj
                           else lam[f.row0 + r0:f.row0 + r1])
                    ds = f.second(row_chunk(a, r0, r1), r1 - r0)
                    for p, (poss, wts, mask, factor) in enumerate(fplan):
                        d = ds[poss[0]] if wts[0] == 1.0 else wts[0] * ds[poss[0]]
                        for q, w in zip(poss[1:], wts[1:]):
                            d = d + (ds[q] if w == 1.0 else w * ds[q])
                        d = d * wgt
                        if isinstance(mask, str):   # "sum": one entry for every row
                            v[pos[p]] += factor * np.sum(d)
                            continue
                        if mask is not None:
                            d = d[mask[r0:r1]]
                        if factor is not None:
                            d = d * factor[pos[p] - offs[p]:pos[p] - offs[p] + d.size]
                        v[pos[p]:pos[p] + d.size] = d
                        pos[p] += d.size
                    del ds
                del a
        h = np.bincount(self._hess_inv, weights=v, minlength=self._hess_nnz)
        self._cache_x = self._cache_args = None      # as in jacobian()
        return finite(h, "Hessian entry")

    # -- model I/O -----------------------------------------------------------
    def column(self, var):
        """Column of a free VarData in ``x`` (KeyError if it is not a column)."""
        if self._col_of is None:
            self._col_of = {id(v): k for k, v in enumerate(self.variables)}
        pos = self._col_of.get(id(var))
        if pos is None or pos < 0 or pos >= self.n or self.variables[pos] is not var:
            raise KeyError(f"'{var.name}' is not a free variable of this NLP")
        return pos

    def load_x(self, x):
        """Write a primal point into the Pyomo variables."""
        for v, val in zip(self.variables, np.asarray(x, dtype=float).tolist()):
            v.set_value(val, skip_validation=True)


@contextlib.contextmanager
def _quiet():
    """numpy's floating-point warnings silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _evaluating():
    """:func:`_quiet`, with arithmetic errors raised as :class:`EvaluationError`."""
    with _quiet():
        try:
            yield
        except (ArithmeticError, ValueError) as err:
            raise EvaluationError(str(err)) from None


def _piece_offsets(plans, nrows, mask_of, size, what):
    """Per family, where each piece of its plan starts in the ``size`` entries before
    merging: a piece has one entry per row, per row of its mask, or one (``"sum"``)."""
    out, o = [], 0
    for plan, n in zip(plans, nrows):
        offs = []
        for piece in plan:
            offs.append(o)
            mask = mask_of(piece)
            o += 1 if isinstance(mask, str) else n if mask is None else int(np.count_nonzero(mask))
        out.append(offs)
    if o != size:                                  # pragma: no cover - a set-up bug
        raise AssertionError(f"{what}: the pieces hold {o} entries, the structure {size}")
    return out


def _same_number(a, b):
    return a == b or (a != a and b != b)


def _index_type(size):
    """int32 when every index below ``size`` fits, else int64."""
    return np.int32 if size < np.iinfo(np.int32).max else np.int64


def _merged_slots(idx, slots):
    """``[(positions in slots, column array)]``: the slots of ``slots`` grouped
    by equal columns ``idx[:, k]`` (their derivatives add up)."""
    groups, out = {}, []
    for p, k in enumerate(slots):
        c = idx[:, k]
        key = (c.tobytes() if c.size and not np.all(c == c[0])
               else (int(c[0]) if c.size else None))
        g = groups.get(key)
        if g is None:
            g = groups[key] = ([], c)
            out.append(g)
        g[0].append(p)
    return out


def _unique_inverse(key):
    """``np.unique(key, return_inverse=True)`` with a stable sort: the keys come
    in long sorted runs (one per family and slot), which a merge sort exploits
    (several times faster than the default quicksort at 10⁷ keys)."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    flag = np.empty(sk.size, dtype=bool)
    flag[:1] = True
    np.not_equal(sk[1:], sk[:-1], out=flag[1:])
    inv = np.empty(sk.size, dtype=np.int64)
    inv[order] = flag.astype(np.int64).cumsum() - 1
    return sk[flag], inv


def _check_supported(model):
    """Clear errors for components that an NLP evaluator cannot represent."""
    from pyomo.core.base.logical_constraint import LogicalConstraint
    from pyomo.core.base.sos import SOSConstraint
    from pyomo.gdp import Disjunction
    from pyomo.mpec import Complementarity

    # (an external function is an error only if used: the walker reports its row)
    smooth_only = ": the solver handles smooth NLPs only"
    for ctype, what, hint in ((LogicalConstraint, "logical constraint", smooth_only),
                              (SOSConstraint, "SOS constraint", smooth_only),
                              (Disjunction, "disjunction", ": apply a GDP transformation first"),
                              (Complementarity, "complementarity condition", "")):
        for c in model.component_data_objects(ctype, active=True, descend_into=True):
            raise UnsupportedModelError(f"{what} '{c.name}' is not supported{hint}")
