"""The tasks of a trace as the twin tunes them: each group placed on the cluster and named by its shape.

A trace names its groups as the job did (``dp:0``, ``tp:3``); the twin's executor places a task
by its group's shape (``4x2``: 4 GPUs on each of 2 nodes). ``trace_tasks`` places the trace's
ranks on the cluster as ``ccltwin whatif`` and ``ccltwin rank`` do (``shaped_tasks``) and gives
each distinct task both names.
"""

from __future__ import annotations

from traces.schema import Trace
from traces.task import Task
from twin.replay.comms import shaped_tasks
from twin.topology import Cluster

__all__ = ["trace_tasks"]


def trace_tasks(trace: Trace, cluster: Cluster) -> list[tuple[Task, Task, float]]:
    """(task as the trace names it, task with a ``GxN`` group shape, calls per iteration).

    Groups are placed on ``cluster`` as ``ccltwin whatif`` and ``ccltwin rank`` place them
    (``shaped_tasks``).  Tasks that end up with the same shape and size are one task.
    """
    calls = trace.tasks()
    merged: dict[Task, tuple[Task, float]] = {}
    for task, shaped in shaped_tasks(trace, cluster).items():
        if shaped not in merged or calls[task] > merged[shaped][1]:  # groups of one shape run side by side
            merged[shaped] = (task, calls[task])
    return [(named, shaped, n) for shaped, (named, n) in merged.items()]
