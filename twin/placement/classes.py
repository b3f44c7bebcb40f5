"""Placement classes: ranks whose calls take other paths than the rank that stands for them.

A trace of one rank per role replays the calls of the ranks it leaves out as *shadows* of its
representative's calls (``twin.replay``).  Where a shadow ends unlike its call, the ranks of that
shifted group reach the network otherwise (on a DGX A100 node with two NICs, GPU 0 sits beside
its NIC, GPU 2 crosses a CPU to it): they are a placement class of their own, and the replay runs
one of them as a rank of the trace.  ``with_ranks`` adds such ranks: each runs the events of the
rank it copies, on the shifted copies of that rank's groups (``translations``), so its calls meet
the calls of the ranks it stands beside.

>>> from traces.schema import CollectiveEvent, ProcessGroup, RankTrace, Trace
>>> from traces.task import Op
>>> trace = Trace(4, (ProcessGroup("dp:0", (0, 2)),), (RankTrace(0, (CollectiveEvent(0, Op.ALLREDUCE, 64, "dp:0"),)),))
>>> added = with_ranks(trace, {1: 0})
>>> [r.rank for r in added.ranks], added.group(added.ranks[1].events[0].group).ranks
([0, 1], (1, 3))
"""

from __future__ import annotations

from dataclasses import replace

from traces.schema import CollectiveEvent, ProcessGroup, Trace
from traces.task import Op
from twin.placement.trace import COPIED_GROUPS, translations

__all__ = ["with_ranks"]


def _shifted(members: tuple[int, ...], world: int, to: int) -> tuple[int, ...] | None:
    """The copy of ``members`` that holds ``to`` (itself, if ``to`` is a member): the copies tile
    the world (``translations``), so there is one, or none when the group does not tile it."""
    if to in members:
        return members
    return next((copy for copy in translations(members, world) if to in copy), None)


def with_ranks(trace: Trace, added: dict[int, int]) -> Trace:
    """``trace`` with each rank ``r`` of ``added`` (``r: p``, ``r`` absent, ``p`` in the trace)
    running ``p``'s events on the copies of ``p``'s groups and pipeline pairs that hold ``r``.
    A rank whose calls have no such copy (a group that does not tile the world) is left out."""
    groups = {g.ranks: g for g in trace.groups}
    by_id = {g.id: g for g in trace.groups}
    copied = dict(trace.metadata.get(COPIED_GROUPS, {}))
    source = {r.rank: r for r in trace.ranks}
    ranks = list(trace.ranks)
    for rank, of in added.items():
        events = []
        for event in source[of].events:
            if isinstance(event, CollectiveEvent):
                event = _copy_event(event, trace.world_size, of, rank, groups, by_id, copied)
                if event is None:
                    break
            events.append(event)
        else:
            ranks.append(replace(source[of], rank=rank, events=tuple(events), node=None))
    old = {g.id for g in trace.groups}
    new = tuple(g for g in groups.values() if g.id not in old)
    return replace(trace, groups=trace.groups + new, ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
                   metadata={**trace.metadata, COPIED_GROUPS: copied} if copied else trace.metadata)


def _copy_event(event: CollectiveEvent, world: int, of: int, rank: int, groups: dict, by_id: dict, copied: dict
                ) -> CollectiveEvent | None:
    """``event`` of rank ``of`` as rank ``rank`` makes it: on the copy of its group (new groups go
    into ``groups``, ``by_id`` and, with the group they copy, ``copied``); None if it has none."""
    group = by_id[event.group]
    members = _shifted(group.ranks, world, rank)
    if members is None:
        return None
    if members not in groups:
        groups[members] = ProcessGroup(f"{group.id}@{rank}", members, group.comm, group.name)
        by_id[groups[members].id] = groups[members]
        copied[groups[members].id] = copied.get(group.id, group.id)
    changes: dict = {"group": groups[members].id}
    if event.root is not None:
        changes["root"] = members[group.ranks.index(event.root)]
    if event.op is Op.SENDRECV:
        pair = _shifted((min(of, event.peer), max(of, event.peer)), world, rank)
        if pair is None:
            return None
        changes["peer"] = pair[1] if pair[0] == rank else pair[0]
    return replace(event, **changes)
