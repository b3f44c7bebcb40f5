"""How a model is spread over GPUs, and the process groups that follow, laid out as Megatron-LM does.

Ranks are numbered with tensor parallelism innermost, then context, data and pipeline
parallelism (Megatron-LM's default order ``tp-cp-dp-pp``)::

    rank = tp_rank + tp · (cp_rank + cp · (dp_rank + dp · pp_rank))

so a tensor-parallel group is ``tp`` consecutive ranks (one node's NVLink domain when
``tp ≤ gpus_per_node``) and the data-parallel peers of a rank are ``tp·cp`` apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from traces.schema import ProcessGroup

__all__ = ["Layout", "Parallelism", "PipelineSchedule", "Recompute"]


class PipelineSchedule(StrEnum):
    """Pipeline schedule: 1F1B (PipeDream-Flush, Megatron's default) or GPipe (all forwards first)."""

    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"


class Recompute(StrEnum):
    """Activation recomputation (Megatron-LM's ``--recompute-granularity``): none; ``selective``,
    the core attention (scores, softmax, dropout, weighted values) again before its backward
    (Korthikanti et al. 2022); ``full``, every layer's forward again before its backward."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


@dataclass(frozen=True)
class Parallelism:
    """A parallelism plan: degrees, ZeRO stage, micro-batching, gradient buckets, schedule."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    """Megatron sequence parallelism: activations outside the matmuls are split over the TP group,
    so each TP all-reduce becomes an all-gather before and a reduce-scatter after."""
    zero: int = 0
    """0: all-reduce gradients; 1: reduce-scatter gradients and all-gather parameters once per
    iteration (Megatron's distributed optimizer); 2: reduce-scatter in every micro-batch;
    3 (FSDP): also all-gather each layer's parameters before its forward and its backward."""
    micro_batches: int = 1
    micro_batch_size: int = 1
    grad_bucket_bytes: int | None = None
    """Gradient bucket cap in bytes; ``None``: one bucket, reduced after the whole backward."""
    first_grad_bucket_bytes: int | None = None
    """Cap of the first bucket (PyTorch DDP uses 1 MiB); ``None``: the same as the others."""
    grad_dtype: str | None = None
    """dtype in which gradients are reduced; ``None``: the model's dtype."""
    schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    recompute: Recompute = Recompute.NONE
    embedding_allreduce: bool = True
    """With sequence parallelism, the vocabulary-parallel embedding all-reduces its output and then
    splits the sequence (Megatron-LM 23.x); ``False``: it reduce-scatters instead (later versions)."""
    vocab_divisible_by: int = 128
    """The vocabulary is padded to a multiple of this times ``tp`` (Megatron-LM)."""
    first_stage_layers: int | None = None
    """Layers of the first pipeline stage when it holds fewer (it also holds the embedding)."""
    last_stage_layers: int | None = None
    """Layers of the last pipeline stage when it holds fewer (it also holds the output layer)."""
    gpus_per_node: int = 8
    virtual_stages: int = 1
    """Model chunks per pipeline stage (Megatron's ``--num-layers-per-virtual-pipeline-stage``):
    more than 1 runs the interleaved 1F1B schedule, chunk ``c`` of stage ``p`` holding the layers
    of virtual stage ``c·pp + p``."""
    scatter_gather_pipeline: bool = True
    """Without sequence parallelism, each TP rank sends 1/tp of the activations to the next stage,
    which all-gathers them over TP (Megatron's ``scatter_gather_tensors_in_pipeline``)."""
    pipeline_on_world: bool = False
    """Pipeline sends on the default (world) process group, as Megatron-LM issued them until 2023
    (``megatron/p2p_communication.py``: ``P2POp`` without a group): NCCL's world communicator,
    whose size sets the channels each peer gets; ``False``: on the pipeline group (Megatron Core)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", PipelineSchedule(self.schedule))
        object.__setattr__(self, "recompute", Recompute(self.recompute))

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def stage_layers(self, layers: int) -> list[range] | None:
        """The layers of each pipeline stage, ``None`` if they cannot be split as asked.

        >>> Parallelism(pp=4, first_stage_layers=1, last_stage_layers=1).stage_layers(6)
        [range(0, 1), range(1, 3), range(3, 5), range(5, 6)]
        """
        first, last = self.first_stage_layers, self.last_stage_layers
        fixed = {0: first} if first is not None else {}
        if last is not None:
            fixed[self.pp - 1] = last if self.pp > 1 or first is None else None
        if None in fixed.values():
            return None
        free = self.pp - len(fixed)
        rest = layers - sum(fixed.values())
        if rest < 0 or (free == 0 and rest) or (free and rest % free):
            return None
        counts = [fixed.get(stage, rest // free if free else 0) for stage in range(self.pp)]
        starts = [sum(counts[:stage]) for stage in range(self.pp)]
        return [range(start, start + count) for start, count in zip(starts, counts, strict=True)]

    def chunk_layers(self, layers: int) -> list[list[range]] | None:
        """The layers of each model chunk of each stage (one chunk per stage without interleaving),
        ``None`` if they cannot be split as asked.

        >>> Parallelism(pp=2, virtual_stages=2).chunk_layers(8)
        [[range(0, 2), range(4, 6)], [range(2, 4), range(6, 8)]]
        """
        v = self.virtual_stages
        if v == 1:
            stages = self.stage_layers(layers)
            return None if stages is None else [[stage] for stage in stages]
        if self.first_stage_layers is not None or self.last_stage_layers is not None or layers % (self.pp * v):
            return None
        per = layers // (self.pp * v)
        return [[range((c * self.pp + p) * per, (c * self.pp + p + 1) * per) for c in range(v)] for p in range(self.pp)]

    def padded_vocab(self, vocab: int) -> int:
        multiple = self.vocab_divisible_by * self.tp
        return -(-vocab // multiple) * multiple


@dataclass(frozen=True)
class Coordinates:
    """Where a rank sits in the plan."""

    tp: int
    cp: int
    dp: int
    pp: int


class Layout:
    """The rank ↔ coordinates map of a plan and the process groups a rank belongs to."""

    def __init__(self, parallelism: Parallelism) -> None:
        self.parallelism = parallelism

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        p = self.parallelism
        return tp + p.tp * (cp + p.cp * (dp + p.dp * pp))

    def coordinates(self, rank: int) -> Coordinates:
        p = self.parallelism
        tp, rest = rank % p.tp, rank // p.tp
        cp, rest = rest % p.cp, rest // p.cp
        dp, pp = rest % p.dp, rest // p.dp
        return Coordinates(tp, cp, dp, pp)

    def _group(self, kind: str, rank: int, varying: tuple[str, ...]) -> ProcessGroup:
        at = self.coordinates(rank)
        p = self.parallelism
        sizes = {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}
        members = [vars(at).copy()]
        for axis in varying:
            members = [{**m, axis: i} for m in members for i in range(sizes[axis])]
        ranks = tuple(sorted(self.rank(**m) for m in members))
        return ProcessGroup(id=f"{kind}:{ranks[0]}", ranks=ranks, name=kind)

    def tp_group(self, rank: int) -> ProcessGroup:
        return self._group("tp", rank, ("tp",))

    def cp_group(self, rank: int) -> ProcessGroup:
        return self._group("cp", rank, ("cp",))

    def pp_group(self, rank: int) -> ProcessGroup:
        return self._group("pp", rank, ("pp",))

    def grad_group(self, rank: int) -> ProcessGroup:
        """The group gradients are reduced over: data parallel, times context parallel when ``cp > 1``."""
        if self.parallelism.cp > 1:
            return self._group("dp-cp", rank, ("dp", "cp"))
        return self._group("dp", rank, ("dp",))

    def world_group(self) -> ProcessGroup:
        return ProcessGroup(id="world", ranks=tuple(range(self.parallelism.world_size)), name="world")

    def embedding_group(self, rank: int) -> ProcessGroup:
        """First and last pipeline stage of a rank's pipeline, which share tied embeddings."""
        at = self.coordinates(rank)
        first = self.rank(at.tp, at.cp, at.dp, 0)
        last = self.rank(at.tp, at.cp, at.dp, self.parallelism.pp - 1)
        return ProcessGroup(id=f"embedding:{first}", ranks=(first, last), name="embedding")

    def representatives(self) -> list[int]:
        """One rank per distinct role: TP, CP and DP rank 0 of every pipeline stage.

        Ranks that differ only in their TP, CP or DP coordinate issue the same collectives
        with the same sizes on groups of the same shape, so one of each stands for all.
        """
        return [self.rank(pp=stage) for stage in range(self.parallelism.pp)]
