r"""PEtab's negative log-likelihood by an independent simulation.

:func:`petab_nll` integrates every simulation condition with SciPy's
LSODA (Adams/BDF switching) at tight tolerances, with the exact Jacobian
:math:`\partial f/\partial x` from sympy, and sums

.. math::

    \tfrac12\log(2\pi\sigma^2) + \log J_\tau(m)
    + \tfrac12\Big(\frac{\tau(y(t)) - \tau(m)}{\sigma}\Big)^2

over the data (see :mod:`pyomo_odeest.petab_io._tables`).  It is the first check
of an import: at the nominal parameters it reproduces the value published
with a benchmark problem.  A pre-equilibrated condition starts from the state
its pre-equilibration condition settles to by simulation (the species the
condition sets are reset), independently of the Newton solves of
:mod:`pyomo_odeest.problem._steady_state`.  It does not use the package's discretizations,
so it is also the yardstick for the fits of every approach.

A model with inputs switched in time (SBML ``piecewise`` of time) is
integrated piece by piece: the integration restarts at every switching time
(:func:`~pyomo_odeest.petab_io._sbml.switch_times`), so no step straddles a
discontinuity.  Noise formulas may depend on states and observables.
Priors are not part of the likelihood (:meth:`PetabModel.prior_nll`).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pandas as pd
import sympy
from scipy.integrate import solve_ivp

from ._sbml import TIME, switch_times, symbol
from ._tables import PetabModel, log_jacobian, per_transformation, transform_value
from ..symbolic import lambdify

__all__ = ["PetabSimulator", "petab_nll"]


_Solution = namedtuple("_Solution", "t y")

#: default work bound of one condition's simulation in a likelihood by :class:`PetabSimulator`
MAX_EVALUATIONS = 1_000_000
#: evaluations after which a LSODA piece is integrated again by BDF (:meth:`PetabSimulator._piece`)
LSODA_PIECE_EVALUATIONS = 20_000


class _Exhausted(Exception):
    """A LSODA piece used its evaluations (:meth:`PetabSimulator._piece`)."""


class PetabSimulator:
    """Simulations and likelihood terms of a :class:`PetabModel` (set up once).

    Parameters
    ----------
    model : PetabModel
    rtol, atol : float
        Tolerances of :func:`scipy.integrate.solve_ivp`.
    method : str
        Integrator of :func:`~scipy.integrate.solve_ivp` (default ``'LSODA'``).
    max_evaluations : int
        Right-hand side evaluations the simulation of one condition (its
        pre-equilibration included) may take in a likelihood (:meth:`terms`); beyond
        them the simulation fails (a steady state that is never reached, e.g. a
        limit cycle integrated towards t = 1e12, would otherwise run for hours).  Per
        condition, so that a problem with many conditions (Raimundez_PCB2020: 170, with
        pre-equilibrations) is not stopped for its size.
    """

    def __init__(self, model: PetabModel, rtol=1e-10, atol=1e-12, method="LSODA",
                 max_evaluations=MAX_EVALUATIONS):
        self.model = model
        self.max_evaluations = int(max_evaluations)
        self._evaluations, self._limit = 0, None
        self.rtol, self.atol, self.method = rtol, atol, method
        self.pids = [p.id for p in model.parameters]
        psyms = [symbol(p) for p in self.pids]
        xs = [symbol(s) for s in model.ode.states]
        self._f, self._jac, self._x0, self._switch = {}, {}, {}, {}
        for c in list(model.conditions) + [p for p in dict.fromkeys(
                model.preequilibration.values()) if p not in model.conditions]:
            f = model.rhs(c)
            self._f[c] = lambdify((xs, psyms, TIME), f, "numpy")
            self._jac[c] = lambdify((xs, psyms, TIME), sympy.Matrix(f).jacobian(xs), "numpy")
            self._x0[c] = lambdify((psyms,), [model.initial[c][s] for s in model.ode.states],
                                         "numpy")
            sw = sorted({t for e in f for t in switch_times(e, f"{model.name}: condition {c}")},
                        key=str)
            self._switch[c] = lambdify((psyms,), sw, "numpy") if sw else None
        meas = model.measurements
        self._yfun = {y: lambdify((xs, psyms, TIME), y, "numpy") for y in set(meas["y"])}
        self._sfun = {s: lambdify((xs, psyms, TIME), s, "numpy") for s in set(meas["sigma"])}

    def _integrate(self, condition, p, x0, T, t_eval=None):
        """Solution on [0, T] (``t`` and ``y`` at ``t_eval``, or at T), restarted at every
        switching time of the condition's inputs."""
        f, jac = self._f[condition], self._jac[condition]
        cuts = [0.0]
        if self._switch[condition] is not None:
            cuts += sorted(t for t in np.atleast_1d(np.asarray(self._switch[condition](p),
                                                               dtype=float)) if 0.0 < t < T)
        cuts.append(float(T))
        t_eval = None if t_eval is None else np.asarray(t_eval, dtype=float)
        ts, ys, x = [], [], np.asarray(x0, dtype=float)
        for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            last = k == len(cuts) - 2
            te = None
            if t_eval is not None:
                te = t_eval[(t_eval >= a) & ((t_eval <= b) if last else (t_eval < b))]
                te_run = te if last else np.append(te, b)     # the state at b starts the next
            sol = self._piece(f, jac, condition, p, (a, b), x,
                              None if te is None else te_run)
            y = np.asarray(sol.y).reshape(len(x), -1)
            if te is not None and len(te):
                ts.append(sol.t[:len(te)])
                ys.append(y[:, :len(te)])
            x = y[:, -1]
        if t_eval is None:
            return _Solution(np.array([float(T)]), x.reshape(-1, 1))
        return _Solution(np.concatenate(ts), np.concatenate(ys, axis=1))

    def _piece(self, f, jac, condition, p, span, x, t_eval):
        """One piece of :meth:`_integrate`.  LSODA stalls on some very stiff pieces
        where BDF does not (PEtab's Brannmark problem at rates on their bounds: no
        end after 10⁷ evaluations; BDF takes 2,000): a LSODA piece that fails or
        takes more than :data:`LSODA_PIECE_EVALUATIONS` evaluations is integrated again
        by BDF."""
        def run(method, limit):
            self._limit = limit
            try:
                return solve_ivp(lambda t, x: self._rhs(f, condition, x, p, t), span, x,
                                 method=method, t_eval=t_eval, rtol=self.rtol, atol=self.atol,
                                 jac=lambda t, x: np.asarray(jac(x, p, t), dtype=float))
            finally:
                self._limit = None
        sol = None
        if self.method == "LSODA":
            try:
                sol = run("LSODA", min(self.max_evaluations,
                                       self._evaluations + LSODA_PIECE_EVALUATIONS))
            except _Exhausted:
                pass
        if sol is None or not sol.success or not np.all(np.isfinite(sol.y)):
            sol = run("BDF" if self.method == "LSODA" else self.method, self.max_evaluations)
        if not sol.success:
            raise RuntimeError(f"{self.model.name}: simulation of condition {condition} "
                               f"failed: {sol.message}")
        if not np.all(np.isfinite(sol.y)):
            raise RuntimeError(f"{self.model.name}: simulation of condition {condition} "
                               f"gives non-finite states on [{span[0]:g}, {span[1]:g}]")
        return sol

    def _rhs(self, f, condition, x, p, t):
        self._evaluations += 1
        if self._limit is not None and self._evaluations > self._limit \
                and self._evaluations <= self.max_evaluations:
            raise _Exhausted()
        if self._evaluations > self.max_evaluations:
            raise RuntimeError(f"{self.model.name}: simulation of condition {condition} "
                               f"stopped after {self.max_evaluations} evaluations of the "
                               f"right-hand side (at t={t:.6g})")
        return np.asarray(f(x, p, t), dtype=float).reshape(-1)

    def steady_state(self, condition, values, tol=1e-10, x0=None):
        """The state that ``condition`` settles to from its initial state (or ``x0``),
        simulated until ‖f‖ ≤ tol·(1 + ‖x‖), up to t = 1e12."""
        p = np.asarray(values, dtype=float)
        x = np.asarray(self._x0[condition](p) if x0 is None else x0,
                       dtype=float).reshape(-1)
        f = self._f[condition]
        for T in 10.0 ** np.arange(1, 13):
            x = self._integrate(condition, p, x, T).y[:, -1]
            if np.linalg.norm(np.asarray(f(x, p, T), dtype=float)) <= tol * (1 + np.linalg.norm(x)):
                return x
        raise RuntimeError(f"{self.model.name}: condition {condition} reaches no steady state "
                           f"by t = 1e12 (needed for pre-equilibration or a measurement at "
                           f"time = inf)")

    def initial_state(self, condition, values):
        """The initial state of ``condition``: with pre-equilibration, the steady state of
        its pre-equilibration condition, the species set by ``condition`` reset."""
        p = np.asarray(values, dtype=float)
        x0 = np.asarray(self._x0[condition](p), dtype=float).reshape(-1)
        pre = self.model.preequilibration.get(condition)
        if pre is None:
            return x0
        x = self.steady_state(pre, p)
        keep = [s not in self.model.reset[condition] for s in self.model.ode.states]
        return np.where(keep, x, x0)

    def simulate(self, condition, times, values):
        """States at ``times`` (rows) of ``condition`` at parameter ``values``
        (linear scale, in the order of the parameter table)."""
        p = np.asarray(values, dtype=float)
        x0 = self.initial_state(condition, p)
        times = np.asarray(times, dtype=float)
        if np.any(np.isinf(times)):          # steady-state measurements
            out = np.empty((len(times), len(x0)))
            fin = ~np.isinf(times)
            if np.any(fin):
                out[fin] = self.simulate(condition, times[fin], p)
            out[~fin] = self.steady_state(condition, p, x0=x0)
            return out
        T = float(times.max()) if len(times) else 0.0
        if T == 0.0:
            return np.tile(x0, (len(times), 1))
        sol = self._integrate(condition, p, x0, T, np.unique(times))
        idx = np.searchsorted(sol.t, times)
        return sol.y.T[idx]

    def terms(self, scaled=None):
        """Per measurement row: simulated observable, σ and the NLL term (DataFrame)."""
        model = self.model
        vals = model.linear_values(scaled)
        p = np.array([vals[k] for k in self.pids])
        meas = model.measurements
        y, sig = np.full(len(meas), np.nan), np.empty(len(meas))
        no_state = np.zeros(len(model.ode.states))     # for a σ of parameters only
        for c in model.conditions:
            self._evaluations = 0
            rows = np.flatnonzero((meas["simulationConditionId"] == c).to_numpy())
            t = meas["time"].to_numpy()[rows]
            X = self.simulate(c, t, p)
            for k, r in enumerate(rows):
                s = meas["sigma"].iat[r]
                y[r] = float(self._yfun[meas["y"].iat[r]](X[k], p, t[k]))
                sig[r] = float(self._sfun[s](X[k] if self._state_sigma(s) else no_state, p, t[k]))
        m = meas["measurement"].to_numpy(dtype=float)
        trans = [model.observables[o].transformation for o in meas["observableId"]]
        res = (per_transformation(transform_value, y, trans)
               - per_transformation(transform_value, m, trans)) / sig
        jac = per_transformation(log_jacobian, m, trans)
        nll = 0.5 * np.log(2 * np.pi * sig**2) + jac + 0.5 * res**2
        return pd.DataFrame({"observableId": meas["observableId"],
                             "simulationConditionId": meas["simulationConditionId"],
                             "time": meas["time"], "measurement": m, "simulation": y,
                             "sigma": sig, "scaled_residual": res, "nll": nll})

    def _state_sigma(self, s):
        return bool({x.name for x in s.free_symbols} & set(self.model.ode.states)) or \
            TIME in s.free_symbols

    def nll(self, scaled=None):
        """The negative log-likelihood at the scaled estimated parameters
        (default: the nominal values)."""
        return float(self.terms(scaled)["nll"].sum(skipna=False))   # NaN stays NaN


def petab_nll(model: PetabModel, scaled=None, rtol=1e-10, atol=1e-12, method="LSODA") -> float:
    """PEtab's negative log-likelihood of ``model`` at ``scaled`` (the estimated
    parameters on their scales; default: the nominal values), by simulation."""
    return PetabSimulator(model, rtol=rtol, atol=atol, method=method).nll(scaled)
