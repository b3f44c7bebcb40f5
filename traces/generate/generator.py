"""Turn a workload (model + plan) into a ccltwin trace of one or more training iterations.

By default the trace holds one *representative* rank per distinct role, TP, CP and DP rank 0
of each pipeline stage: every other rank issues the same collectives with the same sizes on
groups of the same shape. This keeps a 405B job on 16,384 GPUs to 16 ranks. Each group in the
trace lists all its members, and ``Trace.tasks()`` then counts, per iteration, the calls on each
communicator those ranks belong to, which is how the AutoCCL paper's Table 1 counts them.
``ranks="all"`` materialises every rank (for small jobs; then tasks of groups of the same
shape are merged and counted over the whole job). ``Trace.metadata`` says which it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from traces.generate.cnn import CnnRank
from traces.generate.model import Cnn, Transformer
from traces.generate.parallelism import Layout
from traces.generate.transformer import TransformerRank
from traces.generate.workload import Workload, WorkloadError
from traces.schema import RankTrace, Trace

__all__ = ["generate", "job_flops"]

MAX_EVENTS = 5_000_000
"""More events than a trace file should hold; a request for more is refused before it is built."""


def job_flops(work: Workload) -> float:
    """Training FLOPs of one iteration over the whole job, as the generator counts them."""
    model, plan = work.model, work.parallelism
    samples = plan.dp * plan.micro_batches * plan.micro_batch_size
    if isinstance(model, Cnn):
        return 3 * samples * model.forward_flops_per_sample()
    tokens = samples * model.seq_len
    per_token = model.train_flops_per_token(plan.padded_vocab(model.vocab))
    if plan.recompute.value == "full":  # the layers' forward again
        per_token += (per_token - 6 * plan.padded_vocab(model.vocab) * model.hidden) / 3
    elif plan.recompute.value == "selective":  # the core attention's forward again
        per_token += 4 * model.layers * model.seq_len * model.hidden
    return tokens * per_token


def _ranks(work: Workload, ranks: str | Sequence[int]) -> list[int]:
    world = work.parallelism.world_size
    if ranks == "representative":
        return Layout(work.parallelism).representatives()
    if ranks == "all":
        return list(range(world))
    if isinstance(ranks, str):
        raise WorkloadError(f"ranks must be 'representative', 'all' or a list of ranks, got {ranks!r}")
    chosen = sorted(set(ranks))
    outside = [r for r in chosen if not 0 <= r < world]
    if not chosen or outside:
        raise WorkloadError(f"ranks {outside or '[]'} are not ranks of a {world}-GPU job")
    return chosen


def _estimate_events(work: Workload, count: int, iterations: int) -> int:
    model, plan = work.model, work.parallelism
    if isinstance(model, Cnn):
        per_micro_batch = 2 * len(model.layers)
    else:
        per_layer = 44 + (16 if plan.recompute.value == "full" else 0) + (4 if plan.cp > 1 else 0)
        per_micro_batch = per_layer * model.layers // plan.pp + 12
    return count * iterations * plan.micro_batches * per_micro_batch


def generate(work: Workload, iterations: int = 1, ranks: str | Sequence[int] = "representative") -> Trace:
    """The trace of ``iterations`` training iterations of ``work`` for the chosen ranks."""
    if iterations < 1:
        raise WorkloadError(f"iterations must be at least 1, got {iterations}")
    chosen = _ranks(work, ranks)
    estimate = _estimate_events(work, len(chosen), iterations)
    if estimate > MAX_EVENTS:
        raise WorkloadError(
            f"{work.name}: about {estimate:,} events for {len(chosen)} rank(s) × {iterations} iteration(s), "
            f"over the {MAX_EVENTS:,} a trace should hold; use representative ranks or fewer micro-batches"
        )
    model, plan = work.model, work.parallelism
    built = []
    for rank in chosen:
        if isinstance(model, Transformer):
            built.append(TransformerRank(model, plan, rank).build(iterations))
        else:
            built.append(CnnRank(model, plan, rank).build(iterations))
    groups = {}
    for events in built:
        groups.update(events.groups)
    trace = Trace(
        world_size=plan.world_size,
        groups=tuple(sorted(groups.values(), key=lambda g: (g.name or "", g.ranks))),
        ranks=tuple(
            RankTrace(rank=e.rank, events=tuple(e.events), node=f"node{e.rank // plan.gpus_per_node}") for e in built
        ),
        source=f"generated:{work.name}",
        metadata=_metadata(work, chosen, ranks),
    )
    return trace


def _metadata(work: Workload, chosen: list[int], ranks: str | Sequence[int]) -> dict[str, Any]:
    plan, model = work.parallelism, work.model
    layout = Layout(plan)
    model_doc = asdict(model)
    if isinstance(model, Cnn):
        model_doc = {"name": model.name, "dtype": model.dtype, "params": model.params(), "layers": len(model.layers)}
    else:
        model_doc["params"] = model.params(plan.padded_vocab(model.vocab))
        model_doc["padded_vocab"] = plan.padded_vocab(model.vocab)
    samples = plan.dp * plan.micro_batches * plan.micro_batch_size
    meta: dict[str, Any] = {
        "generator": "traces.generate",
        "workload": work.name,
        "description": work.description,
        "model": model_doc,
        "plan": {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(plan).items()},
        "ranks": ranks if isinstance(ranks, str) else "subset",
        "global_batch": samples,
        "flops_per_iteration": job_flops(work),
    }
    if isinstance(model, Transformer):
        meta["tokens_per_iteration"] = samples * model.seq_len
        meta["framework"] = "megatron-lm"  # the layers' op sequence and host work (traces.generate.transformer)
        if plan.pp > 1:  # Megatron-LM's p2p_communication._communicate: torch.cuda.synchronize() after each batch
            meta["host_syncs_after_p2p"] = True
    if ranks == "representative":
        replicas = plan.world_size // plan.pp
        meta["represents"] = {
            str(rank): f"pipeline stage {layout.coordinates(rank).pp}: {replicas} ranks (every tp, cp and dp rank)"
            for rank in chosen
        }
    return meta
