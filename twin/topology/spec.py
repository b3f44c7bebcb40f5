"""The cluster description behind the YAML format: a node template, a node count, a fabric.

``dgx-a100.yaml`` says "8 A100-SXM4-40GB on one NVSwitch plane, 2 AMD sockets, 4 PCIe
Gen4 switches with 2 GPUs and 2 NICs each, 8 × 200 Gb/s NICs, a rail-optimised
fat-tree"; ``ClusterSpec.from_dict`` reads that into frozen dataclasses, checking every
key and type and naming the file and key in its errors, and ``to_dict`` writes it back.
docs/topology-format.md documents the keys.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from twin.hardware import (
    CPU_VENDORS,
    DEFAULT_FABRIC_KIND,
    FABRIC_KINDS,
    TUNER_PLUGINS,
    TopologyError,
    gpu_spec,
    socket_link_gbps,
)
from twin.host_cpu import host_cpu

MAX_GPUS = 131_072
"""The most GPUs one cluster description may have (2**17). The largest NCCL jobs published run
16,384 H100s (Llama 3, Meta 2024) on 24,576-GPU clusters; the largest sites (xAI Colossus) are
about 100,000 GPUs in one building. Beyond that is a typo, and building its graph would not fit
in memory."""
MAX_PER_NODE = 1_024
"""The most of anything one node may have (GPUs, NICs, sockets, switches, PCIe lanes, NVLinks):
the largest NVLink domains are racks of 72 GPUs (GB200 NVL72), and a PCIe x16 slot has 16 lanes."""
MAX_NIC_GBPS = 10_000.0
"""The fastest line rate a NIC or fabric link may have, Gb/s: 12.5x today's fastest NIC
(NVIDIA ConnectX-8 SuperNIC, 800 Gb/s, 2024)."""

DEFAULT_LATENCY_US = {"nvlink": 0.35, "pcie": 0.5, "cpu": 0.6}
"""One-hop latencies: GPU→NVSwitch→GPU 0.7 µs, GPU→PCIe switch→GPU 1 µs, one socket hop."""
DEFAULT_NET_LATENCY_US = 0.5
"""Per network link: NIC→leaf→NIC about 1 µs, through a spine about 2 µs (IB HDR/NDR)."""


@dataclass(frozen=True)
class PcieGroup:
    """Devices under one PCIe switch, or plugged straight into a socket's root ports.

    A switch hangs off a socket (``socket``) or off an earlier switch (``parent``).
    """

    gpus: tuple[int, ...] = ()
    nics: tuple[int, ...] = ()
    socket: int | None = None
    parent: int | None = None


@dataclass(frozen=True)
class NodeSpec:
    """What every node of the cluster contains."""

    gpu: str
    """Canonical GPU model."""
    gpus: int
    switches: tuple[PcieGroup, ...]
    root_ports: tuple[PcieGroup, ...] = ()
    nic_gbps: tuple[float, ...] = ()
    """Line rate of each NIC, Gb/s (the NIC count is its length)."""
    nvswitch_links: int = 0
    """NVLinks from each GPU into the NVSwitch plane; 0 for no NVSwitch."""
    nvlink_pairs: tuple[tuple[int, int, int], ...] = ()
    """Direct NVLink bundles ``(gpu_a, gpu_b, links)``."""
    sockets: int = 1
    cpu_vendor: str = "unknown"
    cpu_model: str = "unknown"
    """Host CPU model (``twin.host_cpu``): how fast its cores run the framework's host thread."""
    socket_link_bw: float = 10.0
    """GB/s per direction between two sockets, as NCCL's search counts it (``socket_link_gbps``)."""
    socket_memory_bw: float | None = None
    """GB/s per direction between two sockets for DMA to the far socket's memory (the twin's time
    for host-staged and SHM bytes, ``twin.host_cpu.HostCpu.socket_memory_gbps``); None: ``socket_link_bw``."""
    pcie_gen: int = 4
    pcie_lanes: int = 16
    pcie_acs: bool = False
    """The PCIe switches' downstream ports redirect peer-to-peer requests to the root complex (PCI
    Access Control Services): devices under one switch exchange data through their socket, though
    the PCIe tree (what NCCL reads from sysfs) still shows them one switch apart."""
    latency_us: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LATENCY_US))

    @property
    def nics(self) -> int:
        return len(self.nic_gbps)


@dataclass(frozen=True)
class FabricSpec:
    """A rail-optimised fat-tree: NIC k of every node on a leaf of rail k, leaves to spines."""

    gbps: float
    """Link rate, Gb/s."""
    spines: int | None = None
    """Spine count; default one per rail.  Spines exist only when there are several leaves."""
    nodes_per_leaf: int | None = None
    """Nodes on one leaf of a rail; default all of them (one leaf per rail)."""
    leaves_per_rail: int | None = None
    """Instead of ``nodes_per_leaf``: spread the nodes over this many leaves per rail."""
    oversubscription: float = 1.0
    """Downlink to uplink capacity of a leaf; 1 is non-blocking."""
    lat_us: float = DEFAULT_NET_LATENCY_US
    sharp: bool = False
    """The switches reduce in the network (SHARP), which NCCL's CollNet algorithms use."""
    kind: str = DEFAULT_FABRIC_KIND
    """What the NICs speak: a ``twin.hardware.FABRIC_KINDS`` name (``infiniband``, ``roce``, ``tcp``,
    ``gpudirect-tcpx``, ``gpudirect-tcpxo``, ``efa``, ``slingshot``)."""
    tuner: str | None = None
    """The tuner plugin NCCL runs with (``twin.hardware.TUNER_PLUGINS``); None: the one NCCL loads
    from the kind's net plugin (``aws-ofi-nccl`` on EFA), ``none``: NCCL's own choice."""
    instance: str | None = None
    """The instance type the tuner plugin keys its tables on (the EC2 product name, ``p5.48xlarge``)."""
    tuner_config: str | None = None
    """A gIB tuner config NCCL's tuner reads on every communicator (``NCCL_TUNER_CONFIG_PATH``): a
    bundled table's name (``gib-a3u``, ``gib-a4``) or a file in Google's text format, relative to the
    description's file; None: the kind's profile's, between nodes (``FabricKind.nccl_env``)."""


@dataclass(frozen=True)
class ExtraEdge:
    """A link added by hand between two existing graph nodes (ids like ``n0/gpu0``)."""

    a: str
    b: str
    kind: str
    bw: float
    lat_us: float = 0.5
    nlinks: int = 1


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    node: NodeSpec
    nodes: int = 1
    fabric: FabricSpec | None = None
    description: str = ""
    extra_edges: tuple[ExtraEdge, ...] = ()
    sources: tuple[str, ...] = ()
    """Where the description's figures come from (data sheets, vendor pages), for ``topology list``."""

    @classmethod
    def from_dict(cls, data: Any, source: str) -> ClusterSpec:
        """Read the YAML mapping of one cluster; ``source`` names the file in errors."""
        return _parse(_Section(data, "", source))

    def to_dict(self) -> dict[str, Any]:
        return _dump(self)

    def with_overrides(self, *, nodes: int | None = None, nics_per_node: int | None = None,
                       nic_gbps: float | None = None) -> ClusterSpec:
        """The same cluster with another node count, the first K NICs, or every NIC at one rate."""
        spec, node = self, self.node
        if nodes is not None:
            _require(nodes >= 1, f"nodes must be at least 1, got {nodes}")
            _require(nodes * node.gpus <= MAX_GPUS, f"nodes={nodes} gives {nodes * node.gpus:,} GPUs; a cluster has "
                     f"at most {MAX_GPUS:,} (the largest built are about 100,000)")
            spec = replace(spec, nodes=nodes)
        if nics_per_node is not None:
            _require(0 <= nics_per_node <= node.nics,
                     f"nics_per_node={nics_per_node} but the node has {node.nics} NICs")
            node = replace(node, nic_gbps=node.nic_gbps[:nics_per_node],
                           switches=_keep_nics(node.switches, nics_per_node),
                           root_ports=_keep_nics(node.root_ports, nics_per_node))
        if nic_gbps is not None:
            _require(math.isfinite(nic_gbps) and 0 < nic_gbps <= MAX_NIC_GBPS,
                     f"nic_gbps must be above 0 and at most {MAX_NIC_GBPS:g} Gb/s (12.5x the fastest NIC, "
                     f"800 Gb/s), got {nic_gbps}")
            node = replace(node, nic_gbps=(float(nic_gbps),) * node.nics)
            if spec.fabric is not None:
                spec = replace(spec, fabric=replace(spec.fabric, gbps=float(nic_gbps)))
        return replace(spec, node=node)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise TopologyError(message)


def _keep_nics(groups: tuple[PcieGroup, ...], count: int) -> tuple[PcieGroup, ...]:
    return tuple(replace(g, nics=tuple(n for n in g.nics if n < count)) for g in groups)


# -- reading --------------------------------------------------------------------------------

_REQUIRED = object()


class _Section:
    """One mapping of the YAML document, read key by key; keys never read are errors."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        self.where, self.source = where, source
        if not isinstance(data, dict):
            raise self.error(f"expected a mapping, got {_describe(data)}")
        self.data, self.seen = data, set()

    def error(self, message: str, key: str | None = None) -> TopologyError:
        path = ".".join(p for p in (self.where, key) if p)
        return TopologyError(f"{self.source}: {path + ': ' if path else ''}{message}")

    def get(self, key: str, default: Any = _REQUIRED) -> Any:
        self.seen.add(key)
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _REQUIRED:
            raise self.error("required key is missing", key)
        return default

    def int(self, key: str, default: Any = _REQUIRED, *, low: int | None = None, high: int = MAX_PER_NODE) -> Any:
        value = self.get(key, default)
        if value is default:
            return value
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(f"expected an integer, got {_describe(value)}", key)
        if low is not None and value < low:
            raise self.error(f"must be at least {low}, got {value}", key)
        if value > high:
            raise self.error(f"must be at most {high:,}, got {value:,}", key)
        return value

    def number(self, key: str, default: Any = _REQUIRED, *, positive: bool = False, high: float | None = None) -> Any:
        value = self.get(key, default)
        if value is default:
            return value
        return self.check_number(value, key, positive=positive, high=high)

    def check_number(self, value: Any, key: str, *, positive: bool = False, high: float | None = None) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise self.error(f"expected a number, got {_describe(value)}", key)
        if high is not None and value > high:
            raise self.error(f"must be at most {high:g}, got {value:g}", key)
        if positive and value <= 0:
            raise self.error(f"must be positive, got {value}", key)
        if value < 0:
            raise self.error(f"must not be negative, got {value}", key)
        return float(value)

    def str(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.get(key, default)
        if value is not default and not isinstance(value, str):
            raise self.error(f"expected a string, got {_describe(value)}", key)
        return value

    def flag(self, key: str) -> bool:
        value = self.get(key, False)
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {_describe(value)}", key)
        return value

    def list(self, key: str) -> list:
        value = self.get(key, [])
        if not isinstance(value, list):
            raise self.error(f"expected a list, got {_describe(value)}", key)
        return value

    def section(self, key: str, *, required: bool = False) -> _Section | None:
        value = self.get(key, _REQUIRED if required else None)
        return None if value is None else _Section(value, self.child(key), self.source)

    def child(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def done(self) -> None:
        unknown = [k for k in self.data if k not in self.seen]
        if unknown:
            raise self.error(f"unknown key {unknown[0]!r} (expected one of: {', '.join(sorted(self.seen))})")


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, dict | list) else type(value).__name__


def _parse(top: _Section) -> ClusterSpec:
    name = top.str("name", "")
    description = top.str("description", "")
    sources = top.list("sources")
    if not all(isinstance(v, str) for v in sources):
        raise top.error(f"expected a list of strings, got {sources!r}", "sources")
    nodes = top.int("nodes", 1, low=1, high=MAX_GPUS)
    node = _parse_node(top.section("node", required=True))
    if nodes * node.gpus > MAX_GPUS:
        raise top.error(f"{nodes:,} nodes of {node.gpus} GPUs are {nodes * node.gpus:,} GPUs; a cluster has at most "
                        f"{MAX_GPUS:,} (the largest built are about 100,000)", "nodes")
    fabric_section = top.section("fabric")
    fabric = _parse_fabric(fabric_section, node) if fabric_section else None
    extra = tuple(_parse_edge(_Section(e, f"extra_edges[{i}]", top.source))
                  for i, e in enumerate(top.list("extra_edges")))
    top.done()
    return ClusterSpec(name=name, description=description, nodes=nodes, node=node, fabric=fabric,
                       extra_edges=extra, sources=tuple(sources))


def _parse_node(sec: _Section) -> NodeSpec:
    try:
        gpu = gpu_spec(sec.str("gpu"))
    except TopologyError as err:
        raise sec.error(str(err), "gpu") from None
    gpus = sec.int("gpus", low=1)
    nvswitch_links, pairs = _parse_nvlink(sec.section("nvlink"), gpu.nvlinks, gpus)
    sockets, vendor, cpu_model, link_bw, memory_bw = _parse_cpu(sec.section("cpu"))
    nic_gbps = _parse_nics(sec.section("nics"))
    pcie = sec.section("pcie", required=True)
    gen = pcie.int("gen", gpu.pcie_gen, low=1)
    if gen > 6:
        raise pcie.error(f"unknown PCIe generation {gen} (known: 1-6)", "gen")
    lanes = pcie.int("lanes", 16, low=1)
    acs = pcie.flag("acs")
    switches = _parse_groups(pcie, "switches", sockets)
    root_ports = _parse_groups(pcie, "root_ports", sockets)
    pcie.done()
    _check_placement(pcie, switches + root_ports, "gpus", gpus)
    _check_placement(pcie, switches + root_ports, "nics", len(nic_gbps))
    latency = _parse_latency(sec.section("latency_us"))
    sec.done()
    return NodeSpec(gpu=gpu.model, gpus=gpus, switches=switches, root_ports=root_ports, nic_gbps=nic_gbps,
                    nvswitch_links=nvswitch_links, nvlink_pairs=pairs, sockets=sockets, cpu_vendor=vendor,
                    cpu_model=cpu_model, socket_link_bw=link_bw, socket_memory_bw=memory_bw, pcie_gen=gen,
                    pcie_lanes=lanes, pcie_acs=acs, latency_us=latency)


def _parse_nvlink(sec: _Section | None, model_links: int, gpus: int) -> tuple[int, tuple]:
    if sec is None:
        return 0, ()
    nvswitch = sec.flag("nvswitch")
    links = sec.int("links", model_links, low=1)
    raw_pairs = sec.list("pairs")
    sec.done()
    if nvswitch and raw_pairs:
        raise sec.error("give either nvswitch: true or pairs, not both")
    pairs = []
    for i, item in enumerate(raw_pairs):
        where = f"pairs[{i}]"
        if not (isinstance(item, list) and len(item) in (2, 3) and all(_is_int(v) for v in item)):
            raise sec.error(f"expected [gpu_a, gpu_b] or [gpu_a, gpu_b, links], got {item!r}", where)
        a, b, n = (*item, links) if len(item) == 2 else item
        if not (0 <= a < gpus and 0 <= b < gpus and a != b and n >= 1):
            raise sec.error(f"pair {item!r} needs two different GPUs of 0..{gpus - 1} and links ≥ 1", where)
        pairs.append((a, b, n))
    return (links if nvswitch else 0), tuple(pairs)


def _parse_cpu(sec: _Section | None) -> tuple[int, str, str, float, float | None]:
    if sec is None:
        return 1, "unknown", "unknown", socket_link_gbps("unknown"), None
    sockets = sec.int("sockets", 1, low=1)
    vendor = sec.str("vendor", "unknown")
    if vendor not in CPU_VENDORS:
        raise sec.error(f"unknown CPU vendor {vendor!r} (known: {', '.join(CPU_VENDORS)})", "vendor")
    model = sec.str("model", "unknown")
    memory_bw = None
    if model != "unknown":
        try:
            cpu = host_cpu(model)
        except TopologyError as err:
            raise sec.error(str(err), "model") from None
        model, memory_bw = cpu.model, cpu.socket_memory_gbps
    link_bw = sec.number("link_bw", socket_link_gbps(vendor), positive=True)
    memory_bw = sec.number("memory_bw", memory_bw, positive=True)
    sec.done()
    return sockets, vendor, model, link_bw, memory_bw


def _parse_nics(sec: _Section | None) -> tuple[float, ...]:
    if sec is None:
        return ()
    count = sec.int("count", low=0)
    gbps = sec.get("gbps", _REQUIRED if count else 100.0)
    sec.done()
    rates = gbps if isinstance(gbps, list) else [gbps] * count
    if len(rates) != count:
        raise sec.error(f"lists {len(rates)} rates for {count} NICs", "gbps")
    return tuple(sec.check_number(r, "gbps", positive=True, high=MAX_NIC_GBPS) for r in rates)


def _parse_groups(pcie: _Section, key: str, sockets: int) -> tuple[PcieGroup, ...]:
    groups = []
    for i, raw in enumerate(pcie.list(key)):
        sec = _Section(raw, f"{pcie.child(key)}[{i}]", pcie.source)
        socket = sec.int("socket", None, low=0)
        parent = sec.int("parent", None, low=0) if key == "switches" else None
        devices = {k: _index_list(sec, k) for k in ("gpus", "nics")}
        sec.done()
        if (socket is None) == (parent is None):
            raise sec.error("give exactly one of socket and parent" if key == "switches"
                            else "required key is missing", None if key == "switches" else "socket")
        if socket is not None and socket >= sockets:
            raise sec.error(f"socket {socket} does not exist (the node has {sockets})", "socket")
        if parent is not None and parent >= i:
            raise sec.error(f"parent must be an earlier switch (0..{i - 1}), got {parent}", "parent")
        groups.append(PcieGroup(gpus=devices["gpus"], nics=devices["nics"], socket=socket, parent=parent))
    return tuple(groups)


def _index_list(sec: _Section, key: str) -> tuple[int, ...]:
    values = sec.list(key)
    if not all(_is_int(v) for v in values):
        raise sec.error(f"expected a list of indices, got {values!r}", key)
    return tuple(values)


def _check_placement(pcie: _Section, groups: tuple[PcieGroup, ...], key: str, count: int) -> None:
    label = key[:-1].upper()
    placed = [i for g in groups for i in getattr(g, key)]
    for i in placed:
        if not 0 <= i < count:
            raise pcie.error(f"{label} {i} does not exist (the node has {count})")
        if placed.count(i) > 1:
            raise pcie.error(f"{label} {i} is placed more than once")
    missing = sorted(set(range(count)) - set(placed))
    if missing:
        raise pcie.error(f"{label} {missing[0]} is under no PCIe switch or root port")


def _parse_latency(sec: _Section | None) -> dict[str, float]:
    latency = dict(DEFAULT_LATENCY_US)
    if sec is not None:
        for kind in DEFAULT_LATENCY_US:
            latency[kind] = sec.number(kind, latency[kind])
        sec.done()
    return latency


def _parse_fabric(sec: _Section, node: NodeSpec) -> FabricSpec:
    default_gbps = max(node.nic_gbps, default=_REQUIRED)
    fabric = FabricSpec(gbps=sec.number("gbps", default_gbps, positive=True, high=MAX_NIC_GBPS),
                        spines=sec.int("spines", None, low=1, high=MAX_GPUS),
                        nodes_per_leaf=sec.int("nodes_per_leaf", None, low=1, high=MAX_GPUS),
                        leaves_per_rail=sec.int("leaves_per_rail", None, low=1, high=MAX_GPUS),
                        oversubscription=sec.number("oversubscription", 1.0, positive=True),
                        lat_us=sec.number("lat_us", DEFAULT_NET_LATENCY_US),
                        sharp=sec.flag("sharp"), kind=sec.str("kind", DEFAULT_FABRIC_KIND),
                        tuner=sec.str("tuner", None), instance=sec.str("instance", None),
                        tuner_config=sec.str("tuner_config", None))
    sec.done()
    if fabric.tuner is not None and fabric.tuner not in TUNER_PLUGINS:
        raise sec.error(f"unknown tuner plugin {fabric.tuner!r} (known: {', '.join(TUNER_PLUGINS)})", "tuner")
    if fabric.tuner is not None and fabric.tuner_config is not None:
        raise sec.error(f"NCCL loads one tuner: tuner {fabric.tuner!r} reads no gIB tuner config "
                        "(give tuner or tuner_config)", "tuner_config")
    if fabric.kind not in FABRIC_KINDS:
        raise sec.error(f"unknown fabric kind {fabric.kind!r} (known: {', '.join(FABRIC_KINDS)})", "kind")
    if fabric.sharp and fabric.kind != "infiniband":
        raise sec.error(f"SHARP needs InfiniBand switches, not {fabric.kind}", "sharp")
    if fabric.nodes_per_leaf and fabric.leaves_per_rail:
        raise sec.error("give at most one of nodes_per_leaf and leaves_per_rail")
    return fabric


def _parse_edge(sec: _Section) -> ExtraEdge:
    edge = ExtraEdge(a=sec.str("a"), b=sec.str("b"), kind=sec.str("kind"),
                     bw=sec.number("bw", positive=True), lat_us=sec.number("lat_us", 0.5),
                     nlinks=sec.int("nlinks", 1, low=1))
    sec.done()
    return edge


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- writing --------------------------------------------------------------------------------

def _dump(spec: ClusterSpec) -> dict[str, Any]:
    node = spec.node
    out: dict[str, Any] = {"name": spec.name, "description": spec.description, "nodes": spec.nodes}
    if spec.sources:
        out["sources"] = list(spec.sources)
    body: dict[str, Any] = {"gpu": node.gpu, "gpus": node.gpus}
    if node.nvswitch_links:
        body["nvlink"] = {"nvswitch": True, "links": node.nvswitch_links}
    elif node.nvlink_pairs:
        body["nvlink"] = {"pairs": [list(p) for p in node.nvlink_pairs]}
    body["cpu"] = {"sockets": node.sockets, "vendor": node.cpu_vendor, "model": node.cpu_model,
                   "link_bw": node.socket_link_bw}
    if node.socket_memory_bw is not None:
        body["cpu"]["memory_bw"] = node.socket_memory_bw
    body["pcie"] = {"gen": node.pcie_gen, "lanes": node.pcie_lanes,
                    "switches": [_dump_group(g) for g in node.switches],
                    "root_ports": [_dump_group(g) for g in node.root_ports]}
    if node.pcie_acs:
        body["pcie"]["acs"] = True
    rates = set(node.nic_gbps)
    body["nics"] = {"count": node.nics, "gbps": rates.pop() if len(rates) == 1 else list(node.nic_gbps)}
    body["latency_us"] = dict(node.latency_us)
    out["node"] = body
    if spec.fabric is not None:
        out["fabric"] = {k: v for k, v in asdict(spec.fabric).items()
                         if v is not None and v is not False and not (k == "kind" and v == DEFAULT_FABRIC_KIND)}
    if spec.extra_edges:
        out["extra_edges"] = [vars(e).copy() for e in spec.extra_edges]
    return out


def _dump_group(group: PcieGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"socket": group.socket} if group.socket is not None else {"parent": group.parent}
    out["gpus"], out["nics"] = list(group.gpus), list(group.nics)
    return out
