"""Measure, on a real GPU, the compute constants of the twin's trace replay (``twin/compute/``).

1. Ceilings: the share of data-sheet peak that large bf16/fp16 matrix products reach at
   transformer shapes (``compute.flops_fraction`` of ``twin.params``), and that a device-to-device copy reaches
   (``compute.hbm_fraction``).
2. Interference: a copy loop on ``k`` CTAs (NCCL runs one CTA per channel, spinning for the
   kernel's whole life) beside a stream of bf16 matrix products.  The replay says the products
   run at ``1 - k / SMs`` of their speed alone and the copy at ``compute.copy_rate_under_compute`` of
   its rate alone; this measures both.

Run on the GPU machine (needs torch with CUDA and cupy): ``python benchmarks/gpu_physics.py [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
import torch

from twin.hardware import gpu_spec, peak_tflops
from twin.params import DEFAULT_PARAMS

COPY_KERNEL = r"""
extern "C" __global__ void copy_loop(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n, int passes) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
"""

GEMM_SHAPES = ((16384, 2560, 7680), (16384, 4096, 14336), (8192, 8192, 8192))
CTAS = (1, 4, 16, 32, 64)
THREADS = 512


def event_ms(stream: torch.cuda.Stream, work) -> float:
    """Elapsed ms of ``work()`` enqueued on ``stream``, by events on that stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        work()
        end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(stream, work, repeats: int = 10) -> float:
    work()
    torch.cuda.synchronize()
    return sorted(event_ms(stream, work) for _ in range(repeats))[repeats // 2]


def ceilings(gpu) -> list[dict]:
    stream = torch.cuda.current_stream()
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(stream, lambda: y.copy_(x))
    rows = [{"what": "device copy 1 GiB", "achieved": 2 * x.numel() * 4 / ms / 1e6, "peak": gpu.hbm_gbps,
             "unit": "GB/s", "model": DEFAULT_PARAMS.compute.hbm_fraction}]
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        for m, k, n in GEMM_SHAPES:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            ms = median_ms(stream, lambda: a @ b)  # noqa: B023
            rows.append({"what": f"{name} matmul {m}x{k}x{n}", "achieved": 2 * m * k * n / ms / 1e9,
                         "peak": peak_tflops(gpu, name), "unit": "TFLOP/s",
                         "model": DEFAULT_PARAMS.compute.flops_fraction})
    return rows


def interference(gpu) -> list[dict]:
    """GEMM speed and copy rate, each alone and together, for k copy CTAs."""
    kernel = cp.RawModule(code=COPY_KERNEL).get_function("copy_loop")
    n16 = (256 << 20) // 16
    src = cp.random.default_rng(0).random(n16 * 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    a = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    comm, compute = torch.cuda.Stream(), torch.cuda.Stream()
    gemm_ms = median_ms(compute, lambda: a @ b)
    rows = []
    for ctas in CTAS:
        def copy(ctas=ctas, passes=1):
            with cp.cuda.ExternalStream(comm.cuda_stream):
                kernel((ctas,), (THREADS,), (src, dst, cp.int64(n16), cp.int32(passes)))
        copy_alone_ms = median_ms(comm, copy)
        passes = max(1, round(40 * gemm_ms / copy_alone_ms))  # the copy outlasts 40 products
        torch.cuda.synchronize()
        c0, c1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g0, g1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(comm):
            c0.record()
            copy(passes=passes)
            c1.record()
        with torch.cuda.stream(compute):
            for _ in range(5):
                a @ b  # let the copy get going
            g0.record()
            for _ in range(20):
                a @ b
            g1.record()
        torch.cuda.synchronize()
        together_gemm_ms = g0.elapsed_time(g1) / 20
        copy_together_ms = c0.elapsed_time(c1) / passes
        rows.append({"ctas": ctas, "copy_gbps_alone": 2 * n16 * 16 / copy_alone_ms / 1e6,
                     "copy_ratio": copy_alone_ms / copy_together_ms, "gemm_ratio": gemm_ms / together_gemm_ms,
                     "gemm_ratio_model": 1 - ctas / gpu.sm_count,
                     "copy_ratio_model": DEFAULT_PARAMS.compute.copy_rate_under_compute})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    gpu = gpu_spec(torch.cuda.get_device_name())
    print(f"# {torch.cuda.get_device_name()} ({gpu.model}, {gpu.sm_count} SMs), torch {torch.__version__}")
    ceil = ceilings(gpu)
    print(f"\n{'ceiling':<32} {'achieved':>10} {'peak':>8} {'share':>6} {'model':>6}")
    for r in ceil:
        print(f"{r['what']:<32} {r['achieved']:>10.1f} {r['peak']:>8.1f} {r['achieved'] / r['peak']:>6.2f} "
              f"{r['model']:>6.2f}  {r['unit']}")
    inter = interference(gpu)
    print(f"\n{'copy CTAs':>9} {'copy GB/s alone':>16} {'gemm speed':>11} {'model':>6} {'copy rate':>10} {'model':>6}")
    for r in inter:
        print(f"{r['ctas']:>9} {r['copy_gbps_alone']:>16.1f} {r['gemm_ratio']:>11.2f} {r['gemm_ratio_model']:>6.2f} "
              f"{r['copy_ratio']:>10.2f} {r['copy_ratio_model']:>6.2f}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"device": torch.cuda.get_device_name(), "ceilings": ceil, "interference": inter}, file, indent=1)


if __name__ == "__main__":
    main()
