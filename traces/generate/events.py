"""One rank's event stream as it is generated: ids in issue order, streams, dependencies.

Compute runs on the ``compute`` stream; each kind of communication on a stream of its own
(``tp``, ``cp``, ``pp``, ``dp``), as NCCL runs each communicator on its own stream. The generator
states the waits between streams with ``after``, so a TP all-gather waits for the compute that
produced its input and the compute that consumes its output waits for it.
"""

from __future__ import annotations

from traces.schema import CollectiveEvent, ComputeEvent, Event, ProcessGroup
from traces.task import Op

__all__ = ["RankEvents"]


class RankEvents:
    """Append-only event list of one rank, with the groups it used."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[Event] = []
        self.groups: dict[str, ProcessGroup] = {}
        self.iteration = 0
        self.last_compute: int | None = None
        self.barrier: tuple[int | None, ...] = ()

    def wait_all(self, events: list[int | None]) -> None:
        """Make the compute stream wait for ``events`` (``torch.cuda.Stream.wait_event``): the next
        compute phase lists them in its ``after``."""
        self.barrier = (*self.barrier, *events)

    @staticmethod
    def _deps(after: tuple[int | None, ...]) -> tuple[int, ...]:
        if len(after) == 1:  # the common case, kept fast: one dependency
            return () if after[0] is None else after  # type: ignore[return-value]
        return tuple(sorted({dep for dep in after if dep is not None}))

    def compute(
        self, name: str, flops: float, mem_bytes: int, *after: int | None, category: str | None = None,
        shape: tuple[int, ...] = (), dtype: str | None = None, kernels: int = 1,
    ) -> int:
        """Add a compute phase (what it is: ``traces.schema.COMPUTE_CATEGORIES``); returns its id."""
        event_id = len(self.events)
        if self.barrier:
            after, self.barrier = (*after, *self.barrier), ()
        self.last_compute = event_id
        self.events.append(
            ComputeEvent(
                id=event_id,
                name=name,
                iteration=self.iteration,
                flops=float(flops),
                mem_bytes=int(mem_bytes),
                after=self._deps(after),
                category=category,
                shape=tuple(int(x) for x in shape),
                dtype=dtype,
                kernels=kernels,
            )
        )
        return event_id

    def collective(
        self,
        op: Op,
        nbytes: int,
        group: ProcessGroup,
        dtype: str,
        name: str,
        *after: int | None,
        peer: int | None = None,
        stream: str | None = None,
        direction: str | None = None,
    ) -> int | None:
        """Add a collective on ``group`` (on ``stream``, by default the group's kind); returns its id.

        A collective on a group of one rank is a no-op that NCCL finishes without communicating;
        it is left out and ``None`` returned (``after`` lists skip ``None``).
        """
        if len(group.ranks) < 2:
            return None
        self.groups.setdefault(group.id, group)
        event_id = len(self.events)
        self.events.append(
            CollectiveEvent(
                id=event_id,
                op=op,
                nbytes=int(nbytes),
                group=group.id,
                dtype=dtype,
                stream=stream or group.name or "nccl",
                iteration=self.iteration,
                after=self._deps(after),
                name=name,
                peer=peer,
                direction=direction,
            )
        )
        return event_id
