"""Where the ranks of a trace land on a cluster, and which communicator each call uses.

Rank ``r`` of the trace runs on GPU ``r`` of the cluster (node-major, as ``Cluster.gpus`` lists
them), so a trace of 16 ranks on a preset of 8-GPU nodes fills two nodes.  A group's
communicator spans its members' GPUs, present in the trace or not; a SendRecv runs among its
pair with NCCL's view of the group's communicator.  Each call is timed with the configuration
given for its task, else with what NCCL would choose on that communicator; schedules are built
once per (GPUs, op, size, config), so replays of one trace on one cluster with different
configurations can share a ``Placement``.  The ranking engine (``twin.rank``), what-if
(``twin.whatif``), the replay (``twin.replay``) and ``ccltwin tune`` all place a trace so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter

import numpy as np

from traces.memo import per_trace
from traces.schema import CollectiveEvent, Trace, event_signatures
from traces.task import Op, Task
from tuner.config import Config
from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.model.schedule import Schedule, Unsupported
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement.communicator import Communicator, PlacementError
from twin.topology import Cluster, load_cluster

__all__ = ["COPIED_GROUPS", "Placement", "Timed", "cluster_for", "distinct_calls", "members_of", "rank_gpus",
           "shaped_tasks", "task_of", "trace_tasks", "translations"]


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


def cluster_for(trace: Trace, topology: str, *, nodes: int | None = None, **options) -> Cluster:
    """``topology`` (a preset or YAML file) with ``nodes`` nodes, or with as many as the trace's
    world size needs (a job smaller than one node gets that many of its GPUs); ``options`` go to
    ``load_cluster`` (``gpus_per_node``, ``nic_gbps``...)."""
    cluster = load_cluster(topology, nodes=nodes, **options)
    needed = max(1, -(-trace.world_size // cluster.gpus_per_node))
    if nodes is None and cluster.nodes != needed:
        cluster = load_cluster(topology, nodes=needed, **options)
    if nodes is None and options.get("gpus_per_node") is None and trace.world_size < cluster.gpus_per_node:
        cluster = load_cluster(topology, nodes=1, **{**options, "gpus_per_node": trace.world_size})
    return cluster


def rank_gpus(trace: Trace, cluster: Cluster) -> list[str]:
    """GPU of every global rank; raises ``PlacementError`` when the cluster is too small."""
    gpus = cluster.gpus()
    if len(gpus) < trace.world_size:
        per_node = cluster.gpus_per_node
        nodes = -(-trace.world_size // per_node)
        raise PlacementError(f"the trace needs {trace.world_size} GPUs; {cluster.name} has {len(gpus)} "
                             f"({cluster.nodes} node(s) x {per_node}): use at least {nodes} nodes")
    return gpus[:trace.world_size]


def task_of(trace: Trace, rank: int, event: CollectiveEvent) -> Task | None:
    """The tuning key of a call, as ``Trace.tasks`` names it (None when its size is unknown)."""
    if event.nbytes is None:
        return None
    members = members_of(trace, rank, event)
    # A placement class's copy of a group names its task as the group it copies does (``with_ranks``).
    group = trace.metadata.get(COPIED_GROUPS, {}).get(event.group, event.group)
    return Task(event.op, event.nbytes, len(members), event.dtype, trace.shape(members) or group)


_CALL_FIELDS = attrgetter("group", "op", "nbytes", "dtype", "peer")
"""With its rank, what a call's task and communicator follow from."""


@per_trace
def distinct_calls(trace: Trace) -> tuple[tuple[int, CollectiveEvent, int], ...]:
    """(rank, first call, how many) for each distinct call of each rank (same group, op, size,
    dtype and peer: the same task on the same communicator), in rank then issue order of the
    first; worked out once per trace (a pipeline's million calls are a few dozen distinct ones).

    >>> from traces.schema import ProcessGroup, RankTrace
    >>> a = [CollectiveEvent(i, Op.ALLREDUCE, 8 << (i % 2), "g") for i in range(5)]
    >>> t = Trace(1, (ProcessGroup("g", (0,)),), (RankTrace(0, tuple(a)),))
    >>> [(rank, event.id, n) for rank, event, n in distinct_calls(t)]
    [(0, 0, 3), (0, 1, 2)]
    """
    out = []
    for rank, signature in zip(trace.ranks, event_signatures(trace), strict=True):
        _, first, counts = np.unique(np.frombuffer(signature, np.int64), return_index=True, return_counts=True)
        calls: dict[tuple, list] = {}  # a call's fields -> [its first event, how many]
        for i in np.argsort(first, kind="stable").tolist():  # each distinct event, as first issued
            event = rank.events[first[i]]
            if isinstance(event, CollectiveEvent):
                calls.setdefault(_CALL_FIELDS(event), [event, 0])[1] += int(counts[i])
        out += [(rank.rank, event, n) for event, n in calls.values()]
    return tuple(out)


COPIED_GROUPS = "copied_groups"
"""``Trace.metadata`` key: group id -> the id of the group it is a shifted copy of
(``twin.placement.classes.with_ranks``)."""


def members_of(trace: Trace, rank: int, event: CollectiveEvent) -> tuple[int, ...]:
    """Global ranks taking part in a call: the group, or the pair of a SendRecv (lower first)."""
    if event.op is Op.SENDRECV:
        return (min(rank, event.peer), max(rank, event.peer))
    return trace.group(event.group).ranks


@dataclass(frozen=True)
class Timed:
    """How one call runs: its configuration, its schedule, who chose the configuration."""

    config: Config
    schedule: Schedule
    chosen_by: str
    """``given`` (from the configs passed in), ``nccl`` (NCCL's default), or ``nccl-fallback``
    (the given configuration cannot run on this communicator, so NCCL's default)."""


class Placement:
    """The ranks of ``trace`` on ``cluster`` and the communicator of every call, built as calls
    first need them, with the twin's physical constants ``params``."""

    def __init__(self, trace: Trace, cluster: Cluster, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION, *,
                 params: TwinParams = DEFAULT_PARAMS) -> None:
        self.trace = trace
        self.cluster = cluster
        self.gpus = rank_gpus(trace, cluster)
        self.nccl_version = nccl_version
        self.params = params
        self._comms: dict[tuple[str, ...], Communicator] = {}
        self._parts: dict[tuple[tuple[str, ...], tuple[str, ...]], Communicator] = {}
        self._timed: dict[tuple, Timed] = {}
        self._schedules: dict[tuple, Schedule] = {}
        self._siblings: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self._present: set[int] | None = None
        self._hosts: list[int] = []  # of every rank, once siblings are asked for
        self._stands_for: dict[int, int] = {}  # absent rank -> its representative (``_stands_for``)

    def with_trace(self, trace: Trace) -> Placement:
        """This placement for ``trace``, this one's with ranks added (``twin.placement.classes``):
        communicators, schedules and timings are shared (they go by GPUs and groups)."""
        other = Placement(trace, self.cluster, self.nccl_version, params=self.params)
        other._comms, other._parts = self._comms, self._parts
        other._timed, other._schedules = self._timed, self._schedules
        return other

    def member_gpus(self, members: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(self.gpus[r] for r in members)

    def _comm(self, gpus: tuple[str, ...]) -> Communicator:
        if gpus not in self._comms:
            self._comms[gpus] = Communicator(self.cluster, gpus, nccl_version=self.nccl_version, params=self.params)
        return self._comms[gpus]

    def communicator(self, group: str, members: tuple[int, ...] | None = None) -> Communicator:
        """The communicator a call of ``group`` among ``members`` (default: all of them) runs on.

        Groups of the same GPUs share one, whatever their names."""
        ranks = self.trace.group(group).ranks
        return self._among(ranks, ranks if members is None else members)

    def _among(self, ranks: tuple[int, ...], members: tuple[int, ...]) -> Communicator:
        """The communicator of the group of ``ranks``, for a call among ``members`` of it."""
        whole = self._comm(self.member_gpus(ranks))
        gpus = self.member_gpus(members)
        if gpus == whole.gpus:
            return whole
        if (whole.gpus, gpus) not in self._parts:
            self._parts[(whole.gpus, gpus)] = whole.among(gpus)
        return self._parts[(whole.gpus, gpus)]

    def task_communicators(self) -> dict[Task, Communicator]:
        """The communicator of every sized task's first call (tasks as ``Trace.tasks`` names them)."""
        out: dict[Task, Communicator] = {}
        for rank, event, _ in distinct_calls(self.trace):
            task = task_of(self.trace, rank, event)
            if task is not None and task not in out:
                out[task] = self.communicator(event.group, members_of(self.trace, rank, event))
        return out

    def schedule(self, members: tuple[int, ...], task: Task, config: Config) -> Schedule:
        """The schedule of ``task`` with ``config`` among ``members`` (raises ``Unsupported``)."""
        return self._schedule(self._comm(self.member_gpus(members)), task, config)

    def _schedule(self, comm: Communicator, task: Task, config: Config) -> Schedule:
        key = (comm.gpus, task.op, task.nbytes, config)
        if key not in self._schedules:
            self._schedules[key] = comm.schedule(task, config)
        return self._schedules[key]

    def timed(self, task: Task, group: str, members: tuple[int, ...], given: Config | None = None) -> Timed:
        """How ``task`` runs among ``members`` of ``group``: with ``given``, else NCCL's default."""
        key = (task, group, members, given)
        if key not in self._timed:
            self._timed[key] = self._time(task, self.communicator(group, members), given)
        return self._timed[key]

    def _time(self, task: Task, comm: Communicator, given: Config | None) -> Timed:
        if given is not None:
            try:
                return Timed(given, self._schedule(comm, task, given), "given")
            except Unsupported:
                pass
        default = comm.default_config(task)
        return Timed(default, self._schedule(comm, task, default), "nccl" if given is None else "nccl-fallback")

    def copy_timed(self, task: Task, group: str, members: tuple[int, ...], copy: tuple[int, ...],
                   given: Config | None = None) -> Timed:
        """How the shifted copy ``copy`` of a call of ``group`` among ``members`` runs (a shadow:
        ``absent_siblings``): as its absent ranks' own call, on the same shift of the group's
        communicator, with ``given``, else with what NCCL chooses on *that* communicator (which
        need not be what it chooses for ``members``: GPUs that sit otherwise to their NIC may
        take another protocol)."""
        ranks = self.trace.group(group).ranks
        if not set(copy) <= set(ranks):  # a pair of the world's communicator stays on it
            shift = copy[0] - members[0]
            ranks = tuple(r + shift for r in ranks)
            if not all(0 <= r < self.trace.world_size for r in ranks) or any(
                    r + shift != c for r, c in zip(members, copy, strict=True)):
                ranks = copy  # not a shift of the whole group: the copy's own communicator
        key = (task, ranks, copy, given)
        if key not in self._timed:
            self._timed[key] = self._time(task, self._among(ranks, copy), given)
        return self._timed[key]

    def absent_siblings(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Shifted copies of ``members`` (``translations``) with no rank in the trace that share a
        node with them: the calls that ranks left out of the trace make at the same time on the
        same NICs (the other data-parallel groups of a node, when one rank per stage is kept)."""
        if members not in self._siblings:
            if self._present is None:
                self._present = {r.rank for r in self.trace.ranks}
                self._hosts = [self.cluster.host_of(gpu) for gpu in self.gpus]
                self._stands_for = _stands_for(self.trace, self._present)
            host = self._hosts
            hosts = {host[r] for r in members}
            present = [(i, r) for i, r in enumerate(members) if r in self._present]
            self._siblings[members] = [
                copy for copy in translations(members, self.trace.world_size)
                if self._present.isdisjoint(copy) and not hosts.isdisjoint([host[r] for r in copy])
                and all(self._stands_for.get(copy[i], r) == r for i, r in present)
            ]
        return self._siblings[members]


def _stands_for(trace: Trace, present: set[int]) -> dict[int, int]:
    """Absent rank -> the rank in the trace that stands for it: the one present member of a group
    that holds it (a representative's TP or DP group), where the groups name one.

    A shifted copy of a group is a copy of the call only where its ranks stand with the ranks it
    shifts: a data-parallel group's copies on the next TP rank are, those on another pipeline
    stage are the groups of that stage's representative, which run when that stage does.

    >>> from traces.schema import ProcessGroup, RankTrace, Trace
    >>> groups = (ProcessGroup("tp:0", (0, 1)), ProcessGroup("tp:2", (2, 3)), ProcessGroup("pp:0", (0, 2)))
    >>> _stands_for(Trace(4, groups, (RankTrace(0, ()), RankTrace(2, ()))), {0, 2})
    {1: 0, 3: 2}
    """
    out: dict[int, int | None] = {}
    for group in trace.groups:
        mine = [r for r in group.ranks if r in present]
        if len(mine) != 1:
            continue
        for r in group.ranks:
            if r not in present:
                out[r] = mine[0] if out.get(r, mine[0]) == mine[0] else None  # two claims: unknown
    return {r: p for r, p in out.items() if p is not None}


def shaped_tasks(trace: Trace, cluster: Cluster) -> dict[Task, Task]:
    """Every sized task of ``trace`` (as ``Trace.tasks`` names it) with its group written as the
    ``GxN`` shape (G GPUs on each of N nodes, G the most on one node) its communicator takes on
    ``cluster`` when placed as ``Placement`` places it."""
    out = {}
    for task, comm in Placement(trace, cluster).task_communicators().items():
        per_node = Counter(cluster.host_of(gpu) for gpu in comm.gpus)
        out[task] = Task(task.op, task.nbytes, task.nranks, task.dtype, f"{max(per_node.values())}x{len(per_node)}")
    return out


def trace_tasks(trace: Trace, cluster: Cluster) -> list[tuple[Task, Task, float]]:
    """(task as the trace names it, task with a ``GxN`` group shape, calls per iteration).

    Groups are placed on ``cluster`` as ``Placement`` places them (``shaped_tasks``).  Tasks
    that end up with the same shape and size are one task.
    """
    calls = trace.tasks()
    merged: dict[Task, tuple[Task, float]] = {}
    for task, shaped in shaped_tasks(trace, cluster).items():
        if shaped not in merged or calls[task] > merged[shaped][1]:  # groups of one shape run side by side
            merged[shaped] = (task, calls[task])
    return [(named, shaped, n) for shaped, (named, n) in merged.items()]
