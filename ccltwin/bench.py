"""``ccltwin bench``: collectives over a size range on this job's GPUs, NCCL's default against live
tuning, printed in nccl-tests' columns (``live.bench``).

    torchrun --nproc-per-node 8 -m ccltwin bench --ops allreduce,allgather --sizes 1KiB:64MiB:16 --store tuning.db

It runs on every rank of a ``torchrun`` job (it initialises the default process group: NCCL on
GPUs, gloo without); rank 0 prints. Every trial goes into the live store as it is measured
(``--store``, else ``live.enable``'s default); with ``--store`` each row's default and winner are
added to it as well, under the job's cluster identity.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from ccltwin.simulate import DTYPE_HELP, SIZE_UNITS
from live import bench as live_bench
from traces.errors import CcltwinError
from traces.task import parse_dtype, parse_op, whole_elements
from traces.units import parse_size_range
from tuner.codec import config_to_dict, task_to_dict
from tuner.store import Store

LAUNCH = "torchrun --nproc-per-node N -m ccltwin bench ..."


def bench(
    ops: Annotated[str, typer.Option(help="Collectives, comma separated.")] = ",".join(map(str, live_bench.BENCH_OPS)),
    sizes: Annotated[str, typer.Option(help=f"MIN:MAX[:FACTOR] or a comma list, as nccl-tests' -b/-e/-f; {SIZE_UNITS}")
                     ] = "1KiB:64MiB:16",
    iterations: Annotated[int, typer.Option(min=8, help="Iterations per collective and size (NCCL's default "
                                                        "first, then the trials).")] = 120,
    dtype: Annotated[str, typer.Option(help=DTYPE_HELP)] = "float32",
    interference: Annotated[bool, typer.Option("--interference", help="Run a GEMM beside the collectives.")
                            ] = False,
    search: Annotated[str, typer.Option(help="Live search: ours, autoccl or default.")] = "ours",
    store: Annotated[Path | None, typer.Option(help="SQLite tuning store: the trials, then the rows.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array, one object per row.")] = False,
) -> None:
    """Benchmark collectives under live tuning on every rank of a torchrun job (rank 0 prints)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise CcltwinError(f"ccltwin bench runs on every rank of a torchrun job: {LAUNCH}")
    the_ops = [parse_op(name) for name in ops.split(",")]
    the_sizes = parse_size_range(sizes)
    the_dtype = parse_dtype(dtype)
    for n in the_sizes:
        whole_elements(n, the_dtype, f"--sizes {sizes}")
    import torch  # only this command needs torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    enable = {"search": search} | ({"store": str(store)} if store is not None else {})
    rows = live_bench.run(the_ops, the_sizes, iterations=iterations, dtype=the_dtype, interference=interference,
                          **enable)
    dist.barrier()
    dist.destroy_process_group()
    if not rows:  # every rank but 0
        return
    if store is not None:
        with Store(store) as db:
            added = db.add_many(live_bench.measurements(rows))
    if as_json:
        typer.echo(json.dumps([_as_json(r) for r in rows], indent=1))
    else:
        typer.echo(live_bench.table(rows))
    if store is not None:
        typer.echo(f"added {len(added)} rows (NCCL's default and the winner per size) to {store}", err=as_json)


def _as_json(r) -> dict:
    return {**task_to_dict(r.task), "hardware": r.hardware, "nccl_version": r.nccl_version,
            "interference": r.interference, "default": None if r.default is None else config_to_dict(r.default),
            "default_us": r.default_us, "winner": None if r.winner is None else config_to_dict(r.winner),
            "tuned_us": r.tuned_us, "speedup": r.speedup, "trials": r.trials}
