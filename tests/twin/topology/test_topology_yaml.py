"""The YAML cluster format: reading, writing back, and errors that name the file and the key."""

import textwrap
from pathlib import Path

import networkx as nx
import pytest
import yaml

from twin.topology import TopologyError, dump_spec, load_cluster, read_spec

MINIMAL = """\
name: tiny
nodes: 2
node:
  gpu: h100
  gpus: 2
  nvlink: {nvswitch: true}
  pcie:
    switches:
      - {socket: 0, gpus: [0, 1], nics: [0]}
  nics: {count: 1, gbps: 400}
fabric: {}
"""


def write(tmp_path, text, name="x.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def edit(text, **changes):
    """MINIMAL with keys replaced (dotted paths) or deleted (value None)."""
    data = yaml.safe_load(text)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = data
        for key in parents:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return yaml.safe_dump(data)


def test_minimal_file_loads_with_defaults(tmp_path):
    """A short file is enough: the model's NVLinks, one socket, the model's PCIe generation."""
    cluster = load_cluster(write(tmp_path, MINIMAL))
    assert (cluster.name, cluster.nodes, cluster.gpus_per_node, cluster.gpu_model) == (
        "tiny", 2, 2, "H100-SXM5-80GB")
    assert cluster.nvlink_bw("n0/gpu0") == 450.0
    assert [h.kind for h in cluster.route("n0/gpu0", "n1/gpu1")].count("net") == 2


def test_name_defaults_to_the_file_stem(tmp_path):
    """Without a name key the cluster is named after its file."""
    path = write(tmp_path, edit(MINIMAL, name=None), "rack7.yaml")
    assert load_cluster(path).name == "rack7"


@pytest.mark.parametrize("preset", ["a40-nvlink-pairs", "a40-pcie", "dgx-a100", "dgx-h100", "hgx-h200",
                                    "l40s-pcie"])
def test_presets_round_trip_through_yaml(tmp_path, preset):
    """dump_spec writes a file that reads back to the same description and the same graph."""
    spec = read_spec(preset)
    path = write(tmp_path, dump_spec(spec), f"{preset}.yaml")
    assert read_spec(path) == spec
    original, again = load_cluster(preset).graph, load_cluster(path).graph
    assert nx.utils.graphs_equal(original, again)


def test_leaves_per_rail_spreads_nodes_over_leaves(tmp_path):
    """fabric.leaves_per_rail: 2 puts nodes 0-1 on leaf0 and 2-3 on leaf1 of the single rail."""
    text = edit(MINIMAL, nodes=4, fabric={"leaves_per_rail": 2, "spines": 1})
    graph = load_cluster(write(tmp_path, text)).graph
    assert [next(iter(set(graph[f"n{h}/nic0"]) - {"n0/pcie0", f"n{h}/pcie0"})) for h in range(4)] == [
        "leaf0", "leaf0", "leaf1", "leaf1"]
    assert graph.edges["leaf0", "spine0"]["nlinks"] == 2


def test_explicit_extra_edges_are_added(tmp_path):
    """extra_edges adds links between existing nodes (here a direct GPU–NIC PCIe link)."""
    text = MINIMAL + "extra_edges:\n  - {a: n0/gpu1, b: n0/nic0, kind: pcie, bw: 32, lat_us: 0.2}\n"
    graph = load_cluster(write(tmp_path, text)).graph
    assert graph.edges["n0/gpu1", "n0/nic0"] == {"kind": "pcie", "bw": 32.0, "lat_us": 0.2, "nlinks": 1}


def test_nic_rates_may_differ_per_nic(tmp_path):
    """nics.gbps may list one rate per NIC; the fabric takes the fastest by default."""
    text = edit(MINIMAL, node__nics={"count": 2, "gbps": [400, 10]},
                node__pcie={"switches": [{"socket": 0, "gpus": [0, 1], "nics": [0, 1]}]})
    cluster = load_cluster(write(tmp_path, text))
    assert [cluster.graph.nodes[n]["gbps"] for n in cluster.nics(0)] == [400.0, 10.0]


def test_nested_switches_and_root_ports(tmp_path):
    """A switch may hang off another switch; devices may sit on a socket's root ports."""
    text = edit(MINIMAL, node__cpu={"sockets": 2, "vendor": "amd"},
                node__pcie={"gen": 4, "switches": [{"socket": 0, "gpus": [0]}, {"parent": 0, "gpus": [1]}],
                            "root_ports": [{"socket": 1, "nics": [0]}]})
    cluster = load_cluster(write(tmp_path, text))
    assert [h.dst for h in cluster.shm_route("n0/gpu1", "n0/gpu0")] == [
        "n0/pcie1", "n0/pcie0", "n0/cpu0", "n0/pcie0", "n0/gpu0"]
    assert cluster.nic_of("n0/gpu1") == "n0/nic0"
    assert cluster.graph.edges["n0/cpu0", "n0/cpu1"]["bw"] == 16.0


@pytest.mark.parametrize(("changes", "message"), [
    ({"node__gpus": "eight"}, "x.yaml: node.gpus: expected an integer, got str 'eight'"),
    ({"node__gpus": 0}, "x.yaml: node.gpus: must be at least 1, got 0"),
    ({"node__gpu": "B999"}, "x.yaml: node.gpu: unknown GPU model 'B999' (known: "),
    ({"nodes": 0}, "x.yaml: nodes: must be at least 1, got 0"),
    ({"node__colour": "green"}, "x.yaml: node: unknown key 'colour' (expected one of: "),
    ({"node__gpus": None}, "x.yaml: node.gpus: required key is missing"),
    ({"node__nics__gbps": -100}, "x.yaml: node.nics.gbps: must be positive, got -100"),
    ({"node__nics__gbps": [400, 400]}, "x.yaml: node.nics.gbps: lists 2 rates for 1 NICs"),
    ({"node__nvlink": {"nvswitch": "yes"}},
     "x.yaml: node.nvlink.nvswitch: expected true or false, got str 'yes'"),
    ({"node__nvlink": {"nvswitch": True, "pairs": [[0, 1]]}},
     "x.yaml: node.nvlink: give either nvswitch: true or pairs, not both"),
    ({"node__nvlink": {"pairs": [[0, 5]]}},
     "x.yaml: node.nvlink.pairs[0]: pair [0, 5] needs two different GPUs"),
    ({"node__nvlink": {"pairs": [["a", 1]]}}, "x.yaml: node.nvlink.pairs[0]: expected [gpu_a, gpu_b]"),
    ({"node__pcie__gen": 7}, "x.yaml: node.pcie.gen: unknown PCIe generation 7 (known: 1-6)"),
    ({"node__pcie__switches": [{"socket": 1, "gpus": [0, 1], "nics": [0]}]},
     "x.yaml: node.pcie.switches[0].socket: socket 1 does not exist (the node has 1)"),
    ({"node__pcie__switches": [{"gpus": [0, 1], "nics": [0]}]},
     "x.yaml: node.pcie.switches[0]: give exactly one of socket and parent"),
    ({"node__pcie__switches": [{"socket": 0, "parent": 1, "gpus": [0, 1], "nics": [0]}]},
     "x.yaml: node.pcie.switches[0]: give exactly one of socket and parent"),
    ({"node__pcie__switches": [{"parent": 0, "gpus": [0, 1], "nics": [0]}]},
     "x.yaml: node.pcie.switches[0].parent: parent must be an earlier switch"),
    ({"node__pcie__switches": [{"socket": 0, "gpus": [0], "nics": [0]}]},
     "x.yaml: node.pcie: GPU 1 is under no PCIe switch or root port"),
    ({"node__pcie__switches": [{"socket": 0, "gpus": [0, 1, 1], "nics": [0]}]},
     "x.yaml: node.pcie: GPU 1 is placed more than once"),
    ({"node__pcie__switches": [{"socket": 0, "gpus": [0, 1, 2], "nics": [0]}]},
     "x.yaml: node.pcie: GPU 2 does not exist (the node has 2)"),
    ({"node__pcie__switches": [{"socket": 0, "gpus": [0, 1], "nics": []}]},
     "x.yaml: node.pcie: NIC 0 is under no PCIe switch or root port"),
    ({"node__pcie__switches": [{"socket": 0, "gpus": "0,1"}]},
     "x.yaml: node.pcie.switches[0].gpus: expected a list, got str '0,1'"),
    ({"node__cpu": {"sockets": 2, "vendor": "via"}}, "x.yaml: node.cpu.vendor: unknown CPU vendor 'via'"),
    ({"node__latency_us": {"pcie": -1}}, "x.yaml: node.latency_us.pcie: must not be negative, got -1"),
    ({"fabric": {"spines": 0}}, "x.yaml: fabric.spines: must be at least 1, got 0"),
    ({"fabric": {"nodes_per_leaf": 1, "leaves_per_rail": 2}},
     "x.yaml: fabric: give at most one of nodes_per_leaf and leaves_per_rail"),
    ({"fabric": {"oversubscription": 0}}, "x.yaml: fabric.oversubscription: must be positive, got 0"),
    ({"node__nvlink": {"nvswitch": True, "links": 19}}, "x.yaml: cluster 'tiny': GPU n0/gpu0 has 19 NVLinks "
                                                        "but H100-SXM5-80GB has 18"),
    ({"extra_edges": [{"a": "n0/gpu0", "b": "n9/gpu0", "kind": "pcie", "bw": 1}]},
     "x.yaml: extra edge n0/gpu0–n9/gpu0: no node 'n9/gpu0' in the cluster"),
    ({"extra_edges": [{"a": "n0/gpu0", "b": "n0/nic0", "kind": "pcie", "bw": 0}]},
     "x.yaml: extra_edges[0].bw: must be positive, got 0"),
])
def test_format_errors_name_the_file_and_the_key(tmp_path, changes, message):
    """Wrong types, unknown keys and impossible values are TopologyErrors naming file and key."""
    path = write(tmp_path, edit(MINIMAL, **changes))
    with pytest.raises(TopologyError) as info:
        load_cluster(path)
    assert str(info.value).startswith(message.replace("x.yaml", str(path)))


def test_missing_file(tmp_path):
    """A path that does not exist."""
    with pytest.raises(TopologyError, match=r"nope.yaml: no such file"):
        load_cluster(tmp_path / "nope.yaml")


def test_yaml_syntax_error_gives_the_line(tmp_path):
    """Broken YAML is reported with its position."""
    path = write(tmp_path, "name: x\nnode: {gpu: h100\n")
    with pytest.raises(TopologyError, match=r"x.yaml: YAML syntax error at line 3"):
        load_cluster(path)


@pytest.mark.parametrize("text", ["", "- 1\n- 2\n", "just a string\n"])
def test_top_level_must_be_a_mapping(tmp_path, text):
    """An empty file, a list or a scalar is not a cluster."""
    path = write(tmp_path, text)
    with pytest.raises(TopologyError, match=r"x.yaml: expected a mapping, got"):
        load_cluster(path)


def test_the_documented_example_loads(tmp_path):
    """The YAML example in docs/topology-format.md is a valid cluster."""
    doc = (Path(__file__).parents[3] / "docs" / "topology-format.md").read_text()
    example = doc.split("## Example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cluster = load_cluster(write(tmp_path, example))
    assert (cluster.name, cluster.gpus_per_node, cluster.nics_per_node) == ("dgx-a100", 8, 8)
