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
    """All links of a cluster, shared max-min fairly between the transfers on them."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.active: list[Transfer] = []
        self._last_update = env.now
        self._wakeup_version = 0

    def start(self, nbytes: float, links: tuple, cap_gbps: float) -> Transfer:
        """Begin a transfer now; its rate is known as soon as this returns."""
        self._advance()
        t = Transfer(self.env, nbytes, links, cap_gbps)
        if t.remaining <= _EPS_BYTES:
            t.done.succeed()
            return t
        self.active.append(t)
        self._reschedule()
        return t

    def set_caps(self, caps: list[tuple[Transfer, float]]) -> None:
        """Change the caps of running transfers (e.g. a copy engine slowed by compute), now."""
        changed = [(t, float(c)) for t, c in caps if t.cap_gbps != c and not t.done.triggered]
        if not changed:
            return
        self._advance()
        for t, cap in changed:
            t.cap_gbps = cap
        self._reschedule()

    def _advance(self) -> None:
        dt = self.env.now - self._last_update  # µs
        if dt > 0:
            for t in self.active:
                t.remaining -= t.rate_gbps * 1e3 * dt
        self._last_update = self.env.now

    def _reschedule(self) -> None:
        finished = [t for t in self.active if t.remaining <= _EPS_BYTES * max(1.0, t.rate_gbps)]
        for t in finished:
            self.active.remove(t)
            t.done.succeed()
        self._assign_rates()
        if not self.active:
            return
        next_end = min(t.remaining / (t.rate_gbps * 1e3) for t in self.active)
        self._wakeup_version += 1
        version = self._wakeup_version
        self.env.process(self._wake(next_end, version))

    def _wake(self, delay: float, version: int):
        yield self.env.timeout(delay)
        if version == self._wakeup_version:
            self._advance()
            for t in self.active:  # absorb rounding at the instant a transfer should end
                if t.remaining < 1e-6 * t.rate_gbps * 1e3 + _EPS_BYTES:
                    t.remaining = 0.0
            self._reschedule()

    def _assign_rates(self) -> None:
        """Progressive filling with per-link weights and per-transfer caps."""
        unfrozen = list(self.active)
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
