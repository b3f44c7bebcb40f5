"""Measure, on a real GPU, the shape-dependent compute curves of the twin's compute model (``twin.compute``).

What it times, each GPU-side through CUDA-graph replays of back-to-back launches (so the numbers
are kernel time plus the gap between kernels, not the host's launch cost), unless it says "wall":

* ``gemm``: matrix products of real transformer layers: the QKV, attention-out, MLP up and down
  projections of hidden 1024-16384 at tensor-parallel 1-8 and 512-32768 tokens, forward
  (``tokens × out/tp × in``) and both backward products (data gradient and weight gradient), in
  bf16; a subset in fp16, tf32 and fp8 (``torch._scaled_mm``, e4m3);
* ``wave``: products whose tile count crosses whole waves over the SMs (k = 8192, m = 1408,
  n stepping by 128), to show wave quantisation;
* ``attention``: causal attention forward and forward + backward (wall-timed with events), fused
  (``scaled_dot_product_attention``, flash) and unfused (``baddbmm``, softmax, ``bmm``);
* ``memory``: copy, add, GELU, layer norm and softmax over 2 KiB to 1 GiB (bytes read + written);
* ``floor``: the GPU time of a one-element kernel, and the host (wall) time per eager PyTorch op
  of several kinds, with and without autograd, and of a small transformer layer's forward and
  backward (host-bound: what a framework costs whatever the GPU does);
* ``optimizer``: fused AdamW steps, gradient-norm clipping and AMP's unscale check over
  1M-256M fp32 parameters;
* ``under_spin``: products of one wave, one tile more, and many waves while ``k`` spinning CTAs
  (one per SM, as an NCCL channel) hold SMs: wave quantisation under communication.

Run on the GPU machine, from the repository root (torch with CUDA; CuPy for the spinning kernel):
``PYTHONPATH=. python benchmarks/gpu_compute_sweep.py --json FILE``.  Every section has a time
budget so the whole run ends in about eight minutes; rows left out for time are counted in
``skipped`` (on the H200 none were: the run took 56 s).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import traceback

import torch
import torch.nn.functional as F

from benchmarks.gpu_timing import events, timed_ms

HIDDENS = (1024, 2048, 4096, 8192, 12288, 16384)
TPS = (1, 2, 4, 8)
TOKENS = (512, 2048, 8192, 32768)
MAX_GEMM_FLOPS = 4e12
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32}
SPIN_KERNEL = r"""
extern "C" __global__ void spin(long long cycles, int* flag) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0) *flag = 1;
}
"""
SM_HOLDING_SHARED_BYTES = 116 << 10
"""More than half an SM's shared memory: no two spinning CTAs share an SM."""


def eager_ms(work, repeats: int = 3) -> float:
    """Median ms of ``work()`` on the current stream, by events (after one warm-up)."""
    return timed_ms(None, work, repeats)


def graph_us(work, target_ms: float = 2.0, repeats: int = 3) -> float:
    """GPU µs of one ``work()``: a CUDA graph of ``n`` back-to-back calls, replayed, divided by ``n``."""
    once = eager_ms(work, repeats=1)
    n = int(max(1, min(200, target_ms / max(once, 1e-3))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            work()
    ms = eager_ms(graph.replay, repeats)
    del graph
    return ms * 1e3 / n


def layer_gemms() -> list[tuple[str, int, int, int, int, int]]:
    """(name, hidden, tp, m, n, k) of every product of the four projections, forward and backward."""
    out, seen = [], set()
    for h in HIDDENS:
        for tp in TPS:
            for tokens in TOKENS:
                for proj, n_out, k_in in (("qkv", 3 * h // tp, h), ("attn_out", h, h // tp),
                                          ("mlp_up", 4 * h // tp, h), ("mlp_down", h, 4 * h // tp)):
                    for phase, (m, n, k) in (("fwd", (tokens, n_out, k_in)), ("dgrad", (tokens, k_in, n_out)),
                                             ("wgrad", (n_out, k_in, tokens))):
                        if (m, n, k) in seen or 2 * m * n * k > MAX_GEMM_FLOPS:
                            continue
                        seen.add((m, n, k))
                        out.append((f"{proj}.{phase}", h, tp, m, n, k))
    return out


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end, self.skipped = time.monotonic() + seconds, 0

    def left(self) -> bool:
        if time.monotonic() < self.end:
            return True
        self.skipped += 1
        return False


def gemm_us(dtype: str, m: int, n: int, k: int) -> float:
    if dtype == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        return graph_us(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    t = DTYPES[dtype]
    a = torch.randn(m, k, device="cuda", dtype=t)
    b = torch.randn(k, n, device="cuda", dtype=t)
    c = torch.empty(m, n, device="cuda", dtype=t)
    return graph_us(lambda: torch.matmul(a, b, out=c))


def gemm_rows(seconds: float) -> tuple[list[dict], int]:
    budget, rows = Budget(seconds), []
    shapes = layer_gemms()
    plan = [("bfloat16", s) for s in shapes]
    plan += [(d, s) for d in ("float16", "fp8", "tf32") for s in shapes if s[0].endswith("fwd") and s[2] in (1, 8)]
    plan += [("bfloat16", ("wave", 0, 0, 1408, n, 8192)) for n in range(128, 6144 + 1, 128)]
    for dtype, (name, h, tp, m, n, k) in plan:
        if not budget.left():
            continue
        try:
            us = gemm_us(dtype, m, n, k)
        except (RuntimeError, TypeError) as err:  # fp8 where the library has none: say so, go on
            rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "error": str(err)[:200]})
            continue
        rows.append({"what": name, "hidden": h, "tp": tp, "dtype": dtype, "m": m, "n": n, "k": k, "us": us,
                     "tflops": 2 * m * n * k / us / 1e6})
        torch.cuda.empty_cache()
    return rows, budget.skipped


def causal_unfused(q, k, v):
    scores = torch.baddbmm(torch.empty(q.shape[0], q.shape[1], k.shape[1], device=q.device, dtype=q.dtype), q,
                           k.transpose(1, 2), beta=0.0, alpha=q.shape[-1] ** -0.5)
    mask = torch.ones(q.shape[1], k.shape[1], device=q.device, dtype=torch.bool).triu(1)
    probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return torch.bmm(probs, v)


def attention_rows(seconds: float) -> tuple[list[dict], int]:
    budget, rows = Budget(seconds), []
    for head_dim in (64, 128):
        for heads in (8, 16, 32, 64):
            for seq in (512, 1024, 2048, 4096, 8192):
                batch = max(1, 16384 // seq)
                for kind in ("flash", "unfused"):
                    if not budget.left() or (kind == "unfused" and batch * heads * seq * seq * 2 > 8 << 30):
                        continue
                    shape = (batch, heads, seq, head_dim)
                    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                               for _ in range(3))
                    if kind == "flash":
                        def fwd(q=q, k=k, v=v):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    else:
                        def fwd(q=q, k=k, v=v, shape=shape):
                            flat = [t.reshape(shape[0] * shape[1], shape[2], shape[3]) for t in (q, k, v)]
                            return causal_unfused(*flat)
                    with torch.no_grad():
                        fwd_us = graph_us(fwd)
                    grad = torch.randn_like(fwd())

                    def both(fwd=fwd, grad=grad):
                        fwd().backward(grad)
                    both_us = eager_ms(both, repeats=3) * 1e3
                    flops = 4 * batch * heads * seq * seq * head_dim / 2  # causal: half the square
                    rows.append({"kind": kind, "batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim,
                                 "fwd_us": fwd_us, "fwd_bwd_us": both_us, "fwd_tflops": flops / fwd_us / 1e6})
                    del q, k, v, grad
                    torch.cuda.empty_cache()
    return rows, budget.skipped


def memory_rows(seconds: float) -> tuple[list[dict], int]:
    budget, rows = Budget(seconds), []
    for log2 in range(10, 30, 2):
        rows += memory_at(1 << log2, budget)
        torch.cuda.empty_cache()
    return rows, budget.skipped


def memory_at(n: int, budget: Budget) -> list[dict]:
    """Memory-bound ops over ``n`` bf16 elements: (op, bytes moved per element pass count)."""
    x, y = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)
    z = torch.empty_like(x)
    width = min(n, 1024)
    x2 = x.view(-1, width)
    w = torch.ones(width, device="cuda", dtype=torch.bfloat16)
    ops = {"copy": (lambda: z.copy_(x), 2), "add": (lambda: torch.add(x, y, out=z), 3),
           "gelu": (lambda: F.gelu(x), 2), "layernorm": (lambda: F.layer_norm(x2, (width,), w, w), 2),
           "softmax": (lambda: torch.softmax(x2, dim=-1), 2)}
    rows = []
    for op, (work, passes) in ops.items():
        if budget.left():
            us = graph_us(work)
            rows.append({"op": op, "elements": n, "bytes": passes * 2 * n, "us": us, "gbps": passes * 2 * n / us / 1e3})
    return rows


def host_us(work, n: int = 2000) -> float:
    """Wall µs per ``work()`` when issued back to back in eager mode (the host's cost per op)."""
    for _ in range(50):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            work()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


class TinyLayer(torch.nn.Module):
    """A pre-norm transformer layer (Megatron's order of ops), to time a framework's per-layer host cost."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(a), 0.1)
        return x + F.dropout(self.down(F.gelu(self.up(self.ln2(x)))), 0.1)


def kernels_per_call(work) -> int:
    """GPU kernels one ``work()`` launches (torch profiler's CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile
    work()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def floor_rows() -> list[dict]:
    x = torch.randn(8, device="cuda")
    w = torch.randn(8, 8, device="cuda", requires_grad=True)
    xg = torch.randn(8, 8, device="cuda", requires_grad=True)
    rows = [{"what": "gpu one-element add (graph)", "us": graph_us(lambda: torch.add(x, x, out=x), target_ms=1.0)},
            {"what": "gpu one-element add (eager, back to back)", "us": eager_ms(
                lambda: [torch.add(x, x, out=x) for _ in range(1000)]) * 1e3 / 1000}]
    ops = {"add": lambda: x + x, "add_": lambda: x.add_(1.0), "mul": lambda: x * 2.0,
           "linear": lambda: F.linear(x, w.detach()), "layer_norm": lambda: F.layer_norm(x, (8,)),
           "softmax": lambda: torch.softmax(x, 0), "view": lambda: x.view(2, 4),
           "empty": lambda: torch.empty(8, device="cuda"),
           "cat": lambda: torch.cat([x, x]), "linear+backward": lambda: F.linear(xg, w).sum().backward()}
    for name, work in ops.items():
        rows.append({"what": f"host eager {name}", "us": host_us(work, n=500 if "backward" in name else 2000)})
    for hidden in (64, 1024):
        layer = TinyLayer(hidden, 8).cuda().to(torch.bfloat16)
        inp = torch.randn(1, 16, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with torch.no_grad():
            fwd_us = host_us(lambda layer=layer, inp=inp: layer(inp), n=300)
        both_us = host_us(lambda layer=layer, inp=inp: layer(inp).sum().backward(), n=200)
        rows.append({"what": f"host eager layer fwd h{hidden}", "us": fwd_us,
                     "kernels": kernels_per_call(lambda layer=layer, inp=inp: layer(inp).detach())})
        rows.append({"what": f"host eager layer fwd+bwd h{hidden}", "us": both_us,
                     "kernels": kernels_per_call(lambda layer=layer, inp=inp: layer(inp).sum().backward())})
    return rows


def optimizer_rows(seconds: float) -> tuple[list[dict], int]:
    budget, rows = Budget(seconds), []
    for millions in (1, 16, 64, 256):
        if budget.left():
            rows += optimizer_at(millions << 20)
        torch.cuda.empty_cache()
    return rows, budget.skipped


def optimizer_at(n: int) -> list[dict]:
    """Fused AdamW, gradient clipping and AMP's unscale check over ``n`` fp32 parameters in 16 tensors."""
    params = [torch.nn.Parameter(torch.randn(n // 16, device="cuda")) for _ in range(16)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    grads = [p.grad for p in params]
    found, inv = torch.zeros(1, device="cuda"), torch.ones(1, device="cuda")
    rows = []
    for what, work, bytes_per in (
            ("adamw fused step", opt.step, 16 + 12),
            ("clip_grad_norm", lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True), 4 + 8),
            ("amp unscale check", lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv), 8)):
        us = eager_ms(work, repeats=5) * 1e3
        rows.append({"what": what, "params": n, "bytes": bytes_per * n, "us": us, "gbps": bytes_per * n / us / 1e3})
    return rows


def under_spin_rows(seconds: float) -> tuple[list[dict], int]:
    import cupy as cp
    budget, rows = Budget(seconds), []
    spin = cp.RawKernel(SPIN_KERNEL, "spin")
    spin.max_dynamic_shared_size_bytes = SM_HOLDING_SHARED_BYTES
    flag = cp.zeros(1, dtype=cp.int32)
    low, high = torch.cuda.Stream(), torch.cuda.Stream(priority=-1)

    def spin_for(ctas: int, cycles: int) -> None:
        with cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            spin((ctas,), (128,), (cp.int64(cycles), flag), shared_mem=SM_HOLDING_SHARED_BYTES)

    with torch.cuda.stream(high):
        cycles_per_ms = 50_000_000 / eager_ms(lambda: spin_for(1, 50_000_000))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k in ((1408, 3072, 8192), (1408, 3200, 8192), (1408, 6144, 8192), (8192, 8192, 8192), (2048, 2048, 2048)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        with torch.cuda.stream(low):
            alone = eager_ms(lambda a=a, b=b, c=c: [torch.matmul(a, b, out=c) for _ in range(20)]) / 20
        for ctas in (1, 2, 4, 8, 12, 16, 33, 66):
            if not budget.left():
                continue
            for _attempt in range(3):
                s0, s1, g0, g1 = events(4)
                torch.cuda.synchronize()
                with torch.cuda.stream(high):
                    s0.record()
                    spin_for(ctas, int(30 * alone * cycles_per_ms + 0.3 * cycles_per_ms))
                    s1.record()
                with torch.cuda.stream(low):
                    time.sleep(0.0002)
                    torch.matmul(a, b, out=c)
                    g0.record()
                    for _ in range(20):
                        torch.matmul(a, b, out=c)
                    g1.record()
                torch.cuda.synchronize()
                nested = s0.elapsed_time(g0) >= 0 and g1.elapsed_time(s1) >= 0
                if nested:
                    break
            rows.append({"m": m, "n": n, "k": k, "ctas": ctas, "sms": sms, "alone_us": alone * 1e3,
                         "under_us": g0.elapsed_time(g1) / 20 * 1e3, "nested": nested})
    return rows, budget.skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the numbers to this file")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every section's time budget")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "cuda": torch.version.cuda, "host": platform.node(), "measured": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/gpu_compute_sweep.py --json FILE", "skipped": {}}

    def section(name, fn, *budget):
        t0 = time.monotonic()
        try:
            result = fn(*(b * args.scale for b in budget))
        except Exception:  # one device call per session: a broken section is recorded, the rest still run
            out.setdefault("errors", {})[name] = traceback.format_exc()[-2000:]
            print(out["errors"][name], flush=True)
            result = ([], 0)
        rows, skipped = result if isinstance(result, tuple) else (result, 0)
        out[name], out["skipped"][name] = rows, skipped
        print(f"{name}: {len(rows)} rows, {skipped} skipped, {time.monotonic() - t0:.0f} s", flush=True)
        with open(args.json, "w") as file:  # after every section: a killed run keeps what it has
            json.dump(out, file, indent=0)

    section("floor", floor_rows)
    section("memory", memory_rows, 40)
    section("optimizer", optimizer_rows, 30)
    section("under_spin", under_spin_rows, 40)
    section("attention", attention_rows, 70)
    section("gemm", gemm_rows, 220)


if __name__ == "__main__":
    main()
