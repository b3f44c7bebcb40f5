"""The highest bus bandwidth the links a collective crosses allow, whatever NCCL does.

nccl-tests' ``busbw`` is defined so that, for a ring, it is the bytes every rank sends per
second: so no algorithm's busbw can beat what a rank's links carry, scaled by how many bytes
each rank must really send for one byte of busbw.  Picture AllReduce on a DGX H100: a ring
rank sends ``2(n-1)/n`` of its buffer, exactly its busbw, so busbw ≤ the GPU's NVLink rate
(18 × 25 GB/s) × the share left for payload (``link.nvlink.efficiency``); NVLS reduces inside
the NVSwitch, so a GPU sends and receives only ``(1 + 1/n)`` of its buffer and busbw may reach
``2(n-1)/(n+1)`` of that rate.  Between nodes,
every byte of a ring's busbw leaves each node once through its NICs (``Σ line rate ×
net.efficiency``); NCCL's two trees send ``2(N-1)/N`` of the buffer out of a node on average
(busbw may beat the NICs by ``(n-1)N / (n(N-1))``), an in-network reduction the whole buffer
once (busbw ≤ ``2(n-1)/n`` × the NICs).

These are upper bounds from the topology and the algorithm's traffic alone (no protocol, no
latency): the invariant tests check that no prediction exceeds them, and that no measurement
in ``tests/data/nccl-tests`` does either.

>>> from twin.topology import load_cluster
>>> from twin.model.geometry import CommGeometry
>>> geom = CommGeometry(load_cluster("dgx-h100"))
>>> round(busbw_bound_gbps(geom, Op.ALLREDUCE, Algo.RING)), round(busbw_bound_gbps(geom, Op.ALLREDUCE, Algo.NVLS))
(378, 588)
"""

from __future__ import annotations

import math

from traces.task import Op
from tuner.config import Algo
from twin.model.geometry import CommGeometry

__all__ = ["busbw_bound_gbps", "gpu_egress_gbps", "node_nic_gbps"]


def gpu_egress_gbps(geom: CommGeometry, gpu: str) -> float:
    """Payload GB/s a GPU can send inside its node: its NVLinks, and its PCIe link too when some
    rank of its node is no NVLink peer, each at its link kind's payload share
    (``link.<kind>.efficiency``).  (NCCL never sends to an NVLink peer over PCIe.)"""
    cluster = geom.cluster
    host = cluster.host_of(gpu)
    peers = set(cluster.nvlink_peers(gpu))
    others = {g for g in geom.ranks if g != gpu and cluster.host_of(g) == host}
    kinds = ("nvlink",) if others <= peers else ("nvlink", "pcie", "cpu")
    return sum(data["bw"] * geom.params.link.of(data["kind"]).efficiency
               for _, _, data in cluster.graph.edges(gpu, data=True) if data["kind"] in kinds)


def node_nic_gbps(geom: CommGeometry, host: int) -> float:
    """Payload GB/s a node can send to the fabric: its NICs' line rates × ``net.efficiency``."""
    graph = geom.cluster.graph
    rate = sum(d["bw"] for nic in geom.cluster.nics(host) for _, _, d in graph.edges(nic, data=True)
               if d["kind"] == "net")
    return rate * geom.params.net.efficiency


def busbw_bound_gbps(geom: CommGeometry, op: Op, algo: Algo) -> float:
    """The busbw (GB/s, nccl-tests' definition) ``op`` by ``algo`` cannot exceed on ``geom``.

    AllToAll and SendRecv take ``algo`` RING, as ``tuner.rules`` names them.
    """
    n = geom.nranks
    intra = min(gpu_egress_gbps(geom, g) for g in geom.ranks)
    hosts = sorted({geom.cluster.host_of(g) for g in geom.ranks})
    nodes = len(hosts)
    nics = min(node_nic_gbps(geom, h) for h in hosts) if nodes > 1 else math.inf
    reduce_all = 2 * (n - 1) / n  # busbw per algbw of AllReduce
    # Trees between nodes (two of them, each carrying half the buffer up and down N-1 edges)
    # send 2(N-1)/N of the buffer out of a node on average.
    tree_nics = nics * reduce_all / (2 * (nodes - 1) / nodes) if nodes > 1 else math.inf
    if algo in (Algo.NVLS, Algo.NVLS_TREE):
        if op is Op.ALLREDUCE:
            # Each GPU's NVLinks carry its buffer to the switch (read by the in-switch reductions)
            # and the result back (the multicast stores), plus its 1/ppn slice once more each
            # way (the reduced slice it fetches and multicasts).
            return min(reduce_all * intra * geom.ppn / (geom.ppn + 1), tree_nics)
        return min(intra, nics)
    if op is Op.ALLREDUCE and algo is Algo.TREE:
        # Inside a node a chain's ranks send 2(ppn-1)/ppn of the buffer on average, as a ring's do.
        return min(intra, tree_nics)
    if op is Op.ALLREDUCE and algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN):
        # Each node sends its buffer once to the in-network reducer.
        return reduce_all * min(intra, nics)
    if op is Op.ALLTOALL and nodes > 1:
        ppn = geom.ppn
        return min(intra, nics * (n - 1) / (ppn * (n - ppn)))
    return min(intra, nics)
