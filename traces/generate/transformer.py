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
- pipeline stages exchange activations and their gradients, ``s·b·h`` (over ``t`` with
  sequence parallelism), in a 1F1B or GPipe schedule.

After the last micro-batch: sequence-parallel parameter gradients (norms, row-parallel biases)
are all-reduced over TP, tied embeddings over the first and last stage, then gradients over
data parallelism by ZeRO stage (see ``Parallelism.zero``) in buckets, the optimizer steps, and with
ZeRO ≥ 1 the updated parameters are all-gathered. Scalar reductions (loss averaging, gradient
norm, overflow checks) are left out: 4-byte calls that nothing tunes.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.generate.buckets import Bucket, GradUnit, assign_buckets
from traces.generate.events import RankEvents
from traces.generate.model import Transformer
from traces.generate.parallelism import Layout, Parallelism, PipelineSchedule, Recompute
from traces.generate.workload import WorkloadError
from traces.task import DTYPE_BYTES, Op

__all__ = ["TransformerRank", "pipeline_order"]

ADAM_FLOPS_PER_PARAM = 12
ADAM_BYTES_PER_PARAM = 32  # fp32 master weight, two moments, gradient: read and written


def pipeline_order(schedule: PipelineSchedule, stages: int, stage: int, micro_batches: int) -> list[tuple[str, int]]:
    """("F"|"B", micro-batch) in the order ``stage`` runs them.

    >>> pipeline_order(PipelineSchedule.ONE_F_ONE_B, 4, 1, 4)
    [('F', 0), ('F', 1), ('F', 2), ('B', 0), ('F', 3), ('B', 1), ('B', 2), ('B', 3)]
    """
    if schedule is PipelineSchedule.GPIPE:
        return [("F", j) for j in range(micro_batches)] + [("B", j) for j in range(micro_batches)]
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", j) for j in range(warmup)]
    for j in range(micro_batches - warmup):
        order += [("F", warmup + j), ("B", j)]
    return order + [("B", j) for j in range(micro_batches - warmup, micro_batches)]


@dataclass(frozen=True)
class _Block:
    """One column- then row-parallel block (attention or MLP) of a layer, per rank and micro-batch."""

    name: str
    column_flops: float  # forward FLOPs of the first (column-parallel) matmul
    rest_flops: float  # forward FLOPs of everything after it (core, row-parallel matmul)
    mem_bytes: int  # forward bytes moved


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
        self.grad = layout.grad_group(rank)
        self.embedding = layout.embedding_group(rank) if plan.pp > 1 and model.tied_embeddings else None
        self.out = RankEvents(rank)
        t, m = plan.tp, model
        self.first, self.last = self.at.pp == 0, self.at.pp == plan.pp - 1
        self._sp = plan.sequence_parallel and plan.tp > 1
        stages = plan.stage_layers(m.layers)
        if stages is None:
            raise WorkloadError(f"plan cannot split {m.layers} layers into {plan.pp} stages")
        self.layers = stages[self.at.pp]
        self.vocab = plan.padded_vocab(m.vocab)
        self.db = DTYPE_BYTES[m.dtype]
        self.grad_dtype = plan.grad_dtype or m.dtype
        self.tokens = plan.micro_batch_size * m.seq_len // plan.cp  # per micro-batch, per TP group
        self.act_bytes = self.tokens * m.hidden * self.db  # s·b·h: a TP all-gather's output
        h, T = m.hidden, self.tokens
        attention = 4 * T * m.seq_len * h / t
        self.blocks = (
            _Block(
                "attn",
                2 * T * h * m.qkv_width / t,
                attention + 2 * T * h * h / t,
                self._matmul_mem(h, m.qkv_width // t) + self._matmul_mem(h // t, h) + T * h // t * 3 * self.db,
            ),
            _Block(
                "mlp",
                2 * T * h * m.mlp_up_width / t,
                2 * T * m.ffn * h / t,
                self._matmul_mem(h, m.mlp_up_width // t) + self._matmul_mem(m.ffn // t, h),
            ),
        )
        self.kv_bytes = plan.micro_batch_size * m.seq_len * 2 * (m.kv_heads // t) * m.head_dim * self.db
        self.gate: tuple[int | None, ...] = ()  # what the next iteration's first event waits for
        self.step: int | None = None  # the last optimizer step
        self.loss: int | None = None  # the last stage's loss of the current micro-batch
        self.backward_end: int | None = None
        self.reductions: list[int | None] = []
        self.reduce_now = False  # whether this micro-batch's backward reduces gradients
        units = self._dp_units()
        self.buckets: list[Bucket] = assign_buckets(
            units, DTYPE_BYTES[self.grad_dtype], plan.grad_bucket_bytes, plan.first_grad_bucket_bytes
        )
        self.closing = {units[bucket.units[-1]].name: index for index, bucket in enumerate(self.buckets)}
        """Gradient unit → the bucket it completes (reduced as soon as it is ready, with a bucket cap)."""

    def _matmul_mem(self, k: int, n: int) -> int:
        """Bytes a ``tokens × k`` by ``k × n`` matmul reads and writes."""
        return (k * n + self.tokens * k + self.tokens * n) * self.db

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

    def _block_forward(
        self, layer: int, block: _Block, prev: int | None, tag: str, gathered: int | None = None
    ) -> int | None:
        out = self.out
        sp = self._sp
        gather = self._tp(Op.ALLGATHER, f"sp-gather.{block.name}", prev) if sp else None
        prev = _last(prev, gather)
        flops = block.column_flops + block.rest_flops
        if block.name == "attn" and self.parallelism.cp > 1:
            qkv = out.compute(f"L{layer}.qkv{tag}", block.column_flops, block.mem_bytes // 3, prev, gathered)
            kv = out.collective(Op.ALLGATHER, self.kv_bytes, self.cp, self.model.dtype, "cp-gather.kv", qkv)
            prev, flops, gathered = _last(qkv, kv), block.rest_flops, None
        compute = out.compute(f"L{layer}.{block.name}{tag}", flops, block.mem_bytes, prev, gathered)
        if sp:
            return _last(compute, self._tp(Op.REDUCESCATTER, f"sp-scatter.{block.name}", compute))
        return _last(compute, self._tp(Op.ALLREDUCE, f"tp-reduce.{block.name}", compute))

    def _column_backward(
        self, name: str, main_flops: float, wgrad_flops: float, mem: int, prev: int | None, gather_grad: bool
    ) -> tuple[int | None, int]:
        """Backward of (optionally a row-parallel matmul, then) a column-parallel matmul.

        Returns the event that delivers the input gradient and the weight-gradient compute.
        """
        out, sp = self.out, self._sp
        grad = self._tp(Op.ALLGATHER, f"sp-gather.{name}.grad", prev) if sp and gather_grad else None
        regather = self._tp(Op.ALLGATHER, f"sp-gather.{name}.input", _last(prev, grad)) if sp else None
        main = out.compute(f"{name}.bwd", main_flops, mem, _last(prev, grad))
        op, label = (Op.REDUCESCATTER, "sp-scatter") if sp else (Op.ALLREDUCE, "tp-reduce")
        reduce = self._tp(op, f"{label}.{name}.grad", main)
        wgrad = out.compute(f"{name}.wgrad", wgrad_flops, mem // 2, main, regather)
        return _last(main, reduce), wgrad

    def _block_backward(self, layer: int, block: _Block, prev: int | None) -> tuple[int | None, int]:
        main_flops = 2 * block.rest_flops + block.column_flops
        cp_grad = None
        if block.name == "attn" and self.parallelism.cp > 1:
            # K and V gradients of the whole sequence go back to their owners
            cp_grad = self.out.collective(
                Op.REDUCESCATTER, self.kv_bytes, self.cp, self.model.dtype, "cp-scatter.kv", prev
            )
        reduced, wgrad = self._column_backward(
            f"L{layer}.{block.name}", main_flops, block.column_flops, 2 * block.mem_bytes, prev, gather_grad=True
        )
        return _last(reduced, cp_grad), wgrad

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
        for block in self.blocks:
            prev = self._block_forward(layer, block, prev, tag, gathered)
            gathered = None
        return prev

    def forward(self) -> None:
        out, m = self.out, self.model
        T, h = self.tokens, m.hidden
        if self.first:
            prev = out.compute("embedding.fwd", 0, 2 * T * h * self.db, *self.gate)
            op = Op.ALLREDUCE if self.parallelism.embedding_allreduce or not self._sp else Op.REDUCESCATTER
            prev = _last(prev, self._tp(op, "tp-reduce.embedding", prev))
        else:
            previous_stage = self.pp.ranks[self.at.pp - 1]
            prev = out.collective(
                Op.SENDRECV, self._pp_bytes, self.pp, m.dtype, "pp-recv.act", *self.gate, peer=previous_stage
            )
        self.gate = ()
        for layer in self.layers:
            prev = self._layer_forward(layer, prev)
        if not self.last:
            next_stage = self.pp.ranks[self.at.pp + 1]
            out.collective(Op.SENDRECV, self._pp_bytes, self.pp, m.dtype, "pp-send.act", prev, peer=next_stage)
            return
        gather = self._tp(Op.ALLGATHER, "sp-gather.output", prev) if self._sp else None
        flops = 2 * T * h * self.vocab / self.parallelism.tp
        prev = out.compute("output.fwd", flops, self._output_mem, _last(prev, gather))
        for name in ("max", "target", "sum-exp"):  # vocabulary-parallel cross entropy
            xent = self._tp(Op.ALLREDUCE, f"tp-reduce.xent-{name}", prev, nbytes=T * 4, dtype="float32")
            prev = _last(prev, xent)
        self.loss = prev

    @property
    def _pp_bytes(self) -> int:
        return self.act_bytes // self.parallelism.tp if self._sp else self.act_bytes

    @property
    def _output_mem(self) -> int:
        return self._matmul_mem(self.model.hidden, self.vocab // self.parallelism.tp)

    def backward(self, last_micro_batch: bool) -> None:
        out, m = self.out, self.model
        self.reduce_now = self.parallelism.zero >= 2 or last_micro_batch
        if self.reduce_now:
            self.reductions = []
        T, h = self.tokens, m.hidden
        if self.last:
            flops = 2 * T * h * self.vocab / self.parallelism.tp
            prev, wgrad = self._column_backward("output", flops, flops, 2 * self._output_mem, self.loss, False)
            self._grads_ready(("output", "final_norm"), wgrad)
        else:
            next_stage = self.pp.ranks[self.at.pp + 1]
            prev = out.collective(Op.SENDRECV, self._pp_bytes, self.pp, m.dtype, "pp-recv.grad", peer=next_stage)
        grad_bytes = DTYPE_BYTES[self.grad_dtype]
        for layer in reversed(self.layers):
            if self.parallelism.recompute is Recompute.FULL:
                prev = self._layer_forward(layer, prev, ".recompute")
            gathered = self._fsdp_gather(f"layer{layer}", self._layer_params())
            wgrad = None
            for block in reversed(self.blocks):
                prev, wgrad = self._block_backward(layer, block, _last(prev, gathered))
                gathered = None
            self._grads_ready((f"layer{layer}",), wgrad)
            if self.parallelism.zero >= 3:
                out.collective(
                    Op.REDUCESCATTER, self._layer_params() * grad_bytes, self.grad, self.grad_dtype,
                    f"fsdp-scatter.layer{layer}", wgrad,
                )
        if self.first:
            grad = self._tp(Op.ALLGATHER, "sp-gather.embedding.grad", prev) if self._sp else None
            self.backward_end = out.compute("embedding.bwd", 0, 2 * T * h * self.db, _last(prev, grad))
            self._grads_ready(("embedding",), self.backward_end)
        else:
            previous_stage = self.pp.ranks[self.at.pp - 1]
            self.backward_end = out.collective(
                Op.SENDRECV, self._pp_bytes, self.pp, m.dtype, "pp-send.grad", prev, peer=previous_stage
            )
        if self.reduce_now and self.parallelism.grad_bucket_bytes is None:
            self.reductions = [self._reduce_bucket(index, self.backward_end) for index in range(len(self.buckets))]

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
        optimizer = out.compute("optimizer", ADAM_FLOPS_PER_PARAM * shard, ADAM_BYTES_PER_PARAM * shard, end, *waits)
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
        for iteration in range(iterations):
            self.out.iteration = iteration
            for kind, micro_batch in pipeline_order(plan.schedule, plan.pp, self.at.pp, plan.micro_batches):
                if kind == "F":
                    self.forward()
                else:
                    self.backward(micro_batch == plan.micro_batches - 1)
            self.finish_iteration()
        return self.out
