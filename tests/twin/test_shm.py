"""NCCL's SHM transport inside a node: which hops go through host memory, and what the receiving
GPU's loads of host memory cost (``twin.model.shm``), against the H200 measurements in
``benchmarks/data``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traces.task import Op
from tuner.config import Algo, Proto, Transport
from twin.des import CollectiveRun, simulate
from twin.hardware import pcie_gbps
from twin.model.geometry import CommGeometry
from twin.model.schedule import fill_gbps_scale, first_chunk_host_gbps, host_memory_gbps, schedule_for, tree_split
from twin.model.shm import receive_gbps
from twin.topology import load_cluster

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _rows(name: str) -> list[list[str]]:
    return [line.split() for line in (DATA / name).read_text().splitlines() if line.strip() and line[0] != "#"]


def _one_way_gbps() -> float:
    """The H200's rate storing into host memory from its CTAs alone (``sm gpu->host`` rows)."""
    return max(float(r[-2]) for r in _rows("h200-host-memory.txt") if r[:2] == ["sm", "gpu->host"])


def test_the_receive_model_reproduces_the_h200_host_memory_measurements():
    """On the link as the twin carries the H200's (PCIe Gen5 x16, NCCL's 48 GB/s), every thread
    of the measured CTAs loading (no sync warp: ``benchmarks/gpu_shm_duplex.cu``)."""
    one_way = _one_way_gbps()
    assert 50 < one_way < 56  # PCIe Gen5 x16
    link = pcie_gbps(5, 16)
    checked = 0
    for pairs, threads, mode, read, *_ in _rows("h200-shm-duplex.txt")[:-1]:  # the last row: the check
        measured = float(read)
        if mode == "read-only" and measured > 0.75 * one_way:
            continue  # the link, not the latency, bounds it
        model = receive_gbps(int(pairs) * int(threads), link, duplex=mode == "coupled", sm_version=90)
        assert model == pytest.approx(measured, rel=0.10), (pairs, threads, mode)
        checked += 1
    assert checked >= 15
    # Loading while storing costs: every coupled run is slower than the same threads alone.
    alone = {(p, t): float(r) for p, t, m, r, *_ in _rows("h200-shm-duplex.txt")[:-1] if m == "read-only"}
    assert all(float(r) < alone[p, t] for p, t, m, r, *_ in _rows("h200-shm-duplex.txt")[:-1] if m == "coupled")


def test_nccl_goes_through_host_memory_where_it_refuses_peer_to_peer():
    nvl = CommGeometry(load_cluster("h100-nvl"), [f"n0/gpu{i}" for i in range(4)])
    across = nvl.flow("n0/gpu1", "n0/gpu2")  # two switches of one Intel socket: PHB
    bridged = nvl.flow("n0/gpu0", "n0/gpu1")
    assert across.host_memory and not across.via_cpu and across.kind == "pcie"
    assert not bridged.host_memory
    l40s = load_cluster("l40s-pcie")  # AMD: peer to peer through the CPU with two GPUs only
    two = CommGeometry(l40s, ["n0/gpu0", "n0/gpu4"]).flow("n0/gpu0", "n0/gpu4")
    eight = CommGeometry(l40s).flow("n0/gpu3", "n0/gpu4")
    same_switch = CommGeometry(l40s).flow("n0/gpu0", "n0/gpu1")
    assert two.via_cpu and not two.host_memory
    assert eight.host_memory and not eight.via_cpu
    assert not same_switch.host_memory and not same_switch.via_cpu
    forced = CommGeometry(l40s, ["n0/gpu0", "n0/gpu1"], Transport.SHM).flow("n0/gpu0", "n0/gpu1")
    assert forced.host_memory and not forced.via_cpu


def test_a_tree_of_bridged_pairs_receives_through_host_memory_at_the_duplex_rate():
    """On 4 H100 NVL in 2 bridged pairs a tree's SHM hop is crossed both ways, so its GPUs load and
    store host memory at once and the broadcast threads' loads bound the channel; NCCL's search
    chains 0-1-2-3 then 2-3-0-1, so each GPU loads host memory on half the 4 channels.  A ring's
    receivers there send over NVLink, load on every channel, and are bound by their link share."""
    geom = CommGeometry(load_cluster("h100-nvl"), [f"n0/gpu{i}" for i in range(4)])
    assert [[g[-1] for g in geom.tree_chain(0, c)] for c in range(4)] == [list("0123"), list("2301")] * 2
    assert geom.host_memory_receivers("tree", 4) == ((True, 48.0, 2),)
    assert geom.host_memory_receivers("ring", 4) == ((False, 48.0, 4),)
    tree = schedule_for(geom, Op.ALLREDUCE, 64 << 20, Algo.TREE, Proto.SIMPLE, 4, 640, 1 << 19)
    ring = schedule_for(geom, Op.ALLREDUCE, 64 << 20, Algo.RING, Proto.SIMPLE, 4, 544, 1 << 21)
    bound = host_memory_gbps(geom, "tree", Proto.SIMPLE, 4, min(tree_split(Proto.SIMPLE, 640)))
    assert tree.gbps == pytest.approx(bound)
    assert tree.gbps < 0.6 * geom.share("tree", 4, Proto.SIMPLE).gbps  # host memory, not the links, binds it
    assert ring.gbps <= geom.share("ring", 4, Proto.SIMPLE).gbps < host_memory_gbps(geom, "ring", Proto.SIMPLE, 4, 544)
    assert host_memory_gbps(geom, "tree", Proto.LL, 4, 640) == float("inf")
    # Both engines step the bound schedule alike, and nccl-tests' back-to-back calls take it too.
    assert simulate([CollectiveRun(tree)])[0] == pytest.approx(float(tree.time_us()), rel=1e-9)
    assert float(tree.time_us()) <= float(tree.back_to_back_us(20)) < 1.5 * float(tree.time_us())


def test_a_trees_first_chunk_meets_only_the_host_memory_traffic_of_its_step():
    """On 8 H100 NVL in 4 bridged pairs a 2 MiB tree's 2 chunks a channel cross its SHM hops while
    their receivers load host memory only on the channels of their own chain and store into it on
    none: the fill takes the copying threads' latency-bound rate alone.  In a long call the
    broadcast's first chunk meets the reduce's later ones storing up the same hop, and its last
    SHM hop meets the other chain's loads too: every chunk's bound."""
    geom = CommGeometry(load_cluster("h100-nvl"))
    through_host = [r is not None for r in geom.first_chunk_receives("tree", 4)]
    assert sum(through_host) == 6  # 3 SHM hops a chain, up and down

    def first(loops):
        return [float(g) for g, t in zip(first_chunk_host_gbps(geom, "tree", Proto.SIMPLE, 4, 256, loops, 0.0),
                                         through_host, strict=True) if t]

    alone = receive_gbps(2 * 224, pcie_gbps(5), duplex=False, sm_version=90) / 2
    assert first(2) == pytest.approx([alone] * 6)
    steady = host_memory_gbps(geom, "tree", Proto.SIMPLE, 4, 256)
    assert min(first(15)) == pytest.approx(steady)
    assert max(first(15)) == pytest.approx(alone) and steady < alone
    short = schedule_for(geom, Op.ALLREDUCE, 2 << 20, Algo.TREE, Proto.SIMPLE, 4, 640, 1 << 19)
    assert short.fill_scale < fill_gbps_scale(geom.fill_ratios("tree", Proto.SIMPLE), short.gbps, steady, np.inf)
