"""The communicators of a trace placed on a cluster: which GPUs, which config, which schedule.

Rank ``r`` of the trace runs on GPU ``r`` of the cluster (node-major, as ``Cluster.gpus``
lists them), so a trace of 16 ranks on a preset of 8-GPU nodes fills two nodes.  A group's
communicator spans its members' GPUs, present in the trace or not.  Each call is timed with
the configuration given for its task, else with what NCCL would choose on that communicator;
schedules are built once per (GPUs, op, size, config), so replays of one trace on one cluster
with different configurations can share a ``Communicators``.  The same placement serves the
ranking engine (``twin.rank``): ``Communicators.task_comms`` gives each task's communicator as a
``CallComm``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

from traces.errors import CcltwinError
from traces.schema import CollectiveEvent, Trace
from traces.task import Op, Task
from tuner.config import Config, Transport
from twin.model.geometry import CommGeometry
from twin.model.schedule import Schedule, Unsupported, build_schedule
from twin.nccl_model import NcclCommInfo, nccl_choice
from twin.nccl_model.search import comm_info
from twin.topology import Cluster, load_cluster


def translations(members: tuple[int, ...], world_size: int) -> list[tuple[int, ...]]:
    """The other groups of the tiling ``members`` belong to, as a parallelism axis repeats.

    A group whose ranks step by ``s`` (``[0..7]``: 1; ``[0, 8, 16, 24]``: 8) is one of a set of
    shifted copies that tile the world: blocks of ``s × len`` ranks, ``s`` groups per block.

    >>> translations((0, 8), 16)
    [(1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15)]
    >>> translations((0, 1, 2, 3), 12)
    [(4, 5, 6, 7), (8, 9, 10, 11)]
    """
    ranks = sorted(members)
    if len(ranks) < 2:
        return []
    step = ranks[1] - ranks[0]
    period = step * len(ranks)
    if any(b - a != step for a, b in pairwise(ranks)) or world_size % period:
        return []
    first = ranks[0]
    if first % period >= step:
        return []
    starts = (block + j for block in range(0, world_size, period) for j in range(step))
    return [tuple(r - first + start for r in members) for start in starts if start != first]


class ReplayError(CcltwinError):
    """The trace cannot be replayed on this cluster (too few GPUs, a group NCCL could not form)."""


def cluster_for(trace: Trace, topology: str, *, nodes: int | None = None, **options):
    """``topology`` (a preset or YAML file) with ``nodes`` nodes, or with as many as the trace's
    world size needs; ``options`` go to ``load_cluster`` (``gpus_per_node``, ``nic_gbps``...)."""
    cluster = load_cluster(topology, nodes=nodes, **options)
    needed = max(1, -(-trace.world_size // cluster.gpus_per_node))
    if nodes is None and cluster.nodes != needed:
        cluster = load_cluster(topology, nodes=needed, **options)
    return cluster


def rank_gpus(trace: Trace, cluster) -> list[str]:
    """GPU of every global rank; raises ``ReplayError`` when the cluster is too small."""
    gpus = cluster.gpus()
    if len(gpus) < trace.world_size:
        per_node = cluster.gpus_per_node
        nodes = -(-trace.world_size // per_node)
        raise ReplayError(f"the trace needs {trace.world_size} GPUs; {cluster.name} has {len(gpus)} "
                          f"({cluster.nodes} node(s) x {per_node}): use at least {nodes} nodes")
    return gpus[:trace.world_size]


def task_of(trace: Trace, rank: int, event: CollectiveEvent) -> Task | None:
    """The tuning key of a call, as ``Trace.tasks`` names it (None when its size is unknown)."""
    if event.nbytes is None:
        return None
    members = members_of(trace, rank, event)
    return Task(event.op, event.nbytes, len(members), event.dtype, trace.shape(members) or event.group)


def members_of(trace: Trace, rank: int, event: CollectiveEvent) -> tuple[int, ...]:
    """Global ranks taking part in a call: the group, or the pair of a SendRecv (lower first)."""
    if event.op is Op.SENDRECV:
        return (min(rank, event.peer), max(rank, event.peer))
    return trace.group(event.group).ranks


def nccl_default(info: NcclCommInfo, task: Task) -> Config:
    """What stock NCCL picks for ``task`` on a communicator whose init found ``info``."""
    choice = nccl_choice(info, task.op, task.nbytes, task.dtype)
    return Config(choice.algo, choice.proto, Transport.P2P, choice.nchannels, choice.nthreads, choice.chunk_bytes)


class Communicator(Protocol):
    """A communicator as the ranking engine (``twin.rank``) reads it; ``twin.predict.Twin`` is one
    (a whole communicator), ``CallComm`` another (the members of one call of a trace's group)."""

    cluster: Cluster
    nccl: NcclCommInfo
    """What NCCL's init finds on the whole communicator."""
    gpus_per_process: int

    def geometry(self, transport: Transport = Transport.P2P) -> CommGeometry:
        """The geometry of the GPUs a call runs on."""


@dataclass(frozen=True)
class Timed:
    """How one call runs: its configuration, its schedule, who chose the configuration."""

    config: Config
    schedule: Schedule
    chosen_by: str
    """``given`` (from the configs passed in), ``nccl`` (NCCL's default), or ``nccl-fallback``
    (the given configuration cannot run on this communicator, so NCCL's default)."""


class Communicators:
    """Every communicator of a trace on a cluster, built as calls first need them."""

    def __init__(self, trace: Trace, cluster, nccl_version: tuple[int, int, int] = (2, 28, 9)):
        self.trace = trace
        self.cluster = cluster
        self.gpus = rank_gpus(trace, cluster)
        self.nccl_version = nccl_version
        self._infos: dict[tuple[str, ...], NcclCommInfo] = {}
        self._geoms: dict[tuple[tuple[str, ...], Transport], CommGeometry] = {}
        self._timed: dict[tuple, Timed] = {}
        self._schedules: dict[tuple, Schedule] = {}
        self._siblings: dict[tuple[int, ...], list[tuple[int, ...]]] = {}

    def member_gpus(self, members: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(self.gpus[r] for r in members)

    def comm_gpus(self, group: str) -> tuple[str, ...]:
        """The GPUs of a group's whole communicator."""
        return self.member_gpus(self.trace.group(group).ranks)

    def info(self, gpus: tuple[str, ...]) -> NcclCommInfo:
        """What NCCL's init finds on a communicator of ``gpus``."""
        if gpus not in self._infos:
            self._infos[gpus] = comm_info(self.cluster, list(gpus), nccl_version=self.nccl_version)
        return self._infos[gpus]

    def geometry(self, gpus: tuple[str, ...], transport: Transport = Transport.P2P) -> CommGeometry:
        key = (gpus, transport)
        if key not in self._geoms:
            try:
                self._geoms[key] = CommGeometry(self.cluster, list(gpus), transport)
            except ValueError as err:
                raise ReplayError(f"a communicator on GPUs {', '.join(gpus)} cannot be placed: {err}") from None
        return self._geoms[key]

    def default_config(self, task: Task, group: str) -> Config:
        """NCCL's choice for ``task`` on ``group``'s communicator."""
        return nccl_default(self.info(self.comm_gpus(group)), task)

    def call_comm(self, group: str, members: tuple[int, ...]) -> CallComm:
        """The communicator a call of ``group`` among ``members`` runs on."""
        return CallComm(self, group, members)

    def task_comms(self) -> dict[Task, CallComm]:
        """The communicator of every sized task's first call (tasks as ``Trace.tasks`` names them)."""
        out: dict[Task, CallComm] = {}
        for rank, event in self.trace.collectives():
            task = task_of(self.trace, rank, event)
            if task is not None and task not in out:
                out[task] = self.call_comm(event.group, members_of(self.trace, rank, event))
        return out

    def schedule(self, members: tuple[int, ...], task: Task, config: Config) -> Schedule:
        """The schedule of ``task`` with ``config`` among ``members`` (raises ``Unsupported``)."""
        key = (members, task.op, task.nbytes, config)
        if key not in self._schedules:
            geom = self.geometry(self.member_gpus(members), config.transport)
            self._schedules[key] = build_schedule(geom, task.op, task.nbytes, config)
        return self._schedules[key]

    def timed(self, task: Task, group: str, members: tuple[int, ...], given: Config | None = None) -> Timed:
        """How ``task`` runs among ``members`` of ``group``: with ``given``, else NCCL's default."""
        key = (task, group, members, given)
        if key not in self._timed:
            self._timed[key] = self._time(task, group, members, given)
        return self._timed[key]

    def _time(self, task: Task, group: str, members: tuple[int, ...], given: Config | None) -> Timed:
        if given is not None:
            try:
                return Timed(given, self.schedule(members, task, given), "given")
            except Unsupported:
                pass
        default = self.default_config(task, group)
        return Timed(default, self.schedule(members, task, default), "nccl" if given is None else "nccl-fallback")

    def absent_siblings(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Shifted copies of ``members`` (``translations``) with no rank in the trace that share a
        node with them: the calls that ranks left out of the trace make at the same time on the
        same NICs (the other data-parallel groups of a node, when one rank per stage is kept)."""
        if members not in self._siblings:
            present = {r.rank for r in self.trace.ranks}
            hosts = {self.cluster.host_of(self.gpus[r]) for r in members}
            self._siblings[members] = [
                copy for copy in translations(members, self.trace.world_size)
                if present.isdisjoint(copy) and not hosts.isdisjoint(self.cluster.host_of(self.gpus[r]) for r in copy)
            ]
        return self._siblings[members]


@dataclass(frozen=True)
class CallComm:
    """The calls of ``group`` among ``members`` (the group, or the pair of a SendRecv) as a
    ``Communicator``: NCCL's view of the group's whole communicator, the members' geometry."""

    comms: Communicators
    group: str
    members: tuple[int, ...]
    gpus_per_process: int = 1

    @property
    def cluster(self) -> Cluster:
        return self.comms.cluster

    @property
    def nccl(self) -> NcclCommInfo:
        return self.comms.info(self.comms.comm_gpus(self.group))

    def geometry(self, transport: Transport = Transport.P2P) -> CommGeometry:
        return self.comms.geometry(self.comms.member_gpus(self.members), transport)


def shaped_tasks(trace: Trace, cluster: Cluster) -> dict[Task, Task]:
    """Every sized task of ``trace`` (as ``Trace.tasks`` names it) with its group written as the
    ``GxN`` shape (G GPUs on each of N nodes, G the most on one node) its communicator takes on
    ``cluster`` when placed as ``Communicators`` places it."""
    out = {}
    for task, comm in Communicators(trace, cluster).task_comms().items():
        per_node = Counter(cluster.host_of(gpu) for gpu in comm.comms.member_gpus(comm.members))
        out[task] = Task(task.op, task.nbytes, task.nranks, task.dtype, f"{max(per_node.values())}x{len(per_node)}")
    return out

