"""What an iteration boundary costs a job on NCCL: while tuning, reading the calls; once converged.

While tuning, every boundary drains the plugin's decision ring (one decision per collective of
the iteration, logged by NCCL's own ``getCollInfo`` calls) and counts occurrences
(``live.nccl_source.NcclObserver.poll`` and the counting of ``Live._boundary``; the rounds over
the store come on top). After the final round a boundary only asks the plugin whether a new
communicator appeared (``NcclObserver.quiet``). This script fills the ring as NCCL would
(``getCollInfo`` through the tuner ABI, ``live.plugin.emulate``, on an 8-rank communicator with a
rule in force), times both for several collective counts per iteration, and prints them as a share
of typical iteration times. CPU only; the collectives themselves are not run.

    python benchmarks/live_boundary.py [--calls 32 128 512 2048] [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

from live.nccl_source import NcclObserver, NcclSource
from live.observe import key_of
from live.plugin.binding import Plugin
from live.plugin.emulate import EmulatedComm, cost_table
from live.schedule import Rule, TaskKey, install
from traces.task import Op
from tuner.config import Algo, Proto

ITERATION_MS = (10, 100, 1000)
"""Iteration times the cost is set against (a small model's step to a large one's)."""
TABLE = cost_table({(Algo.RING, Proto.LL): 9.0, (Algo.RING, Proto.LL128): 8.0, (Algo.RING, Proto.SIMPLE): 7.0,
                    (Algo.TREE, Proto.SIMPLE): 7.5})
COMM = 0xC0FFEE


def boundary_us(observer: NcclObserver, comm: EmulatedComm, calls: int, repeat: int) -> tuple[float, float]:
    """Median µs of a tuning and of a converged boundary after ``calls`` collectives (16 tasks)."""
    counts: dict[TaskKey, int] = {}
    tuning, converged = [], []
    for _ in range(repeat):
        for i in range(calls):
            comm.select(Op.ALLREDUCE, 4096 << (i % 16), TABLE)
        start = time.perf_counter()
        assert observer.quiet()
        converged.append(time.perf_counter() - start)
        start = time.perf_counter()
        for d in observer.poll():
            key = key_of(d)
            counts[key] = max(counts.get(key, 0), d.occurrence + 1)
        tuning.append(time.perf_counter() - start)
    return 1e6 * statistics.median(tuning), 1e6 * statistics.median(converged)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[32, 128, 512, 2048],
                        help="collectives per iteration")
    parser.add_argument("--repeat", type=int, default=200, help="boundaries timed per count")
    args = parser.parse_args()
    plugin = Plugin.load()
    source = NcclSource(plugin, (2, 28, 9), sm_count=132, sm_version=90)
    observer = NcclObserver(plugin, source, say=print)
    with EmulatedComm(plugin, COMM, nranks=8, nnodes=1, rank=0, tuner_abi=5) as comm:
        for k in range(16):
            install(plugin, Rule(TaskKey(COMM, Op.ALLREDUCE, 4096 << k), 0, (Algo.RING, Proto.LL128, 16, 0), 1))
        observer.poll()
        shares = " ".join(f"{f'% of {ms} ms':>12}" for ms in ITERATION_MS)
        print(f"{'calls/iteration':>15} {'boundary':>10} {'us':>9} {shares}")
        for calls in args.calls:
            for name, us in zip(("tuning", "converged"), boundary_us(observer, comm, calls, args.repeat), strict=True):
                print(f"{calls:>15} {name:>10} {us:>9.1f} "
                      + " ".join(f"{100 * us / (1e3 * ms):>12.4f}" for ms in ITERATION_MS))


if __name__ == "__main__":
    main()
