"""Progress of long work, shown where a person is watching.

``progress=None`` (the default everywhere) means *on when standard error is a
terminal* (an interactive session), off otherwise (a batch job, a test, a
worker process); ``True`` / ``False`` force it.  Two kinds:

* :class:`IterationProgress` — one line per block of solver iterations
  (iteration, objective, primal and dual infeasibility, elapsed seconds),
  used by :func:`~pyomo_odeest.nlp.solve_with_ipopt` and the SciPy optimizers;
* :class:`TaskProgress` — a count of finished tasks (on a terminal a tqdm bar
  when tqdm is installed, else one line of text rewritten in place; one line
  per task when standard error is not a terminal, e.g. a log file).
"""
from __future__ import annotations

import sys
import time

__all__ = ["progress_enabled", "IterationProgress", "TaskProgress"]


def progress_enabled(progress=None, stream=None) -> bool:
    """Resolve ``progress``: True / False as given, None: is ``stream``
    (default ``sys.stderr``) a terminal."""
    if progress is None or progress == "auto":
        stream = sys.stderr if stream is None else stream
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError):
            return False
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
        self.tty = progress_enabled(None, self.stream)
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
