"""Links as shared capacity: every active transfer gets a max-min fair rate.

Picture a NIC that two collectives cross at once: each gets half of it, and when one
finishes the other speeds up at that instant.  A transfer loads each directed link it
crosses with a weight (raw bytes per payload byte, times the channel flows it bundles);
rates are set by progressive filling, capped by what the sending CTAs can copy, and reset
whenever a transfer starts or ends or a cap changes.  Work that no link limits (a compute
phase slowed by communication kernels on its GPU) is a transfer with no links: its cap alone
sets its rate.
"""

from __future__ import annotations

import heapq
import math

import simpy

_EPS_BYTES = 1e-6


class Transfer:
    """``nbytes`` of payload moving at a rate the network sets; ``done`` fires at the end."""

    def __init__(self, env: simpy.Environment, nbytes: float, links: tuple, cap_gbps: float):
        self.remaining = float(nbytes)
        self.links = links
        self.cap_gbps = float(cap_gbps)
        self.rate_gbps = 0.0
        self.done = env.event()

    def __repr__(self) -> str:
        return f"Transfer(remaining={self.remaining:.0f}, rate={self.rate_gbps:.2f} GB/s)"


class FluidNetwork:
    """All links of a cluster, shared max-min fairly between the transfers on them.

    Rates are recomputed only for the transfers that share links, directly or through others,
    with one that started, ended or changed its cap: max-min sharing splits into independent
    problems along such components, so a call on one node's NVLink leaves a call on the NICs as
    it was.
    """

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: list[Transfer] = []
        self._users: dict[tuple[str, str], set[Transfer]] = {}
        self._last_update = env.now
        self._wakes: list[float] = []  # times of pending wake-ups, a heap

    def start(self, nbytes: float, links: tuple, cap_gbps: float) -> Transfer:
        """Begin a transfer now; its rate is known as soon as this returns."""
        self._advance()
        t = Transfer(self.env, nbytes, links, cap_gbps)
        if t.remaining <= _EPS_BYTES:
            t.done.succeed()
            return t
        self.active.append(t)
        for use in links:
            self._users.setdefault(use.link, set()).add(t)
        self._reschedule([t] if links else [])
        return t

    def set_caps(self, caps: list[tuple[Transfer, float]]) -> None:
        """Change the caps of running transfers (e.g. a copy engine slowed by compute), now."""
        changed = [(t, float(c)) for t, c in caps if t.cap_gbps != c and not t.done.triggered]
        if not changed:
            return
        self._advance()
        for t, cap in changed:
            t.cap_gbps = cap
        self._reschedule([t for t, _ in changed if t.links])

    def _advance(self) -> None:
        dt = self.env.now - self._last_update  # µs
        if dt > 0:
            for t in self.active:
                t.remaining -= t.rate_gbps * 1e3 * dt
        self._last_update = self.env.now

    def _reschedule(self, changed: list[Transfer]) -> None:
        """Retire finished transfers, reset the rates of the components of ``changed`` and of the
        finished ones (linkless transfers move at their cap), and wake up at the next end."""
        finished = [t for t in self.active if t.remaining <= _EPS_BYTES * max(1.0, t.rate_gbps)]
        for t in finished:
            self.active.remove(t)
            for use in t.links:
                self._users[use.link].discard(t)
            t.done.succeed()
        seeds = changed + [t for t in finished if t.links]
        if seeds:
            self._assign_rates(self._component(seeds))
        for t in self.active:
            if not t.links:
                t.rate_gbps = t.cap_gbps
        if not self.active:
            return
        next_end = self.env.now + min(t.remaining / (t.rate_gbps * 1e3) for t in self.active)
        if not self._wakes or next_end < self._wakes[0]:  # a wake-up already due sooner will do
            heapq.heappush(self._wakes, next_end)
            self.env.timeout(next_end - self.env.now).callbacks.append(self._wake)

    def _wake(self, _event) -> None:
        heapq.heappop(self._wakes)
        self._advance()
        for t in self.active:  # absorb rounding at the instant a transfer should end
            if t.remaining < 1e-6 * t.rate_gbps * 1e3 + _EPS_BYTES:
                t.remaining = 0.0
        self._reschedule([])

    def _component(self, seeds: list[Transfer]) -> list[Transfer]:
        """Active transfers linked to ``seeds`` through shared links."""
        seen: set[Transfer] = set()
        links = [use.link for t in seeds for use in t.links]
        visited: set[tuple[str, str]] = set()
        while links:
            link = links.pop()
            if link in visited:
                continue
            visited.add(link)
            for t in self._users.get(link, ()):
                if t not in seen:
                    seen.add(t)
                    links.extend(use.link for use in t.links)
        return [t for t in self.active if t in seen]

    def _assign_rates(self, transfers: list[Transfer]) -> None:
        """Progressive filling of ``transfers`` (a closed set of link sharers), with per-link
        weights and per-transfer caps."""
        unfrozen = list(transfers)
        used: dict[tuple[str, str], float] = {}
        capacity: dict[tuple[str, str], float] = {}
        for t in unfrozen:
            for use in t.links:
                capacity[use.link] = use.capacity
        level = 0.0
        while unfrozen:
            weight: dict[tuple[str, str], float] = {}
            for t in unfrozen:
                for use in t.links:
                    weight[use.link] = weight.get(use.link, 0.0) + use.raw_per_payload
            link_level = {k: (capacity[k] - used.get(k, 0.0)) / w for k, w in weight.items() if w > 0}
            bottleneck = min(link_level.values(), default=math.inf)
            cap = min(t.cap_gbps for t in unfrozen)
            level = min(bottleneck, cap)
            saturated = {k for k, v in link_level.items() if v <= level * (1 + 1e-12)}
            freeze = [t for t in unfrozen
                      if t.cap_gbps <= level * (1 + 1e-12) or any(u.link in saturated for u in t.links)]
            for t in freeze:
                t.rate_gbps = level
                unfrozen.remove(t)
                for use in t.links:
                    used[use.link] = used.get(use.link, 0.0) + level * use.raw_per_payload
