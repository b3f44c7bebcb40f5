"""The events one rank of a Megatron-style transformer training job issues in an iteration.

Per micro-batch and layer, with tensor parallelism ``t`` (Megatron-LM's column- then
row-parallel attention and MLP blocks, Shoeybi et al. 2019; Korthikanti et al. 2022 for
sequence parallelism):

- without sequence parallelism: forward all-reduces each block's output (2 per layer),
  backward all-reduces the input gradient of each block's first matmul (2 per layer);
- with sequence parallelism each of those becomes an all-gather before the block and a
  reduce-scatter after it; backward all-gathers the output gradient (row-parallel matmul),
  all-gathers the block input again for the weight gradient and reduce-scatters the input
  gradient (column-parallel matmul): 6 all-gathers and 4 reduce-scatters per layer;
- the embedding all-reduces its output (then splits the sequence; backward all-gathers the
  gradient), the output layer is column-parallel, the vocabulary-parallel cross entropy
  all-reduces three per-token fp32 values;
- context parallelism all-gathers K and V over the CP group before attention and
  reduce-scatters their gradients (Llama 3);
- pipeline stages exchange activations and their gradients, ``s·b·h / t``: with sequence
  parallelism each rank holds that split, without it each TP rank sends its ``1/t`` and the
  receiving stage all-gathers it over TP (Megatron's ``scatter_gather_tensors_in_pipeline``);
  in a 1F1B, interleaved 1F1B (``virtual_stages`` model chunks per stage) or GPipe schedule.

Compute is generated as the kernels Megatron runs, each phase saying what it is
(``traces.schema.ComputeEvent``: category, shape, dtype, kernels): per block a norm (memory),
the column-parallel GEMM ``(tokens, out/t, hidden)``, the core attention (flash, Megatron's fused softmax or unfused,
``(batch, heads/t, seq_q, seq_kv, head_dim)``) or the MLP activation, the row-parallel GEMM,
and the fused bias-dropout-residual add; backward a data-gradient and a weight-gradient GEMM
per matmul. Element-wise work runs on ``tokens / t`` with sequence parallelism and on all tokens
(replicated over TP) without. Selective recompute runs the core attention forward again before
its backward, full recompute the whole layer (its TP collectives included). Kernel counts are
Megatron-LM's as profiled on torch 2.11 (``benchmarks/gpu_megatron_layer.py``: 18 forward and
45 backward per layer); the framework's own host work without kernels is a ``host`` phase: each
micro-batch's forward and backward schedule step, each recomputed layer's checkpoint (the
trace's ``metadata.framework`` tells the twin whose host profile to charge).

After the last micro-batch: sequence-parallel parameter gradients (norms, row-parallel biases)
are all-reduced over TP, tied embeddings over the first and last stage, then gradients over
data parallelism by ZeRO stage (see ``Parallelism.zero``) in buckets, gradients are unscaled
and clipped, the optimizer steps, and with ZeRO ≥ 1 the updated parameters are all-gathered.
Scalar reductions (loss averaging, gradient norm, overflow checks) are left out: 4-byte calls
that nothing tunes.
"""

from __future__ import annotations

from traces.generate.buckets import Bucket, GradUnit, assign_buckets
from traces.generate.events import RankEvents
from traces.generate.model import Transformer
from traces.generate.parallelism import Layout, Parallelism, Recompute
from traces.generate.pipeline import Message, needs, pipeline_order, pipeline_steps
from traces.generate.workload import WorkloadError
from traces.task import DTYPE_BYTES, Op

__all__ = ["TransformerRank", "pipeline_order"]

ADAM_FLOPS_PER_PARAM = 12
ADAM_BYTES_PER_PARAM = 32  # fp32 master weight, two moments, gradient: read and written
UNSCALE_BYTES_PER_PARAM = 8
"""fp16 loss-scale unscaling with its inf/NaN check: the fp32 gradient read and written."""
CLIP_BYTES_PER_PARAM = 12
"""The gradient norm (fp32 gradient read) and clipping (read and written)."""
XENT_FWD_BYTES_PER_LOGIT = 38
"""Megatron's vocabulary-parallel cross entropy on fp32 logits: the cast (2 read, 4 written),
max (4), subtract and exp in place (8 + 8), sum (4), softmax kept for backward (8)."""
XENT_BWD_BYTES_PER_LOGIT = 18
"""Its backward: softmax minus one-hot times the loss gradient (12), cast to the model dtype (6)."""
SCORE_PASSES = (6, 10)
"""Attention without FlashAttention moves the ``batch·heads·seq_q·seq_kv`` scores through
memory: forward written by the QK matmul, read and written by the (fused) scale-mask-softmax
and by dropout, read by the PV matmul (6 passes); backward about 10."""
ACCUMULATE_KERNELS = 1
"""Kernels per parameter tensor per micro-batch that fold its new gradient into the accumulated
one (autograd's ``AccumulateGrad``; Megatron's local DDP hook, ``_make_param_hook``:
``param.main_grad.add_(param.grad.data)``; with ``--gradient-accumulation-fusion`` the four
weight-gradient products accumulate into ``main_grad`` themselves): what makes a pre-norm layer
profiled with torch launch 55 kernels forward and backward (``host eager layer fwd+bwd`` in
``benchmarks/data/h200-compute.json``), where its products, attention, norms and element-wise
ops alone are about 35."""
ATTENTION_KERNELS = {"flash": (1, 3), "fused-softmax": (5, 12), "unfused": (4, 7), "torch-softmax": (9, 16)}
"""GPU kernels of core attention, forward and backward: FlashAttention's forward; its backward
with the dO·O pre-pass and the dQ conversion. Fused softmax (Megatron-LM's ``ParallelAttention``,
as ``benchmarks/gpu_megatron_layer.py`` profiled it on torch 2.11): ``baddbmm``, the fused
scale-mask-softmax, dropout, ``bmm`` and the context's ``permute(...).contiguous()``; backward
two matmuls per forward matmul, the ``baddbmm`` scale, dropout's and the softmax's backward, the
copies back through the permute and the transposed K, and the concatenation of the Q, K, V
gradients (the split's backward). Unfused: the same with the scale and the mask as kernels of
their own. Megatron's torch fallback where its fused softmax cannot run (``fused_softmax_runs``): the
fused-softmax kernels plus the fp32 cast, scale, ``masked_fill_`` and cast back, each way
(``benchmarks/gpu_megatron_layer.py --softmax torch``: 22 forward and 49 backward kernels per
layer where the fused layer has 18 and 45; its host time per layer grows as its kernels do,
``benchmarks.megatron_host_profile``)."""
RESIDUAL_KERNELS = 3
"""Kernels of Megatron's bias-dropout-add forward (``torch.jit.script``, training): the bias
add, the dropout and the residual add, which TorchScript does not fuse on torch 2.11 (measured,
``benchmarks/data/h200-megatron-layer.json``); one add for a block without bias."""
EMBEDDING_KERNELS = (11, 6)
"""The first stage's kernels per micro-batch around the embedding, forward and backward
(``benchmarks/gpu_megatron_layer.py``, TP 1): ``get_batch`` (tokens and labels to the GPU, the
causal mask's ``tril`` and compare, the loss mask, position ids), the word and position lookups,
their sum, the ``[b, s, h] → [s, b, h]`` copy and the embedding dropout; backward the dropout's,
the copy's and both lookups' backward and two gradient accumulations."""
VOCAB_MASK_KERNELS = (6, 1)
"""With TP > 1 ``VocabParallelEmbedding`` masks the tokens outside its shard (two compares, an
or, a clone and subtract, a masked fill of the ids and of the output), forward and backward."""
XENT_KERNELS = (19, 14)
"""The last stage's kernels per micro-batch from the logits to the loss and back, besides the
output layer's products and the final norm: the fp32 cast, ``_VocabParallelCrossEntropy``
(max, subtract, target masking and gather, exp, sum, log, divide), the transposes, the loss
mask's average and the division by the micro-batch count; backward the loss scaling, the mask
and average's backward, the cross entropy's scatter and multiply, the casts and the copies
(measured with ``EMBEDDING_KERNELS``: 32 forward and 28 backward outside the layers)."""
ATTENTION_CATEGORIES = {"flash": "attention", "fused-softmax": "attention-fused-softmax",
                        "unfused": "attention-unfused", "torch-softmax": "attention-unfused"}
"""The compute category (``traces.schema.COMPUTE_CATEGORIES``) of each kind of attention; Megatron's
torch fallback is an unfused attention (its products, and passes over the score matrix in memory)."""
FUSED_SOFTMAX_MAX_KEYS = 2048
"""The longest key sequence Megatron's fused causal softmax kernel takes."""


def fused_softmax_runs(batch: int, heads: int, seq_q: int, seq_kv: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel runs for a ``batch`` of ``heads`` (this
    rank's) score matrices of ``seq_q × seq_kv``: the kernel's constraints, ``16 < sk ≤ 2048``,
    ``sq % 4 == 0`` and ``b·np % 4 == 0`` (``FusedScaleMaskSoftmax.forward``,
    ``megatron/model/fused_softmax.py`` in microsoft/Megatron-DeepSpeed; Megatron-LM 2021's
    ``is_kernel_available`` asks the same).  Elsewhere Megatron falls back to torch: the scores cast
    to fp32, scaled, masked in place, softmax, cast back; many more kernels and host calls.

    >>> fused_softmax_runs(1, 2, 1024, 1024), fused_softmax_runs(2, 2, 1024, 1024)  # TP 8 of 16 heads
    (False, True)
    """
    return 16 < seq_kv <= FUSED_SOFTMAX_MAX_KEYS and seq_q % 4 == 0 and batch * heads % 4 == 0


def _thirds(n: int) -> tuple[int, int, int]:
    """``n`` kernels over three phases, the first taking the remainder.

    >>> _thirds(19)
    (7, 6, 6)
    """
    return n - 2 * (n // 3), n // 3, n // 3


def _last(*ids: int | None) -> int | None:
    present = [i for i in ids if i is not None]
    return present[-1] if present else None


class TransformerRank:
    """Builds one rank's events; ``build(iterations)`` returns them."""

    def __init__(self, model: Transformer, plan: Parallelism, rank: int) -> None:
        self.model, self.parallelism, self.rank = model, plan, rank
        layout = Layout(plan)
        self.at = layout.coordinates(rank)
        self.tp, self.cp, self.pp = layout.tp_group(rank), layout.cp_group(rank), layout.pp_group(rank)
        self.p2p = layout.world_group() if plan.pipeline_on_world and plan.pp > 1 else self.pp
        self.grad = layout.grad_group(rank)
        self.embedding = layout.embedding_group(rank) if plan.pp > 1 and model.tied_embeddings else None
        self.out = RankEvents(rank)
        t, m = plan.tp, model
        self.first, self.last = self.at.pp == 0, self.at.pp == plan.pp - 1
        self._sp = plan.sequence_parallel and plan.tp > 1
        chunks = plan.chunk_layers(m.layers)
        if chunks is None:
            raise WorkloadError(f"plan cannot split {m.layers} layers into {plan.pp} stages")
        self.chunks = chunks[self.at.pp]
        self.layers = [layer for chunk in self.chunks for layer in chunk]
        self.vocab = plan.padded_vocab(m.vocab)
        self.db = DTYPE_BYTES[m.dtype]
        self.grad_dtype = plan.grad_dtype or m.dtype
        self.tokens = plan.micro_batch_size * m.seq_len // plan.cp  # per micro-batch, per TP group
        self.local = self.tokens // t if self._sp else self.tokens  # tokens of each rank's element-wise work
        self.act_bytes = self.tokens * m.hidden * self.db  # s·b·h: a TP all-gather's output
        self.kv_bytes = plan.micro_batch_size * m.seq_len * 2 * (m.kv_heads // t) * m.head_dim * self.db
        self.gate: tuple[int | None, ...] = ()  # what the next iteration's first event waits for
        self.step: int | None = None  # the last optimizer step
        self.loss: dict[int, int | None] = {}  # micro-batch → the last stage's loss
        self.received: dict[Message, int | None] = {}  # posted receives → what their consumer waits for
        self.exchange: list[int | None] = []  # the pipeline exchange being batched (Megatron's batch_isend_irecv)
        self.held: list[Message] = []  # sends that wait for the end of the step (a forward before its backward)
        self.hold_sends = False
        self.backward_end: int | None = None
        self.reductions: list[int | None] = []
        self.reduce_now = False  # whether this micro-batch's backward reduces gradients
        units = self._dp_units()
        self.buckets: list[Bucket] = assign_buckets(
            units, DTYPE_BYTES[self.grad_dtype], plan.grad_bucket_bytes, plan.first_grad_bucket_bytes
        )
        self.closing = {units[bucket.units[-1]].name: index for index, bucket in enumerate(self.buckets)}
        """Gradient unit → the bucket it completes (reduced as soon as it is ready, with a bucket cap)."""

    # ---- compute phases -----------------------------------------------------------------

    def _gemm(self, name: str, m: int, n: int, k: int, *after: int | None, kernels: int = 1) -> int:
        """An ``m × k`` by ``k × n`` matrix multiply: ``2·m·n·k`` FLOPs, its operands read and result
        written (``kernels``: with the bias add or gradient accumulation that follows it)."""
        return self.out.compute(
            name, 2 * m * n * k, (m * k + k * n + m * n) * self.db, *after,
            category="gemm", shape=(m, n, k), dtype=self.model.dtype, kernels=kernels,
        )

    def _wgrad(self, name: str, m: int, n: int, k: int, *after: int | None, kernels: int = 1) -> int:
        """A weight-gradient product ``m × n`` over ``k`` tokens, then its accumulation into the
        parameter's gradient (``ACCUMULATE_KERNELS``): the new gradient read, the accumulated one
        read and written in the gradient's element type (a memory phase of its own: the bytes are
        the weight's, not the product's)."""
        product = self._gemm(name, m, n, k, *after, kernels=kernels)
        nbytes = m * n * (self.db + 2 * DTYPE_BYTES[self.grad_dtype])
        return self._memory(f"{name}.accumulate", nbytes, product, kernels=ACCUMULATE_KERNELS)

    @property
    def _norm_tensors(self) -> int:
        """Parameter tensors of one norm: LayerNorm's weight and bias, RMSNorm's weight."""
        return 2 if self.model.norm == "layernorm" else 1

    def _memory(self, name: str, nbytes: int, *after: int | None, kernels: int = 1) -> int:
        """Element-wise work (norms, activations, dropout, residual adds) bound by the bytes it moves."""
        return self.out.compute(name, 0, nbytes, *after, category="memory", dtype=self.model.dtype, kernels=kernels)

    def _attention(self, name: str, backward: bool, *after: int | None) -> int:
        """Core attention of this rank's heads: ``4·tokens·seq·hidden/t`` FLOPs forward, twice that backward."""
        m, plan = self.model, self.parallelism
        heads, b = m.heads // plan.tp, plan.micro_batch_size
        seq_q = m.seq_len // plan.cp
        shape = (b, heads, seq_q, m.seq_len, m.head_dim)
        flops = 4 * self.tokens * m.seq_len * m.hidden / plan.tp * (2 if backward else 1)
        io = (8 if backward else 4) * self.tokens * heads * m.head_dim * self.db  # Q, K, V, O (and their gradients)
        kind = m.attention
        if kind == "fused-softmax" and not fused_softmax_runs(b, heads, seq_q, m.seq_len):
            kind = "torch-softmax"
        kernels = ATTENTION_KERNELS[kind][int(backward)]
        if kind == "flash":
            return self.out.compute(name, flops, io, *after, category="attention", shape=shape, dtype=m.dtype,
                                    kernels=kernels)
        scores = b * heads * seq_q * m.seq_len * SCORE_PASSES[int(backward)] * self.db
        return self.out.compute(name, flops, io + scores, *after, category=ATTENTION_CATEGORIES[kind],
                                shape=shape, dtype=m.dtype, kernels=kernels)

    def _norm(self, name: str, backward: bool, *after: int | None) -> int:
        """LayerNorm/RMSNorm of this rank's tokens: x read, y written (backward: x, dy read, dx
        written, the weight gradient reduced in a second kernel and accumulated, and the residual
        branch's gradient added to the block's input gradient)."""
        elements = self.local * self.model.hidden
        if backward:
            kernels = 2 + self._norm_tensors * ACCUMULATE_KERNELS + 1
            return self._memory(name, 3 * elements * self.db, *after, kernels=kernels)
        return self._memory(name, 2 * elements * self.db, *after)

    def _residual(self, name: str, backward: bool, *after: int | None) -> int:
        """Megatron's fused bias-dropout-add: x, bias and residual read, output and 1-byte mask
        written (backward: gradient and mask read, gradient written)."""
        elements = self.local * self.model.hidden
        if not backward:
            return self._memory(name, (3 * self.db + 1) * elements, *after,
                                kernels=RESIDUAL_KERNELS if self.model.bias else 1)
        bias_grad = (1 + ACCUMULATE_KERNELS) if self.model.bias else 0  # reduced over tokens
        return self._memory(name, (2 * self.db + 1) * elements, *after, kernels=1 + bias_grad)

    # ---- gradient units -----------------------------------------------------------------

    def _layer_params(self) -> int:
        """Parameters of one layer held by this rank (matmuls and column biases split over TP)."""
        m, t = self.model, self.parallelism.tp
        column_bias = (m.qkv_width + m.mlp_up_width) // t if m.bias else 0
        row_bias = 2 * m.hidden if m.bias else 0
        return m.layer_matmul_params() // t + column_bias + row_bias + 2 * m.norm_params

    def grad_units(self) -> list[GradUnit]:
        """This rank's gradients in the order backward produces them."""
        m = self.model
        shard = self.vocab * m.hidden // self.parallelism.tp
        units = []
        if self.last:
            if not m.tied_embeddings or self.parallelism.pp > 1:  # tied in one stage: the embedding's gradient
                units.append(GradUnit("output", shard))
            units.append(GradUnit("final_norm", m.norm_params))
        units += [GradUnit(f"layer{i}", self._layer_params()) for i in reversed(self.layers)]
        if self.first:
            units.append(GradUnit("embedding", shard))
        return units

    def _sequence_parallel_params(self) -> int:
        """Parameters replicated over TP under sequence parallelism: norms and row-parallel biases."""
        m = self.model
        per_layer = 2 * m.norm_params + (2 * m.hidden if m.bias else 0)
        return len(self.layers) * per_layer + (m.norm_params if self.last else 0)

    # ---- communication helpers ----------------------------------------------------------

    def _tp(self, op: Op, name: str, after: int | None, nbytes: int | None = None, dtype: str | None = None):
        """A collective on the TP group, by default of the micro-batch's activations."""
        return self.out.collective(
            op, self.act_bytes if nbytes is None else nbytes, self.tp, dtype or self.model.dtype, name, after
        )

    @property
    def _pp_split(self) -> bool:
        """Whether a pipeline send carries 1/t of the activations (sequence parallelism or scatter-gather)."""
        return self._sp or (self.parallelism.scatter_gather_pipeline and self.parallelism.tp > 1)

    @property
    def _pp_bytes(self) -> int:
        return self.act_bytes // self.parallelism.tp if self._pp_split else self.act_bytes

    def _pp_call(self, direction: str, what: str, peer: int, *after: int | None) -> int | None:
        """One side of a pipeline exchange with ``peer``, on a stream per peer and direction: the
        calls of one batched exchange run at once, and each direction's run in order."""
        return self.out.collective(
            Op.SENDRECV, self._pp_bytes, self.p2p, self.model.dtype, f"pp-{direction}.{what}", *after, peer=peer,
            stream=f"pp-{direction}-{peer}", direction=direction,
        )

    def _pp_gather(self, what: str, recv: int | None) -> int | None:
        """Without sequence parallelism the split received is all-gathered over TP (after the exchange)."""
        if self._pp_split and not self._sp:
            return _last(recv, self._tp(Op.ALLGATHER, f"pp-gather.{what}", recv))
        return recv

    def _send(self, message: Message, after: int | None) -> int | None:
        """Send what this stage produced to the stage that consumes it, in this step's exchange
        (held to the end of the step when a backward follows in it)."""
        if self.hold_sends:
            self.held.append(message)
            return None
        receiver = (message[3] + (1 if message[0] == "act" else -1)) % self.parallelism.pp
        send = self._pp_call("send", message[0], self.pp.ranks[receiver], after)
        self.exchange.append(send)
        return send

    def _exchange_before(self, step: list[tuple[str, int, int]]) -> None:
        """Megatron's batched exchange between two steps: the sends of the step before (issued as
        it produced them) and the receives of what ``step`` consumes, posted once the step before
        has computed; the compute stream then waits for all of them (``wait``, then
        ``torch.cuda.synchronize``)."""
        self.hold_sends, held, self.held = False, self.held, []
        for message in held:
            self._send(message, self.out.last_compute)
        for kind, micro_batch, chunk in step:
            first, last = self._ends(chunk)
            if (first if kind == "F" else last):
                continue
            message = self._needs(kind, micro_batch, chunk)
            self.received[message] = self._pp_call("recv", message[0], self.pp.ranks[message[3]],
                                                   self.out.last_compute, *self.gate)
            self.exchange.append(self.received[message])
        for message in [m for m in self.received if self.received[m] in self.exchange]:
            self.received[message] = self._pp_gather(message[0], self.received[message])
            self.exchange.append(self.received[message])
        self.out.wait_all(self.exchange)
        self.exchange = []

    def _needs(self, kind: str, micro_batch: int, chunk: int) -> Message:
        need = needs(kind, micro_batch, chunk, self.at.pp, self.parallelism.pp, len(self.chunks))
        assert need is not None
        return need

    def _ends(self, chunk: int) -> tuple[bool, bool]:
        """Whether ``chunk`` of this stage holds the embedding (first) and the output layer (last)."""
        return self.first and chunk == 0, self.last and chunk == len(self.chunks) - 1

    # ---- one block ----------------------------------------------------------------------

    def _reduce_out(self, name: str, after: int) -> int | None:
        """The row-parallel output: reduce-scattered (sequence parallelism) or all-reduced over TP."""
        if self._sp:
            return _last(after, self._tp(Op.REDUCESCATTER, f"sp-scatter.{name}", after))
        return _last(after, self._tp(Op.ALLREDUCE, f"tp-reduce.{name}", after))

    def _block_forward(self, layer: int, name: str, prev: int | None, tag: str, gathered: int | None) -> int:
        m, t, T, h = self.model, self.parallelism.tp, self.tokens, self.model.hidden
        label = f"L{layer}.{name}"
        x = self._norm(f"{label}.norm{tag}", False, prev, gathered)
        if self._sp:
            x = _last(x, self._tp(Op.ALLGATHER, f"sp-gather.{name}", x))
        if name == "attn":  # the column-parallel QKV adds its bias after the product (the MLP's goes into GeLU)
            qkv = self._gemm(f"{label}.qkv{tag}", T, m.qkv_width // t, h, x)  # the bias in cuBLAS's epilogue
            kv = None
            if self.parallelism.cp > 1:
                kv = self.out.collective(Op.ALLGATHER, self.kv_bytes, self.cp, m.dtype, "cp-gather.kv", qkv)
            core = self._attention(f"{label}.core{tag}", False, qkv, kv)
            row = self._gemm(f"{label}.proj{tag}", T, h, h // t, core)
        else:
            up = self._gemm(f"{label}.fc1{tag}", T, m.mlp_up_width // t, h, x)
            act = self._memory(f"{label}.act{tag}", (m.mlp_up_width + m.ffn) // t * T * self.db, up)
            row = self._gemm(f"{label}.fc2{tag}", T, h, m.ffn // t, act)
        return self._residual(f"{label}.residual{tag}", False, self._reduce_out(name, row))

    def _block_backward(self, layer: int, name: str, prev: int | None) -> tuple[int, int]:
        """Backward of a block; returns the event that delivers its input gradient and its last
        weight-gradient GEMM."""
        m, plan, T, h = self.model, self.parallelism, self.tokens, self.model.hidden
        t, label, sp = plan.tp, f"L{layer}.{name}", self._sp
        cp_grad = None
        if name == "attn" and plan.cp > 1:  # K and V gradients of the whole sequence go back to their owners
            cp_grad = self.out.collective(Op.REDUCESCATTER, self.kv_bytes, self.cp, m.dtype, "cp-scatter.kv", prev)
        x = self._residual(f"{label}.residual.bwd", True, prev)
        if sp:
            x = _last(x, self._tp(Op.ALLGATHER, f"sp-gather.{label}.grad", x))
        regather = self._tp(Op.ALLGATHER, f"sp-gather.{label}.input", x) if sp else None
        if name == "attn":
            row, row_in, col_out = "proj", h // t, m.qkv_width // t
        else:
            row, row_in, col_out = "fc2", m.ffn // t, m.mlp_up_width // t
        bias_grad = 1 + ACCUMULATE_KERNELS if m.bias else 0  # a column-parallel bias: reduced, accumulated
        dgrad = self._gemm(f"{label}.{row}.dgrad", T, row_in, h, x)
        wgrad = self._wgrad(f"{label}.{row}.wgrad", row_in, h, T, dgrad)
        if name == "attn":
            again = None
            if plan.recompute is Recompute.SELECTIVE:
                again = self._attention(f"{label}.core.recompute", False, wgrad)
            inner = self._attention(f"{label}.core.bwd", True, wgrad, again)
            column = "qkv"
        else:
            inner = self._memory(f"{label}.act.bwd", (2 * m.mlp_up_width + m.ffn) // t * T * self.db, wgrad,
                                 kernels=1 + bias_grad)
            column, bias_grad = "fc1", 0
        dgrad = self._gemm(f"{label}.{column}.dgrad", T, h, col_out, inner)
        op, kind = (Op.REDUCESCATTER, "sp-scatter") if sp else (Op.ALLREDUCE, "tp-reduce")
        reduce = self._tp(op, f"{kind}.{label}.grad", dgrad)
        wgrad = self._wgrad(f"{label}.{column}.wgrad", h, col_out, T, dgrad, regather, kernels=1 + bias_grad)
        norm = self._norm(f"{label}.norm.bwd", True, _last(dgrad, reduce))
        return _last(norm, cp_grad), wgrad

    # ---- one micro-batch ----------------------------------------------------------------

    def _fsdp_gather(self, unit: str, params: int) -> int | None:
        """ZeRO-3: all-gather a unit's parameters before it runs (forward, and again backward)."""
        if self.parallelism.zero < 3:
            return None
        return self.out.collective(
            Op.ALLGATHER, params * self.db, self.grad, self.model.dtype, f"fsdp-gather.{unit}", self.step
        )

    def _layer_forward(self, layer: int, prev: int | None, tag: str = "") -> int | None:
        gathered = self._fsdp_gather(f"layer{layer}", self._layer_params())
        for name in ("attn", "mlp"):
            prev = self._block_forward(layer, name, prev, tag, gathered)
            gathered = None
        return prev

    def forward(self, micro_batch: int, chunk: int = 0) -> None:
        m = self.model
        T, h = self.tokens, m.hidden
        first, last = self._ends(chunk)
        self._step("forward", *self.gate)
        if first:
            prev = self._memory("embedding.fwd", 2 * T * h * self.db, *self.gate, kernels=self._embedding_kernels(0))
            op = Op.ALLREDUCE if self.parallelism.embedding_allreduce or not self._sp else Op.REDUCESCATTER
            prev = _last(prev, self._tp(op, "tp-reduce.embedding", prev))
        else:
            prev = self.received.pop(self._needs("F", micro_batch, chunk))
        self.gate = ()
        for layer in self.chunks[chunk]:
            prev = self._layer_forward(layer, prev)
        if not last:
            self._send(("act", micro_batch, chunk, self.at.pp), prev)
            return
        prev = self._norm("final_norm.fwd", False, prev)
        gather = self._tp(Op.ALLGATHER, "sp-gather.output", prev) if self._sp else None
        prev = self._gemm("output.fwd", T, self.vocab // self.parallelism.tp, h, _last(prev, gather))
        for name, kernels in zip(("max", "target", "sum-exp"), _thirds(XENT_KERNELS[0]), strict=True):
            prev = _last(prev, self._memory(f"xent.{name}", self._logits * XENT_FWD_BYTES_PER_LOGIT // 3, prev,
                                            kernels=kernels))  # vocabulary-parallel cross entropy
            prev = _last(prev, self._tp(Op.ALLREDUCE, f"tp-reduce.xent-{name}", prev, nbytes=T * 4, dtype="float32"))
        self.loss[micro_batch] = prev

    def _host(self, name: str, *after: int | None) -> None:
        """Host work of the framework's own, no kernels (its time: the twin's framework profile)."""
        self.out.compute(name, 0, 0, *after, category="host", dtype=self.model.dtype, kernels=0)

    def _step(self, kind: str, *after: int | None) -> None:
        """The schedule's host work of one forward or backward step (no kernels): buffers for
        the exchanges, the ``torch.autograd.backward`` call (``compute.kernels.megatron_step_host_us``);
        a first forward step after ``after`` (the optimizer step and parameter all-gathers)."""
        self._host(f"schedule.{kind}-step", *after)

    def _embedding_kernels(self, backward: int) -> int:
        """Kernels around the embedding in one micro-batch (``EMBEDDING_KERNELS``, ``VOCAB_MASK_KERNELS``)."""
        return EMBEDDING_KERNELS[backward] + (VOCAB_MASK_KERNELS[backward] if self.parallelism.tp > 1 else 0)

    @property
    def _logits(self) -> int:
        """Logits of this rank's vocabulary shard in one micro-batch."""
        return self.tokens * self.vocab // self.parallelism.tp

    def _output_backward(self, micro_batch: int) -> int | None:
        """Cross entropy and the output layer backward (a column-parallel matmul) and the final norm."""
        T, h, sp = self.tokens, self.model.hidden, self._sp
        shard = self.vocab // self.parallelism.tp
        xent = self._memory("xent.bwd", self._logits * XENT_BWD_BYTES_PER_LOGIT, self.loss.pop(micro_batch),
                            kernels=XENT_KERNELS[1])
        regather = self._tp(Op.ALLGATHER, "sp-gather.output.input", xent) if sp else None
        dgrad = self._gemm("output.dgrad", T, h, shard, xent)
        op, kind = (Op.REDUCESCATTER, "sp-scatter") if sp else (Op.ALLREDUCE, "tp-reduce")
        reduce = self._tp(op, f"{kind}.output.grad", dgrad)
        wgrad = self._wgrad("output.wgrad", h, shard, T, dgrad, regather)
        self._grads_ready(("output",), wgrad)
        norm = self._norm("final_norm.bwd", True, _last(dgrad, reduce))
        self._grads_ready(("final_norm",), norm)
        return norm

    def backward(self, micro_batch: int, chunk: int = 0) -> None:
        out, m, plan = self.out, self.model, self.parallelism
        first, last = self._ends(chunk)
        self.reduce_now = plan.zero >= 2 or micro_batch == plan.micro_batches - 1
        T, h = self.tokens, m.hidden
        self._step("backward")
        prev = self._output_backward(micro_batch) if last else self.received.pop(self._needs("B", micro_batch, chunk))
        grad_bytes = DTYPE_BYTES[self.grad_dtype]
        for layer in reversed(self.chunks[chunk]):
            if plan.recompute is Recompute.FULL:
                self._host(f"L{layer}.checkpoint")
                prev = self._layer_forward(layer, prev, ".recompute")
            gathered = self._fsdp_gather(f"layer{layer}", self._layer_params())
            wgrad = None
            for name in ("mlp", "attn"):
                prev, wgrad = self._block_backward(layer, name, _last(prev, gathered))
                gathered = None
            self._grads_ready((f"layer{layer}",), wgrad)
            if plan.zero >= 3:
                out.collective(
                    Op.REDUCESCATTER, self._layer_params() * grad_bytes, self.grad, self.grad_dtype,
                    f"fsdp-scatter.layer{layer}", wgrad,
                )
        if first:
            grad = self._tp(Op.ALLGATHER, "sp-gather.embedding.grad", prev) if self._sp else None
            # the lookup's backward writes a dense gradient of its vocabulary shard (zeroed, then the
            # tokens' rows summed in), which is accumulated into the word embedding's gradient
            table = self.vocab // plan.tp * h * (2 * self.db + 2 * grad_bytes)
            self.backward_end = self._memory("embedding.bwd", 2 * T * h * self.db + table, _last(prev, grad),
                                             kernels=self._embedding_kernels(1))
            self._grads_ready(("embedding",), self.backward_end)
        else:
            self.backward_end = self._send(("grad", micro_batch, chunk, self.at.pp), prev)
        if self.reduce_now and plan.grad_bucket_bytes is None and chunk == 0:
            self.reductions += [self._reduce_bucket(index, self.backward_end) for index in range(len(self.buckets))]

    # ---- end of the iteration -----------------------------------------------------------

    def _dp_units(self) -> list[GradUnit]:
        """Gradient units reduced in buckets (under ZeRO-3 only those outside the layers)."""
        units = self.grad_units()
        return [u for u in units if not u.name.startswith("layer")] if self.parallelism.zero >= 3 else units

    def _grads_ready(self, names: tuple[str, ...], event: int) -> None:
        """Backward has produced these units' gradients; with a bucket cap, reduce the buckets they complete.

        That is DDP's and Megatron's overlapped reduction: a bucket goes while backward goes on.
        """
        for name in names:
            if self.reduce_now and self.parallelism.grad_bucket_bytes is not None and name in self.closing:
                self.reductions.append(self._reduce_bucket(self.closing[name], event))

    def _reduce_bucket(self, index: int, after: int | None) -> int | None:
        gd = DTYPE_BYTES[self.grad_dtype]
        op = Op.ALLREDUCE if self.parallelism.zero == 0 else Op.REDUCESCATTER
        params = self.buckets[index].params
        return self.out.collective(op, params * gd, self.grad, self.grad_dtype, f"dp-grads.bucket{index}", after)

    def finish_iteration(self) -> None:
        """Sequence-parallel and tied-embedding gradients, optimizer step, parameter all-gather."""
        out, m = self.out, self.model
        gd = DTYPE_BYTES[self.grad_dtype]
        end = self.backward_end
        waits: list[int | None] = list(self.reductions)
        if self._sp:
            params = self._sequence_parallel_params()
            waits.append(
                self._tp(Op.ALLREDUCE, "tp-reduce.sp-param-grads", end, nbytes=params * gd, dtype=self.grad_dtype)
            )
        if self.embedding is not None and (self.first or self.last):
            shard = self.vocab * m.hidden // self.parallelism.tp
            waits.append(
                out.collective(Op.ALLREDUCE, shard * gd, self.embedding, self.grad_dtype, "embedding-grads", end)
            )
        params = sum(u.params for u in self.grad_units())
        shard = params if self.parallelism.zero == 0 else params // len(self.grad.ranks)
        if m.dtype == "float16":  # Megatron's dynamic loss scaler; bf16 runs without one
            end = out.compute("grad-unscale", 0, UNSCALE_BYTES_PER_PARAM * shard, end, *waits,
                              category="optimizer", dtype="float32")
            waits = []
        clip = out.compute("grad-clip", 0, CLIP_BYTES_PER_PARAM * shard, end, *waits, category="optimizer",
                           dtype="float32", kernels=2)
        optimizer = out.compute("optimizer", ADAM_FLOPS_PER_PARAM * shard, ADAM_BYTES_PER_PARAM * shard, clip,
                                category="optimizer", dtype="float32")
        gathers = []
        if self.parallelism.zero >= 1:
            gathers = [
                out.collective(
                    Op.ALLGATHER, bucket.params * self.db, self.grad, m.dtype, f"dp-params.bucket{index}", optimizer
                )
                for index, bucket in enumerate(self.buckets)
            ]
        self.gate, self.step = (optimizer, *gathers), optimizer
        self.reductions = []

    def build(self, iterations: int) -> RankEvents:
        plan = self.parallelism
        steps = pipeline_steps(plan.schedule, plan.pp, self.at.pp, plan.micro_batches, plan.virtual_stages)
        for iteration in range(iterations):
            self.out.iteration = iteration
            for step in steps:
                self._exchange_before(step)
                for kind, micro_batch, chunk in step:
                    self.hold_sends = kind == "F" and len(step) > 1
                    if kind == "F":
                        self.forward(micro_batch, chunk)
                    else:
                        self.backward(micro_batch, chunk)
            self._exchange_before([])
            self.finish_iteration()
        return self.out
