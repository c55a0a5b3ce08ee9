"""Progress of long work, shown where a person is watching.

``progress=None`` (the default everywhere) means *on when standard error is a
terminal* (an interactive session), off otherwise (a batch job, a test, a
worker process); ``True`` / ``False`` force it.  Inside a :func:`solve_scope`
(the estimation pipeline opens one around its solves) ``None`` means the
scope's setting, and the scope's deadline bounds every wall-time limit
(:func:`time_left`): an optimizer called there shows progress and stops in
time without being told.  Two kinds:

* :class:`IterationProgress` — one line per block of solver iterations
  (iteration, objective, primal and dual infeasibility, elapsed seconds),
  used by :func:`~pyomo_odeest.nlp.solve_with_ipopt` and the SciPy optimizers;
* :class:`TaskProgress` — a count of finished tasks (on a terminal a tqdm bar
  when tqdm is installed, else one line of text rewritten in place; one line
  per task when standard error is not a terminal, e.g. a log file).
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from dataclasses import dataclass

__all__ = ["progress_enabled", "IterationProgress", "TaskProgress", "SolveScope", "solve_scope",
           "current_scope", "time_left"]


@dataclass(frozen=True)
class SolveScope:
    """The progress setting and the deadline of the solves run inside a
    :func:`solve_scope`."""

    #: show progress lines (resolved: True or False)
    progress: bool
    #: ``time.perf_counter()`` value after which the solves stop (None: no limit)
    deadline: float | None = None

    def note(self, text):
        """Write the line ``text`` on standard error when progress is on."""
        if self.progress:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


_SCOPE: contextvars.ContextVar = contextvars.ContextVar("pyomo_odeest_solve_scope",
                                                        default=None)


def current_scope() -> SolveScope | None:
    """The innermost open :func:`solve_scope` (None outside any)."""
    return _SCOPE.get()


@contextlib.contextmanager
def solve_scope(progress=None, max_wall_time=None):
    """Open a scope for solves: ``progress`` (True / False; None: as the enclosing
    scope, else when standard error is a terminal) becomes what ``progress=None``
    means inside it, and the solves inside stop ``max_wall_time`` seconds from
    now (None: no limit of its own; an enclosing scope's deadline still holds).
    Yields the :class:`SolveScope`."""
    outer = _SCOPE.get()
    deadline = None if max_wall_time is None else time.perf_counter() + float(max_wall_time)
    if outer is not None and outer.deadline is not None:
        deadline = outer.deadline if deadline is None else min(deadline, outer.deadline)
    token = _SCOPE.set(SolveScope(progress_enabled(progress), deadline))
    try:
        yield _SCOPE.get()
    finally:
        _SCOPE.reset(token)


def time_left(max_wall_time=None):
    """Seconds a solve may run: the smaller of ``max_wall_time`` and the time left
    to the open scope's deadline (never negative; None: no limit)."""
    scope = _SCOPE.get()
    left = None if max_wall_time is None else float(max_wall_time)
    if scope is not None and scope.deadline is not None:
        rest = max(scope.deadline - time.perf_counter(), 0.0)
        left = rest if left is None else min(left, rest)
    return left


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_enabled(progress=None, stream=None) -> bool:
    """Resolve ``progress``: True / False as given; None: the open
    :func:`solve_scope`'s setting, outside one whether ``stream`` (default
    ``sys.stderr``) is a terminal."""
    if progress is None or progress == "auto":
        scope = _SCOPE.get()
        if scope is not None:
            return scope.progress
        return _is_terminal(sys.stderr if stream is None else stream)
    if not isinstance(progress, (bool, int)):
        raise TypeError(f"progress must be True, False or None (automatic), got {progress!r}")
    return bool(progress)


class IterationProgress:
    """One line on ``stream`` per ``every`` iterations (and at the first call), e.g.
    ``ipopt   iter 20  objective 1.2345e+01  inf_pr 3.1e-04  inf_du 2.0e-03  4.2 s``.

    Call it with ``(iteration, objective, inf_pr=nan, inf_du=nan)``; :meth:`finish`
    writes the last line (with the outcome) if the last iteration was not shown.
    """

    def __init__(self, label="ipopt", every=10, stream=None):
        self.label, self.every = label, max(1, int(every))
        self.stream = sys.stderr if stream is None else stream
        self.t0 = time.perf_counter()
        self.last = None
        self.shown = None

    def line(self, it, obj, inf_pr=float("nan"), inf_du=float("nan"), note=""):
        text = (f"{self.label:8s} iter {it:4d}  objective {obj: .6e}  inf_pr {inf_pr:.1e}  "
                f"inf_du {inf_du:.1e}  {time.perf_counter() - self.t0:7.1f} s")
        self.stream.write(text + (f"  {note}" if note else "") + "\n")
        self.stream.flush()
        self.shown = it

    def __call__(self, it, obj, inf_pr=float("nan"), inf_du=float("nan")):
        self.last = (it, obj, inf_pr, inf_du)
        if self.shown is None or it % self.every == 0:
            self.line(it, obj, inf_pr, inf_du)

    def finish(self, note=""):
        if self.last is not None and (self.shown != self.last[0] or note):
            self.line(*self.last, note=note)


class TaskProgress:
    """Count of finished tasks: ``update(ok)`` per task, :meth:`close` at the end."""

    def __init__(self, total, enabled, desc, stream=None):
        self.total, self.done, self.failed = total, 0, 0
        self.enabled, self.desc, self.t0 = enabled, desc, time.perf_counter()
        self.stream = sys.stderr if stream is None else stream
        self.bar = None
        self.tty = _is_terminal(self.stream)
        if enabled and self.tty:                  # a bar for a terminal, lines for a log
            try:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=total, desc=desc, file=self.stream)
            except ImportError:
                self.bar = None

    def update(self, ok=True, note=""):
        self.done += 1
        self.failed += 0 if ok else 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)
            return
        text = (f"{self.desc}: {self.done}/{self.total} done, {self.failed} failed, "
                f"{time.perf_counter() - self.t0:.1f} s" + (f" ({note})" if note else ""))
        if self.tty:
            end = "\n" if self.done == self.total else ""
            self.stream.write(f"\r{text}{end}")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tty and self.done != self.total:
            self.stream.write("\n")
