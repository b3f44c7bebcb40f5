"""The pipeline bubble of generated Megatron schedules, replayed: 1F1B's (p − 1)/m and interleaved
1F1B's (p − 1)/(v·m) of the ideal time (Narayanan et al., SC'21, section 2.2), and every pipeline
send of a generated trace meeting the receive that consumes it."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import CollectiveEvent, ComputeEvent
from traces.task import Op
from twin.compute import ComputeTimer
from twin.placement import cluster_for
from twin.replay import replay

LAYERS_PER_CHUNK = 3
"""Enough work per model chunk that the exchanges (16 MiB over NVLink) stay a few per cent of it."""


def _workload(stages: int, chunks: int, micro_batches: int):
    return gpt_workload(hidden=4096, heads=32, layers=stages * chunks * LAYERS_PER_CHUNK, seq=2048, vocab=1024,
                        pp=stages, vpp=chunks, micro_batch=1, global_batch=micro_batches)


@settings(max_examples=8, deadline=None)
@given(stages=st.integers(3, 8), chunks=st.integers(1, 3), per_stage=st.integers(1, 3))
def test_the_replayed_bubble_is_megatrons(stages, chunks, per_stage):
    """Iteration time less the busiest stage's forwards and backwards (timed alone) and its
    optimizer step is the bubble: at least (p − 1)/(v·m) of that work, and at most 12 % more
    (the exchanges themselves, which Megatron's blocking exchanges leave exposed)."""
    m = stages * per_stage
    trace = generate(_workload(stages, chunks, m), ranks="all")
    cluster = cluster_for(trace, "dgx-a100")
    timer = ComputeTimer.for_trace(trace, cluster.gpu, host_speed=cluster.host_cpu.single_thread)

    def work(rank, optimizer: bool) -> float:
        """GPU time, and the schedule's own host steps (no kernels: the GPU waits for them after
        each blocking exchange)."""
        return sum(timer.cost(e).host_us if e.category == "host" else timer.cost(e).gpu_us for e in rank.events
                   if isinstance(e, ComputeEvent) and (e.category == "optimizer") == optimizer)

    ideal = max(work(rank, False) for rank in trace.ranks)
    step = max(work(rank, True) for rank in trace.ranks)
    bubble = replay(trace, cluster).mean_iteration_us - ideal - step
    megatron = (stages - 1) / (chunks * m) * ideal
    assert 0.97 * megatron <= bubble <= 1.12 * megatron, (bubble / megatron, megatron)


def test_every_send_of_a_generated_pipeline_meets_the_receive_of_the_same_message():
    """Per direction, the k-th send from a stage carries what the k-th receive on its peer
    expects (activations or gradients), under 1F1B and interleaved 1F1B, where a stage sends to
    and receives from each neighbour in both directions (the last stage's wrap to the first)."""
    for chunks in (1, 2):
        trace = generate(_workload(4, chunks, 8), ranks="all")
        sent, received = defaultdict(list), defaultdict(list)
        for rank in trace.ranks:
            for e in rank.events:
                if isinstance(e, CollectiveEvent) and e.op is Op.SENDRECV:
                    what = e.name.split(".")[-1]
                    if e.direction == "send":
                        sent[(rank.rank, e.peer)].append(what)
                    else:
                        received[(e.peer, rank.rank)].append(what)
        assert sent == received and sum(map(len, sent.values())) == 2 * (4 * chunks - 1) * 8
        assert set(sent) == ({(s, s + 1) for s in range(3)} | {(s + 1, s) for s in range(3)}
                             | ({(3, 0), (0, 3)} if chunks > 1 else set()))


def test_pipeline_sends_on_the_world_communicator_get_the_one_channel_nccl_gives_a_large_one():
    """Megatron-LM until 2023 sent on the default process group: NCCL halves a net peer's two
    channels (``NCCL_NCHANNELS_PER_NET_PEER``) while 2·nranks > 4·its p2p channels, so a pair in
    a 64-rank world communicator gets one channel where the 2-rank pipeline group gets two."""
    from benchmarks.iteration_accuracy import SELENE

    channels = {}
    for world in (False, True):
        work = gpt_workload(hidden=1024, heads=16, layers=4, seq=1024, vocab=1024, dp=32, pp=2, micro_batch=1,
                            global_batch=64, pipeline_on_world=world)
        trace = generate(work)
        groups = {e.group for r in trace.ranks for e in r.events if isinstance(e, CollectiveEvent) and e.peer}
        assert groups == ({"world"} if world else {"pp:0"})
        result = replay(trace, cluster_for(trace, str(SELENE)))
        (p2p,) = [t for t in result.tasks if t.task.op is Op.SENDRECV]
        assert p2p.task.group == "1x2"  # the two stages sit on two nodes
        channels[world] = p2p.config.nchannels
    assert channels == {False: 2, True: 1}
