"""The graph vocabulary (node and edge kinds) and the checks every cluster graph passes.

A node of a DGX A100 is ``n0/gpu3`` (kind ``gpu``, host 0, local 3, model
``A100-SXM4-40GB``) with a 12-link ``nvlink`` edge to ``n0/nvswitch`` and a ``pcie`` edge
to ``n0/pcie1``; its NIC ``n0/nic3`` has a ``net`` edge to ``leaf3``.  ``validate_graph``
raises ``TopologyError`` naming the first element that breaks a rule.
"""

from __future__ import annotations

from collections import Counter

import networkx as nx

from twin.hardware import DEFAULT_FABRIC_KIND, FABRIC_KINDS, TUNER_PLUGINS, TopologyError, gpu_spec

GPU, NVSWITCH, PCIE_SWITCH, CPU, NIC, SWITCH = "gpu", "nvswitch", "pcie_switch", "cpu", "nic", "switch"
NODE_KINDS = (GPU, NVSWITCH, PCIE_SWITCH, CPU, NIC, SWITCH)
NVLINK, PCIE, CPU_LINK, NET = "nvlink", "pcie", "cpu", "net"
EDGE_KINDS = (NVLINK, PCIE, CPU_LINK, NET)


def kind_of(graph: nx.Graph, node: str) -> str:
    return graph.nodes[node]["kind"]


def validate_graph(graph: nx.Graph) -> str:
    """Check a cluster graph and return its canonical GPU model.

    Messages name the element; the caller prefixes the cluster or file.
    """
    for node, data in graph.nodes(data=True):
        _check_node(node, data)
    for a, b, data in graph.edges(data=True):
        _check_edge(a, b, data)
    gpus = sorted((n for n in graph if kind_of(graph, n) == GPU),
                  key=lambda n: (graph.nodes[n]["host"], graph.nodes[n]["local"]))
    if not gpus:
        raise TopologyError("the cluster has no GPUs")
    model = _check_models(graph, gpus)
    _check_counts(graph, gpus, model)
    _check_attachments(graph, gpus)
    _check_connected(graph, gpus)
    _check_one_fabric(graph)
    return model


def _check_node(node: str, data: dict) -> None:
    kind = data.get("kind")
    if kind not in NODE_KINDS:
        raise TopologyError(f"node {node} has kind {kind!r} (expected one of {', '.join(NODE_KINDS)})")
    if kind != SWITCH and not _is_int(data.get("host")):
        raise TopologyError(f"{kind} {node} has no integer 'host' attribute")
    if kind in (GPU, NIC) and not _is_int(data.get("local")):
        raise TopologyError(f"{kind} {node} has no integer 'local' attribute")
    if kind == GPU and not isinstance(data.get("model"), str):
        raise TopologyError(f"GPU {node} has no 'model' attribute")
    if kind == NIC and not _positive(data.get("gbps")):
        raise TopologyError(f"NIC {node}: line rate must be a positive number of Gb/s, "
                            f"got {data.get('gbps')!r}")
    if kind == NIC and data.get("fabric", DEFAULT_FABRIC_KIND) not in FABRIC_KINDS:
        raise TopologyError(f"NIC {node}: unknown fabric kind {data['fabric']!r} "
                            f"(known: {', '.join(FABRIC_KINDS)})")
    if kind == NIC and data.get("tuner", TUNER_PLUGINS[0]) not in TUNER_PLUGINS:
        raise TopologyError(f"NIC {node}: unknown tuner plugin {data['tuner']!r} (known: {', '.join(TUNER_PLUGINS)})")
    if kind == NIC and not isinstance(data.get("tuner_config", ""), str):
        raise TopologyError(f"NIC {node}: tuner_config must be a table's name or a file, got {data['tuner_config']!r}")


def _check_edge(a: str, b: str, data: dict) -> None:
    name = f"edge {a}–{b}"
    kind = data.get("kind")
    if kind not in EDGE_KINDS:
        raise TopologyError(f"{name} has kind {kind!r} (expected one of {', '.join(EDGE_KINDS)})")
    bw = data.get("bw")
    if not _is_number(bw):
        raise TopologyError(f"{name}: bandwidth must be a number of GB/s, got {bw!r}")
    if bw < 0:
        raise TopologyError(f"{name}: negative bandwidth {bw}")
    if bw == 0:
        raise TopologyError(f"{name}: zero bandwidth")
    lat = data.get("lat_us")
    if not _is_number(lat) or lat < 0:
        raise TopologyError(f"{name}: negative latency {lat}" if _is_number(lat)
                            else f"{name}: latency must be a number of µs, got {lat!r}")
    nlinks = data.get("nlinks")
    if not _is_int(nlinks) or nlinks < 1:
        raise TopologyError(f"{name}: nlinks must be a positive integer, got {nlinks!r}")


def _check_models(graph: nx.Graph, gpus: list[str]) -> str:
    models = {}
    for gpu in gpus:
        try:
            models[gpu] = gpu_spec(graph.nodes[gpu]["model"]).model
        except TopologyError as err:
            raise TopologyError(f"GPU {gpu}: {err}") from None
    first = gpus[0]
    for gpu in gpus:
        if models[gpu] != models[first]:
            raise TopologyError(f"mixed GPU models: {first} is {models[first]} but {gpu} is {models[gpu]} "
                                "(a cluster has one GPU model)")
    return models[first]


def _check_counts(graph: nx.Graph, gpus: list[str], model: str) -> None:
    per_host = Counter(graph.nodes[g]["host"] for g in gpus)
    first_host, first_count = next(iter(per_host.items()))
    for host, count in per_host.items():
        if count != first_count:
            raise TopologyError(f"host {host} has {count} GPUs but host {first_host} has {first_count}")
    limit = gpu_spec(model).nvlinks
    for gpu in gpus:
        used = sum(d["nlinks"] for _, _, d in graph.edges(gpu, data=True) if d["kind"] == NVLINK)
        if used > limit:
            raise TopologyError(f"GPU {gpu} has {used} NVLinks but {model} has {limit}")


def _check_attachments(graph: nx.Graph, gpus: list[str]) -> None:
    multi_node = len({graph.nodes[g]["host"] for g in gpus}) > 1
    for node in graph:
        kind = kind_of(graph, node)
        if kind not in (GPU, NIC):
            continue
        parents = {kind_of(graph, n) for n in graph[node] if graph.edges[node, n]["kind"] == PCIE}
        if not parents & {PCIE_SWITCH, CPU}:
            label = "GPU" if kind == GPU else "NIC"
            raise TopologyError(f"{label} {node} is attached to no PCIe switch or CPU")
        if kind == NIC and multi_node and not any(kind_of(graph, n) == SWITCH for n in graph[node]):
            raise TopologyError(f"NIC {node} is attached to no switch")


def _check_connected(graph: nx.Graph, gpus: list[str]) -> None:
    # GPUs are endpoints, not routers: hide GPU–GPU links before asking for connectivity.
    view = nx.subgraph_view(graph, filter_edge=lambda a, b: not (
        kind_of(graph, a) == GPU and kind_of(graph, b) == GPU))
    reachable = nx.node_connected_component(view, gpus[0])
    for gpu in gpus[1:]:
        if gpu not in reachable:
            raise TopologyError(f"GPU {gpu} has no path to {gpus[0]}")


def _check_one_fabric(graph: nx.Graph) -> None:
    kinds = {d.get("fabric", DEFAULT_FABRIC_KIND): n for n, d in graph.nodes(data=True) if d["kind"] == NIC}
    if len(kinds) > 1:
        (a, na), (b, nb) = sorted(kinds.items())[:2]
        raise TopologyError(f"mixed fabric kinds: NIC {na} is {a} but NIC {nb} is {b} (a cluster has one fabric)")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _positive(value: object) -> bool:
    return _is_number(value) and value > 0
