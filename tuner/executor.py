"""What runs a config and times it, as the search loop sees it.

A live job's executor installs a config on every rank at an agreed call and times the call on
the leader; the twin's executor predicts the time and adds measurement noise.  Both say which
knob tiers they can change (:mod:`tuner.knobs`), so that a search varies only those, and what
NCCL would have done on its own (the baseline every report compares with).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from traces.task import Task
from tuner.config import Config
from tuner.knobs import Tier
from tuner.rules import CommFacts
from tuner.space import ConfigSpace


class Executor(Protocol):
    """Runs collectives with a given config and returns their time."""

    tiers: frozenset[Tier]
    """The knob tiers this executor can change between two measurements."""
    hardware: str
    """The cluster its times belong to (a measurement record's ``hardware``)."""
    nccl_version: tuple[int, int, int]
    """The NCCL release that runs (or is modelled), ``(2, 28, 9)``."""

    def facts(self, task: Task) -> CommFacts:
        """The facts of the communicator ``task`` runs on."""
        ...

    def default_config(self, task: Task) -> Config:
        """NCCL's own choice for ``task`` (no tuner)."""
        ...

    def measure(self, task: Task, config: Config) -> float:
        """Run ``task`` once with ``config``; its time in µs (``inf`` if the run failed)."""
        ...


@runtime_checkable
class Resumable(Protocol):
    """An executor whose measurements depend on how many came before (the twin's seeded noise):
    a tuning session that resumes from stored trials tells it of each, so that it goes on as an
    uninterrupted run would."""

    def resumed(self, task: Task, config: Config) -> None:
        """Count a measurement of ``config`` that an earlier run took."""
        ...


def space_for(executor: Executor, task: Task, fixed: Config | None = None) -> ConfigSpace:
    """The space of ``task`` that ``executor`` can search; knobs it cannot change keep the
    values of ``fixed`` (default: NCCL's own choice)."""
    return ConfigSpace(task, executor.facts(task), tiers=executor.tiers,
                       fixed=fixed if fixed is not None else executor.default_config(task))
