"""The paths NCCL's rings and trees take on PCIe nodes (no NVSwitch: GPUs on PCIe switches under two
sockets, some in NVLink-bridged pairs), and what the twin charges for them (docs/physics.md,
"Rings and trees on PCIe nodes")."""

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.des import CollectiveRun, simulate
from twin.model.protocols import store_efficiency
from twin.model.schedule import schedule_for
from twin.nccl_model.search import ring_orders
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "twin/topology/presets").glob("*.yaml"))


def socket_crossings(geom, chain: list[str]) -> int:
    """Edges of a chain whose route crosses the link between two sockets."""
    return sum(any(h.kind == "cpu" for h in geom.flow(a, b).hops) for a, b in pairwise(chain))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("nodes", [1, 2])
def test_a_tree_chain_crosses_between_sockets_at_most_once(preset, nodes):
    """A tree's chain inside a node leaves a group of GPUs (a pair, a switch, a socket) only once all
    of it is in, so it crosses the socket link at most once, on every preset and channel; on the
    PCIe servers whose GPUs sit under both sockets, exactly once."""
    geom = Communicator.first(load_cluster(preset, nodes=nodes)).geometry()
    for channel in range(8):
        for host in range(geom.nnodes):
            chain = geom.tree_chain(host, channel)
            assert sorted(chain) == sorted(geom.ring(channel)[host * geom.ppn:(host + 1) * geom.ppn])
            crossings = socket_crossings(geom, chain)
            assert crossings <= 1, f"{preset} channel {channel} node {host}: {chain} crosses {crossings} times"
            if preset in ("l40s-pcie", "a40-pcie", "a40-nvlink-pairs", "h100-nvl", "h100-pcie"):
                assert crossings == 1, f"{preset} channel {channel}: {chain}"


def test_the_tree_chain_is_not_the_ring_backwards_where_the_ring_crosses_twice():
    """Two L40S nodes: a ring enters a node at the GPU beside its NIC and leaves by the next GPU beside
    it, so it crosses the sockets twice; the tree's chain starts at that last GPU and walks its switch
    first, crossing once: the link between the sockets carries half the tree's flows."""
    geom = Communicator.first(load_cluster("l40s-pcie", nodes=2)).geometry()
    ring = geom.ring(0)[:8]
    assert socket_crossings(geom, ring + ring[:1]) == 2
    assert socket_crossings(geom, geom.tree_chain(0, 0)) == 1
    links = {u.link: u.raw_per_payload for u in geom.share("tree", 8, Proto.SIMPLE).links}
    # Eight AMD GPUs: NCCL goes through host memory between the sockets (SHM), memory traffic
    # that the root complex does not forward peer to peer (twin.model.shm).
    assert geom.flow("n0/gpu3", "n0/gpu4").host_memory
    per_flow = 1 / store_efficiency(Proto.SIMPLE, "cpu", params=geom.params)
    assert links["n0/cpu0", "n0/cpu1"] == pytest.approx(8 * per_flow, rel=1e-9)  # one flow per channel each way


def test_rings_of_bridged_pairs_go_both_ways_as_nccls_search_finds_them():
    """Four A40s in NVLink pairs on one switch: NCCL's search sends two of its four ring channels
    0-1-2-3 and two 0-3-2-1, so each GPU's PCIe link carries half the ring's flows each way; with
    every channel one way round, one direction carried them all and Tree looked 37 % faster."""
    cluster = load_cluster("a40-nvlink-pairs", nodes=1)
    comm = Communicator.first(cluster, 4)
    geom = comm.geometry()
    rings = [r[r.index("n0/gpu0"):] + r[:r.index("n0/gpu0")] for r in (geom.ring(c) for c in range(8))]
    assert rings.count(["n0/gpu0", "n0/gpu1", "n0/gpu2", "n0/gpu3"]) == 4
    assert rings.count(["n0/gpu0", "n0/gpu3", "n0/gpu2", "n0/gpu1"]) == 4
    assert [r for r in ring_orders(cluster, comm.gpus)] == [rings[0], rings[1], rings[2], rings[3]]
    pcie = {u.link: u.raw_per_payload for u in geom.share("ring", 8, Proto.SIMPLE).links if "n0/pcie0" in u.link}
    assert len(pcie) == 8 and len(set(pcie.values())) == 1  # every GPU's link, both ways, alike
    t = {algo: predict(comm, Op.ALLREDUCE, 128 << 20, algo=algo, proto=Proto.SIMPLE).time_us
         for algo in (Algo.RING, Algo.TREE)}
    assert 0.75 < t[Algo.TREE] / t[Algo.RING] < 1.0


def test_a_chain_fills_at_each_hops_rate_and_both_engines_agree():
    """8 H100 NVL in bridged pairs: a tree's first chunk crosses an NVLink bridge in a fraction of the
    time it takes across the sockets, so its fill steps cost well under a full step at the slowest
    hop's rate; the simulator steps the same, and on an NVSwitch every hop is alike."""
    geom = Communicator.first(load_cluster("h100-nvl"), 8).geometry()
    schedule = schedule_for(geom, Op.ALLREDUCE, 2 << 20, Algo.TREE, Proto.SIMPLE, 4, 640, 524288)
    assert 0.2 < float(schedule.fill_scale) < 0.6
    assert simulate([CollectiveRun(schedule)])[0] == pytest.approx(float(schedule.time_us()), rel=1e-9)
    # Its 14 fill steps of 256 KiB each at the slowest hop's rate would take half as long again.
    slowest = replace(schedule, fill_scale=1.0)
    assert 1.4 * float(schedule.time_us()) < float(slowest.time_us())
    dgx = Communicator.first(load_cluster("dgx-h100"), 8).geometry()
    assert schedule_for(dgx, Op.ALLREDUCE, 2 << 20, Algo.TREE, Proto.SIMPLE, 4, 640, 524288).fill_scale == 1.0
    assert schedule_for(dgx, Op.BROADCAST, 2 << 20, Algo.RING, Proto.SIMPLE, 4, 640, 524288).fill_scale == 1.0
