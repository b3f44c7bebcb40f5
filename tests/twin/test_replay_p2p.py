"""Point-to-point calls in the replay pair as NCCL pairs them: per direction, in order."""

from __future__ import annotations

import pytest

from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op
from twin.replay import ReplayError, replay
from twin.topology import load_cluster

MB = 1 << 20


@pytest.fixture(scope="module")
def h100():
    return load_cluster("dgx-h100")


def _p2p(event_id: int, peer: int, direction: str, stream: str, *after: int) -> CollectiveEvent:
    return CollectiveEvent(event_id, Op.SENDRECV, 4 * MB, "pp", "bfloat16", stream, after=after, peer=peer,
                           direction=direction, name=f"pp-{direction}")


def _exchange_trace(produce_us: float, consume_us: float) -> Trace:
    """Megatron's batched exchange between two stages: each posts its send and its receive at
    once, on streams of their own, rank 0 its send before its receive and rank 1 the other
    way round (``batch_isend_irecv`` keeps no common order across the pair). Rank 0's send
    waits for the compute that produces it; rank 1 consumes what it receives."""
    rank0 = (ComputeEvent(0, "produce", duration_us=produce_us), _p2p(1, 1, "send", "pp-send", 0),
             _p2p(2, 1, "recv", "pp-recv"))
    rank1 = (_p2p(0, 0, "send", "pp-send"), _p2p(1, 0, "recv", "pp-recv"),
             ComputeEvent(2, "consume", duration_us=consume_us, after=(1,)))
    trace = Trace(2, (ProcessGroup("pp", (0, 1)),), (RankTrace(0, rank0), RankTrace(1, rank1)), "test")
    trace.validate("test trace")
    return trace


def test_a_receive_waits_for_the_send_from_its_peer_not_for_the_peers_kth_call(h100):
    """The k-th call of each side naming the other would pair rank 0's send with rank 1's send
    and rank 1's receive with rank 0's receive, which is posted at once: rank 1 would consume
    the activations before rank 0 has computed them."""
    result = replay(_exchange_trace(5000.0, 1000.0), h100)
    assert result.mean_iteration_us >= 5000.0 + 1000.0
    assert result.mean_iteration_us < 5000.0 + 1000.0 + 500.0  # a 4 MiB NVLink send takes tens of µs


def test_a_receive_no_peer_sends_is_reported(h100):
    rank0 = (_p2p(0, 1, "send", "pp-send"), _p2p(1, 1, "send", "pp-send"))
    rank1 = (_p2p(0, 0, "recv", "pp-recv"), _p2p(1, 0, "send", "pp-send"))
    trace = Trace(2, (ProcessGroup("pp", (0, 1)),), (RankTrace(0, rank0), RankTrace(1, rank1)), "test")
    with pytest.raises(ReplayError, match=r"never issue their matching call"):
        replay(trace, h100)


def test_a_direction_is_checked():
    bad = CollectiveEvent(0, Op.SENDRECV, 8, "pp", peer=1, direction="both")
    trace = Trace(2, (ProcessGroup("pp", (0, 1)),), (RankTrace(0, (bad,)),), "test")
    with pytest.raises(Exception, match=r"direction must be one of send, recv, got 'both'"):
        trace.validate("t.json")


def test_directions_survive_the_trace_file(tmp_path):
    from traces.trace_file import load_trace, save_trace

    path = tmp_path / "p2p.json"
    save_trace(_exchange_trace(10.0, 10.0), path)
    events = [e for r in load_trace(path).ranks for e in r.events if isinstance(e, CollectiveEvent)]
    assert [e.direction for e in events] == ["send", "recv", "send", "recv"]


def _synchronised_exchange(syncs: bool) -> Trace:
    """Rank 0 computes, sends, then issues a phase whose host time is 500 µs; rank 1 receives."""
    rank0 = (ComputeEvent(0, "produce", duration_us=1000.0, host_us=0.0), _p2p(1, 1, "send", "pp-send", 0),
             ComputeEvent(2, "next", duration_us=10.0, host_us=500.0))
    rank1 = (_p2p(0, 0, "recv", "pp-recv"), ComputeEvent(1, "consume", duration_us=10.0, host_us=0.0, after=(0,)))
    return Trace(2, (ProcessGroup("pp", (0, 1)),), (RankTrace(0, rank0), RankTrace(1, rank1)), "test",
                 {"host_syncs_after_p2p": True} if syncs else {})


def test_where_the_framework_synchronises_after_an_exchange_the_host_waits_for_it(h100):
    """Megatron-LM's torch.cuda.synchronize() after each batched exchange: the host issues the next
    phase only once the send is done, so its 500 µs of host time follow the 1 ms phase instead of
    hiding under it."""
    free, synchronised = (replay(_synchronised_exchange(s), h100).mean_iteration_us for s in (False, True))
    assert free < 1000.0 + 100.0
    assert synchronised >= 1000.0 + 500.0
