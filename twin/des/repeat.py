"""Calls repeated back to back on every rank's stream, one kernel per call, one CTA per channel.

The closed form (``Schedule.gpu_period_us``, ``twin.model.repeat``) takes the heaviest two-call
cycle of a one-way chain; this runs the calls themselves.  Every rank is a SimPy process that
starts its kernels one after another; each kernel has a CTA per channel, which ends when it has
pushed the call (the interval ``T`` after its kernel started) and the call's last byte has come
down its chain from the rank before it (that rank's CTA's end plus the hop between them); the
kernel ends with its last CTA.  A CTA also cannot run more than ``ahead`` calls ahead of the
rank after it on its chain: what a connection's FIFO holds (``NCCL_STEPS`` steps) is all a
sender can leave for its receiver to take.  The root's period once the calls have settled is
what nccl-tests times there; the closed form's cycle bounds it from below.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import simpy

from twin.model.repeat import SETTLE_CALLS
from twin.model.schedule import Schedule


def _rank(env: simpy.Environment, r: int, chains: list[list[int]], prev: list[dict[int, int]],
          nxt: list[dict[int, int]], hop_us: np.ndarray, interval_us: float, iters: int, ahead: int,
          done: dict, ends: dict):
    for k in range(iters):
        yield env.all_of([env.process(_cta(env, r, c, k, prev, nxt, hop_us, interval_us, ahead, done))
                          for c in range(len(chains))])
        ends[r, k] = env.now


def _cta(env: simpy.Environment, r: int, c: int, k: int, prev: list[dict[int, int]],
         nxt: list[dict[int, int]], hop_us: np.ndarray, interval_us: float, ahead: int, done: dict):
    waits = [env.timeout(interval_us)]
    if r in prev[c]:
        q = prev[c][r]
        waits.append(env.process(_after(env, done[q, c, k], hop_us[c, r] - hop_us[c, q])))
    if r in nxt[c] and k >= ahead:
        waits.append(done[nxt[c][r], c, k - ahead])
    yield env.all_of(waits)
    done[r, c, k].succeed()


def _after(env: simpy.Environment, event: simpy.Event, delay_us: float):
    yield event
    yield env.timeout(max(float(delay_us), 0.0))


def root_period_us(schedule: Schedule, arrivals: np.ndarray, iters: int = 2 * SETTLE_CALLS,
                   ahead: int | None = None) -> float:
    """The root's time between calls once ``iters`` back-to-back calls of ``schedule`` have
    settled (over their second half), simulated on every rank of the chains ``arrivals`` gives
    (``CommGeometry.chain_arrivals``: ``[c, r]`` the latency from the root down channel ``c`` to
    rank ``r``; hops scaled so that the longest channel's whole chain takes the schedule's fill).
    ``ahead``: calls a connection's FIFO lets a sender finish before its receiver (default: the
    ``in_flight`` steps it holds over the call's ``loops``, at least 1).

    Rounds and trees end where the next call starts: their period is one call's time.
    """
    call = float(schedule.time_us() - schedule.host.skew_us)
    if not schedule.one_way:
        return call
    interval = float(schedule.interval_us())
    if ahead is None:
        ahead = max(1, int(schedule.in_flight // float(schedule.loops)))
    arrivals = np.asarray(arrivals, dtype=float)
    total = float(arrivals.max())
    hop_us = arrivals * (max(call - interval, 0.0) / total) if total > 0 else arrivals * 0.0
    chains = [list(np.argsort(row, kind="stable")) for row in arrivals]
    prev = [{int(b): int(a) for a, b in pairwise(chain)} for chain in chains]
    nxt = [{int(a): int(b) for a, b in pairwise(chain)} for chain in chains]
    env = simpy.Environment()
    nranks = arrivals.shape[1]
    done = {(r, c, k): env.event() for r in range(nranks) for c in range(len(chains)) for k in range(iters)}
    ends: dict[tuple[int, int], float] = {}
    for r in range(nranks):
        env.process(_rank(env, r, chains, prev, nxt, hop_us, interval, iters, ahead, done, ends))
    env.run()
    half = iters // 2
    return (ends[0, iters - 1] - ends[0, half - 1]) / (iters - half)
