"""Pipeline schedules: the order a stage runs its forwards and backwards, and the order the
activations and gradients between two stages go when chunks are interleaved.

1F1B and GPipe exchange with a neighbour in the same steps on both sides (Megatron batches
each step's sends and receives), so a stage's issue order pairs with its neighbour's. Under
the interleaved schedule the stages' warm-ups differ, so the messages between two stages are
put in one order both agree on: the order they are produced in an ideal run of the schedule
(a forward takes 1, a backward 2), in which every message is produced before it is needed.
"""

from __future__ import annotations

from traces.generate.parallelism import PipelineSchedule

__all__ = ["Message", "interleaved_order", "message_order", "pipeline_order"]

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
    warmup = total if micro_batches == stages else min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)

    def at(k: int, kind: str) -> tuple[str, int, int]:
        chunk = (k % group) // stages
        return kind, (k // group) * stages + k % stages, chunk if kind == "F" else chunks - 1 - chunk

    order = [at(k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        order += [at(warmup + k, "F"), at(k, "B")]
    return order + [at(k, "B") for k in range(total - warmup, total)]


def needs(kind: str, micro_batch: int, chunk: int, stage: int, stages: int, chunks: int) -> Message | None:
    """The message a forward or backward waits for (``None`` at the ends of the pipeline)."""
    if kind == "F":
        if stage == 0 and chunk == 0:
            return None
        return ("act", micro_batch, chunk, stage - 1) if stage else ("act", micro_batch, chunk - 1, stages - 1)
    if stage == stages - 1 and chunk == chunks - 1:
        return None
    return ("grad", micro_batch, chunk, stage + 1) if stage < stages - 1 else ("grad", micro_batch, chunk + 1, 0)


def message_order(stages: int, micro_batches: int, chunks: int) -> dict[tuple[int, int], list[Message]]:
    """Per pair of neighbouring stages (lower first), the messages between them in the order they
    are produced in an ideal run of the interleaved schedule.

    >>> message_order(2, 2, 2)[(0, 1)][:3]
    [('act', 0, 0, 0), ('act', 1, 0, 0), ('act', 0, 0, 1)]
    """
    orders = [interleaved_order(stages, s, micro_batches, chunks) for s in range(stages)]
    done: dict[tuple[str, int, int, int], float] = {}  # (kind, micro-batch, chunk, stage) → end time
    clock, position = [0.0] * stages, [0] * stages
    produced: list[tuple[float, Message]] = []
    while any(position[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while position[s] < len(orders[s]):
                kind, j, c = orders[s][position[s]]
                need = needs(kind, j, c, s, stages, chunks)
                key = need and ("F" if need[0] == "act" else "B", need[1], need[2], need[3])
                if key is not None and key not in done:
                    break
                start = max(clock[s], done[key] if key else 0.0)
                clock[s] = done[(kind, j, c, s)] = start + (1.0 if kind == "F" else 2.0)
                position[s] += 1
                progressed = True
                last_f, first_b = (s == stages - 1 and c == chunks - 1), (s == 0 and c == 0)
                if not (kind == "F" and last_f) and not (kind == "B" and first_b):
                    produced.append((clock[s], ("act" if kind == "F" else "grad", j, c, s)))
        if not progressed:
            raise AssertionError("the interleaved schedule cannot run")  # a bug, not bad input
    pairs: dict[tuple[int, int], list[Message]] = {}
    for _, message in sorted(produced, key=lambda item: (item[0], item[1][3], item[1])):
        sender = message[3]
        receiver = (sender + (1 if message[0] == "act" else -1)) % stages
        pairs.setdefault((min(sender, receiver), max(sender, receiver)), []).append(message)
    return pairs
