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
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
import pyomo.environ as pyo
import sympy

from ..symbolic.structure import UnsupportedExpressionError
from ..symbolic.convert import pyomo_to_sympy
from .validation import ProblemError, as_data_frame, as_spec, check_weights

#: Name of the time symbol: not an identifier, so no state or parameter has it.
TIME_NAME = "t(time)"

__all__ = ["Parameter", "Experiment", "PathConstraint", "ParameterConstraint",
           "require_no_constraints", "require_single_experiment", "require_no_inputs",
           "EstimationProblem", "LeastSquares", "GaussianNLL",
           "ProblemError"]


@dataclass
class Parameter:
    """An unknown (or fixed) parameter u_k.

    Parameters
    ----------
    name : str
    value : float
        Initial guess (or the value, if ``fixed``).
    lb, ub : float or None
        Bounds.
    fixed : bool
        Keep the parameter at ``value`` during estimation.
    local : bool
        Problems with several experiments (:class:`Experiment`) only: one copy of the
        parameter per experiment, named ``<name>_<experiment>`` (e.g. an
        initial concentration estimated per experiment).  Inside ``rhs``,
        ``initial`` and ``observe`` it is still written ``u.<name>``.
    """

    name: str
    value: float = 1.0
    lb: float | None = None
    ub: float | None = None
    fixed: bool = False
    local: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ProblemError(f"parameter name {self.name!r} must be a Python identifier")
        for what in ("value", "lb", "ub"):
            v = getattr(self, what)
            if v is not None and not np.isfinite(float(v)):
                raise ProblemError(f"parameter '{self.name}': {what}={v} is not finite")
        if self.lb is not None and self.ub is not None and self.lb > self.ub:
            raise ProblemError(f"parameter '{self.name}': lb={self.lb} > ub={self.ub}")
        if not self.fixed and ((self.lb is not None and self.value < self.lb)
                               or (self.ub is not None and self.value > self.ub)):
            raise ProblemError(f"parameter '{self.name}': start value {self.value} is outside "
                               f"its bounds [{self.lb}, {self.ub}]; start inside the bounds "
                               f"(it would otherwise be moved silently)")


@dataclass
class Experiment:
    r"""One experiment of a problem with several data sets sharing parameters.

    An experiment has its own data, initial state, weights and time horizon;
    the dynamics ``rhs`` and the observation function ``observe`` are the
    problem's.  Pass a list of experiments as ``EstimationProblem(...,
    data=None, experiments=[...])``; the objective is the sum of the
    experiments' misfits (plus the problem's penalty, once):

    .. math:: J(u) = \sum_e \sum_j \varphi_{e,j}\big(g(x_e(\tau_{e,j}), u_e, \tau_{e,j}),
              \bar z_{e,j}\big) + R(u),\qquad \dot x_e = f(x_e, u_e, t),\;
              x_e(t_{0,e}) = l_e(u_e),

    where :math:`u_e` holds the global parameters and experiment e's copies
    of the local ones (:attr:`Parameter.local`).

    Parameters
    ----------
    name : str
        A Python identifier; local parameter ``k`` of experiment ``e1`` is
        named ``k_e1`` in the estimates.
    data : pandas.DataFrame
        Measurements (wide or long format, as ``EstimationProblem.data``).
    initial : mapping state -> number | parameter name | callable(u), optional
        Overrides entries of the problem's ``initial``.  A parameter name may
        be a local parameter (the initial state is then estimated per
        experiment) or a global one.
    sigma, weights : optional
        As for :class:`EstimationProblem`; default: the problem's.
    t0, T : float, optional
        Time horizon; default: the problem's ``t0`` and the last
        measurement time (or the problem's ``T``).
    parameters : mapping name -> float or Parameter, optional
        Start value (a float) or start value, bounds and ``fixed`` flag (a
        :class:`Parameter`) of this experiment's copy of a local parameter.
    inputs : mapping name -> Input, optional
        This experiment's inputs (:mod:`pyomo_odeest.problem.inputs`),
        overriding the problem's.

    Example
    -------
    >>> prob = EstimationProblem(                                  # doctest: +SKIP
    ...     states=["A", "B"],
    ...     parameters=[Parameter("k1", 1.0, lb=0), Parameter("A0", 1.0, local=True)],
    ...     rhs=lambda x, u, t: [-u.k1 * x.A, u.k1 * x.A],
    ...     initial={"A": "A0", "B": 0.0}, data=None,
    ...     experiments=[Experiment("e1", df1, parameters={"A0": 2.0}),
    ...                  Experiment("e2", df2, initial={"B": 0.5}, T=12.0)])
    >>> prob.parameter_names                                       # doctest: +SKIP
    ['k1', 'A0_e1', 'A0_e2']

    Every approach estimates such a problem (one simultaneous block per
    experiment under one model; one simulation per experiment, objectives
    and gradients summed, in the sequential approaches); the result's
    ``states``, ``fitted`` and ``residuals`` (and the multipliers of the
    simultaneous approach) are DataFrames indexed by ``(experiment, time)``.
    ``problem.experiment_problems`` holds one single-experiment
    :class:`EstimationProblem` per experiment over the full parameter vector.
    """

    name: str
    data: object = None
    initial: Mapping | None = None
    sigma: object = None
    weights: object = None
    t0: float | None = None
    T: float | None = None
    parameters: Mapping | None = None
    inputs: Mapping | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ProblemError(f"experiment name {self.name!r} must be a Python identifier")
        if self.data is None:
            raise ProblemError(f"experiment '{self.name}': data are required")
        for what in ("initial", "parameters"):
            v = getattr(self, what)
            if v is not None and not isinstance(v, Mapping):
                raise ProblemError(f"experiment '{self.name}': {what} must be a mapping")


@dataclass
class PathConstraint:
    r"""A path constraint :math:`c(x, u, t) \le 0` on the states.

    Parameters
    ----------
    name : str
        A Python identifier (the block component is ``path_<name>``).
    fn : callable ``fn(x, u, t)``
        One expression, written like ``rhs`` (inputs available as ``u.<input>``).
    at : ``'grid'`` | ``'measurements'``
        Imposed at every grid point (``'grid'``, the default) or at the
        measurement times only.

    The simultaneous, reduced-space and multiple-shooting approaches impose it
    (the sequential ones as constraints over u, and the node values, with
    exact discrete derivatives); the continuous approach at the measurement
    times only (``at='measurements'``, exact sensitivities of the ODE); the
    adaptive approach raises a :class:`ProblemError`.
    """

    name: str
    fn: object
    at: str = "grid"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ProblemError(f"constraint name {self.name!r} must be a Python identifier")
        if not callable(self.fn):
            raise ProblemError(f"path constraint '{self.name}': fn must be callable as fn(x, u, t)")
        if self.at not in ("grid", "measurements"):
            raise ProblemError(f"path constraint '{self.name}': at must be 'grid' or "
                               f"'measurements', got {self.at!r}")


@dataclass
class ParameterConstraint:
    r"""A constraint :math:`r(u) \le 0` on the parameters (``fn(u)``: one expression)."""

    name: str
    fn: object

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ProblemError(f"constraint name {self.name!r} must be a Python identifier")
        if not callable(self.fn):
            raise ProblemError(f"parameter constraint '{self.name}': fn must be callable as fn(u)")


# ---------------------------------------------------------------------------
# losses φ
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LeastSquares:
    r"""Weighted least squares: :math:`\varphi_j = \sum_o w_{jo} (z_{jo} - \bar z_{jo})^2`.

    Weights are ``1/σ²`` when standard deviations are given, otherwise the
    user's weights, otherwise 1.  Missing measurements contribute nothing.
    """

    def terms(self, r_sym, w):
        return [wi * ri**2 for ri, wi in zip(r_sym, w)]


@dataclass(frozen=True)
class GaussianNLL:
    r"""Gaussian negative log-likelihood with covariance Σ [MHV, eq. (2)–(5)]:

    .. math:: \varphi_j = \tfrac12 r_j^\top Σ^{-1} r_j + \tfrac12 \log\det(2\pi Σ),

    with :math:`r_j = z(\tau_j) - \bar z_j` over the observed quantities of
    time :math:`\tau_j`.  ``cov`` is a matrix over the observed quantities (in
    the problem's observable order) or a vector of variances.  The constant
    term is kept out of the NLP and reported in :attr:`constant`.
    """

    cov: object

    def matrix(self, n_obs):
        c = np.asarray(self.cov, dtype=float)
        if c.ndim == 0:
            c = np.full(n_obs, float(c))
        if c.ndim == 1:
            c = np.diag(c)
        if c.shape != (n_obs, n_obs):
            raise ProblemError(f"GaussianNLL: covariance must be {n_obs}x{n_obs}, got {c.shape}")
        if not np.allclose(c, c.T) or np.any(np.linalg.eigvalsh(c) <= 0):
            raise ProblemError("GaussianNLL: covariance must be symmetric positive definite")
        return c


# ---------------------------------------------------------------------------
# name spaces handed to user functions
# ---------------------------------------------------------------------------
class _Namespace:
    """``ns.name`` and ``ns['name']`` access to named objects."""

    def __init__(self, kind, items):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_items", dict(items))

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_kind", "_items"):
            raise AttributeError(name)          # (un)pickling looks these up before __init__
        try:
            return self._items[name]
        except KeyError:
            raise AttributeError(f"no {self._kind} named '{name}' "
                                 f"(known: {', '.join(self._items)})") from None

    def __getitem__(self, name):
        if isinstance(name, int):
            return list(self._items.values())[name]
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"no {self._kind} named {name!r} "
                           f"(known: {', '.join(self._items)})") from None

    def __iter__(self):
        return iter(self._items.values())

    def __len__(self):
        return len(self._items)


def _check_names(names, what):
    names = list(names)
    for s in names:
        if not isinstance(s, str) or not s.isidentifier():
            raise ProblemError(f"{what} name {s!r} must be a Python identifier")
    if len(set(names)) != len(names):
        raise ProblemError(f"duplicate {what} names in {names}")
    return names


class EstimationProblem:
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
    data : pandas.DataFrame or None
        *Wide*: index = measurement times, one column per observed quantity,
        NaN = not measured.  *Long*: columns ``time``, ``name`` (or
        ``observable``) and ``value`` (optional ``sigma``).  ``None`` states
        the dynamics only (no misfit; ``T`` is then required), e.g. for the
        intervals of multiple shooting.
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
        Inputs given as data (:mod:`pyomo_odeest.problem.inputs`), written
        ``u.<name>`` inside ``rhs`` and ``observe``, standing for their value
        at ``t``; the grid contains every switching time.
    """

    def __init__(self, states, parameters, rhs, initial, data, observe=None,
                 sigma=None, weights=None, loss=None, t0=0.0, T=None, name="ode", penalty=None,
                 experiments=None, inputs=None, constraints=None):
        self.name = name
        self.experiments = None
        self.experiment_problems = None
        if experiments is not None:
            self._init_experiments(states, parameters, rhs, initial, data, observe, sigma,
                                   weights, loss, t0, T, penalty, experiments, inputs,
                                   constraints)
            return
        local = [p.name for p in parameters if isinstance(p, Parameter) and p.local]
        if local:
            raise ProblemError(f"parameters {local} are local=True, which needs several "
                               f"experiments (experiments=[Experiment(...), ...])")
        self.states = _check_names(states, "state")
        if not self.states:
            raise ProblemError("at least one state is required")
        params = []
        for p in parameters:
            params.append(p if isinstance(p, Parameter) else Parameter(str(p)))
        self.parameters = params
        pnames = _check_names([p.name for p in params], "parameter")
        clash = set(pnames) & set(self.states)
        if clash:
            raise ProblemError(f"names used both as state and parameter: {sorted(clash)}")
        self.t0 = float(t0)
        if not np.isfinite(self.t0):
            raise ProblemError("t0 must be finite")
        self.loss = LeastSquares() if loss is None else loss
        if not isinstance(self.loss, (LeastSquares, GaussianNLL)):
            raise ProblemError("loss must be LeastSquares() or GaussianNLL(cov)")

        # symbols: states and parameters by name (equal across problems that
        # share them); time by a name no state or parameter can have, so that
        # a parameter called ``t`` is not time.  Internal symbols elsewhere
        # are Dummies; sympy constants (E, I, pi) are not Symbols.
        self.x_sym = tuple(sympy.Symbol(s, real=True) for s in self.states)
        self.u_sym = tuple(sympy.Symbol(p, real=True) for p in pnames)
        self.t_sym = sympy.Symbol(TIME_NAME, real=True)

        scratch = pyo.ConcreteModel()
        scratch.x = pyo.Var(self.states, initialize=1.0)
        scratch.u = pyo.Var(pnames, initialize=1.0) if pnames else None
        scratch.t = pyo.Var(initialize=0.0)
        symbol_of = {id(scratch.x[s]): sym for s, sym in zip(self.states, self.x_sym)}
        if pnames:
            symbol_of.update({id(scratch.u[p]): sym for p, sym in zip(pnames, self.u_sym)})
        symbol_of[id(scratch.t)] = self.t_sym
        xs = _Namespace("state", {s: scratch.x[s] for s in self.states})
        self.inputs = _check_inputs(inputs, self.states, pnames)
        in_vars = self._input_vars(scratch, symbol_of)
        us = _Namespace("parameter", {**{p: scratch.u[p] for p in pnames}, **in_vars})
        self._scratch = (scratch, xs, us, symbol_of)

        self.f_sym = self._with_inputs(self._convert_vector(rhs, xs, us, scratch.t, self.states,
                                                            "rhs", symbol_of))
        self.l_sym = self._initial(initial, us, symbol_of)
        self.penalty_sym = sympy.Integer(0)
        if penalty is not None:
            if not callable(penalty):
                raise ProblemError("penalty must be callable as penalty(u)")
            self.penalty_sym = self._to_sym(penalty(us), "penalty", symbol_of)
            bad = self.penalty_sym.free_symbols - set(self.u_sym)
            if bad:
                raise ProblemError(f"penalty may depend on parameters only; uses {bad}")
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

    # -- several experiments ------------------------------------------------
    def _init_experiments(self, states, parameters, rhs, initial, data, observe, sigma, weights,
                          loss, t0, T, penalty, experiments, inputs, constraints):
        """Build one single-experiment problem per :class:`Experiment` over the
        full (expanded) parameter vector; see :class:`Experiment`."""
        if data is not None:
            raise ProblemError("with experiments, give the data per Experiment(data=...); "
                               "data must be None")
        exps = list(experiments)
        if not exps:
            raise ProblemError("experiments must hold at least one Experiment")
        bad = [type(e).__name__ for e in exps if not isinstance(e, Experiment)]
        if bad:
            raise ProblemError(f"experiments must be Experiment objects; got {bad}")
        _check_names([e.name for e in exps], "experiment")
        self.states = _check_names(states, "state")
        if not self.states:
            raise ProblemError("at least one state is required")
        declared = [p if isinstance(p, Parameter) else Parameter(str(p)) for p in parameters]
        dnames = _check_names([p.name for p in declared], "parameter")
        local = [p.name for p in declared if p.local]
        expanded = []
        for e in exps:
            unknown = [k for k in (e.parameters or {}) if k not in local]
            if unknown:
                raise ProblemError(f"experiment '{e.name}': parameters {unknown} are not local "
                                   f"parameters (local: {local})")
        for p in declared:
            if not p.local:
                expanded.append(Parameter(p.name, p.value, p.lb, p.ub, p.fixed))
                continue
            for e in exps:
                spec = (e.parameters or {}).get(p.name)
                if isinstance(spec, Parameter):
                    expanded.append(Parameter(f"{p.name}_{e.name}", spec.value, spec.lb, spec.ub,
                                              spec.fixed))
                else:
                    expanded.append(Parameter(f"{p.name}_{e.name}",
                                              p.value if spec is None else float(spec),
                                              p.lb, p.ub, p.fixed))
        enames = _check_names([q.name for q in expanded] + local, "parameter")
        clash = set(enames) & set(self.states)
        if clash:
            raise ProblemError(f"names used both as state and parameter: {sorted(clash)}")
        self.parameters = expanded
        self.t0 = float(t0)
        self.loss = LeastSquares() if loss is None else loss
        self.x_sym = tuple(sympy.Symbol(s, real=True) for s in self.states)
        self.u_sym = tuple(sympy.Symbol(q.name, real=True) for q in expanded)
        self.t_sym = sympy.Symbol(TIME_NAME, real=True)
        scratch = pyo.ConcreteModel()
        scratch.x = pyo.Var(self.states, initialize=1.0)
        scratch.u = pyo.Var(enames, initialize=1.0)
        scratch.t = pyo.Var(initialize=0.0)
        symbol_of = {id(scratch.x[s]): sym for s, sym in zip(self.states, self.x_sym)}
        symbol_of.update({id(scratch.u[p]): sympy.Symbol(p, real=True) for p in enames})
        symbol_of[id(scratch.t)] = self.t_sym
        xs = _Namespace("state", {s: scratch.x[s] for s in self.states})
        if inputs is not None and not isinstance(inputs, Mapping):
            inputs = {k: None for k in inputs}           # names; values per experiment
        in_names = list(dict.fromkeys(list(inputs or {}) + [
            k for e in exps for k in (e.inputs or {})]))
        self.inputs = {k: None for k in _check_names(in_names, "input")}
        in_vars = self._input_vars(scratch, symbol_of)
        us = _Namespace("parameter", {**{p: scratch.u[p] for p in dnames}, **in_vars})
        us_all = _Namespace("parameter", {q.name: scratch.u[q.name] for q in expanded})
        self.f_sym = self._convert_vector(rhs, xs, us, scratch.t, self.states, "rhs", symbol_of)
        if not isinstance(initial, Mapping):
            try:
                initial = dict(zip(self.states, list(initial), strict=True))
            except (TypeError, ValueError):
                raise ProblemError(f"initial must map each state {self.states} to a value") from None
        obs_sym = None
        if callable(observe):
            out = observe(xs, us, scratch.t)
            if not isinstance(out, Mapping):
                raise ProblemError("observe(x, u, t) must return a mapping name -> expression")
            obs_sym = {k: self._to_sym(out[k], f"observe[{k}]", symbol_of)
                       for k in _check_names(list(out), "observable")}
        pen = None
        if penalty is not None:
            if not callable(penalty):
                raise ProblemError("penalty must be callable as penalty(u)")
            pen = self._to_sym(penalty(us_all), "penalty", symbol_of)
            self.penalty_sym = pen
        else:
            self.penalty_sym = sympy.Integer(0)
        if isinstance(constraints, (PathConstraint, ParameterConstraint)):
            constraints = [constraints]
        paths = [c for c in (constraints or []) if isinstance(c, PathConstraint)]
        path_sym, _ = self._constraints(paths, xs, us, scratch.t, symbol_of)
        _, self.parameter_constraints = self._constraints(
            [c for c in (constraints or []) if not isinstance(c, PathConstraint)], xs, us_all,
            scratch.t, symbol_of)
        subs_all, problems = [], []
        for n_e, e in enumerate(exps):
            subs = {sympy.Symbol(k, real=True): sympy.Symbol(f"{k}_{e.name}", real=True)
                    for k in local}
            init = dict(initial)
            extra = [k for k in (e.initial or {}) if k not in self.states]
            if extra:
                raise ProblemError(f"experiment '{e.name}': initial names {extra}, which are "
                                   f"not states {self.states}")
            init.update(e.initial or {})
            l_e = {}
            for st, v in init.items():
                if isinstance(v, str):
                    if v not in enames:
                        raise ProblemError(f"experiment '{e.name}': initial['{st}'] = '{v}' "
                                           f"names no parameter")
                    v = sympy.Symbol(v, real=True)
                elif callable(v):
                    v = self._to_sym(v(us), f"initial[{st}]", symbol_of)
                else:
                    v = self._to_sym(v, f"initial[{st}]", symbol_of)
                l_e[st] = v.subs(subs)
            f_e = [fi.subs(subs) for fi in self.f_sym]
            obs_e = observe
            if obs_sym is not None:
                obs_e = (lambda d: (lambda x, u, t: d))({k: v.subs(subs) for k, v in obs_sym.items()})
            in_e = {k: v for k, v in (inputs or {}).items() if v is not None}
            in_e.update(e.inputs or {})
            missing = [k for k in self.inputs if k not in in_e]
            if missing:
                raise ProblemError(f"experiment '{e.name}': no value for inputs {missing}")
            own_w = e.sigma is not None or e.weights is not None
            try:
                sub = EstimationProblem(
                    self.states, [Parameter(q.name, q.value, q.lb, q.ub, q.fixed) for q in expanded],
                    rhs=(lambda f: (lambda x, u, t: list(f)))(f_e), initial=l_e, data=e.data,
                    observe=obs_e, sigma=e.sigma if own_w else sigma,
                    weights=e.weights if own_w else weights, loss=self.loss,
                    t0=self.t0 if e.t0 is None else e.t0, T=T if e.T is None else e.T,
                    name=f"{self.name}_{e.name}", inputs=in_e or None,
                    constraints=[PathConstraint(c.name, (lambda ex: (lambda x, u, t: ex))(
                        ex.subs(subs)), c.at) for c, ex in path_sym] or None,
                    penalty=(lambda u: pen) if (pen is not None and n_e == 0) else None)
            except ProblemError as err:
                raise ProblemError(f"experiment '{e.name}': {err}") from None
            subs_all.append(subs)
            problems.append(sub)
        self.experiments = exps
        self.experiment_problems = problems
        self.path_constraints = []
        self.t0 = min(sp.t0 for sp in problems)
        self.T = max(sp.T for sp in problems)
        self.obs_names = list(dict.fromkeys(o for sp in problems for o in sp.obs_names))
        self.l_sym = None
        self._scratch = (scratch, xs, us_all, symbol_of)

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
                ex = self._to_sym(c.fn(xs, us, t), f"path constraint '{c.name}'", symbol_of)
                ex = self._with_inputs((ex,))[0]
                paths.append((c, ex))
            elif isinstance(c, ParameterConstraint):
                ex = self._to_sym(c.fn(us), f"parameter constraint '{c.name}'", symbol_of)
                bad = ex.free_symbols - set(self.u_sym)
                if bad:
                    raise ProblemError(f"parameter constraint '{c.name}' may depend on "
                                       f"parameters only; uses {sorted(map(str, bad))}")
                params.append((c, ex))
                continue
            bad = ex.free_symbols - allowed - {sympy.Symbol(k, real=True) for k in self.inputs}
            if bad:
                raise ProblemError(f"path constraint '{c.name}' uses {sorted(map(str, bad))}, "
                                   f"which are not states, parameters, inputs or t")
        return paths, params

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
        return tuple(sympy.sympify(e).subs(subs) for e in exprs)

    @property
    def experiment_names(self):
        """Names of the experiments (``[]`` for a single-experiment problem)."""
        return [e.name for e in self.experiments] if self.experiments else []

    def experiment_problem(self, name):
        """The single-experiment problem of experiment ``name``."""
        for e, sp in zip(self.experiments or [], self.experiment_problems or []):
            if e.name == name:
                return sp
        raise KeyError(f"no experiment named {name!r} (known: {self.experiment_names})")

    def __getattr__(self, name):
        # only reached when normal lookup fails: per-experiment attributes of a
        # problem with several experiments
        if name in _PER_EXPERIMENT and self.__dict__.get("experiment_problems"):
            raise AttributeError(
                f"problem '{self.name}' has several experiments: '{name}' is per experiment "
                f"(problem.experiment_problems[i].{name}); this operation does not take "
                f"several experiments")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _single(self, what):
        if self.experiments:
            raise ProblemError(f"{what} needs a single-experiment problem; problem "
                               f"'{self.name}' has several experiments {self.experiment_names} "
                               f"(see problem.experiment_problems)")

    # -- conversions -------------------------------------------------------
    def _adopt(self, e):
        """A sympy expression of another problem's symbols (or plain Symbols) in
        this problem's symbols: states and parameters by name, time by the
        time symbol's name (which no state or parameter can have) or ``t``
        when no parameter is called ``t``."""
        own = dict(zip(self.states, self.x_sym))
        own.update(zip((p.name for p in self.parameters), self.u_sym))
        mine = set(own.values()) | {self.t_sym}
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
            return self._adopt(e)
        try:
            return pyomo_to_sympy(e, symbol_of)
        except UnsupportedExpressionError as err:
            raise ProblemError(f"{what}: {err}") from None
        except AttributeError:
            raise ProblemError(f"{what}: expected a Pyomo expression or number, got "
                               f"{type(e).__name__}") from None

    def _convert_vector(self, fn, xs, us, t, names, what, symbol_of):
        if not callable(fn):
            raise ProblemError(f"{what} must be callable as {what}(x, u, t)")
        out = fn(xs, us, t)
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

    def _initial(self, initial, us, symbol_of):
        if not isinstance(initial, Mapping):
            try:
                initial = dict(zip(self.states, list(initial), strict=True))
            except (TypeError, ValueError):
                raise ProblemError(f"initial must map each state {self.states} to a value") from None
        missing = [s for s in self.states if s not in initial]
        extra = [k for k in initial if k not in self.states]
        if missing or extra:
            raise ProblemError(f"initial: missing states {missing}, unknown names {extra}")
        out = []
        for s in self.states:
            v = initial[s]
            if isinstance(v, str):
                if v not in [p.name for p in self.parameters]:
                    raise ProblemError(f"initial['{s}'] = '{v}' names no parameter")
                v = us[v]
            elif callable(v):
                v = v(us)
            out.append(self._to_sym(v, f"initial[{s}]", symbol_of))
        free = set().union(*[e.free_symbols for e in out]) - set(self.u_sym)
        if free:
            raise ProblemError(f"initial state may depend on parameters only; uses {free}")
        return tuple(out)

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
        if observe is None:
            unknown = [c for c in names if c not in self.states]
            if unknown:
                raise ProblemError(f"data columns {unknown} name no observed quantity; "
                                   f"observed (default): the states {self.states}")
            self.obs_names = names
            self.g_sym = tuple(self.x_sym[self.states.index(c)] for c in names)
        elif callable(observe):
            out = observe(xs, us, t)
            if not isinstance(out, Mapping):
                raise ProblemError("observe(x, u, t) must return a mapping name -> expression")
            self.obs_names = _check_names(list(out), "observable")
            self.g_sym = tuple(self._to_sym(out[k], f"observe[{k}]", symbol_of)
                               for k in self.obs_names)
        else:
            obs = _check_names(list(observe), "observable")
            bad = [o for o in obs if o not in self.states]
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
            cov = self.loss.matrix(len(self.obs_names))
            self.cov = cov

    def _check_start(self):
        """f must be finite at the initial state and parameter guesses."""
        u0 = self.u0
        x0 = self.initial_state(u0)
        if not np.all(np.isfinite(x0)):
            raise ProblemError(f"initial state l(u0) = {x0} is not finite")
        f = self.numeric_rhs()(x0, u0, self.t0)
        if not np.all(np.isfinite(f)):
            bad = [s for s, v in zip(self.states, f) if not np.isfinite(v)]
            raise ProblemError(f"rhs is not finite at the initial state and parameter guesses "
                               f"(states {bad}: f = {f})")

    # -- pickling and variants ----------------------------------------------------
    #: attributes that cache objects built from the problem (rebuilt on demand);
    #: they are not pickled and not shared with :meth:`variant` copies
    _CACHES = ("_multiple_shooting_models",)

    def __getstate__(self):
        state = dict(self.__dict__)
        for k in self._CACHES:
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

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
            out = copy.copy(self)
            out.experiment_problems = [
                sp.variant(values=per.get("values", {}).get(n),
                           multiplicity=per.get("multiplicity", {}).get(n), fix=fix, start=start)
                for n, sp in zip(names, self.experiment_problems)]
            out.parameters = out.experiment_problems[0].parameters
            return out
        out = copy.copy(self)
        for k in self._CACHES:
            out.__dict__.pop(k, None)
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

    def numeric_rhs(self):
        """``f(x, u, t) -> ndarray`` lambdified from the symbolic rhs."""
        self._single("numeric_rhs")
        fn = sympy.lambdify((self.x_sym, self.u_sym, self.t_sym), list(self.f_sym), "numpy")
        return lambda x, u, t: np.array(fn(x, u, t), dtype=float)

    def initial_state(self, u):
        self._single("initial_state")
        fn = sympy.lambdify((self.u_sym,), list(self.l_sym), "numpy")
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


def _check_inputs(inputs, states, pnames):
    """``{name: Input}`` checked against the states and parameters."""
    from .inputs import Input
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        raise ProblemError("inputs must map input names to Input objects (PiecewiseConstant, "
                           "PiecewiseLinear, Spline)")
    names = _check_names(list(inputs), "input")
    clash = set(names) & (set(states) | set(pnames))
    if clash:
        raise ProblemError(f"input names {sorted(clash)} are also state or parameter names")
    for k, v in inputs.items():
        if not isinstance(v, Input):
            raise ProblemError(f"input '{k}' must be a PiecewiseConstant, PiecewiseLinear or "
                               f"Spline, got {type(v).__name__}")
        bad = [p for p in v.parameter_names() if p not in pnames]
        if bad:
            raise ProblemError(f"input '{k}': values {bad} name no parameter")
    return dict(inputs)


def _switch_times(inputs, t0, T):
    """Breakpoints of the inputs inside (t0, T), sorted; a spline must cover [t0, T]."""
    from .inputs import Spline
    pts = [np.zeros(0)]
    for k, v in inputs.items():
        if isinstance(v, Spline) and (v.times[0] > t0 or v.times[-1] < T):
            raise ProblemError(f"input '{k}': the spline covers [{v.times[0]}, {v.times[-1]}], "
                               f"not the horizon [{t0}, {T}]")
        pts.append(np.asarray(v.breakpoints, dtype=float))
    sw = np.unique(np.concatenate(pts))
    return sw[(sw > t0) & (sw < T)]


_PER_EXPERIMENT = ("data", "mask", "weights", "meas_times", "cov", "g_sym", "switch_times")


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


def _to_wide(data):
    """Wide frame (index = time) and, for long input, a wide frame of sigmas."""
    cols = [str(c).lower() for c in data.columns]
    if "time" in cols and "value" in cols and ("name" in cols or "observable" in cols):
        d = data.rename(columns={c: str(c).lower() for c in data.columns})
        key = "name" if "name" in d.columns else "observable"
        v = d["value"].to_numpy(dtype=float)
        if np.any(~np.isfinite(v)):
            i = int(np.argmax(~np.isfinite(v)))
            raise ProblemError(f"long-format measurement in row {i} ({d[key].iloc[i]} at "
                               f"t={d['time'].iloc[i]}) is {v[i]}: a value is required")
        tt = d["time"].to_numpy(dtype=float)
        if np.any(~np.isfinite(tt)):
            raise ProblemError("long-format data contain a non-finite time")
        dup = d.duplicated(subset=["time", key])
        if dup.any():
            i = int(np.argmax(dup.to_numpy()))
            raise ProblemError(f"duplicate measurement of {d[key].iloc[i]} at t={d['time'].iloc[i]}")
        wide = d.pivot(index="time", columns=key, values="value").sort_index()
        sig = None
        if "sigma" in d.columns:
            sig = d.pivot(index="time", columns=key, values="sigma").sort_index()
        wide.columns = [str(c) for c in wide.columns]
        return wide, sig
    idx = data.index.to_numpy()
    try:
        times = idx.astype(float)
    except (TypeError, ValueError):
        raise ProblemError("wide data need a numeric time index "
                           "(or use long format with columns time, name, value)") from None
    if np.any(~np.isfinite(times)):
        raise ProblemError("data index contains a non-finite time")
    if len(times) > 1 and np.any(np.diff(times) == 0) or len(np.unique(times)) != len(times):
        raise ProblemError("data times contain duplicates; each time must appear once")
    if np.any(np.diff(times) < 0):
        raise ProblemError("data times are not sorted increasingly")
    wide = data.copy()
    wide.index = pd.Index(times, name="time")
    wide.columns = [str(c) for c in wide.columns]
    return wide, None


def _expand_spec(spec, wide, names, what):
    """A float, mapping or frame → array like the wide data."""
    shape = (len(wide.index), len(names))
    spec = as_spec(spec, wide.index, names, what)
    if isinstance(spec, pd.DataFrame):
        s = spec.copy()
        s.columns = [str(c) for c in s.columns]
        s.index = s.index.astype(float)
        bad = [c for c in s.columns if c not in names]
        if bad:
            raise ProblemError(f"{what} columns {bad} name no observed quantity")
        return s.reindex(index=wide.index, columns=names).to_numpy(dtype=float)
    if isinstance(spec, Mapping):
        bad = [c for c in spec if c not in names]
        if bad:
            raise ProblemError(f"{what} names {bad}, which are not observed quantities")
        return np.array([[float(spec.get(c, np.nan)) for c in names]] * shape[0]).reshape(shape)
    return np.full(shape, float(spec))


def _weights(sigma, weights, sig_long, wide, names, mask):
    if sigma is not None and weights is not None:
        raise ProblemError("give either sigma or weights, not both")
    if sigma is None and sig_long is not None:
        sigma = sig_long.reindex(index=wide.index, columns=names)
    if sigma is not None:
        s = _expand_spec(sigma, wide, names, "sigma")
        sm = s[mask]
        if np.any(np.isnan(sm)):
            raise ProblemError("sigma is missing for some measurements")
        if np.any(~(sm > 0)) or np.any(np.isinf(sm)):
            raise ProblemError(f"standard deviations must be positive and finite; got "
                               f"{sm[~((sm > 0) & np.isfinite(sm))][:3]}")
        w = np.where(mask, 1.0 / np.where(mask, s, 1.0) ** 2, 0.0)
        return w
    if weights is not None:
        w = _expand_spec(weights, wide, names, "weights")
        wm = w[mask]
        if np.any(np.isnan(wm)) or np.any(wm < 0) or np.any(np.isinf(wm)):
            raise ProblemError("weights must be finite and non-negative for every measurement")
        return np.where(mask, w, 0.0)
    return mask.astype(float)
