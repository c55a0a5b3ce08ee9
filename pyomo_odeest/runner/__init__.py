"""Many independent estimations at once — multistart, bootstrap, profile points,
generic maps — on Dask (an embedded LocalCluster, a scheduler address or a
Client) or serially (:mod:`.core`, :mod:`.studies`; ``docs/runner.md``).
The top layer: it uses the approaches and analysis, nothing uses it."""
from ._core import (RunInterruptedWarning, RunResult, Runner, Task, result_row, shared, task_index,
                   task_key, task_seeds)
from ._studies import (BootstrapResult, MultistartResult, bootstrap, cluster_end_points,
                      estimate_task, multistart, multistart_starts, profile_points)

__all__ = ["RunInterruptedWarning", "RunResult", "Runner", "Task", "result_row", "shared", "task_index", "task_key", "task_seeds",
           "BootstrapResult", "MultistartResult", "bootstrap", "cluster_end_points",
           "estimate_task", "multistart", "multistart_starts", "profile_points"]
