r"""pyomo.dae front end: the package's schemes as Pyomo transformations.

Registered on ``import pyomo_odeest``:

* ``TransformationFactory('odeest.adams')``: ``variant='pc'`` (Adams
  predictor–corrector, [GM-grad] eqs. (4)–(5), default) or ``'moulton'``
  (implicit Adams–Moulton);
* ``TransformationFactory('odeest.enright')``: ``variant='implicit'``
  [GM-grad eq. (6)] or ``'semi_implicit'`` (predictor–corrector–recorrector,
  §2.3.2).

They discretize a pyomo.dae model the way ``dae.finite_difference`` does; the
options (``initialize='simulate'``, ``scale_parameters=True``, ...) and the
requirements on the ODE constraints are described in docs/cli.md, section
"pyomo.dae models".  Points already in the ContinuousSet stay grid points
[GM-grad, eq. (3)].  The ODE constraints stay in the model and define the
derivative variables at every grid point (``dxdt[t] = f(x(t))``); the
transformation adds

* ``<dxdt>_odeest_<stage>[step, ...]`` stage variables (predictor ``y``,
  corrector ``yc``) for the predictor–corrector variants,
* ``<dxdt>_odeest_eq_<stage>[step, ...]`` the scheme equations, with f at grid
  points taken from the derivative variables and f at stage points from the ODE
  constraint's right-hand side with the states replaced by the stage values,
  and ḟ = D_x f·f from Pyomo's symbolic differentiation.

A derivative variable that is *fixed* when the transformation is applied is
data and needs no defining constraint (IDAES's
``fix_initial_conditions('steady-state')`` pattern).
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
from pyomo.common.config import ConfigBlock, ConfigValue, In, PositiveInt
from pyomo.core.base.transformation import Transformation, TransformationFactory
from pyomo.core.base.units_container import pint_available
from pyomo.core.expr.calculus.derivatives import Modes, differentiate
import pyomo.core.expr.numeric_expr as nx
from pyomo.common.numeric_types import native_numeric_types, native_types
from pyomo.core.expr.relational_expr import EqualityExpression
from pyomo.core.expr.visitor import ExpressionReplacementVisitor, identify_variables, replace_expressions
from pyomo.dae import ContinuousSet, DerivativeVar
from pyomo.dae.misc import expand_components
from pyomo.repn import generate_standard_repn

from ..discretization._grid import make_grid
from ..discretization.schemes import QMAX_RANGE, get_scheme
from ._block import _point_index

__all__ = ["AdamsTransformation", "EnrightTransformation", "DaeSchemeError", "ode_rhs", "problem_from_dae",
           "dae_solution"]


class DaeSchemeError(ValueError):
    """The pyomo.dae model cannot be discretized by the requested scheme."""


def _positive_float(v):
    v = float(v)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"expected a positive number, got {v}")
    return v


def _qmax(v):
    if isinstance(v, bool) or int(v) != v or not QMAX_RANGE[0] <= int(v) <= QMAX_RANGE[1]:
        raise ValueError(f"qmax must be an integer in [{QMAX_RANGE[0]}, {QMAX_RANGE[1]}], got {v!r}")
    return int(v)


def _config(name, variants, default):
    c = ConfigBlock(name)
    c.declare("wrt", ConfigValue(default=None, description="the ContinuousSet to discretize "
                                 "(default: the only one)"))
    c.declare("variant", ConfigValue(default=default, domain=In(variants),
                                     description=f"scheme variant: {', '.join(variants)}"))
    c.declare("qmax", ConfigValue(default=4, domain=_qmax,
                                  description="maximum corrector order Q_max (Q_i = min(i+1, Q_max-1))"))
    c.declare("steps_per_interval", ConfigValue(default=None, domain=PositiveInt,
                                                description="equal steps between existing points"))
    c.declare("max_step", ConfigValue(default=None, domain=_positive_float,
                                      description="largest step between existing points"))
    c.declare("initialize", ConfigValue(
        default="simulate", domain=_initialize,
        description="'simulate' (default): set the states, derivatives and stage variables "
                    "to the scheme's simulation at the current parameter values; False: "
                    "leave them as they are"))
    c.declare("scale_parameters", ConfigValue(
        default=True, domain=bool,
        description="put scaling_factor 1/|p0| (1 where p0 = 0) on every free parameter of "
                    "the ODEs that has none (default True; models that problem_from_dae "
                    "reads: an autonomous ODE in states and parameters)"))
    return c


def _initialize(v):
    if v in (False, None, "none"):
        return False
    if v in (True, "simulate"):
        return "simulate"
    raise ValueError(f"initialize must be 'simulate' or False, got {v!r}")


class _SchemeTransformation(Transformation):
    _family = ""
    _variants = {}

    def _apply_to(self, model, **kwds):
        cfg = self.CONFIG(kwds)
        cs = cfg.wrt
        sets = list(model.component_objects(ContinuousSet, descend_into=True))
        if cs is None:
            if len(sets) != 1:
                raise DaeSchemeError(f"the model has {len(sets)} ContinuousSets; say which with wrt=")
            cs = sets[0]
        if getattr(cs, "ctype", None) is not ContinuousSet:
            raise DaeSchemeError("wrt must be a ContinuousSet")
        if "scheme" in cs.get_discretization_info():
            raise DaeSchemeError(f"ContinuousSet '{cs.name}' is already discretized "
                                 f"({cs.get_discretization_info()['scheme']})")
        dvs = [dv for dv in model.component_objects(DerivativeVar, descend_into=True)
               if cs in dv.get_continuousset_list()]
        if not dvs:
            raise DaeSchemeError(f"the model has no DerivativeVar with respect to ContinuousSet "
                                 f"'{cs.name}': there is no ODE to discretize")
        scheme = get_scheme(self._variants[cfg.variant], cfg.qmax)
        pts = sorted(float(p) for p in cs)
        try:           # the model as an EstimationProblem, read before the grid is refined
            dae_problem = _problem_parts(model, cs)
        except (ValueError, TypeError) as err:   # DaeSchemeError, ProblemError, unsupported
            dae_problem = err                    # expression: no start values, no scaling
        sp = cfg.steps_per_interval
        if sp is None and cfg.max_step is None:
            sp = 1
        grid = make_grid(pts[1:], t0=pts[0], T=pts[-1], max_step=cfg.max_step,
                         steps_per_interval=sp)
        for tp in grid.t:
            if float(tp) not in cs:
                cs.add(float(tp))
        cs.set_changed(True)
        cs._fe = list(cs)
        info = cs.get_discretization_info()
        info["scheme"] = f"odeest.{self._family}:{cfg.variant}"
        info["nfe"] = len(grid.t) - 1
        expand_components(model)
        t = [float(v) for v in cs]                     # the ContinuousSet's own (float) keys
        batches = scheme.batches(np.array(t))
        for dv in dvs:
            if len(dv.get_continuousset_list()) != 1:
                raise DaeSchemeError(f"'{dv.name}': only first derivatives with respect to one "
                                     "ContinuousSet are supported")
        rhs = ode_rhs(model, cs)
        for dv in dvs:
            for d in dv.values():
                if id(d) not in rhs and not d.fixed:    # a fixed derivative is data
                    raise DaeSchemeError(
                        f"no ODE constraint defines '{d.name}' (the ODE must hold at every point "
                        "of the ContinuousSet, the first one included: do not skip it)")
        model._odeest_initialization = (
            _simulate_start(dae_problem, scheme, t, rhs) if cfg.initialize
            else "none (initialize=False)")
        ctx = _Context(model, cs, t, scheme, batches, rhs)
        for dv in dvs:
            ctx.make_stage_vars(dv)              # start values: the states at t_{i+1}
        for dv in dvs:
            ctx.make_equations(dv)
        for dv in dvs:
            dv.parent_block().reclassify_component_type(dv, pyo.Var)
        model._odeest_scheme = scheme
        model._odeest_grid = np.array(t)
        model._odeest_dae = None if isinstance(dae_problem, Exception) else dae_problem
        if cfg.scale_parameters and model._odeest_dae is not None:
            from ..nlp._plugin import add_scaling_factors
            add_scaling_factors(model, model._odeest_dae["parameters"])


@TransformationFactory.register("odeest.adams", doc="Adams predictor-corrector (variant='pc') or "
                                "implicit Adams-Moulton (variant='moulton') of variable order "
                                "and step, [GM-grad] eqs. (4)-(5)")
class AdamsTransformation(_SchemeTransformation):
    """Adams schemes of [GM-grad] for pyomo.dae models (see module docstring)."""

    CONFIG = _config("odeest.adams", ["pc", "moulton"], "pc")
    _family = "adams"
    _variants = {"pc": "adams_pc", "moulton": "adams_moulton"}


@TransformationFactory.register("odeest.enright", doc="Enright's second-derivative stiff scheme "
                                "(variant='implicit') or its semi-implicit predictor-corrector-"
                                "recorrector (variant='semi_implicit'), [GM-grad] eq. (6)")
class EnrightTransformation(_SchemeTransformation):
    """Enright schemes of [GM-grad] for pyomo.dae models (see module docstring)."""

    CONFIG = _config("odeest.enright", ["implicit", "semi_implicit"], "implicit")
    _family = "enright"
    _variants = {"implicit": "enright", "semi_implicit": "semi_implicit_enright"}


# ---------------------------------------------------------------------------
def _units_of(expr):
    """Pyomo units of ``expr``, or None when the model declares none (``dimensionless``) or
    cannot (without the optional ``pint`` package, where asking Pyomo would raise a
    DeferredImportError): a model without units gets the same equations either way."""
    if not pint_available:
        return None
    u = pyo.units.get_units(expr)
    return None if u is None or str(u) == "dimensionless" else u


def _split(key, loc):
    key = key if isinstance(key, tuple) else (key,)
    return key[loc], key[:loc] + key[loc + 1:]


def _join(tval, rest, loc):
    k = rest[:loc] + (tval,) + rest[loc:]
    return k[0] if len(k) == 1 else k


def _state_info(model, cs):
    """All derivative variables wrt cs: (dv, sv, loc) and the set of state VarData ids."""
    out = []
    for dv in model.component_objects(DerivativeVar, descend_into=True):
        if cs in dv.get_continuousset_list():
            sv = dv.get_state_var()
            out.append((dv, sv, sv._contset[cs] if sv.dim() > 1 else 0))
    return out


def ode_rhs(model, cs):
    """f of every (derivative VarData): {id(dxdt[...]): expression}, from the ODE constraints.

    Each derivative VarData must appear linearly, with a constant coefficient,
    in exactly one active constraint.  A constraint written ``dxdt == f`` gives ``f`` itself.
    """
    dvars = _derivative_vars(model)
    rhs = {}
    for con in model.component_data_objects(pyo.Constraint, active=True, descend_into=True):
        got = _rhs_of(con, dvars)
        if got is None:
            continue
        d, f = got
        if id(d) in rhs:
            raise DaeSchemeError(f"derivative '{d.name}' appears in two constraints")
        rhs[id(d)] = f
    return rhs


def _derivative_vars(model):
    """{id: VarData} of every derivative variable of the model."""
    comps = model.component_objects((DerivativeVar, pyo.Var), descend_into=True)  # transformed too
    return {id(d): d for dv in comps if isinstance(dv, DerivativeVar) for d in dv.values()}


def _check_only_odes(model):
    """:class:`DaeSchemeError` naming the active constraints that are not ODEs (problem_from_dae
    reads the ODEs only, so they would be dropped)."""
    dvars = _derivative_vars(model)
    others = [c.name for c in model.component_data_objects(pyo.Constraint, active=True,
                                                             descend_into=True)
              if _rhs_of(c, dvars) is None]
    if others:
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise DaeSchemeError(
            f"constraint(s) {', '.join(others[:3])}{more} are not ODEs, and problem_from_dae reads "
            "only the ODEs: deactivate them and declare path or parameter constraints with "
            "constraints=[PathConstraint(...), ParameterConstraint(...)] (fix an initial state "
            "instead of constraining it)")


def _rhs_of(con, dvars):
    """(derivative VarData, f) of one ODE constraint, None if it has no free derivative."""
    expr = con.expr
    if type(expr) is EqualityExpression:              # fast path: ``dxdt == f`` or ``f == dxdt``
        for side, other in ((0, 1), (1, 0)):
            d = expr.args[side]
            if id(d) in dvars and not d.fixed:
                f = expr.args[other]
                fv = () if type(f) in native_numeric_types else identify_variables(f, include_fixed=False)
                if not any(id(v) in dvars for v in fv):
                    return d, f
                break
    ds = [v for v in identify_variables(con.body, include_fixed=False) if id(v) in dvars]
    if not ds:
        return None
    if len(ds) > 1:
        raise DaeSchemeError(f"constraint '{con.name}' contains several derivatives "
                             f"({', '.join(d.name for d in ds)}); write one ODE per derivative")
    d = ds[0]
    repn = generate_standard_repn(con.body, compute_values=False, quadratic=False)
    ids = [id(v) for v in repn.linear_vars]
    if id(d) not in ids or (repn.nonlinear_vars and any(id(v) == id(d) for v in repn.nonlinear_vars)):
        raise DaeSchemeError(f"derivative '{d.name}' must appear linearly in '{con.name}'")
    c = pyo.value(repn.linear_coefs[ids.index(id(d))])
    rest = repn.constant
    for coef, v in zip(repn.linear_coefs, repn.linear_vars):
        if v is not d:
            rest = rest + coef * v
    if repn.nonlinear_expr is not None:
        rest = rest + repn.nonlinear_expr
    lo, up = con.lower, con.upper
    if lo is None or up is None or pyo.value(lo) != pyo.value(up):
        raise DaeSchemeError(f"ODE constraint '{con.name}' must be an equality")
    return d, (up - rest) / c


# Expression node types whose meaning is fully given by their type and their arguments (plus the
# function name for unary functions); rows of other types are rendered point by point.
_PLAIN_NODES = frozenset({
    nx.SumExpression, nx.LinearExpression, nx.NPV_SumExpression, nx.ProductExpression,
    nx.NPV_ProductExpression, nx.MonomialTermExpression, nx.DivisionExpression,
    nx.NPV_DivisionExpression, nx.PowExpression, nx.NPV_PowExpression, nx.NegationExpression,
    nx.NPV_NegationExpression, nx.AbsExpression, nx.NPV_AbsExpression,
    nx.UnaryFunctionExpression, nx.NPV_UnaryFunctionExpression})
_FUNCTION_NODES = (nx.UnaryFunctionExpression, nx.NPV_UnaryFunctionExpression)


class _NotPlain(Exception):
    pass


class _Source:
    """Straight-line Python source of one generated function: its lines and the objects it
    refers to (``K[n]``)."""

    def __init__(self):
        self.consts, self.lines = [], []

    def const(self, obj):
        self.consts.append(obj)
        return f"K[{len(self.consts) - 1}]"

    def function(self, name, args, result):
        src = f"def {name}({args}):\n" + "\n".join(self.lines) + f"\n    return {result}\n"
        env = {"K": self.consts}
        exec(compile(src, f"<odeest template {name}>", "exec"), env)
        return env[name]


def _compile(expr, slot):
    """A function ``build(L)`` returning ``expr`` with each leaf ``v`` of ``slot`` replaced by
    ``L[slot[id(v)]]`` (straight-line generated code, one node constructor call per node
    above a replaced leaf; subtrees without such leaves are shared), or None if ``expr``
    holds a node type this does not know (the caller then uses the replacement walker)."""
    src = _Source()

    def emit(e):                                   # -> (code, depends on L)
        if type(e) in native_types:
            return src.const(e), False
        if not e.is_expression_type():
            k = slot.get(id(e))
            return (f"L[{k}]", True) if k is not None else (src.const(e), False)
        if type(e) not in _PLAIN_NODES:
            raise _NotPlain
        parts = [emit(a) for a in e.args]
        if not any(dep for _, dep in parts):
            return src.const(e), False
        make = src.const(e.create_node_with_local_data)
        src.lines.append(f"    v{len(src.lines)} = {make}(({', '.join(c for c, _ in parts)},))")
        return f"v{len(src.lines) - 1}", True

    try:
        code, dep = emit(expr)
    except (_NotPlain, RecursionError):
        return None
    return src.function("build", "L", code) if dep else lambda L: expr


def _compile_matcher(exprs, slot):
    """A function ``match(bs, S)``: is ``bs[k]`` the same function as ``exprs[k]`` for every k,
    i.e. the same nodes (types, arities, function names), state leaves (``slot``, resp.
    ``S`` for ``bs``) of the same slot and every other leaf identical?  Generated code;
    None if an expression holds a node type outside ``_PLAIN_NODES``."""
    src = _Source()
    lines, const = src.lines, src.const

    def emit(a, var):
        ta = type(a)
        if ta in native_types:
            lines.append(f"    if type({var}) is not {const(ta)} or {var} != {const(a)}: return False")
            return
        if ta not in _PLAIN_NODES:
            if a.is_expression_type():
                raise _NotPlain
            k = slot.get(id(a))
            if k is not None:
                lines.append(f"    if S.get(id({var})) != {k}: return False")
            else:
                lines.append(f"    if {var} is not {const(a)} or id({var}) in S: return False")
            return
        args = a.args
        av = f"a{len(lines)}"
        lines.append(f"    if type({var}) is not {const(ta)}: return False")
        lines.append(f"    {av} = {var}.args")
        lines.append(f"    if len({av}) != {len(args)}: return False")
        if ta in _FUNCTION_NODES:
            lines.append(f"    if {var}.getname() != {a.getname()!r}: return False")
        for k, x in enumerate(args):
            emit(x, f"{av}[{k}]")

    try:
        for k, e in enumerate(exprs):
            emit(e, f"bs[{k}]")
    except (_NotPlain, RecursionError):
        return None
    return src.function("match", "bs, S", "True")


class _Template:
    """The right-hand sides at one grid point, reused at every point where they are the same
    function of that point's states: f, and ḟ = Σ_r ∂f/∂x_r·f_r, are rendered (and ḟ
    differentiated) once, then only have their state leaves replaced per row."""

    def __init__(self, ctx, j):
        self.ctx, self.j = ctx, j
        self.x = [col[j] for col in ctx.xcols]                       # states at the point
        self.d = [col[j] for col in ctx.dcols]                       # derivatives at the point
        self.slot = {id(v): s for s, v in enumerate(self.x)}
        self.f = [ctx.f_of(d) for d in self.d]
        self._fdot, self._built = {}, {}           # ḟ per (s, with_f); (slot, build) per key
        self._match = False

    def matches(self, j):
        """Are the right-hand sides at grid point ``j`` those of the template, state leaves
        matched by slot?  Never for a template of a node type outside ``_PLAIN_NODES``."""
        ctx = self.ctx
        if self._match is False:
            self._match = _compile_matcher(self.f, self.slot)
        bs = [ctx.rhs.get(id(col[j])) for col in ctx.dcols]
        if self._match is None or None in bs:
            return False
        return self._match(bs, {id(col[j]): s for s, col in enumerate(ctx.xcols)})

    def fdot(self, s, with_f):
        """ḟ_s at the template point, with f_r (``with_f``) or the derivative variables."""
        key = (s, with_f)
        if key not in self._fdot:
            total = 0
            for r, xr in enumerate(self.x):
                dfx = differentiate(self.f[s], wrt=xr, mode=Modes.sympy)
                if not (isinstance(dfx, (int, float)) and dfx == 0):
                    total = total + dfx * (self.f[r] if with_f else self.d[r])
            self._fdot[key] = total
        return self._fdot[key]

    def render(self, what, s, leaves):
        """Expression ``what`` of slot s (``'f'``: f, ``'fdot_f'``: ḟ with f_r, ``'fdot_d'``: ḟ
        with the derivative variables) with the template point's states replaced by
        ``leaves`` (and, for ``'fdot_d'``, its derivatives by ``leaves[S:]``)."""
        key = (what, s)
        expr = self.f[s] if what == "f" else self.fdot(s, what == "fdot_f")
        if key not in self._built:
            slot = dict(self.slot)
            if what == "fdot_d":
                slot.update({id(v): len(self.x) + r for r, v in enumerate(self.d)})
            self._built[key] = (slot, _compile(expr, slot))
        slot, build = self._built[key]
        if build is not None:
            return build(leaves)
        return self.ctx.replace(expr, {k: leaves[r] for k, r in slot.items()})


class _Context:
    """Shared data of one transformation: grid, scheme batches, f per derivative VarData.

    Every state (one per DerivativeVar index off the time set) is a *slot* ``s``;
    ``xcols[s][j]`` and ``dcols[s][j]`` are its state and derivative VarData at grid point ``j``.
    """

    _MAX_TEMPLATES = 8

    def __init__(self, model, cs, t, scheme, batches, rhs):
        self.cs, self.t, self.scheme, self.rhs = cs, t, scheme, rhs
        self.k = len(t) - 1
        self.h = [t[i + 1] - t[i] for i in range(self.k)]
        self.slots, self.xcols, self.dcols = [], [], []
        self.slot_of = {}                   # (id(dv), rest) -> slot
        self.rests = {}                     # id(dv) -> indices off the time set, sorted
        for dv, sv, loc in _state_info(model, cs):
            rests = self.rests[id(dv)] = sorted({_split(k, loc)[1] for k in dv.keys()}, key=repr)
            for r in rests:
                self.slot_of[(id(dv), r)] = len(self.slots)
                self.slots.append((dv, sv, loc, r))
                self.xcols.append([sv[_join(tv, r, loc)] for tv in t])
                self.dcols.append([dv[_join(tv, r, loc)] for tv in t])
        self.state_ids = {id(v) for col in self.xcols for v in col}
        self.stage_cols = {}            # (slot, stage) -> [stage VarData per step]
        # step i -> (batch, position in batch); per batch and stage: terms with float lists
        self.pos = [None] * self.k
        self.stages = []
        for b, batch in enumerate(batches):
            for r, i in enumerate(batch.steps.tolist()):
                self.pos[i] = (b, r)
            self.stages.append({name: ([(p, c.tolist()) for p, c in ft], [(p, c.tolist()) for p, c in dt])
                                for name, ft, dt in batch.stages})
        self.replacer = ExpressionReplacementVisitor(remove_named_expressions=False)
        self.templates = []
        self.template_at = {}           # grid index -> _Template or None
        self.checked = set()            # ids of right-hand sides checked for algebraic variables

    def replace(self, expr, subst):
        if not subst:
            return expr
        self.replacer.substitute = subst
        return self.replacer.walk_expression(expr)

    def make_stage_vars(self, dv):
        sv, rests = dv.get_state_var(), self.rests[id(dv)]
        for st in self.scheme.stage_names:
            if st == "x":
                continue
            index = [(i,) + r for i in range(self.k) for r in rests]
            v = pyo.Var(index, dense=True, units=_units_of(next(iter(sv.values()))))
            dv.parent_block().add_component(f"{dv.local_name}_odeest_{st}", v)
            for r in rests:
                s = self.slot_of[(id(dv), r)]
                xcol = self.xcols[s]
                col = [v[(i,) + r] for i in range(self.k)]
                for i, vd in enumerate(col):
                    start = xcol[i + 1].value
                    vd.set_value(0.0 if start is None else start)
                self.stage_cols[(s, st)] = col

    def f_of(self, d):
        try:
            return self.rhs[id(d)]
        except KeyError:
            raise DaeSchemeError(f"no ODE constraint defines '{d.name}' (the ODE must hold at "
                                 "every point of the ContinuousSet, the first one included)") from None

    def check_no_algebraic(self, expr, dv, what):
        if id(expr) in self.checked:
            return
        for v in identify_variables(expr, include_fixed=False):
            if id(v) in self.state_ids:
                continue
            comp = v.parent_component()
            if comp.is_indexed() and any(s is self.cs for s in comp.index_set().subsets()):
                raise DaeSchemeError(
                    f"{what} needs f at points that are not grid points, but the ODE for "
                    f"'{dv.name}' depends on the algebraic variable '{v.name}'; use "
                    "odeest.adams with variant='moulton'")
        self.checked.add(id(expr))

    def template(self, j):
        """The :class:`_Template` valid at grid point ``j``, or None (render that point's rows
        from its own right-hand sides)."""
        if j in self.template_at:
            return self.template_at[j]
        found = None
        if all(id(col[j]) in self.rhs for col in self.dcols):
            for tp in reversed(self.templates):
                if tp.matches(j):
                    found = tp
                    break
            if found is None and len(self.templates) < self._MAX_TEMPLATES:
                found = _Template(self, j)
                self.templates.append(found)
        self.template_at[j] = found
        return found

    def stage_leaves(self, st, i):
        """The stage ``st`` VarData of step i, per slot."""
        return [self.stage_cols[(s, st)][i] for s in range(len(self.slots))]

    def f_stage(self, s, st, i):
        """f of slot s at step i's stage ``st`` (the states at t_{i+1} replaced by the stage)."""
        tp, leaves = self.template(i + 1), self.stage_leaves(st, i)
        fexpr = self.f_of(self.dcols[s][i + 1]) if tp is None else tp.f[s]
        self.check_no_algebraic(fexpr, self.slots[s][0], "the predictor-corrector")
        if tp is not None:
            return tp.render("f", s, leaves)
        return self.replace(fexpr, {id(col[i + 1]): v for col, v in zip(self.xcols, leaves)})

    def fdot(self, s, j, stage="", i=None):
        """ḟ = Σ_r ∂f/∂x_r f_r of slot s at grid point j, or at step i's stage ``stage``
        (the states at t_{i+1} = t_j replaced by the stage values).

        ḟ = D_x f·f only for an autonomous f (∂f/∂t is not available from a pyomo.dae model):
        the right-hand sides must be the same function of the states at every point."""
        dv = self.slots[s][0]
        tp = self.template(j)
        if tp is None:
            for col in self.dcols:
                self.f_of(col[j])                   # explains a missing ODE
        if tp is None or tp is not self.templates[0]:
            t0 = self.t[self.templates[0].j] if self.templates else self.t[0]
            raise DaeSchemeError(
                f"Enright's scheme needs an autonomous right-hand side (ḟ = D_x f·f; ∂f/∂t is not "
                f"available from a pyomo.dae model), but the ODEs at t = {self.t[j]} are not those "
                f"at t = {t0} with the states renamed (time-dependent terms or inputs); use "
                "odeest.adams")
        self.check_no_algebraic(tp.f[s], dv, "Enright's scheme")
        if not stage:
            return tp.render("fdot_d", s, [col[j] for col in self.xcols] + [col[j] for col in self.dcols])
        return tp.render("fdot_f", s, self.stage_leaves(stage, i))

    def make_equations(self, dv):
        sv, rests = dv.get_state_var(), self.rests[id(dv)]
        # unit of the independent variable (state units / derivative units), so that the scheme
        # equations are unit-consistent when the model declares units (e.g. IDAES); None if none
        key0 = next(iter(dv.keys()))
        tu = _units_of(sv[key0] / dv[key0])
        pos, stages, hs = self.pos, self.stages, self.h

        for st_name in self.scheme.stage_names:
            def rule(b, i, *rest, st_name=st_name):
                s = self.slot_of[(id(dv), tuple(rest))]
                xcol, dcol = self.xcols[s], self.dcols[s]
                bi, r = pos[i]
                f_terms, fdot_terms = stages[bi][st_name]
                h = hs[i]
                terms, linear = [xcol[i]], True
                for pref, cl in f_terms:
                    c = cl[r]
                    if c == 0.0:
                        continue
                    if pref.kind == "stage":
                        fv, linear = self.f_stage(s, pref.stage, i), False
                    else:
                        fv = dcol[_point_index(i, pref)]
                        if tu is None:
                            terms.append(nx.MonomialTermExpression((h * c, fv)))
                            continue
                    terms.append((h * c) * fv if tu is None else (h * c * tu) * fv)
                for pref, dl in fdot_terms:
                    d = dl[r]
                    if d == 0.0:
                        continue
                    fd = self.fdot(s, _point_index(i, pref), pref.stage, i)
                    terms.append((h * h * d) * fd if tu is None else (h * h * d * tu * tu) * fd)
                    linear = False
                if tu is None:
                    val = nx.LinearExpression(terms) if linear else nx.SumExpression(terms)
                else:
                    val = sum(terms[1:], terms[0])
                target = xcol[i + 1] if st_name == "x" else self.stage_cols[(s, st_name)][i]
                return EqualityExpression((target, val))

            index = [(i,) + r for i in range(self.k) for r in rests]
            dv.parent_block().add_component(
                f"{dv.local_name}_odeest_eq_{st_name}",
                pyo.Constraint(index, rule=lambda b, i, *r, _rule=rule: _rule(b, i, *r)))


def _identifier(name):
    import re
    s = re.sub(r"\W+", "_", name).strip("_")
    return s if s and not s[0].isdigit() else f"v_{s}"


def _problem_parts(model, cs, parameters=None):
    """The pieces of :func:`problem_from_dae`: state names and VarData at the first
    point, the parameter VarData, and the problem without data (``T`` = last point)."""
    from ..problem._declaration import EstimationProblem, Parameter
    from ..symbolic._convert import pyomo_to_sympy
    import sympy

    rhs = ode_rhs(model, cs)
    states = _state_info(model, cs)
    pts = sorted(cs)
    t0, t1 = pts[0], pts[min(1, len(pts) - 1)]
    names, keys, x_at, f_at = [], [], {t0: [], t1: []}, {t0: [], t1: []}
    for dv, sv, loc in states:
        for key in dv.keys():
            tv, rest = _split(key, loc)
            if tv != t0:
                continue
            names.append(_identifier(sv.local_name if not rest
                                     else sv.local_name + "_" + "_".join(map(str, rest))))
            keys.append((dv, sv, rest, loc))
            for tt in (t0, t1):
                k2 = _join(tt, rest, loc)
                x_at[tt].append(sv[k2])
                try:
                    f_at[tt].append(rhs[id(dv[k2])])
                except KeyError:
                    raise DaeSchemeError(f"no ODE constraint defines '{dv[k2].name}'") from None
    if len(set(names)) != len(names):
        names = [f"x{i}" for i in range(len(names))]
    state_ids = {id(v) for tt in x_at for v in x_at[tt]}
    if parameters is None:
        parameters = list(_ode_parameters(f_at[t0] + f_at[t1], cs, state_ids))
    pnames = [_identifier(v.name) for v in parameters]
    params = [Parameter(n, 0.0 if v.value is None else float(v.value), v.lb, v.ub)
              for n, v in zip(pnames, parameters)]
    initial = {}
    for n, v in zip(names, x_at[t0]):
        if v.fixed:
            initial[n] = float(v.value)
        else:
            params.append(Parameter(f"{n}_0", 0.0 if v.value is None else float(v.value), v.lb, v.ub))
            initial[n] = f"{n}_0"

    # autonomy check: the rhs at t0 and t1 must agree symbolically
    xs = [sympy.Symbol(n, real=True) for n in names]
    us = [sympy.Symbol(n, real=True) for n in pnames]
    forms = {}
    for tt in (t0, t1):
        smap = {id(v): s for v, s in zip(x_at[tt], xs)}
        smap.update({id(v): s for v, s in zip(parameters, us)})
        forms[tt] = [sympy.simplify(pyomo_to_sympy(e, smap)) for e in f_at[tt]]
    if any(sympy.simplify(a - b) != 0 for a, b in zip(forms[t0], forms[t1])):
        raise DaeSchemeError("the right-hand side differs between time points (time-dependent "
                             "inputs); state the problem with EstimationProblem instead")

    def rhs_fn(x, u, t):
        subst = {id(v): x[n] for v, n in zip(x_at[t0], names)}
        subst.update({id(v): u[n] for v, n in zip(parameters, pnames)})
        return [replace_expressions(e, subst, remove_named_expressions=True) for e in f_at[t0]]

    return dict(names=names, keys=keys, parameters=parameters, params=params, initial=initial,
                rhs=rhs_fn, t0=float(t0), T=float(pts[-1]),
                problem=EstimationProblem(states=names, parameters=params, rhs=rhs_fn,
                                          initial=initial, data=None, t0=float(t0),
                                          T=float(pts[-1])))


def _ode_parameters(exprs, cs, state_ids):
    """Free VarData in ``exprs`` that are not states (the parameters); an algebraic
    variable (indexed by ``cs``) raises :class:`DaeSchemeError`."""
    seen = {}
    for e in exprs:
        for v in identify_variables(e, include_fixed=False):
            if id(v) in state_ids or id(v) in seen:
                continue
            comp = v.parent_component()
            if comp.is_indexed() and any(s is cs for s in comp.index_set().subsets()):
                raise DaeSchemeError(f"the ODEs depend on the algebraic variable '{v.name}'; "
                                     "the reduced-space backend needs an ODE")
            seen[id(v)] = v
    return seen.values()


def _simulate_start(parts, scheme, t, rhs):
    """Set the unfixed states at every grid point to the scheme's simulation at the
    current parameter values (the discrete equations then hold at the start, up to the
    stage variables' start values), and the derivative variables to f there.  Returns
    how the model was initialized (``model._odeest_initialization``)."""
    from ..discretization.discrete import DiscreteModel, SimulationError
    from ..discretization._grid import Grid
    if isinstance(parts, Exception):
        return f"none: no simulation ({parts})"
    P = parts["problem"]
    u = P.u0
    if any(v.value is None for v in parts["parameters"]):
        return "none: a parameter has no value"
    x0 = [v.value for v in (k[1][_join(parts["t0"], k[2], k[3])] for k in parts["keys"])]
    if any(v is None for v in x0):
        return "none: an initial state has no value"
    g = Grid(t=np.asarray(t, dtype=float), meas_times=np.zeros(0),
             I=np.zeros(len(t), dtype=int), J=np.zeros(0, dtype=int), restarts=())
    try:
        X = DiscreteModel(P, scheme, grid=g).simulate(u).X
    except SimulationError as err:
        return f"none: the simulation at the start failed ({err})"
    for s, (dv, sv, rest, loc) in enumerate(parts["keys"]):
        for i, tt in enumerate(t):
            v = sv[_join(tt, rest, loc)]
            if not v.fixed:
                v.set_value(float(X[i, s]))
    for dv, sv, rest, loc in parts["keys"]:         # f at the simulated states
        for tt in t:
            d = dv[_join(tt, rest, loc)]
            if not d.fixed and id(d) in rhs:
                d.set_value(float(pyo.value(rhs[id(d)])))
    return "simulate"


def problem_from_dae(model, data, wrt=None, parameters=None, **problem_kwargs):
    r"""An :class:`~pyomo_odeest.problem._declaration.EstimationProblem` from a pyomo.dae model.

    The states are the differential variables (one per DerivativeVar index),
    named by their Pyomo names made identifiers (``x[A]`` → ``x_A``); ``data``
    columns use these names.  The parameters are the free Vars not indexed by
    the ContinuousSet that appear in the ODEs (or the given list of VarData),
    with their current values and bounds.  The initial state is the fixed value
    of each state at the first point, or a parameter ``<state>_0`` if it is not
    fixed.  The right-hand side is read from the ODE constraints at the first
    point; it must be autonomous (the same at every point) — checked.  Call it
    on the model *before* transforming it.

    The model's active objective, if any, must be a weighted least-squares sum
    :math:`\sum w_{jo} (x_o(\tau_j) - \bar z_{jo})^2` over exactly the
    measurements of ``data``; its weights become the problem's ``weights``
    (``sigma=`` or ``weights=`` given as well must be proportional to them).  Any
    other objective, and active constraints other than the ODEs, raise a
    :class:`DaeSchemeError` that says what to do, so that nothing of the model is
    dropped (docs/cli.md, section "pyomo.dae models").
    """
    from ..problem._declaration import EstimationProblem
    sets = list(model.component_objects(ContinuousSet, descend_into=True))
    cs = wrt or (sets[0] if len(sets) == 1 else None)
    if cs is None:
        raise DaeSchemeError("say which ContinuousSet with wrt=")
    _check_only_odes(model)
    parts = _problem_parts(model, cs, parameters)
    make = lambda **kw: EstimationProblem(states=parts["names"], parameters=parts["params"],  # noqa: E731
                                          rhs=parts["rhs"], initial=parts["initial"], data=data,
                                          t0=parts["t0"], **kw)
    terms = _least_squares_terms(model, cs, parts)
    prob = make(**problem_kwargs)
    if terms is None:
        return prob
    fixed = {n for n, v in parts["initial"].items() if isinstance(v, float)}
    W = _objective_weights(prob, terms, fixed, parts["t0"])
    if "sigma" in problem_kwargs or "weights" in problem_kwargs:
        given = np.asarray(prob.weights, dtype=float)[prob.mask]
        ratio = W[prob.mask] / given
        if not np.allclose(ratio, ratio[0], rtol=1e-8, atol=0.0):
            raise DaeSchemeError(
                "the model's objective weights the measurements differently from the sigma= / "
                "weights= given (not proportional): give the weights in one place only "
                "(deactivate the objective, or drop sigma= / weights=)")
        return prob
    import pandas as pd
    weights = pd.DataFrame(np.where(prob.mask, W, 0.0), index=pd.Index(prob.meas_times),
                           columns=prob.obs_names)
    return make(weights=weights, **problem_kwargs)


def _least_squares_terms(model, cs, parts):
    r"""``{(state name, time): (w, y)}`` of the model's active objective
    :math:`\sum w (x(t) - y)^2`, or None without an active objective;
    :class:`DaeSchemeError` for any other objective."""
    objs = list(model.component_data_objects(pyo.Objective, active=True, descend_into=True))
    if not objs:
        return None
    advice = ("; problem_from_dae reads only a weighted least-squares objective "
              "sum w*(x[t] - y)**2 over the states: deactivate the objective "
              "(model.<objective>.deactivate()) and give the weights with weights= or sigma=")
    if len(objs) > 1:
        raise DaeSchemeError(f"the model has {len(objs)} active objectives "
                             f"({', '.join(o.name for o in objs)})" + advice)
    obj = objs[0]
    if obj.sense != pyo.minimize:
        raise DaeSchemeError(f"objective '{obj.name}' is maximized" + advice)
    repn = generate_standard_repn(obj.expr, quadratic=True, compute_values=True)
    if repn.nonlinear_expr is not None:
        raise DaeSchemeError(f"objective '{obj.name}' is not quadratic in the states" + advice)
    where = {}
    for (dv, sv, rest, loc), n in zip(parts["keys"], parts["names"]):
        for t in cs:
            where[id(sv[_join(t, rest, loc)])] = (n, float(t))

    def locate(v):
        try:
            return where[id(v)]
        except KeyError:
            raise DaeSchemeError(f"objective '{obj.name}' depends on '{v.name}', which is not a "
                                 "state of the ODEs at a point of the ContinuousSet "
                                 "(a penalty on parameters: use penalty=)" + advice) from None

    quad, lin = {}, {}
    for (v1, v2), c in zip(repn.quadratic_vars, repn.quadratic_coefs):
        if v1 is not v2:
            raise DaeSchemeError(f"objective '{obj.name}' has the cross term "
                                 f"{v1.name}*{v2.name} (correlated residuals)" + advice)
        k = locate(v1)
        quad[k] = quad.get(k, 0.0) + float(c)
    for v, c in zip(repn.linear_vars, repn.linear_coefs):
        k = locate(v)
        lin[k] = lin.get(k, 0.0) + float(c)
    out = {}
    for k, a in quad.items():
        if not a > 0:
            raise DaeSchemeError(f"objective '{obj.name}': the weight of {k[0]} at t={k[1]} is "
                                 f"{a} (not positive)" + advice)
        out[k] = (a, -lin.pop(k, 0.0) / (2 * a))
    if lin:
        (n, t), _ = next(iter(lin.items()))
        raise DaeSchemeError(f"objective '{obj.name}' is linear in {n} at t={t}" + advice)
    return out


def _objective_weights(prob, terms, fixed, t0):
    """The objective's weights on the problem's data layout (measurement time x observable);
    :class:`DaeSchemeError` when its terms and the measurements differ.  A measurement of
    a state fixed at ``t0`` (a constant term of the objective, whatever its weight) gets
    the median weight of its observable."""
    times = np.asarray(prob.meas_times, dtype=float)
    cols = {n: j for j, n in enumerate(prob.obs_names)}
    W = np.zeros(prob.mask.shape)
    values = prob.data.to_numpy(dtype=float)
    for (n, t), (w, y) in terms.items():
        i = np.flatnonzero(np.isclose(times, t, rtol=1e-12, atol=1e-12))
        if n not in cols or len(i) == 0 or not prob.mask[i[0], cols[n]]:
            raise DaeSchemeError(f"the model's objective fits {n} at t={t}, which data does not "
                                 "measure: give that measurement in data, or deactivate the "
                                 "objective and give the weights with weights= or sigma=")
        i, j = i[0], cols[n]
        if not np.isclose(values[i, j], y, rtol=1e-9, atol=1e-12 * max(1.0, abs(y))):
            raise DaeSchemeError(f"the model's objective fits {n} at t={t} to {y:.10g}, data "
                                 f"has {values[i, j]:.10g}: make them agree, or deactivate the "
                                 "objective")
        W[i, j] = w
    missing = prob.mask & (W == 0)
    at_t0 = np.isclose(times, t0, rtol=1e-12, atol=1e-12)
    for n in fixed:
        j = cols.get(n)
        if j is not None and missing[at_t0, j].any():
            w = W[:, j][W[:, j] > 0]
            W[at_t0 & missing[:, j], j] = np.median(w) if len(w) else 1.0
    missing = prob.mask & (W == 0)
    if missing.any():
        i, j = np.argwhere(missing)[0]
        raise DaeSchemeError(f"data measures {prob.obs_names[j]} at t={times[i]:g}, which the "
                             "model's objective does not fit: add the term to the objective, or "
                             "deactivate the objective and give the weights with weights= or "
                             "sigma=")
    return W


def dae_solution(model):
    """``(parts, t, X, u)`` of a transformed, solved pyomo.dae model: the problem parts
    of :func:`problem_from_dae` (``names``, ``params``, ``initial``, ``problem``, ...),
    the grid, the state values on it and the parameter vector (the parameters, then the
    initial values that are unknowns)."""
    parts = getattr(model, "_odeest_dae", None)
    if parts is None:
        raise DaeSchemeError("dae_result needs a model transformed by odeest.adams or "
                             "odeest.enright whose ODEs are an autonomous ODE in the states and "
                             "parameters (see problem_from_dae)")
    t = np.asarray(model._odeest_grid, dtype=float)
    X = np.array([[pyo.value(sv[_join(tt, rest, loc)]) for (_, sv, rest, loc) in parts["keys"]]
                  for tt in t], dtype=float)
    u = np.array([np.nan if v.value is None else float(v.value) for v in parts["parameters"]]
                 + [X[0, k] for k, n in enumerate(parts["names"])
                    if not isinstance(parts["initial"][n], float)], dtype=float)
    return parts, t, X, u
