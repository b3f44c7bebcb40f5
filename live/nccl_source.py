"""A real NCCL job's calls, their times and the communicator's facts, all read off the plugin.

NCCL itself calls the plugin's ``getCollInfo`` for every collective, so :class:`NcclObserver`
only drains the decision log; communicators are those the plugin saw initialised (its
``comms``: commHash, ranks, nodes and this process's rank in each). :class:`NcclSource` is
the time source: a call's time is its profiler event's GPU time (first channel start to last
channel stop, ``globaltimer``), matched by (communicator, collective, bytes, occurrence); an
event that has not arrived yet leaves the time unknown until a later boundary. The facts of a
task come from the same place: which (algo, proto) entries NCCL offered in its cost table
(``Decision.available``: NVLS, CollNet, PAT, LL128 are on or off), NCCL's own choice in
calls no rule touched, the channels and warps its events report, the GPU's SMs from torch.

Without the profiler (NCCL before 2.27, or ``NCCL_PROFILER_PLUGIN`` set to something else)
events carry only host time around the enqueue, which is no collective's duration: then no
time arrives and trials fail after ``max_wait`` boundaries (the job goes on with NCCL's default).
"""

from __future__ import annotations

import os
from typing import Any

from live.errors import LiveError
from live.observe import CommView, Views, key_of, task_of
from live.schedule import TaskKey
from traces.task import GROUP_SHAPE, Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.process_knobs import NCCL_DEFAULT_BUFFSIZE, NCCL_STEPS
from tuner.rules import CommFacts

__all__ = ["NcclObserver", "NcclSource", "default_chunk"]

_RING_STEPS_OPS = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER)
MAX_EVENTS = 1 << 16
"""Timed events kept for the leader to match (older ones are dropped: their trials took others)."""
_BUFFSIZE_ENV = {Proto.SIMPLE: "NCCL_BUFFSIZE", Proto.LL: "NCCL_LL_BUFFSIZE", Proto.LL128: "NCCL_LL128_BUFFSIZE"}


def default_chunk(op: Op, algo: Algo, proto: Proto, env: dict[str, str] | os._Environ = os.environ) -> int:
    """NCCL's chunk for a call from its buffer size (``tuner.process_knobs``' table, before the
    special cases for small messages).

    >>> default_chunk(Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, {})
    2097152
    >>> default_chunk(Op.ALLREDUCE, Algo.RING, Proto.LL128, {})
    576000
    """
    buffsize = int(env.get(_BUFFSIZE_ENV[proto]) or NCCL_DEFAULT_BUFFSIZE[proto])
    if proto is Proto.SIMPLE:
        return buffsize // NCCL_STEPS * (4 if algo is Algo.RING and op in _RING_STEPS_OPS else 1)
    if proto is Proto.LL:
        return buffsize // NCCL_STEPS // 2
    return buffsize // NCCL_STEPS // 16 * 15


class NcclSource:
    """Times, facts and NCCL's own choices of a real NCCL job (see the module docstring)."""

    hardware = ""
    """No identity of its own: the job's comes from the plan or the GPU (``live.hardware``)."""

    def __init__(self, plugin: Any, nccl_version: tuple[int, int, int], *, sm_count: int, sm_version: int):
        self.plugin = plugin
        self.nccl_version = tuple(nccl_version)
        self.sm_count = sm_count
        self.sm_version = sm_version
        """The GPU's SMs and compute capability × 10 (``torch.cuda.get_device_properties``)."""
        self._events: dict[tuple, Any] = {}
        self._first: dict[TaskKey, tuple[Any, Any]] = {}
        """Per key: its first decision without a rule, and that call's event once it came."""
        self._available: dict[TaskKey, frozenset] = {}
        self._channels: dict[int, int] = {}
        self._by_task: dict[Task, TaskKey] = {}

    def note(self, decisions: list[Any]) -> None:
        """Take in the decisions of a boundary (NCCL's choices where no rule applied, its tables)."""
        for d in decisions:
            key = key_of(d)
            if key not in self._available:
                self._available[key] = d.available
            if d.version == 0 and key not in self._first:
                self._first[key] = (d, None)
        self._drain()

    def bind(self, task: Task, key: TaskKey) -> None:
        """``task`` is the task of ``key`` (the observer names it)."""
        self._by_task.setdefault(task, key)

    def ready(self, task: Task) -> bool:
        """NCCL's own config of ``task`` is known: a call no rule touched has its event."""
        first = self._first.get(self._by_task.get(task))
        return first is not None and first[1] is not None

    def dtype(self, key: TaskKey) -> str | None:
        first = self._first.get(key)
        return first[1].dtype if first is not None and first[1] is not None else None

    def _drain(self) -> None:
        for e in self.plugin.drain_events():
            if e.op is None:
                continue
            ident = (e.comm, e.op, e.nbytes, e.occurrence)
            self._channels[e.comm] = max(self._channels.get(e.comm, 0), e.nchannels)
            first = self._first.get(TaskKey(e.comm, e.op, e.nbytes))
            if first is not None and first[1] is None and first[0].occurrence == e.occurrence:
                self._first[TaskKey(e.comm, e.op, e.nbytes)] = (first[0], e)
            if e.gpu_timer:
                self._events[ident] = e
        while len(self._events) > MAX_EVENTS:
            del self._events[next(iter(self._events))]

    def time_us(self, task: Task, config: Config, call: Any) -> float | None:
        self._drain()
        event = self._events.pop((call.comm, call.op, call.nbytes, call.occurrence), None)
        return None if event is None else event.duration_ns / 1e3

    def facts(self, task: Task) -> CommFacts:
        key = self._key(task)
        offered = self._available.get(key, frozenset())
        nnodes = int(GROUP_SHAPE.match(task.group)[2])
        return CommFacts(nranks=task.nranks, nnodes=nnodes, sm_count=self.sm_count, sm_version=self.sm_version,
                         nccl_version=self.nccl_version,
                         nvls=any(a in (Algo.NVLS, Algo.NVLS_TREE) for a, _ in offered),
                         collnet=any(a in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) for a, _ in offered),
                         pat=any(a is Algo.PAT for a, _ in offered), ll128=any(p is Proto.LL128 for _, p in offered),
                         channel_cap=self._channels.get(key.comm) or None)

    def default_config(self, task: Task) -> Config:
        key = self._key(task)
        decision, event = self._first.get(key, (None, None))
        if event is None:
            raise LiveError(f"{task.op} {task.nbytes} B: no call of NCCL's own config has been timed yet")
        algo, proto = decision.algo, decision.proto
        return Config(algo, proto, Transport.P2P, max(event.nchannels, 1), max(event.nwarps, 1) * 32,
                      default_chunk(task.op, algo, proto))

    def _key(self, task: Task) -> TaskKey:
        if task not in self._by_task:
            raise LiveError(f"{task.op} {task.nbytes} B on {task.nranks} ranks: no call of it was seen")
        return self._by_task[task]


class NcclObserver:
    """Drains the decisions NCCL's calls left in the plugin (see the module docstring)."""

    def __init__(self, plugin: Any, source: NcclSource, *, say: Any):
        self.plugin = plugin
        self.source = source
        self.say = say
        self.views = Views()

    def quiet(self) -> bool:
        """No communicator appeared since the last poll (a converged job need not drain the log)."""
        return all(info.comm in self.views.by_comm or not info.comm or info.nranks < 2 or info.rank < 0
                   for info in self.plugin.comms())

    def poll(self) -> list[Any]:
        for info in self.plugin.comms():
            if info.comm and info.nranks > 1 and info.comm not in self.views.by_comm:
                if info.rank < 0:
                    self.say(f"communicator {info.comm:#x}: the plugin does not know this rank in it (no profiler "
                             "init); it is not tuned")
                    continue
                self.views.add(info.comm, nranks=info.nranks, rank=info.rank, nnodes=max(info.nnodes, 1))
        decisions = [d for d in self.plugin.drain_decisions() if d.op is not None and d.comm in self.views.by_comm]
        self.source.note(decisions)
        for key in {key_of(d) for d in decisions}:
            self.source.bind(self.task(key), key)
        return decisions

    def task(self, key: TaskKey) -> Task:
        view: CommView = self.views.by_comm[key.comm]
        return task_of(key, view, self.source.dtype(key) or "uint8")
