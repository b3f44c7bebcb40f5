"""Merge per-rank imports (one file per rank) into one validated Trace.

Each rank keeps its own clock: times are not shifted, so the skew between ranks (who reached a
collective first, who waited) stays in the trace.  An all-to-allv sends different amounts from
each rank, so the ranks of one call disagree on its size: the call takes the largest (the rank
that sets its time), and ``metadata["alltoallv"]`` keeps what each rank recorded.

Every timed collective passes ``traces.plausibility.implausible_call`` (size, time > 0, busbw
within what links carry): the impossible is a ``TraceError`` naming the file, rank and event; a
call timed at exactly 0 µs (a clock that did not tick) a warning, and it keeps no time.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from traces.errors import CcltwinWarning, TraceError
from traces.plausibility import implausible_call
from traces.schema import CollectiveEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op

__all__ = ["RankPart", "merge_ranks"]


@dataclass(frozen=True)
class RankPart:
    """What one rank's file yields: the rank, the job's world size, its events and the groups it saw."""

    path: str
    world_size: int
    trace: RankTrace
    groups: tuple[ProcessGroup, ...]


def merge_ranks(parts: Iterable[RankPart], source: str, metadata: dict[str, Any]) -> Trace:
    """One Trace from per-rank parts; ``TraceError`` names the file whose rank, group or world disagrees,
    or the files when none of them holds a collective (an empty trace is no workload)."""
    by_rank: dict[int, RankPart] = {}
    groups: dict[str, tuple[str, ProcessGroup]] = {}
    first: RankPart | None = None
    for part in parts:
        first = first or part
        rank = part.trace.rank
        if rank in by_rank:
            raise TraceError(f"rank {rank} is also in {by_rank[rank].path}", part.path)
        if part.world_size != first.world_size:
            raise TraceError(
                f"world size {part.world_size} here but {first.world_size} in {first.path}", part.path
            )
        by_rank[rank] = part
        for group in part.groups:
            path, known = groups.setdefault(group.id, (part.path, group))
            if known.ranks != group.ranks:
                raise TraceError(
                    f"group {group.id!r} has ranks {list(group.ranks)} here "
                    f"but {list(known.ranks)} in {path}",
                    part.path,
                )
    if first is None:
        raise TraceError(f"no {source} files given")
    if not any(part.trace.events for part in by_rank.values()):
        where = ", ".join(part.path for part in by_rank.values())
        raise TraceError(f"no collective in the {source} file(s): nothing to import (recorded without NCCL "
                         "communication, or cut before the first one?)", where)
    sizes = {group_id: len(group.ranks) for group_id, (_, group) in groups.items()}
    checked = [_plausible(by_rank[rank], sizes) for rank in sorted(by_rank)]
    ranks, uneven = _even_alltoalls(checked)
    if uneven:
        metadata = {**metadata, "alltoallv": uneven}
    trace = Trace(
        world_size=first.world_size,
        groups=tuple(group for _, group in groups.values()),
        ranks=tuple(ranks),
        source=source,
        metadata=metadata,
    )
    try:
        trace.validate()
    except TraceError as err:
        where = by_rank[err.rank].path if err.rank in by_rank else ", ".join(p.path for p in by_rank.values())
        raise TraceError(err.problem, where, rank=err.rank, event=err.event) from None
    return trace


def _even_alltoalls(ranks: list[RankTrace]) -> tuple[list[RankTrace], list[dict[str, Any]]]:
    """The ranks with each all-to-all call sized as its largest rank's, and the calls whose ranks differed
    (group, call index on the group, bytes per rank)."""
    calls: dict[tuple[str, int], dict[int, CollectiveEvent]] = defaultdict(dict)
    for trace in ranks:
        index: dict[str, int] = defaultdict(int)
        for event in trace.events:
            if isinstance(event, CollectiveEvent) and event.op is not Op.SENDRECV:
                if event.op is Op.ALLTOALL:
                    calls[(event.group, index[event.group])][trace.rank] = event
                index[event.group] += 1
    resized: dict[tuple[int, int], int] = {}  # (rank, event id) → bytes
    uneven = []
    for (group, call), events in calls.items():
        sizes = {rank: event.nbytes for rank, event in events.items()}
        if len(set(sizes.values())) > 1 and None not in sizes.values():
            largest = max(sizes.values())
            resized.update({(rank, event.id): largest for rank, event in events.items()})
            uneven.append({"group": group, "call": call, "bytes": {str(r): b for r, b in sorted(sizes.items())}})
    if not resized:
        return ranks, []
    return [
        replace(trace, events=tuple(
            replace(e, nbytes=resized[(trace.rank, e.id)]) if (trace.rank, e.id) in resized else e
            for e in trace.events
        ))
        for trace in ranks
    ], uneven


def _time_of(event: CollectiveEvent) -> float | None:
    if event.duration_us is not None:
        return event.duration_us
    if event.start_us is not None and event.end_us is not None:
        return event.end_us - event.start_us
    return None


def _plausible(part: RankPart, sizes: dict[str, int]) -> RankTrace:
    """``part``'s events, each timed collective checked (see the module docstring)."""
    events = []
    for event in part.trace.events:
        time = _time_of(event) if isinstance(event, CollectiveEvent) and event.nbytes is not None else None
        if time == 0.0:
            warnings.warn(CcltwinWarning(f"{part.path}, rank {part.trace.rank}, event {event.id} ({event.name}): "
                                         "timed at 0 us; kept without a time"), stacklevel=3)
            event = replace(event, duration_us=None, end_us=event.start_us)
        elif time is not None and (problem := implausible_call(
                event.op, nbytes=event.nbytes, nranks=2 if event.peer is not None else sizes.get(event.group, 1),
                time_us=time)):
            raise TraceError(f"{event.name or event.op.value}: {problem}", part.path, rank=part.trace.rank,
                             event=event.id)
        events.append(event)
    return replace(part.trace, events=tuple(events))
