"""Collective traces: the Task vocabulary, importers, capture and workload generation.

Importing this package never imports torch.
"""

from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.kineto import read_kineto
from traces.nccl_tests import NcclTestsLog, NcclTestsRow, read_nccl_tests
from traces.schema import CollectiveEvent, ComputeEvent, Event, ProcessGroup, RankTrace, Trace
from traces.task import Op, Task, parse_op
from traces.trace_file import load_trace, save_trace

__all__ = [
    "CollectiveEvent",
    "ComputeEvent",
    "Event",
    "NcclTestsLog",
    "NcclTestsRow",
    "Op",
    "ProcessGroup",
    "RankTrace",
    "Task",
    "Trace",
    "TraceError",
    "load_trace",
    "parse_op",
    "read_chakra",
    "read_flight_recorder",
    "read_kineto",
    "read_nccl_tests",
    "save_trace",
]
