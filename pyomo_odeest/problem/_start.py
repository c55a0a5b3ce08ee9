r"""Start values of the parameters: one rule for every approach.

:func:`start_values` turns the ``u0`` option of :func:`~pyomo_odeest.estimate`
into the parameter vector every approach starts from:

* ``u0=None``: the declared values (``Parameter.value``);
* a vector: one number per parameter, in ``problem.parameter_names`` order,
  fixed parameters included;
* a mapping or a :class:`pandas.Series`: parameter name -> number; parameters
  it does not name keep their declared values.  With several experiments a
  local parameter is named per experiment (``k_e1``); its declared name
  (``k``) sets every experiment's copy at once.

A fixed parameter keeps its declared value.  A start value for it that differs
from that value contradicts the problem and is refused with a
:class:`~pyomo_odeest.problem._validation.ProblemError` naming the parameter
(to estimate it, declare it ``fixed=False``; to fix it at another value,
declare that value); an equal value is fine.  A start value in ``u0`` of a
free parameter outside its bounds is refused too (start inside the bounds); a
declared value outside them (a bound changed after the declaration) is moved
onto the nearest bound.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ._validation import ProblemError

__all__ = ["start_values"]


def _from_mapping(problem, u0):
    names = list(problem.parameter_names)
    u = problem.u0.astype(float)
    locals_ = {}
    for n in names:
        for e in problem.experiment_names or ():
            if n.endswith(f"_{e}"):
                locals_.setdefault(n[:-len(e) - 1], []).append(n)
    for key, v in u0.items():
        targets = [key] if key in names else locals_.get(key)
        if not targets:
            raise ProblemError(f"u0 names an unknown parameter {key!r}; parameters: {names}")
        for n in targets:
            u[names.index(n)] = _number(v, n)
    return u


def _number(v, name):
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ProblemError(f"u0 for parameter '{name}' must be a number, got {v!r}") from None


def start_values(problem, u0=None) -> np.ndarray:
    """The start vector of ``problem``'s parameters from ``u0`` (see the module docstring)."""
    names = list(problem.parameter_names)
    if u0 is None:
        u = problem.u0.astype(float)
    elif isinstance(u0, (Mapping, pd.Series)):
        u = _from_mapping(problem, dict(u0.items()))
    else:
        try:
            u = np.asarray(u0, dtype=float)
        except (TypeError, ValueError):
            raise ProblemError(f"u0 must be numbers, one per parameter {names} (or a mapping "
                               f"name -> number); got {u0!r}") from None
        if u.ndim != 1 or u.size != len(names):
            raise ProblemError(f"u0 has {u.size} value(s) (shape {u.shape}); give one per "
                               f"parameter, {len(names)}: {names} (fixed ones included), or a "
                               f"mapping name -> number")
        u = u.copy()
    bad = [n for n, v in zip(names, u) if not np.isfinite(v)]
    if bad:
        raise ProblemError(f"u0 is not finite for parameter(s) {bad}")
    for p, v in zip(problem.parameters, u):
        if p.fixed:
            if v != float(p.value):
                raise ProblemError(
                    f"u0 gives the fixed parameter '{p.name}' the value {v:g}, but it is fixed "
                    f"at {float(p.value):g}; leave it out of u0 (or give {float(p.value):g}), "
                    f"declare it fixed=False to estimate it, or declare the value to fix it at")
        elif u0 is not None and ((p.lb is not None and v < p.lb)
                                 or (p.ub is not None and v > p.ub)):
            raise ProblemError(f"u0 for parameter '{p.name}' is {v}, outside its bounds "
                               f"[{p.lb}, {p.ub}]; start inside the bounds")
    lb, ub = problem.bounds()
    free = problem.free_mask
    return np.clip(u, np.where(free, lb, -np.inf), np.where(free, ub, np.inf))
