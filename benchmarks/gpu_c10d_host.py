"""Host time of one ``torch.distributed`` all-reduce call on the GPU machine, against a plain op.

    python benchmarks/gpu_c10d_host.py OUT.json      # on the nvidia-h200 device (one GPU)

One process, an NCCL process group of one rank: c10d's whole host path runs (``ProcessGroupNCCL``:
the work object, the stream events and waits, ``recordStream``, NCCL's enqueue), the NCCL kernel
has no peer to wait for.  Three loops of back-to-back calls, timed on the host without a
synchronisation inside: an in-place multiply (one plain op), ``dist.all_reduce``, and the
all-reduce inside an autograd Function as Megatron's ``_ReduceFromModelParallelRegion`` calls it.
Medians of 15 interleaved rounds of 400 calls, at 2 and 16 MiB (fp16).  What a real TP group adds
(waiting for its peers) is the GPU's, not the host's.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

KINDS = ("add", "allreduce", "function")


class _Reduce(torch.autograd.Function):
    """An all-reduce inside an autograd Function, as Megatron's TP regions call it."""

    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def host_us(kind: str, x: torch.Tensor, group, n: int = 400) -> float:
    """Host µs per call of ``n`` back-to-back calls of ``kind`` (``KINDS``) on ``x``."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        if kind == "allreduce":
            dist.all_reduce(x, group=group)
        elif kind == "function":
            _Reduce.apply(x, group)
        else:
            x.mul_(1.0)
    took = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return took


def main() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    group = dist.new_group([0])
    out: dict = {}
    for mib in (2, 16):
        x = torch.randn(mib << 19, device="cuda", dtype=torch.float16)
        for kind in KINDS:
            host_us(kind, x, group, 50)
        rounds: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(15):
            for kind in KINDS:
                rounds[kind].append(host_us(kind, x, group))
        out[f"{mib}MiB"] = {k: statistics.median(v) for k, v in rounds.items()} | {"rounds": rounds}
        print(mib, {k: round(statistics.median(v), 1) for k, v in rounds.items()}, flush=True)
    out["torch"] = torch.__version__
    out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
