"""NCCL's double binary tree (``twin.model.dtree``) and the tree channels built on it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.model import dtree
from twin.model.geometry import CommGeometry
from twin.placement import Communicator
from twin.topology import load_cluster


@given(st.integers(1, 300), st.sampled_from((0, 1)))
def test_each_tree_spans_every_node_once(nnodes, tree):
    parents = [dtree.parent(nnodes, node, tree) for node in range(nnodes)]
    assert parents.count(-1) == 1
    assert max(Counter(p for p in parents if p >= 0).values(), default=0) <= 2
    for node in range(nnodes):  # every node reaches the root without a cycle
        seen = set()
        while parents[node] >= 0:
            assert node not in seen
            seen.add(node)
            node = parents[node]


@given(st.integers(1, 300))
def test_btree_children_name_their_parent(nnodes):
    for node in range(nnodes):
        for child in dtree.btree(nnodes, node)[1]:
            assert dtree.btree(nnodes, child)[0] == node


def test_trees_as_nccl_logs_them():
    # ncclGetDtree for 4 nodes: tree 0 is 0 -> 2 -> {1, 3}, tree 1 its mirror 3 -> 1 -> {2, 0}
    assert [dtree.parent(4, n, 0) for n in range(4)] == [-1, 2, 0, 2]
    assert [dtree.parent(4, n, 1) for n in range(4)] == [1, 3, 1, -1]
    # an odd count shifts instead: 3 nodes, tree 1 is tree 0 (0 -> 2 -> 1) moved by one node
    assert [dtree.parent(3, n, 0) for n in range(3)] == [-1, 2, 0]
    assert [dtree.parent(3, n, 1) for n in range(3)] == [1, -1, 0]


def test_copies_of_a_search_channel_take_the_other_tree():
    """On 8 ABCI-A nodes (4 NICs, one search channel each) channel c and its copy c + 4 share a
    NIC and use the two trees, so no node's NIC carries more than one inner tree channel: 4
    network flows leave it, not 6 (from two GPUs of its chain: a balanced tree)."""
    geom = CommGeometry(load_cluster("abci-a", nodes=8), nccl_version=(2, 8, 4))
    heads_up = {}
    for channel in range(8):
        net = [f for f in geom.tree_flows(channel) if f.kind == "net"]
        heads_up[channel] = Counter(geom.cluster.host_of(f.src) for f in net)
        assert len(net) == 2 * 7  # 7 tree edges between the 8 nodes, both directions
    assert heads_up[0] != heads_up[4]
    for nic in range(4):
        out = heads_up[nic] + heads_up[nic + 4]
        assert max(out.values()) == 4


def test_a_network_child_slows_a_tree_cta_and_a_balanced_tree_gives_each_gpu_one():
    """Tree LL128 on ABCI-A nodes: a chain GPU that also reduces a network child's data and
    broadcasts to it copies slower than on one node; a balanced tree (NCCL 2.8 from 3 nodes)
    joins a middle node's two network children to two GPUs, so 4 nodes' busiest GPU has one, as
    the root's head on two nodes has."""
    def cap(nodes: int) -> float:
        comm = Communicator.first(load_cluster("abci-a", nodes=nodes), nccl_version=(2, 8, 4))
        task = comm.task(Op.ALLREDUCE, 32 << 20)
        config = Config(Algo.TREE, Proto.LL128, Transport.P2P, 8, 640, 576000)
        return float(comm.schedule(task, config).cap_gbps)

    one, two, four = cap(1), cap(2), cap(4)
    assert four == two < one
    assert dtree.inner_children(4) == 2 and dtree.inner_children(2) == 0


@pytest.mark.parametrize("nnodes", [3, 4, 8, 16])
def test_a_balanced_tree_gives_each_gpu_one_network_child(nnodes):
    """NCCL's BALANCED_TREE (``ncclTopoPreset``: ``child0Index`` 1) joins a node's lower network
    child to its chain's second GPU and the parent and upper child to the head, through the
    channel's one NIC: no GPU receives from two other nodes, and a lower child's link costs one
    more hop inside its parent node."""
    geom = CommGeometry(load_cluster("abci-a", nodes=nnodes), nccl_version=(2, 12, 12))
    assert geom.tree_pattern == "balanced"
    for channel in range(2):
        net = [f for f in geom.tree_flows(channel) if f.kind == "net"]
        children = Counter(f.dst for f in net[::2])  # each edge's flow up, from a child's head
        assert max(children.values()) == 1
        nics = {(geom.cluster.host_of(f.src), h.dst) for f in net for h in f.hops[:2] if "nic" in h.dst}
        assert len({host for host, _ in nics}) == len(nics)  # one NIC a node per channel
    assert geom.tree_chain_hops == geom.ppn - 1 + dtree.entry_hops(nnodes, "balanced")


def test_nccl_2_8_joins_two_nodes_as_a_plain_tree_and_older_gpus_split():
    """``init.cc`` @ v2.8.4-1 asks for TREE on two nodes, BALANCED_TREE above; ``ncclTopoCompute``
    turns BALANCED into SPLIT below sm_80 (2.8 – 2.9 only)."""
    assert [dtree.entry_gpu(4, node, 0, "split") for node in range(4)] == [0, 1, 1, 1]
    assert dtree.entry_hops(2, "balanced") == dtree.entry_hops(2, "tree") == 0
