"""A pipeline's steady state simulated once, its other periods added (``shorten``, ``extend``).

Picture stage 1 of a 1F1B pipeline over 1,024 micro-batches: after its warm-up it repeats one
forward and one backward, the same events on the same groups with the same sizes, a thousand
times, and after the first few every event starts exactly one period Δ after its twin of the
micro-batch before.  Stepping through every repeat costs the same again each time and predicts
nothing new.  So the replay simulates a shortened trace, the same job with all but ``keep``
repeats of every rank's run removed (``shorten``), checks that the middle of the run is
periodic, and adds the removed repeats' share of every sum (``extend``):

- every event of the ``WINDOW`` blocks either side of a middle block (the first such) starts and
  ends Δ after its twin in the block before, with the same Δ on every rank;
- each rank's compute, communication, exposed communication and host wait within one period
  after the middle block's start equal those within the next period, as do each task's calls
  (count, time, exposed time, time alone) attributed to the middle block and to the next.

Then the removed blocks are inserted after the middle one: every event after it ends
``removed`` × Δ later, each rank gains ``removed`` periods of its times and each task
``removed`` blocks of its calls.  Alone this reproduces the stepped replay to rounding (tested
against it to 1e-9 relative).  A trace whose ranks do not repeat, whose repeats differ (sizes,
groups, measured durations), whose ranks would lose different numbers of calls of a group, or
whose shortened replay does not settle into the period is replayed with more repeats kept, and
in the end whole.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter

import numpy as np

from traces.memo import per_trace
from traces.schema import ComputeEvent, RankTrace, Trace, event_signatures
from traces.task import Task
from twin.placement import members_of, task_of
from twin.replay.result import covered, union
from twin.replay.totals import RankSums, TaskSums, Totals

KEEP = 6
"""Repeats the shortest run keeps in the first shortened replay, and more in each next while it does
not settle (a pipeline's fill takes about one repeat per stage) and ``KEEP / 2`` would still be
removed; else the trace is stepped through whole."""
WINDOW = 2
"""Blocks either side of the middle one that must repeat the period."""
CANDIDATES = 4
"""Periods tried per rank: the commonest distances between like events."""
TOLERANCE = 1e-9
"""Periodicity is checked to this fraction of the replay's length (rounding of event times)."""

@dataclass(frozen=True)
class Run:
    """``repeats`` consecutive blocks of ``period`` events, the first at position ``start``."""

    start: int
    period: int
    repeats: int

    def block(self, position: int) -> int | None:
        """The block of the event at ``position``, or ``None`` outside the run.

        >>> Run(10, 4, 3).block(13), Run(10, 4, 3).block(22), Run(10, 4, 3).block(9)
        (0, None, None)
        """
        j, _ = divmod(position - self.start, self.period)
        return j if position >= self.start and j < self.repeats else None


@dataclass(frozen=True)
class Shortened:
    """A trace with ``removed`` blocks taken out of every rank's run; event ids are positions."""

    trace: Trace
    runs: dict[int, Run]
    """Each rank's run in the shortened trace."""
    removed: int


@dataclass(frozen=True)
class _Rank:
    """A rank's events as arrays: their signatures (``traces.schema.event_signatures``), and their
    dependencies as distances back."""

    signature: np.ndarray
    lengths: np.ndarray
    """How many dependencies each event has."""
    offsets: np.ndarray
    """Where each event's dependencies start in ``back``."""
    back: np.ndarray
    """Every dependency's distance back from its event, event after event."""
    position: dict[int, int] | None
    """Event id -> position, or ``None`` when the ids are the positions."""

    @classmethod
    def of(cls, events, signature) -> _Rank:
        n = len(events)
        afters = list(map(attrgetter("after"), events))
        lengths = np.fromiter(map(len, afters), np.int64, n)
        targets = np.fromiter(chain.from_iterable(afters), np.int64, int(lengths.sum()))
        ids = np.fromiter(map(attrgetter("id"), events), np.int64, n)
        position = None
        if not np.array_equal(ids, np.arange(n)):
            position = {e.id: i for i, e in enumerate(events)}
            targets = np.fromiter(map(position.__getitem__, targets.tolist()), np.int64, len(targets))
        back = np.repeat(np.arange(n), lengths) - targets
        return cls(np.frombuffer(signature, np.int64), lengths, np.cumsum(lengths) - lengths, back, position)

    def deps(self, i: int) -> tuple[int, ...]:
        return tuple(self.back[self.offsets[i]:self.offsets[i] + self.lengths[i]].tolist())

    def same_deps(self, period: int) -> np.ndarray:
        """For each event ``i`` before the last ``period``: whether event ``i + period`` has the same
        dependency distances."""
        n = len(self.lengths)
        same = self.lengths[period:] == self.lengths[:-period]
        owner = np.repeat(np.arange(n), self.lengths)
        flat = np.flatnonzero(owner < n - period)
        flat = flat[same[owner[flat]]]
        i = owner[flat]
        twin = flat - self.offsets[i] + self.offsets[i + period]
        same[i[self.back[flat] != self.back[twin]]] = False
        return same


def find_run(signature, same_deps=None) -> Run | None:
    """The periodic stretch of a rank's events that spans the most events beyond its first block:
    equal ``signature`` (and, if given, ``same_deps(period)`` true) one period apart.

    Candidate periods are the commonest distances between an event and the next four like it.

    >>> find_run([7, 8, 0, 1, 2, 0, 1, 2, 0, 1, 2, 9])
    Run(start=2, period=3, repeats=3)
    >>> find_run([0, 1, 2, 3]) is None
    True
    """
    sig = np.asarray(signature)
    order = np.argsort(sig, kind="stable")  # like events together, each kind in issue order
    gaps = np.concatenate([(order[m:] - order[:-m])[sig[order[m:]] == sig[order[:-m]]] for m in range(1, 5)])
    if not gaps.size:  # the distances to the next four like events: a block may hold an event four times
        return None
    counts = np.bincount(gaps)
    best: Run | None = None
    for period in np.argsort(-counts, kind="stable")[:CANDIDATES]:
        period = int(period)
        if period == 0 or counts[period] == 0:
            continue
        same = sig[period:] == sig[:-period]
        if same_deps is not None:
            same &= same_deps(period)
        edges = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
        starts, ends = edges[::2], edges[1::2]
        if not starts.size:
            continue
        longest = int(np.argmax(ends - starts))
        stretch = int(ends[longest] - starts[longest])
        run = Run(int(starts[longest]), period, stretch // period + 1)
        if run.repeats > 1 and (best is None or (run.repeats - 1) * period > (best.repeats - 1) * best.period):
            best = run
    return best


def shorten(trace: Trace, keep: int, call_keys) -> Shortened | None:
    """``trace`` with the shortest run cut to ``keep`` repeats and every other by as many; ``None``
    when a rank does not repeat, nothing would be removed, the ranks would lose different numbers
    of calls of one group or pair (``call_keys``: the replay's matching of calls), or a dependency
    would change its target.  Worked out once per trace and ``keep`` (the default and tuned
    replays of one evaluation share it)."""
    by_keep = _shortened(trace)
    if keep not in by_keep:
        by_keep[keep] = _shorten(trace, keep, call_keys)
    return by_keep[keep]


@per_trace
def _shortened(trace: Trace) -> dict[int, Shortened | None]:
    """The trace's shortened versions found so far, by ``keep``."""
    return {}


def _shorten(trace: Trace, keep: int, call_keys) -> Shortened | None:
    found = _runs(trace)
    if found is None:
        return None
    shortest = min(run.repeats for _, run in found.values())
    removed = shortest - keep
    if removed < KEEP // 2:  # a failed try costs its replay: try only where it saves
        return None
    ranks, runs = [], {}
    for rank in trace.ranks:
        arrays, run = found[rank.rank]
        cut = run.start + (run.repeats - removed) * run.period
        kept = [*range(cut), *range(cut + removed * run.period, len(rank.events))]
        events = []
        for new, old in enumerate(kept):
            event = rank.events[old]
            back = arrays.deps(old)
            for distance in back:
                target = new - distance
                if target < 0 or not _alike(arrays, kept[target], old - distance):
                    return None
            after = tuple(new - d for d in back)
            events.append(event if event.id == new and after == event.after else replace(event, id=new, after=after))
        ranks.append(RankTrace(rank.rank, tuple(events), rank.node))
        runs[rank.rank] = Run(run.start, run.period, run.repeats - removed)
    if not _calls_match(ranks, runs, call_keys):
        return None
    return Shortened(replace(trace, ranks=tuple(ranks)), runs, removed)


def _alike(arrays: _Rank, i: int, j: int) -> bool:
    return bool(arrays.signature[i] == arrays.signature[j]) and arrays.deps(i) == arrays.deps(j)


def _calls_match(ranks: list[RankTrace], runs: dict[int, Run], call_keys) -> bool:
    """Whether every rank that makes calls of a group (or pair) makes as many of them per block,
    so that removing blocks pairs the same calls."""
    per_block: dict[tuple, Counter] = {}
    users: dict[tuple, set[int]] = {}
    for rank in ranks:
        run = runs[rank.rank]
        for key in call_keys(rank.rank, rank.events[run.start:run.start + run.period]).values():
            per_block.setdefault(key[:-1], Counter())[rank.rank] += 1
        for key in call_keys(rank.rank, rank.events).values():
            users.setdefault(key[:-1], set()).add(rank.rank)
    return all(len({per_block.get(family, Counter())[r] for r in users_}) == 1 for family, users_ in users.items())


@per_trace
def _runs(trace: Trace) -> dict[int, tuple[_Rank, Run]] | None:
    """Each rank's arrays and run, worked out once per trace; ``None`` when some rank has no run."""
    found: dict[int, tuple[_Rank, Run]] = {}
    for rank, signature in zip(trace.ranks, event_signatures(trace), strict=True):
        arrays = _Rank.of(rank.events, signature)
        run = find_run(arrays.signature, arrays.same_deps)
        if run is None:
            return None
        found[rank.rank] = (arrays, run)
    return found


def extend(run, short: Shortened) -> Totals | None:
    """The totals of the whole trace from ``run``, a finished replay (``twin.replay.simulation``,
    with ``spans`` recorded) of ``short``; ``None`` when the run is not periodic around its middle."""
    spans, trace = run.spans, short.trace
    horizon = max((end for _, end in spans.values()), default=0.0)
    tol = TOLERANCE * max(horizon, 1.0)
    middle, delta = _settled(spans, short.runs, tol)
    if middle is None:
        return None
    sums = run.totals()
    ranks = {}
    for rank, r in short.runs.items():
        begin = min(spans[(rank, p)][0] for p in range(r.start + middle * r.period, r.start + (middle + 1) * r.period))
        now, later = (_window(run.intervals[rank], begin + k * delta, begin + (k + 1) * delta) for k in (0, 1))
        if not all(math.isclose(a, b, rel_tol=0.0, abs_tol=tol) for a, b in zip(_fields(now), _fields(later),
                                                                                 strict=True)):
            return None
        ranks[rank] = sums.ranks[rank] + now.scaled(short.removed)
    blocks = _task_blocks(run, short.runs, middle)
    if set(blocks[0]) != set(blocks[1]) or not all(
            math.isclose(a, b, rel_tol=0.0, abs_tol=tol * max(blocks[0][t].calls, 1.0))
            for t in blocks[0] for a, b in zip(_task_fields(blocks[0][t]), _task_fields(blocks[1][t]), strict=True)):
        return None
    tasks = {task: s + blocks[0][task].scaled(short.removed) if task in blocks[0] else s
             for task, s in sums.tasks.items()}
    _count_block_notes(run, short, middle)
    return Totals(_iteration_ends(trace, spans, short.runs, middle, short.removed * delta), ranks, tasks,
                  sums.simulated_events)


def _settled(spans, runs: dict[int, Run], tol: float) -> tuple[int | None, float]:
    """The first block ``middle`` with ``WINDOW`` blocks either side of it in which each event
    starts and ends one period after its twin of the block before, on every rank, and the period."""
    rank, first = next(iter(runs.items()))
    blocks = min(r.repeats for r in runs.values())
    streak, previous = 0, math.nan
    for j in range(blocks - 1):
        at = first.start + j * first.period
        delta = spans[(rank, at + first.period)][0] - spans[(rank, at)][0]
        steady = delta > 0 and _repeats(spans, runs, j, delta, tol)
        streak = (streak + 1 if abs(delta - previous) <= tol else 1) if steady else 0
        previous = delta
        if streak == 2 * WINDOW:
            return j + 1 - WINDOW, delta
    return None, 0.0


def _repeats(spans, runs: dict[int, Run], j: int, delta: float, tol: float) -> bool:
    """Whether each event of block ``j + 1`` starts and ends ``delta`` after its twin of block
    ``j``, on every rank."""
    for rank, r in runs.items():
        for p in range(r.start + j * r.period, r.start + (j + 1) * r.period):
            (s0, e0), (s1, e1) = spans[(rank, p)], spans[(rank, p + r.period)]
            if abs(s1 - s0 - delta) > tol or abs(e1 - e0 - delta) > tol:
                return False
    return True


def _window(intervals: dict[str, list[tuple[float, float]]], lo: float, hi: float) -> RankSums:
    """A rank's compute, comm, exposed comm and host wait within ``[lo, hi)``."""
    def clipped(kind: str) -> list[tuple[float, float]]:
        return union([(max(a, lo), min(b, hi)) for a, b in intervals[kind] if b > lo and a < hi])
    return RankSums.of(clipped("compute"), clipped("comm"), clipped("host"))


def _fields(s: RankSums) -> tuple[float, ...]:
    return s.compute_us, s.comm_us, s.exposed_comm_us, s.host_wait_us


def _task_fields(s: TaskSums) -> tuple[float, ...]:
    return s.calls, s.took_us, s.exposed_us, s.alone_us, s.timed


def _task_blocks(run, runs: dict[int, Run], middle: int) -> tuple[dict[Task, TaskSums], dict[Task, TaskSums]]:
    """Each task's calls attributed to the middle block and to the next: a call counts 1/n on
    each of its n ranks in the trace, at the block its event there is in (its exposed time
    there is the part of it that rank's compute does not cover)."""
    computes = {rank: union(run.intervals[rank]["compute"]) for rank in runs}
    blocks: tuple[dict[Task, TaskSums], dict[Task, TaskSums]] = ({}, {})
    for call, end in run.call_log:
        if call.timed is None:
            continue
        share, took = 1.0 / len(call.present), end - call.began_us
        weight = 1 + len(call.shadows)  # as ``_Replay.totals`` weighs it
        for rank, event in call.events:
            j = runs[rank].block(event)
            if j not in (middle, middle + 1):
                continue
            exposed = took - covered(computes[rank], call.began_us, end)
            block = blocks[j - middle]
            sums = block.get(call.task) or TaskSums(call.timed.config, call.timed.chosen_by)
            block[call.task] = sums + TaskSums(sums.config, sums.chosen_by, share, took * share * weight,
                                               exposed * share * weight, float(call.timed.schedule.time_us()) * share,
                                               share, share * weight)
    return blocks


def _count_block_notes(run, short: Shortened, middle: int) -> None:
    """Add the removed blocks' phases kept as measured or untimed, and calls of unknown size, to
    the counts ``run``'s notes report."""
    timer = replace(run.timer, kept_as_measured=0, untimed=0)
    unsized = 0.0
    for rank in short.trace.ranks:
        r = short.runs[rank.rank]
        for event in rank.events[r.start + middle * r.period:r.start + (middle + 1) * r.period]:
            if isinstance(event, ComputeEvent):
                timer.cost(event)
            elif task_of(short.trace, rank.rank, event) is None:
                members = members_of(short.trace, rank.rank, event)
                unsized += 1.0 / sum(m in run.present for m in members)
    run.timer.kept_as_measured += short.removed * timer.kept_as_measured
    run.timer.untimed += short.removed * timer.untimed
    run.unsized += round(short.removed * unsized)


def _iteration_ends(trace: Trace, spans, runs: dict[int, Run], middle: int, shift: float) -> dict[int, float]:
    """Each iteration's last end once the events after every rank's middle block end ``shift`` later."""
    ends: dict[int, float] = {}
    for rank in trace.ranks:
        after = runs[rank.rank].start + (middle + 1) * runs[rank.rank].period
        for position, event in enumerate(rank.events):
            end = spans[(rank.rank, position)][1] + (shift if position >= after else 0.0)
            ends[event.iteration] = max(ends.get(event.iteration, 0.0), end)
    return ends
