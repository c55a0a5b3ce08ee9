r"""A PEtab problem as an :class:`~pyomo_odeest.EstimationProblem`.

Each simulation condition is an :class:`~pyomo_odeest.Experiment` (one condition:
a plain problem), each estimated parameter a :class:`~pyomo_odeest.Parameter` on
its PEtab scale, each observable the observed quantity :math:`g = \tau(y)` with
datum :math:`\tau(m)` and standard deviation σ, so that the objective
:math:`J = \sum (\tau(y)-\tau(m))^2/\sigma^2` gives PEtab's negative
log-likelihood as :math:`J/2` + :attr:`PetabEstimation.constant`
(:meth:`PetabEstimation.nll`).  See docs/petab.md: "Mapping onto the package's
concepts" for the whole table; "The objective" for σ as an estimated parameter
(profiled out), several noise parameters (the alternation of
:meth:`PetabEstimation.fit`), σ sharing a parameter with the model (scaled
residuals, :math:`2\sum_i\log\sigma_i(u)` in the penalty) and σ of the states or time
(per datum also the residual :math:`\sqrt{2\log\sigma_i + C}`, :data:`LOG_SIGMA_SHIFT`);
"Priors" (the penalty :math:`R(u) = 2\sum_q -\log p_q(\theta_q)`); "Inputs switched in
time" (indicator inputs); "Measurements at t = 0 only; steady-state measurements".
"""
from __future__ import annotations

import math
import re
import time
import warnings

import numpy as np
import pandas as pd
import sympy

from ..problem._declaration import EstimationProblem, Parameter, Preequilibration
from ..problem._inputs import PiecewiseConstant
from ..symbolic import lambdify
from ..symbolic._convert import sympy_to_pyomo, unrenderable
from ._likelihood import PetabSimulator
from ._sbml import TIME, UnsupportedFeatureError, switch_times, symbol, time_piecewise
from ._tables import (PetabModel, log_jacobian, per_transformation, read_petab, scale_value,
                      transform_sym, transform_value, unscale_sym)

__all__ = ["PetabEstimation", "petab_problem"]

#: C of the residual :math:`\sqrt{2\log\sigma + C}` of a datum whose σ depends on the
#: states or time: σ may go down to exp(−25) before the residual is undefined
LOG_SIGMA_SHIFT = 50.0


class PetabEstimation:
    """An imported PEtab problem ready for every approach.

    Attributes
    ----------
    model : PetabModel
    problem : EstimationProblem
        The estimation problem (pass it to :func:`~pyomo_odeest.estimate`,
        :func:`~pyomo_odeest.compare_approaches`, the multistart runner).
    constant : float
        Constant terms of the NLL (those of the profiled σ excluded).
    sigma_parameter : str or None
        The estimated σ parameter profiled out (docs/petab.md, "The objective").
    noise_parameters : list of str
        Several estimated noise parameters, estimated by :meth:`fit` (empty
        otherwise); ``noise_start`` their start values (linear scale), at
        which σ of :attr:`problem` is stated.
    setup_s : float
        Seconds :func:`petab_problem` took (reading the files and building the problem).
    """

    def __init__(self, model: PetabModel, problem, constant, sigma_parameter, sigma_factors,
                 jacobian_sum, conditions, groups=None, data=None, noise=None):
        self.model = model
        self.conditions = list(conditions)
        self.problem = problem
        self.constant = float(constant)
        self.sigma_parameter = sigma_parameter
        self._c = sigma_factors
        self._jac = jacobian_sum
        self._simulator = None
        self._groups = groups                      # per datum: noise parameter id or None
        self._data = data                          # per datum: condition, time, name
        self._noise = noise                        # general sigma(noise parameters), or None
        if noise is not None:
            self.noise_parameters = list(noise.names)
        else:
            self.noise_parameters = sorted({g for g in (groups or []) if g is not None})
        self.noise_start = {g: self.model.parameter(g).nominal for g in self.noise_parameters}
        self.setup_s = float("nan")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_simulator"] = None             # compiled functions, made again on use
        return state

    @property
    def n_data(self):
        return len(self._c)

    def profiled_sigma(self, objective):
        """:math:`s^\\star` from the least-squares objective (``None`` without a profiled σ)."""
        if self.sigma_parameter is None:
            return None
        p = self.model.parameter(self.sigma_parameter)
        s = math.sqrt(max(objective / self.n_data, 0.0))
        return min(max(s, p.lb), p.ub)

    def nll(self, objective, noise=None):
        """PEtab's negative log-likelihood from the problem's objective value
        (the objective of an :class:`~pyomo_odeest.EstimationResult`); with several
        noise parameters, of a problem whose σ was stated at ``noise`` (default:
        their start values; a result of :meth:`fit` holds them in
        ``extra['petab_noise']``)."""
        objective = float(objective)
        if self.noise_parameters:
            sig = self._sigmas(noise)
            return 0.5 * objective + self._jac + float(
                np.sum(0.5 * np.log(2 * np.pi * sig ** 2))) + self._noise_prior(noise)
        if self.sigma_parameter is None:
            return 0.5 * objective + self.constant
        s = self.profiled_sigma(objective)
        return (0.5 * np.sum(np.log(2 * np.pi * (self._c * s) ** 2)) + self._jac
                + objective / (2 * s**2))

    def scaled_estimates(self, result):
        """The estimated PEtab parameters on their scales (a Series in the parameter
        table's order), the profiled σ included."""
        est = result.estimates
        noise = {**self.noise_start, **(result.extra.get("petab_noise") or {})}
        out = {}
        for p in self.model.estimated:
            if p.id == self.sigma_parameter:
                out[p.id] = scale_value(self.profiled_sigma(result.objective), p.scale)
            elif p.id in noise:
                out[p.id] = scale_value(noise[p.id], p.scale)
            else:
                out[p.id] = float(est[p.id])
        return pd.Series(out, name="scaled")

    def simulated_nll(self, result=None, priors=False):
        """NLL by the independent simulation (:class:`PetabSimulator`) at a
        result's estimates (default: the nominal parameters); with ``priors=True``
        the priors' negative log-density is added (the estimation's objective)."""
        if self.conditions != self.model.conditions:
            raise ValueError("simulated_nll needs the problem of every condition "
                             f"{self.model.conditions}; this one holds {self.conditions}")
        if self._simulator is None:
            self._simulator = PetabSimulator(self.model)
        scaled = None if result is None else self.scaled_estimates(result).to_numpy()
        out = self._simulator.nll(scaled)
        return out + self.model.prior_nll(scaled) if priors else out

    # -- several estimated noise parameters ----------------------------------
    def _sigmas(self, noise=None):
        """Per datum: σ at the noise parameters ``noise`` (linear scale; default their
        start values)."""
        noise = {**self.noise_start, **(noise or {})}
        if self._noise is not None:
            return self._noise.sigma(noise)
        return self._c * np.array([1.0 if g is None else float(noise[g]) for g in self._groups])

    def _noise_prior(self, noise=None):
        noise = {**self.noise_start, **(noise or {})}
        return float(sum(self.model.parameter(g).prior_nll(noise[g]) for g in noise))

    def _residuals(self, result):
        """Per datum: τ(y) − τ(m) of ``result``, in the order of the measurements."""
        R = result.residuals
        d = self._data
        if self.problem.experiments:
            return np.array([float(R.loc[(c, t), n]) for c, t, n in
                             zip(d["condition"], d["time"], d["name"])])
        return np.array([float(R.loc[t, n]) for t, n in zip(d["time"], d["name"])])

    def _stated(self, noise):
        """The problem with σ stated at ``noise`` (weights rescaled from the start)."""
        ratio = (self._sigmas(None) / self._sigmas(noise)) ** 2
        P = self.problem
        d = self._data.assign(m=ratio)

        def multiplicity(sp, rows):
            M = np.ones(sp.mask.shape)
            col = {n: k for k, n in enumerate(sp.obs_names)}
            row = {t: k for k, t in enumerate(sp.meas_times)}
            for t, n, m in zip(rows["time"], rows["name"], rows["m"]):
                M[row[t], col[n]] = m
            return M
        if P.experiments:
            return P.variant(multiplicity={c: multiplicity(sp, d[d["condition"] == c])
                                           for c, sp in zip(P.experiment_names,
                                                            P.experiment_problems)})
        return P.variant(multiplicity=multiplicity(P, d))

    def fit(self, approach="reduced_space", rounds=50, rtol=1e-9, max_time=None, **options):
        r"""Estimate θ and several noise parameters by alternating exact partial
        minimizations (docs/petab.md, "The objective"): ``rounds`` at most, until the
        noise parameters change by less than ``rtol`` (relative); no new round
        after ``max_time`` seconds (None: no limit).  ``options`` go to
        :func:`~pyomo_odeest.estimate` (``u0`` starts the first round).
        Returns the last round's result with ``extra['petab_noise']`` (the noise
        parameters, linear scale), ``extra['petab_rounds']`` and
        ``extra['petab_nll']`` (PEtab's NLL on the discretization).  When the
        alternation stops before the noise parameters settle, its status is
        ``max_iterations`` (or ``time_limit``), not the last round's success: θ
        is then optimal for noise parameters that are not."""
        from ..approaches._estimate import approach_options, estimate
        from ..problem._status import Status, demote
        if not self.noise_parameters:
            res = estimate(self.problem, approach, **options)
            res.extra["petab_nll"] = self.nll(res.objective)
            return res
        noise = dict(self.noise_start)
        groups = np.array([g if g is not None else "" for g in (self._groups or [])])
        clock = time.perf_counter()
        settled, late, change = False, False, np.inf
        for k in range(1, rounds + 1):
            res = estimate(self._stated(noise), approach, **options)
            if not res.success:
                break
            options["u0"] = res.x
            if res.grid is not None and "grid" in approach_options(approach):
                # the next round starts on this round's (certified) grid
                options.update(grid=res.grid, max_step=None, steps_per_interval=None)
            if self._noise is not None:
                new = self._noise.minimize(self._residuals(res), noise)
            else:
                r2 = (self._residuals(res) / self._c) ** 2
                new = {}
                for g in self.noise_parameters:
                    p = self.model.parameter(g)
                    new[g] = min(max(float(np.sqrt(np.mean(r2[groups == g]))), p.lb), p.ub)
            change = max(abs(new[g] / noise[g] - 1.0) for g in noise)
            res.extra.update(petab_noise=dict(noise), petab_rounds=k)
            noise = new
            if change < rtol:
                settled = True
                break
            if max_time is not None and time.perf_counter() - clock > max_time:
                late = True
                break
        if not settled:
            why = (f"the alternation of the parameters and the noise parameters stopped after "
                   f"{k} rounds " + (f"(max_time {max_time:g} s) " if late else "")
                   + f"with the noise parameters still changing by {change:.2g} (relative, "
                   f"rtol {rtol:g})")
            if demote(res, Status.TIME_LIMIT if late else Status.MAX_ITERATIONS, why):
                res.warnings.append(why)
        res.extra["petab_nll"] = self.nll(res.objective, res.extra.get("petab_noise"))
        return res

    def __repr__(self):
        return (f"PetabEstimation({self.model.name}: {self.problem!r}, constant={self.constant:.6g}"
                f", profiled sigma={self.sigma_parameter})")


class _NoiseModel:
    r"""σ of every datum as a smooth function of the noise parameters :math:`s`
    (linear scale), and the exact partial minimization over :math:`s` of
    :math:`\sum_i \tfrac12 r_i^2/\sigma_i(s)^2 + \log\sigma_i(s) - \log p(s)`."""

    def __init__(self, model, sigmas, names):
        self.model, self.names = model, list(names)
        syms = [symbol(n) for n in self.names]
        self._sig = lambdify((syms,), list(sigmas), "numpy")
        self._dsig = lambdify((syms,), sympy.Matrix(list(sigmas)).jacobian(syms), "numpy")
        prior = sum(model.parameter(n).prior_nll(symbol(n)) for n in self.names)
        prior = sympy.sympify(prior)
        self._prior = lambdify((syms,), prior, "numpy")
        self._dprior = lambdify((syms,), [sympy.diff(prior, v) for v in syms], "numpy")
        self.n = len(sigmas)

    def sigma(self, noise):
        v = [float(noise[n]) for n in self.names]
        return np.broadcast_to(np.asarray(self._sig(v), dtype=float), (self.n,)).copy()

    def minimize(self, r, noise):
        from scipy.optimize import minimize
        r2 = np.asarray(r, dtype=float) ** 2
        pars = [self.model.parameter(n) for n in self.names]

        def fun(v):
            sig = np.broadcast_to(np.asarray(self._sig(v), dtype=float), (self.n,))
            dsig = np.asarray(self._dsig(v), dtype=float).reshape(self.n, len(v))
            f = float(np.sum(0.5 * r2 / sig**2 + np.log(sig)) + self._prior(v))
            g = (-r2 / sig**3 + 1.0 / sig) @ dsig + np.asarray(self._dprior(v), dtype=float)
            return f, g
        x0 = np.array([float(noise[n]) for n in self.names])
        out = minimize(fun, x0, jac=True, method="L-BFGS-B",
                       bounds=[(p.lb, p.ub) for p in pars],
                       options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000})
        return {n: float(v) for n, v in zip(self.names, out.x)}


def _rewrite_time_piecewise(model, taken):
    r"""Per SBML piecewise of time in the rates: its replacement
    :math:`\sum_k v_k I_k` (indicator symbols ``I_k``) and the pieces."""
    pws = sorted({pw for e in model.ode.rhs.values() for pw in time_piecewise(e)}, key=str)
    sub, pieces = {}, []
    for j, pw in enumerate(pws):
        names = [_identifier(f"switch{j + 1}_piece{k + 1}", taken) for k in range(len(pw.args))]
        sub[pw] = sympy.Add(*[v * symbol(n) for (v, _), n in zip(pw.args, names)])
        pieces.append((pw, names))
    return sub, pieces


def _indicator_inputs(model, pieces, cond, fixed_sub, t0, T):
    """The indicator inputs of ``cond``: 1 where piece k of a piecewise is the active one."""
    out = {}
    for pw, names in pieces:
        e = pw.xreplace(model.constants[cond]).xreplace(fixed_sub)
        ts = switch_times(e, f"{model.name}: condition {cond}")
        nums = []
        for t in ts:
            if t.free_symbols:
                raise UnsupportedFeatureError(
                    f"{model.name}: condition {cond}: the switching time {t} of a piecewise "
                    "input depends on estimated parameters (supported: switching times given "
                    "by numbers or fixed parameters)")
            nums.append(float(t))
        inside = sorted(t for t in set(nums) if t0 < t < T)
        starts = [t0] + inside
        ends = inside + [max(T, t0) + 1.0]
        active = []
        for a, b in zip(starts, ends):
            mid = 0.5 * (a + b)
            k = next((k for k, (_, c) in enumerate(e.args)
                      if bool(sympy.sympify(c).subs(TIME, mid))), None)
            if k is None:
                raise ValueError(f"{model.name}: condition {cond}: no piece of {pw} holds at "
                                 f"t = {mid} (give the piecewise an otherwise value)")
            active.append(k)
        for k, nm in enumerate(names):
            out[nm] = PiecewiseConstant(starts, [float(a == k) for a in active])
    return out


class _OfParameters:
    """A sympy expression of the parameters ``names`` (an initial value ``l(u)``, the priors'
    penalty ``R(u)``) as a picklable callable on the parameters' Pyomo objects."""

    def __init__(self, expr, names):
        self.expr, self.names = expr, list(names)

    def __call__(self, u):
        return sympy_to_pyomo(self.expr, {symbol(n): u[n] for n in self.names})


def _check_sigma(model, meas, fixed_sub):
    """σ > 0 at the start (the nominal parameters) where no simulation is needed: σ of
    parameters, and σ of the states at t = 0 of a condition without pre-equilibration."""
    start = dict(fixed_sub)
    start.update({symbol(p.id): sympy.Float(p.nominal, 17) for p in model.estimated})
    seen = set()
    for oid, sgm, cond, t in zip(meas["observableId"], meas["sigma"],
                                 meas["simulationConditionId"], meas["time"]):
        at_0 = t == 0 and cond not in model.preequilibration
        if (sgm, at_0 and cond) in seen:
            continue
        seen.add((sgm, at_0 and cond))
        e = sgm
        if at_0:
            e = e.xreplace({symbol(x): v for x, v in model.initial[cond].items()})
            e = e.xreplace({TIME: sympy.Integer(0)})
        e = e.xreplace(start)
        if e.free_symbols:
            continue
        try:
            v = float(e)
        except TypeError:
            v = float("nan")
        if not v > 0:
            raise ValueError(
                f"{model.name}: the noise formula of {oid} ({sgm}) is {v:.6g} at the nominal "
                "parameters" + (f" (condition {cond}, t = 0)" if at_0 else "")
                + "; sigma must be positive")


def _start(p, name):
    """The start of an estimated parameter on its scale: its nominal value, or, where that
    is not finite (0 on a log scale) or outside the bounds, the nearest bound (with a
    warning naming the parameter)."""
    v = p.scaled_nominal
    lo, hi = p.scaled_bounds
    if math.isfinite(v) and lo <= v <= hi:
        return v
    out = float(np.clip(v, lo, hi))
    if not math.isfinite(out):
        raise ValueError(f"{name}: parameter {p.id}: nominal value {p.nominal} on the "
                         f"{p.scale} scale gives no finite start within its bounds "
                         f"[{p.lb}, {p.ub}]; give a nominal value inside the bounds")
    warnings.warn(f"{name}: the nominal value {p.nominal} of {p.id} lies outside its bounds "
                  f"[{p.lb}, {p.ub}] on its {p.scale} scale; its start is the bound "
                  f"{out:.6g} (scaled)", UserWarning, stacklevel=3)
    return out


def _names(expr):
    """The names of the free symbols of ``expr``."""
    return {x.name for x in sympy.sympify(expr).free_symbols}


def _identifier(name, taken):
    base = re.sub(r"\W", "_", name)
    out, k = base, 2
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


#: how :func:`petab_problem` states estimated noise parameters other than one profiled σ
NOISE_FORMS = ("joint", "alternate")


def petab_problem(source, conditions=None, noise="joint") -> PetabEstimation:
    r"""Import a PEtab problem (YAML path, folder or :class:`PetabModel`) for estimation.

    One simulation condition gives a single-experiment problem; several give
    one :class:`~pyomo_odeest.Experiment` per condition (named by the
    condition id).  ``conditions`` selects a subset (default: all).  The seconds it
    takes are the result's ``setup_s``.

    ``noise`` states the estimated noise parameters, unless σ is a number times
    one of them (profiled out exactly): ``'joint'`` (default) makes them
    parameters of the estimation (every datum its scaled residual, the penalty
    :math:`2\sum\log\sigma_i`: every approach minimizes PEtab's NLL over θ
    and σ at once); ``'alternate'`` states σ at its current values and leaves
    them to :meth:`PetabEstimation.fit` (docs/petab.md, "The objective").
    """
    if noise not in NOISE_FORMS:
        raise ValueError(f"noise={noise!r}: expected one of {NOISE_FORMS}")
    clock = time.perf_counter()
    model = source if isinstance(source, PetabModel) else read_petab(source)
    conditions = list(model.conditions if conditions is None else
                      ([conditions] if isinstance(conditions, str) else conditions))
    unknown = [c for c in conditions if c not in model.conditions]
    if not conditions:
        raise ValueError(f"{model.name}: no condition selected (conditions=[]); pass None for "
                         f"all, or some of {model.conditions}")
    if unknown:
        raise ValueError(f"{model.name}: unknown conditions {unknown}; "
                         f"conditions: {model.conditions}")
    meas = model.measurements[model.measurements["simulationConditionId"].isin(conditions)]
    meas = meas.reset_index(drop=True)

    # sigma: numbers, c_i * s with one estimated s (profiled), or a smooth function of
    # noise-only parameters (alternation)
    est_ids = {p.id for p in model.estimated}
    fixed_sub = {symbol(p.id): sympy.Float(p.nominal, 17) for p in model.parameters
                 if not p.estimate}
    state_names = set(model.ode.states)
    model_side = set().union(*[_names(e) for e in meas["y"]], *[
        _names(e) for cond in conditions
        for e in list(model.constants[cond].values()) + list(model.initial[cond].values())])
    _check_sigma(model, meas, fixed_sub)
    # sigma of the states (observables are states here) or time: per datum also the
    # residual sqrt(2 log σ + C), so that the squares sum to r²/σ² + 2 log σ + C
    of_states = np.array([bool(_names(sgm) & state_names) or TIME in sgm.free_symbols
                          for sgm in meas["sigma"]], dtype=bool)
    # sigma sharing an estimated parameter with the model or an observable, of the
    # states, or (noise='joint') of noise parameters that are not one profiled σ: every
    # datum its own scaled residual (docs/petab.md, "The objective")
    joint = of_states.any() or any(_names(sgm) & est_ids & model_side for sgm in meas["sigma"])
    sig_rows = [_names(sgm) & est_ids for sgm in meas["sigma"]]
    sig_par = set().union(*sig_rows)
    sigma_parameter = groups = general = noise_model = None
    c = np.ones(len(meas))                  # joint: scaled residuals of σ = 1
    if sig_par and not joint:
        ratio = []
        for sgm, u in zip(meas["sigma"], sig_rows):
            e = sgm.xreplace(fixed_sub)
            ratio.append(sympy.simplify(e / symbol(next(iter(u)))) if len(u) == 1 else e)
        simple = all(not e.free_symbols and len(u) <= 1 for e, u in zip(ratio, sig_rows))
        noise_priors = any(model.parameter(g).prior is not None for g in sig_par)
        profiled = simple and not noise_priors and len(sig_par) == 1 and all(sig_rows) \
            and not model.has_priors
        joint = not profiled and noise == "joint"
    if sig_par and not joint:
        if profiled:
            sigma_parameter = sig_par.pop()
        elif simple and not noise_priors:
            groups = [next(iter(u)) if u else None for u in sig_rows]
        else:
            general = sorted(sig_par)
        if general is None:
            c[:] = [float(e) for e in ratio]
        else:
            noise_model = _NoiseModel(model, [sg.xreplace(fixed_sub) for sg in meas["sigma"]],
                                      general)
            c = noise_model.sigma({g: model.parameter(g).nominal for g in general})
    elif not joint:
        c[:] = [float(sgm.xreplace(fixed_sub)) for sgm in meas["sigma"]]

    # parameters on their scales
    noise_ids = set(groups or []) - {None} | set(general or [])
    estimated = [p for p in model.estimated if p.id != sigma_parameter and p.id not in noise_ids]
    sigma_terms = {}                    # joint: scaled sigma of parameters -> number of data
    # per datum: the noise parameter's start (1 with a general noise model: c holds σ there)
    s_start = np.array([1.0 if g is None else model.parameter(g).nominal
                        for g in (groups or [None] * len(meas))])
    params = [Parameter(p.id, _start(p, model.name),
                        *[b if math.isfinite(b) else None for b in p.scaled_bounds])
              for p in estimated]
    to_scaled = dict(fixed_sub)
    to_scaled.update({symbol(p.id): unscale_sym(symbol(p.id), p.scale) for p in estimated})

    def scaled(e):
        return sympy.sympify(e).xreplace(to_scaled)

    states = list(model.ode.states)
    taken = set(states) | {p.id for p in estimated}
    pw_sub, pieces = _rewrite_time_piecewise(model, taken)
    input_names = [n for _, names in pieces for n in names]
    for y in meas["y"]:
        if time_piecewise(y):
            raise UnsupportedFeatureError(
                f"{model.name}: an observable formula holds a piecewise of time (supported in "
                "the model's rates, assignment rules and initial values)")

    def model_rhs(cond, at=None):
        """The rates of ``cond``: piecewise of time as indicator inputs, or their values at
        time ``at`` (0: pre-equilibration; oo: after every switch, for a steady state)."""
        if at is None:
            return [sympy.sympify(model.ode.rhs[x]).xreplace(pw_sub)
                    .xreplace(model.constants[cond]) for x in states]
        out = [sympy.sympify(model.ode.rhs[x]).xreplace(model.constants[cond])
               .xreplace(fixed_sub) for x in states]
        out = [e.xreplace({pw: pw.subs(TIME, at) for pw in time_piecewise(e)}) for e in out]
        if any(time_piecewise(e) for e in out):
            raise UnsupportedFeatureError(f"{model.name}: the steady state of condition {cond} "
                                          "keeps a piecewise of time (its switching time is "
                                          "not a number)")
        return out

    # observed quantities: one per distinct (observable, formula); replicates split; with
    # joint sigma one scaled residual per datum (and one of log σ per datum of the states)
    obs_name, obs_expr, names, log_sigma = {}, {}, [], []
    for i, (oid, y) in enumerate(zip(meas["observableId"], meas["y"])):
        if joint:
            nm = _identifier(f"{oid}_d{i}", taken)
            obs_name[(oid, y, i)] = nm
            tr = model.observables[oid].transformation
            sg = scaled(meas["sigma"][i])
            obs_expr[nm] = (transform_sym(scaled(y), tr) - float(
                transform_value(float(meas["measurement"][i]), tr))) / sg
            names.append(nm)
            if of_states[i]:
                log_sigma.append(_identifier(f"{nm}_log_sigma", taken))
                obs_expr[log_sigma[-1]] = sympy.sqrt(2 * sympy.log(sg) + LOG_SIGMA_SHIFT)
                names.append(log_sigma[-1])
            else:
                sigma_terms[sg] = sigma_terms.get(sg, 0) + 1
        elif (oid, y) not in obs_name:
            nm = _identifier(oid, taken)
            obs_name[(oid, y)] = nm
            obs_expr[nm] = transform_sym(scaled(y), model.observables[oid].transformation)
            names.append(nm)
    trans = [model.observables[o].transformation for o in meas["observableId"]]
    value = per_transformation(transform_value, meas["measurement"], trans)
    jac = per_transformation(log_jacobian, meas["measurement"], trans)
    long = pd.DataFrame({"condition": meas["simulationConditionId"].to_numpy(copy=True),
                         "time": meas["time"].to_numpy(copy=True),
                         "name": [obs_name[(o, y, i) if joint else (o, y)] for i, (o, y) in
                                  enumerate(zip(meas["observableId"], meas["y"]))],
                         "value": 0.0 if joint else value, "sigma": c * s_start})
    rep = long.groupby(["condition", "time", "name"]).cumcount().to_numpy()
    for i in np.flatnonzero(rep):
        base = long.at[i, "name"]
        nm = f"{base}_rep{rep[i] + 1}"
        if nm not in obs_expr:
            obs_expr[nm] = obs_expr[base]
            names.append(nm)
            taken.add(nm)
        long.at[i, "name"] = nm

    def noise(cond):
        """``sigma=`` (σ known) or ``weights=`` 1/c² (σ = c·s with s profiled)."""
        if sigma_parameter is None:
            return dict(sigma=wide(cond, "sigma"))
        return dict(weights=1.0 / wide(cond, "sigma") ** 2)

    def wide(cond, what):
        d = long[long["condition"] == cond]
        present = set(d["name"])
        cols = [n for n in names if n in present]
        return d.pivot(index="time", columns="name", values=what).reindex(columns=cols)

    # steady-state measurements (time = inf): an experiment of their own, pre-equilibrated
    # to the condition's steady state, observed at t = 0
    times = meas["time"].to_numpy(dtype=float)
    steady = np.isinf(times)
    exps = []                                       # (experiment, condition, steady?)
    for cond in conditions:
        rows = (meas["simulationConditionId"] == cond).to_numpy()
        if np.any(rows & ~steady):
            exps.append((cond, cond, False))
        if np.any(rows & steady):
            if cond in model.preequilibration:
                raise UnsupportedFeatureError(
                    f"{model.name}: condition {cond} has steady-state measurements (time = inf) "
                    "and a pre-equilibration (supported: one or the other)")
            ss = _identifier(f"{cond}_steady_state", taken)
            exps.append((ss, cond, True))
            long.loc[rows & steady, "condition"] = ss
            long.loc[rows & steady, "time"] = 0.0
    data_rows = long[["condition", "time", "name"]].copy()          # per datum
    if log_sigma:           # the log-σ residuals: data 0, σ 1, where their datum is
        long = pd.concat([long, long[of_states].assign(name=log_sigma, value=0.0, sigma=1.0)],
                         ignore_index=True)
    finite = times[~steady]
    # horizons: an experiment with data at t = 0 only runs to the first positive time
    t_first = float(finite[finite > 0].min()) if np.any(finite > 0) else 1.0
    horizon = {e: float(long["time"][long["condition"] == e].max()) for e, _, _ in exps}
    T_of = {e: (t_first if horizon[e] <= 0.0 else None) for e, _, _ in exps}
    inputs_of = {e: _indicator_inputs(model, pieces, cond, fixed_sub, 0.0,
                                      T_of[e] or horizon[e]) or None
                 for e, cond, _ in exps}

    # model constants that differ between conditions: k = a_k + sum_q b_kq * theta_q with
    # fixed per-experiment (local) coefficients a_k, b_kq
    rhs_c = {cond: [scaled(e) for e in model_rhs(cond)] for cond in conditions}
    local = []                      # (name, {condition: value})
    if len(conditions) > 1 or len(exps) > 1:
        generic = {}

        def local_name(base):
            """A new name whose experiment copies ``<name>_<experiment>`` are new too."""
            while True:
                nm = _identifier(base, taken)
                copies = {f"{nm}_{e}" for e, _, _ in exps}
                if not copies & taken:
                    taken.update(copies)
                    return nm
        in_rhs = set().union(*[sympy.sympify(e).xreplace(pw_sub).free_symbols
                               for e in model.ode.rhs.values()])
        for k in model.ode.constants:
            ks = symbol(k)
            if ks not in in_rhs:
                continue
            vals = {cond: scaled(model.constants[cond][ks]) for cond in conditions}
            if len(set(vals.values())) == 1:
                generic[ks] = vals[conditions[0]]
                continue
            coef_a = {cond: (float(v) if v.is_Number else 0.0) for cond, v in vals.items()}
            parts = sympy.Integer(0)
            a_name = local_name(k)
            local.append((a_name, coef_a))
            parts += symbol(a_name)
            for w in sorted({v for v in vals.values() if not v.is_Number}, key=str):
                b_name = local_name(f"{k}__{'_'.join(sorted(s.name for s in w.free_symbols))}")
                local.append((b_name, {cond: float(vals[cond] == w) for cond in conditions}))
                parts += symbol(b_name) * w
            generic[ks] = parts
        f = [sympy.sympify(model.ode.rhs[s]).xreplace(pw_sub).xreplace(generic)
             for s in states]
    else:
        f = rhs_c[conditions[0]]
    x0 = {cond: [scaled(model.initial[cond][s]) for s in states] for cond in conditions}

    # priors of the estimated (non-noise) parameters: the penalty 2 * sum -log p
    prior_sym = sympy.Integer(0)
    for p in estimated:
        if p.prior is not None:
            prior_sym += sympy.sympify(p.prior_nll(unscale_sym(symbol(p.id), p.scale)))
    prior_sym = sympy.expand_log(prior_sym, force=True) if prior_sym != 0 else prior_sym

    if sigma_parameter is None:
        constant = float(np.sum(0.5 * np.log(2 * np.pi * (c * s_start)**2) + jac)
                         - 0.5 * LOG_SIGMA_SHIFT * len(log_sigma))
    else:
        constant = float(np.sum(jac))

    # every formula must be representable on the package's expressions: a construct that is
    # not is the model's (named with its SBML elements), not a failure of a right-hand side
    for what, exprs in (("the rate of", dict(zip(states, f))),
                        ("the initial value of", {s: v for cond in conditions
                                                  for s, v in zip(states, x0[cond])}),
                        ("the observable", obs_expr)):
        for k, e in exprs.items():
            bad = unrenderable(e)
            if bad is not None:
                where = model.ode.named(bad)
                raise UnsupportedFeatureError(
                    f"{model.ode.path}: {bad.func.__name__} ({bad}) in {what} {k}"
                    + (f" (SBML: {', '.join(where[:3])})" if where else "")
                    + " has no representation in the estimation's expressions (supported: "
                    "arithmetic, powers, exp, log, trigonometric and hyperbolic functions, "
                    "abs, min, max, piecewise with relations, and, or, not)")

    u_names = [p.id for p in estimated] + [nm for nm, _ in local]
    rhs = _Rendered(f, states, u_names + input_names)

    def observe(x, u, t):
        o = _objects(x, u, t, states, u_names)
        return {nm: sympy_to_pyomo(obs_expr[nm], o) for nm in names}

    penalty = None
    if joint:
        prior_sym = prior_sym + sympy.Add(*[n * sympy.log(sg) for sg, n in sigma_terms.items()])
    if prior_sym != 0:
        penalty = _OfParameters(2 * prior_sym, [p.id for p in estimated])

    def initial_fn(e):
        return _OfParameters(e, u_names) if e.free_symbols else float(e)

    def preequilibration(cond, steady_state=False):
        """The steady state of the pre-equilibration condition, the species ``cond`` sets
        reset; with ``steady_state``, the steady state of ``cond`` itself."""
        pre = cond if steady_state else model.preequilibration.get(cond)
        if pre is None:
            return None
        f_pre = [scaled(e) for e in model_rhs(pre, at=sympy.oo if steady_state else 0)]
        return Preequilibration(
            rhs=_Rendered(f_pre, states, u_names), reset=[] if steady_state else model.reset[cond],
            initial={s: initial_fn(scaled(model.initial[pre][s])) for s in states})

    if len(exps) == 1:
        e, cond, ss = exps[0]
        problem = EstimationProblem(
            states=states, parameters=params, rhs=rhs,
            initial={s: initial_fn(v) for s, v in zip(states, x0[cond])},
            data=wide(e, "value"), observe=observe, **noise(e),
            name=model.name, preequilibration=preequilibration(cond, ss), T=T_of[e],
            inputs=inputs_of[e], penalty=penalty)
    else:
        from ..problem._declaration import Experiment
        params = params + [Parameter(nm, 0.0, fixed=True, local=True) for nm, _ in local]
        experiments = [
            Experiment(e, data=wide(e, "value"), **noise(e), T=T_of[e],
                       observables=list(wide(e, "value").columns),
                       inputs=inputs_of[e],
                       initial={s: initial_fn(v) for s, v in zip(states, x0[cond])},
                       parameters={nm: Parameter(nm, v[cond], fixed=True) for nm, v in local},
                       preequilibration=preequilibration(cond, ss))
            for e, cond, ss in exps]
        problem = EstimationProblem(
            states=states, parameters=params, rhs=rhs, initial={s: 0.0 for s in states},
            data=None, observe=observe, experiments=experiments, name=model.name,
            penalty=penalty, inputs=input_names or None)
    out = PetabEstimation(model, problem, constant, sigma_parameter, c, float(np.sum(jac)),
                          conditions, groups, data_rows, noise_model)
    out.setup_s = time.perf_counter() - clock
    return out


def _objects(x, u, t, states, names):
    """The objects of a call ``(x, u, t)`` of the declaration's ``rhs``/``observe`` by
    the SBML's symbols: parameters (and inputs) ``names`` of ``u``, the states and time."""
    obj = {symbol(n): u[n] for n in names}
    if x is not None:
        obj[TIME] = t
        obj.update({symbol(s): x[s] for s in states})
    return obj


class _Rendered:
    """``rhs(x, u, t)``: the sympy expressions ``exprs`` of the SBML model rendered on
    the objects of the call (:func:`_objects`); a class, so that a problem that keeps
    it (a pre-equilibration's dynamics) pickles."""

    def __init__(self, exprs, states, names):
        self.exprs, self.states, self.names = list(exprs), list(states), list(names)

    def __call__(self, x, u, t):
        o = _objects(x, u, t, self.states, self.names)
        return [sympy_to_pyomo(e, o) for e in self.exprs]
