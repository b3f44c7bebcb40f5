"""A pipeline's steady state simulated once (``twin.replay.steady``) predicts what stepping
through every micro-batch predicts, falls back to stepping when the repeats differ or do not
settle, and costs what the distinct work costs, not what the micro-batches do."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import Phase, assume, example, given, settings
from hypothesis import strategies as st

from traces.generate import generate, workload
from traces.generate.gpt import gpt_workload
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op
from twin.placement import Placement, cluster_for
from twin.replay import replay, steady
from twin.replay.simulation import _call_keys, _Replay


def _close(got, want, path: str = "") -> None:
    """Every number of two ``as_dict`` results equal to 1e-9 relative, every other field equal."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for key in want:
            _close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        if path.endswith(".tasks"):  # sorted by total time; tasks whose totals tie may come in either order
            got, want = sorted(got, key=_task_identity), sorted(want, key=_task_identity)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=2e-3), (path, got, want)  # as_dict rounds to 1e-3
    else:
        assert got == want, path


def _task_identity(task: dict) -> tuple:
    return task["op"], task["nbytes"], task["dtype"], task["nranks"], task["group"]


def _events(trace: Trace) -> int:
    return sum(len(r.events) for r in trace.ranks)


plans = st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([2, 4]),
                  st.integers(26, 30), st.booleans(), st.sampled_from(["none", "full"]))


@settings(max_examples=5, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))  # a replay each
@given(plans, st.sampled_from(["dgx-h100", "a40-nvlink-pairs"]))
@example((2, 1, 4, 29, True, "full"), "a40-nvlink-pairs")  # two TP groups' totals tie to the last bit
def test_the_steady_state_replay_predicts_what_stepping_every_micro_batch_does(plan, topology):
    tp, dp, pp, micro_batches, sequence_parallel, recompute = plan
    work = gpt_workload(hidden=256, heads=8, layers=2 * pp, seq=128, tp=tp, dp=dp, pp=pp, micro_batch=1,
                        global_batch=micro_batches * dp, sequence_parallel=sequence_parallel and tp > 1,
                        recompute=recompute, dtype="bfloat16")
    trace = generate(work)
    cluster = cluster_for(trace, topology)
    placement = Placement(trace, cluster)
    fast = replay(trace, cluster, placement=placement)
    stepped = replay(trace, cluster, placement=placement, periods=False)
    assert stepped.simulated_events == _events(trace)
    assert fast.simulated_events < stepped.simulated_events  # every such plan repeats: the steady state was used
    _close(fast.as_dict(), stepped.as_dict())
    assert fast.mean_iteration_us == pytest.approx(stepped.mean_iteration_us, rel=1e-9)


def test_yi_34b_with_24_micro_batches_replays_to_1e_9_of_stepping_each():
    trace = generate(workload("autoccl-yi34b", overrides={"micro_batches": 24}))
    cluster = cluster_for(trace, "a40-nvlink-pairs")
    placement = Placement(trace, cluster)
    fast = replay(trace, cluster, placement=placement)
    stepped = replay(trace, cluster, placement=placement, periods=False)
    assert fast.simulated_events < stepped.simulated_events / 2
    _close(fast.as_dict(), stepped.as_dict())


def test_twice_the_micro_batches_are_not_twice_the_simulated_events():
    """The cost follows the distinct work: 32 or 64 micro-batches step through as many events."""
    def simulated(micro_batches: int) -> tuple[int, int]:
        trace = generate(gpt_workload(hidden=256, heads=8, layers=4, seq=128, tp=2, pp=2,
                                      global_batch=micro_batches, dtype="bfloat16"))
        return replay(trace, cluster_for(trace, "dgx-h100")).simulated_events, _events(trace)

    (small, small_total), (large, large_total) = simulated(32), simulated(64)
    assert large_total > 1.9 * small_total
    assert large <= small < small_total / 2


def _two_ranks(blocks: list[list[int]]) -> Trace:
    """Two ranks, each a compute phase then AllReduces of the sizes in its blocks."""
    ranks = []
    for rank in (0, 1):
        events, i = [], 0
        for sizes in blocks:
            events.append(ComputeEvent(i, "layer", category="memory", mem_bytes=1 << 24, dtype="bfloat16"))
            i += 1
            for nbytes in sizes:
                events.append(CollectiveEvent(i, Op.ALLREDUCE, nbytes, "g", dtype="bfloat16", stream="nccl",
                                              after=(i - 1,)))
                i += 1
        ranks.append(RankTrace(rank, tuple(events)))
    return Trace(2, (ProcessGroup("g", (0, 1)),), tuple(ranks))


def test_repeats_of_other_sizes_are_stepped_through():
    """Data-dependent sizes (each block its own): nothing repeats, every event is simulated."""
    trace = _two_ranks([[(1 << 20) + 64 * k] for k in range(20)])
    assert steady.shorten(trace, steady.KEEP, _call_keys) is None
    cluster = cluster_for(trace, "dgx-h100")
    assert replay(trace, cluster).simulated_events == _events(trace)


def test_repeats_that_match_calls_unevenly_are_stepped_through():
    """Rank 1 issues two AllReduces per block where rank 0 issues one: taking blocks out of both
    would pair other calls, so the trace is replayed whole (and the same as stepping it)."""
    even = _two_ranks([[1 << 20, 1 << 20]] * 12)
    rank0 = RankTrace(0, tuple(e for e in _two_ranks([[1 << 20]] * 24).ranks[0].events))
    uneven = replace(even, ranks=(rank0, even.ranks[1]))
    assert steady.shorten(even, steady.KEEP, _call_keys) is not None
    assert steady.shorten(uneven, steady.KEEP, _call_keys) is None
    cluster = cluster_for(uneven, "dgx-h100")
    fast, stepped = replay(uneven, cluster), replay(uneven, cluster, periods=False)
    assert fast.simulated_events == stepped.simulated_events == _events(uneven)
    assert fast.mean_iteration_us == stepped.mean_iteration_us


def test_a_shortened_replay_that_does_not_repeat_its_period_is_not_extended():
    trace = _two_ranks([[1 << 20]] * 20)
    short = steady.shorten(trace, steady.KEEP, _call_keys)
    cluster = cluster_for(trace, "dgx-h100")
    run = _Replay(short.trace, cluster, {}, Placement(trace, cluster))
    run.spans = {}
    run.run()
    assert steady.extend(run, short) is not None
    middle = short.runs[0].repeats // 2
    key = (1, short.runs[1].start + middle * short.runs[1].period + 1)  # rank 1's AllReduce of the middle block
    start, end = run.spans[key]
    run.spans[key] = (start, end + 1.0)  # one call a µs late: not periodic any more
    assert steady.extend(run, short) is None


@given(st.lists(st.integers(0, 3), max_size=6), st.lists(st.integers(0, 50), min_size=1, max_size=5, unique=True),
       st.integers(2, 12), st.lists(st.integers(0, 3), max_size=6))
def test_a_run_of_repeated_blocks_is_found(prefix, block, repeats, suffix):
    """Blocks of fresh signatures between arbitrary ones: the run found covers them at least (each
    event once per block, as a micro-batch's events are, named by layer; a block holding one event
    many times over only two repeats may be missed, and is then stepped through).  Guaranteed where
    the repeats outnumber the other events, as a pipeline's steady state does: the block's period is
    then the commonest distance (each other event is at most one distance of a kind)."""
    assume((repeats - 1) * len(block) > len(prefix) + len(suffix))
    block = [100 + b for b in block]
    signature = prefix + block * repeats + suffix
    run = steady.find_run(signature)
    assert run is not None
    assert (run.repeats - 1) * run.period >= (repeats - 1) * len(block)
    stretch = signature[run.start:run.start + run.repeats * run.period]
    assert stretch == stretch[:run.period] * run.repeats
