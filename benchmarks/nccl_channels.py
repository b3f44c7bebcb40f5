"""Measure what one NCCL channel moves, on real GPUs, to check the twin's CTA model.

The twin says a channel (one CTA) is limited by the bytes it loads and stores, and that each
ring primitive costs a known number of them per byte sent (``memory_ops_per_byte``).  If so,
with few channels (so that the links are not the limit) the bytes each GPU sends per second
per channel fall in the ratio of those counts: for 2 ranks AllReduce and AllGather cost 3
operations per byte sent, ReduceScatter 5.  This script times Ring/Simple AllReduce,
AllGather and ReduceScatter on every GPU of one host with 1…16 channels (``min_ctas =
max_ctas``), the protocols' small-message latencies, and prints sent GB/s per channel.

    torchrun --nproc_per_node=N benchmarks/nccl_channels.py [--json FILE]

Needs torch with CUDA and NCCL; NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

CHANNELS = (1, 2, 4, 8, 16)
BIG = 256 << 20
SMALL = (8, 4096, 65536)


def timed_us(fn, iters: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def group_with_channels(ranks: list[int], nch: int):
    opts = dist.ProcessGroupNCCL.Options()
    opts.config.min_ctas = nch
    opts.config.max_ctas = nch
    return dist.new_group(ranks, pg_options=opts)


def ops(group, n: int, nbytes: int) -> dict:
    """Collectives on ``nbytes`` (nccl-tests' size) and the bytes each GPU sends."""
    count = nbytes // 4
    full = torch.ones(count, device="cuda")
    part = torch.ones(count // n, device="cuda")
    return {
        "allreduce": (lambda: dist.all_reduce(full, group=group), 2 * (n - 1) / n * nbytes),
        "allgather": (lambda: dist.all_gather_into_tensor(full, part, group=group), (n - 1) / n * nbytes),
        "reducescatter": (lambda: dist.reduce_scatter_tensor(part, full, group=group), (n - 1) / n * nbytes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows here (rank 0)")
    args = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    ranks = list(range(n))
    rows = []
    for nch in CHANNELS:
        group = group_with_channels(ranks, nch)
        for name, (fn, sent) in ops(group, n, BIG).items():
            t = timed_us(fn)
            rows.append({"kind": "bandwidth", "op": name, "nranks": n, "nchannels": nch, "nbytes": BIG,
                         "time_us": t, "sent_gbps_per_channel": sent / (t * 1e3) / nch})
        dist.destroy_process_group(group)
    for nbytes in SMALL:
        fn, _ = ops(dist.group.WORLD, n, nbytes)["allreduce"]
        rows.append({"kind": "latency", "op": "allreduce", "nranks": n, "nbytes": nbytes,
                     "time_us": timed_us(fn, iters=200, warmup=20)})
    if rank == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"{torch.cuda.get_device_name()}, {n} ranks, env {env}")
        for r in rows:
            extra = f"{r['sent_gbps_per_channel']:8.2f} GB/s sent per channel" if r["kind"] == "bandwidth" else ""
            print(f"{r['op']:>14} nch={r.get('nchannels', '-'):>3} {r['nbytes']:>10} B {r['time_us']:10.1f} us {extra}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"env": env, "nccl": torch.cuda.nccl.version(), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
