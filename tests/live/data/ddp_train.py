"""A small DDP job on gloo with the one added line ``live.enable()`` (tests/live/test_ddp.py).

    torchrun --nproc-per-node 2 tests/live/data/ddp_train.py OUT_DIR ITERATIONS

Each rank writes its loss per iteration to ``OUT_DIR/loss<rank>.json``. Two tasks are tuned
side by side: DDP's gradient AllReduce (one 20,800-byte bucket, issued from C++ by the reducer)
and a plain ``dist.all_reduce`` of the loss statistics the job logs (64 floats).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import live


def train(out: str, iterations: int, **enable) -> list[float]:
    """Train ``iterations`` steps; ``enable`` goes to ``live.enable`` (the forked test jobs pass a time source)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    live.enable(**enable)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(iterations):
        x = torch.randn(8, 64, generator=data)
        loss = (ddp(x) - x[:, :16]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        stats = torch.stack([loss.detach(), x.abs().mean()]).repeat(32)
        dist.all_reduce(stats)  # the job's logging: the mean loss over ranks
        optimizer.step()  # an iteration boundary for live tuning
        losses.append(loss.item())
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"loss{rank}.json").write_text(json.dumps(losses))
    return losses


if __name__ == "__main__":
    train(sys.argv[1], int(sys.argv[2]))
    dist.destroy_process_group()
