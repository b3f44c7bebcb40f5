"""Pipeline schedules: the order a stage runs its forwards and backwards, grouped into the steps
between which Megatron-LM exchanges activations and gradients with the neighbouring stages.

Megatron-LM (``megatron/schedules.py``, 2021, and ``core/pipeline_parallel/schedules.py`` with
``overlap_p2p_comm`` off) runs a step, then one batched exchange (``batch_isend_irecv``, then
``wait`` and ``torch.cuda.synchronize``): it sends what the step produced and receives what the
next step consumes. 1F1B exchanges after every forward and every backward; the interleaved
schedule after each warm-up forward, each steady-state forward-and-backward pair and each
cool-down backward. Point-to-point calls pair per direction in order (NCCL), and each direction
carries its messages in the order they are produced, which is the order they are consumed.
"""

from __future__ import annotations

from traces.generate.parallelism import PipelineSchedule

__all__ = ["Message", "interleaved_order", "needs", "pipeline_order", "pipeline_steps"]

Message = tuple[str, int, int, int]
"""("act"|"grad", micro-batch, chunk that produced it, stage that produced it)."""


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


def interleaved_order(stages: int, stage: int, micro_batches: int, chunks: int) -> list[tuple[str, int, int]]:
    """("F"|"B", micro-batch, model chunk) in the order ``stage`` runs them under Megatron's
    interleaved 1F1B: ``(stages - stage - 1)·2 + (chunks - 1)·stages`` warm-up forwards (all of
    them when there are as many micro-batches as stages), then one forward and one backward.

    >>> interleaved_order(2, 1, 2, 2)
    [('F', 0, 0), ('F', 1, 0), ('F', 0, 1), ('F', 1, 1), ('B', 0, 1), ('B', 1, 1), ('B', 0, 0), ('B', 1, 0)]
    """
    total, group = micro_batches * chunks, stages * chunks
    warmup = _interleaved_warmup(stages, stage, micro_batches, chunks)

    def at(k: int, kind: str) -> tuple[str, int, int]:
        chunk = (k % group) // stages
        return kind, (k // group) * stages + k % stages, chunk if kind == "F" else chunks - 1 - chunk

    order = [at(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        order += [at(warmup + k, "F"), at(k, "B")]
    return order + [at(k, "B") for k in range(total - warmup, total)]


def _interleaved_warmup(stages: int, stage: int, micro_batches: int, chunks: int) -> int:
    """Megatron's warm-up forwards of ``stage`` under the interleaved schedule."""
    total = micro_batches * chunks
    return total if micro_batches == stages else min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)


def needs(kind: str, micro_batch: int, chunk: int, stage: int, stages: int, chunks: int) -> Message | None:
    """The message a forward or backward waits for (``None`` at the ends of the pipeline)."""
    if kind == "F":
        if stage == 0 and chunk == 0:
            return None
        return ("act", micro_batch, chunk, stage - 1) if stage else ("act", micro_batch, chunk - 1, stages - 1)
    if stage == stages - 1 and chunk == chunks - 1:
        return None
    return ("grad", micro_batch, chunk, stage + 1) if stage < stages - 1 else ("grad", micro_batch, chunk + 1, 0)


def pipeline_steps(schedule: PipelineSchedule, stages: int, stage: int, micro_batches: int,
                   chunks: int = 1) -> list[list[tuple[str, int, int]]]:
    """("F"|"B", micro-batch, model chunk) in the order ``stage`` runs them, cut into the steps
    between exchanges: one forward or backward each, or under the interleaved schedule
    (``chunks`` > 1) each steady-state forward with the backward that follows it.

    >>> pipeline_steps(PipelineSchedule.ONE_F_ONE_B, 4, 2, 8, 2)[5:8]  # 6 warm-up forwards
    [[('F', 1, 1)], [('F', 2, 1), ('B', 0, 1)], [('F', 3, 1), ('B', 1, 1)]]
    """
    if chunks == 1:
        return [[(kind, j, 0)] for kind, j in pipeline_order(schedule, stages, stage, micro_batches)]
    order = interleaved_order(stages, stage, micro_batches, chunks)
    warmup = _interleaved_warmup(stages, stage, micro_batches, chunks)
    steady = len(order) - 2 * warmup
    return ([[item] for item in order[:warmup]]
            + [order[warmup + 2 * k:warmup + 2 * k + 2] for k in range(steady // 2)]
            + [[item] for item in order[warmup + steady:]])
