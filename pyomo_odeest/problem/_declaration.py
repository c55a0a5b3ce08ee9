r"""The inverse problem, as the user states it [GM-grad, eq. (1)].

.. math::

    \min_u\; J(u) = \sum_{i=1}^{s} \varphi_i\big(z(\tau_i), \bar z_i\big)
    \quad\text{s.t.}\quad \dot x = f(x, u, t),\; x(0) = l(u),\; z = g(x, u, t).

Example
-------
>>> import pyomo.environ as pyo
>>> from pyomo_odeest import EstimationProblem, Parameter
>>> prob = EstimationProblem(
...     states=["x1", "x2"],
...     parameters=[Parameter("p1", 0.5, lb=0), Parameter("p2", 0.5)],
...     rhs=lambda x, u, t: [-u.p1 * x.x1 + u.p2 * x.x1 * x.x2, x.x2 - x.x1 * x.x2],
...     initial={"x1": 0.4, "x2": 1.0},
...     data=df)                                         # doctest: +SKIP

``f``, ``g`` and ``l`` are written as ordinary Python on Pyomo objects
(``x.x1`` or ``x["x1"]``, ``u.p1``, ``t``; functions from ``pyomo.environ``
such as ``pyo.exp``).  They are called once on scratch variables and kept as
sympy expressions: the one symbolic source from which the Pyomo block, the
simulators and every derivative are produced.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Mapping

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import sympy
from sympy.core.function import AppliedUndef

from ..symbolic._convert import pyomo_to_sympy
from ..symbolic._structure import UnsupportedExpressionError
from ..symbolic._vectorfn import VectorFn, sparse_jacobian
from ._components import (TIME_NAME, Experiment, GaussianNLL, LeastSquares, Parameter,
                         ParameterConstraint, PathConstraint, Preequilibration, _check_names,
                         _Namespace)
from ._data import _check_inputs, _switch_times, _to_wide, _weights
from ._preequilibration import Preequilibrated
from ._several import _SHARED_NUMERIC, SeveralExperiments
from ._validation import ProblemError, as_data_frame, check_weights
from ..symbolic import lambdify

__all__ = ["Parameter", "Experiment", "Preequilibration", "PathConstraint", "ParameterConstraint",
           "require_no_constraints", "require_single_experiment", "require_no_inputs",
           "EstimationProblem", "LeastSquares", "GaussianNLL",
           "ProblemError"]


_NONFINITE = (sympy.nan, sympy.zoo, sympy.oo, -sympy.oo)


def _finite_constants(e, what):
    """``e``, refused if it holds a NaN or infinite constant (sympy absorbs ``x + nan``
    into ``nan``: a row that would evaluate to NaN everywhere)."""
    if any(e.has(c) for c in _NONFINITE):
        raise ProblemError(f"{what} contains a NaN or infinite number ({e}); every number in "
                           f"it must be finite (a NaN often comes from a missing value or a "
                           f"0/0 in the code that builds it)")
    return e


def _where(fn) -> str:
    """``name, file:line`` of a user function (what can be found of it)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is None:
        return f"{name!s}"
    return f"{name}, {code.co_filename}:{code.co_firstlineno}"


def _call_user(fn, what, *args):
    """``fn(*args)`` for a user function called on the symbolic states, parameters and
    time; an error from numeric code that cannot take them is explained."""
    from pyomo.common.errors import PyomoException
    try:
        return fn(*args)
    except RecursionError as err:
        raise ProblemError(
            f"{what} ({_where(fn)}) recursed without end: calling it on the symbolic states, "
            f"parameters and t raised RecursionError ({err}); it calls itself (directly or "
            f"through another function) with no case that stops, or builds an expression "
            f"nested too deep for Python's stack") from None
    except (TypeError, PyomoException, ValueError) as err:
        text = str(err)
        if "ufunc" in text:
            hint = ("applies a numpy function (np.exp, np.log, np.sqrt, ...) to a state, "
                    "parameter or t; use the Pyomo function instead (pyo.exp, pyo.log, "
                    "pyo.sqrt, pyo.sin, ... from pyomo.environ)")
        elif "Implicit conversion" in text or "to float" in text:
            hint = ("gives a state, parameter or t to a function that needs a plain number "
                    "(math.exp, float(), sympy.exp, ...); use the Pyomo functions (pyo.exp, "
                    "pyo.log, ... from pyomo.environ)")
        elif "to bool" in text:
            hint = ("compares a state, parameter or t in Python (if, max, min, np.maximum, "
                    "...): the model must be one expression; write a smooth form instead, "
                    "e.g. max(a, 0) as (a + pyo.sqrt(a**2 + eps)) / 2")
        else:
            hint = (f"failed on the symbolic states, parameters and t "
                    f"({type(err).__name__}: {text.splitlines()[0] if text else ''}); it must "
                    f"build an expression from them with +, -, *, /, ** and pyomo.environ "
                    f"functions")
        raise ProblemError(f"{what} {hint}") from err


class EstimationProblem(SeveralExperiments, Preequilibrated):
    r"""An ODE inverse problem, [GM-grad] eq. (1).

    Parameters
    ----------
    states : sequence of str
        Names of the state components x.
    parameters : sequence of Parameter (or of names)
        The parameters u; fixed ones keep their value.
    rhs : callable ``rhs(x, u, t)``
        Returns one expression per state (a sequence in state order or a
        mapping by state name).
    initial : mapping state -> number | parameter name | callable(u)
        The initial state x(t0) = l(u).  Initial conditions may be
        parameters: pass the parameter's name, or a function of ``u``.
        Required, except with ``experiments`` whose own ``initial`` give
        every state.
    data : pandas.DataFrame or None (default)
        *Wide*: index = measurement times, one column per observed quantity,
        NaN = not measured.  *Long*: columns ``time``, ``name`` (or
        ``observable``) and ``value`` (optional ``sigma``).  ``None`` states
        the dynamics only (no misfit; ``T`` is then required), e.g. for the
        intervals of multiple shooting; with ``experiments`` the data are
        the experiments'.
    observe : None, sequence of state names, or callable ``g(x, u, t)``
        Observation function; a callable returns a mapping name -> expression.
        Default: the states named by the data columns.
    sigma : float, mapping name -> float, or DataFrame like ``data``
        Standard deviations of the measurements (weights 1/σ²).
    weights : float, mapping or DataFrame
        Alternative to ``sigma``: weights of the squared residuals.
    loss : LeastSquares() (default) or GaussianNLL(cov)
    penalty : callable ``penalty(u)``, optional
        A term R(u) added to the objective (regularization, a prior, the
        initial-state and conservation terms of [SEIRD] eq. (6) when the
        initial state is a parameter).  Written on Pyomo objects like ``rhs``.
    t0 : float
        Initial time (default 0).
    T : float
        Final time (default: the last measurement time).
    experiments : sequence of Experiment, optional
        Several experiments sharing the parameters (then ``data=None``); see
        :class:`Experiment`.
    constraints : sequence of PathConstraint / ParameterConstraint, optional
        :math:`c(x, u, t) \le 0` at grid points or measurement times, and
        :math:`r(u) \le 0`; with experiments a path constraint holds in each.
    inputs : mapping name -> Input, optional
        Inputs given as data (:mod:`pyomo_odeest.problem._inputs`), written
        ``u.<name>`` inside ``rhs`` and ``observe``, standing for their value
        at ``t``; the grid contains every switching time.
    preequilibration : Preequilibration, optional
        The initial state is a steady state of the dynamics (under other
        parameter values, from another start); see :class:`Preequilibration`.
        With experiments: the default of each :class:`Experiment`.
    """

    def __init__(self, states, parameters, rhs, initial=None, data=None, observe=None,
                 sigma=None, weights=None, loss=None, t0=0.0, T=None, name="ode", penalty=None,
                 experiments=None, inputs=None, constraints=None, preequilibration=None):
        self.name = name
        self.experiments = self.experiment_problems = None
        if experiments is not None:
            self._init_experiments(states, parameters, rhs, initial, data, observe, sigma,
                                   weights, loss, t0, T, penalty, experiments, inputs,
                                   constraints, preequilibration)
            return
        local = [p.name for p in parameters if isinstance(p, Parameter) and p.local]
        if local:
            raise ProblemError(f"parameters {local} are local=True, which needs several "
                               f"experiments (experiments=[Experiment(...), ...])")
        self.states = _check_names(states, "state")
        if not self.states:
            raise ProblemError("at least one state is required")
        self.parameters = [p if isinstance(p, Parameter) else Parameter(str(p))
                           for p in parameters]
        pnames = _check_names(self.parameter_names, "parameter")
        clash = set(pnames) & set(self.states)
        if clash:
            raise ProblemError(f"names used both as state and parameter: {sorted(clash)}")
        self.t0 = float(t0)
        if not np.isfinite(self.t0):
            raise ProblemError("t0 must be finite")
        self.loss = LeastSquares() if loss is None else loss
        if not isinstance(self.loss, (LeastSquares, GaussianNLL)):
            raise ProblemError("loss must be LeastSquares() or GaussianNLL(cov)")

        scratch, symbol_of, xs = self._symbols(pnames)
        self.inputs = _check_inputs(inputs, self.states, pnames)
        in_vars = self._input_vars(scratch, symbol_of)
        us = _Namespace("parameter", {**{p: scratch.u[p] for p in pnames}, **in_vars})
        self._scratch = (scratch, xs, us, symbol_of)

        self.f_sym = self._with_inputs(self._convert_vector(rhs, xs, us, scratch.t, self.states,
                                                            "rhs", symbol_of))
        self.l_sym = self._initial(initial, us, symbol_of)
        self.steady_state = self.preequilibration = None
        if preequilibration is not None:
            self._preequilibrate(preequilibration, initial, xs, us, scratch.t, symbol_of)
        self._penalty(penalty, us, symbol_of)
        self.path_constraints, self.parameter_constraints = self._constraints(
            constraints, xs, us, scratch.t, symbol_of)
        if data is None:
            if T is None:
                raise ProblemError("without data the final time T must be given")
            self._no_data()
        else:
            self._set_data(data, observe, sigma, weights, symbol_of, xs, us, scratch.t)
            self.g_sym = self._with_inputs(self.g_sym)
        T = self.meas_times[-1] if T is None else float(T)
        if not np.isfinite(T) or T <= self.t0:
            raise ProblemError(f"final time T={T} must be finite and > t0={self.t0}")
        if len(self.meas_times) and (self.meas_times[0] < self.t0 or self.meas_times[-1] > T):
            raise ProblemError(
                f"measurement times must lie in [t0, T] = [{self.t0}, {T}]; got "
                f"[{self.meas_times[0]}, {self.meas_times[-1]}]")
        self.T = T
        self.switch_times = _switch_times(self.inputs, self.t0, T)
        self._check_start()

    def _symbols(self, pnames):
        """The symbols of the states, the parameters ``pnames`` and time, and a scratch
        model whose variables stand for them inside user functions: ``(model, map from
        a variable's id to its symbol, namespace of the states)``.  States and
        parameters are Symbols by name (equal across problems that share them); time
        is a Symbol of a name no state or parameter can have, so that a parameter
        called ``t`` is not time.  Internal symbols elsewhere are Dummies; sympy
        constants (E, I, pi) are not Symbols."""
        self.x_sym = tuple(sympy.Symbol(s, real=True) for s in self.states)
        self.u_sym = tuple(sympy.Symbol(p.name, real=True) for p in self.parameters)
        self.t_sym = sympy.Symbol(TIME_NAME, real=True)
        scratch = pyo.ConcreteModel()
        scratch.x = pyo.Var(self.states, initialize=1.0)
        scratch.u = pyo.Var(pnames, initialize=1.0) if pnames else None
        scratch.t = pyo.Var(initialize=0.0)
        symbol_of = {id(scratch.x[s]): sym for s, sym in zip(self.states, self.x_sym)}
        symbol_of.update({id(scratch.u[p]): sympy.Symbol(p, real=True) for p in pnames})
        symbol_of[id(scratch.t)] = self.t_sym
        return scratch, symbol_of, _Namespace("state", {s: scratch.x[s] for s in self.states})

    def _penalty(self, penalty, us, symbol_of):
        """``penalty(u)`` as :attr:`penalty_sym` (0 without one); parameters only."""
        self.penalty_sym = sympy.Integer(0)
        if penalty is None:
            return
        if not callable(penalty):
            raise ProblemError("penalty must be callable as penalty(u)")
        self.penalty_sym = self._to_sym(_call_user(penalty, "penalty", us), "penalty", symbol_of)
        bad = self.penalty_sym.free_symbols - set(self.u_sym)
        if bad:
            raise ProblemError(f"penalty may depend on parameters only; uses {bad}")

    # -- several experiments ------------------------------------------------

    def _constraints(self, constraints, xs, us, t, symbol_of):
        """``[(PathConstraint, sym)]`` and ``[(ParameterConstraint, sym)]`` (sym ≤ 0)."""
        paths, params = [], []
        if constraints is None:
            return paths, params
        if isinstance(constraints, (PathConstraint, ParameterConstraint)):
            constraints = [constraints]
        bad = [type(c).__name__ for c in constraints
               if not isinstance(c, (PathConstraint, ParameterConstraint))]
        if bad:
            raise ProblemError(f"constraints must be PathConstraint or ParameterConstraint "
                               f"objects, got {bad}")
        _check_names([c.name for c in constraints], "constraint")
        allowed = set(self.x_sym) | set(self.u_sym) | {self.t_sym}
        for c in constraints:
            if isinstance(c, PathConstraint):
                what = f"path constraint '{c.name}'"
                ex = self._with_inputs(
                    (self._to_sym(_call_user(c.fn, what, xs, us, t), what, symbol_of),))[0]
                bad = ex.free_symbols - allowed - {sympy.Symbol(k, real=True) for k in self.inputs}
                if bad:
                    raise ProblemError(f"path constraint '{c.name}' uses {sorted(map(str, bad))}, "
                                       f"which are not states, parameters, inputs or t")
                paths.append((c, ex))
            else:
                what = f"parameter constraint '{c.name}'"
                ex = self._to_sym(_call_user(c.fn, what, us), what, symbol_of)
                bad = ex.free_symbols - set(self.u_sym)
                if bad:
                    raise ProblemError(f"parameter constraint '{c.name}' may depend on "
                                       f"parameters only; uses {sorted(map(str, bad))}")
                params.append((c, ex))
        return paths, params

    def path_constraint_functions(self):
        """``[(PathConstraint, c, dc/dx, dc/du)]``: per path constraint
        :math:`c(x, u, t) \\le 0` of this (single-experiment) problem, the vectorised
        function and its sparse Jacobians in the states and the parameters, built once
        (shared by the approaches that impose path constraints outside a Pyomo block)."""
        xs, us, ts = self.x_sym, self.u_sym, self.t_sym
        return [(pc, VectorFn((ex,), xs, us, ts), sparse_jacobian((ex,), xs, xs, us, ts),
                 sparse_jacobian((ex,), us, xs, us, ts)) for pc, ex in self.path_constraints]

    def parameter_constraint_functions(self):
        """``(r, dr)``: per parameter constraint :math:`r(u) \\le 0`, the function
        ``r(u)`` and its gradient ``dr(u)`` over all parameters, lambdified once
        (shared by the approaches that treat them as constraints over u)."""
        us = tuple(self.u_sym)
        pcs = self.parameter_constraints
        return ([lambdify((us,), ex, "numpy") for _, ex in pcs],
                [lambdify((us,), [sympy.diff(ex, v) for v in us], "numpy")
                 for _, ex in pcs])

    @property
    def has_constraints(self):
        """True if the problem (or one of its experiments) has path or parameter constraints."""
        subs = self.experiment_problems or []
        return bool(self.parameter_constraints or self.path_constraints
                    or any(sp.has_constraints for sp in subs))

    def _input_vars(self, scratch, symbol_of):
        """Scratch variables standing for the inputs inside user functions."""
        if not self.inputs:
            return {}
        scratch.w = pyo.Var(list(self.inputs), initialize=1.0)
        for k in self.inputs:
            symbol_of[id(scratch.w[k])] = sympy.Symbol(k, real=True)
        return {k: scratch.w[k] for k in self.inputs}

    def _with_inputs(self, exprs):
        """``exprs`` with each input symbol replaced by the input's expression in t."""
        if not self.inputs or any(v is None for v in self.inputs.values()):
            return exprs
        sym_of = {p: s for p, s in zip(self.parameter_names, self.u_sym)}
        subs = {sympy.Symbol(k, real=True): inp.expression(self.t_sym, sym_of.__getitem__)
                for k, inp in self.inputs.items()}
        return tuple(sympy.sympify(e).xreplace(subs) for e in exprs)

    # -- conversions -------------------------------------------------------
    def _adopt(self, e):
        """A sympy expression of another problem's symbols (or plain Symbols) in
        this problem's symbols: states and parameters by name, time by the
        time symbol's name (which no state or parameter can have) or ``t``
        when no parameter is called ``t``."""
        key = (id(self.x_sym), id(self.u_sym), id(self.t_sym), len(self.parameters))
        cached = self.__dict__.get("_adopt_maps")
        if cached is None or cached[0] != key:          # built once per set of symbols
            own = dict(zip(self.states, self.x_sym))
            own.update(zip((p.name for p in self.parameters), self.u_sym))
            cached = self._adopt_maps = (key, own, set(own.values()) | {self.t_sym})
        _, own, mine = cached
        rep = {}
        for s in e.free_symbols:
            if s in mine:
                continue
            if s.name in own:
                rep[s] = own[s.name]
            elif s.name in (TIME_NAME, "t"):
                rep[s] = self.t_sym
        return e.xreplace(rep) if rep else e

    def _to_sym(self, e, what, symbol_of):
        if isinstance(e, (int, float, np.number)):
            if not np.isfinite(float(e)):
                raise ProblemError(f"{what} is not finite")
            return sympy.Float(float(e)) if not float(e).is_integer() else sympy.Integer(int(e))
        if isinstance(e, sympy.Basic):
            return _finite_constants(self._adopt(e), what)
        try:
            return _finite_constants(pyomo_to_sympy(e, symbol_of), what)
        except UnsupportedExpressionError as err:
            raise ProblemError(f"{what}: {err}") from None
        except AttributeError:
            raise ProblemError(f"{what}: expected a Pyomo expression or number, got "
                               f"{type(e).__name__}") from None

    def _convert_vector(self, fn, xs, us, t, names, what, symbol_of):
        if not callable(fn):
            raise ProblemError(f"{what} must be callable as {what}(x, u, t)")
        out = _call_user(fn, what, xs, us, t)
        if isinstance(out, Mapping):
            missing = [s for s in names if s not in out]
            extra = [k for k in out if k not in names]
            if missing or extra:
                raise ProblemError(f"{what} must return one expression per state {names}; "
                                   f"missing {missing}, unknown {extra}")
            out = [out[s] for s in names]
        else:
            try:
                out = list(out)
            except TypeError:
                raise ProblemError(f"{what} must return a sequence or mapping of "
                                   f"{len(names)} expressions (one per state)") from None
            if len(out) != len(names):
                raise ProblemError(f"{what} returned {len(out)} expressions; "
                                   f"expected {len(names)}, one per state {names}")
        return tuple(self._to_sym(e, f"{what}[{s}]", symbol_of) for e, s in zip(out, names))

    def _initial_mapping(self, initial):
        """``initial`` as a mapping state -> value (a sequence is in state order; None:
        no entry, for experiments that give their own)."""
        if initial is None:
            return {}
        if isinstance(initial, Mapping):
            return initial
        try:
            return dict(zip(self.states, list(initial), strict=True))
        except (TypeError, ValueError):
            raise ProblemError(f"initial must map each state {self.states} to a value") from None

    def _initial_value(self, s, v, names, us, symbol_of, where=""):
        """``initial[s] = v`` (a number, a parameter name of ``names`` or a function of
        ``u``) as a sympy expression; ``where`` prefixes the error message."""
        if isinstance(v, str):
            if v not in names:
                raise ProblemError(f"{where}initial['{s}'] = '{v}' names no parameter")
            return sympy.Symbol(v, real=True)
        if callable(v):
            v = _call_user(v, f"initial[{s}]", us)
        return self._to_sym(v, f"initial[{s}]", symbol_of)

    def _initial(self, initial, us, symbol_of):
        initial = self._initial_mapping(initial)
        missing = [s for s in self.states if s not in initial]
        extra = [k for k in initial if k not in self.states]
        if missing or extra:
            raise ProblemError(f"initial: missing states {missing}, unknown names {extra}")
        out = tuple(self._initial_value(s, initial[s], self.parameter_names, us, symbol_of)
                    for s in self.states)
        free = set().union(*[e.free_symbols for e in out]) - set(self.u_sym)
        if free:
            raise ProblemError(f"initial state may depend on parameters only; uses {free}")
        return out

    # -- data --------------------------------------------------------------
    def _no_data(self):
        self.obs_names = []
        self.g_sym = ()
        self.meas_times = np.zeros(0)
        self.data = pd.DataFrame(np.zeros((0, 0)), index=pd.Index([], name="time", dtype=float))
        self.mask = np.zeros((0, 0), dtype=bool)
        self.weights = np.zeros((0, 0))
        self.sigma_known = False
        if isinstance(self.loss, GaussianNLL):
            raise ProblemError("GaussianNLL needs data")

    def _set_data(self, data, observe, sigma, weights, symbol_of, xs, us, t):
        wide, sig_long = _to_wide(as_data_frame(data))
        names = [str(c) for c in wide.columns]
        if callable(observe):
            out = _call_user(observe, "observe", xs, us, t)
            if not isinstance(out, Mapping):
                raise ProblemError("observe(x, u, t) must return a mapping name -> expression")
            self.obs_names = _check_names(list(out), "observable")
            self.g_sym = tuple(self._to_sym(out[k], f"observe[{k}]", symbol_of)
                               for k in self.obs_names)
        else:
            obs = names if observe is None else _check_names(list(observe), "observable")
            bad = [o for o in obs if o not in self.states]
            if bad and observe is None:
                raise ProblemError(f"data columns {bad} name no observed quantity; "
                                   f"observed (default): the states {self.states}")
            if bad:
                raise ProblemError(f"observe lists {bad}, which are not states")
            self.obs_names = obs
            self.g_sym = tuple(self.x_sym[self.states.index(c)] for c in obs)
        unknown = [c for c in names if c not in self.obs_names]
        if unknown:
            raise ProblemError(f"data columns {unknown} name no observed quantity "
                               f"(observed: {self.obs_names})")
        wide = wide.reindex(columns=self.obs_names)
        vals = wide.to_numpy(dtype=float)
        if np.any(np.isinf(vals)):
            r, c = np.argwhere(np.isinf(vals))[0]
            raise ProblemError(f"measurement of '{self.obs_names[c]}' at t={wide.index[r]} is infinite")
        mask = ~np.isnan(vals)
        keep = mask.any(axis=1)
        if not keep.all():
            wide, vals, mask = wide[keep], vals[keep], mask[keep]
        if not mask.any():
            raise ProblemError("data contain no measurement")
        times = wide.index.to_numpy(dtype=float)
        self.meas_times = times
        self.data = pd.DataFrame(vals, index=pd.Index(times, name="time"), columns=self.obs_names)
        self.mask = mask
        w = _weights(sigma, weights, sig_long, wide, self.obs_names, mask)
        check_weights(w, mask)
        self.weights = w
        #: True when the weights are 1/σ² of given standard deviations (or the
        #: loss is GaussianNLL): the misfit is then a χ² statistic
        self.sigma_known = sigma is not None or sig_long is not None or \
            isinstance(self.loss, GaussianNLL)
        if isinstance(self.loss, GaussianNLL):
            self.cov = self.loss.matrix(len(self.obs_names))

    def _check_start(self):
        """f must be finite at the initial state and parameter guesses."""
        u0 = self.u0
        with np.errstate(all="ignore"):               # a non-finite value is refused below
            x0 = self.initial_state(u0)
            if not np.all(np.isfinite(x0)):
                raise ProblemError(f"initial state l(u0) = {x0} is not finite")
            f = self._rhs_at_start(x0, u0)
        if not np.all(np.isfinite(f)):
            bad = [s for s, v in zip(self.states, f) if not np.isfinite(v)]
            raise ProblemError(f"rhs is not finite at the initial state and parameter guesses "
                               f"(states {bad}: f = {f})")
        self._check_paths_at_t0(u0)

    def _rhs_at_start(self, x0, u0):
        """:math:`f(x_0, u_0, t_0)` evaluated by sympy, NaN where a value is not a finite
        real number: one point needs no generated code of f, which each experiment of a
        problem with many would otherwise generate for this check alone."""
        at = {s: sympy.Float(float(v)) for s, v in zip(self.x_sym, x0)}
        at.update({s: sympy.Float(float(v)) for s, v in zip(self.u_sym, u0)})
        at[self.t_sym] = sympy.Float(self.t0)
        out = []
        for e in self.f_sym:
            v = sympy.sympify(e).xreplace(at).evalf()
            out.append(float(v) if v.is_Number and v.is_real else np.nan)
        return np.array(out)

    def _check_paths_at_t0(self, u0):
        """A path constraint imposed at t0 that the fixed initial state violates, whatever
        the estimated parameters, makes the problem infeasible: said before any solve."""
        free = {s for s, p in zip(self.u_sym, self.parameters) if not p.fixed}
        at_t0 = dict(zip(self.x_sym, self.l_sym))
        at_t0[self.t_sym] = sympy.Float(self.t0)
        for pc, ex in self.path_constraints:
            if pc.at != "grid" and not np.any(self.meas_times == self.t0):
                continue
            e = ex.xreplace(at_t0)
            if e.free_symbols & free or e.atoms(AppliedUndef):
                continue                     # the estimates move it (or a steady state does)
            with np.errstate(all="ignore"):
                v = float(lambdify((self.u_sym,), e, "numpy")(u0))
            if not v <= 1e-9:
                raise ProblemError(
                    f"path constraint '{pc.name}' is violated at t0={self.t0} by the initial "
                    f"state (c = {v:.6g} > 0), which no estimated parameter changes: the "
                    f"problem is infeasible. Relax the constraint, change the initial state, "
                    f"or impose it at the measurement times only (at='measurements') if t0 "
                    f"is not one")

    # -- pickling and variants ----------------------------------------------------
    #: attributes that cache objects built from the problem (rebuilt on demand);
    #: they are not pickled; :meth:`variant` copies share the numeric functions only
    _CACHES = ("_multiple_shooting_models", "_adopt_maps", "_numeric_cache")

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in self._CACHES:
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        for sp in self.__dict__.get("experiment_problems") or []:
            # the experiments' problems share their numeric functions again
            sp._numeric_cache = self.__dict__.setdefault("_numeric_cache", {})

    def variant(self, values=None, multiplicity=None, fix=None, start=None) -> "EstimationProblem":
        """A copy with other measurement values, weights or fixed parameters.

        Used for bootstrap samples and profile points without restating the
        model (the symbolic functions are shared; cached simulators are not).

        Parameters
        ----------
        values : array (times, observables) or DataFrame like ``data``, optional
            New measurement values at the same times; entries that are not
            measured (``mask`` False) are ignored.  With several experiments:
            a mapping experiment name -> such an array (of that experiment's
            ``experiment_problems[i]``); experiments not named keep their data.
        multiplicity : array (times,) or (times, observables), optional
            Non-negative factors on the weights (how often a measurement was
            drawn in case resampling; 0 drops it).  Least squares only.  With
            several experiments: a mapping experiment name -> such an array.
        fix : mapping parameter name -> value, optional
            Parameters held fixed at these values.
        start : mapping parameter name -> value, optional
            New start values of (free) parameters.
        """
        if getattr(self, "experiments", None) is not None:
            names = self.experiment_names
            per = {}
            for what, arg in (("values", values), ("multiplicity", multiplicity)):
                if arg is None:
                    continue
                if not isinstance(arg, Mapping):
                    raise ProblemError(f"variant: with several experiments, {what} must be a "
                                       f"mapping experiment name -> array ({names})")
                bad = sorted(set(arg) - set(names))
                if bad:
                    raise ProblemError(f"variant: {what} names {bad}, which are not experiments "
                                       f"({names})")
                per[what] = arg
            out = copy.copy(self)          # the numeric functions shared, as below
            out._numeric_cache = self.__dict__.setdefault("_numeric_cache", {})
            out.experiment_problems = [
                sp.variant(values=per.get("values", {}).get(n),
                           multiplicity=per.get("multiplicity", {}).get(n), fix=fix, start=start)
                for n, sp in zip(names, self.experiment_problems)]
            out.parameters = out.experiment_problems[0].parameters
            return out
        out = copy.copy(self)              # without the caches (__getstate__) but the
        # numeric functions of the symbolic problem, shared (keyed by their expressions)
        out._numeric_cache = self.__dict__.setdefault("_numeric_cache", {})
        shape = self.mask.shape
        if values is not None:
            v = values.to_numpy(dtype=float) if isinstance(values, pd.DataFrame) else \
                np.asarray(values, dtype=float)
            if v.shape != shape:
                raise ProblemError(f"variant: values must have shape {shape} (times x "
                                   f"observables {self.obs_names}); got {v.shape}")
            if not np.all(np.isfinite(v[self.mask])):
                raise ProblemError("variant: values must be finite where measured")
            out.data = pd.DataFrame(np.where(self.mask, v, np.nan), index=self.data.index.copy(),
                                    columns=list(self.obs_names))
        if multiplicity is not None:
            if isinstance(self.loss, GaussianNLL):
                raise ProblemError("variant: multiplicity needs the least-squares loss "
                                   "(GaussianNLL weighs by its covariance)")
            m = np.asarray(multiplicity, dtype=float)
            if m.ndim == 1:
                m = np.repeat(m[:, None], shape[1], axis=1)
            if m.shape != shape or np.any(~np.isfinite(m)) or np.any(m < 0):
                raise ProblemError(f"variant: multiplicity must be finite, >= 0, of shape "
                                   f"({shape[0]},) or {shape}; got {np.shape(multiplicity)}")
            out.weights = np.asarray(self.weights, dtype=float) * m
        params = list(self.parameters)
        names = self.parameter_names
        for what, mapping in (("fix", fix), ("start", start)):
            for name, val in (mapping or {}).items():
                if name not in names:
                    raise ProblemError(f"variant: {what} names {name!r}, not a parameter "
                                       f"(known: {names})")
                k = names.index(name)
                changes = {"value": float(val)}
                if what == "fix":
                    changes["fixed"] = True
                params[k] = dataclasses.replace(params[k], **changes)
        out.parameters = params
        return out

    # -- numeric views ---------------------------------------------------------
    @property
    def parameter_names(self):
        return [p.name for p in self.parameters]

    @property
    def u0(self):
        return np.array([float(p.value) for p in self.parameters])

    @property
    def free_mask(self):
        return np.array([not p.fixed for p in self.parameters], dtype=bool)

    def bounds(self, select=None):
        """``(lb, ub)`` arrays of the parameters' bounds, an absent bound as ``-inf`` or
        ``inf``; ``select`` (a boolean mask or indices, e.g. :attr:`free_mask`) picks
        some of the parameters."""
        lb, ub = np.array([p.bounds for p in self.parameters], dtype=float).reshape(-1, 2).T
        return (lb, ub) if select is None else (lb[select], ub[select])

    def _numeric(self, key, build):
        """The numeric function ``key`` built by ``build()`` from the symbolic problem,
        once per problem, its variants and, with several experiments, its experiments'
        problems (one cache, ``_several._SHARED_NUMERIC``; not pickled: rebuilt on first
        use).  ``key`` holds the expressions and the symbols they are functions of, so a
        function of other expressions is built anew; what is built may not depend on
        data, weights or parameter values other than those in ``key``."""
        cache = self.__dict__.get("_numeric_cache")
        if cache is None:
            shared = _SHARED_NUMERIC.get()
            cache = self.__dict__["_numeric_cache"] = {} if shared is None else shared
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def numeric_rhs(self):
        """``f(x, u, t) -> ndarray`` lambdified from the symbolic rhs."""
        self._single("numeric_rhs")
        args = (self.x_sym, self.u_sym, self.t_sym)
        fn = self._numeric(("f", self.f_sym, args),
                           lambda: lambdify(args, list(self.f_sym), "numpy"))
        return lambda x, u, t: np.array(fn(x, u, t), dtype=float)

    def initial_state(self, u):
        self._single("initial_state")
        fn = self._numeric(("l", self.l_sym, self.u_sym),
                           lambda: lambdify((self.u_sym,), list(self.l_sym), "numpy"))
        return np.array(fn(np.asarray(u, dtype=float)), dtype=float)

    def interpolate_states(self, times, u=None):
        """State guesses at ``times`` from the data: observed states interpolated
        linearly through (t0, x0) and their measurements, the others held at x0.

        Used to start the simultaneous block and multiple-shooting nodes where
        no simulation is available (for instance beyond a pole).
        """
        self._single("interpolate_states")
        u = self.u0 if u is None else np.asarray(u, dtype=float)
        times = np.asarray(times, dtype=float)
        x0 = self.initial_state(u)
        X = np.tile(x0, (len(times), 1))
        for o, name in enumerate(self.obs_names):
            g = self.g_sym[o]
            if g in self.x_sym:
                s = self.x_sym.index(g)
                col = self.data[name]
                ok = col.notna().to_numpy()
                tt = np.concatenate([[self.t0], self.meas_times[ok]])
                vv = np.concatenate([[x0[s]], col.to_numpy()[ok]])
                tt, keep = np.unique(tt, return_index=True)
                X[:, s] = np.interp(times, tt, vv[keep])
        return X

    def fdot_sym(self):
        r"""Total time derivative of f along solutions: :math:`D_x f\cdot f + \partial_t f`."""
        self._single("fdot_sym")
        x = self.x_sym
        return tuple(sympy.expand(sum(sympy.diff(fi, x[j]) * self.f_sym[j] for j in range(len(x)))
                                  + sympy.diff(fi, self.t_sym), deep=False) for fi in self.f_sym)

    def __repr__(self):
        if self.experiments:
            return (f"EstimationProblem(states={self.states}, parameters={self.parameter_names}, "
                    f"experiments={self.experiment_names})")
        return (f"EstimationProblem(states={self.states}, parameters={self.parameter_names}, "
                f"observables={self.obs_names}, measurements={int(self.mask.sum())} at "
                f"{len(self.meas_times)} times, t in [{self.t0}, {self.T}])")


def require_single_experiment(problem, what):
    """Raise a :class:`ProblemError` naming ``what`` if ``problem`` has several experiments."""
    if getattr(problem, "experiments", None):
        raise ProblemError(f"{what} does not take a problem with several experiments "
                           f"({problem.experiment_names}); use the simultaneous, reduced_space, "
                           f"multiple_shooting or continuous approach, or one "
                           f"experiment_problems[i]")


def require_no_inputs(problem, what):
    """Raise a :class:`ProblemError` naming ``what`` if ``problem`` has switching inputs."""
    sw = problem.__dict__.get("switch_times")
    if sw is not None and len(sw):
        raise ProblemError(f"{what} does not take inputs with switching times "
                           f"({list(problem.inputs)}, switches at {list(sw)[:5]}); use the "
                           f"simultaneous, reduced_space, multiple_shooting or continuous "
                           f"approach")


def require_no_constraints(problem, what):
    """Raise a :class:`ProblemError` naming ``what`` if ``problem`` has constraints."""
    if problem.has_constraints:
        names = [c.name for c, _ in problem.parameter_constraints] + [
            c.name for sp in (problem.experiment_problems or [problem])
            for c, _ in sp.path_constraints]
        raise ProblemError(f"{what} does not take path or parameter constraints "
                           f"({sorted(set(names))}); use the simultaneous, reduced_space or "
                           f"multiple_shooting approach (or continuous, for path constraints "
                           f"at the measurement times)")
