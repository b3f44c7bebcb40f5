"""What a replay predicts: iteration time, per-rank compute and communication, per-task times.

Per rank, *compute* is the time at least one compute phase runs, *comm* the time at least
one NCCL kernel is resident (from the moment the rank launches it, waiting for late peers
included, to its end), and *exposed comm* the part of comm during which no compute runs:
what communication adds to the iteration, and *host wait* the time the GPU runs nothing because
the rank's host thread has not yet issued work that is otherwise ready.  All four are per
iteration (totals over the trace divided by its iteration count), as is the iteration time.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

from traces.task import Task
from tuner.config import Config


@dataclass(frozen=True)
class RankTimes:
    """One rank's per-iteration compute, communication, exposed communication and host wait (µs)."""

    rank: int
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    host_wait_us: float = 0.0
    """Time the rank's GPU runs nothing because its host has not yet issued the next ready work."""
    stands_for: int = 1
    """Ranks of the job whose times these are (itself and the absent ranks that copy it), the
    weight of its times in the result's means."""


@dataclass(frozen=True)
class TaskTimes:
    """One task over the replay: how it ran, how often, how long (µs), its bus bandwidth."""

    task: Task
    config: Config
    chosen_by: str
    calls_per_iteration: float
    time_us: float
    """Mean time of a call from its last member's arrival to its end, sharing the network."""
    alone_us: float
    """The same call alone on the network (the fast path)."""
    exposed_us: float = 0.0
    """Mean part of a call during which its ranks in the trace run no compute."""
    groups: float = 1.0
    """Groups of the job a call stands for, on average: its own and the absent copies whose
    shadows run alike (the weight of its times in ``time_us`` and ``exposed_us``)."""

    @property
    def busbw_gbps(self) -> float:
        return self.task.busbw_gbps(self.time_us)

    @property
    def alone_busbw_gbps(self) -> float:
        return self.task.busbw_gbps(self.alone_us)

    def as_dict(self) -> dict:
        t, c = self.task, self.config
        return {
            "op": str(t.op), "nbytes": t.nbytes, "dtype": t.dtype, "nranks": t.nranks, "group": t.group,
            "calls_per_iteration": round(self.calls_per_iteration, 3),
            "config": {"algo": str(c.algo), "proto": str(c.proto), "transport": str(c.transport),
                       "nchannels": c.nchannels, "nthreads": c.nthreads, "chunk_bytes": c.chunk_bytes},
            "chosen_by": self.chosen_by,
            "time_us": round(self.time_us, 3), "alone_us": round(self.alone_us, 3),
            "exposed_us": round(self.exposed_us, 3),
            "busbw_gbps": round(self.busbw_gbps, 3), "alone_busbw_gbps": round(self.alone_busbw_gbps, 3),
        }


@dataclass(frozen=True)
class ReplayResult:
    """A trace replayed on a cluster."""

    cluster: str
    """The cluster's identity (``dgx-h100:8x2``, ``tuner.identity``)."""
    gpu: str
    iteration_us: tuple[float, ...]
    """Time of each iteration: from the end of the previous one (or 0) to its last event's end."""
    ranks: tuple[RankTimes, ...]
    tasks: tuple[TaskTimes, ...]
    notes: tuple[str, ...] = field(default=())
    """What the replay had to assume (compute kept as measured, calls of unknown size...)."""
    simulated_events: int = field(default=0, compare=False)
    """Trace events the replay stepped through (fewer than the trace's when whole periods of a
    pipeline's steady state were added rather than simulated: ``twin.replay.steady``)."""

    @property
    def mean_iteration_us(self) -> float:
        return sum(self.iteration_us) / len(self.iteration_us) if self.iteration_us else 0.0

    def _mean(self, attr: str) -> float:
        weight = sum(r.stands_for for r in self.ranks)
        return sum(getattr(r, attr) * r.stands_for for r in self.ranks) / weight if self.ranks else 0.0

    @property
    def compute_us(self) -> float:
        """Per-iteration compute time, mean over the ranks replayed."""
        return self._mean("compute_us")

    @property
    def comm_us(self) -> float:
        return self._mean("comm_us")

    @property
    def exposed_comm_us(self) -> float:
        return self._mean("exposed_comm_us")

    @property
    def host_wait_us(self) -> float:
        """Per-iteration time the GPU idles waiting for its host, mean over the ranks replayed."""
        return self._mean("host_wait_us")

    @property
    def comm_share(self) -> float:
        """Share of the iteration during which communication kernels run."""
        return self.comm_us / self.mean_iteration_us if self.mean_iteration_us else 0.0

    @property
    def exposed_share(self) -> float:
        """Share of the iteration that is communication no compute hides."""
        return self.exposed_comm_us / self.mean_iteration_us if self.mean_iteration_us else 0.0

    def as_dict(self) -> dict:
        return {
            "cluster": self.cluster, "gpu": self.gpu,
            "iteration_us": round(self.mean_iteration_us, 3),
            "iterations_us": [round(t, 3) for t in self.iteration_us],
            "compute_us": round(self.compute_us, 3), "comm_us": round(self.comm_us, 3),
            "exposed_comm_us": round(self.exposed_comm_us, 3), "host_wait_us": round(self.host_wait_us, 3),
            "comm_share": round(self.comm_share, 4), "exposed_share": round(self.exposed_share, 4),
            "ranks": [{"rank": r.rank, "compute_us": round(r.compute_us, 3), "comm_us": round(r.comm_us, 3),
                       "exposed_comm_us": round(r.exposed_comm_us, 3), "host_wait_us": round(r.host_wait_us, 3)}
                      for r in self.ranks],
            "tasks": [t.as_dict() for t in self.tasks],
            "notes": list(self.notes),
        }


def covered(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Time of ``[start, end)`` that disjoint sorted ``intervals`` cover."""
    total = 0.0
    for i in range(max(bisect_right(intervals, (start, math.inf)) - 1, 0), len(intervals)):
        lo, hi = intervals[i]
        if lo >= end:
            break
        total += max(0.0, min(hi, end) - max(lo, start))
    return total


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both of two disjoint sorted interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
