"""From a cluster description to :class:`NcclCommInfo`, the way NCCL's init gets there.

Per host NCCL keeps the communicator's GPUs (and the NICs when it spans hosts), runs the
ring search, the tree search with the ring's channel count, and the NVLS search; ranks
then agree on the minimum channels and bandwidths and the maximum path types.  At connect
time every search channel becomes two execution channels (more on Hopper multi-node rings
faster than 45 GB/s with fewer than 16), capped at 64.

What the emulation gives on the presets (NCCL 2.28, defaults), and what logs say:

=====================  ==================  ==========  ======================================
system                 search channels     comm chan.  public log
=====================  ==================  ==========  ======================================
DGX A100, 8 GPUs       12 × 20 GB/s        24          24: NVIDIA/nccl-tests#100 ("Channel 23/24")
H800 (8 NVLinks)       8 × 20 GB/s         16          16: NVIDIA/nccl#892 ("16 coll channels")
DGX H100, 8 GPUs       12 × 30 GB/s        24          none found; NVLS 8 heads, 16 NVLS channels
3 × DGX H100           8 × 48 GB/s         16          16: NVIDIA/nccl#1453 ("Channel 00/16")
2 × DGX A100           8 × 24 GB/s         16          none found (NIC PCIe Gen4 bound)
2 × p5 (aws-ofi-nccl)  8 × 48 GB/s         16          none found (the plugin's 8 devices of 4 rails)
1 GPU per node (A100)  1 × 24 GB/s         2           none found
2 L40S, one switch     2 × 12 GB/s         4           none found
=====================  ==================  ==========  ======================================

sjeaugey in NVIDIA/nccl#1041: "Execution channels are typically 2x the search channels,
but for NVLSTree, NVLS, or CollnetDirect, they are completely decorrelated."
"""

from __future__ import annotations

import copy
from collections import defaultdict

from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.hardware import gpu_spec
from twin.nccl_model.constants import MAXCHANNELS
from twin.nccl_model.gib_tuner import tuner_for_path
from twin.nccl_model.graph_search import BALANCED_TREE, NVLS, RING, TREE, Graph, compute
from twin.nccl_model.inputs import NcclCommInfo, PathType
from twin.nccl_model.releases import facts
from twin.nccl_model.system import NodeSystem, nvlink_bw
from twin.topology import Cluster

_KIND = {"gpu": "gpu", "nvswitch": "nvs", "pcie_switch": "pci", "cpu": "cpu", "nic": "nic"}
_SEARCHES: dict = {}  # host signature -> (system, ring, tree, nvls graphs); searches are slow in Python
_CACHE_SIZE = 64


def comm_info(cluster: Cluster, ranks: list[str], *, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION,
              nvls_enable: bool = True, collnet: bool = False) -> NcclCommInfo:
    """Emulate NCCL's init on ``ranks`` (GPU node names of ``cluster.graph``, in rank order)."""
    graph = cluster.graph
    if not ranks:
        raise ValueError("a communicator needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks list a GPU twice: {ranks}")
    hosts: dict[object, list[str]] = defaultdict(list)
    for name in ranks:
        if name not in graph or graph.nodes[name].get("kind") != "gpu":
            raise ValueError(f"rank {name!r} is not a GPU of the cluster")
        hosts[graph.nodes[name]["host"]].append(name)
    sm = min(gpu_spec(graph.nodes[g]["model"]).sm_version for g in ranks)
    vendor = _cpu_vendor(graph)
    inter = len(hosts) > 1
    release = facts(nccl_version)
    max_channels = release.max_channels  # MAXCHANNELS: 32 before 2.25, 64 after
    # Between nodes, the NCCL settings the fabric's required vendor profile fixes (TCPX/TCPXO: Simple only).
    env = cluster.fabric.env if inter else {}
    nvls_enable = nvls_enable and env.get("NCCL_NVLS_ENABLE") != "0"
    per_host = []
    signatures: dict[tuple, tuple] = {}  # hosts of one shape (``Cluster.host_shape``) with the same GPUs look alike
    for host, gpus in hosts.items():
        system, ring, tree, nvls = _host_searches(cluster, host, gpus, inter, sm, vendor, release, signatures)
        per_host.append((system, ring, tree, nvls if nvls_enable else None))
    ring = _agree([r for _, r, _, _ in per_host])
    tree = _agree([t for _, _, t, _ in per_host])
    nvls_graphs = [v for *_, v in per_host]
    nvls = _agree(nvls_graphs) if all(v is not None for v in nvls_graphs) else None

    nnodes, nranks = len(hosts), len(ranks)
    search_channels = min(ring.nchannels, tree.nchannels)
    nchannels = min(max_channels, 2 * search_channels)
    if sm >= 90 and nnodes > 1 and ring.bw_intra > 45.0 and nchannels < 16:
        nchannels *= 2  # "4 compute channels per search channel" on Hopper multi-node
    nvls_heads = nvls.nchannels if nvls is not None else 0
    return NcclCommInfo(
        nranks=nranks, nnodes=nnodes, sm_version=sm,
        intra_nvlink=ring.type_intra == PathType.NVL,
        bw_intra=ring.bw_intra, bw_inter=ring.bw_inter, nchannels=nchannels,
        tree_bw_intra=tree.bw_intra, tree_bw_inter=tree.bw_inter,
        nvls_support=nvls_heads > 0 and "nvls" in release.algorithms,  # NVLS from 2.17.1
        nvls_channels=_nvls_channels(sm, nnodes) if nvls_heads else 0,
        collnet_support=collnet, cpu_vendor=vendor, nccl_version=nccl_version,
        graph_channels=search_channels, intra_path=ring.type_intra, inter_path=ring.type_inter,
        tree_pattern_split=tree.pattern == TREE, same_channels=ring.same_channels,
        nvls_graph_channels=nvls_heads,
        nvls_bw_intra=nvls.bw_intra if nvls else None, nvls_bw_inter=nvls.bw_inter if nvls else None,
        nvswitch=any(s.nvs is not None for s, *_ in per_host),
        p2p_channels_per_peer=_p2p_per_peer([s for s, *_ in per_host], nranks, nnodes, nchannels, sm,
                                            release.net_peer_channels, release.sm80_nvlink_bw),
        algo_env=env.get("NCCL_ALGO"), proto_env=env.get("NCCL_PROTO"),
        buffsize=int(env.get("NCCL_BUFFSIZE", 4 << 20)),
        tuner_config=_tuner_config(cluster, env),
        latency_inter=cluster.fabric.reported_latency_us if inter else 0.0,
        tuner=cluster.nccl_tuner[0], instance=cluster.nccl_tuner[1],
    )


def _tuner_config(cluster: Cluster, env: dict[str, str]) -> str | None:
    """The description's gIB tuner config where it names NCCL's tuner (``Cluster.nccl_tuner_config``;
    ``""``: none), else the one the kind's profile sets between nodes (``env``: empty on one node)."""
    named = cluster.nccl_tuner_config
    if named is not None:
        return named or None
    return tuner_for_path(env["NCCL_TUNER_CONFIG_PATH"]) if "NCCL_TUNER_CONFIG_PATH" in env else None


def ring_orders(cluster: Cluster, ranks: list[str], *,
                nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION) -> list[list[str]]:
    """The GPUs of each ring channel NCCL's search finds for a one-host communicator of ``ranks``,
    in ring order (each search channel once; NCCL runs each twice).

    >>> from twin.topology import load_cluster
    >>> pairs = load_cluster("a40-nvlink-pairs", nodes=1)
    >>> [[g.split("/")[1][3:] for g in ring] for ring in ring_orders(pairs, pairs.gpus()[:4])]
    [['0', '1', '2', '3'], ['0', '1', '2', '3'], ['0', '3', '2', '1'], ['0', '3', '2', '1']]
    """
    return _searched_orders(cluster, ranks, nccl_version, 1)


def tree_orders(cluster: Cluster, ranks: list[str], *,
                nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION) -> list[list[str]]:
    """The GPUs of each tree channel NCCL's search finds for a one-host communicator of ``ranks``,
    in chain order from the root: ``ncclTopoPreset`` makes each search channel's ``intra`` a chain,
    ``tree.up`` the GPU before and ``tree.down[0]`` the one after (``src/graph/connect.cc``), and
    runs each twice.  A tree pattern's search takes only the forward hops' bandwidth
    (``ncclTopoFollowPath``, ``src/graph/search.cc``), so where the first chain has taken one way
    of a PCIe path the next goes the other way: two bridged pairs on two switches chain 0-1-2-3,
    then 2-3-0-1.

    >>> from twin.topology import load_cluster
    >>> nvl = load_cluster("h100-nvl", nodes=1)
    >>> [[g.split("/")[1][3:] for g in chain] for chain in tree_orders(nvl, nvl.gpus()[:4])]
    [['0', '1', '2', '3'], ['2', '3', '0', '1']]
    """
    return _searched_orders(cluster, ranks, nccl_version, 2)


def _searched_orders(cluster: Cluster, ranks: list[str], nccl_version: tuple[int, int, int],
                     which: int) -> list[list[str]]:
    """The channels of the ring (``which`` 1) or tree (2) graph of ``_host_searches``, as GPU names."""
    graph = cluster.graph
    hosts = {graph.nodes[g]["host"] for g in ranks}
    if len(hosts) != 1:
        raise ValueError(f"searched orders are for one host; the ranks are on {len(hosts)}")
    sm = min(gpu_spec(graph.nodes[g]["model"]).sm_version for g in ranks)
    searched = _host_searches(cluster, hosts.pop(), list(ranks), False, sm, _cpu_vendor(graph),
                              facts(nccl_version), {})[which]
    by_index = sorted(ranks, key=lambda g: graph.nodes[g].get("local", 0))  # the search's GPU indices
    return [[by_index[i] for i in channel] for channel in searched.intra]


def _host_searches(cluster: Cluster, host, gpus: list[str], inter: bool, sm: int, vendor: str, release,
                   signatures: dict) -> tuple:
    """(system, ring, tree, nvls graphs) of one host's GPUs, searched once for hosts alike
    (``signatures`` keeps, per call, the signatures of hosts already seen)."""
    graph = cluster.graph
    shape = cluster.host_shape(host)
    alike = (shape, tuple(sorted(g.split("/", 1)[-1] for g in gpus))) if shape is not None else (host,)
    if alike not in signatures:
        signatures[alike] = _host_signature(graph, host, gpus)
    max_channels = release.max_channels  # MAXCHANNELS: 32 before 2.25, 64 after
    striped = inter and cluster.fabric.striped_rails
    key = (signatures[alike], inter, striped, sm, vendor, max_channels, release.search_speeds,
           release.sm80_nvlink_bw, release.pxn)
    if key not in _SEARCHES:  # identical hosts (and repeated calls) search alike
        if len(_SEARCHES) >= _CACHE_SIZE:
            _SEARCHES.pop(next(iter(_SEARCHES)))
        devices = {rails[0]: len(rails) for rails in map(cluster.rails, cluster.nics(host))} if striped else None
        system = build_system(graph, host, gpus, inter, sm, vendor, release.sm80_nvlink_bw, devices, release.pxn)
        lists = release.search_speeds
        ring = compute(system, RING, 1, max_channels // 2, lists)
        tree = compute(system, BALANCED_TREE, ring.nchannels, ring.nchannels, lists)
        nvls = compute(system, NVLS, 1, max_channels, lists) if len(gpus) > 1 else None
        _SEARCHES[key] = (system, ring, tree, nvls)
    return _SEARCHES[key]


def build_system(graph, host, gpus: list[str], inter: bool, sm: int, vendor: str,
                 sm80_nvlink_bw: float | None = None, devices: dict[str, int] | None = None,
                 pxn: bool = False) -> NodeSystem:
    """NCCL's view of ``host``: the communicator's GPUs there, switches, CPUs, NICs if ``inter``
    (A100 NVLinks at the release's ``sm80_nvlink_bw`` when given).  ``devices``: where the net
    plugin merges rails (``Cluster.rails``), each device's first NIC with its rails; NCCL sees that
    NIC alone, at the rails' summed speed (aws-ofi-nccl's ``getProperties``), and no other rail.
    ``pxn``: paths to a NIC through its nearest GPU (``ReleaseFacts.pxn``)."""
    system = NodeSystem(sm, vendor, pxn)
    keep = set(gpus)
    order = sorted(gpus, key=lambda g: graph.nodes[g].get("local", 0))
    for i, name in enumerate(order):
        system.add(name, "gpu", index=i)
    nvl = nvlink_bw(sm, sm80_nvlink_bw)
    for a, b, data in graph.edges(data=True):
        na, nb = graph.nodes[a], graph.nodes[b]
        if na.get("host") != host or nb.get("host") != host:
            continue
        ka, kb = _KIND.get(na.get("kind")), _KIND.get(nb.get("kind"))
        if ka is None or kb is None or (ka == "gpu" and a not in keep) or (kb == "gpu" and b not in keep):
            continue
        nic = a if ka == "nic" else b
        if "nic" in (ka, kb) and (not inter or (devices is not None and nic not in devices)):
            continue
        node_a = system.add("nvs" if ka == "nvs" else a, ka)
        node_b = system.add("nvs" if kb == "nvs" else b, kb)
        kind = data.get("kind")
        if kind == "nvlink":
            if node_a is not node_b:
                system.connect(node_a, node_b, "nvl", data.get("nlinks", 1) * nvl)
        elif kind == "pcie":
            system.connect(node_a, node_b, "pci", float(data["bw"]))
        elif kind == "cpu":
            system.connect(node_a, node_b, "sys", float(data["bw"]))
    if inter:
        nics = sorted((n for n in system.of_kind("nic")), key=lambda n: graph.nodes[n.name].get("local", 0))
        for i, nic in enumerate(nics):
            rate = graph.nodes[nic.name]["gbps"] / 8.0 * (devices[nic.name] if devices is not None else 1)
            net = system.add(f"{nic.name}/net", "net", index=i, net_bw=rate)
            system.connect(nic, net, "net", rate)
    system.compute_paths()
    return system


def _agree(graphs: list[Graph]) -> Graph:
    """Ranks align on the minimum channels and bandwidths, maximum path types."""
    out = copy.copy(graphs[0])
    for g in graphs[1:]:
        out.nchannels = min(out.nchannels, g.nchannels)
        out.bw_intra, out.bw_inter = min(out.bw_intra, g.bw_intra), min(out.bw_inter, g.bw_inter)
        out.type_intra, out.type_inter = max(out.type_intra, g.type_intra), max(out.type_inter, g.type_inter)
        out.same_channels = out.same_channels and g.same_channels
        if g.pattern == TREE:
            out.pattern = TREE
    return out


def _host_signature(graph, host, gpus: list[str]) -> tuple:
    """What the search sees of a host, with node names replaced by their rank within the host."""
    names = sorted(_host_nodes(graph, host, gpus),
                   key=lambda n: (graph.nodes[n]["kind"], graph.nodes[n].get("local", -1), n))
    index = {n: i for i, n in enumerate(names)}
    nodes = tuple((graph.nodes[n]["kind"], graph.nodes[n].get("gbps"), graph.nodes[n].get("model"),
                   n in gpus) for n in names)
    edges = tuple(sorted((*sorted((index[a], index[b])), d.get("kind"), d.get("bw"), d.get("nlinks"))
                         for a, b, d in graph.edges(names, data=True) if a in index and b in index))
    return nodes, edges


def _host_nodes(graph, host, gpus: list[str]) -> set[str]:
    """The nodes of ``host`` linked to its ``gpus`` through nodes of the host: what the search can
    reach there, found by walking the host's part of the graph only (not every node of the cluster)."""
    seen, todo = set(gpus), list(gpus)
    while todo:
        for n in graph[todo.pop()]:
            if n not in seen and graph.nodes[n].get("host") == host:
                seen.add(n)
                todo.append(n)
    return seen


def _nvls_channels(sm: int, nnodes: int) -> int:
    if sm >= 100:
        return 32 if nnodes > 1 else 24
    return 16


def _p2p_per_peer(systems: list[NodeSystem], nranks: int, nnodes: int, nchannels: int, sm: int,
                  net_peer: int = 2, sm80_nvlink_bw: float | None = None) -> int:
    """``ncclTopoComputeP2pChannels``: the fewest channels any peer gets, as a power of two."""
    p2p_channels = min(nchannels, MAXCHANNELS)
    fewest = p2p_channels
    nvl = nvlink_bw(sm, sm80_nvlink_bw)
    for system in systems:
        for a in system.gpus:
            for b in system.gpus:
                if a is b:
                    continue
                path = system.path(b, a)
                per_peer = 2 * max(1, int(path.bw / nvl)) if path and path.type == PathType.NVL else 2
                fewest = min(fewest, per_peer)
    if nnodes > 1:
        net = net_peer  # NCCL_NCHANNELS_PER_NET_PEER (2; 1 before 2.12.7)
        while net * nranks > p2p_channels * 4 and net > 1:
            net //= 2
        fewest = min(fewest, net)
    pow2 = 1 << max(p2p_channels - 1, 0).bit_length()
    return min(1 << max(fewest - 1, 0).bit_length(), pow2)


def _cpu_vendor(graph) -> str:
    for _, data in graph.nodes(data=True):
        if data.get("kind") == "cpu":
            vendor = str(data.get("vendor", "intel")).lower()
            return vendor if vendor in ("intel", "amd", "arm", "power") else "intel"
    return "intel"
