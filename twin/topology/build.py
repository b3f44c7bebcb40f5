"""Turn a ``ClusterSpec`` into the cluster graph: nodes, PCIe trees, NVLinks, the fabric.

Two DGX H100 nodes become 2 × (8 GPUs, 1 NVSwitch, 8 PCIe switches, 2 CPUs, 8 NICs) plus
8 leaves (one per rail) and the spines above them.  Every NIC carries its fabric kind
(``fabric``: ``infiniband`` unless the description says otherwise) and, where the description names
them, NCCL's tuner plugin and the instance type it reads (``tuner``, ``instance``).  Leaf–spine links are bundles sized
so that each leaf's uplink matches its downlink divided by the oversubscription.
"""

from __future__ import annotations

import math

import networkx as nx

from twin.hardware import DEFAULT_FABRIC_KIND, TUNER_PLUGINS, TopologyError, gpu_spec, pcie_gbps
from twin.topology.cluster import Cluster
from twin.topology.graph import CPU, CPU_LINK, GPU, NET, NIC, NVLINK, NVSWITCH, PCIE, PCIE_SWITCH, SWITCH
from twin.topology.spec import ClusterSpec, NodeSpec, PcieGroup


def build_cluster(spec: ClusterSpec) -> Cluster:
    """The validated ``Cluster`` a spec describes."""
    return Cluster(spec.name, build_graph(spec), description=spec.description)


def tuner_attributes(tuner: str | None, config: str | None) -> dict[str, str]:
    """What every NIC carries of NCCL's tuner when the description names it: the plugin (``tuner``:
    ``none`` where only a gIB config is named) and the gIB config (``tuner_config``: ``""`` for none,
    which also turns off the kind's profile's); nothing where neither is named.

    >>> tuner_attributes(None, None), tuner_attributes("aws-ofi-nccl", None), tuner_attributes(None, "gib-a4")
    ({}, {'tuner': 'aws-ofi-nccl', 'tuner_config': ''}, {'tuner': 'none', 'tuner_config': 'gib-a4'})
    """
    if tuner is None and config is None:
        return {}
    if tuner is not None and config is not None:
        raise TopologyError(f"NCCL loads one tuner: {tuner!r} reads no gIB tuner config ({config})")
    return {"tuner": tuner or TUNER_PLUGINS[0], "tuner_config": config or ""}


def set_tuner(graph: nx.Graph, tuner: str | None, config: str | None) -> None:
    """Give every NIC of ``graph`` this tuner (``tuner_attributes``); a gIB config needs a NIC to carry it."""
    nics = [n for n, d in graph.nodes(data=True) if d["kind"] == NIC]
    if config is not None and not nics:
        raise TopologyError(f"no NICs to carry the gIB tuner config {config} (the twin keeps NCCL's tuner on "
                            "the NICs)")
    for nic in nics:
        graph.nodes[nic].update(tuner_attributes(tuner, config))


def build_graph(spec: ClusterSpec) -> nx.Graph:
    graph = nx.Graph()
    fabric = spec.fabric
    nic = {"fabric": fabric.kind if fabric is not None else DEFAULT_FABRIC_KIND}
    if fabric is not None:
        nic.update({"instance": fabric.instance} if fabric.instance is not None else {})
        nic.update(tuner_attributes(fabric.tuner, fabric.tuner_config))
    for host in range(spec.nodes):
        _add_node(graph, spec.node, host, nic)
    if spec.fabric is not None and spec.node.nics:
        _add_fabric(graph, spec)
    for edge in spec.extra_edges:
        for end in (edge.a, edge.b):
            if end not in graph:
                raise TopologyError(f"extra edge {edge.a}–{edge.b}: no node {end!r} in the cluster")
        graph.add_edge(edge.a, edge.b, kind=edge.kind, bw=edge.bw, lat_us=edge.lat_us, nlinks=edge.nlinks)
    return graph


def _add_node(graph: nx.Graph, node: NodeSpec, host: int, nic: dict[str, str]) -> None:
    spec = gpu_spec(node.gpu)
    lat = node.latency_us
    prefix = f"n{host}/"
    cpus = [f"{prefix}cpu{s}" for s in range(node.sockets)]
    for s, cpu in enumerate(cpus):
        graph.add_node(cpu, kind=CPU, host=host, socket=s, vendor=node.cpu_vendor, model=node.cpu_model)
    for i, a in enumerate(cpus):
        for b in cpus[i + 1:]:
            graph.add_edge(a, b, kind=CPU_LINK, bw=node.socket_link_bw, lat_us=lat["cpu"], nlinks=1,
                           memory_bw=node.socket_memory_bw or node.socket_link_bw)

    link_bw = pcie_gbps(node.pcie_gen, node.pcie_lanes)
    gpu_bw = pcie_gbps(min(node.pcie_gen, spec.pcie_gen), spec.pcie_lanes)
    nic_bw = pcie_gbps(node.pcie_gen, 16)
    for i in range(node.gpus):
        graph.add_node(f"{prefix}gpu{i}", kind=GPU, host=host, local=i, model=spec.model)
    for k, gbps in enumerate(node.nic_gbps):
        graph.add_node(f"{prefix}nic{k}", kind=NIC, host=host, local=k, gbps=gbps, **nic)

    def attach(parent: str, group: PcieGroup) -> None:
        for i in group.gpus:
            graph.add_edge(f"{prefix}gpu{i}", parent, kind=PCIE, bw=gpu_bw, lat_us=lat["pcie"], nlinks=1)
        for k in group.nics:
            graph.add_edge(f"{prefix}nic{k}", parent, kind=PCIE, bw=nic_bw, lat_us=lat["pcie"], nlinks=1)

    for j, switch in enumerate(node.switches):
        name = f"{prefix}pcie{j}"
        graph.add_node(name, kind=PCIE_SWITCH, host=host, **({"acs": True} if node.pcie_acs else {}))
        upstream = cpus[switch.socket] if switch.socket is not None else f"{prefix}pcie{switch.parent}"
        graph.add_edge(name, upstream, kind=PCIE, bw=link_bw, lat_us=lat["pcie"], nlinks=1)
        attach(name, switch)
    for ports in node.root_ports:
        attach(cpus[ports.socket], ports)

    if node.nvswitch_links:
        nvswitch = f"{prefix}nvswitch"
        graph.add_node(nvswitch, kind=NVSWITCH, host=host)
        for i in range(node.gpus):
            graph.add_edge(f"{prefix}gpu{i}", nvswitch, kind=NVLINK, lat_us=lat["nvlink"],
                           bw=float(node.nvswitch_links * spec.nvlink_gbps), nlinks=node.nvswitch_links)
    for a, b, links in node.nvlink_pairs:
        graph.add_edge(f"{prefix}gpu{a}", f"{prefix}gpu{b}", kind=NVLINK, bw=float(links * spec.nvlink_gbps),
                       lat_us=lat["nvlink"], nlinks=links)


def _add_fabric(graph: nx.Graph, spec: ClusterSpec) -> None:
    fabric, rails = spec.fabric, spec.node.nics
    per_leaf = fabric.nodes_per_leaf or math.ceil(spec.nodes / (fabric.leaves_per_rail or 1))
    per_leaf = min(per_leaf, spec.nodes)
    leaves_per_rail = math.ceil(spec.nodes / per_leaf)
    link_bw = fabric.gbps / 8
    leaves = []
    for rail in range(rails):
        for j in range(leaves_per_rail):
            leaf = f"leaf{rail * leaves_per_rail + j}"
            graph.add_node(leaf, kind=SWITCH, tier="leaf", rail=rail, sharp=fabric.sharp)
            hosts = range(j * per_leaf, min((j + 1) * per_leaf, spec.nodes))
            nic_bw = min(spec.node.nic_gbps[rail], fabric.gbps) / 8
            for host in hosts:
                graph.add_edge(f"n{host}/nic{rail}", leaf, kind=NET, bw=nic_bw, lat_us=fabric.lat_us,
                               nlinks=1)
            leaves.append((leaf, len(hosts)))
    if len(leaves) < 2:
        return
    spines = fabric.spines or rails
    for s in range(spines):
        graph.add_node(f"spine{s}", kind=SWITCH, tier="spine", sharp=fabric.sharp)
    for leaf, downlinks in leaves:
        # Cables from this leaf to each spine: enough for downlinks / oversubscription in total.
        cables = max(1, math.ceil(downlinks / (spines * fabric.oversubscription)))
        for s in range(spines):
            graph.add_edge(leaf, f"spine{s}", kind=NET, bw=cables * link_bw, lat_us=fabric.lat_us,
                           nlinks=cables)
