"""Collective traces: the Task vocabulary, importers, capture and workload generation.

Importing this package never imports torch.
"""

from traces.task import Op, Task, parse_op

__all__ = ["Op", "Task", "parse_op"]
