"""Where a communicator's bytes go: the rings and trees NCCL builds, and what each channel gets.

A ``CommGeometry`` places the ranks of a communicator on a cluster and answers, for a number
of channels and a protocol, the payload rate one channel gets on each pattern (ring, tree,
NVLS...) and the latency of one step.  Channels share links: the rate of a channel is the
smallest share it gets on any link it crosses, where a link's raw rate is divided by the
number of channel flows crossing it in that direction and scaled by the protocol's packet
efficiency on that kind of link.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from tuner.config import Proto, Transport
from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.model import dtree
from twin.model.netpath import (
    ll_scan_us,
    needs_flush,
    net_step_latency_us,
    proxy_post_us,
    proxy_posts_per_recv,
)
from twin.model.protocols import hop_latency_us, store_efficiency
from twin.model.repeat import coupled_fill_share
from twin.nccl_model.releases import facts as release_facts
from twin.nccl_model.search import comm_info, ring_orders, tree_orders
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.topology import Cluster, Hop, TopologyError


@dataclass(frozen=True)
class Flow:
    """One channel's stream of steps from one rank to another, over a route of hops."""

    src: str
    dst: str
    hops: tuple
    via_cpu: bool = False
    """Peer-to-peer traffic that a CPU root complex forwards: GPU to GPU with no PCIe switch
    between the ends, or a PCIe switch that redirects its peers' requests upstream (ACS) between
    two GPUs or, between nodes, a GPU and its NIC (GPUDirect RDMA on, bytes through the CPU)."""
    host_memory: bool = False
    """Inside a node, through host memory (NCCL's SHM transport, ``twin.model.shm``): the sender
    stores into its peer's buffer in host memory and the receiver loads it from there, so the
    root complex carries memory traffic, not forwarded peer requests (``via_cpu`` is False)."""
    gdr_send: bool = True
    """Between nodes: the sending NIC reads the GPU's memory directly (no CPU on the way)."""
    gdr_recv: bool = True
    """Between nodes: the receiving NIC writes the GPU's memory directly."""

    @cached_property
    def kind(self) -> str:
        """The link kind that sets the step's protocol cost: net > cpu > pcie > nvlink."""
        kinds = {h.kind for h in self.hops}
        for kind in ("net", "cpu", "pcie", "nvlink"):
            if kind in kinds:
                return kind
        return "local"

    def latency_us(self, proto: Proto, cpu_vendor: str = "intel", params: TwinParams = DEFAULT_PARAMS, *,
                   tree: bool = False) -> float:
        """One step: the protocol's synchronisation on this kind of link (``tree``: a tree's hop,
        ``hop_latency_us``); between nodes the proxy path (``netpath``) plus the fabric's
        switches and cables."""
        if self.kind != "net":
            return hop_latency_us(proto, self.kind, params, tree=tree)
        fabric = sum(h.lat_us * h.share for h in self.hops if h.kind == "net")  # one rail's, when striped
        return net_step_latency_us(proto, fabric_us=fabric, cpu_vendor=cpu_vendor, gdr_send=self.gdr_send,
                                   gdr_recv=self.gdr_recv, params=params)


@dataclass(frozen=True)
class LinkUse:
    """How a pattern loads one directed link: a channel flow at payload rate r uses
    ``r * raw_per_payload`` of the link's ``capacity`` (raw GB/s)."""

    link: tuple[str, str]
    raw_per_payload: float
    capacity: float


class LinkUses(Sequence):
    """``LinkUse``s built on first look: the fast path needs only a pattern's rate, the simulator
    its links (a data-parallel ring over thousands of nodes loads thousands of them).

    >>> uses = LinkUses(lambda: (LinkUse(("a", "b"), 1.0, 10.0),))
    >>> [u.capacity for u in uses], uses == (LinkUse(("a", "b"), 1.0, 10.0),)
    ([10.0], True)
    """

    __slots__ = ("_build", "_uses")

    def __init__(self, build: Callable[[], tuple[LinkUse, ...]]):
        self._build: Callable[[], tuple[LinkUse, ...]] | None = build
        self._uses: tuple[LinkUse, ...] | None = None

    @property
    def uses(self) -> tuple[LinkUse, ...]:
        if self._uses is None:
            self._uses = self._build()
            self._build = None
        return self._uses

    def __getitem__(self, index):
        return self.uses[index]

    def __len__(self) -> int:
        return len(self.uses)

    def __iter__(self):
        return iter(self.uses)

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, LinkUses | tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.uses)

    def __repr__(self) -> str:
        return f"LinkUses({self.uses!r})"


@dataclass(frozen=True)
class ChannelShare:
    """What one channel of a pattern gets: payload rate (GB/s), the latency of a step (µs), and
    the links all its channels load (for the simulator, which shares them between collectives)."""

    gbps: float
    step_us: float
    links: Sequence[LinkUse]
    proxy_us: float = 0.0
    """CPU time the busiest proxy thread is busy per step (one thread per GPU posts every network
    step, ``_Load.busiest_proxy_work_us``): however many chunks are in flight, steps follow each
    other no faster."""
    proxy_lag_us: float = 0.0
    """A ring's network hop beyond its sender's post: the NIC, the wire and the receiver's side of
    the slowest hop that crosses the network (its latency less one proxy action); 0 elsewhere."""
    scan_sends: int = 0
    """LL steps the busiest sending proxy thread checks line by line per step of every flow (its
    network sends, ``netpath.ll_scan_us``); 0 for LL128 and Simple, and on one node."""


@dataclass(frozen=True)
class _LinkClasses:
    """The links and proxy threads a sequence of distinct flow lists loads, grouped by how each
    list loads them: a load of ``copies[j]`` of each list puts the same profile on every link of a
    class (and the same actions on every proxy of a class), so the rates of every channel count
    come from the few classes, not from the thousands of links of a ring over hundreds of alike
    nodes.  Worked out once per sequence of lists (a pattern's loads of every channel count share
    it), in the order the lists' flows first use each link, as ``_Load.uses`` orders them.
    """

    lists: tuple
    """The flow lists (kept: loads find their classes by the lists' ids)."""
    kinds: list
    """The (link kind, DMA, through a CPU) of the uses, in first-use order."""
    links: frozenset
    """The distinct (profile, capacity) pairs, a profile's counts one per list."""
    proxies: frozenset
    """The distinct (sends, receives) network flows of the GPUs, one count per list."""

    @classmethod
    def of(cls, lists: tuple) -> _LinkClasses:
        """The classes of ``lists``."""
        uses = _merged_uses(lists)
        per_link = _profiles(uses)
        ends = [_net_ends([[f, 1] for f in flows]) for flows in lists]
        gpus = dict.fromkeys(g for sends, recvs in ends for g in (*sends, *recvs))
        proxies = frozenset((tuple(s.get(g, 0) for s, _ in ends), tuple(r.get(g, 0) for _, r in ends)) for g in gpus)
        kinds = list(dict.fromkeys((h.kind, dma, via_cpu) for h, dma, via_cpu in uses))
        return cls(lists, kinds, frozenset(per_link.values()), proxies)

    @staticmethod
    def count(profile: tuple, copies: tuple[int, ...]) -> tuple:
        """``profile`` (counts one per list) as a load of ``copies[j]`` of each list loads it."""
        return tuple((kind, sum(c * n for c, n in zip(copies, counts, strict=True))) for kind, counts in profile)

    def distinct(self, copies: tuple[int, ...]) -> set[tuple[tuple, float]]:
        """The distinct (profile, capacity) pairs of a load of ``copies[j]`` of each list."""
        return {(self.count(profile, copies), bw) for profile, bw in self.links}

    def busiest_proxy(self, copies: tuple[int, ...], per_recv: int) -> int:
        """The busiest proxy thread's actions per step when a received step costs ``per_recv``."""
        return max((sum(c * (s + r * per_recv) for c, s, r in zip(copies, sends, recvs, strict=True))
                    for sends, recvs in self.proxies), default=0)


def _merged_uses(lists: tuple) -> dict:
    """``uses[(hop, dma, via_cpu)]`` of ``lists``, the counts one per list: each list's uses,
    merged in list order (a list's new links come after those of the lists before it, as a
    load's first-use order has them)."""
    uses = [_hop_uses([[f, 1] for f in flows]) for flows in lists]
    return {key: tuple(u.get(key, 0) for u in uses) for key in dict.fromkeys(k for u in uses for k in u)}


def _hop_uses(flows: list[list]) -> dict:
    """``uses[(hop, dma, via_cpu)]`` of ``[flow, copies]`` pairs, in first-use order (the root
    complex forwards a redirected flow's PCIe hops only)."""
    uses: dict = {}
    for f, copies in flows:
        dma = f.kind == "net"
        for h in f.hops:
            key = h, dma, _forwarded(f, h)
            uses[key] = uses.get(key, 0) + copies * h.share
    return uses


def _forwarded(f: Flow, h: Hop) -> bool:
    """Whether the root complex forwards hop ``h`` of flow ``f``: a redirected flow's PCIe hops."""
    return f.via_cpu and h.kind != "net"


def _use_efficiency(proto: Proto, kind: tuple[str, bool, bool], params: TwinParams) -> float:
    """The payload share of a link's rate for a use of ``kind`` (link kind, a NIC's DMA, forwarded
    by a root complex) under ``proto``: NIC transfers are large RDMA writes whatever the protocol's
    store size, and the root complex forwards peer-to-peer traffic at its share."""
    return store_efficiency(proto, kind[0], dma=kind[1], params=params) * (
        params.link.root_complex_p2p_efficiency if kind[2] else 1.0)


def _use_bw(h: Hop, forwarded: bool) -> float:
    """The GB/s of hop ``h`` for a use forwarded by a root complex or not.  A socket link carries
    memory traffic (a NIC's or a GPU's DMA to the far socket's host memory: host-staged network
    bytes, SHM) at the interconnect's own rate (``Hop.memory_bw``: UPI or xGMI links × their rate);
    peer-to-peer requests forwarded across it keep NCCL's inter-CPU figure (``Hop.bw``).  A link
    that carries both is held to the lower (``_profiles``).

    >>> link = Hop("n0/cpu1", "n0/cpu0", "cpu", 40.0, 0.6, memory_bw=160.0)
    >>> _use_bw(link, forwarded=False), _use_bw(link, forwarded=True)
    (160.0, 40.0)
    """
    return h.bw if forwarded or h.memory_bw is None else h.memory_bw


def _counted(items) -> list[list]:
    """``[item, copies]`` for each distinct object of ``(item, copies)`` pairs, its copies summed,
    in first-seen order (objects are told apart by identity: shared lists and flows count once).

    >>> a, b = ["a"], ["a"]
    >>> _counted([(a, 1), (b, 2), (a, 3)])
    [[['a'], 4], [['a'], 2]]
    """
    out: dict[int, list] = {}
    for item, copies in items:
        entry = out.get(id(item))
        if entry is None:
            out[id(item)] = [item, copies]
        else:
            entry[1] += copies
    return list(out.values())


def _net_ends(flows: list[list]) -> tuple[dict[str, int], dict[str, int]]:
    """The network flows of ``[flow, copies]`` pairs each GPU sends and receives."""
    sends: dict[str, int] = {}
    recvs: dict[str, int] = {}
    for f, copies in flows:
        if f.kind == "net":
            sends[f.src] = sends.get(f.src, 0) + copies
            recvs[f.dst] = recvs.get(f.dst, 0) + copies
    return sends, recvs


@dataclass
class _Load:
    """What the flows of a pattern's first channels put on the links, whatever the protocol.

    A load keeps its flows (``parts``: each channel's flow list, the lists the geometry caches,
    with the copies of it), not a table of its links: a data-parallel ring over hundreds of nodes
    loads thousands of links, for every channel count asked.  ``uses`` counts, when asked, the
    channel flows crossing each directed link in one way (a NIC's DMA or stores, forwarded by a
    root complex or not).  What the rates need of it (the distinct link profiles, the busiest
    proxy thread's actions) comes from the ``_LinkClasses`` of the load's distinct flow lists,
    which the loads grown from one another (``plus``) share.
    """

    parts: tuple = ()
    _classes: dict = field(default_factory=dict, repr=False, compare=False)
    """``_LinkClasses`` by the ids of their lists, shared by the loads ``plus`` makes of this one."""
    _links: dict = field(default_factory=dict, repr=False, compare=False)
    """``links`` answers by the link efficiencies they were computed with (the last few): a
    calibration evaluates one load under many constants, most of which leave them alone."""
    _kinds: list | None = field(default=None, repr=False, compare=False)
    """The (link kind, DMA, through a CPU) of the uses, in first-use order, once asked."""
    _distinct: set | None = field(default=None, repr=False, compare=False)
    """The distinct (profile, capacity) pairs of the loaded links, once asked."""
    _proxy: dict = field(default_factory=dict, repr=False, compare=False)
    """The busiest proxy thread's actions per step, by the actions a received step costs."""

    def plus(self, flows: Sequence[Flow], copies: int = 1) -> _Load:
        """This load and ``copies`` more of ``flows`` (one channel's, or a point-to-point pattern's)."""
        return _Load((*self.parts, (flows, copies)), self._classes)

    def _lists(self) -> list[list]:
        """Each distinct flow list of the load with its copies, ``[flows, copies]`` in first-use order."""
        return _counted(self.parts)

    def flows(self) -> list[list]:
        """Each distinct flow of the load with its copies, ``[flow, copies]`` in first-use order
        (channels on the same NICs share their flow lists and flows: counted once each)."""
        return _counted((f, copies) for flows, copies in self._lists() for f in flows)

    @property
    def uses(self) -> dict:
        """``uses[(hop, dma, via_cpu)]``: the channel flows crossing each hop in each way, in
        first-use order (built each time asked)."""
        return _hop_uses(self.flows())

    def links(self, proto: Proto, params: TwinParams) -> tuple[LinkUses, float]:
        """Each loaded link with its raw bytes per payload byte of one channel flow under ``proto``
        (built when first looked at), and the payload rate of one channel flow on the busiest."""
        efficiency = {kind: _use_efficiency(proto, kind, params) for kind in self.kinds()}
        key = tuple(efficiency.items())
        if key not in self._links:
            def raw(profile: tuple) -> float:
                total = 0.0
                for kind, count in profile:
                    total = total + count / efficiency[kind]
                return total

            if len(self._links) >= _LINKS_KEPT:
                del self._links[next(iter(self._links))]
            links = LinkUses(lambda: self._link_uses(efficiency))
            # Links of one profile and capacity (every node's alike on a ring over alike hosts) share
            # one rate: the busiest is found over the distinct ones.
            self._links[key] = links, min((bw / raw(p) for p, bw in self.distinct()), default=math.inf)
        return self._links[key]

    def _link_uses(self, efficiency: dict[tuple[str, bool, bool], float]) -> tuple[LinkUse, ...]:
        """Each loaded link's use: its raw bytes per payload byte, the uses' counts over their
        ``efficiency`` summed in the uses' order (as ``links`` sums a profile), in first-use order."""
        raw: dict[tuple[str, str], float] = {}
        capacity: dict[tuple[str, str], float] = {}
        for (h, dma, via_cpu), count in self.uses.items():
            link = h.src, h.dst
            raw[link] = raw.get(link, 0.0) + count / efficiency[h.kind, dma, via_cpu]
            capacity[link] = min(capacity.get(link, math.inf), _use_bw(h, via_cpu))
        return tuple(LinkUse(link, r, capacity[link]) for link, r in raw.items())

    def distinct(self) -> set[tuple[tuple, float]]:
        """The distinct (profile, capacity) pairs of the loaded links, once asked."""
        if self._distinct is None:
            self._summarise()
        return self._distinct

    def kinds(self) -> list[tuple[str, bool, bool]]:
        """The (link kind, DMA, through a CPU) of the uses, in first-use order."""
        if self._kinds is None:
            self._summarise()
        return self._kinds

    def _summarise(self) -> None:
        """``distinct``, ``kinds`` and the busiest proxy's actions for every protocol (a load is
        asked for all of them), from the classes of the load's flow lists."""
        classes, copies = self._link_classes()
        self._kinds = classes.kinds
        self._distinct = classes.distinct(copies)
        per_recv = {0} | {proxy_posts_per_recv(proto, flush) for proto in Proto for flush in (False, True)}
        self._proxy = {n: classes.busiest_proxy(copies, n) for n in per_recv}

    def _link_classes(self) -> tuple[_LinkClasses, tuple[int, ...]]:
        """The classes of the load's distinct flow lists, and the copies of each."""
        lists = self._lists()
        key = tuple(id(flows) for flows, _ in lists)
        classes = self._classes.get(key)
        if classes is None:
            classes = self._classes[key] = _LinkClasses.of(tuple(flows for flows, _ in lists))
        return classes, tuple(n for _, n in lists)

    def busiest_proxy_work_us(self, proto: Proto, flush: bool, cpu_vendor: str, params: TwinParams) -> float:
        """CPU time the busiest proxy thread is busy per step of every flow: a request per step it
        sends and per step it receives, and a flush per Simple step it receives where the GPU needs
        one (``netpath.proxy_posts_per_recv``), each at a post's CPU time (``netpath.proxy_post_us``)."""
        return self._busiest_actions(proxy_posts_per_recv(proto, flush)) * proxy_post_us(cpu_vendor, params)

    def busiest_sends(self) -> int:
        """The network sends per step of the thread that sends the most (its receives cost nothing
        here: ``_busiest_actions(0)``)."""
        return self._busiest_actions(0)

    def _busiest_actions(self, per_recv: int) -> int:
        """The busiest thread's actions per step when each received step costs ``per_recv``."""
        if self._distinct is None:
            self._summarise()
        return self._proxy[per_recv]


def _profiles(uses: dict) -> dict[tuple[str, str], tuple[tuple, float]]:
    """Each directed link of ``uses`` with its profile, its ((link kind, DMA, through a CPU), count)
    in the order of the uses, and its capacity (GB/s)."""
    per_link: dict[tuple[str, str], list] = {}
    capacity: dict[tuple[str, str], float] = {}
    for (h, dma, via_cpu), count in uses.items():
        link = (h.src, h.dst)
        per_link.setdefault(link, []).append(((h.kind, dma, via_cpu), count))
        capacity[link] = min(capacity.get(link, math.inf), _use_bw(h, via_cpu))
    interned: dict[tuple, tuple] = {}
    return {link: (interned.setdefault(tuple(p), tuple(p)), capacity[link]) for link, p in per_link.items()}


_LINKS_KEPT = 8
"""Link-use tables a load keeps (one per set of link efficiencies)."""


LL_SCAN_WAIT_SHARE = 0.35
"""The share of a whole step's scan an LL step waits, after its last line lands, for the send
proxy's check (``CommGeometry.ll_scan``), measured on our H200 host: the mean over the nine runs of
64 KiB steps of lines written one CTA pass at a time at 2-8 GB/s on one channel
(``benchmarks/data/h200-ll-scan.txt``, "paced nch=1": 1.15-2.43 µs beyond a one-line step's round
trip, against 4.1 µs for the scan of a step already written).  A pass that rescans the step while
it fills ends at a point as likely as any other after the last line lands, which would give half
a pass; the rescans read lines already in the thread's cache, so a pass is shorter than a scan."""


class CommGeometry:
    """The ranks of one communicator on a cluster, with the transport NCCL uses inside nodes.

    ``params`` are the physical constants every share, latency and schedule of the communicator
    is computed with (its caches hold results for them only), as the cluster's fabric kind sees
    them (``TwinParams.on_fabric``); ``nccl_version`` the release whose kernels run.
    """

    def __init__(self, cluster: Cluster, ranks: list[str] | None = None, transport: Transport = Transport.P2P, *,
                 params: TwinParams = DEFAULT_PARAMS, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION):
        self.cluster = cluster
        self.nccl_version = nccl_version
        """The NCCL release whose kernels move the data (``schedule_for`` asks it how a ring
        kernel splits its last loop)."""
        self.ranks = list(ranks) if ranks is not None else cluster.gpus()
        self.transport = transport
        self.params = params.on_fabric(cluster.fabric.name)
        self._by_host: dict[int, list[str]] = {}
        for gpu in self.ranks:
            self._by_host.setdefault(cluster.host_of(gpu), []).append(gpu)
        sizes = {len(v) for v in self._by_host.values()}
        if len(sizes) != 1:
            raise TopologyError("ranks are spread unevenly over nodes: "
                                f"{sorted(len(v) for v in self._by_host.values())}")
        self._hosts = list(self._by_host.values())
        self._host_rank = {gpu: h for h, gpus in enumerate(self._hosts) for gpu in gpus}
        # A striping plugin's device is named by its first rail (``Cluster.rails``): NCCL's channels
        # take the devices in turn, each channel's flows spread over the device's rails.
        self._nics = ([list(dict.fromkeys(cluster.rails(n)[0] for n in cluster.channel_nics(gpus)))
                       for gpus in self._hosts] if len(self._hosts) > 1 else None)
        self._flow = lru_cache(maxsize=None)(self._flow_uncached)
        self._orders: dict[tuple[int, int], list[str]] = {}
        self._chains: dict[tuple, list[str]] = {}  # tree chains by host shape and ring order
        self._rings: list[list[str]] | None = None  # NCCL's searched rings, where they are used
        self._trees: list[list[str]] | None = None  # and its searched tree chains
        self._flows: dict[tuple[str, int], list[Flow]] = {}
        self._flow_lists: dict[tuple, list[Flow]] = {}  # by pattern and the ids of the flows
        self._loads: dict[str, dict[int, _Load]] = {}
        self._shares: dict[tuple, ChannelShare] = {}
        self._latencies: dict[tuple[str, Proto], float] = {}
        self._receivers: dict[tuple[str, int], tuple[tuple[bool, float, int], ...]] = {}  # host_memory_receivers
        self._polls: dict[tuple[str, int], bool] = {}  # polls_host_memory

    def with_params(self, params: TwinParams) -> CommGeometry:
        """The same ranks with other physical constants (as its fabric kind sees them,
        ``TwinParams.on_fabric``): routes, rings, trees and link loads
        (which no constant changes) are shared with this geometry, shares and latencies are
        worked out again.  A calibration evaluates one communicator under many parameter sets."""
        other = object.__new__(CommGeometry)
        other.__dict__.update(self.__dict__)
        other.params = params.on_fabric(self.cluster.fabric.name)
        other._shares, other._latencies = {}, {}
        return other

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def nnodes(self) -> int:
        return len(self._by_host)

    @property
    def ppn(self) -> int:
        return self.nranks // self.nnodes

    @property
    def arch(self) -> str:
        return self.cluster.gpu.arch

    @cached_property
    def tree_pattern(self) -> str:
        """The pattern NCCL's tree search uses (``twin.model.dtree.entry_gpu``): which GPU of a
        node's chain each network link of a Tree channel reaches.  ``init.cc`` asks for
        BALANCED_TREE (from 2.10.3 always, 2.8 – 2.9 above two nodes, else TREE:
        ``ReleaseFacts.plain_tree_on_two_nodes``), which 2.8 – 2.9 turn into SPLIT_TREE below
        sm_80 (``ReleaseFacts.tree_pattern_pre_sm80``), and from sm_90 the search may fall back to
        TREE ("Try a simpler tree", ``src/graph/search.cc`` @ v2.18.5-1 – v2.28.9-1), as the
        twin's search does (``comm_info``'s ``tree_pattern_split``); with one GPU a node there is
        no chain.

        >>> from twin.topology import load_cluster
        >>> [CommGeometry(load_cluster("dgx-a100", nodes=n), nccl_version=(2, 8, 4)).tree_pattern for n in (2, 4)]
        ['tree', 'balanced']
        """
        f = release_facts(self.nccl_version)
        sm = self.cluster.gpu.sm_version
        if self.ppn == 1 or (self.nnodes <= 2 and f.plain_tree_on_two_nodes):
            return "tree"
        if sm < 80:
            return f.tree_pattern_pre_sm80
        if sm >= 90 and comm_info(self.cluster, self.ranks, nccl_version=self.nccl_version).tree_pattern_split:
            return "tree"
        return "balanced"

    @cached_property
    def tree_chain_hops(self) -> int:
        """The hops inside nodes on a Tree channel's longest path up to the root: the chain
        (``ppn - 1``), plus one in each node a link into its chain's second GPU
        (``tree_pattern``) enters on the way (``dtree.entry_hops``).

        >>> from twin.topology import load_cluster
        >>> [CommGeometry(load_cluster("dgx-a100", nodes=n)).tree_chain_hops for n in (1, 2, 4, 8)]
        [7, 7, 8, 9]
        """
        extra = dtree.entry_hops(self.nnodes, self.tree_pattern) if self.nnodes > 2 else 0
        return (self.ppn - 1) + extra

    def _route(self, src: str, dst: str, nics: tuple[str, str] | None) -> tuple:
        c = self.cluster
        if c.host_of(src) != c.host_of(dst):
            return tuple(c.route(src, dst) if nics is None else c.striped_route(src, dst, *nics))
        if self.transport is Transport.P2P:
            return tuple(c.route(src, dst))
        if self.transport is Transport.SHM:
            return tuple(c.shm_route(src, dst))
        return tuple(c.loopback_route(src, dst))

    def flow(self, src: str, dst: str, channel: int | None = None) -> Flow:
        """``src`` to ``dst``; between nodes, on the NICs channel ``channel`` uses there when given
        (channels on the same NICs share one ``Flow``)."""
        nics = None
        if channel is not None and self._nics is not None and self._host_rank[src] != self._host_rank[dst]:
            nics = (self.nic(self._host_rank[src], channel), self.nic(self._host_rank[dst], channel))
        return self._flow(src, dst, nics)

    def _flow_uncached(self, src: str, dst: str, nics: tuple[str, str] | None) -> Flow:
        hops = self._route(src, dst, nics)
        graph = self.cluster.graph
        through_cpu = [graph.nodes[h.dst]["kind"] == "cpu" for h in hops[:-1]]
        net = [h.kind == "net" for h in hops]
        if not any(net):
            staged = self._through_host_memory(src, dst, any(through_cpu))
            return Flow(src, dst, hops, any(through_cpu) and not staged, host_memory=staged)
        first, last = net.index(True), len(net) - 1 - net[::-1].index(True)
        # GPUDirect RDMA needs the NIC within PCIe switches of the GPU (NCCL_NET_GDR_LEVEL=PXB); a
        # switch that redirects peer-to-peer requests keeps it on (NCCL reads only the PCIe tree)
        # and sends the bytes through the root complex.
        c = self.cluster
        redirected = (c.fabric.gpudirect and c.acs_redirects(src, hops[first].src),
                      c.fabric.gpudirect and c.acs_redirects(dst, hops[last].dst))
        return Flow(src, dst, hops, via_cpu=any(redirected), gdr_send=redirected[0] or not any(through_cpu[:first]),
                    gdr_recv=redirected[1] or not any(through_cpu[last + 1:]))

    def nic(self, host_rank: int, channel: int) -> str | None:
        """The NIC channel ``channel`` uses on the communicator's ``host_rank``-th node (None on one
        node): the NICs NCCL picks for the communicator's GPUs there (``Cluster.channel_nics``),
        one per channel in turn.  Data-parallel groups of one GPU per node so use their GPUs' own
        rails, as on rail-optimised clusters."""
        if self._nics is None:
            return None
        nics = self._nics[host_rank]
        return nics[channel % len(nics)]

    def _local_order(self, host_rank: int, channel: int) -> list[str]:
        """The node's GPUs as channel ``channel`` visits them.

        On one node channels start at successive GPUs.  Across nodes a channel enters and leaves
        every node through its NIC there, so it enters at the GPU nearest that NIC, visits the
        others in order, and leaves from the second nearest (NCCL's rings do the same; where only
        one GPU sits beside the NIC, as on DGX H100, the last one sends through it: PXN).
        """
        gpus = self._hosts[host_rank]
        if len(gpus) == 1:  # one GPU per node (a data-parallel ring): nothing to order or keep
            return gpus
        key = (host_rank, channel)
        if key in self._orders:
            return self._orders[key]
        nic = self.nic(host_rank, channel)
        if nic is None or len(gpus) == 1:
            rot = channel % len(gpus)
            rings = self._searched_rings()
            ring = rings[channel % len(rings)] if rings else gpus
            order = ring[rot:] + ring[:rot]
        else:
            def closeness(g: str) -> tuple[int, bool]:
                return self.cluster.pcie_distance(g, nic), self.cluster.nic_of(g) != nic

            near = sorted(gpus, key=closeness)
            entry_gpu = near[0]
            start = gpus.index(entry_gpu)
            # Of the GPUs next nearest the NIC, the ring leaves from the one it reaches last, so
            # channels on different NICs leave from different GPUs (and their proxies share the work).
            tied = [g for g in near[1:] if closeness(g) == closeness(near[1])]
            exit_gpu = max(tied, key=lambda g: (gpus.index(g) - start) % len(gpus))
            middle = [g for g in gpus[start:] + gpus[:start] if g not in (entry_gpu, exit_gpu)]
            order = [entry_gpu, *middle, exit_gpu]
        self._orders[key] = order
        return order

    def _searched_rings(self) -> list[list[str]]:
        """On one node whose GPUs reach some others only over PCIe (``_uses_searched_orders``), the
        rings of NCCL's search (``twin.nccl_model.search.ring_orders``): which way each channel goes
        round matters there, since the search sends channels the other way round when one way's
        PCIe links are taken (4 A40s in NVLink pairs: two channels 0-1-2-3, two 0-3-2-1, so each
        PCIe link carries half the channels each way).  Elsewhere the twin's rotations of the rank
        order: none here."""
        if self._rings is None:
            self._rings = (ring_orders(self.cluster, self.ranks, nccl_version=self.nccl_version)
                           if self._uses_searched_orders() else [])
        return self._rings

    def _searched_trees(self) -> list[list[str]]:
        """Where the rings are NCCL's searched ones, its searched tree chains too
        (``twin.nccl_model.search.tree_orders``): which GPUs a channel's chain crosses a PCIe path
        between matters there (4 H100 NVL in bridged pairs: chains 0-1-2-3 and 2-3-0-1, so each
        pair's PCIe hop carries half the channels); else none."""
        if self._trees is None:
            self._trees = (tree_orders(self.cluster, self.ranks, nccl_version=self.nccl_version)
                           if self._uses_searched_orders() else [])
        return self._trees

    def _uses_searched_orders(self) -> bool:
        """One node of more than two ranks, no NVSwitch, some ranks not linked to each other."""
        c = self.cluster
        return self.nnodes == 1 and self.nranks > 2 and not c.has_nvswitch() and any(
            a != b and not c.graph.has_edge(a, b) for a in self.ranks for b in self.ranks)

    def ring(self, channel: int) -> list[str]:
        """Ranks in ring order for one channel: node after node, each node's GPUs in a chain."""
        return [g for h in range(self.nnodes) for g in self._local_order(h, channel)]

    def ring_flows(self, channel: int) -> list[Flow]:
        order = self.ring(channel)
        return [self.flow(a, b, channel) for a, b in zip(order, order[1:] + order[:1], strict=True) if a != b]

    def tree_chain(self, host_rank: int, channel: int) -> list[str]:
        """The node's GPUs as channel ``channel``'s tree chain visits them, from its head.

        The head is, across nodes, the ring's last GPU there (the one nearest the channel's NIC
        that the ring leaves from); on one node channels start at successive GPUs.  From it the
        chain goes on to the nearest GPU not yet in it (fewest CPUs on the way, then the widest
        path, then the fewest hops; ties in descending order from the last one), so it leaves a
        group of GPUs — an NVLink pair, a PCIe switch, a socket — only once all of it is in:
        NCCL's tree search walks the node this way (``ncclTopoSearchNextGpuSort`` orders the next
        GPUs by the path's bandwidth, ``src/graph/search.cc``), and a chain, unlike a ring, need
        not come back to its start.  Where every GPU is as near as any other (an NVSwitch) this
        is the ring's order backwards.  Where the rings are NCCL's searched ones (one node, some
        GPUs linked only over PCIe), so are the chains (``_searched_trees``).

        >>> from twin.topology import load_cluster
        >>> geom = CommGeometry(load_cluster("l40s-pcie", nodes=2))
        >>> [g.split("/")[1] for g in geom.ring(0)[:8]]  # in at GPU 0 by NIC 0, out at GPU 3
        ['gpu0', 'gpu1', 'gpu2', 'gpu4', 'gpu5', 'gpu6', 'gpu7', 'gpu3']
        >>> [g.split("/")[1] for g in geom.tree_chain(0, 0)]  # crosses the sockets once
        ['gpu3', 'gpu2', 'gpu1', 'gpu0', 'gpu7', 'gpu6', 'gpu5', 'gpu4']
        """
        gpus = self._hosts[host_rank]
        if len(gpus) == 1:  # one GPU per node (a data-parallel tree): no chain
            return gpus
        if trees := self._searched_trees():
            return trees[channel % len(trees)]
        head = self._local_order(host_rank, channel)[-1] if self.nnodes > 1 else gpus[(channel - 1) % len(gpus)]
        shape = self.cluster.host_shape(self.cluster.host_of(head))
        # Hosts of one shape walk alike: the chain is found once per shape, head and GPUs (local names).
        key = (shape, *(g.split("/", 1)[-1] for g in (head, *gpus))) if shape is not None else (head, *gpus)
        if key not in self._chains:
            position = {g: i for i, g in enumerate(gpus)}
            chain = [head]
            left = [g for g in gpus if g != head]
            while left:
                last = chain[-1]
                nxt = min(left, key=lambda g: (*self._distance(last, g), (position[last] - position[g]) % len(gpus)))
                chain.append(nxt)
                left.remove(nxt)
            self._chains[key] = [g.split("/", 1)[-1] for g in chain] if shape is not None else chain
        prefix = head.split("/", 1)[0] + "/" if shape is not None else ""
        return [prefix + g for g in self._chains[key]]

    def _distance(self, a: str, b: str) -> tuple[int, float, int]:
        """How far GPU ``b`` is from GPU ``a`` of the same node on the communicator's transport:
        the CPUs its route crosses, minus its narrowest link's bandwidth, its hops."""
        hops = self._route(a, b, None)
        graph = self.cluster.graph
        return (sum(graph.nodes[h.dst]["kind"] == "cpu" for h in hops), -min(h.bw for h in hops), len(hops))

    def tree_flows(self, channel: int, tree: int | None = None) -> list[Flow]:
        """Chain inside each node to its head (``tree_chain``), NCCL's double binary tree between
        nodes, both directions, from a node's head to the GPU of its parent's chain the search's
        pattern joins it to (``tree_pattern``: the head, or for a lower child of a balanced tree
        the second GPU, which reaches the channel's NIC too: ``ncclTopoSearchRecGpu``'s
        ``nextBackToNet``); ``tree`` (0 or 1) as given, else the one a Tree channel takes.

        >>> from twin.topology import load_cluster
        >>> geom = CommGeometry(load_cluster("dgx-a100", nodes=4))
        >>> geom.tree_chain(2, 0)[:2]
        ['n2/gpu1', 'n2/gpu0']
        >>> [(f.src, f.dst) for f in geom.tree_flows(0, 0) if f.kind == "net"][::2]  # 1 and 3 to 2, 2 to 0
        [('n1/gpu1', 'n2/gpu0'), ('n2/gpu1', 'n0/gpu1'), ('n3/gpu1', 'n2/gpu1')]
        """
        flows = []
        chains = []
        for h in range(self.nnodes):
            chain = self.tree_chain(h, channel)
            chains.append(chain)
            for a, b in zip(chain[1:], chain[:-1], strict=True):
                flows += [self.flow(a, b), self.flow(b, a)]
        # NCCL's double binary tree (``twin.model.dtree``): search channel c takes the first tree, its
        # copy c + nChannels the second; the search gives each NIC one channel (``nic``), so the
        # copies start once every NIC has one.
        if tree is None:
            tree = (channel // len(self._nics[0])) % 2 if self._nics else 0
        for node, chain in enumerate(chains):
            up = dtree.parent(self.nnodes, node, tree)
            if up >= 0:
                to = chains[up][dtree.entry_gpu(self.nnodes, node, tree, self.tree_pattern)]
                flows += [self.flow(chain[0], to, channel), self.flow(to, chain[0], channel)]
        return flows

    def chain_flows(self, channel: int) -> list[Flow]:
        """Broadcast/Reduce: the channel's ring from the root (the first rank) round to the rank
        before it, without the edge back (a pipeline from the root).  Every channel starts at the
        root, whose link so carries all the data, whatever order the channel's ring visits."""
        flows = self.ring_flows(channel)
        start = next((i for i, f in enumerate(flows) if f.src == self.ranks[0]), 0)
        return (flows[start:] + flows[:start])[:-1] or flows

    def chain_arrivals(self, nchannels: int, proto: Proto) -> np.ndarray:
        """``[c, r]``: the latency (µs) from the root down channel ``c``'s chain (``chain_flows``)
        to the communicator's ``r``-th rank, its hops' step latencies added up."""
        out = np.zeros((nchannels, self.nranks))
        index = {g: i for i, g in enumerate(self.ranks)}
        for c in range(nchannels):
            at = 0.0
            for f in self.channel_flows("chain", c):
                at += self.hop_latency_us(f, proto)
                out[c, index[f.dst]] = at
        return out

    def repeat_coupling(self, nchannels: int, proto: Proto) -> float:
        """The share of a Broadcast/Reduce chain's fill that a call issued back to back on the
        same stream still waits for (``twin.model.repeat``: a rank's kernel ends with its last
        channel's data, and its channels' chains reach it at different depths), once per channel
        count and protocol."""
        key = ("repeat", nchannels, proto)
        if key not in self._latencies:
            self._latencies[key] = coupled_fill_share(self.chain_arrivals(nchannels, proto)) if nchannels > 1 else 0.0
        return self._latencies[key]

    def nvls_flows(self, channel: int) -> list[Flow]:
        """Every GPU to and from its NVSwitch (multicast stores and in-switch reductions), and
        across nodes NVLS-Tree's tree between the nodes' heads (``nvls_tree_flows``)."""
        flows = list(self._switch_flows)
        if self.nnodes > 1:
            flows += self.nvls_tree_flows(channel)
        return flows

    def nvls_tree_flows(self, channel: int) -> list[Flow]:
        """NVLS-Tree between nodes: NCCL splits every channel's loop over the node's NVLS heads
        (one per GPU with a NIC of its own: the NVLS graph's channels), and head ``h`` sends its
        part to head ``h`` of its parent node and back, from its own NIC (``connectNvls``,
        ``src/graph/connect.cc``; ``getNvlsNetDev``, ``src/graph/search.cc`` @ v2.28.9-1), on
        NCCL's double binary tree, channel ``c`` on tree ``c % 2`` (``twin.model.dtree``).
        Channel ``c`` crosses at head ``c mod heads``, from that head's local NICs in turn; where
        the net plugin merges a GPU's rails into one device (aws-ofi-nccl on a p5: four EFA rails),
        from that device, its flows spread over the rails (``Cluster.striped_route``).

        >>> from twin.topology import load_cluster
        >>> geom = CommGeometry(load_cluster("aws-p5", nodes=2))
        >>> [(f.src, next(h.src for h in f.hops if h.kind == "net")) for c in (0, 3, 11)
        ...  for f in geom.nvls_tree_flows(c)[:1]]
        [('n1/gpu0', 'n1/nic0'), ('n0/gpu3', 'n0/nic12'), ('n0/gpu3', 'n0/nic12')]
        """
        heads = [self._hosts[n][channel % self.ppn] for n in range(self.nnodes)]

        def nic(gpu: str) -> str:
            rails = self.cluster.local_nics(gpu)
            return self.cluster.rails(rails[channel // self.ppn % len(rails)])[0]

        flows = []
        for node, child in enumerate(heads):
            up = dtree.parent(len(heads), node, channel % 2)
            if up >= 0:
                parent = heads[up]
                flows += [self._flow(child, parent, (nic(child), nic(parent))),
                          self._flow(parent, child, (nic(parent), nic(child)))]
        return flows

    @cached_property
    def _switch_flows(self) -> tuple[Flow, ...]:
        """Every GPU to and from its NVSwitch, built once: every channel's NVLS flows are these
        (so the channels of one node share one flow list)."""
        flows = []
        for gpu in self.ranks:
            switch = next(n for n in self.cluster.graph.neighbors(gpu)
                          if self.cluster.graph.nodes[n]["kind"] == "nvswitch")
            flows += [Flow(gpu, switch, (self._edge_hop(gpu, switch),)),
                      Flow(switch, gpu, (self._edge_hop(switch, gpu),))]
        return tuple(flows)

    def nvlink_round_trip_us(self) -> float:
        """A store to the NVSwitch and its acknowledgement back: twice the mean one-way latency of
        the communicator's GPU-NVSwitch links (the topology's ``lat_us``)."""
        hops = [f.hops[0] for f in self.channel_flows("nvls", 0) if f.kind == "nvlink"]
        return 2 * sum(h.lat_us for h in hops) / len(hops) if hops else 0.0

    def _edge_hop(self, u: str, v: str) -> Hop:
        data = self.cluster.graph.edges[u, v]
        return Hop(src=u, dst=v, kind=data["kind"], bw=data["bw"], lat_us=data["lat_us"],
                   memory_bw=data.get("memory_bw"))

    def pair_flows(self) -> list[Flow]:
        """AllToAll: every rank to every other rank."""
        return [self.flow(a, b) for a in self.ranks for b in self.ranks if a != b]

    def sendrecv_flows(self) -> list[Flow]:
        """SendRecv: the first rank to the second."""
        return [self.flow(self.ranks[0], self.ranks[1])]

    @property
    def collnet(self) -> bool:
        """In-network reduction (SHARP) on the fabric switches the nodes talk through."""
        g = self.cluster.graph
        return self.nnodes > 1 and any(d.get("kind") == "switch" and d.get("sharp") for _, d in g.nodes(data=True))

    @property
    def cpu_vendor(self) -> str:
        return self.cluster.cpu_vendor

    def _through_host_memory(self, src: str, dst: str, through_cpu: bool) -> bool:
        """Whether NCCL carries ``src`` → ``dst`` of one node through host memory (its SHM transport,
        ``twin.model.shm``): forced (``Transport.SHM``), or where NCCL refuses peer to peer on a PCIe
        path through the CPU's root complex: on every CPU but AMD with at most two GPUs
        (``ncclTopoCheckP2p``, ``src/graph/paths.cc``).  A switch that redirects peer requests
        upstream is unseen by NCCL, which stays peer to peer there (``Cluster.acs_redirects``)."""
        if self.transport is Transport.SHM:
            return True
        return (self.transport is Transport.P2P and through_cpu and not self.cluster.acs_redirects(src, dst)
                and not (self.cpu_vendor == "amd" and self.ppn <= 2))

    def host_memory_receivers(self, pattern: str, nchannels: int) -> tuple[tuple[bool, float, int], ...]:
        """The GPUs that receive through host memory on the first ``nchannels`` channels of
        ``pattern``, each as (whether it also sends through host memory on any of them, so its link
        carries loads and stores at once; the raw rate of its PCIe link into the GPU; how many of
        those channels' receives it takes so, one thread group each).  Channels differ where NCCL's
        search sends them different ways (``_searched_rings``, ``_searched_trees``): a GPU then
        loads host memory on some of its channels only."""
        key = (pattern, nchannels)
        if key not in self._receivers:
            receives: dict[str, list] = {}  # receiving GPU -> [its link's rate, receives]
            senders = set()
            for channel in range(nchannels):
                flows = [f for f in self.channel_flows(pattern, channel) if f.host_memory]
                senders |= {f.src for f in flows}
                for f in flows:
                    receives.setdefault(f.dst, [f.hops[-1].bw, 0])[1] += 1
            self._receivers[key] = tuple(sorted({(gpu in senders, bw, n) for gpu, (bw, n) in receives.items()}))
        return self._receivers[key]

    def polls_host_memory(self, pattern: str, nchannels: int) -> bool:
        """Whether a GPU on the first ``nchannels`` channels of ``pattern`` receives from the network
        into host memory, where its kernel polls the LL lines (``netpath.ll_host_recv_gbps``)."""
        key = (pattern, nchannels)
        if key not in self._polls:
            self._polls[key] = any(self._staged_receive(f) for channel in range(nchannels)
                                   for f in self.channel_flows(pattern, channel))
        return self._polls[key]

    def _staged_receive(self, f: Flow) -> bool:
        """Whether NCCL puts ``f``'s network receive buffer in host memory: GPUDirect RDMA off, its
        NIC beyond a CPU's root complex (``gdr_recv`` False), and no GPU beside that NIC that the
        receiver reaches over NVLink, whose distance ``ncclTopoCheckGdr`` would take instead (a
        PXN path, ``src/graph/paths.cc`` @ v2.23.4-1: GPUDirect RDMA on, the bytes through the CPU)."""
        if f.kind != "net" or f.gdr_recv:
            return False
        nic = next(h.dst for h in reversed(f.hops) if h.kind == "net")
        return not any(self.cluster.switched_to(g, nic) for g in self.cluster.nvlink_peers(f.dst))

    def channel_flows(self, pattern: str, channel: int) -> list[Flow]:
        """The flows of one channel of ``pattern`` (ring, tree, chain, nvls; pairs and sendrecv are
        the same on every channel)."""
        if pattern in _SAME_ON_EVERY_CHANNEL:
            channel = 0
        key = (pattern, channel)
        if key not in self._flows:
            builder = {"ring": self.ring_flows, "tree": self.tree_flows, "chain": self.chain_flows,
                       "nvls": self.nvls_flows, "pairs": lambda _: self.pair_flows(),
                       "sendrecv": lambda _: self.sendrecv_flows()}[pattern]
            flows = builder(channel)
            # Channels on the same NICs (every channel of a ring of one GPU per node) share one list.
            self._flows[key] = self._flow_lists.setdefault((pattern, *map(id, flows)), flows)
        return self._flows[key]

    def _load(self, pattern: str, nchannels: int) -> _Load:
        """The load of ``pattern``'s first ``nchannels`` channels, kept for the channel counts asked
        only: each is the nearest smaller one asked before plus the channels in between (one copy
        of the link tables per count asked, not per channel)."""
        built = self._loads.setdefault(pattern, {0: _Load()})
        if pattern in _SAME_ON_EVERY_CHANNEL:  # grown from the empty load: they share its classes
            return built[0].plus(self.channel_flows(pattern, 0), copies=nchannels)
        if nchannels not in built:
            below = max(n for n in built if n < nchannels)
            load = built[below]
            for channel in range(below, nchannels):
                load = load.plus(self.channel_flows(pattern, channel))
            built[nchannels] = load
        return built[nchannels]

    def share(self, pattern: str, nchannels: int, proto: Proto) -> ChannelShare:
        """The per-channel rate and step latency of ``pattern`` run on ``nchannels`` channels.

        ``pairs`` (AllToAll) and ``sendrecv`` are point to point: every flow takes one hop, so a
        step costs the slowest flow's latency (or the busiest proxy's time for it).

        A GPU's one proxy thread walks its operations in turn, each channel's after the other's
        (``progressOps`` in ``src/proxy.cc``; ``sendProxyProgress`` loops over the channels'
        sub-operations, ``src/transport/net.cc``), so on a ring's or a chain's network hop, and on
        a point-to-point one, the last channel's step is posted after the busiest thread's other
        requests of that step: the hop costs its own latency plus their CPU time (``queue``).  Only rings,
        chains and point-to-point queue so: every GPU of them sends to one peer per channel and
        step, where a tree's up and down passes post to different peers in different steps.
        """
        key = (pattern, nchannels, proto)
        if key not in self._shares:
            load = self._load(pattern, nchannels)
            # The busiest proxy thread makes its flows' requests one after another, so the last
            # channel's network hop waits for the others' posts on top of its own.
            proxy = load.busiest_proxy_work_us(proto, needs_flush(self.cluster.gpu.sm_version, self.cpu_vendor),
                                               self.cpu_vendor, self.params)
            post = proxy_post_us(self.cpu_vendor, self.params)
            queue = max(0.0, proxy - post)
            if pattern in _SAME_ON_EVERY_CHANNEL:
                flows = self.channel_flows(pattern, 0)
                step = max((f.latency_us(proto, self.cpu_vendor, self.params) for f in flows), default=0.0)
                step = max(step + (queue if any(f.kind == "net" for f in flows) else 0.0), proxy)
            elif pattern in ("ring", "chain"):
                step = self.path_latency_us(pattern, proto) + queue * self.network_share(pattern)
            else:
                step = self.path_latency_us(pattern, proto)
            lag = 0.0
            if pattern == "ring":
                # The ring's steps wait for each other round the ring (the mean hop, above); its
                # busiest proxy thread's posts pace them on their own (``Schedule.proxy_bound_us``),
                # and the last post's hop then takes the rest of its latency.
                hop = max((self.hop_latency_us(f, proto) for f in self.channel_flows(pattern, 0) if f.kind == "net"),
                          default=0.0)
                lag = max(0.0, hop - post)
            links, gbps = load.links(proto, self.params)
            # A full pipeline's chunks follow each other no faster than the busiest thread's work
            # per step; the waits on a step's path overlap (``NCCL_STEPS`` in flight).
            scan_sends = load.busiest_sends() if proto is Proto.LL else 0
            self._shares[key] = ChannelShare(gbps=gbps, step_us=step, links=links, proxy_us=proxy, proxy_lag_us=lag,
                                             scan_sends=scan_sends)
        return self._shares[key]

    def tree_pass_gbps(self, nchannels: int, proto: Proto) -> tuple[float, float]:
        """The per-channel payload rate of the tree's up flows alone and of its down flows alone on
        ``nchannels`` channels (``share``'s rate, of one pass): where a CTA runs its passes one
        after the other (``ReleaseFacts.tree_up_down``), every channel's links carry one of them at
        a time.  ``tree_flows`` lists each hop's flow up before the one down."""
        key = ("tree_pass", nchannels, proto)
        if key not in self._latencies:
            rates = []
            for way in (0, 1):
                load = _Load()
                for channel in range(nchannels):
                    load = load.plus(self.channel_flows("tree", channel)[way::2])
                rates.append(load.links(proto, self.params)[1])
            self._latencies[key] = tuple(rates)
        return self._latencies[key]

    def ll_scan(self, pattern: str, nchannels: int, proto: Proto, step_bytes, message_bytes) -> tuple:
        """What the LL send proxy's check of every line (``netpath.ll_scan_us``) adds to a schedule
        of ``pattern`` on ``nchannels`` channels: (CPU time on the busiest sending proxy thread per
        step of ``step_bytes``, one scan per LL step it sends; the latency a step gains on its way,
        for the scan of its whole network message of ``message_bytes`` after the last line lands, at
        the share of the hops that cross the network).  (0, 0) for LL128, Simple and one node.

        The step's latency is a share of a scan (``LL_SCAN_WAIT_SHARE``): the kernel writes an LL
        step as fast as its data arrives, so the thread is scanning again and again while the step
        fills (from line 0, the lines already written staying in its cache), and the last line
        lands at a point of a pass as likely as any other.
        """
        share = self.share(pattern, nchannels, proto)
        if not share.scan_sends:
            return 0.0, 0.0
        work = share.scan_sends * ll_scan_us(proto, step_bytes, self.cpu_vendor, self.params)
        hops = 1.0 if pattern in _SAME_ON_EVERY_CHANNEL else self.network_share(pattern)  # point to point: one hop
        return work, hops * LL_SCAN_WAIT_SHARE * ll_scan_us(proto, message_bytes, self.cpu_vendor, self.params)

    def network_share(self, pattern: str) -> float:
        """The share of the hops a piece of data crosses in ``pattern`` (as ``path_latency_us``
        counts them) that cross the network: 0 on one node."""
        if self.nnodes == 1:
            return 0.0
        if pattern in ("ring", "chain"):
            flows = self.channel_flows(pattern, 0)
            return sum(f.kind == "net" for f in flows) / len(flows) if flows else 0.0
        levels = math.ceil(math.log2(self.nnodes))
        if pattern == "tree":
            return levels / (self.tree_chain_hops + levels)
        return levels / (1 + levels)  # nvls: to the switch and back, then the tree between nodes

    def _fill_flows(self, pattern: str) -> list[tuple[float, Flow]]:
        """Channel 0's flows a pipeline's piece of data crosses, each with its weight in the fill
        (``fill_ratios``): a tree's chain inside a node, then its hops between nodes, weighted as
        ``path_latency_us`` weighs them; a chain's hops alike."""
        flows = self.channel_flows(pattern, 0)
        if pattern != "tree":
            return [(1.0, f) for f in flows]
        inter = [f for f in flows if self._between_nodes(f)]
        intra = [f for f in flows if not self._between_nodes(f)]
        levels = math.ceil(math.log2(self.nnodes)) if self.nnodes > 1 else 0
        weighted = [(self.tree_chain_hops / len(intra), f) for f in intra] if intra else []
        return weighted + ([(levels / len(inter), f) for f in inter] if inter else [])

    def first_chunk_receives(self, pattern: str, nchannels: int
                             ) -> tuple[tuple[int, tuple[int, ...], tuple[int, ...], float] | None, ...]:
        """For each of ``fill_ratios``' hops of a one-node tree that receives through host memory:
        (the step at which the first chunk crosses it, the steps at which its receiving GPU loads
        host memory and those at which it stores into it, on any of the ``nchannels`` channels, the
        raw rate of its PCIe link into the GPU); None for the other hops, and for every hop
        elsewhere.

        A one-node tree channel is a chain from its first GPU (``tree_chain``): the reduce passes
        up from its last GPU in steps 1 … ppn−1, the broadcast down in steps ppn … 2(ppn−1), every
        channel's first chunk at the same step and its later chunks one step behind each other.
        So while the first chunk crosses an SHM hop, its receiver loads host memory only on the
        channels whose chunks are on a hop into it at that step, and stores into it only if a
        later chunk is already on one of its own SHM sends (``first_chunk_host_gbps``).

        >>> from twin.topology import load_cluster
        >>> geom = CommGeometry(load_cluster("h100-nvl"), [f"n0/gpu{i}" for i in range(4)])
        >>> [r for r in geom.first_chunk_receives("tree", 4) if r]  # chains 0-1-2-3 and 2-3-0-1
        [(2, (2, 2), (5, 5), 48.0), (5, (5, 5), (2, 2), 48.0)]
        """
        key = ("first", pattern, nchannels)
        if key not in self._latencies:
            out: tuple = ()
            if pattern == "tree" and self.nnodes == 1:
                steps = []  # per channel: {(src, dst): step} of its hops through host memory
                for c in range(nchannels):
                    chain, n = self.tree_chain(0, c), self.ppn
                    at = {(chain[i + 1], chain[i]): n - 1 - i for i in range(n - 1)}
                    at |= {(chain[i], chain[i + 1]): n + i for i in range(n - 1)}
                    steps.append({(f.src, f.dst): at[f.src, f.dst]
                                  for f in self.channel_flows(pattern, c) if f.host_memory})
                out = tuple((steps[0][f.src, f.dst],
                             tuple(sorted(t for ch in steps for (_, d), t in ch.items() if d == f.dst)),
                             tuple(sorted(t for ch in steps for (a, _), t in ch.items() if a == f.dst)),
                             f.hops[-1].bw) if f.host_memory else None for _, f in self._fill_flows(pattern))
            self._latencies[key] = out
        return self._latencies[key]

    def fill_ratios(self, pattern: str, proto: Proto) -> tuple[tuple[float, float, bool], ...]:
        """(weight, bottleneck rate / the hop's own rate, whether it receives through host memory)
        of each hop a piece of data crosses in a pipeline (``tree``: the chain inside a node, then
        the hops between nodes, weighted as ``path_latency_us`` weighs them; ``chain``: its hops),
        once per pattern and protocol.

        Once a pipeline is full every chunk moves at its slowest hop's pace, but its first chunk
        crosses each hop at that hop's own rate: over the NVLink bridge of a pair in a fraction
        of the time it takes across the sockets.  Rates are compared on channel 0's flows: a
        hop's rate is the narrowest of its links' payload rates (``store_efficiency``, the root
        complex's share for redirected peer-to-peer traffic) over the channel's flows crossing
        it; alike channels load links alike, so the ratio holds for any channel count.  A hop
        that receives through host memory (SHM, a host-staged network receive) is bounded by
        those receives as well (``host_memory_gbps``), the others not.
        """
        key = ("fill", pattern, proto)
        if key not in self._latencies:
            flows = self.channel_flows(pattern, 0)
            count: dict[tuple[str, str], int] = {}
            for f in flows:
                for h in f.hops:
                    count[h.src, h.dst] = count.get((h.src, h.dst), 0) + h.share

            def rate(f: Flow) -> float:
                return min(_use_bw(h, _forwarded(f, h))
                           * _use_efficiency(proto, (h.kind, f.kind == "net", _forwarded(f, h)), self.params)
                           / count[h.src, h.dst] for h in f.hops)

            weighted = self._fill_flows(pattern)
            total = sum(w for w, _ in weighted)
            slowest = min((rate(f) for _, f in weighted), default=1.0)
            ratios = tuple((w / total, slowest / rate(f), f.host_memory) for w, f in weighted)
            alike = all(r == 1.0 for _, r, _ in ratios) and len({through for *_, through in ratios}) == 1
            self._latencies[key] = () if alike else ratios  # (): every hop alike
        return self._latencies[key]

    def hop_latency_us(self, flow: Flow, proto: Proto, *, tree: bool = False) -> float:
        """One step over ``flow`` (``tree``: a tree's hop, ``Flow.latency_us``).  Inside a node of a
        communicator that spans nodes, an LL step costs ``protocol.ll_multinode_intra_factor``
        (1.8) times its single-node latency: NVIDIA's measurement, carried in NCCL 2.8's tuning
        model; its cause is not modelled here."""
        lat = flow.latency_us(proto, self.cpu_vendor, self.params, tree=tree)
        if proto is Proto.LL and self.nnodes > 1 and flow.kind != "net":
            lat *= self.params.protocol.ll_multinode_intra_factor
        return lat

    def _between_nodes(self, flow: Flow) -> bool:
        return self._host_rank[flow.src] != self._host_rank[flow.dst]

    def path_latency_us(self, pattern: str, proto: Proto) -> float:
        """Mean latency of the hops a piece of data crosses, one after another, in ``pattern``
        (``_path_latency_us``, once per pattern and protocol)."""
        key = (pattern, proto)
        if key not in self._latencies:
            self._latencies[key] = self._path_latency_us(pattern, proto)
        return self._latencies[key]

    def nvls_switch_hop_us(self, proto: Proto) -> float:
        """Mean latency of one step between a GPU and its NVSwitch (the NVLS pattern's NVLink hops;
        on one node, the whole NVLS path's mean hop)."""
        key = ("nvls-switch", proto)
        if key not in self._latencies:
            switch = [f for f in self.channel_flows("nvls", 0) if f.kind == "nvlink"]
            self._latencies[key] = sum(self.hop_latency_us(f, proto) for f in switch) / len(switch) if switch else 0.0
        return self._latencies[key]

    def _path_latency_us(self, pattern: str, proto: Proto) -> float:
        """Mean latency of the hops a piece of data crosses, one after another, in ``pattern``.

        A step waits only for the hop its data just crossed, so an NVLink hop costs an NVLink
        latency even when the same ring also crosses the network: a ring's data goes round every
        edge of the ring; a tree's data climbs the chain inside a node (``tree_chain_hops``, over
        whatever the transport takes there, the NICs included) and ``ceil(log2(nodes))`` network
        hops between nodes, then comes back down; NVLS goes to the switch and back.
        """
        def mean(flows: list[Flow], tree: bool = False) -> float:
            return sum(self.hop_latency_us(f, proto, tree=tree) for f in flows) / len(flows) if flows else 0.0

        if pattern in ("ring", "chain"):
            return mean(self.channel_flows(pattern, 0))
        levels = math.ceil(math.log2(self.nnodes)) if self.nnodes > 1 else 0
        tree = self.channel_flows("tree", 0)
        inter = [f for f in tree if self._between_nodes(f)]
        if pattern == "tree":
            # A hop inside a node takes NCCL's tree latency (``IntraLink.tree_step_us``).
            intra = [f for f in tree if not self._between_nodes(f)]
            hops = self.tree_chain_hops + levels
            return (self.tree_chain_hops * mean(intra, tree=True) + levels * mean(inter)) / max(hops, 1)
        return (2 * self.nvls_switch_hop_us(proto) + 2 * levels * mean(inter)) / (2 + 2 * levels)


_SAME_ON_EVERY_CHANNEL = ("pairs", "sendrecv")
