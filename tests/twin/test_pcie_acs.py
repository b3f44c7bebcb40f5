"""PCIe switches that redirect peer-to-peer requests to the root complex (``pcie.acs``): the ABCI
node (A), where GPUDirect RDMA stays on in NCCL's view while its bytes cross the CPU."""

import sys
from pathlib import Path

import pytest
import yaml

from traces.task import Op
from tuner.config import Algo, Proto
from twin.model.schedule import schedule_for
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.topology import ClusterSpec, TopologyError, build_cluster, load_cluster, read_spec
from twin.topology.summary import format_summary, summarize

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DEV = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
sys.path.insert(0, str(BENCHMARKS))
import accuracy  # noqa: E402


def abci(acs: bool, nodes: int = 2):
    spec = read_spec("abci-a").to_dict()
    spec["node"]["pcie"]["acs"] = acs
    spec["nodes"] = nodes
    return build_cluster(ClusterSpec.from_dict(spec, "abci test"))


def test_the_flag_reads_and_writes_back(tmp_path):
    """``pcie.acs`` is a yes/no key: written back only when set, refused with its key named otherwise."""
    spec = read_spec("abci-a")
    assert spec.node.pcie_acs and spec.to_dict()["node"]["pcie"]["acs"] is True
    assert ClusterSpec.from_dict(spec.to_dict(), "again") == spec
    assert "acs" not in read_spec("dgx-a100").to_dict()["node"]["pcie"]
    assert summarize(load_cluster("abci-a"))["pcie_acs"] and not summarize(load_cluster("dgx-a100"))["pcie_acs"]
    assert "ACS: peer-to-peer through the CPU" in format_summary(summarize(load_cluster("abci-a")))
    data = spec.to_dict()
    data["node"]["pcie"]["acs"] = "on"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TopologyError, match=r"bad\.yaml: node\.pcie\.acs: expected true or false, got"):
        load_cluster(path)


def test_gpu_to_nic_bytes_cross_the_cpu_while_nccl_sees_one_switch():
    """NCCL's view (NIC choice, GPUDirect) follows the PCIe tree; the bytes go up to the socket and back."""
    on, off = abci(True), abci(False)
    for cluster in (on, off):
        assert [cluster.nic_of(f"n0/gpu{i}") for i in range(8)] == [f"n0/nic{i // 2}" for i in range(8)]
    route = on.nic_route("n0/gpu1", "n1/gpu0", "n0/nic0", "n1/nic0")
    assert [h.dst for h in route] == ["n0/pcie0", "n0/cpu0", "n0/pcie0", "n0/nic0", "leaf0", "n1/nic0", "n1/pcie0",
                                      "n1/cpu0", "n1/pcie0", "n1/gpu0"]
    assert "n0/cpu0" not in [h.dst for h in off.nic_route("n0/gpu1", "n1/gpu0", "n0/nic0", "n1/nic0")]
    assert on.acs_redirects("n0/gpu0", "n0/nic0") and not off.acs_redirects("n0/gpu0", "n0/nic0")
    assert not on.acs_redirects("n0/gpu0", "n0/nic2")  # across the sockets the CPU is on the way anyway


def test_a_net_flow_keeps_gpudirect_and_pays_the_root_complex():
    """GPUDirect RDMA stays on (NCCL reads PIX, NCCL_NET_GDR_LEVEL=2 is PXB), the flow is forwarded by
    the root complex: each switch uplink carries a NIC's two sends and two receives at the root
    complex's peer-to-peer share of 24 GB/s, NIC-sized packets."""
    comm = Communicator.first(abci(True), 16, nccl_version=(2, 8, 4))
    geom = comm.geometry()
    net_flows = [f for f in geom.channel_flows("ring", 0) if f.kind == "net"]
    assert net_flows and all(f.gdr_send and f.gdr_recv and f.via_cpu for f in net_flows)
    link = DEFAULT_PARAMS.link
    uplink = 24.0 * link.root_complex_p2p_efficiency * link.pcie.efficiency * 256 / (256 + link.pcie.header_bytes)
    assert geom.share("ring", 8, Proto.SIMPLE).gbps == pytest.approx(uplink / 4)
    plain = Communicator.first(abci(False), 16, nccl_version=(2, 8, 4)).geometry()
    assert plain.share("ring", 8, Proto.SIMPLE).gbps > 1.9 * geom.share("ring", 8, Proto.SIMPLE).gbps


def test_inside_a_node_nvlink_is_untouched():
    """GPU to GPU the node uses NVSwitch; ACS changes nothing there."""
    on, off = (Communicator.first(abci(acs, nodes=1), 8) for acs in (True, False))
    for op in (Op.ALLREDUCE, Op.BROADCAST):
        task = on.task(op, 64 << 20)
        config = on.default_config(task)
        assert config == off.default_config(task)
        assert on.schedule(task, config).time_us() == off.schedule(task, config).time_us()


def test_the_two_node_abci_files_are_predicted_from_the_root_complex_rate():
    """Development files: the 2-node AllReduce tops out at ~8 GB/s per 200 Gb/s HCA (33 GB/s bus at
    32 MiB); through the root complex the twin is within 15 % there, straight through the switch it
    was 1.6× too fast."""
    _, points = accuracy.predict_file(DEV / "abci-inter_anode-16gpu-2node-allreduce.txt")
    size, measured, predicted = points[-1]
    assert size == 32 << 20 and measured == pytest.approx(33.3, abs=0.1)
    assert abs(predicted - measured) / measured < 0.15


def test_a_pipeline_step_hands_over_one_slice():
    """Tree and Broadcast run ``ProtoSimple<1, 1>`` (one slice per step), a ring AllReduce cuts each
    step into two slices: Simple's per-slice hand-over is paid once, resp. twice, per full step."""
    geom = Communicator.first(abci(True), 16).geometry()
    sync = DEFAULT_PARAMS.protocol.simple_slice_sync_us
    tree = schedule_for(geom, Op.ALLREDUCE, 256 << 20, Algo.TREE, Proto.SIMPLE, 8, 640, 1 << 19)
    chain = schedule_for(geom, Op.BROADCAST, 256 << 20, Algo.RING, Proto.SIMPLE, 8, 544, 1 << 19)
    ring = schedule_for(geom, Op.ALLREDUCE, 256 << 20, Algo.RING, Proto.SIMPLE, 8, 544, 1 << 21)
    assert (tree.sync_us, chain.sync_us, ring.sync_us) == (sync, sync, 2 * sync)
    sizes = [(32 << 20) - (32 << 10), 32 << 20, (64 << 20) - (64 << 10), 64 << 20]
    times = [float(schedule_for(geom, Op.ALLREDUCE, s, Algo.TREE, Proto.SIMPLE, 8, 640, 1 << 19).time_us())
             for s in sizes]
    assert times == sorted(times)
