"""Merge per-rank imports (one file per rank) into one validated Trace."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from traces.errors import TraceError
from traces.schema import ProcessGroup, RankTrace, Trace

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
    trace = Trace(
        world_size=first.world_size,
        groups=tuple(group for _, group in groups.values()),
        ranks=tuple(by_rank[rank].trace for rank in sorted(by_rank)),
        source=source,
        metadata=metadata,
    )
    try:
        trace.validate()
    except TraceError as err:
        where = by_rank[err.rank].path if err.rank in by_rank else ", ".join(p.path for p in by_rank.values())
        raise TraceError(err.problem, where, rank=err.rank, event=err.event) from None
    return trace
