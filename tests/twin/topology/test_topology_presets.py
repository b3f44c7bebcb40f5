"""Preset clusters: shapes, bandwidths, the routes NCCL's transports take, overrides and subsets."""

import doctest
from dataclasses import replace

import pytest

import twin.topology
import twin.topology.cluster
import twin.topology.loader
import twin.topology.summary
from twin.topology import TopologyError, build_cluster, list_presets, load_cluster, read_spec

PRESETS = [
    "a40-nvlink-pairs", "a40-pcie", "abci-a", "aws-p5", "aws-p5e", "aws-p5en", "azure-nd-h100-v5", "azure-nd-h200-v5",
    "dgx-a100", "dgx-a100-80gb", "dgx-b200", "dgx-h100", "gb200-nvl72", "gcp-a3-high", "gcp-a3-mega",
    "gcp-a3-ultra", "gcp-a4", "gh200-slingshot", "h100-nvl", "h100-pcie", "hgx-b300", "hgx-h200", "l40s-pcie",
    "oci-bm-gpu-h100-8",
]


def kinds(hops):
    return [h.kind for h in hops]


def path(hops):
    return [hops[0].src] + [h.dst for h in hops]


def test_list_presets_names_and_describes_every_preset():
    """Every shipped preset is listed with a description."""
    presets = dict(list_presets())
    assert sorted(presets) == PRESETS
    assert all(len(d) > 20 for d in presets.values())


@pytest.mark.parametrize(("name", "nodes", "gpus", "model", "nics", "nic_gbps", "nvswitch"), [
    ("dgx-a100", 1, 8, "A100-SXM4-40GB", 8, 200, True),
    ("dgx-h100", 1, 8, "H100-SXM5-80GB", 8, 400, True),
    ("hgx-h200", 1, 8, "H200-SXM-141GB", 8, 400, True),
    ("l40s-pcie", 1, 8, "L40S", 2, 100, False),
    ("a40-nvlink-pairs", 2, 8, "A40", 2, 400, False),
    ("a40-pcie", 4, 8, "A40", 1, 100, False),
])
def test_preset_shapes(name, nodes, gpus, model, nics, nic_gbps, nvswitch):
    """Node count, GPUs and model, NICs and their rate, NVSwitch or not."""
    cluster = load_cluster(name)
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu_model) == (nodes, gpus, model)
    assert cluster.nics_per_node == nics
    assert {cluster.graph.nodes[n]["gbps"] for n in cluster.nics()} == {nic_gbps}
    assert cluster.has_nvswitch() is nvswitch


@pytest.mark.parametrize(("name", "per_gpu", "peers"), [
    ("dgx-h100", 450.0, 7), ("dgx-a100", 300.0, 7), ("hgx-h200", 450.0, 7),
    ("a40-nvlink-pairs", 56.25, 1), ("l40s-pcie", 0.0, 0),
])
def test_per_gpu_nvlink_bandwidth_and_peers(name, per_gpu, peers):
    """NVLink GB/s out of each GPU (H100: 18 × 25 = 450) and how many GPUs it reaches over NVLink."""
    cluster = load_cluster(name)
    for gpu in cluster.gpus():
        assert cluster.nvlink_bw(gpu) == per_gpu
        assert len(cluster.nvlink_peers(gpu)) == peers


def test_gpus_are_in_rank_order_node_major():
    """gpus() is node-major, local index minor, and host_of agrees."""
    cluster = load_cluster("dgx-h100", nodes=3)
    gpus = cluster.gpus()
    assert gpus[:2] == ["n0/gpu0", "n0/gpu1"] and gpus[8] == "n1/gpu0" and len(gpus) == 24
    assert [cluster.host_of(g) for g in gpus] == [i // 8 for i in range(24)]


def test_nvswitch_route_is_two_nvlink_hops():
    """Inside a DGX H100 every GPU pair goes GPU → NVSwitch → GPU at 450 GB/s."""
    hops = load_cluster("dgx-h100").route("n0/gpu0", "n0/gpu5")
    assert path(hops) == ["n0/gpu0", "n0/nvswitch", "n0/gpu5"]
    assert [h.bw for h in hops] == [450.0, 450.0] and kinds(hops) == ["nvlink", "nvlink"]


def test_inter_node_route_crosses_nic_leaf_nic_at_400_gbps():
    """Same rail on two DGX H100 nodes: GPU → PCIe switch → NIC → leaf → NIC → PCIe switch → GPU."""
    hops = load_cluster("dgx-h100", nodes=2).route("n0/gpu3", "n1/gpu3")
    assert path(hops) == ["n0/gpu3", "n0/pcie3", "n0/nic3", "leaf3", "n1/nic3", "n1/pcie3", "n1/gpu3"]
    assert kinds(hops) == ["pcie", "pcie", "net", "net", "pcie", "pcie"]
    assert [h.bw for h in hops if h.kind == "net"] == [50.0, 50.0]  # 400 Gb/s
    assert [h.bw for h in hops if h.kind == "pcie"] == [48.0] * 4  # Gen5 x16


def test_cross_rail_route_goes_through_one_spine_deterministically():
    """Different rails meet at a spine; the spine chosen is the same on every load."""
    hops = load_cluster("dgx-h100", nodes=2).route("n0/gpu0", "n1/gpu1")
    nodes = path(hops)
    assert nodes[2:4] == ["n0/nic0", "leaf0"] and nodes[5:7] == ["leaf1", "n1/nic1"]
    assert nodes[4].startswith("spine")
    assert path(load_cluster("dgx-h100", nodes=2).route("n0/gpu0", "n1/gpu1")) == nodes


def test_a40_pairs_use_nvlink_only_within_a_pair():
    """a40-nvlink-pairs: gpu0→gpu1 is one NVLink hop, gpu0→gpu2 goes over PCIe, gpu0→gpu6 across sockets."""
    cluster = load_cluster("a40-nvlink-pairs")
    pair = cluster.route("n0/gpu0", "n0/gpu1")
    assert path(pair) == ["n0/gpu0", "n0/gpu1"] and pair[0].kind == "nvlink" and pair[0].bw == 56.25
    same_switch = cluster.route("n0/gpu0", "n0/gpu2")
    assert path(same_switch) == ["n0/gpu0", "n0/pcie0", "n0/gpu2"] and set(kinds(same_switch)) == {"pcie"}
    across = cluster.route("n0/gpu0", "n0/gpu6")
    assert path(across) == ["n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/cpu1", "n0/pcie1", "n0/gpu6"]
    assert kinds(across) == ["pcie", "pcie", "cpu", "pcie", "pcie"]


def test_a40_nics_are_capped_by_their_gen4_slots():
    """A 400 Gb/s NIC (50 GB/s) behind a Gen4 x16 link moves at most 24 GB/s over PCIe."""
    hops = load_cluster("a40-nvlink-pairs").route("n0/gpu0", "n1/gpu0")
    assert min(h.bw for h in hops) == 24.0 and max(h.bw for h in hops if h.kind == "net") == 50.0


def test_nic_of_prefers_the_same_switch_and_spreads_ties():
    """DGX A100: the two GPUs of a switch take its two NICs; L40S: each socket's GPUs share its NIC."""
    a100 = load_cluster("dgx-a100")
    assert [a100.nic_of(g) for g in a100.gpus()] == [f"n0/nic{i}" for i in range(8)]
    l40s = load_cluster("l40s-pcie")
    assert [l40s.nic_of(g) for g in l40s.gpus()] == ["n0/nic0"] * 4 + ["n0/nic1"] * 4


def test_nic_of_round_robins_equally_far_nics():
    """With only NICs 0 and 1 (both on socket 0) the socket-1 GPUs alternate between them."""
    cluster = load_cluster("dgx-h100", nics_per_node=2)
    assert [cluster.nic_of(f"n0/gpu{i}") for i in range(4, 8)] == ["n0/nic0", "n0/nic1"] * 2


def test_channels_use_the_nics_nccl_picks_for_the_communicators_gpus():
    """NCCL's ``ncclTopoGetLocalNet``/``ncclTopoSelectNets``: a communicator's channels use the NICs
    local to its GPUs; GPUs sharing NICs start on different ones; a GPU alone takes turns on all
    its local NICs."""
    h100 = load_cluster("dgx-h100")
    assert h100.channel_nics(["n0/gpu5"]) == ["n0/nic5"]
    assert h100.channel_nics(h100.gpus()) == [f"n0/nic{i}" for i in range(8)]
    a100 = load_cluster("dgx-a100")
    assert a100.local_nics("n0/gpu5") == ["n0/nic4", "n0/nic5"]
    assert a100.channel_nics(["n0/gpu5"]) == ["n0/nic4", "n0/nic5"]
    assert [a100.channel_nic("n0/gpu5", c, ["n0/gpu4", "n0/gpu5"]) for c in range(3)] == ["n0/nic5"] * 3
    assert a100.channel_nics(a100.gpus()) == [f"n0/nic{i}" for i in range(8)]
    l40s = load_cluster("l40s-pcie")
    assert l40s.channel_nics(["n0/gpu6"]) == ["n0/nic1"]
    far = load_cluster("dgx-h100", nics_per_node=2)  # both NICs on socket 0
    assert far.local_nics("n0/gpu5") == ["n0/nic0", "n0/nic1"]
    assert far.channel_nic("n0/gpu4", 0, ["n0/gpu4", "n0/gpu5"]) == "n0/nic0"
    assert far.channel_nic("n0/gpu5", 0, ["n0/gpu4", "n0/gpu5"]) == "n0/nic1"


def test_shm_route_stages_through_the_source_cpu():
    """SHM goes up to host memory even when both GPUs share a PCIe switch."""
    cluster = load_cluster("a40-pcie")
    assert path(cluster.shm_route("n0/gpu0", "n0/gpu1")) == [
        "n0/gpu0", "n0/pcie0", "n0/cpu0", "n0/pcie0", "n0/gpu1"]
    assert cluster.cpu_of("n0/gpu5") == "n0/cpu1"
    assert "n0/cpu1" in path(cluster.shm_route("n0/gpu0", "n0/gpu5"))


def test_loopback_route_goes_out_through_the_nics():
    """NET transport on one host: GPU → NIC → fabric → NIC → GPU; one shared NIC loops back."""
    h100 = load_cluster("dgx-h100")
    nodes = path(h100.loopback_route("n0/gpu0", "n0/gpu1"))
    assert nodes[:4] == ["n0/gpu0", "n0/pcie0", "n0/nic0", "leaf0"] and nodes[-3:] == [
        "n0/nic1", "n0/pcie1", "n0/gpu1"]
    l40s = load_cluster("l40s-pcie")
    assert path(l40s.loopback_route("n0/gpu0", "n0/gpu1")) == [
        "n0/gpu0", "n0/pcie0", "n0/nic0", "n0/pcie0", "n0/gpu1"]


def test_routes_to_self_are_empty_and_bad_requests_are_errors():
    """A GPU reaches itself in no hops; unknown GPUs and cross-host SHM are TopologyErrors."""
    cluster = load_cluster("a40-nvlink-pairs")
    assert cluster.route("n0/gpu0", "n0/gpu0") == []
    with pytest.raises(TopologyError, match="has no GPU 'n0/gpu9'"):
        cluster.route("n0/gpu0", "n0/gpu9")
    with pytest.raises(TopologyError, match="shm transport joins GPUs of one host"):
        cluster.shm_route("n0/gpu0", "n1/gpu0")


def test_routes_returned_are_copies():
    """Mutating a returned route does not change the cached one."""
    cluster = load_cluster("dgx-h100")
    cluster.route("n0/gpu0", "n0/gpu1").clear()
    assert len(cluster.route("n0/gpu0", "n0/gpu1")) == 2


def test_gpus_per_node_override_keeps_the_first_gpus():
    """--gpus-per-node 2 keeps gpu0 and gpu1 of each node, with all NICs and the NVSwitch."""
    cluster = load_cluster("dgx-h100", nodes=2, gpus_per_node=2)
    assert cluster.gpus() == ["n0/gpu0", "n0/gpu1", "n1/gpu0", "n1/gpu1"]
    assert cluster.nics_per_node == 8 and cluster.has_nvswitch()


def test_nodes_override_grows_the_fabric():
    """--nodes 4 on a one-node preset builds four nodes on one leaf per rail, joined by spines."""
    cluster = load_cluster("dgx-a100", nodes=4)
    assert cluster.nodes == 4 and len(cluster.gpus()) == 32
    leaves = [n for n, d in cluster.graph.nodes(data=True) if d.get("tier") == "leaf"]
    assert len(leaves) == 8
    assert sorted(cluster.graph.nodes[leaf]["rail"] for leaf in leaves) == list(range(8))


def test_nic_overrides_change_count_and_rate():
    """--nics-per-node keeps the first K NICs, --nic-gbps re-rates every NIC and the fabric."""
    cluster = load_cluster("dgx-h100", nodes=2, nics_per_node=4, nic_gbps=200)
    assert cluster.nics_per_node == 4
    assert {cluster.graph.nodes[n]["gbps"] for n in cluster.nics()} == {200.0}
    net = [h.bw for h in cluster.route("n0/gpu0", "n1/gpu0") if h.kind == "net"]
    assert net and set(net) == {25.0}


def test_large_fabric_is_non_blocking():
    """64 DGX H100 nodes, 32 per leaf: each leaf's uplink capacity equals its downlink capacity."""
    graph = load_cluster("dgx-h100", nodes=64).graph
    for leaf in (n for n, d in graph.nodes(data=True) if d.get("tier") == "leaf"):
        down = sum(graph.edges[leaf, n]["bw"] for n in graph[leaf] if graph.nodes[n]["kind"] == "nic")
        up = sum(graph.edges[leaf, n]["bw"] for n in graph[leaf] if graph.nodes[n].get("tier") == "spine")
        assert down == up == 32 * 50.0


@pytest.mark.parametrize("kwargs", [{"nodes": 0}, {"gpus_per_node": 9}, {"nics_per_node": 9},
                                    {"nic_gbps": -1}])
def test_impossible_overrides_name_the_preset(kwargs):
    """Overrides the preset cannot satisfy are TopologyErrors that name it."""
    with pytest.raises(TopologyError, match="preset 'dgx-a100'"):
        load_cluster("dgx-a100", **kwargs)


def test_subset_takes_first_nodes_and_gpus_and_prunes_the_fabric():
    """subset() keeps the first nodes and GPUs, drops leaves left without NICs, and validates."""
    big = load_cluster("dgx-h100", nodes=64)
    small = big.subset(nodes=2, gpus_per_node=4)
    assert (small.nodes, small.gpus_per_node) == (2, 4)
    leaves = [n for n, d in small.graph.nodes(data=True) if d.get("tier") == "leaf"]
    assert len(leaves) == 8
    assert small.route("n0/gpu0", "n1/gpu0")[2].kind == "net"
    with pytest.raises(TopologyError, match="cannot take 3 nodes of 2"):
        small.subset(nodes=3)


def test_unknown_preset_lists_the_presets():
    """A misspelt preset name is an error listing what exists."""
    with pytest.raises(TopologyError, match=r"unknown preset 'dgx-a10' \(presets: a40-nvlink-pairs"):
        load_cluster("dgx-a10")


def test_sharp_fabric_marks_switches():
    """fabric.sharp puts sharp=True on leaves and spines (for NCCL's CollNet)."""
    spec = read_spec("dgx-h100")
    spec = replace(spec, nodes=2, fabric=replace(spec.fabric, sharp=True))
    graph = build_cluster(spec).graph
    assert all(d["sharp"] for _, d in graph.nodes(data=True) if d["kind"] == "switch")


def test_docstring_examples_run():
    """The examples in twin.topology's docstrings hold."""
    for module in (twin.topology, twin.topology.cluster, twin.topology.loader, twin.topology.summary):
        assert doctest.testmod(module).failed == 0
