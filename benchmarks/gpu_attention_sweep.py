"""Measure, on a real GPU, Megatron-LM's 2021 core attention (``attention-fused-softmax``) piece by piece.

Megatron-LM before FlashAttention (``CoreAttention`` with ``--masked-softmax-fusion``, the
default) computes attention on ``(b·h, s, s)`` scores in five kernels, each timed here alone
and in sequence through CUDA-graph replays (GPU time plus the gaps between kernels):

* ``qk``: ``torch.baddbmm`` of the ``(s, b·h, d)`` query and key layout (beta 0, alpha
  ``1/sqrt(d)``), a batched GEMM writing the score matrix;
* ``softmax``: the upper-triangular (causal) masked softmax, in place, as Megatron's fused CUDA
  kernel does it (reads the lower triangle, writes the whole row: the masked part as zeros), here
  a Triton kernel of the same memory traffic; also ``torch.softmax`` (reads and writes every
  element) and ``masked_fill`` + ``softmax`` (the unfused path) for comparison;
* ``dropout``: attention dropout (p = 0.1) over the probabilities;
* ``pv``: ``torch.bmm`` of the probabilities and the values;
* ``fwd``: the four in sequence; ``bwd``: the backward as Megatron's autograd runs it (two
  products of ``bmm``'s backward, dropout's backward, the fused softmax's backward in place
  (reads the output and the gradient's lower triangle, writes the row), two products of
  ``baddbmm``'s backward).

Shapes: sequence 2048 (SC'21's), head dim 64/96/128, heads per tensor-parallel rank 8-64,
micro-batch 1-16, fp16 and bf16, plus every SC'21 Table 1 run's own (micro-batch, heads / TP,
head dim).  Run on the GPU machine, from the repository root (torch with CUDA, Triton):
``PYTHONPATH=. python benchmarks/gpu_attention_sweep.py --json FILE``; a time budget keeps the
run near four minutes, rows left out are counted in ``skipped``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from benchmarks.gpu_compute_sweep import Budget, graph_us

SEQ = 2048
DROPOUT = 0.1
SC21_SHAPES = ((16, 24, 96), (16, 16, 96), (16, 8, 128), (8, 6, 128), (4, 8, 128), (2, 10, 128), (2, 12, 128),
               (1, 16, 128), (1, 16, 160), (1, 20, 160))
"""(micro-batch, heads per TP rank, head dim) of Megatron-LM SC'21 Table 1's runs (1.7B-1T)."""
MAX_SCORE_BYTES = 4 << 30
"""Score matrices below this (2^31 elements at 2 bytes): 32-bit indexing stays safe."""


@triton.jit
def _causal_softmax_fwd(x_ptr, seq, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    query = row % seq
    cols = tl.arange(0, BLOCK)
    ptr = x_ptr + row.to(tl.int64) * seq + cols
    keep = cols <= query
    x = tl.load(ptr, mask=keep, other=float("-inf")).to(tl.float32) * scale
    e = tl.exp(x - tl.max(x, 0))
    e = tl.where(keep, e, 0.0)
    tl.store(ptr, (e / tl.sum(e, 0)).to(x_ptr.dtype.element_ty), mask=cols < seq)


@triton.jit
def _causal_softmax_bwd(g_ptr, y_ptr, seq, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    query = row % seq
    cols = tl.arange(0, BLOCK)
    offset = row.to(tl.int64) * seq + cols
    keep = cols <= query
    g = tl.load(g_ptr + offset, mask=keep, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offset, mask=keep, other=0.0).to(tl.float32)
    dx = scale * y * (g - tl.sum(g * y, 0))
    tl.store(g_ptr + offset, dx.to(g_ptr.dtype.element_ty), mask=cols < seq)


def causal_softmax_(scores: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Megatron's ``scaled_upper_triang_masked_softmax`` forward on ``(n, s, s)``, in place."""
    rows = scores.shape[0] * scores.shape[1]
    _causal_softmax_fwd[(rows,)](scores, scores.shape[-1], scale, BLOCK=triton.next_power_of_2(scores.shape[-1]))
    return scores


def causal_softmax_backward_(grad: torch.Tensor, probs: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Its backward, in place on ``grad``."""
    rows = grad.shape[0] * grad.shape[1]
    _causal_softmax_bwd[(rows,)](grad, probs, grad.shape[-1], scale, BLOCK=triton.next_power_of_2(grad.shape[-1]))
    return grad


def check_softmax(dtype: torch.dtype) -> dict:
    """Relative error of the Triton kernels against float64 masked softmax (fresh random inputs)."""
    x = torch.randn(6, 256, 256, device="cuda", dtype=dtype) * 4
    mask = torch.ones(256, 256, device="cuda", dtype=torch.bool).triu(1)
    ref = torch.softmax(x.double().masked_fill(mask, float("-inf")), -1)
    out = causal_softmax_(x.clone())
    g = torch.randn_like(x)
    ref_dx = ref * (g.double() - (g.double() * ref).sum(-1, keepdim=True))
    dx = causal_softmax_backward_(g.clone(), out)

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())
    return {"dtype": str(dtype).removeprefix("torch."), "fwd_rel_error": rel(out, ref),
            "bwd_rel_error": rel(dx, ref_dx)}


def shape_rows(micro_batch: int, heads: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Every piece's GPU µs at one shape (Megatron's layouts: ``(s, b·h, d)`` in, ``(b·h, s, s)`` scores)."""
    n, s, d = micro_batch * heads, SEQ, head_dim
    q, k, v, dout = (torch.randn(s, n, d, device="cuda", dtype=dtype) for _ in range(4))
    qt, kt, vt, dot = (t.transpose(0, 1) for t in (q, k, v, dout))  # (n, s, d) views, as Megatron's
    scores = torch.empty(n, s, s, device="cuda", dtype=dtype)
    probs = torch.empty_like(scores)
    grad = torch.empty_like(scores)
    mask = torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1)
    keep = torch.rand(n, s, s, device="cuda") >= DROPOUT
    out = torch.empty(n, s, d, device="cuda", dtype=dtype)
    alpha = d ** -0.5

    def qk():
        torch.baddbmm(scores, qt, kt.transpose(1, 2), beta=0.0, alpha=alpha, out=scores)

    def fill():
        scores.normal_()

    def pv():
        torch.bmm(probs, vt, out=out)

    def drop():
        torch.mul(scores, keep, out=probs).mul_(1 / (1 - DROPOUT))

    def fwd():
        qk()
        causal_softmax_(scores)
        probs.copy_(F.dropout(scores, DROPOUT))
        pv()

    def bwd():
        torch.bmm(dot, vt.transpose(1, 2), out=grad)                      # d probs
        torch.bmm(probs.transpose(1, 2), dot)                              # d v
        grad.mul_(keep).mul_(1 / (1 - DROPOUT))                            # dropout's backward
        causal_softmax_backward_(grad, scores, alpha)                      # fused softmax's backward
        torch.bmm(grad, kt)                                                # d q
        torch.bmm(grad.transpose(1, 2), qt)                                # d k

    fill()
    causal_softmax_(scores)
    row = {"micro_batch": micro_batch, "heads": heads, "head_dim": d, "seq": s, "dtype": str(dtype)[6:],
           "score_bytes": n * s * s * scores.element_size()}
    row["qk_us"] = graph_us(qk)
    row["pv_us"] = graph_us(pv)
    fill()
    row["softmax_causal_us"] = graph_us(lambda: causal_softmax_(scores))
    row["softmax_torch_us"] = graph_us(lambda: torch.softmax(scores, -1))
    row["softmax_masked_fill_us"] = graph_us(lambda: torch.softmax(scores.masked_fill(mask, float("-inf")), -1))
    row["dropout_us"] = graph_us(lambda: F.dropout(scores, DROPOUT))
    row["dropout_mul_us"] = graph_us(drop)
    row["fwd_us"] = graph_us(fwd)
    row["fwd_no_dropout_us"] = graph_us(lambda: (qk(), causal_softmax_(scores), torch.bmm(scores, vt, out=out)))
    row["softmax_causal_bwd_us"] = graph_us(lambda: causal_softmax_backward_(grad, scores, alpha))
    row["bwd_us"] = graph_us(bwd)
    flops = 4 * n * s * s * d
    row["fwd_tflops"] = flops / row["fwd_us"] / 1e6
    return row


def plan() -> list[tuple[int, int, int, torch.dtype]]:
    shapes = [(b, h, d, torch.float16) for b, h, d in SC21_SHAPES]
    shapes += [(b, h, d, t) for t in (torch.float16, torch.bfloat16) for d in (64, 128) for h in (8, 16, 32, 64)
               for b in (1, 2, 4, 8)]
    shapes += [(b, 16, 96, torch.bfloat16) for b in (1, 4, 16)]
    seen, out = set(), []
    for shape in shapes:
        b, h = shape[:2]
        if shape not in seen and b * h * SEQ * SEQ * 2 < MAX_SCORE_BYTES:
            seen.add(shape)
            out.append(shape)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the numbers to this file")
    parser.add_argument("--seconds", type=float, default=240.0, help="time budget for the shapes")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    doc = {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda, "host": platform.node(),
           "measured": time.strftime("%Y-%m-%d"),
           "command": "PYTHONPATH=. python benchmarks/gpu_attention_sweep.py --json FILE",
           "check": [check_softmax(t) for t in (torch.float16, torch.bfloat16)], "fused_softmax": []}
    print(doc["check"], flush=True)
    budget = Budget(args.seconds)
    for b, h, d, t in plan():
        if not budget.left():
            continue
        try:
            row = shape_rows(b, h, d, t)
        except torch.OutOfMemoryError as err:  # one device call per session: record it, go on
            row = {"micro_batch": b, "heads": h, "head_dim": d, "dtype": str(t)[6:], "error": str(err)[:200]}
        torch.cuda.empty_cache()
        doc["fused_softmax"].append(row)
        print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
        with open(args.json, "w") as file:  # after every shape: a killed run keeps what it has
            json.dump(doc, file, indent=0)
    doc["skipped"] = budget.skipped
    with open(args.json, "w") as file:
        json.dump(doc, file, indent=0)


if __name__ == "__main__":
    main()
