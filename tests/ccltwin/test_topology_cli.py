"""``ccltwin topology`` (ccltwin/topology.py) through typer's CliRunner."""

import json
from dataclasses import replace
from pathlib import Path

import networkx as nx
from typer.testing import CliRunner

from ccltwin.topology import app
from twin.topology import dump_spec, import_nccl_topo_xml, list_presets, load_cluster, read_spec

DATA = Path(__file__).parents[1] / "data" / "topology"
runner = CliRunner()


def test_list_prints_every_preset_with_its_description():
    """One unindented line per preset: name, then description; its figures indented below."""
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == [
        name for name, _ in list_presets()]
    assert {"a40-nvlink-pairs", "a40-pcie", "dgx-a100", "dgx-h100", "hgx-h200", "l40s-pcie", "gcp-a3-mega",
            "gb200-nvl72", "aws-p5"} <= {line.split()[0] for line in lines if not line.startswith(" ")}
    assert "8x H100-SXM5-80GB" in result.stdout


def test_list_shows_data_sheet_figures_fabric_and_sources():
    """Each preset's GPU figures (SMs, HBM, dense peaks, NVLink, price), NICs and fabric kind, and
    the sources of its figures; --json carries the same facts."""
    out = runner.invoke(app, ["list"]).stdout
    block = out[out.index("gcp-a3-mega "):out.index("gcp-a3-ultra ")]
    assert "132 SMs, HBM 3,350 GB/s" in block and "BF16 989.4" in block and "NVLink 18 x 25 = 450 GB/s" in block
    assert "NICs 8 x 200 Gb/s, fabric gpudirect-tcpxo" in block and "source: Google Cloud" in block
    facts = {f["name"]: f for f in json.loads(runner.invoke(app, ["list", "--json"]).stdout)}
    assert facts["gb200-nvl72"]["gpu"]["nvlink_gbps"] == 900.0 and facts["gb200-nvl72"]["gpus_per_node"] == 72
    assert facts["aws-p5"]["fabric_kind"] == "efa" and facts["aws-p5"]["sources"]
    assert all(f["sources"] for f in facts.values())


def test_show_prints_the_fabric_kind(tmp_path):
    """show names the NICs' kind, NCCL's network module and the vendor profile between nodes."""
    out = runner.invoke(app, ["show", "gcp-a3-mega", "--nodes", "2"]).stdout
    assert "NIC kind   gpudirect-tcpxo: Google GPUDirect-TCPXO (a3-mega), NCCL net FasTrak plugin, GPUDirect" in out
    assert "NCCL_PROTO=Simple" in out
    assert "NIC kind   infiniband: InfiniBand verbs (RDMA)" in runner.invoke(app, ["show", "dgx-h100"]).stdout
    spec = read_spec("dgx-h100")
    tcp = tmp_path / "tcp.yaml"
    tcp.write_text(dump_spec(replace(spec, fabric=replace(spec.fabric, kind="tcp"))))
    shown = runner.invoke(app, ["show", str(tcp)]).stdout
    assert "tcp: TCP sockets (host-staged), NCCL net Socket, host-staged" in shown
    assert json.loads(runner.invoke(app, ["show", "gh200-slingshot", "--json"]).stdout)["fabric_kind"] == "slingshot"
    p5 = runner.invoke(app, ["show", "aws-p5", "--nodes", "2"]).stdout
    assert "efa: AWS Elastic Fabric Adapter v2+" in p5 and "reports 75 us latency to NCCL" in p5
    bad = tmp_path / "bad.yaml"
    bad.write_text(tcp.read_text().replace("kind: tcp", "kind: token-ring"))
    result = runner.invoke(app, ["show", str(bad)])
    assert result.exit_code == 2 and f"{bad}: fabric.kind: unknown fabric kind 'token-ring'" in result.stderr
    assert "Traceback" not in result.stderr


def test_show_prints_the_summary():
    """show names GPUs, NVLink, PCIe, NICs, affinity and fabric."""
    result = runner.invoke(app, ["show", "dgx-h100", "--nodes", "2"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "16 × H100-SXM5-80GB (8 per node)" in out
    assert "NVSwitch, 18 links, 450 GB/s per GPU" in out
    assert "8 per node at 400 Gb/s" in out and "gpu3→nic3" in out
    assert "8 leaves, 16 spines, 400 Gb/s links" in out


def test_show_json_carries_the_same_facts_and_graph_size():
    """--json: shape, links, affinity, fabric, node and edge counts."""
    result = runner.invoke(app, ["show", "a40-nvlink-pairs", "--gpus-per-node", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stdout)
    cluster = load_cluster("a40-nvlink-pairs", gpus_per_node=2)
    assert (facts["nodes"], facts["gpus_per_node"], facts["gpu_model"]) == (2, 2, "A40")
    assert not facts["nvswitch"]
    assert (facts["nvlink_gbps_per_gpu"], facts["nvlink_peers_per_gpu"]) == (56.25, 1)
    assert facts["gpu_nic_affinity"] == {"gpu0": "nic0", "gpu1": "nic0"}
    graph = cluster.graph
    assert facts["graph"] == {"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()}
    assert facts["fabric"] == {"leaves": 2, "spines": 2, "link_gbps": 400.0}


def test_show_applies_nic_overrides():
    """--nics-per-node and --nic-gbps re-parameterise the preset."""
    result = runner.invoke(app, ["show", "dgx-a100", "--nics-per-node", "4", "--nic-gbps", "400", "--json"])
    facts = json.loads(result.stdout)
    assert facts["nic_gbps"] == [400.0] * 4 and facts["nics_per_node"] == 4


def test_show_errors_exit_2_with_a_message_and_no_traceback(tmp_path):
    """Unknown presets, bad files and impossible overrides: exit 2, message on stderr."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("node: {gpu: h100}\n")
    for args, message in [(["show", "dgx-a10"], "unknown preset 'dgx-a10'"),
                          (["show", str(bad)], "bad.yaml: node.gpus: required key is missing"),
                          (["show", "dgx-a100", "--gpus-per-node", "9"], "cannot take 9 GPUs per node of 8")]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.exception is not None
        assert result.stderr.startswith("error: ") and message in result.stderr
        assert "Traceback" not in result.stderr + result.stdout


def test_import_nvidia_smi_writes_yaml_that_loads(tmp_path):
    """import turns nvidia-smi output into YAML; load_cluster reads it back."""
    out = tmp_path / "h100.yaml"
    result = runner.invoke(app, ["import", str(DATA / "nvidia-smi" / "sglang-30401-h100.txt"),
                                 "--nic-gbps", "400", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    cluster = load_cluster(out, nodes=2)
    assert (cluster.gpu_model, cluster.nodes, cluster.nics_per_node) == ("H100-SXM5-80GB", 2, 8)
    assert cluster.name == "sglang-30401-h100"


def test_import_takes_the_fabric_kind_the_files_do_not_say(tmp_path):
    """--fabric sets what the imported NICs speak; an unknown kind exits 2 naming it, writing nothing."""
    source = str(DATA / "nvidia-smi" / "sglang-30401-h100.txt")
    out = tmp_path / "h100.yaml"
    result = runner.invoke(app, ["import", source, "--nic-gbps", "200", "--fabric", "gpudirect-tcpxo", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert load_cluster(out, nodes=2).fabric.name == "gpudirect-tcpxo"
    bad = runner.invoke(app, ["import", source, "--fabric", "ethernet", "-o", str(tmp_path / "x.yaml")])
    assert bad.exit_code == 2 and "unknown fabric kind 'ethernet' (known: infiniband, roce" in bad.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_import_detects_xml_and_prints_to_stdout(tmp_path):
    """Without -o the YAML goes to stdout; --format auto recognises XML."""
    path = DATA / "nccl-xml" / "simai-topo_8A100_4CX6.xml"
    result = runner.invoke(app, ["import", str(path)])
    assert result.exit_code == 0, result.stderr
    out = tmp_path / "a100.yaml"
    out.write_text(result.stdout)
    assert nx.utils.graphs_equal(load_cluster(out).graph, import_nccl_topo_xml(path).graph)


def test_import_passes_model_and_nvswitch_for_input_files(tmp_path):
    """--gpu-model, --nic-gbps and --nvswitch complete an NCCL_TOPO_FILE that lacks them."""
    out = tmp_path / "ndv5.yaml"
    path = DATA / "nccl-xml" / "azure-ndv5-topo.xml"
    result = runner.invoke(app, ["import", str(path), "--format", "nccl-xml", "--gpu-model", "H100",
                                 "--nic-gbps", "400", "--nvswitch", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert load_cluster(out).nvlink_bw("n0/gpu0") == 450.0


def test_import_errors_exit_2(tmp_path):
    """Missing files, missing arguments and a forced wrong format: exit 2 with the reason."""
    smi = str(DATA / "nvidia-smi" / "deepep-13-a100.txt")
    for args, message in [(["import", str(tmp_path / "none.txt")], "cannot read the file"),
                          (["import", smi, "--nic-gbps", "100"], "give --gpu-model"),
                          (["import", smi, "--format", "nccl-xml"], "not valid XML")]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
