"""What several experiments add to :class:`~pyomo_odeest.problem._declaration.EstimationProblem`:
one single-experiment problem per :class:`~pyomo_odeest.problem._components.Experiment` over the
full (expanded) parameter vector, and the per-experiment attributes."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Mapping

import sympy

from ._components import (Experiment, LeastSquares, Parameter, ParameterConstraint,
                         PathConstraint, _check_names, _Namespace)
from ._validation import ProblemError

__all__ = ["SeveralExperiments", "PER_EXPERIMENT"]

#: Attributes that a problem with several experiments has per experiment only.
PER_EXPERIMENT = ("data", "mask", "weights", "meas_times", "cov", "g_sym", "switch_times")

#: The numeric cache (``EstimationProblem._numeric``) that the experiments' problems adopt
#: while a problem with several experiments builds them: functions of equal expressions
#: (a pre-equilibration's steady state, an initial state) are built once per problem,
#: not once per experiment.
_SHARED_NUMERIC: contextvars.ContextVar = contextvars.ContextVar("pyomo_odeest_numeric_cache",
                                                                 default=None)


@contextlib.contextmanager
def _sharing_numeric(problem):
    """Problems built inside the block share ``problem``'s numeric cache."""
    token = _SHARED_NUMERIC.set(problem.__dict__.setdefault("_numeric_cache", {}))
    try:
        yield
    finally:
        _SHARED_NUMERIC.reset(token)


class SeveralExperiments:
    """Mixin of :class:`~pyomo_odeest.problem._declaration.EstimationProblem` for several
    experiments."""

    def _init_experiments(self, states, parameters, rhs, initial, data, observe, sigma, weights,
                          loss, t0, T, penalty, experiments, inputs, constraints,
                          preequilibration=None):
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
            for e in exps if p.local else [None]:
                spec = None if e is None else (e.parameters or {}).get(p.name)
                src = spec if isinstance(spec, Parameter) else p
                expanded.append(Parameter(
                    p.name if e is None else f"{p.name}_{e.name}",
                    float(spec) if spec is not None and src is p else src.value,
                    src.lb, src.ub, src.fixed))
        enames = _check_names([q.name for q in expanded] + local, "parameter")
        clash = set(enames) & set(self.states)
        if clash:
            raise ProblemError(f"names used both as state and parameter: {sorted(clash)}")
        self.parameters = expanded
        self.t0 = float(t0)
        self.loss = LeastSquares() if loss is None else loss
        scratch, symbol_of, xs = self._symbols(enames)
        if inputs is not None and not isinstance(inputs, Mapping):
            inputs = {k: None for k in inputs}           # names; values per experiment
        in_names = list(dict.fromkeys(list(inputs or {}) + [
            k for e in exps for k in (e.inputs or {})]))
        self.inputs = {k: None for k in _check_names(in_names, "input")}
        in_vars = self._input_vars(scratch, symbol_of)
        us = _Namespace("parameter", {**{p: scratch.u[p] for p in dnames}, **in_vars})
        us_all = _Namespace("parameter", {q.name: scratch.u[q.name] for q in expanded})
        self.f_sym = self._convert_vector(rhs, xs, us, scratch.t, self.states, "rhs", symbol_of)
        initial = self._initial_mapping(initial)
        obs_sym = None
        if callable(observe):
            out = observe(xs, us, scratch.t)
            if not isinstance(out, Mapping):
                raise ProblemError("observe(x, u, t) must return a mapping name -> expression")
            obs_sym = {k: self._to_sym(out[k], f"observe[{k}]", symbol_of)
                       for k in _check_names(list(out), "observable")}
        self._penalty(penalty, us_all, symbol_of)
        pen = None if penalty is None else self.penalty_sym
        if isinstance(constraints, (PathConstraint, ParameterConstraint)):
            constraints = [constraints]
        paths = [c for c in (constraints or []) if isinstance(c, PathConstraint)]
        path_sym, _ = self._constraints(paths, xs, us, scratch.t, symbol_of)
        _, self.parameter_constraints = self._constraints(
            [c for c in (constraints or []) if not isinstance(c, PathConstraint)], xs, us_all,
            scratch.t, symbol_of)
        problems = []
        with _sharing_numeric(self):
            for n_e, e in enumerate(exps):
                subs = {sympy.Symbol(k, real=True): sympy.Symbol(f"{k}_{e.name}", real=True)
                        for k in local}
                init = dict(initial)
                extra = [k for k in (e.initial or {}) if k not in self.states]
                if extra:
                    raise ProblemError(f"experiment '{e.name}': initial names {extra}, which are "
                                       f"not states {self.states}")
                init.update(e.initial or {})

                def convert(mapping, e=e):
                    return {st: self._initial_value(st, v, enames, us, symbol_of,
                                                    f"experiment '{e.name}': ")
                            for st, v in mapping.items()}
                l_e = {st: v.xreplace(subs) for st, v in convert(init).items()}
                pre_e = None
                if (e.preequilibration or preequilibration) is not None:
                    if e.preequilibration is None:
                        e = dataclasses.replace(e, preequilibration=preequilibration)
                    pre_e = self._experiment_preequilibration(e, init, convert, subs, enames, xs,
                                                              us, scratch.t, symbol_of)
                f_e = [fi.xreplace(subs) for fi in self.f_sym]
                obs_e = observe
                if obs_sym is not None:
                    keep = _observed(e, list(obs_sym))
                    obs_e = (lambda d: (lambda x, u, t: d))({k: obs_sym[k].xreplace(subs)
                                                             for k in keep})
                elif e.observables is not None:
                    obs_e = _observed(e, list(observe) if observe is not None else self.states)
                in_e = {k: v for k, v in (inputs or {}).items() if v is not None}
                in_e.update(e.inputs or {})
                missing = [k for k in self.inputs if k not in in_e]
                if missing:
                    raise ProblemError(f"experiment '{e.name}': no value for inputs {missing}")
                own_w = e.sigma is not None or e.weights is not None
                try:
                    sub = type(self)(
                        self.states,
                        [Parameter(q.name, q.value, q.lb, q.ub, q.fixed) for q in expanded],
                        rhs=(lambda f: (lambda x, u, t: list(f)))(f_e), initial=l_e, data=e.data,
                        observe=obs_e, sigma=e.sigma if own_w else sigma,
                        weights=e.weights if own_w else weights, loss=self.loss,
                        t0=self.t0 if e.t0 is None else e.t0, T=T if e.T is None else e.T,
                        name=f"{self.name}_{e.name}", inputs=in_e or None, preequilibration=pre_e,
                        constraints=[PathConstraint(c.name, (lambda ex: (lambda x, u, t: ex))(
                            ex.xreplace(subs)), c.at) for c, ex in path_sym] or None,
                        penalty=(lambda u: pen) if (pen is not None and n_e == 0) else None)
                except ProblemError as err:
                    raise ProblemError(f"experiment '{e.name}': {err}") from None
                problems.append(sub)
        self.experiments = exps
        self.experiment_problems = problems
        self.path_constraints = []
        self.t0 = min(sp.t0 for sp in problems)
        self.T = max(sp.T for sp in problems)
        self.obs_names = list(dict.fromkeys(o for sp in problems for o in sp.obs_names))
        self.l_sym = None
        self.steady_state = None
        self.preequilibration = preequilibration
        self._scratch = (scratch, xs, us_all, symbol_of)

    @property
    def subproblems(self):
        """The single-experiment problems the approaches loop over: the experiments'
        problems, or ``[self]`` (a single-experiment problem is one experiment)."""
        return list(self.experiment_problems) if self.experiments else [self]

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
        if name in PER_EXPERIMENT and self.__dict__.get("experiment_problems"):
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


def _observed(e, names):
    """The observables of experiment ``e`` (its ``observables``, in the problem's order;
    default: all ``names``)."""
    if e.observables is None:
        return names
    wanted = {str(o) for o in e.observables}
    bad = sorted(wanted - set(names))
    if bad:
        raise ProblemError(f"experiment '{e.name}': observables {bad} are not observables of "
                           f"the problem ({names})")
    return [o for o in names if o in wanted]
