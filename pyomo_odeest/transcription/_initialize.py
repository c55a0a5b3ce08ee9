r"""Start values and scaling of the schemes' Pyomo blocks: the states of a block from
a simulation of its own scheme at the parameters (or the ODE's, or the data), the
stages from the states, and the scaling factors of the parameters and states that
the simultaneous approach (and the adaptive approach's fixed-grid seed) solve with.
"""
from __future__ import annotations

import numpy as np
import pyomo.environ as pyo
import sympy

from ..discretization.schemes import integrate
from ..nlp._plugin import add_index_scaling, add_scaling_factors, scaling_lookup
from ..problem._declaration import EstimationProblem, ProblemError
from ..problem._misfit import observations
from ..symbolic import lambdify
from ..symbolic._vectorfn import VectorFn
from ._initial_state import initialize_steady_state

__all__ = ["blocks_of", "numeric_functions", "simulate", "stage_values", "load_values",
           "initialize_block", "block_states", "parameter_start", "bounded_start", "scale_parameters",
           "scale_states"]


def blocks_of(b):
    """The experiment blocks of a block of several experiments, else ``[b]``."""
    return list(getattr(b, "experiment_blocks", None) or [b])


def numeric_functions(problem: EstimationProblem, u):
    """``f(x, t)``, ``fdot(x, t)`` and their x-Jacobians at fixed parameters ``u``
    (lambdified once per problem: every block and refinement round reuses them)."""
    u = np.asarray(u, dtype=float)
    args = (problem.x_sym, problem.u_sym, problem.t_sym)

    def build():
        f, fd = list(problem.f_sym), list(problem.fdot_sym())
        jf, jd = (sympy.Matrix(e).jacobian(problem.x_sym) for e in (f, fd))
        return {k: lambdify(args, e, "numpy")
                for k, e in (("f", f), ("jac", jf), ("fdot", fd), ("fdot_jac", jd))}

    def at_u(fn):
        return lambda x, t: np.array(fn(x, u, t), dtype=float)

    fns = problem._numeric(("scheme simulation", tuple(problem.f_sym), args), build)
    return {k: at_u(fn) for k, fn in fns.items()}


def simulate(problem: EstimationProblem, scheme, t, u=None, restarts=()):
    """States of the discrete scheme on grid ``t`` (restarting the order ramp at
    ``restarts``, or ``t.restarts`` for a Grid) at parameters ``u`` ((k+1, n))."""
    u = problem.u0 if u is None else np.asarray(u, dtype=float)
    fn = numeric_functions(problem, u)
    x0 = problem.initial_state(u)
    return integrate(scheme, fn["f"], t, x0, fdot=fn["fdot"], jac=fn["jac"],
                     fdot_jac=fn["fdot_jac"], restarts=restarts or getattr(t, "restarts", ()))


def stage_values(b, X, u):
    """Values of the non-x stages of every step given the states X, one
    vectorised evaluation of f (ḟ) per stage term and order batch.

    Returns ``{stage name: (k, n) array}``.
    """
    problem = b.problem
    t = np.asarray(b.grid.t, dtype=float)
    k, n = len(t) - 1, len(problem.states)
    args = (problem.x_sym, problem.u_sym, problem.t_sym)
    fns = {False: VectorFn(problem.f_sym, *args)}
    if b.scheme.needs_fdot:
        fns[True] = VectorFn(problem.fdot_sym(), *args)
    at_grid = {}

    def on_grid(is_dot, idx):
        if is_dot not in at_grid:
            at_grid[is_dot] = fns[is_dot](X, u, t)
        return at_grid[is_dot][idx]

    out = {name: np.full((k, n), np.nan) for name in b.scheme.stage_names if name != "x"}
    for batch in b.scheme.batches(t, b.grid.restarts):
        steps = batch.steps
        h = t[steps + 1] - t[steps]
        vals = {}
        for name, f_terms, d_terms in batch.stages:
            if name == "x":
                break
            v = X[steps].copy()
            for terms, power, is_dot in ((f_terms, 1, False), (d_terms, 2, True)):
                for pref, c in terms:
                    if pref.kind == "past":
                        fz = on_grid(is_dot, steps - pref.lag)
                    elif pref.kind == "new":
                        fz = on_grid(is_dot, steps + 1)
                    else:
                        fz = fns[is_dot](vals[pref.stage], u, t[steps + 1])
                    v += (h ** power * c)[:, None] * fz
            vals[name] = v
            out[name][steps] = v
    return out


def load_values(var, values):
    """Values of a (step, state)-indexed Var from an array in that order."""
    datas = list(var.values())
    if len(datas) != values.size:
        raise ValueError(f"{var.name} has {len(datas)} entries, expected {values.size}")
    for vd, val in zip(datas, values.ravel().tolist()):
        vd.set_value(val, skip_validation=True)


def initialize_block(b, u=None, init="auto", ode=None):
    """Set start values of states and stages.

    ``init``: ``'simulate'`` (run the scheme at ``u``), ``'data'`` (interpolate
    the measurements of observed states, x_0 elsewhere), or ``'auto'``: the
    scheme's simulation; where it fails or the values it predicts for the
    measurements leave the data's range by more than a factor 100 (an explicit
    scheme beyond its stability on a stiff problem),
    ``ode(t)``, the ODE's states on the grid by a stiff integrator, when given;
    the data where that fails too.  Returns the strategy used (``'simulate'``,
    ``'ode'`` or ``'data'``).
    """
    problem = b.problem
    u = problem.u0 if u is None else np.asarray(u, dtype=float)
    t = np.asarray(b.grid.t)
    X, used = None, init
    if init not in ("auto", "simulate", "data"):
        raise ValueError(f"init must be 'auto', 'simulate' or 'data', got {init!r}")
    scale = 100 * (1 + np.nanmax(np.abs(problem.data.to_numpy())))
    measured = np.asarray(problem.mask, dtype=bool)

    def plausible(X):
        """Finite, and the measured values it predicts within a factor 100 of the data's
        range (the states themselves may have another scale than the observables:
        PEtab's scaled and offset outputs); the states within 1e6 of that."""
        if X is None or not np.all(np.isfinite(X)):
            return False
        Z = observations(problem, X[np.asarray(b.grid.J, dtype=int)], u).to_numpy(dtype=float)
        z = Z[measured]
        return bool(np.all(np.isfinite(z)) and np.max(np.abs(z), initial=0.0) <= scale
                    and np.max(np.abs(X)) <= 1e6 * (scale + np.max(np.abs(X[0]))))

    if init in ("auto", "simulate"):
        try:
            with np.errstate(all="ignore"):          # a non-finite trajectory falls back below
                X = simulate(problem, b.scheme, t, u, b.grid.restarts)
        except (RuntimeError, FloatingPointError, OverflowError, ValueError):
            if init == "simulate":
                raise
            X = None
        used = "simulate"
        if init == "auto" and not plausible(X):
            X, used = (ode(t) if ode is not None else None), "ode"
            if not plausible(X):
                X = None
    if X is None:
        X, used = problem.interpolate_states(t, u), "data"
    load_values(b.x, X)
    initialize_steady_state(b, problem, u)
    with np.errstate(all="ignore"):
        stages = stage_values(b, X, u)
    for name, v in stages.items():
        load_values(b.component(name), np.where(np.isfinite(v), v, X[1:]))
    return used


def block_states(b) -> np.ndarray:
    """The block's current state values, (k+1, n)."""
    S = b.problem.states
    return np.array([[b.x[i, s].value for s in S] for i in range(len(b.grid.t))], dtype=float)


def parameter_start(m):
    """``(x, lb, ub)`` of the free parameters of ``m.est`` in Ipopt's scaled variables
    (``m.scaling_factor``), for :func:`~pyomo_odeest.approaches._base.start_push`."""
    return bounded_start(m, m.est.u.values())


def bounded_start(m, variables=None):
    """``(x, lb, ub)`` of the free ``variables`` (default: every variable of ``m`` with a
    bound) in Ipopt's scaled variables (``m.scaling_factor`` where it has a factor), for
    :func:`~pyomo_odeest.approaches._base.start_push`; None where there are none."""
    find = scaling_lookup(m)
    if variables is None:
        variables = (v for v in m.component_data_objects(pyo.Var, active=True)
                     if v.has_lb() or v.has_ub())
    rows = []
    for v in variables:
        if v.fixed or v.value is None:
            continue
        d = 1.0 if find is None else float(find(v) or 1.0)
        rows.append((d * float(v.value), d * (-np.inf if v.lb is None else v.lb),
                     d * (np.inf if v.ub is None else v.ub)))
    return tuple(np.array(c, dtype=float) for c in zip(*rows)) if rows else None


def scale_parameters(m, b):
    """Put ``1/|u_k|`` (1 where u_k = 0) on ``m.scaling_factor`` for every free
    parameter of block ``b`` that has no factor there yet."""
    sf = getattr(m, "scaling_factor", None)
    if sf is not None and not isinstance(sf, pyo.Suffix):
        raise ProblemError("model.scaling_factor exists and is not a Suffix")
    add_scaling_factors(m, [b.u[p] for p in b.problem.parameter_names])


def scale_states(m, b, simulated=None):
    """Scale the values of every state ``s`` (grid points and stages) by
    ``1/max_i |x_{i,s}|`` where it exceeds 1 in magnitude on the block's current
    (initial) trajectory and no factor is set yet (one factor per state on the
    block, :func:`~pyomo_odeest.nlp._plugin.add_index_scaling`; a factor of a
    variable on ``m.scaling_factor``, the user's, is kept); on an
    experiment whose trajectory is simulated (``simulated[e]``: by the scheme or
    the ODE, not interpolated data) also for the states below 1 in magnitude
    (not below 1e-8 times the largest state: Robertson's intermediate of 1e-5
    beside concentrations of 1).

    States of 1e5 next to parameters of 1e-10 (PEtab's Crauste problem) make
    Ipopt's path depend on round-off; with the states O(1) it is not.  States
    of magnitude at most 1 are left alone (scaling up a state that is small
    because it starts at 0 would amplify noise).  ``b`` is a block of
    :func:`build_block` or of :func:`build_experiment_blocks` (each experiment
    scaled on its own trajectory)."""
    blocks = blocks_of(b)
    simulated = [False] * len(blocks) if simulated is None else list(simulated)
    for blk, sim in zip(blocks, simulated):
        S = blk.problem.states
        k = len(blk.t) - 1
        stages = [blk.component(st) for st in blk.scheme.stage_names if st != "x"]
        mags = {s: max((abs(v) for v in (blk.x[i, s].value for i in range(k + 1))
                        if v is not None and np.isfinite(v)), default=0.0) for s in S}
        floor = 1e-8 * max(mags.values(), default=0.0)
        factors = {s: 1.0 / mags[s] for s in S
                   if mags[s] > 1.0 or (sim and mags[s] > floor and mags[s] > 0.0)}
        for comp in [blk.x] + [c for c in stages if c is not None]:
            add_index_scaling(blk, comp, factors)
