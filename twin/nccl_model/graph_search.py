"""NCCL's channel search (``ncclTopoCompute`` in ``src/graph/search.cc``), re-implemented.

For a pattern (ring, balanced tree, NVLS) NCCL tries per-channel bandwidths from a speed
list, highest first, and builds channels one at a time: each channel is a walk over the
node's GPUs (starting and ending at a NIC when the communicator spans hosts) whose every
link still has the channel's bandwidth left; taking a channel subtracts it.  A search
stops at ``maxChannels`` or when the time budget (search steps) runs out.  Pass 1 lowers
the speed until channels exist (relaxing path types first); pass 2 duplicates fast
channels and tries higher speeds with at least as many channels.

The walk order follows NCCL: PCI order first, then replaying the previous channel, then a
depth-first search trying next GPUs by path bandwidth, and on NVSwitch systems only the
index neighbours.  Step budgets: see ``SEARCH_BUDGET``.
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field

from twin.nccl_model.constants import MAX_NVLS_ARITY
from twin.nccl_model.inputs import PathType
from twin.nccl_model.system import LOC_BW, Node, NodeSystem

SPEED_INTRA = {80: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
               90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
               100: (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
SPEED_INTER = {80: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                    2.4, 1.2, 0.24, 0.12),
               90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                    0.24, 0.12),
               100: (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
                     1.2, 0.24, 0.12)}

RING, BALANCED_TREE, TREE, NVLS = "ring", "balanced_tree", "tree", "nvls"
# NCCL's step budgets: per search, per search replaying the previous channels, in all.
# Kept exact, since results depend on them; a Python step costs ~20-40 µs, so an
# asymmetric multi-socket node can take seconds (symmetric NVSwitch nodes: milliseconds).
SEARCH_BUDGET = {"search": 1 << 14, "same": 1 << 8, "global": 1 << 19}
_PCI_ORDER, _REPLAY = 1, 2


@dataclass
class Graph:
    """A search result (``ncclTopoGraph``): channels and their per-channel bandwidths."""

    pattern: str
    min_channels: int
    max_channels: int
    nchannels: int = 0
    bw_intra: float = 0.0
    bw_inter: float = 0.0
    type_intra: PathType = PathType.LOC
    type_inter: PathType = PathType.PIX
    same_channels: bool = True
    cross_nic: int = 0
    hops: int = 0
    intra: list[list[int]] = field(default_factory=list)
    """GPU indices of each channel, in walk order."""
    inter: list[list[Node | None]] = field(default_factory=list)
    """(NIC in, NIC out) of each channel on multi-host searches."""


def speeds(sm_version: int, inter: bool, lists: tuple | None = None) -> tuple[float, ...]:
    """The speeds ``ncclTopoCompute`` tries, highest first; ``lists``: a release's own (intra, inter)
    lists for GPUs before Hopper (``ReleaseFacts.search_speeds``), else the 2.18+ ones.

    >>> speeds(80, False)[:3], speeds(80, False, ((42.0, 30.0), (42.0, 30.0)))
    ((40.0, 30.0, 20.0), (42.0, 30.0))
    """
    if lists is not None and sm_version < 90:
        return lists[1 if inter else 0]
    key = 100 if sm_version >= 100 else (90 if sm_version >= 90 else 80)
    return (SPEED_INTER if inter else SPEED_INTRA)[key]


_FRAMES_PER_GPU = 40
"""Python frames the recursive search uses per GPU of a channel (a 72-GPU NVLink domain, GB200
NVL72, goes about 2,900 deep; NCCL's C recursion has no such limit)."""


def compute(system: NodeSystem, pattern: str, min_channels: int, max_channels: int,
            speed_lists: tuple | None = None) -> Graph:
    """``ncclTopoCompute`` for one pattern on one host (``speed_lists``: see ``speeds``)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 1000 + _FRAMES_PER_GPU * len(system.gpus)))
    try:
        return _Search(system, speed_lists).compute(Graph(pattern, min_channels, max_channels))
    finally:
        sys.setrecursionlimit(limit)


class _Search:
    def __init__(self, system: NodeSystem, speed_lists: tuple | None = None) -> None:
        self.sys = system
        self.speed_lists = speed_lists
        self.gpus = system.gpus
        self.nets = system.nets
        self.inter = system.inter
        self.ngpus = len(self.gpus)
        self.used: dict[int, int] = {}  # channel -> bitmask of the GPUs already in it
        self.score_cache: dict = {}
        self.net_cache: dict = {}
        self.local_cache: dict = {}
        self.follow_cache: dict = {}
        self.needs: dict[float, tuple[int, int]] = {}
        self.order_cache: dict = {}
        self.fruitless: dict = {}
        self.present: dict = {}
        self.nvs = system.nvs
        # remaining bandwidth per link during the search, in MB/s (NCCL rounds to 1e-3 GB/s)
        self.cap = {lk: round(lk.bw * 1000) for node in system.nodes.values() for lk in node.links}

    # ---- driver -------------------------------------------------------------------------
    def compute(self, graph: Graph) -> Graph:
        sys, ngpus = self.sys, self.ngpus
        self.cross_nic = 2 if len(self.nets) > 1 and graph.pattern in (RING, BALANCED_TREE) else 0
        graph.cross_nic = 0
        self.intra_range = (PathType.LOC, PathType.SYS)
        self.inter_range = (PathType.PIX, PathType.SYS)
        if ngpus > 1:
            types = [p.type for a in self.gpus for b in self.gpus if a is not b and (p := sys.path(a, b))]
            self.intra_range = (min(types), max(types))
        if sys.inter:
            types = [p.type for g in self.gpus for n in self.nets if (p := sys.path(g, n))]
            self.inter_range = (min(types), max(types))
            self.intra_range = (self.intra_range[0], self.inter_range[1])
        graph.type_intra, graph.type_inter = self.intra_range[0], self.inter_range[0]
        graph.same_channels = graph.pattern != NVLS
        if graph.pattern == NVLS:
            if sys.nvs is None or sys.sm_version < 90:
                return graph
            graph.max_channels = min(MAX_NVLS_ARITY, ngpus)
            if not sys.inter:
                graph.min_channels = graph.max_channels
        if ngpus == 1 and graph.pattern != RING:
            graph.pattern = TREE

        self.speed = speed = speeds(sys.sm_version, sys.inter, self.speed_lists)
        self.max_bw, self.total_bw = self._max_bw(), self._total_bw()
        total_bw = self.total_bw * (ngpus / (ngpus - 1) if ngpus > 1 and graph.pattern != RING else 1)
        self.idx = 0
        while (speed[self.idx] > self.max_bw or speed[self.idx] * graph.min_channels > total_bw) and \
                self.idx < len(speed) - 1:
            self.idx += 1
        tmp = copy.deepcopy(graph)
        tmp.bw_intra = tmp.bw_inter = speed[self.idx]
        self.global_timeout, pass_ = SEARCH_BUDGET['global'], 1
        while True:
            time = SEARCH_BUDGET['same' if tmp.same_channels else 'search']
            tmp.nchannels = 0
            self.global_timeout -= time
            time, graph = self._search(tmp, graph, time)
            done = time == -1 or graph.nchannels * graph.bw_inter >= self.total_bw
            if pass_ == 1 and not done and self._relax(tmp, graph, time):
                continue
            if pass_ == 1:
                time, pass_ = -1, 2
                _dup_channels(graph, sys.sm_version)
                tmp = copy.deepcopy(graph)
                self.idx = 0
                while speed[self.idx] > graph.bw_inter and self.idx < len(speed) - 1:
                    self.idx += 1
                tmp.bw_intra = tmp.bw_inter = speed[self.idx]
                tmp.min_channels = graph.nchannels
            if time != 0 and self.idx > 0 and self._raise(tmp, graph):
                continue
            break
        if graph.nchannels == 0 and graph.pattern != NVLS:  # "falling back to simple order"
            graph.intra = [list(range(ngpus))]
            graph.inter = [[self.nets[0], self.nets[0]]] if self.nets else []
            graph.bw_intra = graph.bw_inter = 0.1
            graph.type_intra = graph.type_inter = PathType.SYS
            graph.nchannels = 1
        return graph

    def _raise(self, tmp: Graph, graph: Graph) -> bool:
        """Pass 2: try the next higher speed, keeping at least the channels found."""
        if graph.pattern == RING:
            self.idx -= 1
            tmp.bw_intra = tmp.bw_inter = self.speed[self.idx]
            return True
        if graph.pattern == NVLS and tmp.bw_inter == graph.bw_inter and tmp.bw_inter < 2 * tmp.bw_intra:
            tmp.min_channels = tmp.max_channels = graph.nchannels
            self.idx -= 1
            tmp.bw_inter = self.speed[self.idx]
            return True
        if tmp.bw_intra == graph.bw_intra and tmp.bw_intra < 2 * tmp.bw_inter:  # trees: raise intra only
            self.idx -= 1
            tmp.bw_intra = self.speed[self.idx]
            return True
        return False

    def _relax(self, tmp: Graph, graph: Graph, time: int) -> bool:
        """Pass 1 without a perfect result: set up the next variant to search, if any."""
        sys, speed = self.sys, self.speed
        if tmp.same_channels and not (sys.cpu_vendor == "amd" and tmp.type_intra == PathType.SYS):
            tmp.same_channels = False
            return True
        tmp.same_channels = graph.pattern != NVLS
        self.global_timeout = self.global_timeout + time if time != -1 else SEARCH_BUDGET['global']
        if self.global_timeout < 0 and graph.nchannels:
            return False
        if sys.sm_version >= 90 and tmp.pattern == BALANCED_TREE:
            tmp.pattern = TREE
            return True
        tmp.pattern = graph.pattern
        max_intra = tmp.type_inter if sys.inter else self.intra_range[1]
        if tmp.type_intra < max_intra and (graph.nchannels == 0 or tmp.type_intra < graph.type_intra):
            tmp.type_intra = PathType(tmp.type_intra + 1)
            if tmp.type_intra < PathType.DIS:
                return True
        tmp.type_intra = self.intra_range[0]
        if sys.inter and tmp.type_inter < self.inter_range[1] and (
                graph.nchannels == 0 or tmp.type_inter < graph.type_inter or tmp.type_inter < PathType.PXN):
            tmp.type_inter = PathType(tmp.type_inter + 1)
            if tmp.type_inter < PathType.DIS:
                return True
        tmp.type_inter = self.inter_range[0]
        if self.cross_nic == 2 and tmp.cross_nic == 0 and graph.pattern in (RING, BALANCED_TREE):
            tmp.cross_nic = 2
            return True
        tmp.cross_nic = 0
        slower = speed[self.idx + 1] if self.idx < len(speed) - 1 else 0.0
        if slower and (graph.nchannels == 0 or slower / graph.bw_inter > 0.49):
            self.idx += 1
            tmp.bw_intra = tmp.bw_inter = speed[self.idx]
            return True
        self.idx = 0
        while speed[self.idx] > self.max_bw and self.idx < len(speed) - 1:
            self.idx += 1
        tmp.bw_intra = tmp.bw_inter = speed[self.idx]
        return False

    def _max_bw(self) -> float:
        if not self.sys.inter and self.ngpus == 1:
            return LOC_BW
        targets = self.nets if self.sys.inter else self.gpus
        return max((p.bw for g in self.gpus for t in targets if t is not g and (p := self.sys.path(g, t))),
                   default=0.0)

    def _total_bw(self) -> float:
        if not self.sys.inter and self.ngpus == 1:
            return LOC_BW
        best = 0.0
        for g in self.gpus:
            nvl = sum(lk.bw for lk in g.links if lk.kind == "nvl")
            pci = next((lk.bw for lk in reversed(g.links) if lk.kind == "pci"), 0.0)
            best = max(best, nvl, pci)
        return best

    # ---- recursive search -----------------------------------------------------------------
    def _search(self, tmp: Graph, best: Graph, time: int) -> tuple[int, Graph]:
        """One ``ncclTopoSearchRec`` run; returns the time left and the best graph.

        A search that repeats an earlier fruitless one (same speeds and options, path-type
        limits that admit the same paths) is not run again: it would find nothing again.
        """
        key = (tmp.pattern, tmp.bw_intra, tmp.bw_inter, tmp.same_channels, tmp.cross_nic, tmp.min_channels,
               tmp.max_channels, time, self._effective(tmp.type_intra, True),
               self._effective(tmp.type_inter, False))
        if key in self.fruitless:
            return self.fruitless[key], best
        self.best, self.time = best, [time]
        tmp.intra = [[0] * self.ngpus for _ in range(tmp.max_channels)]
        tmp.inter = [[None, None] for _ in range(tmp.max_channels)]
        tmp.hops = 0
        self.used = {}
        self._rec(tmp)
        if self.best is best:
            self.fruitless[key] = self.time[0]
        return self.time[0], self.best

    def _effective(self, limit: PathType, intra: bool) -> PathType:
        """The largest path type in use that ``limit`` admits (limits between types act alike)."""
        if intra not in self.present:
            nodes = [*self.gpus, *([self.nvs] if self.nvs else [])]
            others = nodes if intra else self.nets
            self.present[intra] = sorted({p.type for a in nodes for b in others if a is not b
                                          for p in (self.sys.path(a, b), self.sys.path(b, a)) if p})
        admitted = [t for t in self.present[intra] if t <= limit]
        return admitted[-1] if admitted else PathType.LOC

    def _rec(self, g: Graph) -> None:
        back_net, back_first = self._params(g)
        if self.inter:
            self._rec_net(g, back_net, back_first)
            return
        if g.pattern == NVLS:
            self._try_gpu(g, 0, back_net, back_first, 0, None, g.nchannels)
            return
        if g.nchannels == 0:
            self._try_gpu(g, 0, back_net, back_first, _PCI_ORDER, None, 0)
        else:
            self._try_gpu(g, 0, back_net, back_first, _REPLAY, None, g.intra[g.nchannels - 1][0])
        if not g.same_channels or g.nchannels == 0:
            for i in range(self.ngpus):
                self._try_gpu(g, 0, back_net, back_first, 0, None, i)

    def _params(self, g: Graph) -> tuple[int, int]:
        if self.inter:
            return (self.ngpus - 1 if g.pattern == RING else 0), -1
        return -1, (self.ngpus - 1 if g.pattern == RING else -1)

    def _try_gpu(self, g: Graph, step: int, back_net: int, back_first: int, forced: int,
                 src: Node | None, gi: int) -> None:
        gpu = self.gpus[gi]
        if not self._follow(g, src, gpu, 1):
            return
        c = g.nchannels
        self.used[c] = self.used.get(c, 0) | (1 << gi)
        self._rec_gpu(g, gi, step, back_net, back_first, forced)
        self.used[c] &= ~(1 << gi)
        self._follow(g, src, gpu, -1)

    def _rec_gpu(self, g: Graph, gi: int, step: int, back_net: int, back_first: int, forced: int) -> None:
        if self.time[0] <= 0:
            return
        self.time[0] -= 1
        n = self.ngpus
        if step == n:
            g.nchannels += 1
            if _better(g, self.best, n):
                self.best = _snapshot(g)
                if g.nchannels == g.max_channels:
                    self.time[0] = -1
            if g.nchannels < g.max_channels:
                self._rec(g)
            g.nchannels -= 1
            return
        g.intra[g.nchannels][step] = gi
        gpu = self.gpus[gi]
        if step == back_net:
            self._back_to_net(g, gi, step, back_first, forced)
        elif g.pattern == NVLS:
            self._try_nvls(g, gi)
        elif step < n - 1:
            for nxt in self._next_gpus(g, gi, step, back_net, forced):
                self._try_gpu(g, step + 1, back_net, back_first, forced, gpu, nxt)
        elif step == back_first:
            first = self.gpus[g.intra[g.nchannels][0]]
            if self._follow(g, gpu, first, 1):
                self._rec_gpu(g, first.index, step + 1, back_net, -1, forced)
                self._follow(g, gpu, first, -1)
        else:
            self._rec_gpu(g, gi, n, -1, -1, forced)

    def _next_gpus(self, g: Graph, gi: int, step: int, back_net: int, forced: int) -> list[int]:
        if forced == _PCI_ORDER:
            return [step + 1]
        if forced == _REPLAY:
            return [g.intra[g.nchannels - 1][step + 1]]
        sort_net = 0 if back_net == -1 else (1 if back_net == step + 1 else -1)
        return self._sorted_next(g, gi, sort_net)

    def _sorted_next(self, g: Graph, gi: int, sort_net: int) -> list[int]:
        """``ncclTopoSearchNextGpuSort``: untried GPUs, best connected first."""
        used = self.used.get(g.nchannels, 0)
        start_net = g.inter[g.nchannels][0] if sort_net else None
        key = (gi, start_net, sort_net, used, g.pattern)
        if key in self.order_cache:
            return self.order_cache[key]
        n = self.ngpus
        scored = [(score, cand) for score, cand in self._scores(gi, start_net) if not used >> cand & 1]
        order = [c for _, c in scored]
        if sort_net == -1 and len({s[3:5] for s, _ in scored}) <= 1:
            order.reverse()
        if self.nvs is not None:  # NVSwitch: only index neighbours, the last listed tried first
            firsts = [(gi + 1) % n, (gi - 1) % n] if g.pattern == RING else (
                [(gi - 1) % n, (gi + 1) % n] if g.pattern == BALANCED_TREE else [(gi + 1) % n])
            order = [f for f in reversed(list(dict.fromkeys(firsts))) if f in order]
        self.order_cache[key] = order
        return order

    def _scores(self, gi: int, start_net: Node | None) -> list[tuple[tuple, int]]:
        """Sort keys of every other GPU seen from ``gi`` (cached: they depend on the topology only)."""
        key = (gi, start_net)
        if key not in self.score_cache:
            gpu, scores = self.gpus[gi], []
            for i in range(1, self.ngpus):
                cand = (gi + i) % self.ngpus
                path = self.sys.path(gpu, self.gpus[cand])
                if path is None:
                    continue
                inter = (0, 0, 0)
                net_path = self.sys.path(start_net, self.gpus[cand]) if start_net is not None else None
                if net_path is not None:
                    pci = next((lk.bw for lk in self.gpus[cand].links if lk.kind == "pci"), -1.0)
                    inter = (int(net_path.bw), int(pci), len(net_path.links))
                scores.append(((-inter[0], -inter[1], inter[2], -int(path.bw), len(path.links), i), cand))
            self.score_cache[key] = sorted(scores)
        return self.score_cache[key]

    def _try_nvls(self, g: Graph, head: int) -> None:
        nvs = self.nvs
        done_down = done_up = 0
        ok = True
        for d in range(self.ngpus):
            if not self._follow(g, nvs, self.gpus[d], 2 if d == head else 1):
                ok = False
                break
            done_down += 1
        if ok:
            for d in range(self.ngpus):
                if not self._follow(g, self.gpus[d], nvs, 2 if d == head else 1):
                    ok = False
                    break
                done_up += 1
            if ok:
                self._rec_gpu(g, head, self.ngpus, -1, -1, 0)
        for d in range(done_up):
            self._follow(g, self.gpus[d], nvs, -2 if d == head else -1)
        for d in range(done_down):
            self._follow(g, nvs, self.gpus[d], -2 if d == head else -1)

    # ---- network --------------------------------------------------------------------------
    def _rec_net(self, g: Graph, back_net: int, back_first: int) -> None:
        bw = int(g.bw_inter)  # NCCL keeps it in an int here
        nets = self._select_nets(g.type_inter, None)
        found = False
        for i in range(len(nets)):
            if g.pattern == NVLS and found:
                break
            net = nets[(g.nchannels + i) % len(nets)]
            if net.net_bw < bw:
                continue
            if (g.pattern == RING and g.cross_nic == 2 and g.nchannels % 2 == 1
                    and net is not g.inter[g.nchannels - 1][1]):
                continue
            g.inter[g.nchannels][0] = net
            net.net_bw -= bw
            if g.pattern == NVLS:
                if g.nchannels < len(nets):
                    locals_, _ = self._local_gpus(net)
                    heads = {g.intra[c][0] for c in range(g.nchannels)}
                    if locals_ and locals_[0].index not in heads:
                        self._try_gpu(g, 0, back_net, back_first, 0, net, locals_[0].index)
                        found = True
            elif g.nchannels > 0 and g.same_channels:
                self._try_gpu(g, 0, back_net, back_first, _REPLAY, net, g.intra[g.nchannels - 1][0])
            else:
                if g.nchannels == 0 and self.nvs is None:
                    saved, self.time = self.time, [1 << 10]
                    self._try_gpu(g, 0, back_net, back_first, _PCI_ORDER, net, 0)
                    if self.time[0] == -1:
                        saved[0] = -1
                    self.time = saved
                locals_, ptype = self._local_gpus(net)
                if ptype != _DIS:
                    for gpu in locals_:
                        self._try_gpu(g, 0, back_net, back_first, 0, net, gpu.index)
            net.net_bw += bw

    def _local_gpus(self, net: Node) -> tuple[list[Node], PathType]:
        if net not in self.local_cache:
            self.local_cache[net] = self.sys.local(net, "gpu")
        return self.local_cache[net]

    def _back_to_net(self, g: Graph, gi: int, step: int, back_first: int, forced: int) -> None:
        gpu = self.gpus[gi]
        start = g.inter[g.nchannels][0]
        nets = self._select_nets(g.type_inter, gpu)
        if g.cross_nic == 0 or g.pattern in (TREE, NVLS):
            nets = (start,) if start in nets else ()  # only the NIC the channel came in by
        for net in nets:
            if not self._check_net(g, start, net, step):
                continue
            next_back, saved = -1, g.bw_inter
            if g.pattern == BALANCED_TREE:  # the first two GPUs each send half to the NIC
                next_back = 1 if step == 0 else -1
                g.bw_inter /= 2
            ok = self._follow(g, gpu, net, 1)
            g.bw_inter = saved
            if ok:
                g.inter[g.nchannels][1] = net
                self._rec_gpu(g, gi, step, next_back, back_first, forced)
                if g.pattern == BALANCED_TREE:
                    g.bw_inter /= 2
                self._follow(g, gpu, net, -1)
                g.bw_inter = saved

    def _check_net(self, g: Graph, start: Node, net: Node, step: int) -> bool:
        if g.pattern in (TREE, NVLS) and net is not start:
            return False
        if g.pattern == RING and g.cross_nic == 2:
            if g.nchannels % 2 == 1 and net is not g.inter[g.nchannels - 1][0]:
                return False
        elif g.cross_nic == 0 and net is not start:
            return False
        return not (g.pattern == BALANCED_TREE and step != 0 and net is not g.inter[g.nchannels][1])

    def _select_nets(self, type_inter: PathType, gpu: Node | None) -> list[Node]:
        """``ncclTopoSelectNets``: each GPU's nearest NICs first, then any within ``type_inter``."""
        key = (type_inter, gpu)
        if key in self.net_cache:
            return self.net_cache[key]
        gpus = self.gpus if gpu is None else [gpu]
        out: list[Node] = []
        for g in gpus:
            for net in self.sys.local(g, "net")[0]:
                if net not in out:
                    out.append(net)
        for t in range(type_inter + 1):
            for g in gpus:
                for net in self.nets:
                    p = self.sys.path(g, net)
                    if p is not None and p.type == t and net not in out:
                        out.append(net)
        self.net_cache[key] = out
        return out

    # ---- bandwidth accounting ---------------------------------------------------------------
    def _follow(self, g: Graph, src: Node | None, dst: Node, mult: float) -> bool:
        """``ncclTopoFollowPath``: take (``mult`` > 0) or give back one channel's bandwidth.

        The search calls this millions of times, so a path's links are looked up once
        (``_path_links``) and the bandwidth in MB/s once per speed (``needs``).
        """
        if src is None:
            return True
        entry = self.follow_cache.get((src, dst))
        if entry is None:
            entry = self.follow_cache[src, dst] = self._path_links(src, dst)
        ptype, rev_type, intra, plain, pci = entry
        if ptype >= _DIS:
            return False
        bw = (g.bw_intra if intra else g.bw_inter) * mult
        needs = self.needs.get(bw)
        if needs is None:
            needs = self.needs[bw] = (round(bw * 1000), round(bw * 1200))
        need, need_pci = needs
        cap = self.cap
        if mult > 0:
            limit = g.type_intra if intra else g.type_inter
            if ptype > limit or (rev_type > limit and g.pattern in (BALANCED_TREE, TREE)):
                return False
            for link in plain:
                if cap[link] < need:
                    return False
            for link in pci:
                if cap[link] < need_pci:
                    return False
        for link in plain:  # followPath: all links or none
            cap[link] -= need
        for link in pci:
            cap[link] -= need_pci
        g.hops += len(plain) + len(pci) if mult > 0 else -len(plain) - len(pci)
        return True

    def _path_links(self, src: Node, dst: Node) -> tuple:
        """(path type, reverse path type, intra-node, links at full cost, PCIe links at 6/5 cost)."""
        path, rev = self.sys.path(src, dst), self.sys.path(dst, src)
        intra = src.kind in ("gpu", "nvs") and dst.kind in ("gpu", "nvs")
        # Intel root complexes split GPU P2P into 64 B TLPs: PCIe hops cost 6/5 of the bandwidth
        pci_factor = (path is not None and path.type == PathType.PHB and src.kind == "gpu"
                      and self.sys.cpu_vendor == "intel")
        links = path.links if path else []
        plain = tuple(lk for lk in links if not (pci_factor and lk.kind == "pci"))
        pci = tuple(lk for lk in links if pci_factor and lk.kind == "pci")
        return (int(path.type) if path else _DIS, int(rev.type) if rev else _DIS, intra, plain, pci)


_DIS = int(PathType.DIS)


def _better(g: Graph, ref: Graph, ngpus: int) -> bool:
    """``ncclTopoCompareGraphs``."""
    if g.nchannels < g.min_channels:
        return False
    if g.pattern == NVLS:
        return ((ref.nchannels < g.nchannels <= ngpus)
                or g.nchannels * g.bw_inter > ref.nchannels * ref.bw_inter)
    if g.nchannels * g.bw_intra != ref.nchannels * ref.bw_intra:
        return g.nchannels * g.bw_intra > ref.nchannels * ref.bw_intra
    return g.pattern == ref.pattern and g.cross_nic == ref.cross_nic and g.hops < ref.hops


def _snapshot(g: Graph) -> Graph:
    snap = copy.copy(g)
    snap.intra = [list(ch) for ch in g.intra[:g.nchannels]]
    snap.inter = [list(ch) for ch in g.inter[:g.nchannels]]
    return snap


def _dup_channels(g: Graph, sm_version: int) -> None:
    """``ncclTopoDupChannels``: two channels per fast search channel, at half the speed."""
    if g.nchannels == 0 or g.pattern == NVLS or g.bw_intra < 25.0:
        return
    if sm_version > 80 and g.bw_intra < 50.0 and g.nchannels > 4:
        return
    dup = min(2 * g.nchannels, g.max_channels)
    factor = math.ceil(dup / g.nchannels)
    g.intra = (g.intra * 2)[:dup]
    g.inter = (g.inter * 2)[:dup]
    g.bw_intra /= factor
    g.bw_inter /= factor
    g.nchannels = dup
