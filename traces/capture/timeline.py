"""One rank's event stream from what it issued (flight recorder) and what ran when (profiler).

Each flight-recorder entry is one collective the rank issued; it is paired with the work
span that ran it: the next span of the same op and input size (and group, where the span
records one) that started after the entry was created. A group's calls run in issue order
on its backend, so the pairing follows that order; on gloo, whose spans do not name their
group, two groups issuing the same op and size at the same moment can swap durations, never
sizes or groups. An entry without a span (it ran after the profiler stopped) keeps its
place and size, with no times.

The op is the one the job asked for: the ``c10d::`` call that was running when the entry
was created wins over the backend's own name (gloo runs a reduce-scatter as an all-reduce).

Events are listed in issue order: a collective when it was issued, a compute op (a CPU op,
or a GPU kernel) when it was launched. Compute phases are the compute ops of one stream
between two collective issues (and within one iteration), timed by their busy time. A
collective waits (``after``) for the phase that its issue closed on each compute stream,
which is what it was issued after; any other event waits for the latest event of each other
stream that had ended before it started (a phase after the all-reduce it waited for).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from traces.capture.issued import Issued
from traces.capture.profile import Profile, Span
from traces.errors import TraceError
from traces.kineto import message_bytes
from traces.schema import CollectiveEvent, ComputeEvent, Event, ProcessGroup
from traces.task import Op

__all__ = ["Window", "assemble"]

_SLACK_NS = 2_000
"""Clock disagreement tolerated between the flight recorder and the profiler."""


@dataclass(frozen=True, slots=True)
class Window:
    """The recorded stretch of a rank's run: from ``start_ns`` to ``stop_ns``, cut at ``boundaries_ns``.

    Iteration ``i`` runs from boundary ``i - 1`` (or the start) to boundary ``i``. When there are
    boundaries, what runs after the last one belongs to no iteration and is left out.

    >>> window = Window(0, 100, (40, 70))
    >>> [window.iteration(ns) for ns in (0, 39, 40, 69, 70, 100)]
    [0, 0, 1, 1, None, None]
    """

    start_ns: int
    stop_ns: int
    boundaries_ns: tuple[int, ...] = ()

    def iteration(self, ns: int) -> int | None:
        if not self.start_ns <= ns < self.stop_ns:
            return None
        index = bisect.bisect_right(self.boundaries_ns, ns)
        if self.boundaries_ns and index == len(self.boundaries_ns):
            return None
        return index


@dataclass(slots=True)
class _Collective:
    issued: Issued
    op: Op
    iteration: int
    span: Span | None


@dataclass(slots=True)
class _Phase:
    stream: str
    iteration: int
    start_ns: int
    end_ns: int
    busy_ns: int = 0
    ops: int = 0

    def add(self, span: Span) -> None:
        self.start_ns, self.end_ns = min(self.start_ns, span.start_ns), max(self.end_ns, span.end_ns)
        self.busy_ns += span.end_ns - span.start_ns
        self.ops += 1


@dataclass
class _Streams:
    """While events are listed: what each stream last did, for the ``after`` lists."""

    ends: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """stream → sorted (end ns, event id)."""
    last_phase: dict[str, int] = field(default_factory=dict)
    """compute stream → id of its latest phase."""
    waited: dict[tuple[str, str], int] = field(default_factory=dict)
    """(stream, other stream) → newest id of the other that the stream already waits for."""

    def after(self, stream: str, start_ns: int, collective: bool) -> tuple[int, ...]:
        deps = []
        for other, finished in self.ends.items():
            if other == stream:
                continue
            if collective and other in self.last_phase:
                dep = self.last_phase[other]
            else:
                position = bisect.bisect_right(finished, (start_ns, float("inf"))) - 1
                if position < 0:
                    continue
                dep = finished[position][1]
            if dep > self.waited.get((stream, other), -1):
                deps.append(dep)
                self.waited[stream, other] = dep
        return tuple(sorted(deps))

    def done(self, stream: str, end_ns: int | None, event_id: int, phase: bool) -> None:
        self.ends.setdefault(stream, [])
        if end_ns is not None:
            bisect.insort(self.ends[stream], (end_ns, event_id))
        if phase:
            self.last_phase[stream] = event_id


def _called_ops(issued: list[Issued], calls: list[Span], skipped: Counter[str]) -> dict[int, Op]:
    """Index in ``issued`` → the op of the ``c10d::`` call that was running when the call was issued.

    Calls that hold no record are counted in ``skipped`` (gloo records no send/recv).
    """
    starts = [call.start_ns for call in calls]
    held: set[int] = set()
    ops = {}
    for index, entry in enumerate(issued):
        position = bisect.bisect_right(starts, entry.created_ns + _SLACK_NS) - 1
        while position >= 0 and calls[position].start_ns >= entry.created_ns - 10**9:
            call = calls[position]
            if call.end_ns + _SLACK_NS >= entry.created_ns:
                held.add(position)
                if call.op is not None:
                    ops[index] = call.op
                break
            position -= 1
    for position, call in enumerate(calls):
        if position not in held and call.op is not None:
            skipped[f"{call.name} calls their backend did not record"] += 1
    return ops


def _pair(issued: list[Issued], work: list[Span]) -> dict[int, Span]:
    """Index in ``issued`` → the work span that ran it (see the module docstring)."""
    pending: dict[tuple[Op | None, int | None], list[Span]] = defaultdict(list)
    for span in work:
        pending[span.op, span.in_numel].append(span)
    paired = {}
    for position, entry in enumerate(issued):
        candidates = pending.get((entry.op, entry.in_numel), [])
        for index, span in enumerate(candidates):
            if span.start_ns + _SLACK_NS < entry.created_ns or span.group not in (None, entry.group):
                continue
            paired[position] = candidates.pop(index)
            break
    return paired


def _peer(entry: Issued, group: ProcessGroup, rank: int) -> int | None:
    """The global rank at the other end of a send/recv."""
    if entry.peer_in_group is not None:
        other = entry.peer_in_group
    elif entry.p2p_ranks is not None:
        first, second = entry.p2p_ranks
        other = second if first == group.ranks.index(rank) else first
    else:
        return None
    if not 0 <= other < len(group.ranks):
        raise TraceError(f"{entry.name}: peer {other} is not a rank of group {group.id!r}")
    return group.ranks[other]


def assemble(
    issued: list[Issued],
    profile: Profile,
    groups: dict[str, ProcessGroup],
    rank: int,
    window: Window,
    skipped: Counter[str],
) -> list[Event]:
    """Rank ``rank``'s events in order, times in µs since the window's start; see the module docstring.

    ``issued`` holds the calls issued inside ``window``, in issue order; ``groups`` the
    job's process groups by name.
    """
    called = _called_ops(issued, profile.calls, skipped)
    paired = _pair(issued, profile.work)
    items: list[tuple[int, int, _Collective | tuple[Span, int]]] = []
    for index, entry in enumerate(issued):
        iteration = window.iteration(entry.created_ns)
        if iteration is None:
            skipped["collectives after the last iteration boundary"] += 1
            continue
        if entry.group not in groups:
            raise TraceError(
                f"{entry.name} ran on process group {entry.group!r}, which was destroyed before the capture ended"
            )
        op = called.get(index, entry.op)
        items.append((entry.created_ns, 1, _Collective(entry, op, iteration, paired.get(index))))
    for span in profile.compute:
        issued_ns = span.launch_ns or span.start_ns
        iteration = window.iteration(issued_ns)
        if iteration is not None:
            items.append((issued_ns, 0, (span, iteration)))
    items.sort(key=lambda item: (item[0], item[1]))
    return _events(_phases([item for _, _, item in items]), profile.device, groups, rank, window.start_ns)


def _phases(items: list[_Collective | tuple[Span, int]]) -> list[_Collective | _Phase]:
    """Collectives and the compute phases between them, in issue order."""
    out: list[_Collective | _Phase] = []
    open_phases: dict[str, _Phase] = {}
    for item in items:
        if isinstance(item, _Collective):
            out.extend(open_phases.values())
            open_phases.clear()
            out.append(item)
            continue
        span, iteration = item
        phase = open_phases.get(span.stream)
        if phase is not None and phase.iteration != iteration:
            out.append(open_phases.pop(span.stream))
            phase = None
        if phase is None:
            phase = open_phases[span.stream] = _Phase(span.stream, iteration, span.start_ns, span.end_ns)
        phase.add(span)
    out.extend(open_phases.values())
    return out


def _events(
    items: list[_Collective | _Phase], device: str, groups: dict[str, ProcessGroup], rank: int, origin_ns: int
) -> list[Event]:
    events: list[Event] = []
    streams = _Streams()
    unit = "GPU" if device == "cuda" else "CPU"

    def us(ns: int) -> float:
        return (ns - origin_ns) / 1000

    for event_id, item in enumerate(items):
        if isinstance(item, _Phase):
            after = streams.after(item.stream, item.start_ns, collective=False)
            events.append(
                ComputeEvent(
                    event_id,
                    f"{item.ops} {unit} ops",
                    item.stream,
                    item.iteration,
                    item.busy_ns / 1000,
                    start_us=us(item.start_ns),
                    end_us=us(item.end_ns),
                    after=after,
                )
            )
            streams.done(item.stream, item.end_ns, event_id, phase=True)
            continue
        entry, span = item.issued, item.span
        stream = f"{entry.backend}:{entry.group}"
        events.append(
            CollectiveEvent(
                event_id,
                item.op,
                message_bytes(item.op, entry.in_numel, entry.out_numel, entry.dtype),
                entry.group,
                entry.dtype,
                stream,
                item.iteration,
                start_us=us(span.start_ns) if span else None,
                end_us=us(span.end_ns) if span else None,
                after=streams.after(stream, span.start_ns if span else entry.created_ns, collective=True),
                name=entry.name,
                peer=_peer(entry, groups[entry.group], rank),
            )
        )
        streams.done(stream, span.end_ns if span else None, event_id, phase=False)
    return events
