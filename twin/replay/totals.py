"""What a replay adds up before it divides by the iteration count: the sums a ``ReplayResult`` is
made of (``Totals``), so that a replay of a shortened trace can be extended to the whole one by
adding whole periods (``twin.replay.steady``) before the means are taken.

>>> from tuner.config import Algo, Config, Proto, Transport
>>> config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 4, 256, 1 << 19)
>>> sums = TaskSums(config, "nccl", calls=4.0, took_us=40.0, exposed_us=8.0, alone_us=36.0, timed=4.0)
>>> (sums + sums.scaled(2.0)).calls  # two more periods of the same four calls
12.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traces.task import Task
from tuner.config import Config
from twin.replay.result import RankTimes, ReplayResult, TaskTimes, length, overlap, union


@dataclass(frozen=True)
class RankSums:
    """One rank's compute, comm, exposed comm and host wait over the whole replay (µs)."""

    compute_us: float = 0.0
    comm_us: float = 0.0
    exposed_comm_us: float = 0.0
    host_wait_us: float = 0.0

    @classmethod
    def of(cls, compute: list[tuple[float, float]], comm: list[tuple[float, float]],
           waits: list[tuple[float, float]]) -> RankSums:
        """From a rank's disjoint sorted compute, comm and host-wait intervals (``union``)."""
        busy = union(compute + comm)
        return cls(length(compute), length(comm), length(comm) - overlap(comm, compute),
                   length(waits) - overlap(waits, busy))

    def __add__(self, other: RankSums) -> RankSums:
        return RankSums(self.compute_us + other.compute_us, self.comm_us + other.comm_us,
                        self.exposed_comm_us + other.exposed_comm_us, self.host_wait_us + other.host_wait_us)

    def scaled(self, k: float) -> RankSums:
        return RankSums(self.compute_us * k, self.comm_us * k, self.exposed_comm_us * k, self.host_wait_us * k)


@dataclass(frozen=True)
class TaskSums:
    """One task's calls over the whole replay: how many, their time, exposed time and time alone."""

    config: Config
    chosen_by: str
    calls: float = 0.0
    took_us: float = 0.0
    exposed_us: float = 0.0
    alone_us: float = 0.0
    """Sum of the fast-path time of the ``timed`` calls."""
    timed: float = 0.0
    """Calls that move data (a placed communicator and a schedule)."""
    weight: float = 0.0
    """The calls' weights (each call: its group and the absent groups whose shadows copy it), by
    which ``took_us`` and ``exposed_us`` are summed; 0: each call counts once."""

    def __add__(self, other: TaskSums) -> TaskSums:
        return replace(self, calls=self.calls + other.calls, took_us=self.took_us + other.took_us,
                       exposed_us=self.exposed_us + other.exposed_us, alone_us=self.alone_us + other.alone_us,
                       timed=self.timed + other.timed, weight=self.weight + other.weight)

    def scaled(self, k: float) -> TaskSums:
        return replace(self, calls=self.calls * k, took_us=self.took_us * k, exposed_us=self.exposed_us * k,
                       alone_us=self.alone_us * k, timed=self.timed * k, weight=self.weight * k)


@dataclass(frozen=True)
class Totals:
    """Everything a ``ReplayResult`` is computed from."""

    iteration_end: dict[int, float]
    """Each iteration's last end (µs)."""
    ranks: dict[int, RankSums]
    tasks: dict[Task, TaskSums]
    """In the order the tasks' first calls ended."""
    simulated_events: int

    def result(self, cluster: str, gpu: str, notes: tuple[str, ...],
               stands_for: dict[int, int] | None = None) -> ReplayResult:
        """The per-iteration means (over ranks weighted by the ranks of the job each stands for,
        ``stands_for``, where the replay knows them; else each rank alike)."""
        iterations = sorted(self.iteration_end)
        n = max(len(iterations), 1)
        times, previous = [], 0.0
        for i in iterations:
            times.append(max(self.iteration_end[i] - previous, 0.0))
            previous = max(previous, self.iteration_end[i])
        weights = stands_for or {}
        ranks = tuple(RankTimes(rank, s.compute_us / n, s.comm_us / n, s.exposed_comm_us / n, s.host_wait_us / n,
                                weights.get(rank, 1)) for rank, s in sorted(self.ranks.items()))
        tasks = [TaskTimes(task, s.config, s.chosen_by, s.calls / n, s.took_us / (s.weight or s.calls),
                           s.alone_us / s.timed, s.exposed_us / (s.weight or s.calls), (s.weight or s.calls) / s.calls)
                 for task, s in self.tasks.items() if s.timed]
        tasks.sort(key=lambda t: -float(f"{t.time_us * t.calls_per_iteration:.12g}"))  # ties: first called first
        return ReplayResult(cluster, gpu, tuple(times), ranks, tuple(tasks), notes,
                            simulated_events=self.simulated_events)
