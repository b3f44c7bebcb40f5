"""NCCL's own cost model: ``ncclTopoTuneModel`` + ``ncclTopoGetAlgoTime``.

At communicator init NCCL turns its search graphs into a latency (µs) and an algorithm
bandwidth (GB/s) for every (collective, algorithm, protocol); per call it estimates
``time = latency × latCount + nBytes / (1000 × bandwidth)`` with a few size corrections,
and the tuner plugin sees those times as the cost table.  This module reproduces both
steps from an :class:`NcclCommInfo`; ``nbytes`` is NCCL's ``nBytes`` (per-rank input for
AllReduce/Broadcast/Reduce, full buffer for AllGather/ReduceScatter — nccl-tests' size).

>>> info = NcclCommInfo(nranks=8, nnodes=1, sm_version=80, intra_nvlink=True, bw_intra=20,
...                     bw_inter=20, nchannels=24, tree_bw_intra=20, tree_bw_inter=20)
>>> round(model_entry(info, Op.ALLREDUCE, Algo.RING, Proto.LL)[1], 2)   # 6.6 + 14 × 0.6
15.0
"""

from __future__ import annotations

import math
from functools import lru_cache

from traces.task import Op
from tuner.config import Algo, Proto
from tuner.rules import implementation_problem
from twin.nccl_model.constants import (
    HW_NET,
    HW_NVLINK,
    HW_PCI,
    MAX_DIRECT_ARITY,
    MAX_NVLS_ARITY,
    NVLS_EFFICIENCY,
    TREE_CORRECTION,
    TunerConstants,
    tuner_constants,
)
from twin.nccl_model.envparse import parse_algo_env, parse_proto_env
from twin.nccl_model.inputs import NcclCommInfo, PathType
from twin.nccl_model.releases import ReleaseFacts, arch_row

COLLECTIVES = (Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLREDUCE)
IGNORE = -1.0  # NCCL_ALGO_PROTO_IGNORE

_NVLS_DTYPES = {"int32", "uint32", "int64", "uint64", "float16", "half", "bfloat16", "float32", "float",
                "float64", "double"}  # ncclNvlsSupported for a sum
_FP8 = {"fp8_e4m3", "fp8_e5m2"}
_X86 = {"intel", "amd"}


def cost_table(info: NcclCommInfo, op: Op, nbytes: int, num_pipe_ops: int = 1,
               dtype: str = "float32") -> dict[tuple[Algo, Proto], float]:
    """NCCL's predicted time in µs for every (algo, proto); -1.0 where unsupported or disabled.

    This is the table NCCL hands the tuner plugin (``updateCollCostTable``).  ``dtype``
    matters only for NVLS (which reduces few types in the switch) and fp8 (NCCL inflates
    Ring times ×1024 beyond 8 ranks to steer away from lossy deep reductions).
    """
    _check_collective(op)
    if nbytes < 0:
        raise ValueError(f"negative message size {nbytes}")
    table = {(a, p): IGNORE for a in Algo for p in Proto}
    if info.nranks == 1:
        table[Algo.RING, Proto.SIMPLE] = 0.0
        return table
    for a in _candidate_algos(info, op, dtype):
        for p in Proto:
            t = algo_time(info, op, a, p, nbytes, num_pipe_ops)
            if t >= 0 and dtype in _FP8 and a is Algo.RING and info.nranks > 8:
                t *= 1024.0
            table[a, p] = t
    return table


def algo_time(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto, nbytes: int,
              num_pipe_ops: int = 1) -> float:
    """``ncclTopoGetAlgoTime``: µs for one call, -1.0 when the pair has no bandwidth."""
    bw, lat = model_entry(info, op, algo, proto)
    if bw == 0:
        return IGNORE
    tc = tuner_constants(info.nccl_version)
    log_size = (nbytes >> 6).bit_length() - 1
    if op is Op.ALLREDUCE and log_size >= 0:
        if algo is Algo.TREE and log_size < tc.tree_correction_cols:
            bw *= tc.tree_correction[proto.nccl_index][log_size]
        if (algo is Algo.NVLS_TREE and tc.nvls_tree_correction and log_size < 24 and info.sm_version >= 100
                and info.cpu_vendor in _X86):
            bw *= TREE_CORRECTION[proto.nccl_index][log_size]
    if algo is Algo.RING and proto is Proto.SIMPLE and info.nnodes > 1 and op is Op.ALLREDUCE:
        lat *= _plateau(tc.facts, info, nbytes)
    lat_count = num_pipe_ops if algo is Algo.RING else math.ceil(num_pipe_ops / tc.max_dev_work_batch_colls)
    return lat * lat_count + nbytes / (1000.0 * bw)


def _plateau(f: ReleaseFacts, info: NcclCommInfo, nbytes: int) -> float:
    """Ring/Simple AllReduce latency factor across nodes ("plateau effect of ring")."""
    if f.plateau == "total":  # ≤ 2.17: from nRanks/16 × 64 KiB in all
        reached = nbytes >= info.nranks / 16.0 * 65536
    else:  # ≥ 2.18: from 64 B per channel and rank
        reached = nbytes // (info.nchannels * info.nranks) >= 64
    below, above, sm = f.plateau_factor
    return (below if info.sm_version < sm else above) if reached else 1.0


def model_entry(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto) -> tuple[float, float]:
    """(``comm->bandwidths``, ``comm->latencies``) for one entry; bandwidth 0 means disabled."""
    _check_collective(op)
    return _tune_model(info, op).get((algo, proto), (0.0, 0.0))


def enabled(info: NcclCommInfo, op: Op, algo: Algo, proto: Proto) -> bool:
    """Whether NCCL's enable matrix (env lists, topology rules, LL128 default) keeps the pair."""
    algo_on = parse_algo_env(info.algo_env, info.nccl_version)[op][algo] if info.algo_env else 1
    default_proto = 2 if proto is Proto.LL128 else 1  # 2: LL128 decided by the topology
    proto_on = parse_proto_env(info.proto_env, info.nccl_version)[op][proto] if info.proto_env else default_proto
    if info.nnodes == 1 and algo is Algo.NVLS_TREE:
        algo_on = 0
    if not info.collnet_support and (algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN)
                                     or (algo is Algo.NVLS and info.nnodes > 1)):
        algo_on = 0
    if not info.nvswitch and algo is Algo.COLLNET_DIRECT:
        algo_on = 0
    if proto_on == 2:
        proto_on = int(ll128_default(info) if info.ll128_enabled is None else info.ll128_enabled)
    return bool(algo_on and proto_on)


def ll128_default(info: NcclCommInfo) -> bool:
    """NCCL's default LL128 rule: NVLink inside the node, NIC close to the GPU, a tested arch.

    From 2.27 every sm ≥ 70; before, only the listed archs (2.8: sm70 and sm80, 2.16: + sm90,
    2.25: + sm100, sm120).  From 2.17 Hopper and newer also accept NICs reached through a peer
    GPU (PXN; ``NCCL_LL128_C2C=1``, the default, later); from 2.23 NVLink through a peer GPU (NVB)
    counts as NVLink.  CUDA 11.8's sm90 two-rank exception is not modelled.
    """
    f = tuner_constants(info.nccl_version).facts
    limit = PathType.PXN if (info.sm_version >= 90 and f.ll128_pxn_hopper) else PathType.PXB
    intra = PathType.NVB if f.ll128_intra_nvb else PathType.NVL
    arch = info.sm_version >= 70 if f.ll128_archs is None else info.sm_version in f.ll128_archs
    return info.type_inter <= limit and info.type_intra <= intra and arch


def _check_collective(op: Op) -> None:
    if op not in COLLECTIVES:
        raise ValueError(f"{op} is point-to-point in NCCL; it has no algorithm/protocol cost table")


def _candidate_algos(info: NcclCommInfo, op: Op, dtype: str) -> list[Algo]:
    """Algorithms ``updateCollCostTable`` evaluates for this call (others stay -1)."""
    tc = tuner_constants(info.nccl_version)
    local = math.ceil(info.ppn)
    nvls_ok = info.nvls_support and info.nvls_graph[0] > 0 and (dtype in _NVLS_DTYPES or op is Op.ALLGATHER)
    out = []
    for a in Algo:
        if a.value not in tc.facts.algorithms:
            continue
        if op in (Op.ALLGATHER, Op.REDUCESCATTER) and a.value not in tc.facts.gather_algos:
            continue
        if a in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) and not info.collnet_support:
            continue
        if a is Algo.COLLNET_DIRECT and local > MAX_DIRECT_ARITY + 1:
            continue
        if a is Algo.COLLNET_CHAIN and tc.collnet_chain_arity_check and local > MAX_DIRECT_ARITY + 1:
            continue
        if a in (Algo.NVLS, Algo.NVLS_TREE) and (
                not nvls_ok or (op is not Op.ALLREDUCE and local > MAX_NVLS_ARITY)):
            continue
        if a is Algo.NVLS and not info.collnet_support and info.nnodes > 1:
            continue
        out.append(a)
    return out


def _graph(info: NcclCommInfo, algo: Algo) -> tuple[int, float, float]:
    """(nChannels, bwIntra, bwInter) of the search graph NCCL uses for ``algo``."""
    if algo is Algo.RING:
        return info.search_channels, info.bw_intra, info.bw_inter
    if algo in (Algo.NVLS, Algo.NVLS_TREE):
        return info.nvls_graph
    return info.search_channels, info.tree_bw_intra, info.tree_bw_inter  # Tree, PAT; CollNet approximated


def implemented(op: Op, algo: Algo, proto: Proto) -> bool:
    """Whether NCCL has a kernel for ``op`` with this algorithm and protocol (``tuner.rules``)."""
    return implementation_problem(op, algo, proto) is None


@lru_cache(maxsize=512)
def _tune_model(info: NcclCommInfo, op: Op) -> dict[tuple[Algo, Proto], tuple[float, float]]:
    """``ncclTopoTuneModel`` for one collective: {(algo, proto): (algbw GB/s, latency µs)}."""
    tc = tuner_constants(info.nccl_version)
    f = tc.facts
    n, nodes, ppn, sm = info.nranks, info.nnodes, info.ppn, info.sm_version
    if n <= 1:
        return {}
    cc = arch_row(f, sm)
    i2 = nodes - 1 if nodes <= 2 else 2
    i1 = cc if nodes == 1 else (1 if info.cpu_vendor == "amd" else 0)
    ll_max = f.ll_max[i1][i2]
    hw_lat = [[list(row) for row in hw] for hw in tc.hw_lat]
    if info.cpu_vendor == "power":  # favour Tree over Ring on Power
        hw_lat[HW_PCI][Algo.TREE.nccl_index][2] = hw_lat[HW_PCI][Algo.RING.nccl_index][2]
    nsteps = 2 * (n - 1) if op is Op.ALLREDUCE else (n - 1 if op in (Op.ALLGATHER, Op.REDUCESCATTER) else n)
    pat_ok = sm >= 60 and nodes == n
    net_overhead = 0.0 if nodes == 1 or not f.net_overhead else (2.0 if info.cpu_vendor == "amd" else 1.0)
    coll = COLLECTIVES.index(op)
    out = {}
    for a in Algo:
        ai = a.nccl_index
        nch, bw_intra, bw_inter = _graph(info, a)
        collnet = a in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN)
        nvls = a in (Algo.NVLS, Algo.NVLS_TREE)
        intra_hw = HW_NVLINK if (info.intra_nvlink or nvls) else HW_PCI
        hw = intra_hw if nodes == 1 else HW_NET
        for p in Proto:
            if not implemented(op, a, p) or (a is Algo.PAT and not pat_ok):
                continue
            pi = p.nccl_index
            bw = bw_intra if nodes <= 2 or collnet else bw_inter
            if nvls:
                if tc.nvls_efficiency_model:
                    if nch < 2:
                        continue
                    intra = bw_intra * NVLS_EFFICIENCY[cc] * (nch - 1) / nch
                    intra *= 2.0 if op is Op.ALLREDUCE else (ppn - 1) / ppn
                    inter = bw_inter * (2 if nodes <= 2 and a is Algo.NVLS_TREE else 1)
                    bw = min(intra, inter, tc.nvls_tree[cc][i2] if a is Algo.NVLS_TREE else math.inf)
                elif a is Algo.NVLS:
                    bw = (min(bw_intra, bw_inter) if op is Op.ALLREDUCE
                          else min(bw_intra * (ppn - 1) / ppn, bw_inter * 0.9))
                else:
                    bw = min(bw_intra, bw_inter if nodes <= 2 else bw_inter / 2)
            bus = nch * bw
            if f.ampere_bus_cap is not None and cc == 1:  # ≤ 2.17
                bus = min(bus, f.ampere_bus_cap)
            if a is Algo.RING and p is Proto.LL:
                factor = f.ring_ll_factor
                if factor == 0.25 and nodes == 1 and op not in (Op.ALLREDUCE, Op.REDUCE):
                    factor = 1.0 / 3.0  # ≤ 2.20: one-way collectives on one node
                bus = min(ll_max, bus * factor)
            if a is Algo.RING and p is Proto.LL128:
                factor = f.ring_ll128_ppn1 if (f.ring_ll128_ppn1 is not None and ppn < 2) else 0.92
                bus = min(bus * factor, nch * _ll128_cap(tc, tc.ring_ll128, cc, i2, coll))
            if a is Algo.TREE and op is Op.ALLREDUCE:
                bus = min(bus * 0.92, nch * tc.tree[cc][i2])
            if a is Algo.TREE and p is Proto.LL:
                bus = min(bus / 3.8, ll_max)
            if a is Algo.TREE and p is Proto.LL128:
                bus = min(bus * (7.0 / 9.0 if nodes == 1 else f.tree_ll128_net),
                          nch * _ll128_cap(tc, tc.tree_ll128, cc, i2, coll))
            if a is Algo.TREE and info.tree_pattern_split and f.tree_split_factor:
                bus *= 0.85
            if a is Algo.PAT:
                bus *= 0.75
            if a is Algo.COLLNET_DIRECT and p is Proto.SIMPLE:
                if op in (Op.ALLGATHER, Op.REDUCESCATTER):
                    bus = ppn * min(bw_intra, bw_inter * 0.9)
                else:
                    factor = ppn / nch
                    factor -= (factor - 1) / 2
                    bus /= factor
                    if sm >= 90:
                        bus *= 0.85
            if (a in (Algo.NVLS, Algo.COLLNET_DIRECT) and p is Proto.SIMPLE
                    and op in (Op.ALLGATHER, Op.REDUCESCATTER) and nodes > 1):
                bus = 0.0  # needs a CollNet plugin with AllGather/ReduceScatter support
            if a is Algo.RING or op not in (Op.ALLGATHER, Op.REDUCESCATTER):  # bus -> algorithm bw
                if a is Algo.RING or (nvls and tc.nvls_efficiency_model):
                    bus *= n / nsteps
                else:
                    bus *= 5.0 / 6.0 if nvls else 0.5

            lat = tc.base_lat[ai][pi]
            intra_lat = hw_lat[intra_hw][ai][pi]
            if f.ll_intra_net_factor is not None and nodes > 1 and p is Proto.LL:  # ≤ 2.17
                intra_lat *= f.ll_intra_net_factor
            inter_lat = hw_lat[HW_NET][Algo.TREE.nccl_index if ppn == 1 else ai][pi] + info.latency_inter
            if p is Proto.SIMPLE:
                inter_lat += info.latency_inter  # flush
            local = n // nodes
            if a is Algo.RING:
                if op in (Op.REDUCE, Op.BROADCAST):
                    if info.same_channels:
                        lat += hw_lat[hw][ai][pi]
                    else:
                        step_algo = Algo.TREE if p is Proto.SIMPLE else a  # "some chunk latency"
                        lat += nsteps * hw_lat[hw][step_algo.nccl_index][pi]
                else:
                    overhead = net_overhead * (3 if p is Proto.SIMPLE else 1)
                    intra_lat = max(intra_lat, overhead)
                    inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if op is Op.ALLREDUCE else nodes - 1)
                    lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
            elif a is Algo.TREE:
                if op is Op.ALLREDUCE:
                    lat += 2 * ((local - 1) * intra_lat + _log2i(nodes) * inter_lat)
            elif a is Algo.COLLNET_DIRECT:
                lat += 2 * (min(1, local - 1) * intra_lat + (local - 1) * 0.4) + inter_lat
            elif a is Algo.COLLNET_CHAIN:
                lat += 2 * (local - 1) * intra_lat + inter_lat
            elif a is Algo.NVLS:  # base latency 40 µs in 2.17, 23 in 2.18, 0 (in the NVLink one) after
                lat += intra_lat + (inter_lat if nodes > 1 else 0.0)
            elif a is Algo.NVLS_TREE:
                lat += intra_lat + 2 * _log2i(nodes) * inter_lat
            elif a is Algo.PAT and op in (Op.ALLGATHER, Op.REDUCESCATTER):
                lat += _log2i(nodes) * (inter_lat / 3.5) + n * 2.8

            if not enabled(info, op, a, p):
                bus = 0.0
            out[a, p] = (bus, lat)
    return out


def _ll128_cap(tc: TunerConstants, table: tuple, cc: int, i2: int, coll: int) -> float:
    """Per-channel LL128 bandwidth cap: per collective before 2.10, per arch and nodes after."""
    per_coll = tc.facts.ll128_per_coll
    return per_coll[coll] if per_coll is not None else table[cc][i2]


def _log2i(x: int) -> int:
    return x.bit_length() - 1
