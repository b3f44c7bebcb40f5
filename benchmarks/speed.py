"""Speed of the twin's two engines.

1. Fast path: every subspace × AutoCCL's resource grid of one task (an 80 MB AllGather on 8
   GPUs of the a40-nvlink-pairs preset, as in the paper's Phi-2 workload), on one core.
   Target ≤ 10 s for about a million configurations.
2. DES: one 1 GiB AllReduce over 64 GPUs (8 × dgx-a100), NCCL's default configuration.
   Target ≤ 1 s; the same over 4,096 GPUs (512 nodes: a ring of tens of thousands of links,
   whose steps the network rates without walking them); then the cost per simulated rank-step
   as ranks and chunks grow (should not grow).

    python benchmarks/speed.py
"""

from __future__ import annotations

import os
import platform
import time

from traces.task import Op
from tuner.config import Algo, Config, Proto, Subspace, Transport
from tuner.rules import ALGORITHMS_FOR_OP
from tuner.space import resource_grid
from twin.des import CollectiveRun, simulate
from twin.fastpath import sweep
from twin.placement import Communicator
from twin.predict import resolve
from twin.topology import load_cluster


def fast_path() -> None:
    comm = Communicator.first(load_cluster("a40-nvlink-pairs", nodes=1))
    op, nbytes = Op.ALLGATHER, 80_000_000
    geoms = {t: comm.geometry(t) for t in Transport}
    grids = {Subspace(a, p, t): resource_grid(a, p) for a in ALGORITHMS_FOR_OP[op] for p in Proto for t in Transport}
    start = time.process_time()
    results = sweep(geoms, op, nbytes, grids)
    elapsed = time.process_time() - start
    configs = sum(r.size for r in results)
    best = min((r.best() for r in results), key=lambda cb: cb[1])
    print(f"fast path: {configs:,} configs in {len(results)} subspaces, {elapsed:.2f} s CPU "
          f"({configs / elapsed:,.0f} configs/s); best {best[0]} at {best[1]:.1f} µs")


def des() -> None:
    comm = Communicator.first(load_cluster("dgx-a100", nodes=8))
    task = comm.task(Op.ALLREDUCE, 1 << 30)
    config, _, _ = resolve(comm, Op.ALLREDUCE, 1 << 30)
    schedule = comm.schedule(task, config)
    start = time.perf_counter()
    simulate([CollectiveRun(schedule)])
    print(f"DES: 1 GiB AllReduce, 64 GPUs, {config}: {time.perf_counter() - start:.3f} s wall, "
          f"{int(schedule.n_steps)} steps")
    start = time.process_time()
    comm = Communicator.first(load_cluster("dgx-a100", nodes=512))
    config, _, _ = resolve(comm, Op.ALLREDUCE, 1 << 30)
    schedule = comm.schedule(comm.task(Op.ALLREDUCE, 1 << 30), config)
    built = time.process_time()
    simulate([CollectiveRun(schedule)])
    print(f"DES: 1 GiB AllReduce, 4,096 GPUs, {config}: {time.process_time() - built:.3f} s CPU "
          f"({built - start:.1f} s to build its schedule), {int(schedule.n_steps)} steps over "
          f"{len(schedule.links):,} links")
    print(f"\n{'nodes':>5} {'ranks':>5} {'chunk':>8} {'steps':>6} {'wall s':>8} {'µs per rank-step':>17}")
    for nodes in (2, 4, 8):
        comm = Communicator.first(load_cluster("dgx-a100", nodes=nodes))
        for chunk in (1 << 21, 1 << 19, 1 << 17):
            config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 16, 512, chunk)
            schedule = comm.schedule(comm.task(Op.ALLREDUCE, 1 << 30), config)
            start = time.perf_counter()
            simulate([CollectiveRun(schedule)])
            wall = time.perf_counter() - start
            steps = int(schedule.n_steps)
            print(f"{nodes:>5} {comm.nranks:>5} {chunk:>8} {steps:>6} {wall:>8.3f} "
                  f"{wall / (steps * comm.nranks) * 1e6:>17.2f}")


if __name__ == "__main__":
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    fast_path()
    des()
