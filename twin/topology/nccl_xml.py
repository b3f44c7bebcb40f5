"""Read NCCL's topology XML (``NCCL_TOPO_DUMP_FILE`` output or an ``NCCL_TOPO_FILE``).

``<system><cpu numaid vendor modelid><pci busid class link_speed link_width>`` nests
PCIe bridges down to GPUs (``<gpu dev sm><nvlink target count tclass/></gpu>``) and NICs
(``<nic><net name dev speed/></nic>``).  From it:

- each ``<cpu>`` is a socket; a ``<pci>`` holding other ``<pci>`` elements is a PCIe
  switch, nested as in the file (switches with no GPU or NIC below them are dropped);
- a GPU is a ``<pci>`` with a ``<gpu>`` or of class 0x03xxxx; a NIC is each ``<net>``
  of a ``<nic>``, or a ``<pci>`` of class 0x02xxxx without one;
- NVLinks to an NVSwitch (``tclass="0x068000"``, including NCCL's collapsed
  ``fffffff:ff:ff.0`` target) join the NVSwitch plane; NVLinks to a GPU's bus id are
  direct pairs; NVLinks to CPUs (POWER9) are not modelled;
- GPU model: ``gpu_model``, else the PCI device id, else the sm version (70 V100-SXM2-32GB,
  80 A100-SXM4-40GB, 86 A40, 89 L40S, 90 H100-SXM5-80GB, 100 B200);
- NIC rate: ``<net speed>`` (Mb/s), or ``nic_gbps``; PCIe generation: the GPUs'
  ``link_speed`` (one generation for the node), else the model's.

GPUs are numbered by ``<gpu dev>``, or by bus id when the file has no ``<gpu>`` elements
(CUDA's PCI_BUS_ID order).  Topology input files (Azure's ``ndv5-topo.xml``) have no
``<nvlink>`` elements: pass ``nvswitch=True`` when their GPUs do sit on an NVSwitch.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from twin.hardware import DEFAULT_MODEL_BY_SM, TopologyError, gpu_for_pci_device, gpu_spec, socket_link_gbps
from twin.topology.build import build_cluster
from twin.topology.cluster import Cluster
from twin.topology.loader import read_source
from twin.topology.spec import ClusterSpec, FabricSpec, NodeSpec, PcieGroup

NVSWITCH_CLASS = 0x068000
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}


def import_nccl_topo_xml(text_or_path: str | Path, *, gpu_model: str | None = None,
                         nic_gbps: float | None = None, nvswitch: bool = False) -> Cluster:
    """The one-node ``Cluster`` of an NCCL topology XML file (or its text)."""
    text, source, name = read_source(text_or_path, "NCCL topology XML")
    spec = parse_nccl_topo_xml(text, gpu_model=gpu_model, nic_gbps=nic_gbps, nvswitch=nvswitch,
                               source=source, name=name)
    try:
        return build_cluster(spec)
    except TopologyError as err:
        raise TopologyError(f"{source}: {err}") from None


@dataclass
class _Device:
    busid: str
    parent: tuple[str, int]
    """``("socket", s)`` or ``("switch", j)``."""
    dev: int | None = None
    sm: int | None = None
    device_id: int | None = None
    link_speed: str = ""
    gbps: float | None = None
    nvlinks: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class _Walk:
    """What a walk over the XML collects."""

    source: str
    gpus: list[_Device] = field(default_factory=list)
    nics: list[_Device] = field(default_factory=list)
    switches: list[tuple[str, int]] = field(default_factory=list)
    """Each switch's parent, ``("socket", s)`` or ``("switch", j)``."""
    net_names: set[str | None] = field(default_factory=set)

    def error(self, element: ET.Element, message: str) -> TopologyError:
        where = element.get("busid") or element.get("name") or element.get("numaid") or "?"
        return TopologyError(f"{self.source}: <{element.tag}> {where}: {message}")

    def number(self, element: ET.Element, attr: str, base: int = 10) -> int | None:
        value = element.get(attr)
        if value is None or value.strip() == "":
            return None
        try:
            return int(value, base)
        except ValueError:
            raise self.error(element, f"{attr} must be an integer, got {value!r}") from None

    def pci(self, element: ET.Element, parent: tuple[str, int]) -> None:
        busid = (element.get("busid") or "").lower()
        pci_class = self.number(element, "class", 16) or 0
        gpu, nic = element.find("gpu"), element.find("nic")
        children = element.findall("pci")
        if gpu is not None or (pci_class >> 16 == 0x03 and not children):
            self.gpu(element, gpu, busid, parent)
        elif nic is not None:
            self.nic_element(nic, busid, parent)
        elif pci_class >> 16 == 0x02 and not children:
            self.nics.append(_Device(busid, parent))
        elif children:
            self.switches.append(parent)
            me = ("switch", len(self.switches) - 1)
            for child in children:
                self.pci(child, me)

    def gpu(self, pci: ET.Element, gpu: ET.Element | None, busid: str, parent: tuple[str, int]) -> None:
        device = _Device(busid, parent, device_id=self.number(pci, "device", 16),
                         link_speed=pci.get("link_speed", ""))
        if gpu is not None:
            device.dev, device.sm = self.number(gpu, "dev"), self.number(gpu, "sm")
            for link in gpu.findall("nvlink"):
                count = self.number(link, "count")
                if count is None or count < 1:
                    raise self.error(link, f"count must be a positive integer, got {link.get('count')!r}")
                device.nvlinks.append(((link.get("target") or "").lower(), count,
                                       self.number(link, "tclass", 16) or 0))
        self.gpus.append(device)

    def nic_element(self, nic: ET.Element, busid: str, parent: tuple[str, int]) -> None:
        nets = nic.findall("net") or [nic]
        for net in nets:
            name = net.get("name")
            if name and name in self.net_names:
                continue  # NCCL lists a socket NIC such as eth0 under every <cpu>: one device
            self.net_names.add(name)
            speed = self.number(net, "speed")
            self.nics.append(_Device(busid, parent, dev=self.number(net, "dev"),
                                     gbps=speed / 1000 if speed else None))


MAX_XML_DEPTH = 64
"""Deeper than this is no machine: NCCL's XML nests system/cpu/pci(switch levels)/gpu, ~10 deep."""


def _depth(root: ET.Element) -> int:
    """How deeply elements nest under ``root`` (1: only the root), without recursion."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        element, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_XML_DEPTH:
            stack.extend((child, depth + 1) for child in element)
    return deepest


def parse_nccl_topo_xml(text: str, *, gpu_model: str | None = None, nic_gbps: float | None = None,
                        nvswitch: bool = False, source: str = "<NCCL topology XML text>",
                        name: str = "imported") -> ClusterSpec:
    """The ``ClusterSpec`` of one node from NCCL's topology XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise TopologyError(f"{source}: not valid XML: {err}") from None
    if root.tag != "system":
        raise TopologyError(f"{source}: the root element is <{root.tag}>, expected <system>")
    if _depth(root) > MAX_XML_DEPTH:
        raise TopologyError(f"{source}: elements nested more than {MAX_XML_DEPTH} deep; no machine's NCCL "
                            "topology is (about 10 levels)")
    cpus = root.findall("cpu")
    if not cpus:
        raise TopologyError(f"{source}: no <cpu> element")
    walk = _Walk(source)
    for s, cpu in enumerate(cpus):
        for child in cpu:
            if child.tag == "pci":
                walk.pci(child, ("socket", s))
            elif child.tag == "nic":
                walk.nic_element(child, "", ("socket", s))
    if not walk.gpus:
        raise TopologyError(f"{source}: no GPU (no <gpu> element and no <pci> of class 0x03xxxx)")
    gpus = _ordered(walk.gpus, source, "GPU")
    nics = _ordered(walk.nics, source, "NIC")
    model = _model(gpus, gpu_model, source)
    rates = _nic_rates(nics, nic_gbps, source)
    nvswitch_links, pairs = _nvlinks(gpus, nvswitch, gpu_spec(model).nvlinks, source)
    switches, root_ports = _groups(walk, gpus, nics, len(cpus))
    vendor = _vendor(cpus[0])
    gens = [_GEN_BY_GTS.get(_gts(g.link_speed)) for g in gpus]
    node = NodeSpec(gpu=model, gpus=len(gpus), switches=switches, root_ports=root_ports, nic_gbps=rates,
                    nvswitch_links=nvswitch_links, nvlink_pairs=pairs, sockets=len(cpus), cpu_vendor=vendor,
                    socket_link_bw=socket_link_gbps(vendor, walk.number(cpus[0], "modelid")
                                                    if vendor == "intel" else None),
                    pcie_gen=max((g for g in gens if g), default=gpu_spec(model).pcie_gen))
    return ClusterSpec(name=name, node=node, description=f"imported from NCCL topology XML ({source})",
                       fabric=FabricSpec(gbps=max(rates)) if rates else None)


def _ordered(devices: list[_Device], source: str, label: str) -> list[_Device]:
    """Devices by ``dev`` when every one has it, else by bus id."""
    devs = [d.dev for d in devices]
    if devices and None not in devs:
        if len(set(devs)) != len(devs):
            raise TopologyError(f"{source}: two {label}s have the same dev index")
        return sorted(devices, key=lambda d: d.dev)
    return sorted(devices, key=lambda d: d.busid)


def _model(gpus: list[_Device], gpu_model: str | None, source: str) -> str:
    if gpu_model is not None:
        try:
            return gpu_spec(gpu_model).model
        except TopologyError as err:
            raise TopologyError(f"{source}: {err}") from None
    models = set()
    for gpu in gpus:
        spec = gpu_for_pci_device(gpu.device_id) if gpu.device_id is not None else None
        model = spec.model if spec else DEFAULT_MODEL_BY_SM.get(gpu.sm)
        if model is None:
            raise TopologyError(f"{source}: GPU {gpu.busid}: cannot tell the model (device id "
                                f"{gpu.device_id and hex(gpu.device_id)}, sm {gpu.sm}); give --gpu-model")
        models.add(model)
    if len(models) > 1:
        raise TopologyError(f"{source}: mixed GPU models {sorted(models)} (a cluster has one GPU model)")
    return models.pop()


def _nic_rates(nics: list[_Device], nic_gbps: float | None, source: str) -> tuple[float, ...]:
    if nic_gbps is not None:
        if nic_gbps <= 0:
            raise TopologyError(f"{source}: nic_gbps must be positive, got {nic_gbps}")
        return (float(nic_gbps),) * len(nics)
    for nic in nics:
        if nic.gbps is None:
            raise TopologyError(f"{source}: NIC {nic.busid or '(no bus id)'} has no speed in the file; "
                                "give --nic-gbps (line rate in Gb/s)")
    return tuple(nic.gbps for nic in nics)


def _nvlinks(gpus: list[_Device], nvswitch: bool, model_links: int,
             source: str) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    index = {g.busid: i for i, g in enumerate(gpus)}
    to_switch, pairs = [0] * len(gpus), {}
    for i, gpu in enumerate(gpus):
        for target, count, tclass in gpu.nvlinks:
            if target in index and index[target] != i:
                key = tuple(sorted((i, index[target])))
                pairs[key] = max(pairs.get(key, 0), count)
            elif tclass == NVSWITCH_CLASS or target.startswith("fffffff"):
                to_switch[i] += count
    has_nvlinks = any(g.nvlinks for g in gpus)
    if nvswitch and has_nvlinks:
        raise TopologyError(f"{source}: nvswitch=True is for files without <nvlink> elements, "
                            "and this one has them")
    if nvswitch:
        return model_links, ()
    if any(to_switch) and pairs:
        raise TopologyError(f"{source}: GPUs have NVLinks both to an NVSwitch and to each other, "
                            "which the cluster format cannot describe")
    return max(to_switch), tuple((a, b, n) for (a, b), n in sorted(pairs.items()))


def _groups(walk: _Walk, gpus: list[_Device], nics: list[_Device],
            sockets: int) -> tuple[tuple[PcieGroup, ...], tuple[PcieGroup, ...]]:
    """PCIe switches (empty ones dropped, parents renumbered) and each socket's root ports."""
    members: dict[tuple[str, int], dict[str, list[int]]] = {}
    for key, devices in (("gpus", gpus), ("nics", nics)):
        for i, device in enumerate(devices):
            members.setdefault(device.parent, {"gpus": [], "nics": []})[key].append(i)
    used = set()
    for j in reversed(range(len(walk.switches))):  # children come after their parents
        if ("switch", j) in members or ("switch", j) in used:
            used.add(walk.switches[j])
            used.add(("switch", j))
    kept = [j for j in range(len(walk.switches)) if ("switch", j) in used]
    renumber = {j: n for n, j in enumerate(kept)}
    switches = []
    for j in kept:
        kind, up = walk.switches[j]
        devices = members.get(("switch", j), {"gpus": [], "nics": []})
        switches.append(PcieGroup(gpus=tuple(devices["gpus"]), nics=tuple(devices["nics"]),
                                  socket=up if kind == "socket" else None,
                                  parent=renumber[up] if kind == "switch" else None))
    root_ports = tuple(PcieGroup(socket=s, gpus=tuple(members[("socket", s)]["gpus"]),
                                 nics=tuple(members[("socket", s)]["nics"]))
                       for s in range(sockets) if ("socket", s) in members)
    return tuple(switches), root_ports


def _vendor(cpu: ET.Element) -> str:
    arch = cpu.get("arch") or ""
    if arch.startswith(("arm", "aarch")):
        return "arm"
    if arch.startswith("ppc"):
        return "power"
    return _VENDORS.get(cpu.get("vendor", ""), "unknown")


def _gts(link_speed: str) -> float | None:
    match = re.match(r"\s*([\d.]+)\s*GT/s", link_speed)
    try:
        return float(match[1]) if match else None
    except ValueError:
        return None
