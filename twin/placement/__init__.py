"""Placement: where the ranks of a trace land on a cluster and which communicator each call uses.

``Communicator`` is the one communicator abstraction: the GPUs a call runs on, what NCCL's init
finds on the whole communicator (``nccl``), the calls' ``geometry`` and ``schedule``.
``Placement`` places a trace (rank r on GPU r) and gives each call its communicator;
``TaskPlacement`` places tasks given without a trace by their ``GxN`` shape.

>>> from traces.task import Op
>>> from twin.topology import load_cluster
>>> comm = Communicator.first(load_cluster("dgx-h100", nodes=2), 16)
>>> comm.task(Op.ALLREDUCE, 1 << 20).group, comm.nccl.nchannels > 0
('8x2', True)
"""

from twin.placement.communicator import (
    Communicator,
    PlacementError,
    TaskPlacement,
    describe,
    first_gpus,
    task_shape,
)
from twin.placement.trace import (
    Placement,
    Timed,
    cluster_for,
    distinct_calls,
    members_of,
    rank_gpus,
    shaped_tasks,
    task_of,
    trace_tasks,
    translations,
)

__all__ = [
    "Communicator",
    "Placement",
    "PlacementError",
    "TaskPlacement",
    "Timed",
    "cluster_for",
    "describe",
    "distinct_calls",
    "first_gpus",
    "members_of",
    "rank_gpus",
    "shaped_tasks",
    "task_of",
    "task_shape",
    "trace_tasks",
    "translations",
]
