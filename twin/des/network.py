"""Links as shared capacity: every active transfer gets a max-min fair rate.

Picture a NIC that two collectives cross at once: each gets half of it, and when one
finishes the other speeds up at that instant.  A transfer loads each directed link it
crosses with a weight (raw bytes per payload byte, times the channel flows it bundles);
rates are set by progressive filling, capped by what the sending CTAs can copy, and reset
whenever a transfer starts or ends or a cap changes.  Work that no link limits (a compute
phase slowed by communication kernels on its GPU) is a transfer with no links: its cap alone
sets its rate.

The work per event is that of the transfers it touches, not of all that run: a transfer keeps
the bytes it had left when its rate last changed (its progress since then follows from the
clock), and the predicted ends wait in a heap, so a start, an end or a new cap costs the max-min
problem of the transfers sharing links with it (and a heap operation) whatever else is moving.
Transfers that load the same links tuple (one collective's schedule, step after step) share a
*link table*: its own bottleneck and the tables it shares a link with are found once, so finding
who shares links with a transfer walks tables, not links, and a collective alone on its links
(thousands of them on a large ring) gets its rate without touching them.

>>> from twin.model.geometry import LinkUse
>>> env = simpy.Environment()
>>> net = FluidNetwork(env)
>>> link = LinkUse(("a", "b"), 1.0, 10.0)
>>> first, second = net.start(1e6, (link,), 100.0), net.start(1e6, (link,), 100.0)
>>> first.rate_gbps, second.rate_gbps
(5.0, 5.0)
>>> env.run(); env.now  # two MB through one 10 GB/s link
200.0
"""

from __future__ import annotations

import heapq
import math

import simpy

__all__ = ["FluidNetwork", "Transfer"]

_EPS_BYTES = 1e-6
_END_SLACK_US = 1e-6
"""A transfer due to end within this much of a wake-up ends then (rounding of its progress)."""


class Transfer:
    """``nbytes`` of payload moving at a rate the network sets; ``done`` fires at the end."""

    __slots__ = ("_env", "_left", "_stamp", "cap_gbps", "done", "end_us", "links", "order", "rate_gbps", "table")

    def __init__(self, env: simpy.Environment, nbytes: float, links: tuple, cap_gbps: float, order: int = 0,
                 table: _Table | None = None):
        self._env = env
        self.table = table
        self._left = float(nbytes)  # payload bytes left at time ``_stamp``
        self._stamp = env.now
        self.links = links
        self.cap_gbps = float(cap_gbps)
        self.rate_gbps = 0.0
        self.end_us = math.inf
        self.order = order
        self.done = env.event()

    @property
    def remaining(self) -> float:
        """Payload bytes still to move, now."""
        return self._left - self.rate_gbps * 1e3 * (self._env.now - self._stamp)

    def __repr__(self) -> str:
        return f"Transfer(remaining={self.remaining:.0f}, rate={self.rate_gbps:.2f} GB/s)"


class _Table:
    """One links tuple as transfers load it: its bottleneck alone, the tables sharing a link with it,
    and the active transfers that load it."""

    __slots__ = ("bottleneck_gbps", "links", "neighbours", "transfers")

    def __init__(self, links: tuple):
        self.links = links  # held, so the tuple's id is not reused while the table is known
        weight: dict[tuple[str, str], float] = {}
        capacity: dict[tuple[str, str], float] = {}
        for use in links:
            weight[use.link] = weight.get(use.link, 0.0) + use.raw_per_payload
            capacity[use.link] = use.capacity
        self.bottleneck_gbps = min((capacity[k] / w for k, w in weight.items() if w > 0), default=math.inf)
        self.neighbours: set[_Table] = set()
        self.transfers: set[Transfer] = set()


class FluidNetwork:
    """All links of a cluster, shared max-min fairly between the transfers on them.

    Rates are recomputed only for the transfers that share links, directly or through others,
    with one that started, ended or changed its cap: max-min sharing splits into independent
    problems along such components, so a call on one node's NVLink leaves a call on the NICs as
    it was.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: set[Transfer] = set()
        self._tables: dict[int, _Table] = {}  # by id of the links tuple
        self._link_tables: dict[tuple[str, str], list[_Table]] = {}
        self._ends: list[tuple[float, int, Transfer]] = []  # predicted ends, a heap (stale entries skipped)
        self._wakes: list[float] = []  # times of pending wake-ups, a heap
        self._started = 0

    def start(self, nbytes: float, links: tuple, cap_gbps: float) -> Transfer:
        """Begin a transfer now; its rate is known as soon as this returns."""
        self._started += 1
        t = Transfer(self.env, nbytes, links, cap_gbps, self._started, self._table(links) if links else None)
        if t._left <= _EPS_BYTES:
            t.done.succeed()
            return t
        finished = self._retire(0.0)
        self.active.add(t)
        if t.table is not None:
            t.table.transfers.add(t)
        else:
            self._set_rate(t, t.cap_gbps)
        self._settle([t] if links else [], finished)
        return t

    def set_caps(self, caps: list[tuple[Transfer, float]]) -> None:
        """Change the caps of running transfers (e.g. a copy engine slowed by compute), now."""
        changed = [(t, float(c)) for t, c in caps if t.cap_gbps != c and not t.done.triggered]
        if not changed:
            return
        finished = self._retire(0.0)
        for t, cap in changed:
            t.cap_gbps = cap
            if not t.links and t in self.active:
                self._set_rate(t, cap)
        self._settle([t for t, _ in changed if t.links and t in self.active], finished)

    # ---- progress --------------------------------------------------------------------------

    def _set_rate(self, t: Transfer, rate: float) -> None:
        if rate == t.rate_gbps:
            return
        now = self.env.now
        t._left -= t.rate_gbps * 1e3 * (now - t._stamp)
        t._stamp = now
        t.rate_gbps = rate
        t.end_us = now + max(t._left, 0.0) / (rate * 1e3) if rate > 0 else math.inf
        if t.end_us < math.inf:
            heapq.heappush(self._ends, (t.end_us, t.order, t))

    def _retire(self, slack_us: float) -> list[Transfer]:
        """End the transfers due by now (within ``slack_us``, or with under a µ-byte left), in the
        order they started."""
        now, ends, finished = self.env.now, self._ends, []
        while ends:
            end, _, t = ends[0]
            if t.end_us != end or t not in self.active:
                heapq.heappop(ends)
                continue
            if end - now > max(slack_us, _EPS_BYTES * max(1.0, t.rate_gbps) / (t.rate_gbps * 1e3)):
                break
            heapq.heappop(ends)
            t.end_us = math.inf  # its other entries in the heap, if any, are stale now
            finished.append(t)
        finished.sort(key=lambda t: t.order)
        for t in finished:
            self.active.discard(t)
            if t.table is not None:
                t.table.transfers.discard(t)
            t.done.succeed()
        return finished

    def _settle(self, changed: list[Transfer], finished: list[Transfer]) -> None:
        """Reset the rates of the components of ``changed`` and of the ``finished`` transfers, and
        wake up at the next end."""
        seeds = changed + [t for t in finished if t.links]
        if seeds:
            self._assign_rates(self._component(seeds))
        ends = self._ends
        while ends and (ends[0][2].end_us != ends[0][0] or ends[0][2] not in self.active):
            heapq.heappop(ends)
        if not ends:
            return
        next_end = ends[0][0]
        if not self._wakes or next_end < self._wakes[0]:  # a wake-up already due sooner will do
            heapq.heappush(self._wakes, next_end)
            self.env.timeout(max(next_end - self.env.now, 0.0)).callbacks.append(self._wake)

    def _wake(self, _event) -> None:
        heapq.heappop(self._wakes)
        self._settle([], self._retire(_END_SLACK_US))

    # ---- max-min sharing -------------------------------------------------------------------

    def _table(self, links: tuple) -> _Table:
        """The table of ``links``, made and linked to the tables it shares links with on first use."""
        table = self._tables.get(id(links))
        if table is None:
            table = self._tables[id(links)] = _Table(links)
            for link in dict.fromkeys(use.link for use in links):
                users = self._link_tables.setdefault(link, [])
                for other in users:
                    other.neighbours.add(table)
                    table.neighbours.add(other)
                users.append(table)
        return table

    def _component(self, seeds: list[Transfer]) -> list[Transfer]:
        """Active transfers linked to ``seeds`` through shared links, in the order they started."""
        todo = list({t.table: None for t in seeds})
        visited = set(todo)
        while todo:
            for other in todo.pop().neighbours:
                if other not in visited and other.transfers:
                    visited.add(other)
                    todo.append(other)
        seen = [t for table in visited for t in table.transfers]
        return sorted(seen, key=lambda t: t.order)

    def _assign_rates(self, transfers: list[Transfer]) -> None:
        """Progressive filling of ``transfers`` (a closed set of link sharers), with per-link
        weights and per-transfer caps."""
        if len(transfers) == 1:  # alone on its links: its own bottleneck or its cap
            t = transfers[0]
            self._set_rate(t, min(t.cap_gbps, t.table.bottleneck_gbps))
            return
        unfrozen = list(transfers)
        used: dict[tuple[str, str], float] = {}
        capacity: dict[tuple[str, str], float] = {}
        for t in unfrozen:
            for use in t.links:
                capacity[use.link] = use.capacity
        while unfrozen:
            weight: dict[tuple[str, str], float] = {}
            for t in unfrozen:
                for use in t.links:
                    weight[use.link] = weight.get(use.link, 0.0) + use.raw_per_payload
            link_level = {k: (capacity[k] - used.get(k, 0.0)) / w for k, w in weight.items() if w > 0}
            bottleneck = min(link_level.values(), default=math.inf)
            level = min(bottleneck, min(t.cap_gbps for t in unfrozen))
            saturated = {k for k, v in link_level.items() if v <= level * (1 + 1e-12)}
            freeze = [t for t in unfrozen
                      if t.cap_gbps <= level * (1 + 1e-12) or any(u.link in saturated for u in t.links)]
            for t in freeze:
                self._set_rate(t, level)
                for use in t.links:
                    used[use.link] = used.get(use.link, 0.0) + level * use.raw_per_payload
            frozen = set(freeze)
            unfrozen = [t for t in unfrozen if t not in frozen]
