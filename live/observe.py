"""Every collective the job issued since the last boundary, and the config each one ran with.

The tuner plugin logs one *decision* per call NCCL asks it about (key, occurrence, the algo and
protocol NCCL's argmin took from the table as the plugin left it, channels, chunk, the rule
version that applied), whoever issued the call: ``dist.*``, DDP's reducer, FSDP2, functional
collectives. At a boundary the runtime drains that log. On NCCL that is all there is to it
(:class:`NcclObserver`). On gloo no NCCL asks the plugin anything, so :class:`GlooObserver`
does what NCCL would: it reads the calls the job handed its process groups from PyTorch's
flight recorder (the backend records every call it is given, C++ callers included; on by
default for gloo) and puts each through the same compiled plugin with a cost table laid out as
NCCL passes it (``live.plugin.emulate``), so that the plugin's own rule logic decides what each
call "ran" with and logs it exactly as it would under NCCL.

Single-rank communicators are left alone (NCCL asks no tuner about them), as are point-to-point
calls and AllToAll (NCCL runs them as point-to-point).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from live.clock import TimeSource
from live.errors import LiveError
from live.schedule import TaskKey, comm_id
from traces.capture.issued import issued_from_entries
from traces.capture.session import flight_recorder_entries
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Subspace
from tuner.rules import CommFacts, subspace_problem

__all__ = ["TUNED_OPS", "CommView", "GlooObserver", "cost_table", "group_shape", "key_of"]

TUNED_OPS = (Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLREDUCE)
"""The collectives NCCL asks its tuner about (point-to-point never reaches it)."""

AVAILABLE, CHEAPEST = 2.0, 1.0
"""Cost-table values an emulated call gets: every entry NCCL could run, and NCCL's own choice."""


@dataclass(frozen=True, slots=True)
class CommView:
    """A communicator as this rank sees it."""

    comm: int
    nranks: int
    rank: int
    """This process's rank in the communicator (0 leads)."""
    nnodes: int
    label: str
    """A name stable across launches (the shape and the order this process met communicators of
    that shape in), for the store and the saved search states: ``2x1#0``."""

    @property
    def shape(self) -> str:
        return group_shape(self.nranks, self.nnodes)


def group_shape(nranks: int, nnodes: int) -> str:
    """The task group of a communicator: ``GxN`` (G ranks on each of N nodes).

    >>> group_shape(16, 2)
    '8x2'
    """
    if nnodes < 1 or nranks % nnodes:
        raise ValueError(f"{nranks} ranks do not spread evenly over {nnodes} nodes")
    return f"{nranks // nnodes}x{nnodes}"


def task_of(key: TaskKey, view: CommView, dtype: str) -> Task:
    return Task(key.op, key.nbytes, view.nranks, dtype, view.shape)


def key_of(decision: Any) -> TaskKey:
    """The task key of a plugin decision."""
    return TaskKey(decision.comm, decision.op, decision.nbytes)


def cost_table(task: Task, facts: CommFacts, default: Config) -> list[list[float]]:
    """The ``[algo][proto]`` table an emulated call hands the plugin: -1 where NCCL could not run
    the pair on this communicator, NCCL's own choice the cheapest entry — the only properties of
    NCCL's table (predicted µs) the plugin's decision depends on.

    >>> from tuner.config import Transport
    >>> facts = CommFacts(nranks=2, nnodes=1, sm_count=132, sm_version=90)
    >>> table = cost_table(Task(Op.ALLGATHER, 1 << 20, 2), facts,
    ...                    Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8, 512, 1 << 19))
    >>> table[Algo.RING.nccl_index], table[Algo.TREE.nccl_index]
    ([2.0, 2.0, 1.0], [-1.0, -1.0, -1.0])
    """
    from live.plugin.emulate import cost_table as table_of

    runnable = {(a, p): AVAILABLE for a in Algo for p in Proto
                if subspace_problem(task.op, Subspace(a, p, default.transport), facts) is None}
    return table_of({**runnable, (default.algo, default.proto): CHEAPEST})


class Views:
    """Names communicators stably: the n-th communicator of a shape this process met is ``shape#n``."""

    def __init__(self) -> None:
        self.by_comm: dict[int, CommView] = {}
        self._per_shape: Counter[str] = Counter()

    def add(self, comm: int, *, nranks: int, rank: int, nnodes: int) -> CommView:
        if comm not in self.by_comm:
            shape = group_shape(nranks, nnodes)
            label = f"{shape}#{self._per_shape[shape]}"
            self._per_shape[shape] += 1
            self.by_comm[comm] = CommView(comm, nranks, rank, nnodes, label)
        return self.by_comm[comm]


class GlooObserver:
    """Feeds the flight recorder's calls through the plugin as NCCL would, then drains its log."""

    def __init__(self, plugin: Any, source: TimeSource, *, local_world: int):
        from live.nccl import NcclInfo
        from live.plugin.emulate import EmulatedComm

        self._emulated_comm = EmulatedComm
        self.plugin = plugin
        self.source = source
        self.local_world = local_world
        self.abi = NcclInfo(tuple(source.nccl_version), "the time source").tuner_abi
        """The tuner ABI the emulated NCCL (the time source's release) takes."""
        self.views = Views()
        self.dtypes: dict[TaskKey, str] = {}
        self.skipped: Counter[str] = Counter()
        self._emulated: dict[int, Any] = {}
        self._by_group: dict[str, CommView | None] = {}
        self._known: dict[TaskKey, tuple[Task, CommFacts, Config]] = {}
        self._last_record: int | None = None
        """The flight recorder's last record read; ``None`` before the first poll (which reads
        every call since the process groups were made, as NCCL counts from a communicator's start)."""

    def task(self, key: TaskKey) -> Task:
        return task_of(key, self.views.by_comm[key.comm], self.dtypes.get(key, "float32"))

    def quiet(self) -> bool:
        """Nothing needs reading once tuning converged: on gloo no NCCL runs what the plugin decides."""
        return True

    def poll(self) -> list[Any]:
        """The plugin's decisions for the calls issued since the last poll, in call order."""
        last = -1 if self._last_record is None else self._last_record
        entries = sorted((e for e in flight_recorder_entries() if e.get("record_id", -1) > last),
                         key=lambda e: e["record_id"])
        if entries:
            lost = entries[0]["record_id"] - last - 1
            if lost > 0 and self._last_record is not None:
                raise LiveError(f"the flight recorder dropped {lost} collectives between two boundaries; "
                                "set TORCH_FR_BUFFER_SIZE higher before the process groups are made")
            self._last_record = entries[-1]["record_id"]
        for issued in issued_from_entries(entries, "the flight recorder", self.skipped):
            view = self._view(issued.group) if issued.op in TUNED_OPS else None
            if view is None:
                continue
            key = TaskKey(view.comm, issued.op, issued.nbytes)
            self.dtypes.setdefault(key, issued.dtype)
            task, facts, default = self._facts(key)
            self._emulated[view.comm].select(key.op, key.nbytes, cost_table(task, facts, default))
        return self.plugin.drain_decisions()

    def _facts(self, key: TaskKey) -> tuple[Task, CommFacts, Config]:
        if key not in self._known:
            task = self.task(key)
            self._known[key] = (task, self.source.facts(task), self.source.default_config(task))
        return self._known[key]

    def _view(self, group: str) -> CommView | None:
        """The communicator of process group ``group``; ``None`` for one rank or one this rank is not in."""
        if group not in self._by_group:
            import torch.distributed as dist
            from torch.distributed import distributed_c10d

            pg = next((g for g, name in distributed_c10d._world.pg_names.items() if name == group), None)
            ranks = tuple(dist.get_process_group_ranks(pg)) if pg is not None else ()
            me = dist.get_rank()
            view = None
            if len(ranks) > 1 and me in ranks:
                nnodes = len({r // self.local_world for r in ranks})
                comm = comm_id(group, ranks)
                view = self.views.add(comm, nranks=len(ranks), rank=ranks.index(me), nnodes=nnodes)
                self._emulated[comm] = self._emulated_comm(self.plugin, comm, nranks=view.nranks, nnodes=nnodes,
                                                           rank=view.rank, tuner_abi=self.abi)
            self._by_group[group] = view
        return self._by_group[group]

    def close(self) -> None:
        for emulated in self._emulated.values():
            emulated.close()
        self._emulated.clear()


def local_world_size() -> int:
    """Ranks per node: torchrun's ``LOCAL_WORLD_SIZE`` (ranks fill nodes in order), else all on one."""
    import torch.distributed as dist

    return int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
