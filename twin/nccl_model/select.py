"""What stock NCCL picks for one call: algorithm, protocol, channels, threads and chunk.

The order follows ``ncclGetAlgoInfo`` (``src/enqueue.cc``): the cost table's cheapest
entry wins (``topoGetAlgoInfo``: algorithms then protocols in NCCL's index order, strict
``<``, so ties go to the lower index); the same function then trims channels and threads
for small messages; ``scheduleCollTasksToPlan`` spreads the call over channels in cells of
at least 16 KiB of traffic and ``calcCollChunking`` sizes each channel's chunks.

AllToAll and SendRecv are point-to-point in NCCL: no cost table, no algorithm.  For them
:func:`nccl_choice` reports ``Algo.RING`` / ``Proto.SIMPLE`` as placeholder names meaning
"p2p", the p2p channels per peer, NCCL_MAX_NTHREADS threads, the p2p chunk, and a rough
latency + bandwidth time (NCCL itself makes no estimate for p2p).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from traces.task import Op
from tuner.config import Algo, ConfigError, Proto
from tuner.rules import POINT_TO_POINT
from twin.nccl_model.constants import (
    COLLNET_THREAD_THRESHOLD,
    GRAIN_BYTES,
    LL128_DATAELEMS,
    LL128_LINEELEMS,
    LL128_MAX_NTHREADS,
    LL128_SHMEM_ELEMS_PER_THREAD,
    LL_MAX_NTHREADS,
    MAX_NTHREADS,
    MAXCHANNELS,
    MIN_TRAFFIC_PER_CHANNEL,
    NCCL_STEPS,
    NVLS_CHUNK,
    P2P_NET_CHUNK,
    P2P_NVL_CHUNK,
    P2P_PCI_CHUNK,
    PCI_BW,
    SIMPLE_MAX_NTHREADS,
    THREAD_THRESHOLD,
    WARP_SIZE,
    tuner_constants,
)
from twin.nccl_model.cost_table import cost_table, implemented, model_entry
from twin.nccl_model.gib_tuner import GibRule
from twin.nccl_model.gib_txtpb import config_table
from twin.nccl_model.inputs import NcclCommInfo
from twin.nccl_model.ofi_tuner import FIRST_NCCL, PLATFORMS, V3_NCCL, region_pair


@dataclass(frozen=True)
class NcclChoice:
    """NCCL's decision for one call.

    ``nchannels`` is ``topoGetAlgoInfo``'s channel budget (what a tuner plugin's
    ``nChannels`` would replace); ``channels_used`` is how many of them the scheduler
    actually fills (fewer for small messages).  ``chunk_bytes`` is the data carried per
    chunk on a channel.  ``nccl_time_us`` is NCCL's own estimate, not a measurement.
    """

    algo: Algo
    proto: Proto
    nchannels: int
    nthreads: int
    chunk_bytes: int
    nccl_time_us: float
    channels_used: int = 0


def nccl_choice(info: NcclCommInfo, op: Op, nbytes: int, dtype: str = "float32") -> NcclChoice:
    """What NCCL does for ``op`` of ``nbytes`` on this communicator: stock NCCL, or what its tuner
    config or net plugin's tuner makes it run (``plugin_pair``)."""
    if op in POINT_TO_POINT:
        return _p2p_choice(info, op, nbytes)
    table = cost_table(info, op, nbytes, dtype=dtype)
    best = plugin_pair(info, op, nbytes, table) or cheapest(table)
    if best is None:
        envs = (("NCCL_ALGO", info.algo_env), ("NCCL_PROTO", info.proto_env))
        env = "".join(f" {k}={v}" for k, v in envs if v)
        raise ConfigError(f"no algorithm/protocol available for {op} ({dtype}){env}")
    algo, proto = best
    nc, nt = algo_info(info, op, algo, proto, nbytes)
    nc = _tuned_channels(info, op, algo, nbytes, nc)
    used = channels_used(info, op, algo, proto, nbytes, nc)
    chunk = _chunk_for(info, op, algo, proto, nbytes, nc, used)
    return NcclChoice(algo, proto, nc, nt, chunk, table.get(best, -1.0), used)


def plugin_pair(info: NcclCommInfo, op: Op, nbytes: int,
                table: dict[tuple[Algo, Proto], float]) -> tuple[Algo, Proto] | None:
    """The (algorithm, protocol) the communicator's tuner makes NCCL run, or None where NCCL keeps
    its own choice: a tuner config's rule (:mod:`twin.nccl_model.gib_tuner`), its pick made free
    in the cost table where NCCL offers it; else the net plugin's tuner (none, an NCCL that loads
    none by default, or the plugin declines: :mod:`twin.nccl_model.ofi_tuner`)."""
    rule = _tuner_rule(info, op, nbytes)
    if rule is not None and table.get((rule.algo, rule.proto), -1.0) >= 0.0:
        return cheapest({**table, (rule.algo, rule.proto): 0.0})
    platform = PLATFORMS.get(info.instance or "")
    if info.tuner != "aws-ofi-nccl" or platform is None or info.nccl_version < FIRST_NCCL:
        return None
    if info.nccl_version >= V3_NCCL:  # v3: a region whose cost-table entry NCCL ignores is passed over
        return region_pair(platform, op, nbytes, info.nranks, info.nnodes, lambda a, p: table.get((a, p), -1.0) >= 0)
    if info.algo_env or info.proto_env:  # v2 declines under NCCL_ALGO / NCCL_PROTO
        return None
    have = tuner_constants(info.nccl_version).facts.algorithms
    return region_pair(platform, op, nbytes, info.nranks, info.nnodes, lambda a, p: a.value in have
                       and a is not Algo.PAT and (a is not Algo.NVLS_TREE or info.nvls_support))


def cheapest(table: dict[tuple[Algo, Proto], float]) -> tuple[Algo, Proto] | None:
    """``topoGetAlgoInfo``'s pick: the smallest non-negative time, scanning algorithms then
    protocols in NCCL's index order with a strict ``<`` (ties go to the lower index)."""
    best, best_time = None, math.inf
    for a in Algo:
        for p in Proto:
            t = table.get((a, p), -1.0)
            if 0.0 <= t < best_time:
                best, best_time = (a, p), t
    return best


def default_resources(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto,
                      nbytes: int) -> tuple[int, int, int]:
    """(nchannels, nthreads, chunk_bytes) NCCL uses once ``algo``/``proto`` are forced."""
    if op in POINT_TO_POINT:
        choice = _p2p_choice(info, op, nbytes)
        return choice.nchannels, choice.nthreads, choice.chunk_bytes
    if not implemented(op, algo, proto):
        raise ConfigError(f"NCCL has no {algo}/{proto} implementation of {op}")
    nc, nt = algo_info(info, op, algo, proto, nbytes)
    nc = _tuned_channels(info, op, algo, nbytes, nc)
    used = channels_used(info, op, algo, proto, nbytes, nc)
    return nc, nt, _chunk_for(info, op, algo, proto, nbytes, nc, used)


def max_threads(info: NcclCommInfo, algo: Algo, proto: Proto) -> int:
    """``comm->maxThreads[algo][proto]`` as ``ncclTopoTuneModel`` sets it (0 where unset, e.g. PAT)."""
    if proto is Proto.SIMPLE:
        if algo is Algo.RING:
            pci_class = info.bw_intra * info.search_channels <= PCI_BW
            return _nthreads(info.nthreads_env, 2 * WARP_SIZE, SIMPLE_MAX_NTHREADS,
                             256 if pci_class else SIMPLE_MAX_NTHREADS)
        if algo is Algo.TREE:
            return _nthreads(info.nthreads_env, 2 * WARP_SIZE, SIMPLE_MAX_NTHREADS, SIMPLE_MAX_NTHREADS)
        return 0 if algo is Algo.PAT else MAX_NTHREADS
    if algo not in (Algo.RING, Algo.TREE):
        return 0
    if proto is Proto.LL:
        return _nthreads(info.nthreads_env, 2 * WARP_SIZE, LL_MAX_NTHREADS, LL_MAX_NTHREADS)
    return _nthreads(info.ll128_nthreads_env, LL128_MAX_NTHREADS // 4, LL128_MAX_NTHREADS, LL128_MAX_NTHREADS)


def algo_info(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto, nbytes: int) -> tuple[int, int]:
    """``topoGetAlgoInfo``'s channels and threads per block for a chosen (algo, proto)."""
    nc, nt = info.nchannels, max_threads(info, algo, proto)
    threshold = _thread_threshold(info, algo, proto)
    if algo is Algo.COLLNET_DIRECT:
        heads, switch, short = info.collnet_heads, 16, True
        while switch >= 1 and short:
            while (short := nbytes < nc * nt * heads * threshold) and nc > switch:
                if nc == switch + switch // 2:
                    threshold //= 2
                nc -= 1
            switch //= 2
    elif algo in (Algo.NVLS, Algo.NVLS_TREE):
        multinode_cap = tuner_constants(info.nccl_version).nvls_multinode_channel_cap
        capped = algo is Algo.NVLS and info.nnodes > 1 and multinode_cap
        nc = min(info.nvls_channels, info.nchannels) if capped else info.nvls_channels
    else:
        while nbytes < nc * nt * threshold and nc >= 2:
            nc -= 1
    if algo not in (Algo.NVLS, Algo.NVLS_TREE, Algo.COLLNET_DIRECT):
        while nbytes < nc * nt * threshold and nt % 128 == 0:
            nt //= 2
    f = tuner_constants(info.nccl_version).facts
    if proto is Proto.SIMPLE:
        nt += f.simple_sync_warps[algo.nccl_index] * WARP_SIZE  # sync / split-thread warps
    nt = max(nt, f.min_warps * WARP_SIZE)
    if algo in (Algo.TREE, Algo.PAT) and f.tree_all_threads:
        nt = MAX_NTHREADS
    return nc, nt


def _tuner_rule(info: NcclCommInfo, op: Op, nbytes: int) -> GibRule | None:
    if info.tuner_config is None:
        return None
    return config_table(info.tuner_config).rule(info.nnodes, info.nranks // info.nnodes, op, nbytes, nranks=info.nranks)


def _tuned_channels(info: NcclCommInfo, op: Op, algo: Algo, nbytes: int, nc: int) -> int:
    """``nc`` (``topoGetAlgoInfo``'s), or the tuner's channel count where its rule covers the call,
    capped at the communicator's channels of the algorithm's kind (``scheduleCollTasksToPlan``)."""
    rule = _tuner_rule(info, op, nbytes)
    if rule is None or rule.nchannels is None:
        return nc
    kind_max = info.nvls_channels if algo in (Algo.NVLS, Algo.NVLS_TREE) else info.nchannels
    return max(1, min(rule.nchannels, kind_max))


def channels_used(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto, nbytes: int, nc: int) -> int:
    """Channels ``scheduleCollTasksToPlan`` fills for a lone call with ``nc`` allowed."""
    if algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) or (algo is Algo.NVLS and info.nnodes > 1):
        return nc  # CollNet-style scheduling splits evenly over all channels
    if not tuner_constants(info.nccl_version).facts.cell_scheduler:
        return nc  # before 2.22 every channel getAlgoInfo kept takes nBytes / nChannels
    kind_max = info.nvls_channels if algo in (Algo.NVLS, Algo.NVLS_TREE) else info.nchannels
    nc = max(1, min(nc, kind_max))
    per_byte = {Op.ALLREDUCE: 2, Op.ALLGATHER: info.nranks, Op.REDUCESCATTER: info.nranks}.get(op, 1)
    per_byte *= 4 if proto is Proto.LL else 1
    count_bytes = nbytes // info.nranks if op in (Op.ALLGATHER, Op.REDUCESCATTER) else nbytes
    if count_bytes == 0:
        return 1
    per_channel = max(MIN_TRAFFIC_PER_CHANNEL, max(MIN_TRAFFIC_PER_CHANNEL, count_bytes * per_byte) // nc)
    cell = _ceil_div(_ceil_div(MIN_TRAFFIC_PER_CHANNEL, per_byte), 16) * 16
    cells = _ceil_div(count_bytes, cell)
    cells_per_channel = min(cells, _ceil_div(per_channel, cell * per_byte))
    return min(_ceil_div(cells, cells_per_channel), kind_max)


def chunk_size(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto, nbytes: int, nchannels: int = 1) -> int:
    """``calcCollChunking``: data bytes per chunk for ``nbytes`` spread over ``nchannels``.

    Since 2.22 NCCL calls it once per channel part with ``nchannels=1`` and the part's
    bytes; CollNet calls it once with all channels and the whole buffer.
    """
    buff = {Proto.LL: info.ll_buffsize, Proto.LL128: info.ll128_buffsize, Proto.SIMPLE: info.buffsize}[proto]
    step = buff // NCCL_STEPS
    ring_simple = proto is Proto.SIMPLE and algo is Algo.RING
    chunk_steps = (4 if op in (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER) else 1) if ring_simple else 1
    chunk = step * chunk_steps
    if proto is Proto.LL:
        chunk //= 2
    elif proto is Proto.LL128:
        chunk = chunk // LL128_LINEELEMS * LL128_DATAELEMS
    ppn = info.ppn
    if algo is Algo.COLLNET_DIRECT:
        heads, depth = info.collnet_heads, (1 if ppn == 1 else 2)
        for floor, mult in ((131072, 64), (65536, 8), (32768, 8)):
            while nbytes // (nchannels * heads * chunk) < depth * mult and chunk > floor:
                chunk //= 2
    elif algo is Algo.COLLNET_CHAIN:
        chunk, depth = min(256 << 10, info.buffsize // NCCL_STEPS), int(ppn)
        for floor, mult in ((131072, 64), (65536, 8), (32768, 1)):
            while nbytes // (nchannels * chunk) < depth * mult and chunk > floor:
                chunk //= 2
    elif algo is Algo.NVLS:
        cap = NVLS_CHUNK
        if info.nnodes > 1 and model_entry(info, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)[0] < 150:
            cap = 32768
        chunk = min(chunk, cap)
        ops = nchannels * info.nvls_graph[0]
        for mult, size in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < mult * ops * chunk and chunk > size:
                chunk = size
    elif algo is Algo.NVLS_TREE:
        ops = nchannels * info.nvls_graph[0]
        chunk = min(NVLS_CHUNK, 65536 if info.nnodes >= 4 else NVLS_CHUNK)
        for mult, size in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if nbytes < mult * ops * chunk and chunk > size:
                chunk = size
    elif algo is Algo.TREE and proto is Proto.SIMPLE and tuner_constants(info.nccl_version).facts.tree_simple_chunking:
        # connect.cc @ v2.8.4-1: "depth = nRanks/nNodes - 1 + log2i(nNodes)"
        depth = info.nranks // info.nnodes - 1 + (info.nnodes.bit_length() - 1)
        for floor, mult in ((131072, 8), (65536, 4), (32768, 1)):
            while nbytes // (nchannels * chunk) < depth * mult and chunk > floor:
                chunk //= 2
    elif algo is Algo.TREE and proto is Proto.LL128:
        nsteps = 1 + (info.nnodes.bit_length() - 1) + 0.1 * ppn
        for floor, mult in ((131072, 64), (32768, 16)):
            while nbytes // (nchannels * chunk) < nsteps * mult / ppn and chunk > floor:
                chunk //= 2
    elif algo is Algo.PAT and op in (Op.ALLGATHER, Op.REDUCESCATTER):
        mult = 32 if op is Op.ALLGATHER else 16
        while chunk * nchannels * mult > nbytes and chunk > 65536:
            chunk //= 2
    grain = GRAIN_BYTES[proto.nccl_index]
    return chunk // grain * grain


def ring_quantum_bytes(version: tuple[int, int, int], op: Op, proto: Proto, nthreads):
    """Bytes a ring kernel of NCCL 2.8 – 2.19 rounds each rank's piece of a loop up to (0: none);
    ``nthreads`` (the kernel's, sync warp included) may be a numpy array.

    The last loop of ``nbytes`` over ``nch`` channels and ``n`` ranks gives every (rank, channel)
    piece ``ceil(nbytes / (nch·n·q))·q`` bytes, so at a step some ranks carry a whole rounded
    piece and the ranks past the end carry nothing (the piece at the end what is left of the
    buffer: ``twin.model.schedule.rounded_piece_cap``).  ``q``: LL ``nthreads × 8`` (one 8-byte line
    per thread, ``minChunkSize``); LL128 ``nthreads × 60 / 2`` for AllReduce, AllGather and
    ReduceScatter (``NCCL_LL128_SHMEM_ELEMS_PER_THREAD × DATAELEMS × 8 / LINEELEMS``, halved, "makes
    performance much, much smoother"), ``nthreads × 60`` for Broadcast and Reduce; Simple the
    worker threads' 8 bytes each (``ALIGN_SIZE(realChunkSize, nthreads*sizeof(uint64_t))`` with
    ``nthreads = nThreads - WARP_SIZE``).  Source: ``src/collectives/device/all_reduce.h``,
    ``broadcast.h``, ``all_gather.h`` @ v2.8.4-1 (AllGather/ReduceScatter LL take ``lastChunkSize``,
    aligned to ``nThreads × 8`` bytes in ``computeColl``, ``src/enqueue.cc``), and
    ``src/device/all_reduce.h`` @ v2.19.3-1.

    >>> [ring_quantum_bytes(v, Op.ALLREDUCE, Proto.LL128, 640) for v in ((2, 8, 4), (2, 19, 3), (2, 20, 3))]
    [19200, 19200, 0]
    >>> [ring_quantum_bytes((2, 8, 4), Op.ALLREDUCE, p, t) for p, t in ((Proto.LL, 512), (Proto.SIMPLE, 544))]
    [4096, 4096]
    """
    if not tuner_constants(version).facts.ring_chunk_quantum:
        return 0
    if proto is Proto.LL:
        return nthreads * 8
    if proto is Proto.LL128:
        whole = nthreads * LL128_SHMEM_ELEMS_PER_THREAD * LL128_DATAELEMS * 8 // LL128_LINEELEMS
        return whole if op in (Op.BROADCAST, Op.REDUCE) else whole // 2
    return (nthreads - WARP_SIZE) * 8


def p2p_channels_per_peer(info: NcclCommInfo) -> int:
    """``comm->p2pnChannelsPerPeer``, from the field or a simple rule.

    Rule: a network peer gets ``NCCL_NCHANNELS_PER_NET_PEER`` (default 2, 1 before 2.12.7; halved while
    ``2 × nranks > 4 × p2pnChannels``); an NVLink peer gets the communicator's channels;
    a PCIe peer 2.  The per-peer count is the smallest over peers, rounded up to a power
    of two and capped by the p2p channels.
    """
    p2p_channels = _pow2_up(min(info.nchannels, MAXCHANNELS))
    if info.p2p_channels_per_peer is not None:
        return min(info.p2p_channels_per_peer, p2p_channels)
    if info.nnodes > 1:
        peer = tuner_constants(info.nccl_version).facts.net_peer_channels
        while peer * info.nranks > p2p_channels * 4 and peer > 1:
            peer //= 2
    else:
        peer = info.nchannels if info.intra_nvlink else 2
    return min(_pow2_up(peer), p2p_channels)


def _p2p_choice(info: NcclCommInfo, op: Op, nbytes: int) -> NcclChoice:
    p2p_channels = _pow2_up(min(info.nchannels, MAXCHANNELS))
    per_peer = p2p_channels_per_peer(info)
    nc = per_peer
    if op is Op.ALLTOALL:  # one channel per operation when all peers are busy
        while nc * info.nranks > p2p_channels and nc > 1:
            nc //= 2
    chunk = P2P_NET_CHUNK if info.nnodes > 1 else (P2P_NVL_CHUNK if info.intra_nvlink else P2P_PCI_CHUNK)
    chunk = min(chunk, info.buffsize // NCCL_STEPS)
    return NcclChoice(Algo.RING, Proto.SIMPLE, nc, MAX_NTHREADS, chunk, _p2p_time(info, op, nbytes, nc), nc)


def _p2p_time(info: NcclCommInfo, op: Op, nbytes: int, nc: int) -> float:
    """Rough p2p estimate from NCCL's Ring/Simple latencies and the search bandwidth."""
    tc = tuner_constants(info.nccl_version)
    hop = tc.hw_lat[2 if info.nnodes > 1 else (0 if info.intra_nvlink else 1)][Algo.RING.nccl_index][2]
    per_channel = info.bw_inter if info.nnodes > 1 else info.bw_intra
    bw = max(per_channel * min(nc, info.search_channels), 1e-9)
    if op is Op.SENDRECV:
        return tc.base_lat[Algo.RING.nccl_index][2] + hop + nbytes / (1000.0 * bw)
    peers = max(info.nranks - 1, 1)
    ring_bw = max(per_channel * info.search_channels, 1e-9)
    moved = nbytes * peers / info.nranks
    return tc.base_lat[Algo.RING.nccl_index][2] + peers * hop + moved / (1000.0 * ring_bw)


def _chunk_for(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto, nbytes: int, nc: int, used: int) -> int:
    whole = not tuner_constants(info.nccl_version).facts.cell_scheduler  # before 2.22: one call, all channels
    if whole or algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN):
        return chunk_size(info, op, algo, proto, nbytes, nc)
    return chunk_size(info, op, algo, proto, _ceil_div(nbytes, max(used, 1)), 1)


def _thread_threshold(info: NcclCommInfo, algo: Algo, proto: Proto) -> int:
    if algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) and proto is Proto.SIMPLE:
        return COLLNET_THREAD_THRESHOLD
    threshold = THREAD_THRESHOLD[proto.nccl_index]
    return threshold * info.nranks if (algo is Algo.RING and proto is Proto.LL) else threshold


def _nthreads(env: int | None, low: int, high: int, default: int) -> int:
    """``getNthreads``: an env value is clamped to [low, high]; not a multiple of 32 → high."""
    if env is None or env <= 0:
        return default
    if env % WARP_SIZE:
        return high
    return min(max(env, low), high)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_up(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()

