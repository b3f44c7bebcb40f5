"""Time AllReduce over message sizes on every GPU of one host, to check the twin on a real machine.

nccl-tests times back-to-back calls; this does the same through torch.distributed, twice: calls
issued one by one from Python (host overheads included) and calls replayed from one CUDA graph
(GPU time alone).  NCCL_ALGO / NCCL_PROTO from the environment apply, as in nccl-tests.

    torchrun --nproc_per_node=N benchmarks/nccl_sweep.py [--json FILE]

Needs torch with CUDA and NCCL; NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

SIZES = [8 << (2 * i) for i in range(15)]  # 8 B … 2 GiB in steps of 4
ITERS, WARMUP = 20, 5


def eager_us(buf: torch.Tensor) -> float:
    for _ in range(WARMUP):
        dist.all_reduce(buf)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    dist.barrier()
    start.record()
    for _ in range(ITERS):
        dist.all_reduce(buf)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / ITERS


def graph_us(buf: torch.Tensor) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP):
            dist.all_reduce(buf)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ITERS):
            dist.all_reduce(buf)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / ITERS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows here (rank 0)")
    args = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    n = dist.get_world_size()
    rows = []
    for nbytes in SIZES:
        buf = torch.ones(max(nbytes // 4, 1), device="cuda")
        rows.append({"nbytes": nbytes, "eager_us": eager_us(buf), "graph_us": graph_us(buf)})
        del buf
    if rank == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"{torch.cuda.get_device_name()}, {n} ranks, env {env}")
        for r in rows:
            busbw = r["nbytes"] * 2 * (n - 1) / n / (r["graph_us"] * 1e3)
            print(f"{r['nbytes']:>12} B  eager {r['eager_us']:9.1f} us  graph {r['graph_us']:9.1f} us  "
                  f"busbw(graph) {busbw:7.2f} GB/s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"env": env, "nranks": n, "nccl": torch.cuda.nccl.version(), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
