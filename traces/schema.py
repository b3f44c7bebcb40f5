"""The ccltwin trace: who talks to whom, in what order, and what runs in between.

A trace holds the process groups of a job and, per rank, the ordered stream of events that
rank issued: collectives and compute phases. Order and overlap follow two rules, the same
that CUDA streams obey:

1. events on the same ``(rank, stream)`` run one after another, in list order;
2. an event also waits for every event named in its ``after`` list (ids of earlier events
   of the same rank), e.g. a gradient all-reduce after the backward kernel that produced
   the bucket, or the optimizer step after that all-reduce.

Collectives also synchronise across ranks: the k-th collective of a group on each member
rank is the same call (NCCL requires every rank to issue a communicator's collectives in
the same order), so all members must agree on its op, size and dtype. Send/receive pairs
(``Op.SENDRECV`` with a ``peer``) are matched per direction as NCCL matches them: the k-th
send from A to B is the k-th receive on B from A (per pair in order where the trace gives no
``direction``). The file format is in
docs/trace-format.md; ``traces.trace_file`` reads and writes it.
"""

from __future__ import annotations

import functools
import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from itertools import count
from operator import attrgetter
from typing import Any

from traces.errors import TraceError
from traces.memo import per_trace
from traces.task import DTYPE_BYTES, Op, Task

__all__ = ["DIRECTIONS", "MAX_WORLD_SIZE", "CollectiveEvent", "ComputeEvent", "Event", "ProcessGroup", "RankTrace",
           "Signatures", "Trace", "event_signatures"]


MAX_WORLD_SIZE = 1 << 20
"""More ranks than any job has; a larger world size in a file is taken as corrupt."""


@dataclass(frozen=True)
class ProcessGroup:
    """A communicator: its global ranks in group-rank order.

    ``comm`` identifies the communicator where the source says (NCCL's comm hash, a
    process-group name); ``name`` says what the group is for (``"tp"``, ``"default_pg"``).
    """

    id: str
    ranks: tuple[int, ...]
    comm: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class CollectiveEvent:
    """One collective call as one rank issued it.

    ``nbytes`` follows nccl-tests (see ``traces.task``), ``None`` when the source did not record
    it (such calls replay with their measured times and are left out of ``Trace.tasks``);
    ``root`` is the global root rank of
    Broadcast/Reduce, ``peer`` the other global rank of a SendRecv and ``direction`` whether
    this rank sends to it or receives from it (``"send"``/``"recv"``; ``None`` when the source
    does not say). Times are µs on this rank's clock, when measured; ``duration_us`` is a
    measured duration where the source has one but no exact start and end (flight recorder).
    """

    id: int
    op: Op
    nbytes: int | None
    group: str
    dtype: str = "float32"
    stream: str = "nccl"
    iteration: int = 0
    start_us: float | None = None
    end_us: float | None = None
    after: tuple[int, ...] = ()
    name: str | None = None
    root: int | None = None
    peer: int | None = None
    duration_us: float | None = None
    direction: str | None = None


DIRECTIONS = ("send", "recv")
"""What a SendRecv's ``direction`` may name."""


@dataclass(frozen=True)
class ComputeEvent:
    """A compute phase: a kernel, an operator or a whole layer.

    ``duration_us`` is what it took where it was measured; ``flops`` and ``mem_bytes``
    (bytes read and written in device memory) let the twin time it on another GPU.
    ``category`` and ``shape`` say what the work is, so the twin can time it from its shape
    (``COMPUTE_CATEGORIES``): ``"gemm"`` (shape ``(m, n, k)`` or ``(batch, m, n, k)``),
    ``"attention"`` (a fused attention kernel; shape ``(batch, heads, seq_q, seq_kv, head_dim)``),
    ``"attention-unfused"`` (the same shape, as matmul + softmax + matmul),
    ``"attention-fused-softmax"`` (the same shape, as Megatron-LM's pre-FlashAttention kernels:
    ``baddbmm``, the fused causal scale-mask-softmax, attention dropout, ``bmm``), ``"memory"``
    (element-wise, norm, softmax, dropout: bound by ``mem_bytes``), ``"optimizer"`` (the
    optimizer step over ``mem_bytes``) and ``"host"`` (framework time on the CPU, no GPU work).
    ``kernels`` is how many GPU kernels the phase launches (each pays a launch and a minimum
    duration); ``host_us`` the host-side framework time spent issuing it, when known.
    """

    id: int
    name: str
    stream: str = "compute"
    iteration: int = 0
    duration_us: float | None = None
    flops: float | None = None
    mem_bytes: int | None = None
    start_us: float | None = None
    end_us: float | None = None
    after: tuple[int, ...] = ()
    category: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    kernels: int = 1
    host_us: float | None = None


COMPUTE_CATEGORIES = ("gemm", "attention", "attention-unfused", "attention-fused-softmax", "memory", "optimizer",
                      "host")
"""What a :class:`ComputeEvent`'s ``category`` may name."""

Event = CollectiveEvent | ComputeEvent


@dataclass(frozen=True)
class RankTrace:
    """The events one rank issued, in issue order; ``node`` names its host when known."""

    rank: int
    events: tuple[Event, ...]
    node: str | None = None


@dataclass(frozen=True)
class Trace:
    """A job's process groups and the event streams of some or all of its ranks."""

    world_size: int
    groups: tuple[ProcessGroup, ...]
    ranks: tuple[RankTrace, ...]
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    def group(self, group_id: str) -> ProcessGroup:
        for group in self.groups:
            if group.id == group_id:
                return group
        raise KeyError(group_id)

    @functools.cached_property
    def iterations(self) -> int:
        """How many training iterations the trace covers (distinct iteration indices, at least 1);
        counted once per trace (it is immutable; a breakdown and a report each ask)."""
        seen = {event.iteration for rank in self.ranks for event in rank.events}
        return max(len(seen), 1)

    def collectives(self) -> Iterator[tuple[int, CollectiveEvent]]:
        """(rank, event) for every collective of every rank, in rank then issue order."""
        for rank in self.ranks:
            for event in rank.events:
                if isinstance(event, CollectiveEvent):
                    yield rank.rank, event

    def shape(self, ranks: tuple[int, ...] | list[int]) -> str | None:
        """``"8x2"``: ranks per node × nodes, when every rank's node is known (``"3+5"`` if uneven)."""
        nodes = {rank.rank: rank.node for rank in self.ranks}
        if any(nodes.get(rank) is None for rank in ranks):
            return None
        per_node = Counter(nodes[rank] for rank in ranks)
        counts = sorted(per_node.values(), reverse=True)
        if len(set(counts)) == 1:
            return f"{counts[0]}x{len(counts)}"
        return "+".join(map(str, counts))

    def tasks(self) -> dict[Task, float]:
        """Distinct tasks and how often each runs per iteration.

        A group collective counts once (on the group's lowest rank in the trace), a SendRecv
        once per pair; calls of unknown size are left out (see ``unsized``). ``Task.group`` is
        the group's shape (``"8x1"``) when the nodes of its ranks are known, else the group id.
        """
        present = {rank.rank for rank in self.ranks}
        counted_on = {g.id: min(present.intersection(g.ranks), default=None) for g in self.groups}
        counts: Counter[Task] = Counter()
        for rank, event in self.collectives():
            if event.nbytes is None:
                continue
            if event.op is Op.SENDRECV:
                if event.peer is None or (event.peer in present and event.peer < rank):
                    continue
                members: tuple[int, ...] = (rank, event.peer)
            elif rank == counted_on[event.group]:
                members = self.group(event.group).ranks
            else:
                continue
            shape = self.shape(members) or event.group
            counts[Task(event.op, event.nbytes, len(members), event.dtype, shape)] += 1
        return {task: count / self.iterations for task, count in counts.items()}

    def unsized(self) -> int:
        """How many collective calls (counted as in ``tasks``, in all iterations) have no recorded size."""
        present = {rank.rank for rank in self.ranks}
        counted_on = {g.id: min(present.intersection(g.ranks), default=None) for g in self.groups}
        return sum(
            1
            for rank, event in self.collectives()
            if event.nbytes is None and rank == counted_on[event.group]
        )

    def validate(self, path: str | None = None) -> None:
        """Raise ``TraceError`` (naming ``path``, the rank and the event) if the trace is inconsistent."""
        _validate(self, path)


# ---- validation --------------------------------------------------------------------------


def _check(condition: bool, problem: str | Callable[[], str], path: str | None, rank: int | None = None,
           event=None) -> None:
    """Raise ``TraceError`` unless ``condition``: ``problem`` is the message, or a function making it
    (called only where the check fails)."""
    if not condition:
        raise TraceError(problem if isinstance(problem, str) else problem(), path, rank=rank, event=event)


def _validate(trace: Trace, path: str | None) -> None:
    _check(
        1 <= trace.world_size <= MAX_WORLD_SIZE,
        f"world_size must be 1 to {MAX_WORLD_SIZE}, got {trace.world_size}",
        path,
    )
    groups = {}
    for group in trace.groups:
        where = f"group {group.id!r}"
        _check(group.id not in groups, f"{where} is defined twice", path)
        _check(len(group.ranks) >= 1, f"{where} has no ranks", path)
        _check(len(set(group.ranks)) == len(group.ranks), f"{where} lists a rank twice", path)
        outside = [r for r in group.ranks if not 0 <= r < trace.world_size]
        _check(not outside, f"{where} has ranks {outside} outside world_size {trace.world_size}", path)
        groups[group.id] = group
    seen_ranks: set[int] = set()
    for rank, signature in zip(trace.ranks, event_signatures(trace), strict=True):
        _check(0 <= rank.rank < trace.world_size, f"outside world_size {trace.world_size}", path, rank.rank)
        _check(rank.rank not in seen_ranks, "listed twice", path, rank.rank)
        seen_ranks.add(rank.rank)
        _validate_events(rank, signature, groups, path)
    _validate_agreement(trace, path)


def _finite(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)


_CONTENT = {cls: attrgetter(*(f.name for f in fields(cls) if f.name not in ("id", "after")))
            for cls in (CollectiveEvent, ComputeEvent)}


def _content(event) -> object:
    """Every field of an event but ``id`` and ``after``, with its class and the type of its op
    (a check tests it); an object equal to no other for an event of another class."""
    getter = _CONTENT.get(event.__class__)
    if getter is None:
        return object()
    return event.__class__, type(getattr(event, "op", None)), getter(event)


class Signatures:
    """Numbers events by what they are, all but ``id`` and ``after``: equal numbers for equal events
    (``event_signatures``; ``traces.trace_file`` numbers a file's events as it reads them)."""

    def __init__(self) -> None:
        self.interned: dict = {}
        self.numbers = count()

    def of(self, event) -> int:
        """The number of one event (a fresh one when a field cannot be hashed: a list for a tuple)."""
        try:
            return self.interned.setdefault(_content(event), next(self.numbers))
        except TypeError:
            return next(self.numbers)

    def all(self, events) -> array:
        """The numbers of a rank's events."""
        try:
            return array("q", map(self.interned.setdefault, map(_content, events), self.numbers))
        except TypeError:
            return array("q", map(self.of, events))


@per_trace
def event_signatures(trace: Trace) -> tuple[array, ...]:
    """Per rank of the trace (in its order), one number per event, equal for events of the rank
    that are equal but for their ``id`` and ``after`` (``Signatures``): a pipeline's thousand
    micro-batches are a few hundred distinct events.  Worked out once per trace (validation, the
    replay's steady state and the count of distinct calls share it).

    >>> f, b = ComputeEvent(0, "f"), ComputeEvent(1, "b", after=(0,))
    >>> t = Trace(1, (), (RankTrace(0, (f, b, ComputeEvent(2, "f"), ComputeEvent(3, "b", after=(2,)))),))
    >>> event_signatures(t)[0].tolist()
    [0, 1, 0, 1]
    """
    signatures = Signatures()
    return tuple(signatures.all(rank.events) for rank in trace.ranks)


def _validate_events(rank: RankTrace, signature: array, groups: dict[str, ProcessGroup], path: str | None) -> None:
    """Each event's id and dependencies, and its fields: an event equal to one already checked on
    this rank but for its id and dependencies (``event_signatures``) is not checked again."""
    ids: set[int] = set()
    checked: set[int] = set()
    for event, same in zip(rank.events, signature, strict=True):
        if event.id in ids or not ids.issuperset(event.after):
            _check_order(event, ids, rank.rank, path)
        ids.add(event.id)
        if same not in checked:
            _check_fields(event, rank.rank, groups, path)
            checked.add(same)


def _check_order(event, ids: set[int], rank: int, path: str | None) -> None:
    """An event's id is new on its rank and its ``after`` names earlier events of the rank."""
    _check(event.id not in ids, "id used twice", path, rank, event.id)
    missing = [dep for dep in event.after if dep not in ids]
    _check(not missing, f"'after' names {missing}, which are not earlier events of this rank", path, rank, event.id)


def _check_fields(event, rank: int, groups: dict[str, ProcessGroup], path: str | None) -> None:
    """One event's fields, and its group and peer on ``rank``."""

    def check(condition: bool, problem: str | Callable[[], str]) -> None:
        _check(condition, problem, path, rank, event.id)

    check(event.iteration >= 0, lambda: f"negative iteration {event.iteration}")
    check(bool(event.stream), "empty stream name")
    check(_finite(event.start_us) and _finite(event.end_us), "times must be finite and non-negative")
    if event.start_us is not None and event.end_us is not None:
        check(event.start_us <= event.end_us, lambda: f"ends ({event.end_us}) before it starts ({event.start_us})")
    check(_finite(event.duration_us), "duration must be finite and >= 0")
    if isinstance(event, ComputeEvent):
        check(_finite(event.flops), "flops must be finite and >= 0")
        check(event.mem_bytes is None or event.mem_bytes >= 0, "mem_bytes must be >= 0")
        return
    check(isinstance(event.op, Op), lambda: f"unknown op {event.op!r}")
    check(event.nbytes is None or event.nbytes >= 0, lambda: f"negative nbytes {event.nbytes}")
    check(event.dtype in DTYPE_BYTES,
          lambda: f"unknown dtype {event.dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    group = groups.get(event.group)
    check(group is not None, lambda: f"unknown group {event.group!r}")
    check(rank in group.ranks, lambda: f"rank {rank} is not a member of group {event.group!r}")
    if event.op is Op.SENDRECV:
        check(event.peer in group.ranks and event.peer != rank,
              lambda: f"sendrecv needs a peer in group {event.group!r} other than itself, got {event.peer}")
        check(event.direction is None or event.direction in DIRECTIONS,
              lambda: f"direction must be one of {', '.join(DIRECTIONS)}, got {event.direction!r}")
    else:
        check(event.peer is None, "only sendrecv has a peer")
        check(event.direction is None, "only sendrecv has a direction")
    check(event.root is None or event.root in group.ranks, lambda: f"root {event.root} is not in group {event.group!r}")


_AGREED = attrgetter("op", "nbytes", "dtype")
"""What the members of a group agree on for each of its calls."""


def _validate_agreement(trace: Trace, path: str | None) -> None:
    """Every member rank in the trace issues the same collectives on a group, in the same order."""
    sequences: dict[str, dict[int, list[CollectiveEvent]]] = defaultdict(lambda: defaultdict(list))
    for rank, event in trace.collectives():
        if event.op is not Op.SENDRECV:
            sequences[event.group][rank].append(event)
    present = {rank.rank for rank in trace.ranks}
    for group_id, by_rank in sequences.items():
        first = min(by_rank)
        reference = by_rank[first]
        agreed = list(map(_AGREED, reference))
        members = sorted(present.intersection(trace.group(group_id).ranks))
        for rank, events in ((rank, by_rank.get(rank, [])) for rank in members):
            n = min(len(events), len(reference))
            if list(map(_AGREED, events[:n])) != agreed[:n]:
                _disagreement(group_id, first, reference, rank, events, path)
            _check(
                len(events) == len(reference),
                f"issues {len(events)} collectives on group {group_id!r}, "
                f"rank {first} issues {len(reference)}",
                path,
                rank,
            )


def _disagreement(group_id: str, first: int, reference: list[CollectiveEvent], rank: int,
                  events: list[CollectiveEvent], path: str | None) -> None:
    """Raise for the first call of ``group_id`` on which ``rank`` disagrees with rank ``first``."""
    for index, (mine, theirs) in enumerate(zip(events, reference, strict=False)):
        _check(
            _AGREED(mine) == _AGREED(theirs),
            f"collective #{index} on group {group_id!r} is {_describe(mine)} here but "
            f"{_describe(theirs)} on rank {first} (event {theirs.id})",
            path,
            rank,
            mine.id,
        )


def _describe(event: CollectiveEvent) -> str:
    size = "unknown size" if event.nbytes is None else f"{event.nbytes} B"
    return f"{event.op.value} of {size} {event.dtype}"
