"""A Megatron-LM GPT job from the numbers people quote: hidden size, heads, layers, sequence,
vocabulary, and the plan's degrees and batch sizes (``ccltwin predict --model gpt``).

GPT as Megatron-LM and Megatron-DeepSpeed build it (``--hidden-size`` ...): LayerNorm, biases,
a GeLU MLP of 4× the hidden size, the output layer tied to the embedding, GPT-2's vocabulary
of 50,257 (padded to a multiple of 128·TP), and Megatron's attention before FlashAttention
(``baddbmm``, the fused causal scale-mask-softmax, dropout, ``bmm``) unless FlashAttention is asked for.

>>> work = gpt_workload(hidden=1024, heads=16, layers=24, seq=1024, tp=2, dp=4, micro_batch=2, global_batch=64)
>>> work.parallelism.micro_batches, work.parallelism.world_size, work.model.params() // 10**6
(8, 8, 353)

(GPT-2 medium's 355M less its learned position embeddings, which the generator leaves out.)
"""

from __future__ import annotations

from traces.generate.model import Transformer
from traces.generate.parallelism import Parallelism, Recompute
from traces.generate.workload import Workload, WorkloadError, check_fit

__all__ = ["GPT2_VOCAB", "gpt_workload"]

GPT2_VOCAB = 50257
"""GPT-2's BPE vocabulary, which Megatron's GPT runs use."""


def gpt_workload(*, hidden: int, heads: int, layers: int, seq: int, vocab: int = GPT2_VOCAB, tp: int = 1,
                 dp: int = 1, pp: int = 1, vpp: int = 1, micro_batch: int = 1, global_batch: int | None = None,
                 recompute: str = "none", sequence_parallel: bool = False, zero: int = 0,
                 dtype: str = "float16", attention: str = "fused-softmax",
                 pipeline_on_world: bool = False) -> Workload:
    """The workload; ``WorkloadError`` names the number the plan cannot split."""
    for name, value in (("hidden", hidden), ("heads", heads), ("layers", layers), ("seq", seq), ("vocab", vocab),
                        ("tp", tp), ("dp", dp), ("pp", pp), ("vpp", vpp), ("micro-batch", micro_batch)):
        if value < 1:
            raise WorkloadError(f"--{name} must be at least 1, got {value}")
    if hidden % heads:
        raise WorkloadError(f"--heads {heads} does not divide --hidden {hidden}")
    per_step = micro_batch * dp
    batch = per_step if global_batch is None else global_batch
    if batch < 1 or batch % per_step:
        raise WorkloadError(f"--global-batch {batch} is not a multiple of --micro-batch × --dp = "
                            f"{micro_batch} × {dp} = {per_step}")
    if recompute not in [r.value for r in Recompute]:
        raise WorkloadError(f"--recompute {recompute}: expected one of {', '.join(r.value for r in Recompute)}")
    model = Transformer("gpt", layers, hidden, 4 * hidden, heads, heads, vocab, seq, dtype, gated_mlp=False,
                        norm="layernorm", bias=True, tied_embeddings=True, attention=attention)
    plan = Parallelism(dp=dp, tp=tp, pp=pp, virtual_stages=vpp, sequence_parallel=sequence_parallel, zero=zero,
                       micro_batches=batch // per_step, micro_batch_size=micro_batch, recompute=Recompute(recompute),
                       grad_dtype="float32" if zero else None, pipeline_on_world=pipeline_on_world)
    check_fit(model, plan)
    name = f"gpt-h{hidden}-l{layers}-tp{tp}dp{dp}pp{pp}" + (f"v{vpp}" if vpp > 1 else "")
    return Workload(name, model, plan, f"GPT {model.params() / 1e9:.2f}B, global batch {batch}")
