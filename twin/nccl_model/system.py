"""One node of a cluster as NCCL's topology code sees it (``ncclTopoSystem``).

NCCL builds, per process, a graph of the GPUs of its communicator on that host, one merged
NVSwitch node, PCIe switches, CPUs and (when the communicator spans hosts) network
devices, with its own link bandwidths: ``nlinks × SMxx_NVLINK_BW`` for NVLink (A100 20,
H100 20.6, A40 12, B200 40.1 GB/s per link), ``width × rate / 80`` for PCIe (Gen4 x16 =
24), the inter-socket constants, and line rate / 8 for a NIC.  Paths between GPUs and
NICs are NCCL's breadth-first paths (fewest hops, then widest) with NCCL's path types
(NVL, NVB, PIX, PXB, PHB, SYS).  Cluster ``pcie`` and ``cpu`` edge bandwidths are taken
as already in NCCL's units (``twin.hardware.pcie_gbps`` / ``socket_link_gbps``).

Not modelled: C2C, GPU Direct RDMA limits,
Power/Volta reverse-bandwidth accounting, NIC port merging.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.nccl_model.inputs import PathType

NVLINK_BW = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 89: 12.0, 90: 20.6, 100: 40.1}
LOC_BW = 5000.0
_LINK_TYPE = {"nvl": PathType.NVL, "pci": PathType.PIX, "sys": PathType.SYS, "net": PathType.LOC}


def nvlink_bw(sm_version: int, sm80_bw: float | None = None) -> float:
    """NCCL's per-link NVLink GB/s (``ncclTopoNVLinkBw``); ``sm80_bw``: a release's own A100 figure
    (``ReleaseFacts.sm80_nvlink_bw``: 21 in 2.8, 22 in 2.10 – 2.17, 20 since 2.18)."""
    if sm_version == 80 and sm80_bw is not None:
        return sm80_bw
    if sm_version >= 100:
        return NVLINK_BW[100]
    if sm_version >= 90:
        return NVLINK_BW[90]
    if sm_version in (86, 87, 89):
        return NVLINK_BW[86]
    return NVLINK_BW[80] if sm_version >= 70 else NVLINK_BW[60]


@dataclass(eq=False)
class Node:
    name: str
    kind: str  # gpu | nvs | pci | cpu | nic | net
    index: int = 0
    """Position among the nodes of its kind (GPUs: by local index on the host)."""
    net_bw: float = 0.0
    """NET nodes: remaining NIC capacity during a search (``net.bw``)."""
    links: list[Link] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(eq=False)
class Link:
    kind: str  # nvl | pci | sys | net
    bw: float
    src: Node
    dst: Node


@dataclass
class Path:
    links: list[Link]
    bw: float
    type: PathType


class NodeSystem:
    """The NCCL view of one host: nodes, directed links and precomputed paths."""

    def __init__(self, sm_version: int, cpu_vendor: str, pxn: bool = False) -> None:
        self.sm_version = sm_version
        self.cpu_vendor = cpu_vendor
        self.pxn = pxn
        """Paths through an NVLink peer to its NIC (``ReleaseFacts.pxn``)."""
        self.nodes: dict[str, Node] = {}
        self.paths: dict[tuple[Node, Node], Path] = {}

    def of_kind(self, kind: str) -> list[Node]:
        return sorted((n for n in self.nodes.values() if n.kind == kind), key=lambda n: n.index)

    @property
    def gpus(self) -> list[Node]:
        return self.of_kind("gpu")

    @property
    def nets(self) -> list[Node]:
        return self.of_kind("net")

    @property
    def nvs(self) -> Node | None:
        found = self.of_kind("nvs")
        return found[0] if found else None

    @property
    def inter(self) -> bool:
        return bool(self.nets)

    def add(self, name: str, kind: str, **attrs) -> Node:
        if name not in self.nodes:
            index = sum(1 for n in self.nodes.values() if n.kind == kind)
            self.nodes[name] = Node(name, kind, attrs.pop("index", index), **attrs)
        return self.nodes[name]

    def connect(self, a: Node, b: Node, kind: str, bw: float) -> None:
        """Add ``bw`` both ways (NCCL sums parallel links, e.g. several NVSwitches)."""
        for src, dst in ((a, b), (b, a)):
            link = next((lk for lk in src.links if lk.dst is dst and lk.kind == kind), None)
            if link is None:
                src.links.append(Link(kind, bw, src, dst))
            else:
                link.bw += bw

    def path(self, src: Node, dst: Node) -> Path | None:
        return self.paths.get((src, dst))

    def compute_paths(self) -> None:
        """``ncclTopoComputePaths``: BFS paths to every GPU, NET and CPU, then P2P detours."""
        self.paths.clear()
        for target in (*self.of_kind("cpu"), *self.gpus, *self.nets, *self.of_kind("nvs")):
            self._bfs_to(target)
        p2p_level = PathType.PXB
        if self.cpu_vendor == "amd" and len(self.gpus) <= 2:
            p2p_level = PathType.SYS
        for dst in self.gpus:
            cpu = self.local_cpu(dst)
            for src in self.gpus:
                path = self.paths.get((src, dst))
                if src is dst or path is None or path.type <= p2p_level or cpu is None:
                    continue
                a, b = self.paths.get((src, cpu)), self.paths.get((cpu, dst))
                if a and b:  # no GPU Direct P2P: go through the CPU's memory
                    self.paths[src, dst] = Path(a.links + b.links, min(a.bw, b.bw), max(a.type, b.type))
        if self.pxn:
            self._pxn_paths()

    def _pxn_paths(self) -> None:
        """PXN (``ncclTopoComputePaths``, ``src/graph/paths.cc``, NCCL ≥ 2.12): a GPU sends to a NIC
        through the NIC's nearest GPU when that GPU reaches the NIC within a PCIe switch (PXB) and
        this one over NVLink, and the relay is faster or avoids the CPU (GPU → NIC only)."""
        for net in self.nets:
            locals_, _ = self.local(net, "gpu")
            peer = locals_[0] if locals_ else None
            out = self.paths.get((peer, net)) if peer is not None else None
            if out is None or out.type > PathType.PXB:
                continue
            for gpu in self.gpus:
                own, hop = self.paths.get((gpu, net)), self.paths.get((gpu, peer))
                if gpu is peer or own is None or hop is None or hop.type > PathType.NVL:
                    continue
                if out.bw > own.bw or own.type > PathType.PXN:
                    self.paths[gpu, net] = Path(hop.links + out.links, min(hop.bw, out.bw), PathType.PXN)

    def local_cpu(self, gpu: Node) -> Node | None:
        cpus = [(p.type, -p.bw, c.index, c) for c in self.of_kind("cpu") if (p := self.paths.get((gpu, c)))]
        return min(cpus, key=lambda t: t[:3])[3] if cpus else None

    def local(self, src: Node, kind: str) -> tuple[list[Node], PathType]:
        """``ncclTopoGetLocal``: nodes of ``kind`` with the best path type, then bandwidth."""
        best: list[Node] = []
        best_key = (PathType.DIS, 0.0)
        for node in self.of_kind(kind):
            p = self.paths.get((src, node))
            if p is None or node is src:
                continue
            if p.type < best_key[0] or (p.type == best_key[0] and p.bw > best_key[1]):
                best, best_key = [node], (p.type, p.bw)
            elif (p.type, p.bw) == best_key:
                best.append(node)
        return best, best_key[0]

    def _bfs_to(self, base: Node) -> None:
        self.paths[base, base] = Path([], LOC_BW, PathType.LOC)
        frontier = [base]
        while frontier:
            nxt: list[Node] = []
            for node in frontier:
                path = self.paths[node, base]
                for link in node.links:
                    rem = link.dst
                    # a GPU relays only as the middle of a 2-hop NVLink GPU-GPU-GPU path
                    if node is not base and node.kind == "gpu" and (
                            link.kind != "nvl" or rem.kind != "gpu" or len(path.links) > 1):
                        continue
                    bw = min(path.bw, link.bw)
                    old = self.paths.get((rem, base))
                    if old is not None and (len(old.links) <= len(path.links) or old.bw >= bw):
                        continue
                    back = next(lk for lk in rem.links if lk.dst is node and lk.kind == link.kind)
                    kind = _LINK_TYPE[link.kind]
                    if node.kind == "pci" and rem.kind == "pci":
                        kind = PathType.PXB
                    if link.kind == "pci" and "cpu" in (node.kind, rem.kind):
                        kind = PathType.PHB
                    nvl_relay = path.type == PathType.NVL and kind == PathType.NVL and path.links
                    if node.kind == "gpu" and nvl_relay:
                        kind = PathType.NVB
                    self.paths[rem, base] = Path([back, *path.links], bw, max(path.type, kind))
                    if rem not in nxt:
                        nxt.append(rem)
            frontier = nxt
