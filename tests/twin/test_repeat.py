"""Calls repeated back to back: a one-way chain's calls overlap only as far as every rank's
kernel, which ends with its last channel, lets them (twin.model.repeat, twin.des.repeat)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.des.repeat import root_period_us
from twin.model.repeat import coupled_fill_share
from twin.model.schedule import Schedule
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

MIB = 1 << 20


@pytest.fixture(scope="module")
def abci():
    """ABCI-A nodes (8 A100, 4 HDR NICs each) under NCCL 2.8.4, by node count."""
    return {n: Communicator.first(load_cluster("abci-a", nodes=n), nccl_version=(2, 8, 4)) for n in (1, 2)}


def chain(comm: Communicator, nbytes: int, nchannels: int, proto: Proto = Proto.LL128) -> Schedule:
    threads, chunk = (640, 576000) if proto is Proto.LL128 else (512, 32768)
    return comm.schedule(comm.task(Op.BROADCAST, nbytes), Config(Algo.RING, proto, Transport.P2P, nchannels,
                                                                threads, chunk))


def test_one_channel_overlaps_down_to_the_interval(abci):
    s = chain(abci[2], 256 << 10, 1, Proto.LL)
    assert s.coupling == 0.0
    assert float(s.gpu_period_us()) == pytest.approx(float(s.interval_us()))
    assert float(s.gpu_period_us()) < 0.7 * float(s.time_us())  # the 15 hops' fill not waited for


def test_channels_in_one_order_overlap_as_one(abci):
    # One NVSwitch node: every channel's ring, cut at the root, visits the GPUs in one order.
    geom = abci[1].geometry()
    assert all(geom.repeat_coupling(n, Proto.LL) == 0.0 for n in (2, 8, 24))
    s = chain(abci[1], 4 * MIB, 16)
    assert float(s.gpu_period_us()) == pytest.approx(float(s.interval_us()))


def test_chains_that_reach_a_gpu_at_different_depths_wait_for_part_of_the_fill(abci):
    # Two nodes: channel 0 leaves the root's node after all its GPUs, channel 1 after three of
    # them, so GPUs that channel 0 reaches first come last on channel 1.
    s = chain(abci[2], MIB, 8)
    assert 0.5 < s.coupling < 1.0
    assert float(s.interval_us()) < float(s.gpu_period_us()) < float(s.time_us() - s.host.skew_us)
    assert float(s.back_to_back_us(100)) < float(s.time_us())


def test_allreduce_rounds_do_not_overlap(abci):
    comm = abci[2]
    s = comm.schedule(comm.task(Op.ALLREDUCE, MIB), Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 576000))
    assert s.coupling == 0.0 and not s.one_way
    assert float(s.gpu_period_us()) == pytest.approx(float(s.time_us() - s.host.skew_us))


@pytest.mark.parametrize(("nbytes", "nchannels"), [(128 << 10, 2), (8 * MIB, 2)])
def test_the_simulated_calls_settle_at_the_closed_form_period(abci, nbytes, nchannels):
    s = chain(abci[2], nbytes, nchannels)
    arrivals = abci[2].geometry().chain_arrivals(nchannels, Proto.LL128)
    assert root_period_us(s, arrivals, iters=60) == pytest.approx(float(s.gpu_period_us()), rel=0.01)


def test_prediction_reports_one_call_and_the_repeated_loop(abci):
    p = predict(abci[2], Op.BROADCAST, MIB)
    assert p.config.nchannels > 1 and p.repeated_us < p.time_us
    assert p.as_dict()["repeated_us"] == pytest.approx(p.repeated_us, abs=1e-3)
    ring = predict(abci[2], Op.ALLREDUCE, MIB)
    assert ring.repeated_us == pytest.approx(ring.time_us, rel=0.02)  # only the first launch is shared


@st.composite
def chains(draw):
    """Channels' chains over a few ranks: each a random order from the root (rank 0), with random
    hop latencies."""
    nranks = draw(st.integers(2, 6))
    nchannels = draw(st.integers(1, 3))
    arrivals = np.zeros((nchannels, nranks))
    for c in range(nchannels):
        order = [0, *draw(st.permutations(range(1, nranks)))]
        hops = draw(st.lists(st.floats(0.1, 10.0), min_size=nranks - 1, max_size=nranks - 1))
        arrivals[c, order[1:]] = np.cumsum(hops)
    return arrivals


def schedule_of(interval_us: float, fill_us: float, coupling: float) -> Schedule:
    """A one-way chain whose interval (its launch: its chunks take no time) and fill (four hops)
    are as given, without host skew."""
    return Schedule("pipeline", 4, 1, 1.0, 1.0, 1e9, fill_us / 4, interval_us, one_way=True, in_flight=1 << 30,
                    coupling=coupling)


@settings(max_examples=20, deadline=None)
@given(chains(), st.floats(1.0, 50.0), st.floats(0.0, 50.0))
def test_repeated_calls_never_beat_the_interval_nor_lose_to_one_call(arrivals, interval, fill):
    share = coupled_fill_share(arrivals)
    assert 0.0 <= share <= 1.0
    if arrivals.shape[0] == 1 or all((row == arrivals[0]).all() for row in arrivals):
        assert share == 0.0  # one order: nothing holds the next call back
    coupled = schedule_of(interval, fill, share)
    call = float(coupled.time_us())
    assert float(coupled.interval_us()) == pytest.approx(interval) and call == pytest.approx(interval + fill)
    assert float(coupled.interval_us()) - 1e-9 <= float(coupled.gpu_period_us()) <= call + 1e-9
    # Every rank's kernel ends with its last channel: the calls, run one by one (a FIFO a call
    # deep), never settle faster than the closed form's cycle, nor slower than one call each.
    simulated = root_period_us(coupled, arrivals, iters=120, ahead=1)
    assert float(coupled.gpu_period_us()) * 0.98 <= simulated <= call + 1e-6
