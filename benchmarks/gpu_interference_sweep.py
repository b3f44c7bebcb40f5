"""Measure, on a real GPU, how compute and an NCCL-like channel copy slow each other, by the compute's shape.

``benchmarks/interference.py`` measured one GEMM and one elementwise kernel; this adds the
dependence the twin's compute model (``twin.compute.interference``) describes:

* ``under_spin``: matrix products of one wave, one tile more and many waves while ``k`` spinning
  CTAs (one per SM, touching no memory) hold SMs: wave quantisation under held SMs;
* ``pairs``: for computes of different memory intensity (GEMMs of several shapes, a streaming add,
  a layer norm) and a channel copy on ``k`` CTAs of 512 threads: the copy's rate while the compute
  runs, and the compute's speed while the copy runs, each relative to alone; every overlap is
  checked with events (a run whose windows do not nest is measured again, and flagged if it never
  does).

Run on the GPU machine (torch with CUDA, CuPy), from the repository root:
``PYTHONPATH=. python benchmarks/gpu_interference_sweep.py --json FILE``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import cupy as cp
import torch
import torch.nn.functional as F

from benchmarks.gpu_timing import overlap, timed_ms
from benchmarks.interference import KERNELS, SM_HOLDING_SHARED_BYTES

COPY_WORDS = (512 << 20) // 16
SPIN_SHAPES = ((1408, 768, 8192), (1408, 1536, 8192), (1408, 3072, 8192), (1408, 3200, 8192), (2048, 2048, 2048),
               (4096, 4096, 4096), (8192, 8192, 8192))
SPIN_CTAS = (1, 2, 4, 8, 12, 16, 33, 66)
PAIR_CTAS = (1, 4, 16, 64)
PAIR_GEMMS = ((8192, 8192, 8192), (16384, 4096, 14336), (1408, 3072, 8192), (32768, 1024, 1024), (512, 16384, 16384))


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def repeat(work, times: int) -> None:
    """``work()`` ``times`` times, keeping none of its results alive (a layer norm's are 512 MiB)."""
    for _ in range(times):
        work()


def nested_ratio(first_stream, first, second_stream, second, alone_ms: float) -> tuple[float, bool]:
    """``alone_ms`` over the second's time inside the first (median of 3 nested runs, up to 9 tries)."""
    ratios, tries = [], 0
    while len(ratios) < 3 and tries < 9:
        tries += 1
        _, ms, inside = overlap(first_stream, first, second_stream, second)
        if inside:
            ratios.append(alone_ms / ms)
    return (statistics.median(ratios), True) if ratios else (alone_ms / ms, False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    copy_kernel, spin_kernel = cp.RawKernel(KERNELS, "channel_copy"), cp.RawKernel(KERNELS, "spin")
    for kernel in (copy_kernel, spin_kernel):
        kernel.max_dynamic_shared_size_bytes = SM_HOLDING_SHARED_BYTES
    low, high = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)
    src = cp.random.default_rng(1).random(COPY_WORDS * 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    flag = cp.zeros(1, dtype=cp.int32)

    def copy(ctas: int, passes: int = 1) -> None:
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            copy_kernel((ctas,), (512,), (src, dst, cp.int64(COPY_WORDS // ctas), cp.int32(passes)),
                        shared_mem=SM_HOLDING_SHARED_BYTES)

    def spin_cycles(ctas: int, cycles: int) -> None:
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            spin_kernel((ctas,), (128,), (cp.int64(cycles), flag), shared_mem=SM_HOLDING_SHARED_BYTES)

    warm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(50):
        warm @ warm  # clocks up before the spin kernel's cycles are counted
    cycles_per_ms = 200_000_000 / timed_ms(high, lambda: spin_cycles(1, 200_000_000), repeats=3)

    def spin(ctas: int, ms: float) -> None:
        spin_cycles(ctas, int(ms * cycles_per_ms))
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "cupy": cp.__version__, "host": platform.node(), "measured": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/gpu_interference_sweep.py --json FILE", "cycles_per_ms": cycles_per_ms,
           "under_spin": [], "pairs": []}
    t0 = time.monotonic()
    for m, n, k in SPIN_SHAPES:
        a, b = bf16(m, k), bf16(k, n)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        reps = max(5, int(3.0 / timed_ms(low, lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))))
        work = lambda a=a, b=b, c=c, reps=reps: repeat(lambda: torch.matmul(a, b, out=c), reps)  # noqa: E731
        alone = timed_ms(low, work)
        for ctas in SPIN_CTAS:
            speed, nested = nested_ratio(high, lambda ctas=ctas, alone=alone: spin(ctas, 4 * alone + 2.0),
                                         low, work, alone)
            out["under_spin"].append({"m": m, "n": n, "k": k, "ctas": ctas, "alone_us": alone / reps * 1e3,
                                      "speed": speed, "nested": nested})
    print(f"under_spin: {len(out['under_spin'])} rows, {time.monotonic() - t0:.0f} s", flush=True)
    with open(args.json, "w") as file:
        json.dump(out, file, indent=0)

    x, y = bf16(1 << 28), bf16(1 << 28)
    z = torch.empty_like(x)
    x2 = x.view(-1, 4096)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    computes = {"add 512MiB bf16": (lambda: torch.add(x, y, out=z), 3 * 2 * x.numel(), 0),
                "layernorm 512MiB bf16": (lambda: F.layer_norm(x2, (4096,), w, w), 2 * 2 * x.numel(), 0)}
    for m, n, k in PAIR_GEMMS:
        a, b = bf16(m, k), bf16(k, n)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        computes[f"gemm {m}x{n}x{k}"] = (lambda a=a, b=b, c=c: torch.matmul(a, b, out=c), 2 * (m * k + k * n + m * n),
                                         2 * m * n * k)
    for name, (compute, nbytes, flops) in computes.items():
        one = timed_ms(low, compute)
        for ctas in PAIR_CTAS:
            copy_alone = timed_ms(high, lambda ctas=ctas: copy(ctas))
            passes = max(1, round(2.0 / copy_alone))
            count = max(4, round(12 * passes * copy_alone / one))
            copy_ratio, copy_nested = nested_ratio(
                low, lambda count=count, compute=compute: repeat(compute, count), high,
                lambda ctas=ctas, passes=passes: copy(ctas, passes), copy_alone * passes)
            reps = max(3, round(2.0 / one))
            long_passes = max(1, round(4 * reps * one / copy_alone) + 1)
            speed, compute_nested = nested_ratio(
                high, lambda ctas=ctas, long_passes=long_passes: copy(ctas, long_passes), low,
                lambda reps=reps, compute=compute: repeat(compute, reps), one * reps)
            out["pairs"].append({"compute": name, "compute_us": one * 1e3, "compute_bytes": nbytes, "flops": flops,
                                 "ctas": ctas, "copy_gbps_alone": 2 * 16 * COPY_WORDS / copy_alone / 1e6,
                                 "copy_ratio": copy_ratio, "copy_nested": copy_nested,
                                 "compute_speed": speed, "compute_nested": compute_nested})
        with open(args.json, "w") as file:
            json.dump(out, file, indent=0)
    print(f"pairs: {len(out['pairs'])} rows, {time.monotonic() - t0:.0f} s", flush=True)
    for r in out["under_spin"]:
        print(f"spin {r['m']}x{r['n']}x{r['k']} ctas {r['ctas']:>2}: speed {r['speed']:.3f} nested {r['nested']}")
    for r in out["pairs"]:
        print(f"{r['compute']:<24} ctas {r['ctas']:>2}: copy {r['copy_ratio']:.2f} ({r['copy_nested']}) "
              f"compute {r['compute_speed']:.2f} ({r['compute_nested']})")


if __name__ == "__main__":
    main()
