"""NCCL's double binary tree (``twin.model.dtree``) and the tree channels built on it."""

from __future__ import annotations

from collections import Counter

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
    network flows leave it, not 6."""
    geom = CommGeometry(load_cluster("abci-a", nodes=8), nccl_version=(2, 8, 4))
    heads_up = {}
    for channel in range(8):
        net = [f for f in geom.tree_flows(channel) if f.kind == "net"]
        heads_up[channel] = Counter(f.src for f in net)
        assert len(net) == 2 * 7  # 7 tree edges between the 8 node heads, both directions
    assert heads_up[0] != heads_up[4]
    for nic in range(4):
        out = heads_up[nic] + heads_up[nic + 4]
        assert max(out.values()) == 4


def test_a_node_heads_network_children_slow_its_tree_cta():
    """Tree LL128 on 4 ABCI-A nodes: a middle head reduces its chain child's and two network
    children's data and broadcasts to them, so its channel copies slower than on one node or on
    two (where only the root has a network child)."""
    def cap(nodes: int) -> float:
        comm = Communicator.first(load_cluster("abci-a", nodes=nodes), nccl_version=(2, 8, 4))
        task = comm.task(Op.ALLREDUCE, 32 << 20)
        config = Config(Algo.TREE, Proto.LL128, Transport.P2P, 8, 640, 576000)
        return float(comm.schedule(task, config).cap_gbps)

    one, two, four = cap(1), cap(2), cap(4)
    assert four < two < one
    assert dtree.inner_children(4) == 2 and dtree.inner_children(2) == 0
