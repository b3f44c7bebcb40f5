"""NCCL's default choice: algorithm/protocol argmin, channels, threads and chunk size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import NcclCommInfo, default_resources, nccl_choice
from twin.nccl_model.select import algo_info, cheapest, chunk_size, max_threads

A100 = NcclCommInfo(nranks=8, nnodes=1, sm_version=80, intra_nvlink=True, bw_intra=20.0, bw_inter=20.0,
                    nchannels=24, tree_bw_intra=20.0, tree_bw_inter=20.0, cpu_vendor="amd")
H100 = replace(A100, sm_version=90, cpu_vendor="intel", bw_intra=30.0, bw_inter=30.0, tree_bw_intra=30.0,
               tree_bw_inter=30.0, nvls_support=True, nvls_graph_channels=8, nvls_bw_intra=40.0,
               nvls_bw_inter=60.0, nvswitch=True)


def test_allreduce_flips_from_ll_to_simple_on_8_a100():
    small, mid, large = (nccl_choice(A100, Op.ALLREDUCE, n) for n in (8, 4 << 20, 1 << 30))
    assert (small.algo, small.proto) == (Algo.RING, Proto.LL)
    assert (mid.algo, mid.proto) == (Algo.RING, Proto.LL128)
    assert (large.algo, large.proto) == (Algo.RING, Proto.SIMPLE)
    assert small.nccl_time_us == pytest.approx(6.6 + 14 * 0.6, abs=0.01)
    assert large.nchannels == large.channels_used == 24


def test_h100_large_allreduce_uses_nvls_with_its_own_channels():
    choice = nccl_choice(H100, Op.ALLREDUCE, 1 << 30)
    assert (choice.algo, choice.proto) == (Algo.NVLS, Proto.SIMPLE)
    assert (choice.nchannels, choice.nthreads, choice.chunk_bytes) == (16, 640, 128 << 10)


def test_ties_go_to_the_lower_algorithm_then_protocol():
    table = {(a, p): -1.0 for a in Algo for p in Proto}
    table[Algo.RING, Proto.LL] = table[Algo.TREE, Proto.SIMPLE] = table[Algo.RING, Proto.SIMPLE] = 5.0
    assert cheapest(table) == (Algo.TREE, Proto.SIMPLE)
    table[Algo.TREE, Proto.SIMPLE] = -1.0
    assert cheapest(table) == (Algo.RING, Proto.LL)
    assert cheapest({k: -1.0 for k in table}) is None


def test_default_chunks():
    assert chunk_size(A100, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 1 << 30) == 2 << 20
    assert chunk_size(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 1 << 30) == 512 << 10
    assert chunk_size(A100, Op.BROADCAST, Algo.RING, Proto.SIMPLE, 1 << 30) == 512 << 10
    assert chunk_size(A100, Op.ALLREDUCE, Algo.RING, Proto.LL, 1 << 30) == 32 << 10
    assert chunk_size(A100, Op.ALLREDUCE, Algo.RING, Proto.LL128, 1 << 30) == 576000
    bigger = replace(A100, buffsize=8 << 20)  # NCCL_BUFFSIZE
    assert chunk_size(bigger, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 1 << 30) == 4 << 20


def test_chunk_shrinking():
    # Tree/LL128: nsteps = 1 + log2(1) + 0.1 × 8 = 1.8; halve while nBytes/chunk < 1.8×64/8 (while
    # > 128K: 576000 -> 72000), then while < 1.8×16/8 (while > 32K: -> 18000); align to 1920 B
    assert chunk_size(A100, Op.ALLREDUCE, Algo.TREE, Proto.LL128, 1 << 30) == 576000
    assert chunk_size(A100, Op.ALLREDUCE, Algo.TREE, Proto.LL128, 100_000) == 9 * 1920
    # NVLS: capped at 128 KiB, then 64K/32K/16K as nBytes < {64, 8, 2} × heads × chunk
    assert chunk_size(H100, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE, 1 << 30) == 128 << 10
    assert chunk_size(H100, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE, 1 << 20) == 32 << 10
    assert chunk_size(H100, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE, 256 << 10) == 16 << 10
    # PAT AllGather halves while chunk × 32 > nBytes, down to 64 KiB
    assert chunk_size(A100, Op.ALLGATHER, Algo.PAT, Proto.SIMPLE, 1 << 30) == 512 << 10
    assert chunk_size(A100, Op.ALLGATHER, Algo.PAT, Proto.SIMPLE, 4 << 20) == 128 << 10


def test_nccl_2_8_to_2_19_halve_a_tree_simple_chunk_against_the_trees_depth():
    # computeColl @ v2.8.4-1 – v2.19.3-1: depth = 16/2 − 1 + log2i(2) = 8; halve while nBytes /
    # (nChannels × chunk) < 8 × 8 (down to 128 KiB), < 8 × 4 (64 KiB), < 8 (32 KiB).  2.20 dropped it.
    old = replace(A100, nranks=16, nnodes=2, nccl_version=(2, 8, 4))
    per_channel = {32 << 20: 512 << 10, 16 << 20: 256 << 10, 4 << 20: 128 << 10, 1 << 20: 64 << 10, 256 << 10: 32 << 10}
    for nbytes, chunk in per_channel.items():
        assert chunk_size(old, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, nbytes, 1) == chunk, nbytes
    assert chunk_size(replace(old, nccl_version=(2, 20, 3)), Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 1 << 20, 1) == (
        512 << 10)


def test_thread_choices():
    assert max_threads(A100, Algo.RING, Proto.SIMPLE) == 512
    assert max_threads(A100, Algo.RING, Proto.LL128) == 640
    pcie_class = replace(A100, bw_intra=12.0, nchannels=2)  # bwIntra × channels <= PCI_BW: 256
    assert max_threads(pcie_class, Algo.RING, Proto.SIMPLE) == 256
    assert algo_info(pcie_class, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 1 << 30) == (2, 288)
    # small call: one channel, threads halved 512 -> 64 (stops below 128), floor of 3 warps
    assert algo_info(A100, Op.ALLREDUCE, Algo.RING, Proto.LL, 8) == (1, 96)
    # threshold for Ring LL is 8 × nRanks per thread: 1 MiB keeps 24 channels and 512 threads
    assert algo_info(A100, Op.ALLREDUCE, Algo.RING, Proto.LL, 1 << 20) == (24, 512)
    assert algo_info(A100, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 1 << 30) == (24, 512 + 32)
    assert algo_info(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 64) == (1, 640)  # Tree: always 640
    assert algo_info(A100, Op.ALLREDUCE, Algo.RING, Proto.LL128, 1 << 16) == (12, 640)  # 12×640×8 <= 64K
    assert algo_info(A100, Op.ALLREDUCE, Algo.RING, Proto.LL128, 4096) == (1, 320)
    # the environment: NCCL_NTHREADS / NCCL_LL128_NTHREADS within NCCL's bounds
    assert max_threads(replace(A100, nthreads_env=256), Algo.RING, Proto.SIMPLE) == 256
    assert max_threads(replace(A100, nthreads_env=100), Algo.RING, Proto.LL) == 512  # not a warp multiple
    assert max_threads(replace(A100, nthreads_env=1024), Algo.TREE, Proto.SIMPLE) == 512
    assert max_threads(replace(A100, ll128_nthreads_env=64), Algo.RING, Proto.LL128) == 160


def test_default_resources_when_forced():
    assert default_resources(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, 1 << 30) == (24, 640, 512 << 10)
    assert default_resources(A100, Op.ALLREDUCE, Algo.RING, Proto.LL, 8) == (1, 96, 32 << 10)
    with pytest.raises(ValueError, match="no tree/simple implementation of allgather"):
        default_resources(A100, Op.ALLGATHER, Algo.TREE, Proto.SIMPLE, 1 << 20)


def test_small_messages_use_fewer_channels():
    choice = nccl_choice(A100, Op.BROADCAST, 1 << 20)
    assert choice.nchannels == 24 and choice.channels_used < 24  # cells of >= 16 KiB traffic


def test_env_can_leave_nothing():
    with pytest.raises(ValueError, match=r"no algorithm/protocol available for allreduce.*NCCL_ALGO=pat"):
        nccl_choice(replace(A100, algo_env="pat"), Op.ALLREDUCE, 1024)


def test_point_to_point_placeholder():
    sendrecv = nccl_choice(A100, Op.SENDRECV, 1 << 20)
    assert (sendrecv.algo, sendrecv.proto, sendrecv.nthreads, sendrecv.chunk_bytes) == (
        Algo.RING, Proto.SIMPLE, 640, 512 << 10)
    assert sendrecv.nchannels == 32  # NVLink peer: the channels, rounded up to a power of two
    alltoall = nccl_choice(A100, Op.ALLTOALL, 1 << 20)
    assert alltoall.nchannels == 4  # one channel per peer operation: 32 p2p channels / 8 ranks
    multinode = replace(A100, nranks=16, nnodes=2, nchannels=16)
    assert nccl_choice(multinode, Op.SENDRECV, 1 << 20).chunk_bytes == 128 << 10
    assert nccl_choice(multinode, Op.SENDRECV, 1 << 20).nchannels == 2
    times = [nccl_choice(A100, Op.SENDRECV, n).nccl_time_us for n in (1 << 20, 1 << 30)]
    assert times[0] < times[1]
