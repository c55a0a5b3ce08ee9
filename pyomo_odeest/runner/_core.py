r"""Many independent tasks on Dask (or serially), streamed back as one table.

:class:`Runner` executes a list of tasks — each a function applied to one item
with its own random seed — on a ``dask.distributed`` cluster or, with
``mode='serial'``, one after the other in this process (for debugging: no
pickling, breakpoints work).  Every task becomes one row of a
:class:`pandas.DataFrame`; a task that raises becomes a row with its error,
never the end of the run.  Task ``i`` receives ``SeedSequence(seed).spawn(n)[i]``
whatever the number of workers, the order of completion or the mode, so the
same seeds give the same table in serial and distributed mode.

Cluster choices, streaming, tasks lost with their worker (run again in a
process of their own forked by a worker, up to ``retries`` times, so that a
task that ends its own process is named as the culprit), ``task_timeout`` and
interruption: see docs/runner.md, sections "Where the work runs: one argument"
and "Tasks, seeds, rows".
"""
from __future__ import annotations

import hashlib
import math
import os
import socket
import sys
import time
import traceback
import uuid
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..nlp._forked import CAN_FORK, run_forked
from ..nlp._progress import TaskProgress, progress_enabled
from ..problem._result import EstimationResult

__all__ = ["Runner", "RunResult", "RunInterruptedWarning", "Task", "shared", "result_row", "task_seeds", "task_key",
           "task_index"]


# ---------------------------------------------------------------------------
# objects shared by many tasks: pickled once, rebuilt once per worker
# ---------------------------------------------------------------------------
_WORKER_CACHE: "OrderedDict[str, Any]" = OrderedDict()
_WORKER_CACHE_SIZE = 16


def _restore_shared(digest, payload):
    obj = _WORKER_CACHE.get(digest)
    if obj is None:
        import cloudpickle
        obj = cloudpickle.loads(payload)
        _WORKER_CACHE[digest] = obj
        while len(_WORKER_CACHE) > _WORKER_CACHE_SIZE:
            _WORKER_CACHE.popitem(last=False)
    else:
        _WORKER_CACHE.move_to_end(digest)
    return obj


class _Shared:
    """Pickles as (digest, cloudpickle bytes) and unpickles to one object per
    process, so that caches built on it (simulators, interval models) are
    reused by the following tasks on the same worker."""

    def __init__(self, obj):
        import cloudpickle
        self.obj = obj
        self.payload = cloudpickle.dumps(obj)
        self.digest = hashlib.sha1(self.payload).hexdigest()

    def __reduce__(self):
        return _restore_shared, (self.digest, self.payload)


def shared(obj):
    """Mark ``obj`` (a problem, typically) as shared by many tasks: it is
    serialized once on the client and rebuilt once per worker process."""
    return obj if isinstance(obj, _Shared) else _Shared(obj)


def _unwrap(v):
    return v.obj if isinstance(v, _Shared) else v


class RunInterruptedWarning(UserWarning):
    """A run stopped before all its tasks finished (the finished rows are kept)."""


# ---------------------------------------------------------------------------
# tasks and rows
# ---------------------------------------------------------------------------
@dataclass
class Task:
    """``fn(*args, **kwargs)`` (plus ``rng=`` if ``pass_rng``), reported with ``columns``."""

    fn: Callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    columns: dict = field(default_factory=dict)
    pass_rng: bool = False


def task_key(run_id, index) -> str:
    """Dask key of task ``index`` of a run (``task_index`` recovers the index)."""
    return f"odeest-{run_id}-{index}"


def task_index(key) -> int:
    """Task index of a Dask key made by :func:`task_key`."""
    return int(str(key).rsplit("-", 1)[1])


def _root(seed) -> np.random.SeedSequence:
    """A fresh root sequence (a given SeedSequence is copied, never spawned from)."""
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key)
    return np.random.SeedSequence(seed)


def task_seeds(seed, n) -> list:
    """``SeedSequence(seed).spawn(n)``: task ``i`` gets child ``i`` (whatever ``n``)."""
    return _root(seed).spawn(n)


def result_row(res: EstimationResult) -> dict:
    """One table row of an estimation result (estimates as ``p_<name>`` columns)."""
    row = {f"p_{k}": float(v) for k, v in res.estimates.items()}
    chk = res.extra.get("noise_check") or {}
    row.update(objective=float(res.objective), status=str(res.status), success=bool(res.success),
               iterations=int(res.iterations), approach=res.approach, method=res.method,
               chi2_p=float(chk.get("p_upper", np.nan)),
               simulated_objective=float(np.nan if res.extra.get("simulated_objective") is None
                                         else res.extra["simulated_objective"]),
               warnings=" | ".join(res.warnings))
    return row


def _worker_name():
    if "distributed" not in sys.modules:         # not on a Dask worker (and importing
        return f"local:{socket.gethostname()}:{os.getpid()}"   # it costs seconds)
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return f"local:{socket.gethostname()}:{os.getpid()}"


def _row(task, index, seed_seq, **entries):
    """The row of task ``index``: its index, seed and columns, then ``entries``."""
    row = dict(task=index, seed=int(seed_seq.generate_state(1)[0]))
    row.update(task.columns)
    row.update(entries)
    return row


def _execute(task: Task, index: int, seed_seq, keep: bool):
    """Run one task; never raises.  Returns ``(index, row, output)``."""
    t0 = time.perf_counter()
    row = _row(task, index, seed_seq)
    out = None
    try:
        args = tuple(_unwrap(a) for a in task.args)
        kwargs = {k: _unwrap(v) for k, v in task.kwargs.items()}
        if task.pass_rng:
            kwargs["rng"] = np.random.default_rng(seed_seq)
        out = task.fn(*args, **kwargs)
        if isinstance(out, EstimationResult):
            row.update(result_row(out))
            out = out.lean() if not keep else out
        elif isinstance(out, dict):
            row.update(out)
        elif isinstance(out, pd.Series):
            row.update(out.to_dict())
        elif out is not None and not isinstance(out, pd.DataFrame):
            row["value"] = out
        row.setdefault("status", "done")
        row.setdefault("success", True)
        row["error"] = ""
    except Exception as err:                     # reported in the row, the run goes on
        row.update(status="error", success=False,
                   error=f"{type(err).__name__}: {err}",
                   traceback="".join(traceback.format_exception(type(err), err,
                                                                err.__traceback__))[-4000:])
        out = None
    row["wall_s"] = time.perf_counter() - t0
    row["worker"] = _worker_name()
    return index, row, out


def _rows_of(row, out):
    """A DataFrame output gives one row per line (e.g. compare_approaches' table)."""
    if isinstance(out, pd.DataFrame):
        frame = out.reset_index()
        return [{**row, **rec} for rec in frame.to_dict("records")]
    return [row]


# ---------------------------------------------------------------------------
# the run's outcome
# ---------------------------------------------------------------------------
@dataclass
class RunResult:
    """Outcome of :meth:`Runner.run`.

    Attributes
    ----------
    table : DataFrame
        One row per task (tasks returning a DataFrame give one row per line),
        ordered by task index: the task's columns (start, seed, ...),
        estimates, ``objective``, ``status``, ``success``, ``iterations``,
        ``approach``, ``wall_s`` (seconds inside the task), ``worker``,
        ``error``.
    outputs : dict
        Task index -> what the task returned (estimation results without
        their Pyomo model, see :meth:`EstimationResult.lean`).
    interrupted : bool
        True if the run stopped early; unfinished tasks have status
        ``'cancelled'``.
    wall_s : float
        Wall time of the whole run.
    """

    table: pd.DataFrame
    outputs: dict
    interrupted: bool = False
    wall_s: float = float("nan")
    info: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """True when every task returned a result: the run was not interrupted and
        no row is an error (a task that raised, or was lost with its worker) or
        cancelled."""
        return not self.interrupted and not self.table["status"].isin(["cancelled", "error"]).any()

    @property
    def errors(self) -> pd.DataFrame:
        return self.table[self.table["status"] == "error"]

    def results(self) -> list:
        """The estimation results, in task order."""
        return [self.outputs[i] for i in sorted(self.outputs)
                if isinstance(self.outputs[i], EstimationResult)]


def _error_row(task, index, seed_seq, error, worker="", status="error"):
    return index, _row(task, index, seed_seq, status=status, success=False, error=error,
                       worker=worker), None


def _execute_isolated(task, index, seed_seq, keep, timeout=None, rerun=False):
    """:func:`_execute` in a child process forked by the worker
    (:func:`~pyomo_odeest.nlp.run_forked`): a task that ends its process
    (``os._exit``, a fatal signal, a crash in compiled code) gives an error row
    naming it, and the worker lives on.  A task still running after ``timeout``
    seconds (None or ``inf``: no limit) is killed (``SIGKILL``: whatever it is
    doing, set-up or compiled code) and its row has the status ``'time_limit'``.  An
    interruption of the waiting process (``KeyboardInterrupt`` from a SIGINT sent to
    it alone, e.g. a notebook's "interrupt kernel") kills the child too before it
    propagates.  ``rerun``: the task is here because it was lost with its worker (the
    error row then says so)."""
    limited = timeout is not None and math.isfinite(timeout)
    out = run_forked(lambda: _execute(task, index, seed_seq, keep),
                     time.monotonic() + timeout if limited else None)
    if out.returned:
        return out.value
    if out.timed_out:
        return _error_row(task, index, seed_seq, f"stopped by the runner's task_timeout after "
                          f"{timeout:g} s (the process running it was killed)",
                          _worker_name(), status="time_limit")
    if out.unsendable is not None:
        return _error_row(task, index, seed_seq, f"the task's output cannot be sent back: "
                          f"{out.unsendable}", _worker_name())
    how = out.died
    if rerun:
        return _error_row(task, index, seed_seq,
                          f"the task killed its worker process: it was lost with its worker, "
                          f"and run again in a process of its own it ended that process ({how}) "
                          "without returning (os._exit, a fatal signal, a crash in compiled "
                          "code or memory exhaustion); run it in one process "
                          "(Runner(mode='serial')) to see where", _worker_name())
    return _error_row(task, index, seed_seq,
                      f"the process of its own in which the task ran (task_timeout runs each "
                      f"task in a forked process) died with {how} before the task returned: "
                      "killed from outside (a user, the system's out-of-memory killer) or "
                      "ended by the task itself (os._exit, a fatal signal, a crash in "
                      "compiled code); if nobody killed it, run the task without task_timeout "
                      "to see where", _worker_name())


def _submit(client, task, index, seed_seq, keep, key, isolated=False, timeout=None):
    """Submit one task; a task that cannot be serialized is named with its culprit."""
    try:
        if isolated or timeout is not None:
            return client.submit(_execute_isolated, task, index, seed_seq, keep, timeout,
                                 isolated, key=key, pure=False)
        return client.submit(_execute, task, index, seed_seq, keep, key=key, pure=False)
    except Exception as err:                     # noqa: BLE001 - diagnosed below
        raise _serialization_error(task, index, err) from None


def _serialization_error(task, index, err):
    """A :class:`TypeError` naming what of ``task`` cannot be pickled (or ``err``
    itself, with its root cause, when every part pickles on its own)."""
    import cloudpickle
    root = err
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    name = getattr(task.fn, "__qualname__", None) or repr(task.fn)
    parts = [(f"the function {name!r}", task.fn)]
    parts += [(f"argument {k}", _unwrap(a)) for k, a in enumerate(task.args)]
    parts += [(f"keyword argument {k!r}", _unwrap(v)) for k, v in task.kwargs.items()]
    for what, obj in parts:
        try:
            cloudpickle.dumps(obj)
        except Exception as e:                   # noqa: BLE001 - the culprit
            return TypeError(
                f"task {index} cannot be sent to the Dask workers: {what} cannot be "
                f"pickled ({type(e).__name__}: {e}). Define the function at module level "
                "and pass data that pickles (no open files, locks, connections or "
                "generators), or run with Runner(mode='serial')")
    return TypeError(f"task {index} cannot be sent to the Dask workers: "
                     f"{type(root).__name__}: {root}")


def _gathered(fut):
    """The result of a finished future, or None if it failed or was lost meanwhile."""
    if fut.status != "finished":
        return None
    try:
        return fut.result()
    except Exception:                            # noqa: BLE001 - lost before it was gathered
        return None


def _failure(fut):
    """What happened to a future that did not finish, in words."""
    try:
        exc = fut.exception()
    except Exception as err:                     # noqa: BLE001 - a cancelled or lost future
        exc = err
    if exc is None:
        return f"the future is {fut.status} (its worker went away)"
    return f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------
# the runner
# ---------------------------------------------------------------------------
def _import_distributed():
    try:
        import distributed
    except ImportError as err:
        raise ImportError("the Dask runner needs dask.distributed: pip install "
                          "'pyomo_odeest[dask]' (or 'dask[distributed]'), or use "
                          "Runner(mode='serial')") from err
    return distributed


class Runner:
    """Runs many independent estimations; see docs/runner.md.

    Parameters
    ----------
    mode : 'dask' (default) or 'serial'
    n_workers : int, optional
        Worker processes of the embedded LocalCluster (default: the number of
        cores, ``os.cpu_count()``); each has one thread.
    address : str, optional
        Scheduler address of a running cluster (``'tcp://host:8786'``).
    client : distributed.Client, optional
        An existing client (not closed by the runner).
    retries : int
        How many times a task lost with its worker is run again, alone on the
        cluster, before it is reported as killing its worker (default 2; see
        docs/runner.md, "Tasks, seeds, rows").  The embedded cluster's scheduler does not
        reschedule such tasks itself (``allowed-failures`` 0): the runner does.
    progress : bool or None
        Show a progress bar (tqdm if installed, else a line of text on stderr);
        None (default): when standard error is a terminal.
    cluster_kwargs : dict
        More keyword arguments of :class:`distributed.LocalCluster`.
    task_timeout : float, optional
        Seconds a task may run (a number > 0): each task then runs in a child process
        (forked, on Linux) that is killed at that limit, whatever it is doing
        (building a model, compiling, inside one long Ipopt iteration), and its row
        has the status ``'time_limit'``.  The task's own limits (``max_wall_time``)
        stop it more gracefully, with its estimates; this is the backstop.  What a
        task caches in memory is then lost with its process.  ``float('inf')``: no
        limit, but each task still in a process of its own (a task that crashes its
        process becomes an error row; an interrupt ends it too).  None (default):
        no limit, tasks run in the worker (serial: this process).  An attribute:
        it may be changed between runs (checked when set).

    Notes
    -----
    Use as a context manager (``with Runner() as rn: ...``) or call
    :meth:`close` to shut an embedded cluster down.
    """

    def __init__(self, mode="dask", n_workers=None, address=None, client=None, retries=2,
                 progress=None, cluster_kwargs=None, task_timeout=None):
        if mode not in ("dask", "serial"):
            raise ValueError(f"mode must be 'dask' or 'serial', got {mode!r}")
        if address is not None and client is not None:
            raise ValueError("give either address= or client=, not both")
        if mode == "serial" and (address is not None or client is not None):
            raise ValueError("mode='serial' runs in this process; address= and client= "
                             "need mode='dask'")
        if n_workers is not None and (address is not None or client is not None):
            raise ValueError("n_workers sizes the embedded LocalCluster; a cluster given by "
                             "address= or client= is sized by whoever started it")
        if not (isinstance(retries, (int, np.integer)) and retries >= 0):
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        self.task_timeout = task_timeout
        self.mode, self.retries, self.progress = mode, int(retries), progress
        self._client, self._cluster, self._own_client = None, None, False
        if mode == "serial":
            return
        distributed = _import_distributed()
        if client is not None:
            self._client = client
        elif address is not None:
            self._client = distributed.Client(address)
            self._own_client = True
        else:
            n = int(n_workers) if n_workers is not None else (os.cpu_count() or 1)
            if n < 1:
                raise ValueError(f"n_workers must be >= 1, got {n_workers}")
            kw = dict(n_workers=n, threads_per_worker=1, processes=True,
                      dashboard_address=":0")
            kw.update(cluster_kwargs or {})
            import dask
            # a task whose worker dies comes back to the runner at once (see _run_dask)
            # instead of being tried on up to 4 workers by the scheduler
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                self._cluster = distributed.LocalCluster(**kw)
            self._client = distributed.Client(self._cluster)
            self._own_client = True

    @property
    def task_timeout(self):
        """Seconds a task may run (None: no limit, tasks not isolated; see the class)."""
        return self._task_timeout

    @task_timeout.setter
    def task_timeout(self, value):
        if value is not None:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float,
                                                                           np.integer,
                                                                           np.floating)):
                raise ValueError(f"task_timeout must be a number of seconds > 0 (float('inf'): "
                                 f"no limit, each task in a process of its own) or None; got "
                                 f"{type(value).__name__} {value!r}")
            if not float(value) > 0:             # NaN, 0 and negative numbers
                raise ValueError(f"task_timeout must be a number of seconds > 0 (float('inf'): "
                                 f"no limit, each task in a process of its own) or None; got "
                                 f"{value!r}")
            if not CAN_FORK:
                raise ValueError(f"task_timeout needs Linux (its tasks run in forked "
                                 f"processes); got {value!r} on {sys.platform}")
            value = float(value)
        self._task_timeout = value

    # -- lifetime -----------------------------------------------------------
    @property
    def client(self):
        """The ``distributed.Client`` (None in serial mode)."""
        return self._client

    @property
    def n_workers(self) -> int:
        if self._client is None:
            return 1
        return len(self._client.scheduler_info()["workers"])

    def close(self):
        if self._own_client and self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self.mode == "serial":
            return "Runner(mode='serial')"
        return f"Runner(mode='dask', workers={self.n_workers}, scheduler={self._client.scheduler.address})"

    # -- running --------------------------------------------------------------
    def run(self, tasks: Sequence[Task], seed=None, keep_models=False, on_row=None,
            desc="tasks", first_index=0) -> RunResult:
        """Run ``tasks``; rows stream back as tasks finish.

        ``seed`` is the root of the tasks' seeds (None: fresh entropy, recorded
        in ``info['seed']``).  ``on_row(row)`` is called for each finished row
        (raise ``KeyboardInterrupt`` in it to stop the run).  ``keep_models``
        keeps the Pyomo models in the returned estimation results.
        ``first_index``: the index of the first task, for a list of tasks run in
        parts (task ``i`` of this call is task ``first_index + i`` of the whole list,
        with that task's seed and row index).
        """
        tasks = list(tasks)
        for i, t in enumerate(tasks):
            if not isinstance(t, Task):
                raise TypeError(f"tasks[{i}] is a {type(t).__name__}, expected a runner Task")
        if not (isinstance(first_index, (int, np.integer)) and first_index >= 0):
            raise ValueError(f"first_index must be an integer >= 0, got {first_index!r}")
        root = _root(seed)
        seeds = dict(enumerate(task_seeds(root, first_index + len(tasks))[first_index:],
                               first_index))
        tasks = dict(enumerate(tasks, first_index))
        rows, outputs = {}, {}
        prog = TaskProgress(len(tasks), progress_enabled(self.progress), desc)  # None: on a tty
        t0 = time.perf_counter()
        interrupted = False

        def collect(index, row, out):
            rows[index] = _rows_of(row, out)
            if out is not None:
                outputs[index] = out
            prog.update(row.get("status") != "error")
            if on_row is not None:
                on_row(row)

        try:
            if self.mode == "serial":
                for i, t in tasks.items():
                    s = seeds[i]
                    collect(*(_execute(t, i, s, keep_models) if self.task_timeout is None
                              else _execute_isolated(t, i, s, keep_models, self.task_timeout)))
            else:
                interrupted = self._run_dask(tasks, seeds, keep_models, collect)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            prog.close()
        if interrupted:
            warnings.warn(f"run interrupted: {len(rows)} of {len(tasks)} tasks finished; "
                          "the others are marked 'cancelled'", RunInterruptedWarning, stacklevel=2)
        flat = []
        for i, t in tasks.items():
            if i in rows:
                flat.extend(rows[i])
            else:
                flat.append(_row(t, i, seeds[i], status="cancelled", success=False,
                                 error="the run stopped before this task finished"))
        table = pd.DataFrame(flat)
        return RunResult(table=table, outputs=outputs, interrupted=interrupted,
                         wall_s=time.perf_counter() - t0,
                         info=dict(seed=root.entropy, mode=self.mode, workers=self.n_workers))

    def _run_dask(self, tasks, seeds, keep, collect):
        distributed = _import_distributed()
        client = self._client
        futures = {}
        run_id = uuid.uuid4().hex[:8]

        def gather(futs):
            """Collect ``futs`` as they finish; ``{index: why}`` of those lost."""
            lost = {}
            futures.update(futs)
            for fut in distributed.as_completed(list(futs), with_results=False):
                i = futures.pop(fut)
                got = _gathered(fut)
                # released at once: a result left on a worker is lost if that worker dies
                fut.release()
                if got is not None:
                    collect(*got)
                else:                        # lost with its worker, or not runnable there
                    lost[i] = _failure(fut)
                del fut
            return lost

        def submit(batch, run, isolated=False):
            return {_submit(client, tasks[i], i, seeds[i], keep, task_key(run, i),
                            isolated=isolated, timeout=self.task_timeout): i for i in batch}

        try:
            lost = gather(submit(list(tasks), run_id))
            # a task lost with its worker runs again in a process of its own (forked by
            # a worker): if it ends that process it is the culprit and the worker lives;
            # without fork, alone on the cluster, one task at a time
            for attempt in range(1, self.retries + 1):
                batches = [sorted(lost)] if CAN_FORK else [[i] for i in sorted(lost)]
                again = {}
                for batch in batches:
                    again.update(gather(submit(batch, f"{run_id}r{attempt}", CAN_FORK)))
                lost = again
        except KeyboardInterrupt:
            client.cancel([f for f in futures if not f.done()])
            return True
        for i in sorted(lost):
            why = (f"the task was lost with its worker and not run again (retries=0): {lost[i]}"
                   if self.retries == 0 else
                   f"the task was lost with its worker {self.retries + 1} times (last: "
                   f"{lost[i]}); it probably ends the Python process that runs it (os._exit, "
                   "a fatal signal, a crash in compiled code or memory exhaustion): run it in "
                   "one process (Runner(mode='serial')) to see where")
            collect(*_error_row(tasks[i], i, seeds[i], why))
        return False

    def __call__(self, fn, items) -> list:
        """``[fn(item) for item in items]`` on the runner, in order: the
        ``runner(fn, tasks)`` protocol of
        :func:`~pyomo_odeest.analysis._profile.profile_likelihood`.  Raises
        :class:`RuntimeError` naming the tasks that failed."""
        run = self.map(fn, items, columns=[{} for _ in items], desc=getattr(fn, "__name__", "map"))
        bad = run.table[run.table["status"].isin(["error", "cancelled"])]
        if len(bad):
            lines = "; ".join(f"task {int(r.task)}: {r.error}" for _, r in bad.iterrows())
            raise RuntimeError(f"{len(bad)} of {len(items)} tasks failed: {lines}")
        return [run.outputs.get(i) for i in range(len(items))]

    def map(self, fn, items, seed=None, pass_rng=False, columns=None, shared_args=(),
            on_row=None, desc="map", **kwargs) -> RunResult:
        """``fn(item, *shared_args, **kwargs)`` for every item (plus ``rng=`` a
        :class:`numpy.random.Generator` of the task's own seed if ``pass_rng``).

        ``fn`` may return an :class:`EstimationResult` (a standard row), a
        dict or Series (its entries), a DataFrame (one row per line, e.g. the
        table of :func:`~pyomo_odeest.analysis._compare.compare_approaches`) or
        any value (column ``value``).  ``columns`` gives per-item columns (a
        list of dicts; default ``{'item': repr(item)}`` for simple items).
        ``shared_args`` are sent once and rebuilt once per worker; ``seed`` and
        ``on_row`` as in :meth:`run`.
        """
        items = list(items)
        if columns is None:
            columns = [{"item": it} if isinstance(it, (str, int, float)) else {} for it in items]
        if len(columns) != len(items):
            raise ValueError(f"columns has {len(columns)} entries for {len(items)} items")
        sh = tuple(shared(a) for a in shared_args) if self.mode == "dask" else tuple(shared_args)
        tasks = [Task(fn, (it,) + sh, dict(kwargs), dict(c), pass_rng)
                 for it, c in zip(items, columns)]
        return self.run(tasks, seed=seed, on_row=on_row, desc=desc)
