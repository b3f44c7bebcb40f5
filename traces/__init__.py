"""Collective traces: the Task vocabulary, importers, capture and workload generation.

Importing this package never imports torch.
"""

from traces.errors import TraceError
from traces.nccl_tests import NcclTestsLog, NcclTestsRow, read_nccl_tests
from traces.task import Op, Task, parse_op

__all__ = ["NcclTestsLog", "NcclTestsRow", "Op", "Task", "TraceError", "parse_op", "read_nccl_tests"]
