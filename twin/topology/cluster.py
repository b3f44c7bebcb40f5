"""A cluster: its graph, its GPUs in rank order, and the paths NCCL's transports take.

On two DGX H100 nodes, ``route("n0/gpu3", "n1/gpu3")`` is GPU → PCIe switch → NIC →
leaf → NIC → PCIe switch → GPU (GPUDirect RDMA over NIC 3, 400 Gb/s = 50 GB/s on the
wire), and ``route("n0/gpu0", "n0/gpu5")`` is GPU → NVSwitch → GPU at 450 GB/s per hop.
Every edge is full duplex with ``bw`` GB/s each way; a ``Hop`` is one directed use of
an edge.  The graph is read-only once it is wrapped in a ``Cluster`` (paths are cached).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import pairwise

import networkx as nx

from tuner.identity import cluster_identity
from twin.hardware import DEFAULT_FABRIC_KIND, FabricKind, GpuSpec, TopologyError, fabric_kind, gpu_spec
from twin.host_cpu import HostCpu, host_cpu
from twin.topology.graph import (
    CPU,
    CPU_LINK,
    GPU,
    NET,
    NIC,
    NVLINK,
    NVSWITCH,
    PCIE,
    PCIE_SWITCH,
    SWITCH,
    kind_of,
    validate_graph,
)

MAX_CHANNELS = 64
"""NCCL's ``MAXCHANNELS``: how many channels ``channel_nics`` asks each GPU about."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One directed traversal of an edge: ``bw`` GB/s and ``lat_us`` µs of its link."""

    src: str
    dst: str
    kind: str
    bw: float
    lat_us: float
    share: float = 1.0
    """The part of its flow's payload the hop carries: ``1/n`` on each of the ``n`` rails a
    striping net plugin spreads a channel's messages over (``Cluster.striped_route``)."""
    memory_bw: float | None = None
    """A socket link's GB/s for DMA to the far socket's memory (``NodeSpec.socket_memory_bw``),
    where ``bw`` is NCCL's inter-CPU figure; None on every other link."""


class Cluster:
    """GPU servers and their fabric as one ``networkx.Graph``, validated on construction.

    Node ids are ``n{host}/gpu{i}``, ``n{host}/nvswitch``, ``n{host}/pcie{j}``,
    ``n{host}/cpu{s}``, ``n{host}/nic{k}`` and ``leaf{l}`` / ``spine{s}``;
    docs/topology-format.md lists the attributes.

    Examples
    --------
    Eight A40s bridged in pairs: NVLink inside a pair, PCIe between pairs.

    >>> from twin.topology import load_cluster
    >>> a40 = load_cluster("a40-nvlink-pairs")
    >>> a40.nvlink_peers("n0/gpu0"), [h.kind for h in a40.route("n0/gpu0", "n0/gpu2")]
    (['n0/gpu1'], ['pcie', 'pcie'])
    >>> a40.nic_of("n0/gpu5"), a40.subset(nodes=1, gpus_per_node=4).gpus()
    ('n0/nic1', ['n0/gpu0', 'n0/gpu1', 'n0/gpu2', 'n0/gpu3'])
    """

    def __init__(self, name: str, graph: nx.Graph, *, description: str = "") -> None:
        self.name = name
        self.graph = graph
        self.description = description
        self.validate()

    def validate(self) -> None:
        """Check the graph (again, after editing it) and forget cached NICs and routes.

        Raises ``TopologyError`` naming the cluster and the first element that is wrong.
        """
        try:
            self.gpu_model = validate_graph(self.graph)
        except TopologyError as err:
            raise TopologyError(f"cluster {self.name!r}: {err}") from None
        by_kind: dict[str, list[str]] = {}
        by_host: dict[tuple[str, int], list[str]] = {}
        for node, data in self.graph.nodes(data=True):
            by_kind.setdefault(data["kind"], []).append(node)
            if data["kind"] in (GPU, NIC):
                by_host.setdefault((data["kind"], data["host"]), []).append(node)
        self._by_kind = {kind: sorted(nodes, key=self._rank_key if kind in (GPU, NIC) else None)
                         for kind, nodes in by_kind.items()}
        self._by_host = {key: sorted(nodes, key=self._rank_key) for key, nodes in by_host.items()}
        self._gpus = self._by_kind[GPU]
        self._gpu_host = {gpu: self.graph.nodes[gpu]["host"] for gpu in self._gpus}
        self._switch_links = {n: {m for m in self.graph[n] if kind_of(self.graph, m) == SWITCH
                                  and self.graph.edges[n, m]["kind"] == NET}
                              for n in self._by_kind.get(SWITCH, [])}
        self._nic_of: dict[str, str] = {}
        self._routes: dict[tuple[str, str, str], list[Hop]] = {}
        self._hop_of: dict[tuple[str, str], Hop] = {}
        self._switch_routes: dict[tuple[frozenset, frozenset], list[list[str]]] = {}  # by the NICs' switches
        self._pcie: dict[tuple, list[str]] = {}  # by (src, dst), or by (host shape, local names)
        self._local: dict[str, list[str]] = {}
        self._rails: dict[str, list[str]] = {}
        self._host_parts: dict[int, list[str]] | None = None
        self._shapes: dict[str, int] = {}
        self._shape_of: dict[int, int | None] = {}
        self._nets: dict[tuple[int, tuple[str, ...]], list[str]] = {}

    def __repr__(self) -> str:
        return (f"Cluster({self.name!r}: {self.nodes} × {self.gpus_per_node} {self.gpu_model}, "
                f"{self.nics_per_node} NICs per node)")

    # -- shape -------------------------------------------------------------------------

    @property
    def label(self) -> str:
        """What reports show a reader: ``"dgx-h100 (4 node(s) x 8 H100-SXM5-80GB)"``."""
        return f"{self.name} ({self.nodes} node(s) x {self.gpus_per_node} {self.gpu.model})"

    @property
    def identity(self) -> str:
        """What plans, measurements and the store call the cluster: ``"dgx-h100:8x4"``
        (``tuner.identity``)."""
        return cluster_identity(self.name, nodes=self.nodes, gpus_per_node=self.gpus_per_node)

    @property
    def nodes(self) -> int:
        return len({self.graph.nodes[g]["host"] for g in self._gpus})

    @property
    def gpus_per_node(self) -> int:
        return len(self._gpus) // self.nodes

    @property
    def nics_per_node(self) -> int:
        return len(self.nics(host=self.host_of(self._gpus[0])))

    @property
    def gpu(self) -> GpuSpec:
        return gpu_spec(self.gpu_model)

    @property
    def fabric(self) -> FabricKind:
        """What the NICs speak (``twin.hardware.FABRIC_KINDS``; InfiniBand when not described)."""
        nics = self._by_kind.get(NIC, [])
        return fabric_kind(self.graph.nodes[nics[0]].get("fabric", DEFAULT_FABRIC_KIND) if nics
                           else DEFAULT_FABRIC_KIND)

    @property
    def nccl_tuner(self) -> tuple[str, str | None]:
        """The tuner plugin NCCL runs with (``twin.hardware.TUNER_PLUGINS``) and the instance type
        it reads: the fabric's ``tuner``/``instance``, else what the kind's net plugin brings."""
        nics = self._by_kind.get(NIC, [])
        data = self.graph.nodes[nics[0]] if nics else {}
        return data.get("tuner", self.fabric.tuner_plugin), data.get("instance")

    @property
    def nccl_tuner_config(self) -> str | None:
        """The gIB tuner config NCCL's tuner reads on every communicator where the description names
        the tuner (``tuner_config``: a bundled table's name or a file, ``""``: none); None where it
        names none, so the kind's profile sets one between nodes (``FabricKind.nccl_env``)."""
        nics = self._by_kind.get(NIC, [])
        return self.graph.nodes[nics[0]].get("tuner_config") if nics else None

    @property
    def cpu_vendor(self) -> str:
        """The CPU vendor of the first socket (``unknown`` when not described)."""
        cpus = self._by_kind.get(CPU, [])
        return self.graph.nodes[cpus[0]].get("vendor", "unknown") if cpus else "unknown"

    @property
    def host_cpu(self) -> HostCpu:
        """The host CPU model of the first socket (``twin.host_cpu``; the reference when not
        described), whose single-thread speed paces the framework's host thread."""
        cpus = self._by_kind.get(CPU, [])
        return host_cpu(self.graph.nodes[cpus[0]].get("model", "unknown") if cpus else "unknown")

    def gpus(self) -> list[str]:
        """All GPUs in global rank order: node-major, local index minor."""
        return list(self._gpus)

    def nics(self, host: int | None = None) -> list[str]:
        """NICs of one host (or all), by host then local index."""
        return list(self._by_kind.get(NIC, []) if host is None else self._by_host.get((NIC, host), []))

    def host_of(self, gpu: str) -> int:
        host = self._gpu_host.get(gpu)
        return self.graph.nodes[self._check_gpu(gpu)]["host"] if host is None else host

    def cpu_of(self, gpu: str) -> str:
        """The socket whose root complex the GPU hangs off (fewest PCIe hops)."""
        self._check_gpu(gpu)
        paths = self._pcie_paths(gpu)
        cpus = [n for n in paths if kind_of(self.graph, n) == CPU]
        if not cpus:
            raise TopologyError(f"cluster {self.name!r}: GPU {gpu} reaches no CPU over PCIe")
        return min(cpus, key=lambda c: (len(paths[c]), c))

    def has_nvswitch(self) -> bool:
        return bool(self._by_kind.get(NVSWITCH))

    def nvlink_peers(self, gpu: str) -> list[str]:
        """GPUs reachable over NVLink, directly or through an NVSwitch."""
        peers = set()
        for nbr in self._nvlink_neighbours(self._check_gpu(gpu)):
            if kind_of(self.graph, nbr) == GPU:
                peers.add(nbr)
            elif kind_of(self.graph, nbr) == NVSWITCH:
                peers.update(p for p in self._nvlink_neighbours(nbr) if kind_of(self.graph, p) == GPU)
        peers.discard(gpu)
        return sorted(peers, key=self._rank_key)

    def nvlink_bw(self, gpu: str) -> float:
        """All NVLink bandwidth out of a GPU, GB/s per direction (450 on an H100 SXM5)."""
        edges = self.graph.edges(self._check_gpu(gpu), data=True)
        return sum((d["bw"] for _, _, d in edges if d["kind"] == NVLINK), 0.0)

    # -- NIC choice and routes -----------------------------------------------------------

    def nic_of(self, gpu: str) -> str:
        """The NIC NCCL would use for this GPU.

        Nearest over PCIe: first a NIC reachable without crossing a CPU (same PCIe switch
        tree), then one behind the same CPU, then any; ties go to the NIC serving the
        fewest GPUs so far (GPUs in local order), then the lowest NIC index.
        """
        host = self.host_of(gpu)
        if gpu not in self._nic_of:
            self._assign_nics(host)
        return self._nic_of[gpu]

    def route(self, src_gpu: str, dst_gpu: str) -> list[Hop]:
        """The path of NCCL's P2P (same host) or NET (GPUDirect RDMA) transport.

        Same host: the direct NVLink edge if there is one, else through the NVSwitch, else
        the PCIe tree (GPU → switch → [CPU → CPU] → switch → GPU).  Different hosts: GPU →
        its NIC → leaf [→ spine → leaf] → NIC → GPU, with ``nic_of`` on each side.  A switch
        that redirects peer-to-peer requests (``acs_redirects``) sends either through its CPU.
        """
        return self._cached("p2p", src_gpu, dst_gpu)

    def nic_route(self, src_gpu: str, dst_gpu: str, nic_src: str, nic_dst: str) -> list[Hop]:
        """GPU → ``nic_src`` of its host → fabric → ``nic_dst`` of the peer's host → GPU.

        The path of a ring or tree edge between nodes, on the NICs its channel uses there
        (``channel_nics``).
        """
        key = ("nics", f"{src_gpu}>{nic_src}", f"{nic_dst}>{dst_gpu}")
        if key not in self._routes:
            self._routes[key] = self._hops(self._to_nic(src_gpu, nic_src) + self._fabric_path(nic_src, nic_dst)[1:]
                                           + self._from_nic(nic_dst, dst_gpu)[1:])
        return list(self._routes[key])

    def striped_route(self, src_gpu: str, dst_gpu: str, nic_src: str, nic_dst: str) -> list[Hop]:
        """``nic_route`` over every rail of the two NICs' devices (``rails``), rail ``i`` to rail
        ``i``, each hop carrying its rail's share of the payload (``Hop.share``); one rail's route
        where the devices are single NICs."""
        pairs = list(zip(self.rails(nic_src), self.rails(nic_dst), strict=False))
        if len(pairs) == 1:
            return self.nic_route(src_gpu, dst_gpu, nic_src, nic_dst)
        return [replace(h, share=h.share / len(pairs))
                for a, b in pairs for h in self.nic_route(src_gpu, dst_gpu, a, b)]

    def _to_nic(self, gpu: str, nic: str) -> list[str]:
        """The bytes' way from ``gpu`` to ``nic``: straight over PCIe (or PXN) when the fabric's NIC
        moves GPU memory, else staged in the memory of the GPU's CPU (NCCL's Socket transport),
        crossing that CPU's root complex; through the root complex too where a switch redirects
        the NIC's peer-to-peer requests (``acs_redirects``)."""
        return self._staged_path(gpu, nic) if self._through_cpu(gpu, nic) else self._send_path(gpu, nic)

    def _from_nic(self, nic: str, gpu: str) -> list[str]:
        """From ``nic`` to ``gpu``: over PCIe, or through the GPU's CPU (``_to_nic``)."""
        return self._staged_path(gpu, nic)[::-1] if self._through_cpu(gpu, nic) else self._pcie_path(nic, gpu)

    def _through_cpu(self, gpu: str, nic: str) -> bool:
        """Whether the bytes between ``gpu`` and ``nic`` pass the GPU's CPU, though no CPU lies
        between them in the PCIe tree: host-staged fabric kinds, or switches that redirect."""
        return not self.fabric.gpudirect or self.acs_redirects(gpu, nic)

    def _staged_path(self, gpu: str, nic: str) -> list[str]:
        cpu = self.cpu_of(gpu)
        return self._pcie_path(gpu, cpu) + self._pcie_path(cpu, nic)[1:]

    def acs_redirects(self, a: str, b: str) -> bool:
        """Whether two devices of one host that the PCIe tree joins below their CPU (one switch
        apart, as NCCL reads it from sysfs: PIX or PXB) exchange bytes through the root complex
        instead: the switch where their path turns redirects peer-to-peer requests upstream
        (``pcie.acs``: PCI Access Control Services on its downstream ports; NCCL's user guide,
        Troubleshooting, "PCI Access Control Services (ACS)": IO virtualization "can interfere with
        GPU Direct by redirecting all PCI point-to-point traffic to the CPU root complex").  NCCL
        does not see it: GPUDirect RDMA stays on.

        >>> from twin.topology import load_cluster
        >>> abci = load_cluster("abci-a")
        >>> abci.acs_redirects("n0/gpu0", "n0/nic0"), load_cluster("dgx-a100").acs_redirects("n0/gpu0", "n0/nic0")
        (True, False)
        >>> [h.dst for h in abci.route("n0/gpu0", "n0/gpu1")][:1]  # NVLink: no PCIe involved
        ['n0/nvswitch']
        """
        path = self._pcie_path(a, b)
        nodes = self.graph.nodes
        if any(kind_of(self.graph, n) == CPU for n in path):
            return False
        return any(nodes[n].get("acs", False) for n in path[1:-1])

    def _send_path(self, gpu: str, nic: str) -> list[str]:
        """From ``gpu`` to ``nic``: over PCIe, or when that crosses a CPU, over NVLink to the GPU
        beside the NIC and on from there (NCCL's PXN, on by default since 2.12: the proxy of the
        GPU nearest the NIC sends for its NVLink peers)."""
        path = self._pcie_path(gpu, nic)
        if not any(kind_of(self.graph, n) == CPU for n in path[1:-1]):
            return path
        beside = min((g for g in self.nvlink_peers(gpu)
                      if not any(kind_of(self.graph, n) == CPU for n in self._pcie_path(g, nic)[1:-1])),
                     key=lambda g: (self.pcie_distance(g, nic), self._rank_key(g)), default=None)
        return path if beside is None else self._p2p_path(gpu, beside) + self._pcie_path(beside, nic)[1:]

    def pcie_distance(self, gpu: str, nic: str) -> int:
        """PCIe hops from a GPU to a NIC of its host (NCCL prefers the nearest)."""
        return len(self._pcie_path(gpu, nic)) - 1

    def switched_to(self, gpu: str, nic: str) -> bool:
        """Whether ``gpu`` reaches ``nic`` of its host through PCIe switches alone, no CPU's root
        complex on the way (NCCL's PIX or PXB path)."""
        return not any(kind_of(self.graph, n) == CPU for n in self._pcie_path(gpu, nic))

    def local_nics(self, gpu: str) -> list[str]:
        """The NICs NCCL counts as local to ``gpu`` (``ncclTopoGetLocal`` from a GPU to the
        network): the widest path first, then the nearest kind of path (one PCIe switch, several,
        a CPU's root complex, across CPUs); in NIC order."""
        if gpu not in self._local:
            self._local[gpu] = self._nearest(self._check_gpu(gpu), self.nics(self.host_of(gpu)))
        return list(self._local[gpu])

    def rails(self, nic: str) -> list[str]:
        """The NICs the net plugin presents to NCCL as one device with ``nic``, in NIC order:
        ``nic`` alone unless the fabric stripes over rails (``FabricKind.striped_rails``), where
        the NICs nearest a GPU are split evenly over the GPUs nearest them (aws-ofi-nccl's
        grouping by GPU locality, ``nccl_ofi_topo.cpp``).

        >>> from twin.topology import load_cluster
        >>> p5 = load_cluster("aws-p5", nodes=1)
        >>> [n.split("/")[1] for n in p5.rails("n0/nic5")]
        ['nic4', 'nic5', 'nic6', 'nic7']
        """
        if not self.fabric.striped_rails:
            return [nic]
        if nic not in self._rails:
            gpus = self._nearest(nic, self._by_host[GPU, self.graph.nodes[nic]["host"]])
            near = self.local_nics(gpus[0])
            size = -(-len(near) // len(gpus))
            for i in range(0, len(near), size):
                for n in near[i:i + size]:
                    self._rails[n] = near[i:i + size]
            self._rails.setdefault(nic, [nic])
        return list(self._rails[nic])

    def channel_nic(self, gpu: str, channel: int, gpus: list[str]) -> str:
        """The NIC channel ``channel`` of ``gpu`` prefers, when ``gpus`` (its host's GPUs of the
        communicator) share the host (NCCL's ``ncclTopoGetLocalNet``).

        GPUs that share local NICs start on different ones (the GPU's device index modulo the
        GPUs local to those NICs, bit-mirrored when the NICs are a power of two) and, when there
        are more local NICs than GPUs, successive channels take the next ones.
        """
        nics, net, per_gpu = self._net_start(gpu, gpus)
        return nics[(net + channel % per_gpu) % len(nics)]

    def _net_start(self, gpu: str, gpus: list[str]) -> tuple[list[str], int, int]:
        """``channel_nic``'s choice: (the GPU's local NICs, the entry channel 0 takes, channels per NIC)."""
        nics = self.local_nics(gpu)
        local_gpus = self._nearest(nics[0], gpus)
        per_gpu = -(-len(nics) // max(len(local_gpus), 1))
        net = self.graph.nodes[gpu]["local"] % max(len(local_gpus), 1)
        if len(nics) & (len(nics) - 1) == 0:
            net = _mirror_bits(net, len(nics))
        return nics, net, per_gpu

    def channel_nics(self, gpus: list[str]) -> list[str]:
        """The NICs the channels of a communicator use on one host, channel ``c`` on entry
        ``c % len``: each of ``gpus`` (the communicator's GPUs there), in local order, adds the
        NICs its channels prefer (``channel_nic``) that are not listed yet — NCCL's
        ``ncclTopoSelectNets``, whose list the channel search walks from entry ``c``.

        On a DGX H100 a communicator of GPU 5 alone (one GPU per node, as data-parallel groups
        are) uses NIC 5 only; all eight GPUs use NICs 0-7, one per channel in turn.  Hosts built
        alike (``host_shape``) answer alike: the choice is worked out once per shape and GPU set.
        """
        host = self.host_of(gpus[0])
        shape = self.host_shape(host)
        if shape is None:
            return self._select_nets(gpus)
        cut = len(f"n{host}/")
        key = (shape, tuple(sorted(g[cut:] for g in gpus)))
        if key not in self._nets:
            self._nets[key] = [nic[cut:] for nic in self._select_nets(gpus)]
        return [f"n{host}/{nic}" for nic in self._nets[key]]

    def _select_nets(self, gpus: list[str]) -> list[str]:
        out: list[str] = []
        for gpu in sorted(gpus, key=self._rank_key):
            nics, net, per_gpu = self._net_start(gpu, gpus)
            for channel in range(min(per_gpu, MAX_CHANNELS)):
                nic = nics[(net + channel) % len(nics)]
                if nic not in out:
                    out.append(nic)
        return out

    def host_shape(self, host: int) -> int | None:
        """An id shared by hosts whose parts are the same under renaming ``n{host}/x`` to
        ``n{other}/x`` (same nodes, attributes and links inside the host); None when the host's
        nodes are not named so.  The hosts of a preset share one.

        >>> from twin.topology import load_cluster
        >>> c = load_cluster("dgx-h100", nodes=3)
        >>> c.host_shape(0) == c.host_shape(2) != None
        True
        """
        if host not in self._shape_of:
            if self._host_parts is None:
                self._host_parts = {}
                for node, data in self.graph.nodes(data=True):
                    if "host" in data:
                        self._host_parts.setdefault(data["host"], []).append(node)
            prefix = f"n{host}/"
            nodes = self._host_parts.get(host, [])
            if not all(n.startswith(prefix) for n in nodes):
                self._shape_of[host] = None
            else:
                cut, inside = len(prefix), set(nodes)
                parts = sorted((n[cut:], repr(sorted((k, v) for k, v in self.graph.nodes[n].items() if k != "host")))
                               for n in nodes)
                links = [(n[cut:], [(m[cut:], repr(sorted(d.items()))) for m, d in self.graph[n].items()
                                    if m in inside]) for n in sorted(nodes)]  # in the order searches visit them
                self._shape_of[host] = self._shapes.setdefault(repr(parts + links), len(self._shapes))
        return self._shape_of[host]

    def shm_route(self, src_gpu: str, dst_gpu: str) -> list[Hop]:
        """Same host, staged through host memory: GPU → PCIe → the source GPU's CPU → PCIe → GPU."""
        return self._cached("shm", src_gpu, dst_gpu)

    def loopback_route(self, src_gpu: str, dst_gpu: str) -> list[Hop]:
        """Same host through the NICs (``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``)."""
        return self._cached("net", src_gpu, dst_gpu)

    def subset(self, nodes: int | None = None, gpus_per_node: int | None = None) -> Cluster:
        """The first ``nodes`` hosts with the first ``gpus_per_node`` GPUs of each (validated).

        NICs, switches and the fabric serving the kept hosts stay.
        """
        n = self.nodes if nodes is None else nodes
        g = self.gpus_per_node if gpus_per_node is None else gpus_per_node
        if not 1 <= n <= self.nodes:
            raise TopologyError(f"cluster {self.name!r}: cannot take {n} nodes of {self.nodes}")
        if not 1 <= g <= self.gpus_per_node:
            raise TopologyError(f"cluster {self.name!r}: cannot take {g} GPUs per node "
                                f"of {self.gpus_per_node}")
        keep = [v for v, d in self.graph.nodes(data=True)
                if d.get("host", 0) < n and not (d["kind"] == GPU and d["local"] >= g)]
        graph = self.graph.subgraph(keep).copy()
        _prune_fabric(graph)
        return Cluster(self.name, graph, description=self.description)

    # -- internals -----------------------------------------------------------------------

    def _cached(self, transport: str, src: str, dst: str) -> list[Hop]:
        key = (transport, src, dst)
        if key not in self._routes:
            self._routes[key] = self._hops(self._path(transport, src, dst))
        return list(self._routes[key])

    def _path(self, transport: str, src: str, dst: str) -> list[str]:
        same_host = self.host_of(src) == self.host_of(dst)
        if src == dst:
            return [src]
        if transport == "p2p":
            return self._p2p_path(src, dst) if same_host else self._net_path(src, dst)
        if not same_host:
            raise TopologyError(f"cluster {self.name!r}: {transport} transport joins GPUs of one host, "
                                f"but {src} and {dst} are on different hosts")
        if transport == "shm":
            cpu = self.cpu_of(src)
            return self._pcie_path(src, cpu) + self._pcie_path(cpu, dst)[1:]
        return self._net_path(src, dst)

    def _p2p_path(self, src: str, dst: str) -> list[str]:
        if self.graph.has_edge(src, dst) and self.graph.edges[src, dst]["kind"] == NVLINK:
            return [src, dst]
        switches = [n for n in self._nvlink_neighbours(src)
                    if kind_of(self.graph, n) == NVSWITCH and dst in self._nvlink_neighbours(n)]
        if switches:
            return [src, min(switches), dst]
        if self.acs_redirects(src, dst):
            cpu = self.cpu_of(src)
            return self._pcie_path(src, cpu) + self._pcie_path(cpu, dst)[1:]
        return self._pcie_path(src, dst)

    def _net_path(self, src: str, dst: str) -> list[str]:
        nic_src, nic_dst = self.nic_of(src), self.nic_of(dst)
        return ((self._staged_path(src, nic_src) if self._through_cpu(src, nic_src) else self._pcie_path(src, nic_src))
                + self._fabric_path(nic_src, nic_dst)[1:] + self._from_nic(nic_dst, dst)[1:])

    def _pcie_paths(self, src: str, targets: Iterable[str] = (),
                    stop: str | None = None) -> dict[str, list[str]]:
        """Fewest-hop paths from ``src`` through PCIe switches and CPUs to them and to ``targets``."""
        return _bfs(self.graph, src, (PCIE, CPU_LINK), (PCIE_SWITCH, CPU), set(targets), stop)

    def _pcie_path(self, src: str, dst: str) -> list[str]:
        """The fewest-hop PCIe path inside a host, found once per host shape (``host_shape``)."""
        host = self.graph.nodes[src].get("host")
        shape = None if host is None else self.host_shape(host)
        prefix = f"n{host}/"
        if shape is not None and dst.startswith(prefix) and src.startswith(prefix):
            cut = len(prefix)
            key = (shape, src[cut:], dst[cut:])
            if key not in self._pcie:
                self._pcie[key] = [n[cut:] for n in self._find_pcie_path(src, dst)]
            return [prefix + n for n in self._pcie[key]]
        return self._find_pcie_path(src, dst)

    def _find_pcie_path(self, src: str, dst: str) -> list[str]:
        key = (src, dst)
        if key not in self._pcie:
            paths = self._pcie_paths(src, (dst,), stop=dst)
            if dst not in paths:
                raise TopologyError(f"cluster {self.name!r}: no PCIe path from {src} to {dst}")
            self._pcie[key] = paths[dst]
        return self._pcie[key]

    def _nearest(self, src: str, candidates: list[str]) -> list[str]:
        """Those of ``candidates`` NCCL counts as local to ``src``: widest PCIe path, then nearest kind."""
        ranks = {c: self._path_rank(src, c) for c in candidates if c != src}
        if not ranks:
            raise TopologyError(f"cluster {self.name!r}: {src} reaches none of {candidates} over PCIe")
        best = min(ranks.values())
        return [c for c in candidates if ranks.get(c) == best]

    def _path_rank(self, a: str, b: str) -> tuple[float, int]:
        """(minus the path's bandwidth, its kind: 0 one PCIe switch, 1 several, 2 a CPU, 3 across CPUs)."""
        try:
            path = self._pcie_path(a, b)
        except TopologyError:
            return (0.0, 4)
        edges = self.graph.edges
        bw = min((edges[u, v]["bw"] for u, v in pairwise(path)), default=0.0)
        for end in (a, b):
            if kind_of(self.graph, end) == NIC:
                bw = min(bw, self.graph.nodes[end]["gbps"] / 8)
        cpus = sum(kind_of(self.graph, n) == CPU for n in path)
        switches = sum(kind_of(self.graph, n) == PCIE_SWITCH for n in path)
        return (-bw, 3 if cpus > 1 else 2 if cpus else 1 if switches > 1 else 0)

    def _fabric_path(self, src_nic: str, dst_nic: str) -> list[str]:
        if src_nic == dst_nic:
            return [src_nic]  # the NIC loops the data back
        graph = self.graph

        def up(nic: str) -> set[str]:
            return {s for s in graph[nic] if s in self._switch_links and graph.edges[nic, s]["kind"] == NET}

        first, last = frozenset(up(src_nic)), frozenset(up(dst_nic))
        if (first, last) not in self._switch_routes:  # NICs under the same switches share them
            self._switch_routes[first, last] = _switch_paths(first, last, self._switch_links)
        paths = [[src_nic, *p, dst_nic] for p in self._switch_routes[first, last]]
        if not paths:
            raise TopologyError(f"cluster {self.name!r}: no network path from {src_nic} "
                                f"to {dst_nic}")
        # Equal-cost paths (one per spine): pick one by a stable hash of the endpoints.
        return paths[zlib.crc32(f"{src_nic}>{dst_nic}".encode()) % len(paths)]

    def _assign_nics(self, host: int) -> None:
        nics = self.nics(host)
        served = dict.fromkeys(nics, 0)
        for gpu in self._by_host[GPU, host]:
            paths = self._pcie_paths(gpu, nics)
            distance = {nic: (sum(kind_of(self.graph, n) == CPU for n in paths[nic]), len(paths[nic]))
                        for nic in nics if nic in paths}
            if not distance:
                raise TopologyError(f"cluster {self.name!r}: GPU {gpu} reaches no NIC on host {host}")
            nearest = min(distance.values())
            nic = min((n for n in distance if distance[n] == nearest),
                      key=lambda n: (served[n], self.graph.nodes[n]["local"]))
            served[nic] += 1
            self._nic_of[gpu] = nic

    def _hops(self, path: list[str]) -> list[Hop]:
        """The hops of ``path``, one ``Hop`` per directed edge for every route that crosses it."""
        hops = []
        for a, b in pairwise(path):
            hop = self._hop_of.get((a, b))
            if hop is None:
                data = self.graph.edges[a, b]
                hop = self._hop_of[a, b] = Hop(a, b, data["kind"], data["bw"], data["lat_us"],
                                                memory_bw=data.get("memory_bw"))
            hops.append(hop)
        return hops

    def _nvlink_neighbours(self, node: str) -> Iterable[str]:
        return [n for n in self.graph[node] if self.graph.edges[node, n]["kind"] == NVLINK]

    def _rank_key(self, node: str) -> tuple[int, int]:
        data = self.graph.nodes[node]
        return data["host"], data["local"]

    def _check_gpu(self, gpu: str) -> str:
        if gpu not in self.graph or kind_of(self.graph, gpu) != GPU:
            raise TopologyError(f"cluster {self.name!r} has no GPU {gpu!r}")
        return gpu


def _mirror_bits(value: int, pow2: int) -> int:
    """``value``'s low ``log2(pow2)`` bits in reverse order (NCCL's ``mirrorBits``)."""
    out, bit, mirrored = 0, 1, pow2 >> 1
    while bit < pow2:
        if value & bit:
            out |= mirrored
        bit, mirrored = bit << 1, mirrored >> 1
    return out


def _bfs(graph: nx.Graph, src: str, edge_kinds: tuple[str, ...], transit: tuple[str, ...],
         targets: set[str], stop: str | None = None) -> dict[str, list[str]]:
    """Breadth-first paths from ``src`` along ``edge_kinds``, passing only through ``transit`` kinds.

    ``targets`` may end a path without being of a transit kind (GPUs and NICs are endpoints,
    never relays).  Neighbours are visited in insertion order, so paths are deterministic.
    """
    paths = {src: [src]}
    queue = deque([src])
    while queue:
        node = queue.popleft()
        if node == stop:
            break
        if node != src and graph.nodes[node]["kind"] not in transit:
            continue
        for nbr, data in graph[node].items():
            if nbr not in paths and data["kind"] in edge_kinds and (
                    nbr in targets or graph.nodes[nbr]["kind"] in transit):
                paths[nbr] = [*paths[node], nbr]
                queue.append(nbr)
    return paths


def _switch_paths(first: set[str], last: set[str], links: dict[str, set[str]]) -> list[list[str]]:
    """Every fewest-hop switch path from a switch of ``first`` to one of ``last``, sorted.

    Level by level from ``first``; the level that reaches ``last`` is not built in full, only
    its goal switches (a fat-tree's last level holds every leaf).
    """
    parents: dict[str, list[str]] = {s: [] for s in first}
    level = sorted(first)
    goals = [s for s in level if s in last]
    while level and not goals:
        goals = sorted(g for g in last if any(g in links[s] for s in level))
        if goals:
            for g in goals:
                parents[g] = [s for s in level if g in links[s]]
            break
        following: dict[str, list[str]] = {}
        for s in level:
            for t in sorted(links[s]):
                if t not in parents:
                    following.setdefault(t, []).append(s)
        parents.update(following)
        level = sorted(following)

    def back(node: str) -> list[list[str]]:
        return [[node]] if not parents[node] else [[*p, node] for up in parents[node] for p in back(up)]

    return sorted(p for g in goals for p in back(g))


def _prune_fabric(graph: nx.Graph) -> None:
    """Drop leaves that serve no NIC, then spines that reach no leaf."""
    for tier, below in (("leaf", NIC), ("spine", SWITCH)):
        idle = [n for n, d in graph.nodes(data=True) if d["kind"] == SWITCH and d.get("tier") == tier
                and not any(kind_of(graph, m) == below for m in graph[n])]
        graph.remove_nodes_from(idle)
