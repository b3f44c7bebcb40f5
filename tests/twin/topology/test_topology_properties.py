"""Property tests of both importers: random valid machines parse to the right shape, and any
input at all either parses or raises TopologyError (never another exception)."""

import contextlib
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twin.topology import (
    TopologyError,
    build_cluster,
    import_nccl_topo_xml,
    import_nvidia_smi_topo,
    parse_nccl_topo_xml,
    parse_nvidia_smi_topo,
)

DATA = Path(__file__).parents[2] / "data" / "topology"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- nvidia-smi topo -m -----------------------------------------------------------------------

@st.composite
def smi_machines(draw):
    """A machine (sockets, switches, NVLink) and the nvidia-smi topo -m text it would print."""
    gpus, nics = draw(st.integers(1, 8)), draw(st.integers(0, 4))
    devices = [f"GPU{i}" for i in range(gpus)] + [f"NIC{k}" for k in range(nics)]
    socket = draw(st.lists(st.integers(0, 1), min_size=len(devices), max_size=len(devices)))
    switch = draw(st.lists(st.none() | st.integers(0, 1), min_size=len(devices), max_size=len(devices)))
    nvlink = draw(st.sampled_from(["none", "pairs", "nvswitch"] if gpus >= 3 else ["none", "pairs"]))
    links = draw(st.integers(1, 4))
    model = {"none": "L40S", "pairs": "A40", "nvswitch": "H100"}[nvlink]
    sep = draw(st.sampled_from(["\t", "    "]))

    def relation(a, b):
        if a == b:
            return "X"
        if a < gpus and b < gpus and nvlink == "nvswitch":
            return "NV18"
        if a < gpus and b < gpus and nvlink == "pairs" and a // 2 == b // 2:
            return f"NV{links}"
        if socket[a] != socket[b]:
            return "SYS"
        return "PIX" if switch[a] is not None and switch[a] == switch[b] else "NODE"

    lines = [sep + sep.join(devices) + f"{sep}CPU Affinity{sep}NUMA Affinity{sep}GPU NUMA ID"]
    for a, name in enumerate(devices):
        cells = [relation(a, b) for b in range(len(devices))]
        extra = [f"{16 * socket[a]}-{16 * socket[a] + 15}", str(socket[a]), "N/A"] if a < gpus else []
        lines.append(sep.join([name, *cells, *extra]))
    machine = {"gpus": gpus, "nics": nics, "sockets": len(set(socket)), "nvlink": nvlink, "links": links,
               "groups": _switch_groups(devices, socket, switch)}
    return "\n".join(lines) + "\n", model, machine


def _switch_groups(devices, socket, switch):
    groups = {}
    for i, name in enumerate(devices):
        if switch[i] is not None:
            groups.setdefault((socket[i], switch[i]), []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


@FAST
@given(smi_machines())
def test_random_nvidia_smi_matrices_parse_to_their_machine(case):
    """GPU, NIC and socket counts, NVLink structure and (without NVLink) PCIe switches come back."""
    text, model, machine = case
    spec = parse_nvidia_smi_topo(text, gpu_model=model, nic_gbps=100)
    cluster = build_cluster(spec)
    assert (cluster.gpus_per_node, cluster.nics_per_node) == (machine["gpus"], machine["nics"])
    assert spec.node.sockets == machine["sockets"]
    if machine["nvlink"] == "nvswitch":
        assert spec.node.nvswitch_links == 18 and cluster.has_nvswitch()
    elif machine["nvlink"] == "pairs":
        expected = tuple((i, i + 1, machine["links"]) for i in range(0, machine["gpus"] - 1, 2))
        assert spec.node.nvlink_pairs == expected and not cluster.has_nvswitch()
    else:
        names = [f"GPU{i}" for i in range(spec.node.gpus)] + [f"NIC{k}" for k in range(spec.node.nics)]
        got = sorted(sorted([names[i] for i in g.gpus] + [names[spec.node.gpus + k] for k in g.nics])
                     for g in spec.node.switches)
        assert got == machine["groups"]


def _accepts_or_rejects_cleanly(call):
    with contextlib.suppress(TopologyError):
        call()


@FAST
@given(st.text())
def test_any_text_is_an_nvidia_smi_output_or_a_topology_error(text):
    """Garbage never raises anything but TopologyError."""
    _accepts_or_rejects_cleanly(lambda: import_nvidia_smi_topo(text, gpu_model="H100", nic_gbps=400))


@FAST
@given(st.data())
def test_damaged_real_outputs_parse_or_raise_topology_error(data):
    """A real sample with a line replaced or dropped is read or rejected with TopologyError."""
    path = data.draw(st.sampled_from(sorted((DATA / "nvidia-smi").glob("*.txt"))))
    lines = path.read_text().splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    lines[i:i + 1] = data.draw(st.lists(st.text(max_size=40), max_size=1))
    _accepts_or_rejects_cleanly(lambda: import_nvidia_smi_topo("\n".join(lines) + "\n", gpu_model="H100",
                                                               nic_gbps=400))


# -- NCCL topology XML ------------------------------------------------------------------------

_DEVICE = st.sampled_from(["gpu", "nic"])
_TREE = st.recursive(_DEVICE, lambda inner: st.lists(inner, max_size=3).map(lambda c: ("switch", c)),
                     max_leaves=8)


@st.composite
def xml_machines(draw):
    """An NCCL topology XML of random sockets and PCIe trees, and the shape it describes."""
    cpus = draw(st.lists(st.lists(_TREE, max_size=3), min_size=1, max_size=3))
    dumped = draw(st.booleans())  # a dump has <gpu>/<nic> children; an input file only bare <pci>
    count = {"gpu": 0, "nic": 0, "bus": 0, "switches": 0}

    def pci(cls, **attrs):
        count["bus"] += 1
        return ET.Element("pci", busid=f"0000:{count['bus']:02x}:00.0", attrib={
            "class": cls, "link_speed": "32.0 GT/s PCIe", "link_width": "16", **attrs})

    def render(item):
        if item == "gpu":
            element = pci("0x030200", device="0x2330")
            if dumped:
                gpu = ET.SubElement(element, "gpu", dev=str(count["gpu"]), sm="90")
                for switch, links in enumerate((5, 4, 5, 4)):
                    ET.SubElement(gpu, "nvlink", target=f"0000:f{switch}:00.0", count=str(links),
                                  tclass="0x068000")
            count["gpu"] += 1
            return element, True
        if item == "nic":
            element = pci("0x020700")
            if dumped:
                nic = ET.SubElement(element, "nic")
                ET.SubElement(nic, "net", name=f"mlx5_{count['nic']}", dev=str(count["nic"]), speed="400000")
            count["nic"] += 1
            return element, True
        element = pci("0x060400")
        used = False
        for child in item[1]:
            sub, child_used = render(child)
            element.append(sub)
            used = used or child_used
        count["switches"] += used
        return element, used

    system = ET.Element("system", version="1")
    for s, items in enumerate(cpus):
        cpu = ET.SubElement(system, "cpu", numaid=str(s), vendor="GenuineIntel", modelid="143")
        for item in items:
            cpu.append(render(item)[0])
    return ET.tostring(system, encoding="unicode"), dumped, {"sockets": len(cpus), **count}


@FAST
@given(xml_machines())
def test_random_nccl_xml_parses_to_its_machine(case):
    """GPU, NIC, socket and (non-empty) switch counts and the NVSwitch come back."""
    text, dumped, machine = case
    kwargs = {} if dumped else {"gpu_model": "H100", "nic_gbps": 400, "nvswitch": True}
    try:
        spec = parse_nccl_topo_xml(text, **kwargs)
    except TopologyError as err:
        assert machine["gpu"] == 0 and "no GPU" in str(err)
        return
    cluster = build_cluster(spec)
    assert (cluster.gpus_per_node, cluster.nics_per_node) == (machine["gpu"], machine["nic"])
    assert (spec.node.sockets, len(spec.node.switches)) == (machine["sockets"], machine["switches"])
    assert spec.node.nvswitch_links == 18 and cluster.nvlink_bw("n0/gpu0") == 450.0
    assert spec.node.pcie_gen == 5


_TAGS = st.sampled_from(["system", "cpu", "pci", "gpu", "nic", "net", "nvlink", "foo"])
_ATTRS = st.dictionaries(
    st.sampled_from(["class", "busid", "dev", "sm", "speed", "count", "target", "tclass", "link_speed",
                     "link_width", "vendor", "arch", "modelid", "device"]),
    st.sampled_from(["0x030200", "0x020700", "0x060400", "0x068000", "80", "90", "-1", "0", "400000",
                     "16 GT/s", "x", "", "GenuineIntel", "arm64", "0000:01:00.0", "0x2330"])
    | st.text(max_size=6),
    max_size=4)


def _element(tag, attrs, children):
    element = ET.Element(tag, dict(attrs))
    element.extend(children)
    return element


_XML_TREES = st.recursive(st.builds(_element, _TAGS, _ATTRS, st.just([])),
                          lambda inner: st.builds(_element, _TAGS, _ATTRS, st.lists(inner, max_size=4)),
                          max_leaves=12)


@FAST
@given(_XML_TREES, st.booleans())
def test_any_xml_is_a_topology_or_a_topology_error(tree, with_arguments):
    """Random element trees (and random text) never raise anything but TopologyError."""
    text = ET.tostring(tree, encoding="unicode")
    kwargs = {"gpu_model": "A100", "nic_gbps": 200} if with_arguments else {}
    _accepts_or_rejects_cleanly(lambda: import_nccl_topo_xml(text, **kwargs))


@FAST
@given(st.text())
def test_any_text_is_an_nccl_xml_or_a_topology_error(text):
    """Garbage text is rejected with TopologyError."""
    _accepts_or_rejects_cleanly(lambda: import_nccl_topo_xml(text))
