"""GPU time of one compute phase from what it computes: its category, shape and element type.

Picture the MLP up-projection of a hidden-4096 layer at tensor-parallel 8 on 8,192 tokens: a
product of ``(m, n, k) = (8192, 2048, 4096)``.  On an H200 (132 SMs) cuBLAS cuts the output into
128×256 tiles, 64 × 8 = 512 of them: three full waves of 132 and a tail of 116, which it spreads
over the SMs in quarter-tile slices of k (stream-K): 464 slices, one more wave.  Each tile's main loop runs
at ``compute.gemm.efficiency`` of an SM's share of tensor peak on ``k + k_overhead`` elements;
a product that moves more bytes than it computes waits on memory instead:

>>> from twin.hardware import gpu_spec
>>> h200 = gpu_spec("h200")
>>> round(gemm_us(h200, 8192, 2048, 4096), 1)  # measured: 176.5 µs
184.7
>>> gemm_waves(h200, 1408, 3072), gemm_waves(h200, 1408, 3072, busy_sms=1)
((1, 0, 132), (2, 0, 131))

The second line is wave quantisation: 1408×3072 is exactly one wave of 132 tiles, so one SM
held by a communication kernel doubles it (measured: 0.51 of its speed alone).

Other GPUs: the same shares of each GPU's data-sheet peak and bandwidth (``twin.hardware``),
with the tile of its architecture (``ARCH_TILES``); only the H200 was measured.
"""

from __future__ import annotations

import math

from twin.hardware import GpuSpec, peak_tflops
from twin.params import DEFAULT_PARAMS, TwinParams

ARCH_TILES = {"volta": (128, 128), "ampere": (128, 256), "ada": (128, 128), "hopper": (128, 256),
              "blackwell": (128, 256)}
"""Output tile (rows, columns) one SM computes in cuBLAS's/CUTLASS's default bf16 kernels per
architecture: 128×256 on Hopper (measured: the H200 sweep steps every 33 tiles of 128×256 =
a quarter wave), CUTLASS's default 128×256 on Ampere, 128×128 elsewhere (assumed)."""
STREAM_K_SLICES = 4
"""The tail of a product (tiles past its last full wave) is spread over all SMs in slices of
this many parts of k (H200 sweep: time steps every quarter wave); a product of less than one
wave is cut finer, to fill the SMs (split-K)."""
MIN_SLICE_K = 256
"""No slice is cut thinner than this many elements of k."""
ATTENTION_TILE = 128
"""Query rows of one flash-attention tile (FlashAttention-2's block on Hopper/Ampere)."""
BYTES = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1, "uint8": 1}
"""Bytes per element of the element types the compute model knows (``DTYPE_ALIASES`` maps other
spellings onto them)."""
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
                 "fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


def peak_per_sm_tflops(gpu: GpuSpec, dtype: str, params: TwinParams) -> float:
    """TFLOP/s one SM's tensor cores reach in a tile's main loop on ``dtype``."""
    g = params.compute.gemm
    fp8 = BYTES.get(dtype) == 1
    peak = peak_tflops(gpu, "fp8_e4m3" if fp8 else dtype)  # float32: CUDA cores (PyTorch's default); tf32 named
    return peak * (g.fp8_efficiency if fp8 else g.tf32_efficiency if dtype == "tf32" else g.efficiency) / gpu.sm_count


def gemm_waves(gpu: GpuSpec, m: int, n: int, batch: int = 1, *, busy_sms: int = 0) -> tuple[int, int, int]:
    """(full waves, tail tiles, free SMs) of a product's output tiles with ``busy_sms`` SMs held.

    The kernel is chosen for the whole GPU: its full waves run one tile per SM, so held SMs
    stretch them into more waves; the tail is what is left of the tiles after them.
    """
    tm, tn = ARCH_TILES[gpu.arch]
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    free = max(1, gpu.sm_count - busy_sms)
    full, tail = divmod(tiles, gpu.sm_count)
    return (math.ceil(full * gpu.sm_count / free) if full else 0), tail, free


def gemm_us(gpu: GpuSpec, m: int, n: int, k: int, dtype: str = "bfloat16", batch: int = 1, *,
            busy_sms: int = 0, params: TwinParams = DEFAULT_PARAMS) -> float:
    """GPU µs of a ``batch`` of ``(m, k) @ (k, n)`` products: tile waves or memory, whichever is longer.

    The tail after the full waves runs as whole tiles or, when that is faster, in slices of k
    over every SM (``STREAM_K_SLICES`` a tile; a product smaller than one wave is cut finer, to
    fill the SMs), each slice paying the tile's fixed overhead.
    """
    tm, tn = ARCH_TILES[gpu.arch]
    g = params.compute.gemm
    rate = peak_per_sm_tflops(gpu, dtype, params) * 1e6

    def tile_us(depth: float) -> float:
        return 2 * tm * tn * (depth + g.k_overhead) / rate

    waves, tail, free = gemm_waves(gpu, m, n, batch, busy_sms=busy_sms)
    math_us = waves * tile_us(k)
    if tail:
        want = STREAM_K_SLICES if waves else max(STREAM_K_SLICES, gpu.sm_count // tail)
        depth = max(k / want, min(k, MIN_SLICE_K))
        slices = want if depth == k / want else math.ceil(k / depth)  # not ceil(k / (k / want)): rounding
        sliced = math.ceil(tail * slices / free) * tile_us(depth)
        math_us += min(math.ceil(tail / free) * tile_us(k), sliced)
    return max(math_us, memory_us(gpu, gemm_bytes(m, n, k, dtype, batch), params=params)) + g.fixed_us


def gemm_bytes(m: int, n: int, k: int, dtype: str = "bfloat16", batch: int = 1) -> int:
    """Bytes a product must move at least: each operand read once, the result written once."""
    return (m * k + k * n + m * n) * batch * BYTES.get(dtype, 2)


def memory_us(gpu: GpuSpec, nbytes: float, *, params: TwinParams = DEFAULT_PARAMS) -> float:
    """µs to stream ``nbytes`` (read + written) at the memory bandwidth streaming kernels reach."""
    return nbytes / (gpu.hbm_gbps * 1e3 * params.compute.hbm_fraction)


def attention_us(gpu: GpuSpec, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int, *,
                 fused: bool = True, backward: bool = False, busy_sms: int = 0,
                 params: TwinParams = DEFAULT_PARAMS) -> float:
    """GPU µs of one attention (causal when ``seq_q == seq_kv``, as a decoder's self-attention).

    Fused (flash): query tiles of ``ATTENTION_TILE`` rows in waves over the SMs, each over the
    keys it sees at ``compute.attention.flash_efficiency`` of peak (less at head dim < 128), plus
    a fixed cost per tile.  Unfused: the two products over the full score matrix and
    ``unfused_score_passes`` passes over it in memory.

    >>> from twin.hardware import gpu_spec
    >>> h200 = gpu_spec("h200")
    >>> flash = attention_us(h200, 4, 32, 4096, 4096, 128)
    >>> unfused = attention_us(h200, 4, 32, 4096, 4096, 128, fused=False)
    >>> 800 < flash < 1100, unfused > 10 * flash
    (True, True)
    """
    a = params.compute.attention
    if not fused:
        n = batch * heads
        scores = gemm_us(gpu, seq_q, seq_kv, head_dim, batch=n, busy_sms=busy_sms, params=params)
        weighted = gemm_us(gpu, seq_q, head_dim, seq_kv, batch=n, busy_sms=busy_sms, params=params)
        passes = memory_us(gpu, a.unfused_score_passes * n * seq_q * seq_kv * 2, params=params)
        return (scores + weighted + passes) * (1 + a.unfused_backward_factor if backward else 1)
    causal = seq_q == seq_kv
    keys = (seq_kv + ATTENTION_TILE) / 2 if causal else seq_kv
    rate = peak_tflops(gpu, "bfloat16") * a.flash_efficiency / gpu.sm_count
    rate *= a.small_head_penalty if head_dim < 128 else 1.0
    tile_us = 4 * ATTENTION_TILE * keys * head_dim / (rate * 1e6) + a.tile_overhead_us
    tiles = batch * heads * math.ceil(seq_q / ATTENTION_TILE)
    waves = math.ceil(tiles / max(1, gpu.sm_count - busy_sms))
    forward = waves * tile_us + params.compute.gemm.fixed_us
    return forward * (1 + a.backward_factor if backward else 1)


DROPOUT_MASK_BYTES = 1
"""Bytes per element of the attention-dropout mask (PyTorch's boolean mask; Megatron 2021's uint8)."""


def score_pass_bytes(matrices: int, seq_q: int, seq_kv: int, dtype: str, *, backward: bool = False) -> float:
    """Bytes the row-wise passes of a fused-softmax attention move over ``matrices`` score
    matrices of ``seq_q × seq_kv`` (causal when the two are equal).

    Forward: the causal scale-mask-softmax in place (reads the lower triangle, writes the whole
    row, the masked part as zeros) and dropout (reads, writes, and writes its mask); backward:
    dropout's (gradient and mask read, gradient written) and the softmax's (output and gradient
    read over the lower triangle, gradient written in place).  Non-causal: every element read.

    >>> score_pass_bytes(1, 2048, 2048, "float16") / 2048**2  # softmax 1.0 + 2, dropout 2 + 2 + 1
    8.00048828125
    >>> score_pass_bytes(1, 2048, 2048, "float16", backward=True) / 2048**2  # dropout 2 + 1 + 2, softmax 2.0 + 2
    9.0009765625
    """
    e = BYTES.get(dtype, 2)
    read = (seq_kv + 1) / (2 * seq_kv) if seq_q == seq_kv else 1.0  # the lower triangle, its diagonal too
    dropout = 2 * e + DROPOUT_MASK_BYTES
    softmax = (2 * read * e + e) if backward else (read * e + e)
    return matrices * seq_q * seq_kv * (dropout + softmax)


def fused_softmax_attention_us(gpu: GpuSpec, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int,
                               dtype: str = "float16", *, backward: bool = False, busy_sms: int = 0,
                               params: TwinParams = DEFAULT_PARAMS) -> float:
    """GPU µs of Megatron-LM's core attention before FlashAttention (``attention-fused-softmax``).

    Forward: ``baddbmm`` (Q·Kᵀ, scaled), the fused causal scale-mask-softmax in place, attention
    dropout, ``bmm`` (P·V); backward: the four products of the two ``bmm``'s gradients (dP = dO·Vᵀ,
    dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q) and the two row-wise backwards.  The products are timed
    by ``gemm_us`` (here bound by writing or reading the score matrix), the row-wise passes by
    ``score_pass_bytes`` at ``compute.attention.score_hbm_fraction`` of the memory bandwidth.

    >>> from twin.hardware import gpu_spec
    >>> h200 = gpu_spec("h200")
    >>> round(fused_softmax_attention_us(h200, 16, 8, 2048, 2048, 128))  # measured 2,119
    2128
    >>> round(fused_softmax_attention_us(h200, 16, 8, 2048, 2048, 128, backward=True))  # measured 2,734
    2907
    """
    n = batch * heads

    def gemm(m: int, nn: int, k: int) -> float:  # cuBLAS computes Cᵀ = Bᵀ·Aᵀ when its tiles fit that better
        return min(gemm_us(gpu, m, nn, k, dtype, n, busy_sms=busy_sms, params=params),
                   gemm_us(gpu, nn, m, k, dtype, n, busy_sms=busy_sms, params=params))

    scores = gemm(seq_q, seq_kv, head_dim)
    if backward:
        products = scores + gemm(seq_q, head_dim, seq_kv) + 2 * gemm(seq_kv, head_dim, seq_q)
    else:
        products = scores + gemm(seq_q, head_dim, seq_kv)
    passes = score_pass_bytes(n, seq_q, seq_kv, dtype, backward=backward)
    return products + passes / (gpu.hbm_gbps * 1e3 * params.compute.attention.score_hbm_fraction)


OPTIMIZER_KINDS = ("step", "clip", "scale")
"""What an optimizer phase is: the step itself, gradient clipping, or loss scaling (unscale and inf check)."""


def optimizer_us(gpu: GpuSpec, nbytes: float, kind: str = "step", *, params: TwinParams = DEFAULT_PARAMS) -> float:
    """GPU µs of one of the optimizer's passes (``OPTIMIZER_KINDS``) over ``nbytes``: a fixed cost
    (its many small launches over the parameter tensors) and the bytes.

    >>> from twin.hardware import gpu_spec
    >>> round(optimizer_us(gpu_spec("h200"), 28 * 256 * 2**20))  # AdamW, 256M fp32 parameters: measured 2367
    2316
    >>> round(optimizer_us(gpu_spec("h200"), 12 * 64 * 2**20, "clip"))  # measured 604
    627
    """
    k = params.compute.kernels
    if kind == "step":
        return k.optimizer_launch_us + nbytes / (gpu.hbm_gbps * 1e3 * k.optimizer_hbm_fraction)
    return (k.grad_clip_us if kind == "clip" else k.loss_scale_us) + memory_us(gpu, nbytes, params=params)


def optimizer_kind(name: str) -> str:
    """Which optimizer pass a phase named ``name`` is (``clip_grad_norm`` → ``clip``, ``unscale`` → ``scale``).

    >>> optimizer_kind("optimizer.step"), optimizer_kind("clip_grad_norm_"), optimizer_kind("amp_unscale")
    ('step', 'clip', 'scale')
    """
    name = name.lower()
    return "clip" if "clip" in name else "scale" if "scale" in name or "inf" in name else "step"
