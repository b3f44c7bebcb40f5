"""What changed in NCCL's tuning between releases 2.8 and 2.30: one table, keyed by first release.

``CHANGES`` lists, oldest first, the release a fact first holds for, where it was read (file @ git
tag of github.com/NVIDIA/nccl) and the facts that changed there; :func:`facts` folds every entry
up to a version into one :class:`ReleaseFacts`.  Tables are indexed like NCCL's: ``[algo][proto]``
in :class:`~tuner.config.Algo` / :class:`~tuner.config.Proto` order (an algorithm a release lacks
has a zero row), compute-capability rows Volta/Ampere/Hopper/Blackwell, node columns N1/N2/N4+.

>>> facts((2, 8, 4)).algorithms
('tree', 'ring', 'collnet_chain')
>>> facts((2, 28, 9)).ring_ll_factor, facts((2, 20, 3)).ring_ll_factor
(0.5, 0.25)
>>> [f"{v[0]}.{v[1]}.{v[2]}" for v in introduced("algorithms")][:4]
['2.8.3', '2.14.3', '2.17.1', '2.18.1']
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache

from tuner.knobs import NEWEST_MODELLED_VERSION as NEWEST
from tuner.knobs import OLDEST_NCCL_VERSION as OLDEST

Version = tuple[int, int, int]

_Z = (0.0, 0.0, 0.0)


def _lat(tree, ring, cnd=_Z, cnc=_Z, nvls=_Z, nvls_tree=_Z, pat=_Z) -> tuple:
    return (tree, ring, cnd, cnc, nvls, nvls_tree, pat)


def _rows(volta, ampere, hopper=None, blackwell=None) -> tuple:
    """Arch rows; a release without a row for an arch indexes the previous one."""
    hopper = hopper or ampere
    return (volta, ampere, hopper, blackwell or hopper)


@dataclass(frozen=True)
class ReleaseFacts:
    """The release-dependent facts of NCCL's cost model, algorithm choice and init."""

    algorithms: tuple[str, ...]
    """Algorithms the release has, in index order (:class:`~tuner.config.Algo` values)."""
    gather_algos: tuple[str, ...]
    """Algorithms with an AllGather/ReduceScatter cost entry (``ncclTopoTuneModel``'s coll filter)."""
    algo_names: tuple[str, ...]
    """``ncclAlgoStr``: the names ``NCCL_ALGO`` accepts (case-insensitive), same order."""
    env_prefixes: bool
    """``NCCL_ALGO``/``NCCL_PROTO`` take ``func:`` prefixes and reject unknown names (else one
    list, unknown names ignored)."""
    base_lat: tuple
    hw_lat: tuple  # [NVLink, PCI, NET][algo][proto]
    ll_max: tuple  # llMaxBws rows; on several nodes NCCL picks the row by CPU vendor (0 Intel/other, 1 AMD)
    ring_ll128: tuple | None  # perChMaxRingLL128Bws rows x N1/N2/N4; None: ll128_per_coll
    tree_ll128: tuple | None
    ll128_per_coll: tuple | None
    """2.8/2.9 ``ll128MaxBwPerCh[coll]``: Broadcast, Reduce, AllGather, ReduceScatter, AllReduce."""
    tree: tuple  # perChMaxTreeBws rows x N1/N2/N4
    arch_rows: str
    """How the arch row is picked: "sm80" (row 1 only for a pure sm80 communicator), "exact" (row 1
    for pure sm80, row 2 for pure sm90, else 0), "3" or "4" tiers (Volta/Ampere/Hopper[/Blackwell]
    by minimum compute capability)."""
    ampere_bus_cap: float | None  # busBw ≤ 235 GB/s on Ampere
    ring_ll_factor: float  # Ring LL busBw factor (1/4, or 1/3 for single-node AllGather/RS/Bcast)
    ring_ll128_ppn1: float | None  # Ring LL128 factor at < 2 ranks per node (else 0.92)
    tree_ll128_net: float  # Tree LL128 factor on several nodes
    ll_intra_net_factor: float | None  # intraLat ×1.8 for LL on several nodes
    plateau: str  # ring Simple AllReduce plateau: "total" (nBytes ≥ nRanks/16×64 KiB) or "per_channel"
    plateau_factor: tuple[float, float, int]  # (below, from, the sm boundary)
    tree_correction_ll128: tuple
    ll128_archs: tuple[int, ...] | None  # sm versions with LL128 by default; None: every sm ≥ 70
    ll128_pxn_hopper: bool  # Hopper+ accept NICs through PXN for LL128
    ll128_intra_nvb: bool  # LL128 also over NVB (else NVL only)
    pxn: bool  # a GPU sends to a NIC through the NIC's nearest GPU over NVLink (PXN, paths.cc)
    net_overhead: bool  # 1 µs (2 on AMD) per network step, ≥ 2.18
    tree_split_factor: bool  # Tree ×0.85 when the search fell back to plain trees
    max_channels: int  # MAXCHANNELS
    net_peer_channels: int  # p2p channels per network peer (NCCL_NCHANNELS_PER_NET_PEER's default)
    simple_sync_warps: tuple[int, ...]
    """Warps ``getAlgoInfo`` adds to a Simple kernel, per algorithm (sync and split-thread warps)."""
    min_warps: int  # the fewest warps a kernel gets (≥ 2.19: 3)
    tree_all_threads: bool  # ≥ 2.22: "Tree now uses all threads always" (and PAT)
    search_speeds: tuple | None
    """(intra, inter) speed lists ``ncclTopoCompute`` tries on GPUs older than Hopper, GB/s per
    channel, highest first (``speedArray`` in ``src/graph/search.cc``); None: the 2.18+ lists of
    ``graph_search.SPEED_INTRA``/``SPEED_INTER``."""
    sm80_nvlink_bw: float
    """GB/s NCCL counts per A100 NVLink (``SM80_NVLINK_WIDTH``/``_BW`` in ``src/graph/topo.h``)."""
    ring_chunk_quantum: bool
    """2.8 – 2.19: a ring kernel's last loop rounds each rank's piece per channel up to a whole
    quantum (``ring_quantum_bytes``), so a call that does not fill its channels evenly steps at the
    rounded piece while the ranks past the data idle; from 2.20 the host splits it evenly."""
    tree_simple_chunking: bool
    """2.8 – 2.19: a Tree Simple AllReduce halves its chunk down to 128, 64, 32 KiB while the call
    has fewer than ``8×``, ``4×``, ``1×`` the tree's depth chunks per channel (``computeColl``,
    ``src/enqueue.cc`` @ v2.8.4-1 – v2.19.3-1, ``channels[0].tree.depth``); from 2.20 the chunk
    is the FIFO step (``calcCollChunking`` @ v2.20.3-1 has no such loop)."""
    tree_up_down: tuple[str, ...]
    """Protocols (``Proto`` values) whose Tree AllReduce CTA runs the reduce up over all its data,
    then the broadcast down, each pass on all its threads (``runTreeUpDown``); the others split
    their threads between the passes, which run side by side (``runTreeSplit``, ``tree_split``).
    2.8 – 2.9: LL (two ``do {…} while(0)`` loops on every thread) and Simple (the ``#if 1``
    branch), LL128 split (``NCCL_LL128_SPLIT``), ``src/collectives/device/all_reduce.h`` @
    v2.8.4-1 and v2.9.9-1.  From 2.10.3 every protocol splits (``runTreeSplit`` @ v2.10.3-1 –
    v2.28.9-1) except Simple built with CUDA 11.2 – 11.3 for sm80 (``#if CUDART_VERSION >= 11020
    && CUDART_VERSION < 11040 && __CUDA_ARCH__ >= 800``), which the twin leaves out: it does not
    know the toolkit a build used."""
    tree_pattern_pre_sm80: str
    """The pattern of the tree search (``twin.model.dtree.entry_gpu``) on more than two nodes of
    GPUs older than sm_80: 2.8 – 2.9 ``"split"`` (``ncclTopoCompute``: "SPLIT_TREE works better on
    older archs", ``src/graph/search.cc`` @ v2.8.4-1, v2.9.9-1), from 2.10.3 ``"balanced"`` as on
    every other GPU (no such line @ v2.10.3-1 – v2.28.9-1; ``init.cc`` asks for BALANCED_TREE)."""
    plain_tree_on_two_nodes: bool
    """2.8 – 2.9: on two nodes or fewer ``init.cc`` asks for ``NCCL_TOPO_PATTERN_TREE`` (``tmpNnodes
    <= 2``, @ v2.8.4-1, v2.9.9-1), from 2.10.3 for BALANCED_TREE at any count.  On two nodes both
    trees' one network link is a root's upper child (``ncclGetBtree``), so only SPLIT differs."""
    cell_scheduler: bool
    """≥ 2.22: ``scheduleCollTasksToPlan`` fills channels in cells of ≥ 16 KiB and sizes chunks per
    channel part; before, every channel ``getAlgoInfo`` kept gets ``nBytes / nChannels``."""
    host_work_fifo: str
    """Which CTAs of a collective kernel read their work from NCCL's FIFO in host memory, across
    PCIe, before they start: ``"after_first"`` (2.8 – 2.12: block 0 takes the first work from the
    kernel argument, every other CTA copies its ``ncclWork`` out of ``channel->workFifo``,
    ``ncclCudaHostCalloc``'d), ``"every"`` (2.13 – 2.21: each CTA copies ``workHead +
    blockIdx.x``, ``comm->workFifoHeap`` in ``cudaHost`` memory) or ``"none"`` (≥ 2.22.3: the work
    travels in the kernel's 4 KiB of arguments)."""


_SPEEDS_2_8 = (42.0, 30.0, 24.0, 21.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
"""``speedArray`` of ``src/graph/search.cc`` @ v2.8.4-1 (and v2.9.9-1)."""
_SPEEDS_2_10 = ((44.0, 30.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                (48.0, 30.0, 24.0, 22.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
                 0.12))
"""``speedArrayIntra``/``speedArrayInter`` of ``src/graph/search.cc`` @ v2.10.3-1 – v2.17.1-1."""

# (first release, where read, facts changed there)
CHANGES: tuple[tuple[Version, str, dict], ...] = (
    ((2, 8, 3), "src/graph/tuning.cc, src/include/devcomm.h @ v2.8.4-1", dict(
        algorithms=("tree", "ring", "collnet_chain"),  # 2.8's CollNet: a chain up to the head, then the net
        algo_names=("Tree", "Ring", "CollNet"), gather_algos=("ring",), pxn=False,
        env_prefixes=False,
        base_lat=_lat((4.4, 4.4, 0.0), (3.6, 10.0, 8.4), cnc=(4.4, 4.4, 0.0)),
        hw_lat=(_lat((.52, 1.25, 28.0), (.47, 1.9, 3.4), cnc=(.5, 1.2, 4.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), cnc=(1.0, 1.9, 5.5)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 9.6), cnc=(5.0, 5.0, 10.7))),
        ll_max=_rows((39.0, 39.0, 20.4), (87.7, 22.5, 19.0)),
        ring_ll128=None, tree_ll128=None, ll128_per_coll=(18.8, 12.0, 18.3, 15.2, 16.9),
        tree=_rows((26.5, 18.5, 10.0), (24.0, 22.5, 16.0)),
        arch_rows="sm80", ampere_bus_cap=235.0, ring_ll_factor=0.25, ring_ll128_ppn1=0.7,
        tree_ll128_net=0.915, ll_intra_net_factor=1.8, plateau="total", plateau_factor=(1.9, 1.9, 0),
        tree_correction_ll128=(1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7,
                               .8, .9, .9, .92, .92),
        ll128_archs=(70, 80), ll128_pxn_hopper=False, ll128_intra_nvb=False, net_overhead=False,
        tree_split_factor=False, max_channels=32, net_peer_channels=1, cell_scheduler=False,
        # src/enqueue.cc @ v2.8.4-1 getAlgoInfo: +1 sync warp for Simple, +1 more for Tree
        simple_sync_warps=(2, 1, 1, 1, 1, 1, 1), min_warps=0, tree_all_threads=False,
        # src/graph/search.cc @ v2.8.4-1: one speedArray for rings and trees, inside and between
        # nodes; src/graph/topo.h: SM80_NVLINK_WIDTH 21.0 (DGX A100: 6 rings at 42 GB/s, split
        # into 12 at 21, 24 channels)
        search_speeds=(_SPEEDS_2_8, _SPEEDS_2_8), sm80_nvlink_bw=21.0,
        # src/collectives/device/all_reduce.h, all_gather.h, reduce_scatter.h @ v2.8.4-1 (and
        # src/device/all_reduce.h @ v2.19.3-1): realChunkSize / chunkSize rounded up to minChunkSize
        ring_chunk_quantum=True, tree_simple_chunking=True,
        # src/collectives/device/all_reduce.h @ v2.8.4-1, v2.9.9-1: Tree LL and Simple up, then down
        tree_up_down=("ll", "simple"), tree_pattern_pre_sm80="split", plain_tree_on_two_nodes=True,
        # src/collectives/device/common.h @ v2.8.4-1: ncclKernel passes the first work as argument
        # to block 0; load_coll copies the rest from channel->workFifo (src/channel.cc:
        # ncclCudaHostCalloc) and reads *comm->abortFlag, both in host memory
        host_work_fifo="after_first",
    )),
    ((2, 10, 3), "src/graph/tuning.cc, src/enqueue.cc, src/graph/search.cc, src/graph/topo.h @ v2.10.3-1 "
                 "(Tree/CollNet Simple +3 warps; speedArrayIntra/Inter, SM80_NVLINK_WIDTH 22); "
                 "src/collectives/device/all_reduce.h (every Tree protocol runTreeSplit)", dict(
        search_speeds=_SPEEDS_2_10, sm80_nvlink_bw=22.0, tree_up_down=(), tree_pattern_pre_sm80="balanced",
        plain_tree_on_two_nodes=False,
        simple_sync_warps=(4, 1, 4, 4, 1, 1, 1),
        hw_lat=(_lat((.52, 1.25, 28.0), (.47, 1.9, 3.4), cnc=(.5, 1.2, 8.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), cnc=(1.0, 1.9, 8.0)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 9.6), cnc=(5.0, 5.0, 10.7))),
        ring_ll128=_rows(*[(20.0,) * 3] * 2), tree_ll128=_rows(*[(20.0,) * 3] * 2), ll128_per_coll=None,
        tree=_rows((26.5, 18.5, 10.0), (24.0, 23.6, 17.8)), tree_ll128_net=120.0 / 128.0,
        tree_correction_ll128=(1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9,
                               .9, .9, .9, 1.0, 1.0),
    )),
    ((2, 12, 7), "src/graph/tuning.cc, src/graph/paths.cc @ v2.12.7-1 (NET Ring/Simple 9.6 -> 28 µs; "
                 "NCCL_NCHANNELS_PER_NET_PEER, default 2)", dict(
        net_peer_channels=2, pxn=True,
        hw_lat=(_lat((.52, 1.25, 28.0), (.47, 1.9, 3.4), cnc=(.5, 1.2, 8.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), cnc=(1.0, 1.9, 8.0)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 28.0), cnc=(5.0, 5.0, 10.7))),
    )),
    ((2, 13, 4), "src/collectives/device/common.h @ v2.13.4-1 (every CTA copies its work from workHead, "
                 "the host FIFO)", dict(host_work_fifo="every")),
    ((2, 14, 3), "src/graph/tuning.cc @ v2.14.3-1 (CollNet split into Direct and Chain)", dict(
        algorithms=("tree", "ring", "collnet_direct", "collnet_chain"),
        algo_names=("Tree", "Ring", "CollNetDirect", "CollNetChain"),
        base_lat=_lat((4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (4.4, 4.4, 0.0), (4.4, 4.4, 0.0)),
        hw_lat=(_lat((.52, 1.25, 28.0), (.47, 1.9, 3.4), (0, 0, 8.0), (0, 0, 8.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 8.0), (0, 0, 8.0)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 9.6), (0, 0, 10.7), (0, 0, 10.7))),
    )),
    ((2, 15, 1), "src/graph/tuning.cc @ v2.15.1-1 (Hopper rows for a pure sm90 communicator)",
     dict(arch_rows="exact")),
    ((2, 16, 2), "src/graph/tuning.cc @ v2.16.2-1 (LL128 on sm90)", dict(ll128_archs=(70, 80, 90))),
    ((2, 17, 1), "src/graph/tuning.cc, src/graph/search.cc @ v2.17.1-1 (NVLS)", dict(
        algorithms=("tree", "ring", "collnet_direct", "collnet_chain", "nvls"),
        algo_names=("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS"), gather_algos=("ring", "nvls"),
        base_lat=_lat((4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (4.4, 4.4, 0.0), (4.4, 4.4, 0.0), (0, 0, 40.0)),
        ring_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7,) * 3),
        tree_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7,) * 3),
        tree=_rows((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 33.0)),
        plateau_factor=(1.9, 1.5, 90), ll128_pxn_hopper=True, arch_rows="3",
        simple_sync_warps=(4, 1, 4, 4, 0, 0, 1),  # src/enqueue.cc @ v2.17.1-1: NVLS takes NCCL_MAX_NTHREADS
    )),
    ((2, 18, 1), "src/graph/tuning.cc, src/graph/search.cc, src/graph/topo.h @ v2.18.1-1 (NVLSTree, new "
                 "latencies, net overhead; speed lists 40/48 GB/s first, SM80_NVLINK_BW 20)", dict(
        search_speeds=None, sm80_nvlink_bw=20.0,
        algorithms=("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"),
        algo_names=("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"),
        gather_algos=("ring",),  # 2.18 drops NVLS AllGather/ReduceScatter from the model; 2.19 restores it
        base_lat=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (6.8, 14.0, 0.0), (6.8, 14.0, 0.0), (0, 0, 23.0),
                      (0, 0, 23.0)),
        hw_lat=(_lat((.6, 1.25, 28.0), (.6, 1.9, 3.4), (0, 0, 8.0), (0, 0, 4.75)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 8.0), (0, 0, 8.0)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0, 0, 10.7), (0, 0, 14.0), (0, 0, 18.0), (0, 0, 19.0))),
        ampere_bus_cap=None, ll_intra_net_factor=None, plateau="per_channel", plateau_factor=(1.9, 1.4, 80),
        net_overhead=True, tree_split_factor=True,
    )),
    ((2, 18, 5), "src/graph/tuning.cc @ v2.18.5-1", dict(
        hw_lat=(_lat((.6, 1.25, 4.0), (.6, 1.9, 3.4), (0, 0, 8.0), (0, 0, 4.75)),
                _lat((1.0, 1.9, 6.0), (1.0, 2.5, 5.7), (0, 0, 8.0), (0, 0, 8.0)),
                _lat((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0, 0, 10.7), (0, 0, 14.0), (0, 0, 18.0), (0, 0, 19.0))),
        ring_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7,) * 3),
        tree_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0)),
        tree=_rows((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0)),
    )),
    ((2, 19, 1), "src/graph/tuning.cc, src/enqueue.cc @ v2.19.1-1 (sync warps: Ring +1, Tree +4; ≥ 3 warps)", dict(
        gather_algos=("ring", "nvls"),
        simple_sync_warps=(4, 1, 0, 0, 0, 0, 0), min_warps=3,
        base_lat=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4)),
        hw_lat=(_lat((.6, 1.25, 28.0), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 23.0), (0, 0, 23.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0, 0, 31.0), (0, 0, 30.0), (0, 0, 18.0), (0, 0, 14.0))),
    )),
    ((2, 20, 3), "src/graph/tuning.cc, src/enqueue.cc, src/device/all_reduce.h @ v2.20.3-1 (CollNetDirect "
                 "AllGather/ReduceScatter; the host splits a call over channels, last chunk even: "
                 "computeCollLastChunkInfo)",
     dict(gather_algos=("ring", "nvls", "collnet_direct"), ring_chunk_quantum=False, tree_simple_chunking=False)),
    ((2, 21, 5), "src/graph/tuning.cc @ v2.21.5-1 (Ring LL 1/4 -> 1/2, Hopper LL rows)", dict(
        hw_lat=(_lat((.6, 1.25, 28.0), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25.0), (0, 0, 25.0)),
                _lat((1.0, 1.9, 28.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8)),
                _lat((5.0, 8.5, 28.0), (2.7, 4.0, 14.0), (0, 0, 31.0), (0, 0, 30.0), (0, 0, 18.0), (0, 0, 14.0))),
        ll_max=_rows((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0)), ring_ll_factor=0.5,
    )),
    ((2, 22, 3), "src/enqueue.cc, src/device/common.h @ v2.22.3-1 (channels filled in cells of 16 KiB of "
                 "traffic; work in the kernel arguments: ncclDevWorkStorageTypeArgs)",
     dict(cell_scheduler=True, tree_all_threads=True, host_work_fifo="none")),
    ((2, 23, 4), "src/graph/tuning.cc @ v2.23.4-1 (PAT; Tree/Simple latencies; LL128 over NVB)", dict(
        algorithms=("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"),
        algo_names=("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
        gather_algos=("ring", "nvls", "collnet_direct", "pat"),
        base_lat=_lat((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), pat=(8.0, 8.0, 8.0)),
        hw_lat=(_lat((.6, 1.25, 4.0), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25.0), (0, 0, 25.0),
                     (0, 0, 4.0)),
                _lat((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), pat=(0, 0, 4.0)),
                _lat((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), (0, 0, 31.0), (0, 0, 30.0), (0, 0, 18.0), (0, 0, 14.0),
                     (0, 0, 14.0))),
        ring_ll128_ppn1=None, ll128_intra_nvb=True,
    )),
    ((2, 24, 3), "src/graph/tuning.cc @ v2.24.3-1 (per-function NCCL_ALGO/NCCL_PROTO)", dict(env_prefixes=True)),
    ((2, 25, 1), "src/graph/tuning.cc, src/include/device.h @ v2.25.1-1 (Blackwell rows, 64 channels)", dict(
        arch_rows="4", max_channels=64, ll128_archs=(70, 80, 90, 100, 120),
        ll_max=_rows((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0)),
        ring_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (73.4,) * 3),
        tree_ll128=_rows((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (73.4, 73.4, 58.0)),
        tree=_rows((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0)),
    )),
    ((2, 27, 3), "src/graph/tuning.cc @ v2.27.3-1; 2.27 – 2.30 detail in constants.py", dict(ll128_archs=None)),
)


def check(version: Version) -> None:
    """Refuse a version before the oldest modelled release, naming the range."""
    if tuple(version) < OLDEST:
        name = ".".join(map(str, version))
        raise ValueError(f"NCCL {name} predates the modelled releases ({_name(OLDEST)} – {_name(NEWEST)})")


def facts(version: Version) -> ReleaseFacts:
    """Every entry of ``CHANGES`` up to ``version``, folded (later entries win)."""
    check(version)
    return _folded(tuple(version))


@cache  # a pure function of the release, asked for by every schedule the twin builds
def _folded(version: Version) -> ReleaseFacts:
    merged: dict = {}
    for first, _, changed in CHANGES:
        if first <= tuple(version):
            merged.update(changed)
    return ReleaseFacts(**merged)


def introduced(field: str) -> list[Version]:
    """The releases at which ``field`` changed (for tests and docs)."""
    if field not in {f.name for f in fields(ReleaseFacts)}:
        raise ValueError(f"no release fact {field!r}")
    return [first for first, _, changed in CHANGES if field in changed]


def arch_row(f: ReleaseFacts, sm_version: int) -> int:
    """The table row NCCL indexes for a communicator whose GPUs are all ``sm_version``."""
    if f.arch_rows in ("sm80", "exact"):
        return {80: 1, 90: 2 if f.arch_rows == "exact" else 0}.get(sm_version, 0)
    if f.arch_rows == "4" and sm_version >= 100:
        return 3
    return 2 if sm_version >= 90 else 1 if sm_version >= 80 else 0


def _name(v: Version) -> str:
    return ".".join(map(str, v))
