"""The nvidia-smi and NCCL-XML importers on real files (tests/data/topology, see SOURCES.md)."""

from pathlib import Path

import networkx as nx
import pytest

from twin.topology import (
    Cluster,
    TopologyError,
    dump_spec,
    import_nccl_topo_xml,
    import_nvidia_smi_topo,
    load_cluster,
    parse_nccl_topo_xml,
    parse_nvidia_smi_topo,
)
from twin.topology.summary import summarize

DATA = Path(__file__).parents[2] / "data" / "topology"
SMI = DATA / "nvidia-smi"
XML = DATA / "nccl-xml"


def affinity(cluster: Cluster):
    return [cluster.nic_of(g).split("/")[1] for g in cluster.gpus()]


def switch_members(cluster: Cluster):
    """Per PCIe switch, the local GPU and NIC names directly below it."""
    graph = cluster.graph
    return sorted(sorted(m.split("/")[1] for m in graph[s] if graph.nodes[m]["kind"] in ("gpu", "nic"))
                  for s, d in graph.nodes(data=True) if d["kind"] == "pcie_switch")


class TestNvidiaSmi:
    def test_h100_sample_reads_model_nvswitch_and_one_nic_per_gpu(self):
        """sglang#30401: the model comes from its GPU line; NV18 everywhere means NVSwitch; GPU i ↔ NIC i."""
        cluster = import_nvidia_smi_topo(SMI / "sglang-30401-h100.txt", nic_gbps=400)
        assert (cluster.gpu_model, cluster.gpus_per_node, cluster.nics_per_node) == ("H100-SXM5-80GB", 8, 8)
        assert cluster.has_nvswitch() and cluster.nvlink_bw("n0/gpu0") == 450.0
        assert switch_members(cluster) == [[f"gpu{i}", f"nic{i}"] for i in range(8)]
        assert affinity(cluster) == [f"nic{i}" for i in range(8)]
        assert summarize(cluster)["sockets_per_node"] == 2
        assert cluster.cpu_of("n0/gpu5") == "n0/cpu1"

    def test_a100_sample_pairs_gpus_with_two_nics(self):
        """DeepEP#13: PXB joins two GPUs and two NICs under one switch; NV12 means NVSwitch."""
        cluster = import_nvidia_smi_topo(SMI / "deepep-13-a100.txt", gpu_model="A100-SXM4-80GB", nic_gbps=100)
        assert cluster.has_nvswitch() and cluster.nvlink_bw("n0/gpu0") == 300.0
        pairs = [[f"gpu{i}", f"gpu{i + 1}", f"nic{i}", f"nic{i + 1}"] for i in range(0, 8, 2)]
        assert switch_members(cluster) == pairs
        assert affinity(cluster) == [f"nic{i}" for i in range(8)]
        loop = cluster.loopback_route("n0/gpu0", "n0/gpu1")  # NIC 0 → leaf 0 → spine → leaf 1 → NIC 1
        assert [h.dst for h in loop][:3] == ["n0/pcie0", "n0/nic0", "leaf0"]
        assert [h.bw for h in loop if h.kind == "net"] == [12.5] * 4

    def test_a6000_sample_has_nvlink_pairs_and_nics_on_socket_1(self):
        """unige-3741: NV4 bridges on pairs; PCIe between pairs; both NICs behind one switch on socket 1."""
        cluster = import_nvidia_smi_topo(SMI / "unige-3741-rtx-a6000.txt", gpu_model="RTX A6000",
                                         nic_gbps=100)
        assert not cluster.has_nvswitch()
        peers = [cluster.nvlink_peers(f"n0/gpu{i}") for i in (0, 3, 6)]
        assert peers == [["n0/gpu1"], ["n0/gpu2"], ["n0/gpu7"]]
        assert [h.kind for h in cluster.route("n0/gpu0", "n0/gpu1")] == ["nvlink"]
        assert [h.dst for h in cluster.route("n0/gpu0", "n0/gpu2")] == ["n0/cpu0", "n0/gpu2"]
        assert switch_members(cluster) == [["nic0", "nic1"]]
        assert affinity(cluster)[4:] == ["nic0", "nic1", "nic0", "nic1"]

    def test_l40s_sample_has_no_nvlink_and_two_sockets(self):
        """warpem#106: four L40S on two sockets, the NICs next to GPUs 2 and 3."""
        cluster = import_nvidia_smi_topo(SMI / "warpem-106-l40s.txt", gpu_model="L40S", nic_gbps=100)
        assert cluster.gpus_per_node == 4 and cluster.nvlink_peers("n0/gpu0") == []
        assert [cluster.cpu_of(g) for g in cluster.gpus()] == ["n0/cpu0"] * 2 + ["n0/cpu1"] * 2
        assert "n0/cpu0" in [h.dst for h in cluster.route("n0/gpu0", "n0/gpu2")]

    def test_missing_model_and_nic_speed_are_asked_for(self):
        """The matrix has no model or NIC speed: the error says which argument to pass."""
        with pytest.raises(TopologyError, match=r"a100.txt: .* does not name the GPU model; give --gpu-model"):
            import_nvidia_smi_topo(SMI / "deepep-13-a100.txt", nic_gbps=100)
        with pytest.raises(TopologyError, match=r"does not give NIC speeds; give --nic-gbps .* for its 8 NICs"):
            import_nvidia_smi_topo(SMI / "sglang-30401-h100.txt")
        with pytest.raises(TopologyError, match=r"unknown GPU model 'Titan' .*; give --gpu-model"):
            import_nvidia_smi_topo(SMI / "warpem-106-l40s.txt", gpu_model="Titan", nic_gbps=100)

    def test_wrong_model_is_caught_by_nvlink_count(self):
        """NV18 on an A100 (12 links) cannot be: validation names the GPU."""
        with pytest.raises(TopologyError, match=r"GPU n0/gpu0 has 18 NVLinks but A100-SXM4-40GB has 12"):
            import_nvidia_smi_topo(SMI / "sglang-30401-h100.txt", gpu_model="A100", nic_gbps=400)

    def test_text_is_accepted_as_well_as_a_path(self):
        """The importer takes the output itself, not only a file."""
        text = (SMI / "warpem-106-l40s.txt").read_text()
        cluster = import_nvidia_smi_topo(text, gpu_model="L40S", nic_gbps=100)
        assert cluster.name == "imported" and cluster.gpus_per_node == 4

    @pytest.mark.parametrize(("text", "message"), [
        ("hello\n", "no nvidia-smi topo -m header"),
        ("\tGPU0\tGPU1\nGPU0\t X \n", "row GPU0 has 1 entries, expected 2"),
        ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "row GPU0: unknown connection 'FOO'"),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "the matrix has no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\tPIX\t X \nGPU1\tPIX\t X \n", "row GPU0 does not have X on the diagonal"),
        ("\tGPU0\tGPU2\nGPU0\t X \tPIX\nGPU2\tPIX\t X \n", "GPU columns must be GPU0..GPU1"),
    ])
    def test_malformed_matrices_are_named(self, text, message):
        """Broken output gives a TopologyError saying what is wrong."""
        with pytest.raises(TopologyError, match=message):
            parse_nvidia_smi_topo(text, gpu_model="L40S")


class TestNcclXml:
    def test_dgx_a100_dump(self):
        """SimAI's dump: model from the PCI id, 6 NVSwitches × 2 links, nested switches, a root-port NIC."""
        cluster = import_nccl_topo_xml(XML / "simai-topo_8A100_4CX6.xml")
        facts = summarize(cluster)
        assert (cluster.gpu_model, cluster.gpus_per_node, cluster.nics_per_node) == ("A100-SXM4-80GB", 8, 5)
        assert facts["nvswitch"] and (facts["nvlinks_per_gpu"], facts["nvlink_gbps_per_gpu"]) == (12, 300.0)
        assert facts["nic_gbps"] == [200.0] * 5 and facts["gpu_pcie_gbps"] == 24.0
        assert (facts["sockets_per_node"], facts["cpu_vendor"]) == (2, "intel")
        assert affinity(cluster) == ["nic1", "nic1", "nic2", "nic2", "nic3", "nic3", "nic4", "nic4"]
        assert "n0/nic0" in cluster.graph["n0/cpu0"]  # the bond on socket 0's root port
        assert [h.dst for h in cluster.route("n0/gpu0", "n0/gpu1")] == ["n0/nvswitch", "n0/gpu1"]

    def test_azure_ndv5_input_file_needs_model_speed_and_nvswitch(self):
        """Azure's ND H100 v5 file has bare <pci> devices: model, NIC speed and NVSwitch are arguments."""
        with pytest.raises(TopologyError, match=r"cannot tell the model .*; give --gpu-model"):
            import_nccl_topo_xml(XML / "azure-ndv5-topo.xml")
        with pytest.raises(TopologyError, match=r"has no speed in the file; give --nic-gbps"):
            import_nccl_topo_xml(XML / "azure-ndv5-topo.xml", gpu_model="H100")
        cluster = import_nccl_topo_xml(XML / "azure-ndv5-topo.xml", gpu_model="H100", nic_gbps=400,
                                       nvswitch=True)
        facts = summarize(cluster)
        assert (facts["nvlink_gbps_per_gpu"], facts["gpu_pcie_gbps"], facts["socket_link_gbps"]) == (
            450.0, 48.0, 22.0)
        assert switch_members(cluster) == [[f"gpu{i}", f"nic{i}"] for i in range(8)]

    def test_azure_ndv4_numbers_gpus_by_bus_id(self):
        """Without <gpu dev> the GPUs take bus-id order (0001 first, on the second NUMA node)."""
        cluster = import_nccl_topo_xml(XML / "azure-ndv4-topo.xml", gpu_model="A100", nic_gbps=200,
                                       nvswitch=True)
        facts = summarize(cluster)
        shape = (facts["sockets_per_node"], facts["cpu_vendor"], facts["pcie_switches_per_node"])
        assert shape == (4, "amd", 4)
        assert cluster.cpu_of("n0/gpu0") == "n0/cpu1" and cluster.cpu_of("n0/gpu2") == "n0/cpu0"
        assert affinity(cluster) == [f"nic{i}" for i in range(8)]

    def test_aws_p4d_file_with_comments_and_gen3_links(self):
        """p4d.24xlarge: 4 switches of 2 GPUs + 1 NIC; 8 GT/s means Gen3 (12 GB/s)."""
        cluster = import_nccl_topo_xml(XML / "aws-p4d-24xl-topo.xml", gpu_model="A100", nic_gbps=100,
                                       nvswitch=True)
        assert switch_members(cluster) == [["gpu0", "gpu1", "nic0"], ["gpu2", "gpu3", "nic1"],
                                           ["gpu4", "gpu5", "nic2"], ["gpu6", "gpu7", "nic3"]]
        assert summarize(cluster)["gpu_pcie_gbps"] == 12.0
        assert affinity(cluster) == ["nic0", "nic0", "nic1", "nic1", "nic2", "nic2", "nic3", "nic3"]

    def test_nvswitch_flag_conflicts_with_nvlink_elements(self):
        """nvswitch=True is only for files without <nvlink>."""
        with pytest.raises(TopologyError, match="nvswitch=True is for files without <nvlink> elements"):
            import_nccl_topo_xml(XML / "simai-topo_8A100_4CX6.xml", nvswitch=True)

    def test_direct_nvlinks_between_gpus_become_pairs(self):
        """NVLinks whose target is another GPU's bus id are pairs (DGX-1 style)."""
        xml = """<system version="1"><cpu numaid="0" vendor="GenuineIntel" modelid="79">
          <pci busid="0000:01:00.0" class="0x060400" link_speed="8 GT/s" link_width="16">
            <pci busid="0000:02:00.0" class="0x030200" device="0x1db5" link_speed="8 GT/s" link_width="16">
              <gpu dev="0" sm="70"><nvlink target="0000:03:00.0" count="2" tclass="0x030200"/></gpu></pci>
            <pci busid="0000:03:00.0" class="0x030200" device="0x1db5" link_speed="8 GT/s" link_width="16">
              <gpu dev="1" sm="70"><nvlink target="0000:02:00.0" count="2" tclass="0x030200"/></gpu></pci>
          </pci></cpu></system>"""
        spec = parse_nccl_topo_xml(xml)
        assert (spec.node.gpu, spec.node.nvlink_pairs) == ("V100-SXM2-32GB", ((0, 1, 2),))
        assert spec.node.pcie_gen == 3
        assert spec.node.socket_link_bw == 6.0  # Broadwell

    def test_a_socket_nic_listed_under_every_cpu_is_one_nic(self):
        """NCCL repeats a non-PCI NIC (eth0) under each <cpu>; it is one device, on the first socket."""
        xml = """<system version="1">
          <cpu numaid="0" vendor="AuthenticAMD"><pci busid="0000:01:00.0" class="0x030200" device="0x2330">
            <gpu dev="0" sm="90"><nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu></pci>
            <nic><net name="eth0" dev="0" speed="10000" gdr="0"/></nic></cpu>
          <cpu numaid="1" vendor="AuthenticAMD"><pci busid="0000:81:00.0" class="0x030200" device="0x2330">
            <gpu dev="1" sm="90"><nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/></gpu></pci>
            <nic><net name="eth0" dev="0" speed="10000" gdr="0"/></nic></cpu></system>"""
        cluster = import_nccl_topo_xml(xml)
        assert cluster.nics_per_node == 1 and cluster.nic_of("n0/gpu1") == "n0/nic0"
        assert cluster.graph.nodes["n0/nic0"]["gbps"] == 10.0 and cluster.nvlink_bw("n0/gpu0") == 450.0

    @pytest.mark.parametrize(("text", "message"), [
        ("<system", "not valid XML"),
        ("<topology/>", "the root element is <topology>, expected <system>"),
        ("<system/>", "no <cpu> element"),
        ("<system><cpu/></system>", "no GPU"),
        ('<system><cpu><pci class="0x0302" busid="a"><gpu sm="75"/></pci></cpu></system>',
         "cannot tell the model"),
        ('<system><cpu><pci class="zz" busid="a"/></cpu></system>', "<pci> a: class must be an integer"),
        ('<system><cpu><pci busid="a"><gpu sm="80"><nvlink count="x"/></gpu></pci></cpu></system>',
         "count must be an integer"),
    ])
    def test_malformed_xml_is_named(self, text, message):
        """Bad XML gives a TopologyError saying what is wrong."""
        with pytest.raises(TopologyError, match=message):
            parse_nccl_topo_xml(text)


@pytest.mark.parametrize(("importer", "path", "kwargs"), [
    (import_nvidia_smi_topo, SMI / "deepep-13-a100.txt", {"gpu_model": "A100-SXM4-80GB", "nic_gbps": 100}),
    (import_nvidia_smi_topo, SMI / "unige-3741-rtx-a6000.txt", {"gpu_model": "RTX A6000", "nic_gbps": 100}),
    (import_nccl_topo_xml, XML / "simai-topo_8A100_4CX6.xml", {}),
    (import_nccl_topo_xml, XML / "azure-ndv4-topo.xml",
     {"gpu_model": "A100", "nic_gbps": 200, "nvswitch": True}),
])
def test_imported_descriptions_round_trip_through_yaml(tmp_path, importer, path, kwargs):
    """An imported node written as YAML loads back to the same graph."""
    cluster = importer(path, **kwargs)
    parse = parse_nccl_topo_xml if importer is import_nccl_topo_xml else parse_nvidia_smi_topo
    spec = parse(path.read_text(), source=str(path), name=path.stem, **kwargs)
    out = tmp_path / "node.yaml"
    out.write_text(dump_spec(spec))
    assert nx.utils.graphs_equal(load_cluster(out).graph, cluster.graph)
    assert load_cluster(out, nodes=3).nodes == 3
