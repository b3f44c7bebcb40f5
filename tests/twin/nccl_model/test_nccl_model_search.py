"""The topology-search emulation on the shipped presets, against channel counts in NCCL logs.

Sources of the expected counts (NCCL INFO lines in public issues):
  DGX/HGX A100, one node: 24 coll channels — NVIDIA/nccl-tests#100 ("Channel 23/24").
  H800 (8 NVLinks per GPU), one node: 16 coll channels — NVIDIA/nccl#892.
  3 × 8 H100 with 8 NICs each: 16 channels — NVIDIA/nccl#1453 ("Channel 00/16").
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import PathType, nccl_choice
from twin.nccl_model.cost_table import enabled
from twin.nccl_model.search import comm_info
from twin.topology import ClusterSpec, build_cluster, load_cluster, read_spec


def test_dgx_a100_node():
    cluster = load_cluster("dgx-a100")
    info = comm_info(cluster, cluster.gpus())
    assert (info.nranks, info.nnodes, info.sm_version) == (8, 1, 80)
    assert (info.nchannels, info.graph_channels, info.bw_intra) == (24, 12, 20.0)
    assert info.intra_nvlink and info.type_intra == PathType.NVL
    assert not info.nvls_support  # NVLS needs sm90 and NVSwitch multicast
    assert info.p2p_channels_per_peer == 32
    small, large = nccl_choice(info, Op.ALLREDUCE, 8), nccl_choice(info, Op.ALLREDUCE, 1 << 30)
    assert (small.algo, small.proto, large.algo, large.proto) == (Algo.RING, Proto.LL, Algo.RING, Proto.SIMPLE)


@pytest.mark.parametrize(("version", "per_channel"), [
    ((2, 8, 4), 21.0),    # speedArray 42 first, SM80_NVLINK_WIDTH 21: 6 rings at 42 split into 12 at 21
    ((2, 12, 7), 22.0),   # speedArrayIntra 44 first, SM80_NVLINK_WIDTH 22: 6 at 44 split into 12 at 22
    ((2, 28, 9), 20.0),   # 40 first, SM80_NVLINK_BW 20: 6 at 40 split into 12 at 20
])
def test_dgx_a100_search_follows_the_release(version, per_channel):
    """src/graph/search.cc and src/graph/topo.h at each tag: the A100 speed list and per-link NVLink
    figure changed twice; the 12 NVLinks of a GPU always hold six rings, split in two and doubled
    at connect time into 24 channels, but NCCL's per-channel bandwidth (its cost model's input) moves."""
    cluster = load_cluster("dgx-a100")
    info = comm_info(cluster, cluster.gpus(), nccl_version=version)
    assert (info.nchannels, info.graph_channels, info.bw_intra) == (24, 12, per_channel)


def test_abci_two_nodes_under_nccl_2_8():
    """ABCI node (A), 4 HDR NICs (25 GB/s) per node, NCCL 2.8.4: one speed list for rings and trees
    (no 48 GB/s inter-node entry), so the trees' intra-node speed rises only to 42 (2.28: 48)."""
    cluster = load_cluster("abci-a", nodes=2)
    old, new = (comm_info(cluster, cluster.gpus(), nccl_version=v) for v in ((2, 8, 4), (2, 28, 9)))
    assert (old.nchannels, old.bw_inter, old.tree_bw_intra) == (8, 24.0, 42.0)
    assert (new.nchannels, new.bw_inter, new.tree_bw_intra) == (8, 24.0, 48.0)


def test_h800_matches_its_log():
    spec = read_spec("dgx-h100").to_dict()
    spec["node"]["nvlink"]["links"] = 8
    cluster = build_cluster(ClusterSpec.from_dict(spec, "h800 test"))
    info = comm_info(cluster, cluster.gpus())
    assert (info.nchannels, info.graph_channels, info.bw_intra) == (16, 8, 20.0)


def test_dgx_h100_node_has_nvls():
    cluster = load_cluster("dgx-h100")
    info = comm_info(cluster, cluster.gpus())
    assert (info.nchannels, info.bw_intra) == (24, 30.0)
    assert info.nvls_support and (info.nvls_channels, info.nvls_graph_channels) == (16, 8)
    assert nccl_choice(info, Op.ALLREDUCE, 1 << 30).algo is Algo.NVLS
    assert not comm_info(cluster, cluster.gpus(), nvls_enable=False).nvls_support


def test_three_h100_nodes():
    cluster = load_cluster("dgx-h100", nodes=3)
    info = comm_info(cluster, cluster.gpus())
    assert (info.nnodes, info.nchannels, info.bw_inter) == (3, 16, 48.0)
    assert info.nvls_support  # NVLSTree across nodes; plain NVLS needs CollNet
    table_ok = enabled(info, Op.ALLREDUCE, Algo.NVLS_TREE, Proto.SIMPLE)
    assert table_ok and not enabled(info, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)


def test_two_a100_nodes_are_nic_bound():
    cluster = load_cluster("dgx-a100", nodes=2, gpus_per_node=2)
    info = comm_info(cluster, cluster.gpus())
    assert (info.nnodes, info.nranks) == (2, 4)
    assert info.bw_inter == 24.0  # PCIe Gen4 x16 to the NIC, below the 25 GB/s of 200 Gb/s
    assert info.tree_bw_intra >= info.tree_bw_inter  # pass 2 raises tree bwIntra only
    assert info.p2p_channels_per_peer == 2
    one_per_node = comm_info(cluster, [g for g in cluster.gpus() if g.endswith("/gpu0")])
    assert (one_per_node.nchannels, one_per_node.nnodes) == (2, 2)


def test_pcie_pair_and_nvlink_pair():
    l40s = load_cluster("l40s-pcie")
    info = comm_info(l40s, l40s.gpus()[:2])
    assert (info.nchannels, info.bw_intra, info.type_intra) == (4, 12.0, PathType.PIX)
    assert not info.intra_nvlink
    assert not enabled(info, Op.ALLREDUCE, Algo.RING, Proto.LL128)
    a40 = load_cluster("a40-nvlink-pairs", nodes=1)
    pair = comm_info(a40, a40.gpus()[:2])  # 4 bridge links × 12 GB/s: 1 × 40 duplicated to 2 × 20
    assert (pair.nchannels, pair.graph_channels, pair.bw_intra, pair.intra_nvlink) == (4, 2, 20.0, True)


def test_comm_info_feeds_the_version_switch():
    cluster = load_cluster("dgx-a100")
    info = comm_info(cluster, cluster.gpus(), nccl_version=(2, 27, 5))
    assert info.nccl_version == (2, 27, 5)
    assert replace(info, algo_env="ring").algo_env == "ring"


@pytest.mark.parametrize(("ranks", "message"), [
    ([], "at least one rank"),
    (["n0/gpu0", "n0/gpu0"], "twice"),
    (["n0/gpu0", "n0/nic0"], "not a GPU"),
    (["n9/gpu0"], "not a GPU"),
])
def test_bad_ranks(ranks, message):
    cluster = load_cluster("dgx-a100")
    with pytest.raises(ValueError, match=message):
        comm_info(cluster, ranks)
