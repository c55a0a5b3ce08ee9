r"""The estimator's argument checks that need the discretization (scheme, order and
grid) and the size guard, which refuses a discretization that cannot fit in memory.
See docs/checks.md, sections "Before anything is built" and "Size guard".
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..problem._validation import (ProblemError, ProblemTooLargeError, check_options,
                                   positive_float, positive_int)

__all__ = ["validate_estimator", "estimate_size", "SizeEstimate", "available_memory",
           "BYTES_PER_UNKNOWN"]


def validate_estimator(approach: str, problem, needs_free=True, needs_data=True, **args):
    """Check an estimator's arguments before it builds anything.

    ``approach`` names the estimator (the memory model of
    :data:`BYTES_PER_UNKNOWN`); ``needs_free``/``needs_data``: refuse a problem
    whose parameters are all fixed / without data; ``args``: the estimator's
    arguments by name.  Raises :class:`ProblemError` (:class:`TypeError` for a
    wrong type of problem or grid) or :class:`ProblemTooLargeError`
    (:func:`estimate_size`).
    """
    from ..problem._declaration import EstimationProblem
    if not isinstance(problem, EstimationProblem):
        raise TypeError(f"problem must be an EstimationProblem, got {type(problem).__name__}")
    if not problem.parameters:
        raise ProblemError("the problem has no parameter to estimate; declare at least one "
                           "Parameter")
    if not problem.free_mask.any() and needs_free:
        raise ProblemError(f"all parameters {problem.parameter_names} are fixed: nothing to "
                           f"estimate; set fixed=False on at least one")
    subs = problem.subproblems
    if needs_data and any(len(sp.meas_times) == 0 for sp in subs):
        raise ProblemError("the problem has no data (data=None): there is nothing to fit")
    check_options(args.get("options"))
    if "scheme" in args or "grid" in args:
        grid = args.get("grid")
        sizes = [estimate_size(sp, approach, args.get("scheme", "adams_pc"), args.get("qmax"),
                               grid.get(name) if isinstance(grid, Mapping) else grid,
                               args.get("max_step"), args.get("steps_per_interval"),
                               refuse=True)
                 for name, sp in zip(problem.experiment_names or [None], subs)]
        return sizes[0] if len(sizes) == 1 else sizes
    return None


# ---------------------------------------------------------------------------
# size guard
# ---------------------------------------------------------------------------
#: Peak memory per unknown (bytes), measured by ``benchmarks/size_guard.py``
#: (docs/checks.md, "Size guard"; a whole simultaneous solve at 10⁵ steps took 4.5 kB).
BYTES_PER_UNKNOWN = {"simultaneous": 6000, "reduced_space": 2500, "multiple_shooting": 2500}


@dataclass(frozen=True)
class SizeEstimate:
    """Size of the discretized problem before it is built."""

    steps: int
    unknowns: int        # state and stage values (and free parameters)
    constraints: int
    bytes: int
    available: int | None

    @property
    def fits(self) -> bool:
        return self.available is None or self.bytes <= 0.8 * self.available

    def __str__(self):
        gb = 1024 ** 3
        avail = "unknown" if self.available is None else f"{self.available / gb:.1f} GB"
        return (f"{self.steps} steps, {self.unknowns} unknowns, {self.constraints} constraints, "
                f"about {self.bytes / gb:.2f} GB (available: {avail})")


def available_memory():
    """Bytes of memory available to this process (None if unknown)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _intervals(problem):
    pts = np.unique(np.concatenate([[problem.t0, problem.T], problem.meas_times]))
    return np.diff(pts)


def estimate_size(problem, approach="simultaneous", scheme="adams_pc", qmax=None, grid=None,
                  max_step=None, steps_per_interval=None, refuse=False, available=None):
    """Steps, unknowns, constraints and memory of the discretization, before building it.

    Also checks ``scheme``, ``qmax``, ``grid``, ``max_step`` and
    ``steps_per_interval``.  With ``refuse=True`` a discretization whose
    memory exceeds 80 % of the available memory raises
    :class:`ProblemTooLargeError` with the numbers and the largest
    ``steps_per_interval`` (or smallest ``max_step``) that fits.
    """
    from ._grid import Grid, substeps
    from .schemes import QMAX_RANGE, get_scheme
    if qmax is not None:
        positive_int(qmax, "qmax", *QMAX_RANGE)
    try:
        sch = get_scheme(scheme, qmax)
    except ValueError as err:
        raise ProblemError(f"scheme: {err}") from None
    if grid is not None:
        if not isinstance(grid, Grid):
            raise TypeError(f"grid must be a pyomo_odeest.Grid (see make_grid), got "
                            f"{type(grid).__name__}")
        if max_step is not None or steps_per_interval is not None:
            raise ProblemError("give either grid or max_step / steps_per_interval, not both")
        steps = grid.k
    else:
        if max_step is not None:
            max_step = positive_float(max_step, "max_step")
        if steps_per_interval is not None:
            steps_per_interval = positive_int(steps_per_interval, "steps_per_interval")
        if max_step is None and steps_per_interval is None:
            steps_per_interval = 10
        steps = int(substeps(_intervals(problem), max_step, steps_per_interval).sum())
    n, stages = len(problem.states), len(sch.stage_names)
    p = int(problem.free_mask.sum())
    unknowns = (steps + 1) * n + steps * n * (stages - 1) + p
    constraints = steps * n * stages + n
    per = BYTES_PER_UNKNOWN.get(approach, BYTES_PER_UNKNOWN["reduced_space"])
    est = SizeEstimate(steps, unknowns, constraints, int(unknowns * per),
                       available_memory() if available is None else available)
    if refuse and not est.fits:
        budget = 0.8 * est.available / per
        per_step = n * stages
        max_steps = max(int((budget - n - p) // per_step), 0)
        lengths = _intervals(problem)
        hint = f"at most {max_steps} steps fit"
        if max_steps >= len(lengths):
            spi = max_steps // len(lengths)
            hint += (f": steps_per_interval <= {spi}, or max_step >= "
                     f"{float(lengths.sum()) / max_steps:.3g}")
        raise ProblemTooLargeError(
            f"the discretized problem is too large for this machine: {est}; {hint}")
    return est
