"""The socket interconnect at two rates: NCCL's inter-CPU figure (``cpu.link_bw``, what its search
and cost model read) and the links' own rate for DMA to the far socket's memory
(``cpu.memory_bw``, from ``twin.host_cpu``), at which the twin moves host-staged bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config import Proto
from twin.hardware import socket_link_gbps
from twin.host_cpu import host_cpu
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.topology import load_cluster
from twin.topology.loader import dump_spec, read_spec

A3U_DRANET = Path("benchmarks/clusters/gcp-a3-ultra-dranet-1gpu-1nic.yaml")


def test_the_upi_and_xgmi_links_move_several_times_nccls_inter_cpu_figure():
    """4 UPI 2.0 links at 20 GT/s (Emerald Rapids) and 16 GT/s (Sapphire Rapids), 2 bytes per
    transfer each way; 4 xGMI-2 x16 links at 18 GT/s less CRC (Rome, Milan)."""
    assert host_cpu("emerald-rapids").socket_memory_gbps == 160.0
    assert host_cpu("sapphire-rapids").socket_memory_gbps == 128.0
    assert host_cpu("rome").socket_memory_gbps == host_cpu("milan").socket_memory_gbps == pytest.approx(128.0)
    assert host_cpu("genoa").socket_memory_gbps is None  # not sourced: NCCL's figure stays
    assert socket_link_gbps("intel", 0xCF) == 40.0 and socket_link_gbps("amd") == 16.0


def test_a_named_cpu_model_gives_the_memory_rate_and_the_format_can_override_it(tmp_path: Path):
    node = read_spec(A3U_DRANET).node
    assert (node.socket_link_bw, node.socket_memory_bw) == (40.0, 160.0)
    assert read_spec("l40s-pcie").node.socket_memory_bw is None  # no model named
    text = A3U_DRANET.read_text().replace("link_bw: 40}", "link_bw: 40, memory_bw: 90}")
    (tmp_path / "c.yaml").write_text(text)
    assert read_spec(tmp_path / "c.yaml").node.socket_memory_bw == 90.0
    (tmp_path / "round.yaml").write_text(dump_spec(read_spec(A3U_DRANET)))
    assert read_spec(tmp_path / "round.yaml").node == node


def test_nccls_search_keeps_its_figure_and_the_twins_staged_bytes_cross_at_the_links_rate():
    cluster = load_cluster(A3U_DRANET, nodes=2)
    assert cluster.graph.edges["n0/cpu0", "n0/cpu1"]["bw"] == 40.0  # what twin.nccl_model reads
    geometry = Communicator.first(cluster, 2).geometry()
    flow = geometry.flow(*cluster.gpus())
    socket_hops = [h for h in flow.hops if h.kind == "cpu"]
    assert [(h.bw, h.memory_bw) for h in socket_hops] == [(40.0, 160.0)] * 2
    uses, _ = geometry._load("ring", 4).links(Proto.SIMPLE, DEFAULT_PARAMS)
    capacity = {u.link: u.capacity for u in uses.uses}
    assert capacity["n0/cpu1", "n0/cpu0"] == capacity["n0/cpu0", "n0/cpu1"] == 160.0
