"""The facts about a cluster that people compare: what ``ccltwin topology show`` prints.

>>> from twin.topology import load_cluster
>>> facts = summarize(load_cluster("dgx-h100"))
>>> facts["nvlink_gbps_per_gpu"], facts["nics_per_node"], facts["nic_gbps"]
(450.0, 8, [400.0, 400.0, 400.0, 400.0, 400.0, 400.0, 400.0, 400.0])
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from twin.hardware import DEFAULT_FABRIC_KIND, fabric_kind, gpu_spec
from twin.topology.cluster import Cluster
from twin.topology.graph import CPU, CPU_LINK, NET, NVLINK, PCIE, PCIE_SWITCH, SWITCH
from twin.topology.loader import read_spec


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
        "pcie_acs": any(graph.nodes[n].get("acs", False) for n in local_kind(PCIE_SWITCH)),
        "gpu_pcie_gbps": edge_bw(PCIE, [gpu0]),
        "sockets_per_node": len(local_kind(CPU)),
        "cpu_vendor": cluster.cpu_vendor,
        "host_cpu": next((graph.nodes[c].get("model", "unknown") for c in local_kind(CPU)), "unknown"),
        "host_cpu_single_thread": round(cluster.host_cpu.single_thread, 3),
        "socket_link_gbps": edge_bw(CPU_LINK, local_kind(CPU)),
        "nics_per_node": cluster.nics_per_node,
        "fabric_kind": cluster.fabric.name,
        "nccl_tuner": tuner_facts(cluster),
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


def tuner_facts(cluster: Cluster) -> dict[str, Any]:
    """NCCL's tuner on ``cluster``: its plugin and the instance it reads (``Cluster.nccl_tuner``), and
    the gIB tuner config, the description's (every communicator) or the fabric kind's profile's
    (``config_between_nodes``)."""
    plugin, instance = cluster.nccl_tuner
    named = cluster.nccl_tuner_config
    profile = cluster.fabric.env.get("NCCL_TUNER_CONFIG_PATH") if named is None else None
    return {"plugin": plugin, "instance": instance, "config": named or profile, "config_between_nodes": bool(profile)}


def tuner_line(tuner: dict[str, Any]) -> str:
    """``aws-ofi-nccl (instance p5.48xlarge)``, ``gIB tuner config gib-a4``, or ``none (NCCL's own choice)``."""
    if tuner["config"]:
        return f"gIB tuner config {tuner['config']}" + (" (the fabric kind's profile, between nodes)"
                                                         if tuner["config_between_nodes"] else "")
    if tuner["plugin"] == "none":
        return "none (NCCL's own choice)"
    instance = tuner["instance"] or "not given: the plugin keeps NCCL's choice"
    return f"{tuner['plugin']} (instance {instance})"


def _kind_line(name: str) -> str:
    """``infiniband: InfiniBand verbs (RDMA), NCCL net IB, GPUDirect RDMA`` and the vendor profile."""
    kind = fabric_kind(name)
    profile = " ".join(f"{k}={v}" for k, v in kind.nccl_env)
    return (f"{kind.name}: {kind.title}, NCCL net {kind.nccl_net}, "
            f"{'GPUDirect' if kind.gpudirect else 'host-staged (no GPUDirect)'}"
            + (f", vendor profile {profile}" if profile else "")
            + (f", reports {kind.reported_latency_us:g} us latency to NCCL" if kind.reported_latency_us else ""))


def preset_facts(name: str) -> dict[str, Any]:
    """What ``ccltwin topology list`` shows of a preset: its description, its GPU's data-sheet
    figures, its NICs and fabric kind, and the sources of its figures (JSON-ready).

    >>> facts = preset_facts("gcp-a3-mega")
    >>> facts["gpu"]["model"], facts["fabric_kind"], facts["nics"]
    ('H100-SXM5-80GB', 'gpudirect-tcpxo', '8 x 200 Gb/s')
    """
    spec = read_spec(name)
    gpu = gpu_spec(spec.node.gpu)
    rates = sorted(set(spec.node.nic_gbps))
    return {
        "name": name,
        "description": spec.description,
        "nodes": spec.nodes,
        "gpus_per_node": spec.node.gpus,
        "gpu": {"model": gpu.model, "arch": gpu.arch, "sm_version": gpu.sm_version, "sms": gpu.sm_count,
                "hbm_gbps": gpu.hbm_gbps, "peak_tflops": asdict(gpu.peak),
                "nvlinks": gpu.nvlinks, "nvlink_gbps_per_link": gpu.nvlink_gbps,
                "nvlink_gbps": gpu.nvlink_total_gbps, "price_per_gpu_hour": gpu.price_per_gpu_hour},
        "nics": f"{spec.node.nics} x {'/'.join(f'{r:g}' for r in rates)} Gb/s" if rates else "none",
        "fabric_kind": (spec.fabric.kind if spec.fabric else DEFAULT_FABRIC_KIND),
        "sources": list(spec.sources),
    }


def format_preset(facts: dict[str, Any]) -> str:
    """``preset_facts`` as the lines ``ccltwin topology list`` prints for one preset."""
    gpu, peak = facts["gpu"], facts["gpu"]["peak_tflops"]
    nvlink = (f"NVLink {gpu['nvlinks']} x {gpu['nvlink_gbps_per_link']:g} = {gpu['nvlink_gbps']:g} GB/s"
              if gpu["nvlinks"] else "no NVLink")
    lines = [f"{facts['name']}  {facts['description']}",
             f"    {facts['gpus_per_node']} x {gpu['model']} per node ({gpu['arch']}, sm_{gpu['sm_version']}): "
             f"{gpu['sms']} SMs, HBM {gpu['hbm_gbps']:,g} GB/s, dense TFLOPS FP32 {peak['float32']:g} / "
             f"TF32 {peak['tf32']:g} / BF16 {peak['bfloat16']:g} / FP8 {peak['fp8']:g}, {nvlink}, "
             f"${gpu['price_per_gpu_hour']:.2f}/GPU-hour",
             f"    NICs {facts['nics']}, fabric {facts['fabric_kind']}"]
    lines += [f"    source: {source}" for source in facts["sources"]]
    return "\n".join(lines)


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
        + (f" ({facts['socket_link_gbps']:g} GB/s between sockets)" if facts["socket_link_gbps"] else "")
        + ("; ACS: peer-to-peer through the CPU" if facts["pcie_acs"] else ""),
        f"  host CPU   {facts['host_cpu']} (single thread {facts['host_cpu_single_thread']:g} × the H200 host's, "
        "which paces the framework's host time)",
        f"  NICs       {facts['nics_per_node']} per node"
        + (f" at {'/'.join(f'{r:g}' for r in rates)} Gb/s" if rates else ""),
        f"  NIC kind   {_kind_line(facts['fabric_kind'])}",
        f"  tuner      {tuner_line(facts['nccl_tuner'])}",
        f"  GPU→NIC    {affinity}",
        "  fabric     " + (f"{fabric['leaves']} leaves, {fabric['spines']} spines, "
                           f"{fabric['link_gbps']:g} Gb/s links" if fabric else "none"),
        f"  graph      {facts['graph']['nodes']} nodes, {facts['graph']['edges']} edges",
    ]
    return "\n".join(lines)
