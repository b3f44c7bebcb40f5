"""Collectives as SimPy processes stepping through their schedules on a shared network.

Each collective waits for its start time, pays its launch, then runs its schedule's steps one
after another: a step is a transfer of the step's bytes over every link the collective's
channels load, and cannot end before the hop latency plus one cut-through grain has passed.
Alone on the network this reproduces ``Schedule.time_us`` exactly; several collectives at
once slow each other down wherever they share a link.

A whole training iteration has thousands of collectives of hundreds of steps each, so
``twin.replay`` runs each collective as one *lumped* transfer: all its steps' bytes at a rate
capped by ``lumped_cap_gbps``, the rate at which the bytes take the schedule's time when
the collective is alone.  Alone it ends exactly when the step-by-step run does; sharing links
it gets its max-min share of them, as its steps would, less the few per-step latencies that
a slowed step would no longer hide.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from twin.des.network import FluidNetwork
from twin.model.schedule import Schedule


@dataclass(frozen=True)
class CollectiveRun:
    """One collective to simulate: its schedule and when its last rank arrives (µs)."""

    schedule: Schedule
    start_us: float = 0.0
    name: str = ""


def _collective(env: simpy.Environment, net: FluidNetwork, run: CollectiveRun, ends: dict[int, float],
                index: int):
    s = run.schedule
    yield env.timeout(run.start_us + float(s.launch_us))
    begin, proxy_bound = env.now, 0.0
    for i in range(int(s.n_steps)):
        # A pipeline's first chunk crosses each hop at that hop's rate (``Schedule.fill_scale``).
        is_fill = s.is_fill_step(i)
        fill = float(s.fill_scale) if is_fill else 1.0
        transfer = net.start(float(s.step_bytes) * fill, s.links, float(s.cap_gbps))
        rate = max(transfer.rate_gbps, 1e-9)
        if i == 0 and s.shape == "rounds":
            # Rounds end no sooner than their busiest proxy thread posts them (``proxy_bound_us``).
            proxy_bound = float(s.proxy_bound_us(rate))
        # A full pipeline's chunk waits for a share of a step's latency only (``Schedule.pace_us``).
        wait = s.latency_us(rate, fill) if is_fill else max(
            s.step_time_us(rate, held=False) / s.in_flight - s.sync_us, s.proxy_us - s.sync_us, 0.0)
        yield transfer.done & env.timeout(float(wait))
        if s.sync_us:
            yield env.timeout(float(s.sync_us))
    if env.now < begin + proxy_bound:
        yield env.timeout(begin + proxy_bound - env.now)
    ends[index] = env.now


def simulate(runs: list[CollectiveRun]) -> list[float]:
    """End time (µs) of every collective in ``runs``, simulated together."""
    env = simpy.Environment()
    net = FluidNetwork(env)
    ends: dict[int, float] = {}
    for i, run in enumerate(runs):
        env.process(_collective(env, net, run, ends, i))
    env.run()
    return [ends[i] for i in range(len(runs))]


def lumped_bytes(s: Schedule) -> float:
    """Payload bytes one channel moves over the whole schedule."""
    return float(s.n_steps * s.step_bytes)


def lumped_cap_gbps(s: Schedule, copy_scale: float = 1.0) -> float:
    """The rate at which ``lumped_bytes`` take the schedule's steps' time, alone on the network.

    ``copy_scale`` scales what the channel's CTA copies per second (compute on the same GPU
    takes memory bandwidth from it).
    """
    caps = s.lumped_caps
    if copy_scale not in caps:
        gbps = min(float(s.gbps), float(s.cap_gbps) * copy_scale)
        caps[copy_scale] = lumped_bytes(s) / (float(s.steps_time_us(gbps)) * 1e3)
    return caps[copy_scale]
