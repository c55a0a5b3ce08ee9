"""Wall-time limit and progress lines for the SciPy optimizers and the package's own.

Ipopt has both built in (``max_wall_time``, and the ``progress=`` lines of
:func:`~pyomo_odeest.nlp.solve_with_ipopt`); :class:`SolveClock` gives the same
to ``scipy.optimize.minimize`` (pass it as ``callback``: SciPy hands it the
current ``intermediate_result`` and stops when it raises :class:`StopIteration`)
and to :func:`~pyomo_odeest.optimizers.minimize_cg` /
:func:`~pyomo_odeest.optimizers.minimize_bfgs` (``callback(x)``; returning
True stops).  After the solve, :attr:`SolveClock.exceeded` says whether the
limit stopped it and :meth:`SolveClock.status` gives the status to report
(``'Maximum_WallTime_Exceeded'``, as Ipopt names it).
"""
from __future__ import annotations

import time

import numpy as np

from ..nlp._progress import IterationProgress, progress_enabled, time_left

__all__ = ["SolveClock", "WALL_TIME_STATUS"]

WALL_TIME_STATUS = "Maximum_WallTime_Exceeded"


class SolveClock:
    """Callback that stops an optimizer after ``max_wall_time`` seconds and
    shows one line per ``every`` iterations when ``progress`` (None: standard
    error is a terminal).

    Inside a :func:`~pyomo_odeest.nlp._progress.solve_scope` (the estimation
    pipeline's solves) the scope's deadline bounds the limit and ``progress=None``
    means the scope's setting.

    Parameters
    ----------
    max_wall_time : float, optional
        Seconds from construction (None: no limit but the scope's).
    progress : bool or None
    fun : callable, optional
        ``fun(x)`` for the progress line when the optimizer passes only x.
    label : str
    """

    def __init__(self, max_wall_time=None, progress=None, fun=None, label="scipy", every=10):
        if max_wall_time is not None and not (isinstance(max_wall_time, (int, float))
                                              and max_wall_time > 0):
            raise ValueError(f"max_wall_time must be a positive number of seconds, got "
                             f"{max_wall_time!r}")
        self.max_wall_time = time_left(max_wall_time)
        self.fun = fun
        self.t0 = time.perf_counter()
        self.iterations = 0
        self.exceeded = False
        self.lines = IterationProgress(label, every) if progress_enabled(progress) else None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _tick(self, x, f):
        self.iterations += 1
        if self.lines is not None:
            if f is None and self.fun is not None and x is not None:
                f = float(self.fun(np.asarray(x)))
            self.lines(self.iterations, np.nan if f is None else float(f))
        if self.max_wall_time is not None and self.elapsed > self.max_wall_time:
            self.exceeded = True
        return self.exceeded

    def __call__(self, intermediate_result):
        """SciPy's ``minimize`` callback (raises StopIteration at the limit)."""
        x = getattr(intermediate_result, "x", intermediate_result)
        f = getattr(intermediate_result, "fun", None)
        if self._tick(x, f):
            raise StopIteration
        return None

    def stop(self, x) -> bool:
        """``callback(x)`` of :func:`minimize_cg` / :func:`minimize_bfgs`: True at the limit."""
        return self._tick(x, None)

    def status(self, status: str) -> str:
        """The status to report: :data:`WALL_TIME_STATUS` when the limit stopped the solve."""
        return WALL_TIME_STATUS if self.exceeded else status

    def finish(self, note=""):
        if self.lines is not None:
            self.lines.finish(note)
