r"""An SBML model as ordinary differential equations in sympy.

The model's reactions, rules and initial values become

.. math::

    \dot x = f(x, k, t),\qquad x(0) = x_0(k),

with ``x`` the species (and the parameters or compartments that carry a
rate rule) and ``k`` the model's constant parameters and compartment sizes.
For a species :math:`S` in compartment :math:`c` of size :math:`V_c`

.. math::

    \frac{d[S]}{dt} = \frac{1}{V_c}\sum_r \nu_{S,r}\, v_r
    \quad\text{(concentration, the default)},\qquad
    \frac{dn_S}{dt} = \sum_r \nu_{S,r}\, v_r
    \quad\text{(hasOnlySubstanceUnits)},

where :math:`v_r` is the kinetic law of reaction r (an amount per time,
the compartment size written inside it as SBML requires) and
:math:`\nu_{S,r}` the net stoichiometry.  Assignment rules are substituted
into every expression; function definitions are inlined; initial
assignments override the initial values.  The MathML is read from libsbml's
abstract syntax tree by :func:`math_to_sympy` (no other converter is
involved).

Every SBML feature the conversion cannot represent exactly raises
:class:`UnsupportedFeatureError` naming the feature and the file (the list:
docs/petab.md, section "Not supported").
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field

import sympy

__all__ = ["UnsupportedFeatureError", "SbmlOde", "read_sbml", "math_to_sympy", "TIME",
           "switch_times", "time_piecewise"]

#: The symbol of SBML's time ``csymbol``.
TIME = sympy.Symbol("t", real=True)

#: SBML's ``rateOf(x)`` until the model's rates are known (:func:`read_sbml` replaces it
#: by the rate of x).
RATE_OF = sympy.Function("rateOf", real=True)


class UnsupportedFeatureError(NotImplementedError):
    """A PEtab or SBML feature the importer does not support (the message names the
    feature and the file)."""


def _optional(module, needs):
    """Import ``module`` of the extra ``petab``; ``needs`` opens the message without it."""
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(f"{needs}: pip install 'pyomo_odeest[petab]'") from None


def _libsbml():
    return _optional("libsbml", "reading SBML needs python-libsbml")


def symbol(name):
    """The sympy symbol of an SBML or PEtab identifier (real, no other assumptions)."""
    return sympy.Symbol(str(name), real=True)


def math_to_sympy(ast, functions=None, where="", libsbml=None):
    """Sympy expression of a libsbml ``ASTNode``.

    ``functions`` maps function-definition ids to ``(arguments, body)``
    (sympy symbols and expression) that calls are inlined with.  ``where``
    names the file and element in error messages.
    """
    L = libsbml or _libsbml()
    functions = functions or {}
    leaves = {L.AST_NAME_TIME: TIME, L.AST_NAME_AVOGADRO: sympy.Float(6.02214076e23, 17),
              L.AST_CONSTANT_E: sympy.E, L.AST_CONSTANT_PI: sympy.pi,
              L.AST_CONSTANT_TRUE: sympy.true, L.AST_CONSTANT_FALSE: sympy.false}
    unary = _UNARY(L)
    nary = {L.AST_FUNCTION_MAX: sympy.Max, L.AST_FUNCTION_MIN: sympy.Min,
            L.AST_LOGICAL_AND: sympy.And, L.AST_LOGICAL_OR: sympy.Or,
            L.AST_LOGICAL_XOR: sympy.Xor, L.AST_LOGICAL_NOT: sympy.Not}
    rel = {L.AST_RELATIONAL_EQ: sympy.Eq, L.AST_RELATIONAL_NEQ: sympy.Ne,
           L.AST_RELATIONAL_GT: sympy.Gt, L.AST_RELATIONAL_GEQ: sympy.Ge,
           L.AST_RELATIONAL_LT: sympy.Lt, L.AST_RELATIONAL_LEQ: sympy.Le}
    refused = {L.AST_FUNCTION_DELAY: "delay",
               L.AST_LAMBDA: "lambda outside a function definition"}

    def unsupported(what):
        raise UnsupportedFeatureError(f"{where}: MathML '{what}' is not supported")

    def conv(node):
        ty = node.getType()
        kids = [conv(node.getChild(i)) for i in range(node.getNumChildren())] \
            if ty not in (L.AST_LAMBDA,) else None
        if ty == L.AST_INTEGER:
            return sympy.Integer(node.getInteger())
        if ty in (L.AST_REAL, L.AST_REAL_E):
            v = node.getReal()
            if not math.isfinite(v):
                return sympy.oo if v > 0 else (-sympy.oo if v < 0 else sympy.nan)
            return sympy.Float(v, 17)
        if ty == L.AST_RATIONAL:
            return sympy.Rational(node.getNumerator(), node.getDenominator())
        if ty == L.AST_NAME:
            return symbol(node.getName())
        if ty in leaves:
            return leaves[ty]
        if ty == L.AST_PLUS:
            return sympy.Add(*kids) if kids else sympy.Integer(0)
        if ty == L.AST_TIMES:
            return sympy.Mul(*kids) if kids else sympy.Integer(1)
        if ty == L.AST_MINUS:
            return -kids[0] if len(kids) == 1 else kids[0] - kids[1]
        if ty == L.AST_DIVIDE:
            return kids[0] / kids[1]
        if ty in (L.AST_POWER, L.AST_FUNCTION_POWER):
            return kids[0] ** kids[1]
        if ty == L.AST_FUNCTION_ROOT:
            return kids[-1] ** (1 / kids[0]) if len(kids) == 2 else sympy.sqrt(kids[0])
        if ty == L.AST_FUNCTION_LOG:
            # libsbml: log(base, x) with two children, log10 with one
            return sympy.log(kids[1], kids[0]) if len(kids) == 2 else sympy.log(kids[0], 10)
        if ty in unary:
            return unary[ty](kids[0])
        if ty in nary:
            return nary[ty](*kids)
        if ty == L.AST_FUNCTION_RATE_OF:
            if len(kids) != 1 or not isinstance(kids[0], sympy.Symbol) or kids[0] == TIME:
                unsupported(f"rateOf of {L.formulaToL3String(node)} (supported: rateOf of "
                            "a species, parameter or compartment id)")
            return RATE_OF(kids[0])
        if ty == L.AST_FUNCTION_PIECEWISE:
            pieces = [(kids[i], kids[i + 1]) for i in range(0, len(kids) - 1, 2)]
            if len(kids) % 2:
                pieces.append((kids[-1], True))
            return sympy.Piecewise(*pieces)
        if ty in rel:
            return sympy.And(*[rel[ty](a, b) for a, b in zip(kids[:-1], kids[1:])])
        if ty == L.AST_FUNCTION:
            name = node.getName()
            if name not in functions:
                unsupported(f"call of undefined function {name}")
            args, body = functions[name]
            if len(args) != len(kids):
                raise UnsupportedFeatureError(
                    f"{where}: function {name} takes {len(args)} arguments, got {len(kids)}")
            return body.xreplace(dict(zip(args, kids)))
        unsupported(refused.get(ty) or node.getName() or L.formulaToL3String(node))

    return conv(ast)


def time_piecewise(expr):
    """The :class:`sympy.Piecewise` sub-expressions of ``expr`` whose conditions name time."""
    return [pw for pw in sympy.sympify(expr).atoms(sympy.Piecewise)
            if any(TIME in sympy.sympify(c).free_symbols for _, c in pw.args)]


def switch_times(expr, where=""):
    """Sympy expressions of the times where a piecewise of ``expr`` may switch.

    Every relation of a condition must be linear in time, ``a*t + b  <op>  0`` with
    ``a`` and ``b`` free of time; its switching time is ``-b/a``.
    """
    out = []
    for pw in time_piecewise(expr):
        for _, cond in pw.args:
            for rel in sympy.sympify(cond).atoms(sympy.core.relational.Relational):
                crossing = time_crossing(rel)
                if crossing is False:
                    raise UnsupportedFeatureError(
                        f"{where}: piecewise condition {rel} is not linear in time (supported: "
                        "time compared with a constant, e.g. piecewise(0, time < t1, dose))")
                if crossing is not None and crossing[1] not in out:
                    out.append(crossing[1])
    return out


def time_crossing(rel):
    """``(a, T)`` of a relation ``a*t + b  <op>  0`` with ``a`` and ``b`` free of time,
    which switches at ``T = -b/a``; None for a relation without time, False for one that
    is not linear in time."""
    d = sympy.sympify(rel.lhs - rel.rhs)
    if TIME not in d.free_symbols:
        return None
    a = sympy.diff(d, TIME)
    if TIME in a.free_symbols or a == 0:
        return False
    return a, sympy.simplify(-d.subs(TIME, 0) / a)


def _resolve_rate_of(rhs, assigns, constants, path):
    """``rateOf(x)`` replaced by the rate of x: its right-hand side for a state, 0 for a
    constant, the time derivative along the solution for an assignment-rule target."""
    states = [symbol(k) for k in rhs]
    sub = {RATE_OF(symbol(k)): sympy.Integer(0) for k in constants}

    def total(e):
        """d e/dt along the solution, e free of rateOf."""
        return sympy.diff(e, TIME) + sum((sympy.diff(e, x) * plain[x.name] for x in states
                                          if e.has(x)), sympy.Integer(0))
    for _ in range(len(rhs) + len(assigns) + 2):
        plain = {k: v for k, v in rhs.items() if not v.has(RATE_OF)}
        sub.update({RATE_OF(symbol(k)): v for k, v in plain.items()})
        for k, v in assigns.items():
            if not v.has(RATE_OF) and all(x.name in plain for x in states if v.has(x)):
                sub[RATE_OF(symbol(k))] = total(v)
        new_rhs = {k: v.xreplace(sub) for k, v in rhs.items()}
        new_assigns = {k: v.xreplace(sub) for k, v in assigns.items()}
        if new_rhs == rhs and new_assigns == assigns:
            break
        rhs, assigns = new_rhs, new_assigns
    left = sorted({str(a) for e in list(rhs.values()) + list(assigns.values())
                   for a in sympy.sympify(e).atoms(RATE_OF)})
    if left:
        raise UnsupportedFeatureError(
            f"{path}: {', '.join(left)} is not supported (a rate that depends on itself "
            "through rateOf, or rateOf of an id that is not a species, parameter or "
            "compartment)")
    return rhs, assigns


def _UNARY(L):
    return {
        L.AST_FUNCTION_EXP: sympy.exp, L.AST_FUNCTION_LN: sympy.log,
        L.AST_FUNCTION_ABS: sympy.Abs, L.AST_FUNCTION_SIN: sympy.sin,
        L.AST_FUNCTION_COS: sympy.cos, L.AST_FUNCTION_TAN: sympy.tan,
        L.AST_FUNCTION_ARCSIN: sympy.asin, L.AST_FUNCTION_ARCCOS: sympy.acos,
        L.AST_FUNCTION_ARCTAN: sympy.atan, L.AST_FUNCTION_SINH: sympy.sinh,
        L.AST_FUNCTION_COSH: sympy.cosh, L.AST_FUNCTION_TANH: sympy.tanh,
        L.AST_FUNCTION_ARCSINH: sympy.asinh, L.AST_FUNCTION_ARCCOSH: sympy.acosh,
        L.AST_FUNCTION_ARCTANH: sympy.atanh, L.AST_FUNCTION_SEC: sympy.sec,
        L.AST_FUNCTION_CSC: sympy.csc, L.AST_FUNCTION_COT: sympy.cot,
        L.AST_FUNCTION_CEILING: sympy.ceiling, L.AST_FUNCTION_FLOOR: sympy.floor,
        L.AST_FUNCTION_FACTORIAL: sympy.factorial,
    }


@dataclass
class SbmlOde:
    r"""The ODE of an SBML model.

    Attributes
    ----------
    states : list of str
        Species ids, then ids of parameters and compartments with a rate rule.
    rhs : dict state -> sympy expression
        :math:`f` in the state symbols, the constant symbols and :data:`TIME`.
    initial : dict state -> sympy expression
        :math:`x_0`, in the constant symbols (initial assignments applied).
    constants : dict id -> float
        Values of the constant parameters and compartment sizes (the symbols
        ``k`` that PEtab may override).
    assignments : dict id -> sympy expression
        Assignment-rule targets in terms of states and constants (substituted
        already in ``rhs``; observables may name them).
    species_compartment : dict species -> compartment id
    amount_species : set of str
        Species whose symbol is an amount (``hasOnlySubstanceUnits``).
    path : str
        The file read.
    elements : dict
        The formula of every SBML element read (``"kinetic law of R1"``,
        ``"assignment rule for x"``, ``"initial assignment of x"``, ...) as written,
        before substitutions: :meth:`named` finds the elements of a construct.
    """

    states: list
    rhs: dict
    initial: dict
    constants: dict
    assignments: dict
    species_compartment: dict = field(default_factory=dict)
    amount_species: set = field(default_factory=set)
    path: str = ""
    elements: dict = field(default_factory=dict)

    def named(self, construct):
        """The SBML elements (``"kinetic law of R1"``, ``"assignment rule for x"``, ...)
        whose formula, as written, contains ``construct`` (a sympy sub-expression, or one
        of its kind)."""
        hits = [w for w, e in self.elements.items() if sympy.sympify(e).has(construct)]
        return hits or [w for w, e in self.elements.items()
                        if sympy.sympify(e).has(construct.func)]

    def substitute_assignments(self, expr):
        """``expr`` with every assignment-rule target replaced by its formula."""
        return expr.xreplace({symbol(k): v for k, v in self.assignments.items()})


def _time_switched_events(m, conv, states, rhs, assigns, constants, path, L):
    r"""SBML events that fire at given times and set quantities that nothing else
    changes, as piecewise functions of time: ``{X: X_eff(t)}``.

    An event whose trigger is time passing a threshold, :math:`t \ge T` (or
    :math:`t > T`; :math:`T` plus the event's delay, numbers or constants of the model),
    and whose assignments set a quantity with no rate of its own (a boundary species, a
    parameter without rules) to values free of states and time, makes that quantity
    piecewise constant in time: after the events that set X at times
    :math:`T_1, \dots, T_n`, X takes the value of the latest event that has fired,
    before them its own value.  The substitution ``X -> X_eff(t)`` in the rates and
    rules is then exact, and the package's switching inputs carry it
    (:func:`switch_times`).  Ties fire in the document's order (the later wins); an event
    whose trigger is true at :math:`t_0 = 0` fires there unless its ``initialValue`` is
    true, as SBML specifies.  Any other event (a threshold of a state, an assignment that
    changes a state the reactions change or depends on states) raises
    :class:`UnsupportedFeatureError` naming it.
    """
    state_syms = {symbol(k) for k in states}
    asub = {symbol(k): v for k, v in assigns.items()}
    fired = {}                      # X -> [(T, value, checks initialValue)]

    def refuse(ev, cond, why):
        raise UnsupportedFeatureError(
            f"{path}: SBML event {ev.getId() or 'unnamed'} (when {cond}, sets "
            + ", ".join(a.getVariable() for a in ev.getListOfEventAssignments())
            + f") is not supported: {why} (supported: events at times given by numbers or "
            "constants that set boundary species or parameters to values free of states)")

    for n, ev in enumerate(m.getListOfEvents()):
        name = ev.getId() or f"event {n + 1}"
        trig = ev.getTrigger()
        if trig is None or trig.getMath() is None:
            raise ValueError(f"{path}: SBML event {name} has no trigger")
        cond = L.formulaToL3String(trig.getMath())
        rel = sympy.sympify(conv(trig.getMath(), f"trigger of event {name}")).xreplace(asub)
        if not isinstance(rel, (sympy.GreaterThan, sympy.StrictGreaterThan,
                                sympy.LessThan, sympy.StrictLessThan)):
            refuse(ev, cond, "its trigger is not one comparison of time with a threshold")
        dep = rel.free_symbols & state_syms
        if dep:
            refuse(ev, cond, f"its trigger depends on the states {sorted(x.name for x in dep)} "
                   "(a state-triggered event)")
        crossing = time_crossing(rel)
        if not crossing or not crossing[0].is_number:
            refuse(ev, cond, "its trigger is not linear in time")
        a, T = crossing
        if (a > 0) != isinstance(rel, (sympy.GreaterThan, sympy.StrictGreaterThan)):
            refuse(ev, cond, "its trigger is true before a time and false after it")
        if ev.isSetDelay() and ev.getDelay().getMath() is not None:
            delay = conv(ev.getDelay().getMath(), f"delay of event {name}").xreplace(asub)
            if (delay.free_symbols & state_syms) or TIME in delay.free_symbols:
                refuse(ev, cond, "its delay depends on states or time")
            T = T + delay
        for asg in ev.getListOfEventAssignments():
            X = asg.getVariable()
            if X in states and sympy.sympify(rhs[X]) != 0:
                refuse(ev, cond, f"it sets {X}, which the reactions or a rate rule change "
                       "(a jump of the state)")
            if X not in states and X not in constants:
                refuse(ev, cond, f"it sets {X}, which is not a species or parameter with a "
                       "value of its own (an assignment-rule target or a compartment)")
            v = conv(asg.getMath(), f"assignment of event {name} to {X}").xreplace(asub)
            if (v.free_symbols & state_syms) or TIME in v.free_symbols:
                refuse(ev, cond, f"the value it gives {X} depends on states or time")
            checks = trig.isSetInitialValue() and trig.getInitialValue()
            fired.setdefault(X, []).append((T, v, checks))
    targets = {symbol(X) for X in fired}

    def fires(T, checks):
        return sympy.And(TIME >= T, *([T > 0] if checks else []))
    out = {}
    for X, evs in fired.items():
        if any(sympy.sympify(T).free_symbols & targets or v.free_symbols & targets
               for T, v, _ in evs):
            raise UnsupportedFeatureError(
                f"{path}: SBML events set {X} at a time or to a value that other events change "
                "(supported: times and values of numbers, constants or parameters)")
        pieces = []
        for i, (T, v, checks) in enumerate(evs):
            # event i holds from T on, until a later event of the same target fires
            later = [sympy.Not(sympy.And(fires(T2, c2), T2 >= T if j > i else T2 > T))
                     for j, (T2, _, c2) in enumerate(evs) if j != i]
            pieces.append((v, sympy.And(fires(T, checks), *later)))
        out[symbol(X)] = sympy.Piecewise(*pieces, (symbol(X), True))
    return out


def _continuous_across(pw, state_syms):
    """True when the piecewise ``pw`` is continuous across every relation of its conditions
    that names states: on the surface where a relation holds with equality (solved for one
    state it names, linearly), every piece takes the same value.  Such a rate has a kink,
    not a jump, and needs no event handling."""
    values = [v for v, _ in pw.args]
    for _, cond in pw.args:
        for rel in sympy.sympify(cond).atoms(sympy.core.relational.Relational):
            d = sympy.sympify(rel.lhs - rel.rhs)
            named = sorted(d.free_symbols & state_syms, key=str)
            if not named:
                continue
            s = named[0]
            a = sympy.diff(d, s)
            if s in a.free_symbols or a == 0:
                return False
            on = {s: s - d / a}             # d = 0 on the surface (d linear in s)
            first = values[0].xreplace(on)
            if any(sympy.simplify(v.xreplace(on) - first) != 0 for v in values[1:]):
                return False
    return True


def _some(names, n=8):
    names = list(names)
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def read_sbml(path) -> SbmlOde:
    """Read an SBML file into an :class:`SbmlOde`."""
    L = _libsbml()
    path = str(path)
    doc = L.readSBMLFromFile(path)
    errors = [doc.getError(i) for i in range(doc.getNumErrors())
              if doc.getError(i).getSeverity() >= L.LIBSBML_SEV_ERROR]
    if errors:
        raise ValueError(f"{path}: SBML errors: " + "; ".join(e.getMessage().strip() for e in errors[:3]))
    m = doc.getModel()
    if m is None:
        raise ValueError(f"{path}: no SBML model")

    def unsupported(what):
        raise UnsupportedFeatureError(f"{path}: {what} is not supported")

    if m.isSetConversionFactor():
        unsupported("a model conversion factor")

    functions = {}
    for fd in m.getListOfFunctionDefinitions():
        lam = fd.getMath()
        if lam is None or lam.getType() != L.AST_LAMBDA:
            unsupported(f"function definition {fd.getId()} without a lambda")
        nargs = lam.getNumChildren() - 1
        args = [symbol(lam.getChild(i).getName()) for i in range(nargs)]
        body = math_to_sympy(lam.getChild(nargs), functions, f"{path}: function {fd.getId()}", L)
        functions[fd.getId()] = (args, body)

    elements = {}

    def conv(ast, what):
        if ast is None:
            raise ValueError(f"{path}: {what} has no math")
        out = elements[what] = math_to_sympy(ast, functions, f"{path}: {what}", L)
        return out

    rate_rules, assign_rules = {}, {}
    for r in m.getListOfRules():
        if r.isAlgebraic():
            unsupported("algebraic rules")
        target = r.getVariable()
        if r.isRate():
            rate_rules[target] = conv(r.getMath(), f"rate rule for {target}")
        else:
            assign_rules[target] = conv(r.getMath(), f"assignment rule for {target}")

    comp_size = {}
    for c in m.getListOfCompartments():
        cid = c.getId()
        if cid in rate_rules or cid in assign_rules or not c.getConstant():
            unsupported(f"a compartment of variable size ({cid})")
        # a compartment of dimension 0, or without a size, has size 1
        comp_size[cid] = c.getSize() if c.isSetSize() and c.getSpatialDimensions() != 0 else 1.0

    constants = dict(comp_size)
    params_with_rate = []
    for p in m.getListOfParameters():
        pid = p.getId()
        if pid in assign_rules:
            continue
        if pid in rate_rules:
            params_with_rate.append(pid)
        constants[pid] = p.getValue() if p.isSetValue() else math.nan

    species, amount_species, species_compartment, init = [], set(), {}, {}
    for s in m.getListOfSpecies():
        sid = s.getId()
        if s.isSetConversionFactor():
            unsupported(f"a conversion factor on species {sid}")
        comp = s.getCompartment()
        species_compartment[sid] = comp
        if s.getHasOnlySubstanceUnits():
            amount_species.add(sid)
        V = symbol(comp)
        if s.isSetInitialConcentration():
            x0 = sympy.Float(s.getInitialConcentration(), 17)
            if sid in amount_species:
                x0 = x0 * V
        elif s.isSetInitialAmount():
            x0 = sympy.Float(s.getInitialAmount(), 17)
            if sid not in amount_species:
                x0 = x0 / V
        else:
            x0 = sympy.nan
        if sid in assign_rules:
            continue
        if s.getConstant() and sid not in rate_rules:
            # a constant species is a constant of the model (its value may be overridden)
            constants[sid] = float(x0.subs({symbol(c): v for c, v in comp_size.items()}))
            continue
        species.append(sid)
        init[sid] = x0

    # initial assignments (may refer to constants and, through rules, to other initial
    # values); one to a constant fixes that constant's value for the whole simulation:
    # it becomes an assignment of constants (in terms of the species' initial values)
    ia = {a.getSymbol(): conv(a.getMath(), f"initial assignment of {a.getSymbol()}")
          for a in m.getListOfInitialAssignments()}
    for target, e in ia.items():
        if target in init:
            init[target] = e        # in the species' own units (amount or concentration)
    species_at_0 = {symbol(k): v for k, v in init.items()}
    for target, e in ia.items():
        if target in init or target in params_with_rate:
            continue
        if target in constants:
            if TIME in e.free_symbols:
                e = e.subs(TIME, 0)
            assign_rules[target] = e.xreplace(species_at_0)
            constants.pop(target)
        elif target not in assign_rules:
            raise ValueError(
                f"{path}: the initial assignment names {target!r}, which is not a species, "
                f"parameter or compartment of the model (was it renamed? model ids: "
                f"{_some(species + params_with_rate + sorted(constants))}); correct the "
                "initial assignment's symbol")

    # assignment rules: expressions in states and constants (resolve chains)
    assigns = dict(assign_rules)
    for _ in range(len(assigns) + 1):
        subs = {symbol(k): v for k, v in assigns.items()}
        new = {k: v.xreplace(subs) for k, v in assigns.items()}
        if new == assigns:
            break
        assigns = new
    else:  # pragma: no cover - SBML forbids cycles
        unsupported("cyclic assignment rules")
    asub = {symbol(k): v for k, v in assigns.items()}

    # reactions
    flux = {sid: sympy.Integer(0) for sid in species}
    for r in m.getListOfReactions():
        rid = r.getId()
        kl = r.getKineticLaw()
        if kl is None:
            unsupported(f"reaction {rid} without a kinetic law")
        rate = conv(kl.getMath(), f"kinetic law of {rid}")
        local = {symbol(p.getId()): sympy.Float(p.getValue(), 17)
                 for p in list(kl.getListOfParameters()) + list(kl.getListOfLocalParameters())}
        rate = rate.xreplace(local)
        for refs, sign in ((r.getListOfReactants(), -1), (r.getListOfProducts(), 1)):
            for ref in refs:
                sid = ref.getSpecies()
                if hasattr(ref, "isSetStoichiometryMath") and ref.isSetStoichiometryMath():
                    unsupported(f"stoichiometryMath in reaction {rid}")
                if ref.isSetId() and (ref.getId() in rate_rules or ref.getId() in assign_rules):
                    unsupported(f"a stoichiometry that changes in time (reaction {rid})")
                sp = m.getSpecies(sid)
                if sp.getBoundaryCondition() or sid not in flux:
                    continue
                flux[sid] = flux[sid] + sign * sympy.Float(ref.getStoichiometry(), 17) * rate
    rhs = {}
    for sid in species:
        if sid in rate_rules:
            rhs[sid] = rate_rules[sid]
        elif sid in amount_species:
            rhs[sid] = flux[sid]
        else:
            rhs[sid] = flux[sid] / symbol(species_compartment[sid])
    for pid in params_with_rate:
        rhs[pid] = rate_rules[pid]
        init[pid] = ia[pid] if pid in ia else symbol(pid + "__initial")
        constants[pid + "__initial"] = constants.pop(pid)
    states = species + params_with_rate
    rhs = {k: sympy.sympify(v).xreplace(asub).xreplace(asub) for k, v in rhs.items()}
    if any(sympy.sympify(e).has(RATE_OF) for e in list(rhs.values()) + list(assigns.values())):
        rhs, assigns = _resolve_rate_of(rhs, assigns, constants, path)

    if m.getNumEvents():
        events = _time_switched_events(m, conv, states, rhs, assigns, constants, path, L)
        rhs = {k: v.xreplace(events) for k, v in rhs.items()}
        assigns = {k: sympy.sympify(v).xreplace(events) for k, v in assigns.items()}

    # initial values may name other states (their initial values) or assignment targets
    state_init = {symbol(s): v for s, v in init.items()}
    for _ in range(len(states) + 2):
        new = {s: sympy.sympify(v).xreplace(asub).xreplace(state_init) for s, v in init.items()}
        if new == init:
            break
        init = new
        state_init = {symbol(s): v for s, v in init.items()}
    known = {symbol(k) for k in states} | {symbol(k) for k in constants} | {TIME}
    for what, exprs in (("the rate of", rhs), ("the initial value of", init),
                        ("the assignment rule for", assigns)):
        for k, e in exprs.items():
            bad = sorted(s.name for s in sympy.sympify(e).free_symbols - known)
            if bad:
                raise ValueError(
                    f"{path}: {what} {k} names {bad}, which are not defined in the model "
                    "(no species, parameter, compartment or rule has these ids); define them "
                    "or correct the formula")
    state_syms = {symbol(k) for k in states}
    for k, e in rhs.items():
        for pw in sympy.sympify(e).atoms(sympy.Piecewise):
            dep = sorted(x.name for _, c in pw.args for x in sympy.sympify(c).free_symbols
                         & state_syms)
            if dep and not _continuous_across(pw, state_syms):
                unsupported(f"a piecewise in the rate of {k} whose condition depends on the "
                            f"states {dep} and whose value jumps there (a switch at a "
                            "state-dependent time, i.e. an event; supported: switches at times "
                            "given by constants, and piecewise functions of the states that "
                            "are continuous, such as piecewise(x - a, x > a, 0))")
        switch_times(e, f"{path}: the rate of {k}")
    for s, v in init.items():
        if v.has(sympy.nan):
            raise ValueError(f"{path}: species {s} has no initial value")
    # SBML initial values hold at time 0 (a piecewise of time takes its value there)
    init = {s: sympy.sympify(v).subs(TIME, 0) for s, v in init.items()}
    return SbmlOde(states=states, rhs=rhs, initial=init, constants=constants,
                   assignments=assigns, species_compartment=species_compartment,
                   amount_species=amount_species, path=path, elements=elements)
