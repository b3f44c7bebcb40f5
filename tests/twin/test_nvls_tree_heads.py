"""NVLS-Tree across nodes: every GPU of a node is a head, crossing from its own NICs
(``CommGeometry.nvls_tree_flows``; NCCL's ``connectNvls`` and ``getNvlsNetDev``)."""

from __future__ import annotations

from collections import Counter

import pytest

from twin.model.geometry import CommGeometry
from twin.topology import load_cluster


@pytest.mark.parametrize("preset", ["aws-p5", "dgx-h100", "hgx-b300"])
def test_every_gpu_heads_an_equal_share_of_channels_from_its_own_nics(preset):
    cluster = load_cluster(preset, nodes=2)
    geom = CommGeometry(cluster)
    heads, nics = Counter(), Counter()
    for channel in range(16):
        for flow in geom.nvls_tree_flows(channel):
            out = next(h for h in flow.hops if h.kind == "net").src  # the NIC the flow leaves by
            assert out in cluster.local_nics(flow.src), (channel, flow.src, out)
            assert cluster.host_of(flow.src) != cluster.host_of(flow.dst)
            heads[flow.src] += 1
            nics[out] += 1
    assert len(heads) == len(cluster.gpus()) and len(set(heads.values())) == 1
    # a GPU's several rails (4 EFA per GPU on a p5) take its channels in turn
    assert len(set(nics.values())) == 1
