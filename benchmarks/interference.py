"""Compute and NCCL-like copy kernels on one GPU, alone and together; the twin's interference fitted to them.

Two parts, one file:

``--measure FILE`` (on the GPU machine: torch with CUDA, and CuPy for the copy kernel) times

* bf16 matrix products (``GEMM_SHAPES``) and a memory-bound elementwise kernel (``z = x + y``
  over 1 GiB tensors), alone;
* a *channel copy* kernel, the shape of an NCCL Simple channel: ``ctas`` CTAs of ``threads``
  threads, each CTA copying its own contiguous slice with 16-byte loads and stores, over and
  over, on a high-priority stream (as NCCL's kernels are, so that the block scheduler hands it
  SMs as soon as the compute kernel's blocks retire), alone at every ``CTAS`` × ``THREADS``;
* a *spinning* kernel (``ctas`` CTAs that hold their SMs and touch no memory, as an NCCL
  channel waiting for its peer does);
* together: the copy's rate while compute (GEMM or the memory-bound kernel) runs for the whole
  of the copy, and the compute's speed while the copy (or the spinning kernel) runs for the whole
  of the compute; each overlap is checked with events (a run whose windows do not nest is
  measured again).

and writes the raw numbers as JSON.  ``--fit FILE`` (anywhere, CPU only) fits the twin's
``compute.flops_fraction``, ``compute.hbm_fraction``, ``compute.copy_rate_under_compute``
and ``cta.hbm_share``/``cta.threads_at_half_rate`` (the per-CTA copy rate of
``twin.model.protocols.cta_copy_gbps``) on part of the rows and prints predicted against
measured for the rest (``twin.calibrate.kernels`` says which rows are which).

    PYTHONPATH=. python benchmarks/interference.py --measure benchmarks/data/h200-interference.json   # GPU
    python benchmarks/interference.py --fit benchmarks/data/h200-interference.json \
        --earlier benchmarks/data/h200-gpu-physics.json                                 # CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

GEMM_SHAPES = ((8192, 8192, 8192), (16384, 4096, 14336), (16384, 2560, 7680), (4096, 4096, 4096))
CTAS = (1, 2, 4, 8, 16, 32, 64)
THREADS = (64, 128, 256, 512, 1024)
TOGETHER_THREADS = (128, 512)
"""Thread counts of the copy in the runs with compute (NCCL's range: 64 to 640)."""
ELEMENTWISE_ELEMENTS = 1 << 28
"""float32 elements of each of x, y, z in the memory-bound kernel (1 GiB each)."""
COPY_BYTES = 512 << 20
"""Bytes each copy pass reads (and writes): far above the 60 MB L2 whatever the CTA count."""
SM_HOLDING_SHARED_BYTES = 116 << 10
"""Dynamic shared memory each copy or spinning CTA asks for: more than half of an SM's 228 KiB,
so no two of them share an SM (an NCCL channel holds one SM, as the twin assumes)."""

KERNELS = r"""
extern "C" __global__ void channel_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                        long long per_cta, int passes) {
    const uint4* s = src + (long long)blockIdx.x * per_cta;
    uint4* d = dst + (long long)blockIdx.x * per_cta;
    for (int p = 0; p < passes; ++p) {
        #pragma unroll 4
        for (long long i = threadIdx.x; i < per_cta; i += blockDim.x) d[i] = s[i];
        __syncthreads();
    }
}

extern "C" __global__ void spin(long long cycles, int* flag) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0) *flag = 1;
}
"""


def measure(out_path: str) -> None:
    """Time everything the module docstring lists on the current CUDA device; write JSON."""
    import cupy as cp
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    copy_kernel, spin_kernel = cp.RawKernel(KERNELS, "channel_copy"), cp.RawKernel(KERNELS, "spin")
    for kernel in (copy_kernel, spin_kernel):  # one CTA per SM, as the twin assumes of a channel
        kernel.max_dynamic_shared_size_bytes = SM_HOLDING_SHARED_BYTES
    low, high = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)

    from benchmarks.gpu_timing import overlap
    from benchmarks.gpu_timing import timed_ms as timed

    words = COPY_BYTES // 16
    src = cp.random.default_rng(1).random(words * 4, dtype=cp.float32)
    dst = cp.full_like(src, cp.nan)

    def copy(ctas: int, threads: int, passes: int = 1) -> None:
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            copy_kernel((ctas,), (threads,), (src, dst, cp.int64(words // ctas), cp.int32(passes)),
                        shared_mem=SM_HOLDING_SHARED_BYTES)

    # The copy must copy: poison, run once at an awkward shape, compare.
    copy(7, 96)
    torch.cuda.synchronize()
    covered = (words // 7) * 7 * 4
    if not bool(cp.all(dst[:covered] == src[:covered])):
        raise SystemExit("channel_copy copied wrong data")
    flag = cp.zeros(1, dtype=cp.int32)

    def spin_cycles(ctas: int, cycles: int) -> None:
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            spin_kernel((ctas,), (128,), (cp.int64(cycles), flag), shared_mem=SM_HOLDING_SHARED_BYTES)

    cycles_per_ms = 100_000_000 / timed(high, lambda: spin_cycles(1, 100_000_000), repeats=3)

    def spinning(ctas: int, ms: float) -> None:
        spin_cycles(ctas, int(ms * cycles_per_ms))

    gemms = {}
    for m, k, n in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        gemms[(m, k, n)] = (a, b)
    x = torch.rand(ELEMENTWISE_ELEMENTS, device="cuda")
    y = torch.rand(ELEMENTWISE_ELEMENTS, device="cuda")
    z = torch.full_like(x, float("nan"))
    torch.add(x, y, out=z)
    torch.cuda.synchronize()
    if not torch.equal(z[:1000], x[:1000] + y[:1000]):
        raise SystemExit("elementwise kernel wrong")
    main_gemm = gemms[GEMM_SHAPES[0]]
    computes = {"gemm": lambda: torch.matmul(*main_gemm), "elementwise": lambda: torch.add(x, y, out=z)}

    rows: dict[str, list] = {"gemm_alone": [], "elementwise_alone": [], "copy_alone": [], "copy_under": [],
                             "compute_under": []}
    for (m, k, n), (a, b) in gemms.items():
        ms = timed(low, lambda a=a, b=b: torch.matmul(a, b))
        rows["gemm_alone"].append({"m": m, "k": k, "n": n, "flops": 2 * m * k * n, "ms": ms})
    ms = timed(low, computes["elementwise"])
    rows["elementwise_alone"].append({"bytes": 3 * 4 * ELEMENTWISE_ELEMENTS, "ms": ms})
    copy_ms = {}
    for ctas in CTAS:
        for threads in THREADS:
            ms = timed(high, lambda c=ctas, t=threads: copy(c, t))
            copy_ms[(ctas, threads)] = ms
            moved = 2 * 16 * (words // ctas) * ctas
            rows["copy_alone"].append({"ctas": ctas, "threads": threads, "bytes": moved, "ms": ms})
    compute_ms = {"gemm": rows["gemm_alone"][0]["ms"], "elementwise": rows["elementwise_alone"][0]["ms"]}

    def repeat_compute(name: str, count: int):
        return lambda: [computes[name]() for _ in range(count)]

    for name in computes:
        for ctas in CTAS:
            for threads in TOGETHER_THREADS:
                alone = copy_ms[(ctas, threads)]
                # Copy under compute: the compute lasts ~8× the copy alone (the copy may slow 5×).
                passes = max(1, round(5 * compute_ms[name] / alone))
                copies, speeds = [], []
                for _ in range(3):
                    for _attempt in range(3):
                        count = max(8, round(8 * passes * alone / compute_ms[name])) + 4
                        _, copy_together, inside = overlap(
                            low, repeat_compute(name, count), high, lambda c=ctas, t=threads, p=passes: copy(c, t, p))
                        if inside:
                            copies.append(alone * passes / copy_together)
                            break
                    # Compute under copy: the copy lasts ~3× the compute's (slowed) time.
                    count = 10
                    long_passes = max(1, round(4 * count * compute_ms[name] / alone))
                    for _attempt in range(3):
                        _, compute_together, inside = overlap(
                            high, lambda c=ctas, t=threads, p=long_passes: copy(c, t, p), low,
                            repeat_compute(name, count))
                        if inside:
                            speeds.append(count * compute_ms[name] / compute_together)
                            break
                rows["copy_under"].append({"compute": name, "ctas": ctas, "threads": threads,
                                           "copy_ratio": statistics.median(copies) if copies else None,
                                           "runs": len(copies)})
                rows["compute_under"].append({"compute": name, "by": "copy", "ctas": ctas, "threads": threads,
                                              "speed": statistics.median(speeds) if speeds else None,
                                              "runs": len(speeds)})
        for ctas in CTAS:
            count = 10
            speeds = []
            for _ in range(3):
                _, compute_together, inside = overlap(
                    high, lambda c=ctas: spinning(c, 4 * count * compute_ms[name]), low, repeat_compute(name, count))  # noqa: B023
                if inside:
                    speeds.append(count * compute_ms[name] / compute_together)
            rows["compute_under"].append({"compute": name, "by": "spin", "ctas": ctas, "threads": 128,
                                          "speed": statistics.median(speeds) if speeds else None,
                                          "runs": len(speeds)})
    doc = {"device": torch.cuda.get_device_name(), "sm_count": dev.multi_processor_count,
           "torch": torch.__version__, "cupy": cp.__version__, "host": platform.node(),
           "measured": time.strftime("%Y-%m-%d"), "rows": rows}
    with open(out_path, "w") as file:
        json.dump(doc, file, indent=1)
    print(f"# {doc['device']}, {doc['sm_count']} SMs, torch {doc['torch']}, cupy {doc['cupy']}")
    for key, items in rows.items():
        print(f"{key}: {len(items)} rows")
        for r in items:
            print("  ", {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


def fit(path: str, earlier: str | None) -> None:
    """Fit the twin's compute and interference parameters to part of ``path``'s rows, report the rest
    (``earlier``: a ``gpu_physics.py`` JSON whose device copy checks the HBM share)."""
    from twin.calibrate.kernels import fit_kernels, kernel_rows

    with open(path) as file:
        doc = json.load(file)
    other = None
    if earlier:
        with open(earlier) as file:
            other = json.load(file)
    fitted = fit_kernels(kernel_rows(doc, other), doc["device"])
    print(f"# {path}: {doc['device']}, {doc['sm_count']} SMs, measured {doc['measured']} "
          f"(torch {doc['torch']}, cupy {doc['cupy']})")
    print(fitted.table())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--measure", metavar="FILE", help="time the kernels on this GPU and write the JSON here")
    what.add_argument("--fit", metavar="FILE", help="fit the twin's parameters to a file --measure wrote")
    parser.add_argument("--earlier", metavar="FILE", help="with --fit: benchmarks/gpu_physics.py's JSON (its device "
                        "copy is a held-out check of compute.hbm_fraction)")
    args = parser.parse_args()
    if args.measure:
        measure(args.measure)
    else:
        fit(args.fit, args.earlier)


if __name__ == "__main__":
    main()
