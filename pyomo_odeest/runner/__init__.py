"""Many independent estimations at once — multistart, bootstrap, profile points,
generic maps — on Dask (an embedded LocalCluster, a scheduler address or a
Client) or serially (:mod:`.core`, :mod:`.studies`; ``docs/runner.md``).
The top layer: it uses the approaches and analysis, nothing uses it.

Re-exported by :mod:`pyomo_odeest` (the user API): ``RunInterruptedWarning``,
``RunResult``, ``Runner``, ``Task``, ``BootstrapResult``, ``MultistartResult``,
``bootstrap``, ``multistart``, ``profile_points``.

Building blocks, importable from here only (``__building_blocks__``): the pieces of a
run (objects shared by its tasks, a task's index, the tasks' seeds) and of the studies: ``shared``,
``task_index``, ``task_seeds``, ``cluster_end_points``, ``estimate_task``,
``multistart_starts``.
"""
from ._core import (RunInterruptedWarning, RunResult, Runner, Task, shared, task_index,
                   task_seeds)
from ._studies import (BootstrapResult, MultistartResult, bootstrap, cluster_end_points,
                      estimate_task, multistart, multistart_starts, profile_points)

__all__ = ["RunInterruptedWarning", "RunResult", "Runner", "Task", "shared", "task_index", "task_seeds",
           "BootstrapResult", "MultistartResult", "bootstrap", "cluster_end_points",
           "estimate_task", "multistart", "multistart_starts", "profile_points"]

#: The names of ``__all__`` that :mod:`pyomo_odeest` does not re-export (see above).
__building_blocks__ = ("shared", "task_index", "task_seeds", "cluster_end_points", "estimate_task",
                       "multistart_starts")
