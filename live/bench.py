"""The microbenchmark behind ``ccltwin bench``: collectives over a size range, NCCL's default
against what live tuning finds, in nccl-tests' columns.

Launched on every rank (``torchrun``, the process group initialised), :func:`run` enables live
tuning and gives each (collective, size) ``iterations`` iterations of its own: one call, then an
iteration boundary. The task's live tuning measures NCCL's default first and then its trials,
all with the job's real calls (so under ``interference=True`` a GEMM on another thread and stream
runs beside them, as compute would in training), and every trial lands in the store as it comes.
A row gives the default's and the winner's scores (mean of the fastest 75 % of their samples).
AllToAll is point-to-point in NCCL, which asks no tuner: its row times NCCL's own run (CUDA
events on a GPU, the time source in CI) and has no tuned columns. (On gloo, in CI, a
ReduceScatter runs as an AllReduce of the whole buffer and is tuned as one.)

:func:`table` prints the rows; :func:`measurements` turns them into store records (the trials
themselves are in the store already).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from live.errors import LiveError
from live.observe import TUNED_OPS, group_shape, local_world_size
from traces.task import DTYPE_BYTES, Op, Task
from tuner.config import Config
from tuner.measurement import Measurement

__all__ = ["BENCH_OPS", "BenchRow", "measurements", "run", "table"]

BENCH_OPS = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.BROADCAST, Op.ALLTOALL)
DEFAULT_SIZES = tuple(1 << k for k in range(10, 27, 4))
"""1 KiB to 64 MiB, ×16."""
GEMM_SIDE = {"cuda": 4096, "cpu": 256}
"""Side of the square matrices the interference thread multiplies (on a GPU enough to fill every SM)."""


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One collective at one size: NCCL's default and the tuned winner, measured live."""

    task: Task
    default: Config | None
    """NCCL's own config (``None`` where it does not say: AllToAll on NCCL)."""
    default_us: float
    winner: Config | None
    """``None``: not tuned (AllToAll, or every trial failed)."""
    tuned_us: float | None
    trials: int
    interference: float
    hardware: str
    nccl_version: str

    @property
    def speedup(self) -> float | None:
        return self.default_us / self.tuned_us if self.tuned_us else None


def run(ops: Sequence[Op] = BENCH_OPS, sizes: Sequence[int] = DEFAULT_SIZES, *, iterations: int = 120,
        dtype: str = "float32", interference: bool = False, **enable: Any) -> list[BenchRow]:
    """Benchmark ``ops`` × ``sizes`` (nccl-tests' sizes, bytes) on the default process group; the
    rows on its rank 0, an empty list elsewhere. ``enable`` goes to ``live.enable`` (store, clock…)."""
    import torch
    import torch.distributed as dist

    import live

    if iterations < 8:
        raise LiveError(f"iterations must be at least 8 per size (NCCL's default and some trials), got {iterations}")
    if live.current() is not None and not live.current().finished:
        raise LiveError("live tuning is already on in this process; the benchmark runs its own")
    session = live.enable(budget=iterations - 4, quiet=True, interference=1.0 if interference else 0.0,
                          keep_open=True, **enable)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    rows = []
    with _gemm_load(device) if interference else contextlib.nullcontext():
        for op in ops:
            for nbytes in sizes:
                call = _collective(op, nbytes, dtype, device)
                if op in TUNED_OPS:
                    for _ in range(iterations):
                        call()
                        session.step()
                else:
                    rows.append(_untuned(session, op, nbytes, dtype, call, device, iterations))
    session.close()
    if dist.get_rank() != 0:
        return []
    rows += [_tuned_row(t, session) for t in session.tasks()
             if (t.task.op, t.task.nbytes, t.task.dtype) in {(op, n, dtype) for op in ops for n in sizes}]
    return sorted(rows, key=lambda r: (BENCH_OPS.index(r.task.op), r.task.nbytes))


def _tuned_row(t: Any, session: Any) -> BenchRow:
    r = t.result
    return BenchRow(task=t.task, default=t.session.default, default_us=t.session.search.score(t.session.default),
                    winner=r.winner if r else None, tuned_us=r.time_us if r else None, trials=t.session.search.trials,
                    interference=session.settings.interference, hardware=session.hardware,
                    nccl_version=".".join(map(str, session.time_source().nccl_version)))


def _untuned(session: Any, op: Op, nbytes: int, dtype: str, call: Any, device: Any, n: int) -> BenchRow:
    """AllToAll: NCCL's own run, timed (CUDA events on a GPU, else the time source per call)."""
    import torch
    import torch.distributed as dist

    source = session.time_source()
    world = dist.get_world_size()
    task = Task(op, nbytes, world, dtype, group_shape(world, max(world // local_world_size(), 1)))
    default = source.default_config(task) if source.ready(task) else None
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        call()
        start.record()
        for _ in range(n):
            call()
        stop.record()
        torch.cuda.synchronize()
        time_us = start.elapsed_time(stop) * 1e3 / n
    else:
        for _ in range(n):
            call()
        times = [source.time_us(task, default, None) for _ in range(n)]
        time_us = sum(times) / n
    return BenchRow(task=task, default=default, default_us=time_us, winner=None, tuned_us=None, trials=0,
                    interference=session.settings.interference, hardware=session.hardware,
                    nccl_version=".".join(map(str, session.time_source().nccl_version)))


def _collective(op: Op, nbytes: int, dtype: str, device: Any):
    """A function that issues one ``op`` of nccl-tests' size ``nbytes`` on the default group."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    torch_dtype = getattr(torch, dtype)
    count = max(nbytes // DTYPE_BYTES[dtype], world)
    count -= count % world
    whole = torch.ones(count, dtype=torch_dtype, device=device)
    part = torch.ones(count // world, dtype=torch_dtype, device=device)
    if op is Op.ALLREDUCE:
        return lambda: dist.all_reduce(whole)
    if op is Op.ALLGATHER:
        return lambda: dist.all_gather_into_tensor(whole, part)
    if op is Op.REDUCESCATTER:
        return lambda: dist.reduce_scatter_tensor(part, whole)
    if op is Op.BROADCAST:
        return lambda: dist.broadcast(whole, src=0)
    if op is Op.ALLTOALL:
        out = torch.empty_like(whole)
        return lambda: dist.all_to_all_single(out, whole)
    raise LiveError(f"the benchmark runs {', '.join(map(str, BENCH_OPS))}, not {op}")


@contextlib.contextmanager
def _gemm_load(device: Any) -> Iterator[None]:
    """Multiply matrices on another thread (and CUDA stream) until the block ends."""
    import torch

    done = threading.Event()
    side = GEMM_SIDE[device.type]
    a = torch.randn(side, side, device=device)

    def work() -> None:
        stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            while not done.is_set():
                a @ a
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def measurements(rows: Sequence[BenchRow]) -> list[Measurement]:
    """The rows as store records: NCCL's default and the winner of each, their scores as times."""
    out = []
    for r in rows:
        for config, time_us in ((r.default, r.default_us), (r.winner, r.tuned_us)):
            if (config is not None or time_us == r.default_us) and time_us is not None and math.isfinite(time_us):
                out.append(Measurement(task=r.task, config=config, time_us=time_us, source="live", hardware=r.hardware,
                                       nccl_version=r.nccl_version, interference=r.interference))
    return out


def table(rows: Sequence[BenchRow]) -> str:
    """nccl-tests' columns (size, count, type, time, algbw, busbw), at NCCL's default and tuned.

    >>> from tuner.config import Algo, Proto, Transport
    >>> row = BenchRow(task=Task(Op.ALLREDUCE, 1 << 20, 8), default=Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8,
    ...                512, 1 << 19), default_us=40.0, winner=Config(Algo.RING, Proto.LL128, Transport.P2P, 16, 640,
    ...                576000), tuned_us=32.0, trials=40, interference=0.0, hardware="dgx-h100:8x1",
    ...                nccl_version="2.28.9")
    >>> print(table([row]))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    #  allreduce on 8 ranks (dgx-h100:8x1, NCCL 2.28.9)
    #      size     count    type   default us  algbw  busbw   tuned us  algbw  busbw  speedup trials  winner
        1048576    262144   float32      40.00  26.21  45.88      32.00  32.77  57.34    1.25x     40  ring/ll128...
    """
    lines, header = [], None
    for r in rows:
        t = r.task
        title = f"#  {t.op} on {t.nranks} ranks ({r.hardware}, NCCL {r.nccl_version})" + (
            ", GEMM beside it" if r.interference else "")
        if title != header:
            header = title
            lines += [title, f"#  {'size':>8} {'count':>9} {'type':>7} {'default us':>12} {'algbw':>6} {'busbw':>6} "
                             f"{'tuned us':>10} {'algbw':>6} {'busbw':>6} {'speedup':>8} {'trials':>6}  winner"]
        tuned = (f"{r.tuned_us:>10.2f} {t.algbw_gbps(r.tuned_us):>6.2f} {t.busbw_gbps(r.tuned_us):>6.2f} "
                 f"{r.speedup:>7.2f}x" if r.tuned_us else f"{'-':>10} {'-':>6} {'-':>6} {'-':>8}")
        default = f"{r.default_us:>12.2f} {t.algbw_gbps(r.default_us):>6.2f} {t.busbw_gbps(r.default_us):>6.2f}"
        lines.append(f"   {t.nbytes:>8} {t.count:>9} {t.dtype:>7} {default} {tuned} {r.trials:>6}  "
                     f"{r.winner if r.winner else 'not tuned (point-to-point)' if t.op not in TUNED_OPS else '-'}")
    return "\n".join(lines)

