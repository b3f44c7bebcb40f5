"""Every rule a cluster graph must follow, and the message that names the element breaking it."""

import pytest

from twin.topology import Cluster, TopologyError, load_cluster


def graph_of(preset, **overrides):
    return load_cluster(preset, **overrides).graph.copy()


def rejects(graph, message, name="x.yaml"):
    with pytest.raises(TopologyError) as info:
        Cluster(name, graph)
    assert str(info.value) == f"cluster {name!r}: {message}"


def test_unknown_gpu_model():
    """A GPU whose model is not in the table."""
    graph = graph_of("dgx-a100")
    graph.nodes["n0/gpu0"]["model"] = "B999"
    with pytest.raises(TopologyError,
                       match=r"cluster 'x.yaml': GPU n0/gpu0: unknown GPU model 'B999' \(known: "):
        Cluster("x.yaml", graph)


@pytest.mark.parametrize(("bw", "message"), [(-5, "negative bandwidth -5"), (0, "zero bandwidth"),
                                             ("fast", "bandwidth must be a number of GB/s, got 'fast'")])
def test_bad_bandwidth(bw, message):
    """Negative, zero or non-numeric bandwidth on an edge."""
    graph = graph_of("dgx-a100")
    graph.edges["n0/gpu0", "n0/nvswitch"]["bw"] = bw
    rejects(graph, f"edge n0/gpu0–n0/nvswitch: {message}")


def test_negative_latency():
    """A link cannot have negative latency."""
    graph = graph_of("dgx-a100")
    graph.edges["n0/gpu0", "n0/nvswitch"]["lat_us"] = -1.0
    rejects(graph, "edge n0/gpu0–n0/nvswitch: negative latency -1.0")


def test_bad_nlinks_and_kinds():
    """nlinks must be a positive integer; node and edge kinds come from a fixed list."""
    graph = graph_of("dgx-a100")
    graph.edges["n0/gpu0", "n0/nvswitch"]["nlinks"] = 0
    rejects(graph, "edge n0/gpu0–n0/nvswitch: nlinks must be a positive integer, got 0")
    graph = graph_of("dgx-a100")
    graph.edges["n0/gpu0", "n0/nvswitch"]["kind"] = "infinityfabric"
    rejects(graph, "edge n0/gpu0–n0/nvswitch has kind 'infinityfabric' "
                   "(expected one of nvlink, pcie, cpu, net)")
    graph = graph_of("dgx-a100")
    graph.nodes["n0/cpu0"]["kind"] = "tpu"
    rejects(graph, "node n0/cpu0 has kind 'tpu' "
                   "(expected one of gpu, nvswitch, pcie_switch, cpu, nic, switch)")


def test_gpu_without_path_to_the_others():
    """A node whose NIC hangs off a switch nobody else reaches."""
    graph = graph_of("a40-pcie")
    graph.remove_edge("n1/nic0", "leaf0")
    graph.add_node("leaf9", kind="switch", tier="leaf", rail=0)
    graph.add_edge("n1/nic0", "leaf9", kind="net", bw=12.5, lat_us=0.5, nlinks=1)
    rejects(graph, "GPU n1/gpu0 has no path to n0/gpu0")


def test_nic_on_no_pcie_switch():
    """Every NIC sits on a PCIe switch or a CPU root port."""
    graph = graph_of("dgx-a100")
    graph.remove_edge("n0/nic2", "n0/pcie1")
    rejects(graph, "NIC n0/nic2 is attached to no PCIe switch or CPU")


def test_nic_on_no_fabric_switch_when_multi_node():
    """On several nodes, every NIC reaches a fabric switch."""
    graph = graph_of("dgx-a100", nodes=2)
    graph.remove_edge("n0/nic2", "leaf2")
    rejects(graph, "NIC n0/nic2 is attached to no switch")


def test_gpu_on_no_pcie_switch():
    """A GPU is a PCIe device: NVLink alone does not attach it."""
    graph = graph_of("dgx-a100")
    graph.remove_edge("n0/gpu3", "n0/pcie1")
    rejects(graph, "GPU n0/gpu3 is attached to no PCIe switch or CPU")


def test_nodes_with_different_gpu_counts():
    """Every node has as many GPUs as the first."""
    graph = graph_of("dgx-a100", nodes=2)
    graph.remove_node("n1/gpu7")
    rejects(graph, "host 1 has 7 GPUs but host 0 has 8")


def test_mixed_gpu_models():
    """A cluster has one GPU model."""
    graph = graph_of("dgx-a100", nodes=2)
    graph.nodes["n1/gpu0"]["model"] = "H100"
    rejects(graph, "mixed GPU models: n0/gpu0 is A100-SXM4-40GB but n1/gpu0 is H100-SXM5-80GB "
                   "(a cluster has one GPU model)")


def test_more_nvlinks_than_the_model_has():
    """An A100 has 12 NVLinks; a 14-link bundle is impossible."""
    graph = graph_of("dgx-a100")
    graph.edges["n0/gpu0", "n0/nvswitch"]["nlinks"] = 14
    rejects(graph, "GPU n0/gpu0 has 14 NVLinks but A100-SXM4-40GB has 12")


def test_missing_attributes():
    """Nodes need host (and GPUs a model and local index; NICs a rate)."""
    graph = graph_of("l40s-pcie")
    del graph.nodes["n0/gpu0"]["host"]
    rejects(graph, "gpu n0/gpu0 has no integer 'host' attribute")
    graph = graph_of("l40s-pcie")
    graph.nodes["n0/nic0"]["gbps"] = 0
    rejects(graph, "NIC n0/nic0: line rate must be a positive number of Gb/s, got 0")


def test_a_cluster_needs_gpus():
    """A graph without GPUs is not a cluster."""
    graph = graph_of("l40s-pcie")
    graph.remove_nodes_from([f"n0/gpu{i}" for i in range(8)])
    rejects(graph, "the cluster has no GPUs")


def test_validate_reruns_the_checks():
    """validate() re-checks a graph changed after construction."""
    cluster = load_cluster("l40s-pcie")
    cluster.validate()
    cluster.graph.edges["n0/cpu0", "n0/cpu1"]["bw"] = -1
    with pytest.raises(TopologyError, match="edge n0/cpu0–n0/cpu1: negative bandwidth -1"):
        cluster.validate()
