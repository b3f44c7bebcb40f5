"""Where a live measurement's time comes from, and what the communicator offers.

On NCCL the time of a call is read off the profiler plugin's event for it (GPU timestamps) and
the communicator's facts and NCCL's own choice off the plugin (``live.nccl_source``). In CI
there is no GPU and no NCCL: the job runs on gloo and a *time source* stands in for both — any
:class:`tuner.executor.Executor` (the tests pass the twin's) through :class:`ExecutorClock`,
which times a call by measuring its task with the config the plugin says it ran with.
"""

from __future__ import annotations

from typing import Any, Protocol

from traces.task import Task
from tuner.config import Config
from tuner.rules import CommFacts

__all__ = ["ExecutorClock", "TimeSource"]


class TimeSource(Protocol):
    """The time of each observed call, the communicator's facts and NCCL's own choice."""

    hardware: str
    """The cluster the times belong to (a measurement's ``hardware``)."""
    nccl_version: tuple[int, int, int]

    def facts(self, task: Task) -> CommFacts:
        ...

    def default_config(self, task: Task) -> Config:
        """What NCCL runs for ``task`` with no rule."""
        ...

    def ready(self, task: Task) -> bool:
        """``facts`` and ``default_config`` can answer for ``task`` (on NCCL: once a call of it
        that no rule touched has been timed)."""
        ...

    def time_us(self, task: Task, config: Config, call: Any) -> float | None:
        """µs the call ``call`` (a plugin decision: key and occurrence) took running ``config``;
        ``inf`` if it failed, ``None`` while its time is not known (yet)."""
        ...


class ExecutorClock:
    """A :class:`TimeSource` from an executor: a call takes what ``executor.measure`` says its
    task takes with the config it ran with.

    >>> class Fixed:
    ...     hardware, nccl_version = "bench:2x1", (2, 28, 9)
    ...     def measure(self, task, config): return 12.5
    >>> ExecutorClock(Fixed()).time_us(None, None, None)
    12.5
    """

    def __init__(self, executor: Any):
        self.executor = executor
        self.hardware = executor.hardware
        self.nccl_version = tuple(executor.nccl_version)

    def facts(self, task: Task) -> CommFacts:
        return self.executor.facts(task)

    def default_config(self, task: Task) -> Config:
        return self.executor.default_config(task)

    def ready(self, task: Task) -> bool:
        return True

    def time_us(self, task: Task, config: Config, call: Any) -> float | None:
        return self.executor.measure(task, config)
