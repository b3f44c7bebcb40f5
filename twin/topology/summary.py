"""The facts about a cluster that people compare: what ``ccltwin topology show`` prints.

>>> from twin.topology import load_cluster
>>> facts = summarize(load_cluster("dgx-h100"))
>>> facts["nvlink_gbps_per_gpu"], facts["nics_per_node"], facts["nic_gbps"]
(450.0, 8, [400.0, 400.0, 400.0, 400.0, 400.0, 400.0, 400.0, 400.0])
"""

from __future__ import annotations

from typing import Any

from twin.topology.cluster import Cluster
from twin.topology.graph import CPU, CPU_LINK, NET, NVLINK, PCIE, PCIE_SWITCH, SWITCH


def summarize(cluster: Cluster) -> dict[str, Any]:
    """Shape, links and NIC affinity of a cluster (per node: the first node), JSON-ready."""
    graph = cluster.graph
    gpu0 = cluster.gpus()[0]
    host = cluster.host_of(gpu0)
    local = [n for n, d in graph.nodes(data=True) if d.get("host") == host]

    def local_kind(kind: str) -> list[str]:
        return [n for n in local if graph.nodes[n]["kind"] == kind]

    def edge_bw(kind: str, nodes: list[str]) -> float | None:
        bws = [d["bw"] for n in nodes for _, _, d in graph.edges(n, data=True) if d["kind"] == kind]
        return max(bws, default=None)

    nvlinks = sum(d["nlinks"] for _, _, d in graph.edges(gpu0, data=True) if d["kind"] == NVLINK)
    fabric = [n for n, d in graph.nodes(data=True) if d["kind"] == SWITCH]
    fabric_links = [d for a, b, d in graph.edges(fabric, data=True) if d["kind"] == NET]
    return {
        "name": cluster.name,
        "description": cluster.description,
        "nodes": cluster.nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "gpu_model": cluster.gpu_model,
        "nvswitch": cluster.has_nvswitch(),
        "nvlinks_per_gpu": nvlinks,
        "nvlink_gbps_per_gpu": cluster.nvlink_bw(gpu0),
        "nvlink_peers_per_gpu": len(cluster.nvlink_peers(gpu0)),
        "pcie_switches_per_node": len(local_kind(PCIE_SWITCH)),
        "gpu_pcie_gbps": edge_bw(PCIE, [gpu0]),
        "sockets_per_node": len(local_kind(CPU)),
        "cpu_vendor": cluster.cpu_vendor,
        "socket_link_gbps": edge_bw(CPU_LINK, local_kind(CPU)),
        "nics_per_node": cluster.nics_per_node,
        "nic_gbps": [graph.nodes[n]["gbps"] for n in cluster.nics(host)],
        "gpu_nic_affinity": {_local(g): _local(cluster.nic_of(g)) for g in cluster.gpus()
                             if cluster.host_of(g) == host} if cluster.nics_per_node else {},
        "fabric": {
            "leaves": sum(graph.nodes[n].get("tier") == "leaf" for n in fabric),
            "spines": sum(graph.nodes[n].get("tier") == "spine" for n in fabric),
            "link_gbps": max((d["bw"] / d["nlinks"] * 8 for d in fabric_links), default=None),
        } if fabric else None,
        "graph": {"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()},
    }


def _local(node: str) -> str:
    return node.split("/", 1)[1]


def format_summary(facts: dict[str, Any]) -> str:
    """``summarize``'s facts as the lines ``ccltwin topology show`` prints."""
    nvlink = ("none" if not facts["nvlinks_per_gpu"] else
              f"{'NVSwitch' if facts['nvswitch'] else 'direct'}, {facts['nvlinks_per_gpu']} links, "
              f"{facts['nvlink_gbps_per_gpu']:g} GB/s per GPU, NVLink peers: {facts['nvlink_peers_per_gpu']}")
    rates = sorted(set(facts["nic_gbps"]))
    affinity = " ".join(f"{g}→{n}" for g, n in facts["gpu_nic_affinity"].items()) or "-"
    fabric = facts["fabric"]
    lines = [
        f"{facts['name']}: {facts['description']}" if facts["description"] else facts["name"],
        f"  nodes      {facts['nodes']}",
        f"  GPUs       {facts['nodes'] * facts['gpus_per_node']} × {facts['gpu_model']} "
        f"({facts['gpus_per_node']} per node)",
        f"  NVLink     {nvlink}",
        f"  PCIe       {facts['gpu_pcie_gbps']:g} GB/s per GPU link, "
        f"{facts['pcie_switches_per_node']} switches, {facts['sockets_per_node']} × {facts['cpu_vendor']} CPU"
        + (f" ({facts['socket_link_gbps']:g} GB/s between sockets)" if facts["socket_link_gbps"] else ""),
        f"  NICs       {facts['nics_per_node']} per node"
        + (f" at {'/'.join(f'{r:g}' for r in rates)} Gb/s" if rates else ""),
        f"  GPU→NIC    {affinity}",
        "  fabric     " + (f"{fabric['leaves']} leaves, {fabric['spines']} spines, "
                           f"{fabric['link_gbps']:g} Gb/s links" if fabric else "none"),
        f"  graph      {facts['graph']['nodes']} nodes, {facts['graph']['edges']} edges",
    ]
    return "\n".join(lines)
