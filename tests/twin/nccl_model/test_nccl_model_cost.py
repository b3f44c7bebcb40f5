"""NCCL's cost model, checked by hand against tuning.cc's formulas (NCCL 2.28.9 unless noted)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import NcclCommInfo, cost_table
from twin.nccl_model.cost_table import algo_time, enabled, model_entry
from twin.nccl_model.envparse import parse_algo_env, parse_proto_env

# A DGX A100 node as NCCL sees it: 12 search channels of 20 GB/s, doubled to 24.
A100 = NcclCommInfo(nranks=8, nnodes=1, sm_version=80, intra_nvlink=True, bw_intra=20.0, bw_inter=20.0,
                    nchannels=24, tree_bw_intra=20.0, tree_bw_inter=20.0, cpu_vendor="amd")
# Two such nodes: NIC-bound rings of 24 GB/s, 8 search channels.
A100_2N = replace(A100, nranks=16, nnodes=2, bw_intra=24.0, bw_inter=24.0, nchannels=16,
                  tree_bw_intra=30.0, tree_bw_inter=24.0)


def test_ring_ll_latency_on_one_nvlink_node():
    # baseLat[Ring][LL] + (nsteps = 2(n-1)) × hwLat[NVLink][Ring][LL]
    bw, lat = model_entry(A100, Op.ALLREDUCE, Algo.RING, Proto.LL)
    assert lat == pytest.approx(6.6 + 14 * 0.6)
    assert bw == pytest.approx(min(87.7, 12 * 20 * 0.5) * 8 / 14)  # llMaxBw[Ampere][N1]
    assert algo_time(A100, Op.ALLREDUCE, Algo.RING, Proto.LL, 0) == pytest.approx(lat)


def test_ring_simple_bandwidth_and_time():
    bw, lat = model_entry(A100, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE)
    assert bw == pytest.approx(12 * 20 * 8 / 14)
    assert lat == pytest.approx(8.4 + 14 * 3.4)
    nbytes = 1 << 30
    assert algo_time(A100, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, nbytes) == pytest.approx(
        lat + nbytes / (1000 * bw))


def test_tree_correction_factor():
    bw, lat = model_entry(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE)
    assert bw == pytest.approx(min(12 * 20 * 0.92, 12 * 24.0) * 0.5)  # perChMaxTreeBw, bus->alg 0.5
    nbytes = 1 << 20  # log2(nBytes >> 6) = 14 -> Simple factor 0.5
    assert algo_time(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, nbytes) == pytest.approx(
        lat + nbytes / (1000 * bw * 0.5))
    small = 32  # below 64 B: no correction
    assert algo_time(A100, Op.ALLREDUCE, Algo.TREE, Proto.SIMPLE, small) == pytest.approx(
        lat + small / (1000 * bw))


def test_tree_ll_latency_and_ring_plateau_across_nodes():
    _, tree_lat = model_entry(A100_2N, Op.ALLREDUCE, Algo.TREE, Proto.LL)
    assert tree_lat == pytest.approx(6.8 + 2 * (7 * 0.6 + 1 * 5.0))
    # ring: intra steps pay max(hwLat, AMD net overhead 2 µs ×3 for Simple), 2 network steps
    bw, lat = model_entry(A100_2N, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE)
    assert lat == pytest.approx(8.4 + 28 * 6.0 + 2 * 14.0)
    nbytes = 1 << 24  # nBytes / (nChannels × nRanks) >= 64: plateau ×1.4 on sm80
    assert algo_time(A100_2N, Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, nbytes) == pytest.approx(
        lat * 1.4 + nbytes / (1000 * bw))


def test_ll128_default_rule():
    assert cost_table(A100, Op.ALLREDUCE, 1 << 20)[Algo.RING, Proto.LL128] > 0
    pcie = replace(A100, intra_nvlink=False)
    assert cost_table(pcie, Op.ALLREDUCE, 1 << 20)[Algo.RING, Proto.LL128] == -1.0
    assert cost_table(replace(A100, sm_version=60), Op.ALLREDUCE, 1 << 20)[Algo.RING, Proto.LL128] == -1.0
    # NIC reached through a peer GPU (PXN): fine on Hopper, not on Ampere
    assert not enabled(replace(A100_2N, inter_path="PXN"), Op.ALLREDUCE, Algo.RING, Proto.LL128)
    assert enabled(replace(A100_2N, inter_path="PXN", sm_version=90), Op.ALLREDUCE, Algo.RING, Proto.LL128)
    # an explicit ll128_enabled replaces the rule, NCCL_PROTO overrides both
    assert enabled(replace(pcie, ll128_enabled=True), Op.ALLREDUCE, Algo.RING, Proto.LL128)
    assert not enabled(replace(A100, ll128_enabled=False), Op.ALLREDUCE, Algo.RING, Proto.LL128)
    forced = replace(pcie, proto_env="LL128")
    table = cost_table(forced, Op.ALLREDUCE, 1 << 20)
    assert table[Algo.RING, Proto.LL128] > 0 and table[Algo.RING, Proto.SIMPLE] == -1.0


def test_algo_env_lists():
    assert parse_algo_env("ring,tree")[Op.ALLREDUCE] == {
        Algo.TREE: 1, Algo.RING: 1, Algo.COLLNET_DIRECT: 0, Algo.COLLNET_CHAIN: 0, Algo.NVLS: 0,
        Algo.NVLS_TREE: 0, Algo.PAT: 0}
    negated = parse_algo_env("^tree")[Op.BROADCAST]
    assert negated[Algo.TREE] == 0 and all(v == 1 for a, v in negated.items() if a is not Algo.TREE)
    per_func = parse_algo_env("allreduce:ring;allgather:^pat")
    assert per_func[Op.ALLREDUCE][Algo.RING] == 1 and per_func[Op.ALLREDUCE][Algo.TREE] == 0
    assert per_func[Op.ALLGATHER][Algo.PAT] == 0 and per_func[Op.ALLGATHER][Algo.RING] == 1
    assert per_func[Op.REDUCESCATTER][Algo.PAT] == 1  # untouched functions keep the default
    mixed = parse_proto_env("^LL128;allreduce:LL128")
    assert mixed[Op.ALLREDUCE] == {Proto.LL: 0, Proto.LL128: 1, Proto.SIMPLE: 0}
    assert mixed[Op.ALLGATHER] == {Proto.LL: 1, Proto.LL128: 0, Proto.SIMPLE: 1}
    assert parse_proto_env("Simple")[Op.REDUCE][Proto.LL128] == 0
    assert parse_proto_env("^LL")[Op.REDUCE][Proto.LL128] == 1  # "^" forces LL128 on, not "auto"


@pytest.mark.parametrize(("value", "message"), [
    ("ring, tree", "unknown element ' tree'"),
    ("ring;tree", "all entries except the first must have a prefix"),
    ("allreduc:ring", "unknown function 'allreduc'"),
])
def test_algo_env_errors_name_the_problem(value, message):
    with pytest.raises(ValueError, match=message):
        parse_algo_env(value)
    with pytest.raises(ValueError, match="NCCL_ALGO"):
        replace(A100, algo_env=value)


def test_algo_env_disables_entries():
    table = cost_table(replace(A100, algo_env="^ring"), Op.ALLREDUCE, 1 << 20)
    assert all(table[Algo.RING, p] == -1.0 for p in Proto)
    assert table[Algo.TREE, Proto.SIMPLE] > 0


def test_pat_needs_one_gpu_per_node():
    one_per_node = replace(A100, nranks=4, nnodes=4, nchannels=2, bw_intra=24.0, bw_inter=24.0)
    table = cost_table(one_per_node, Op.ALLGATHER, 1 << 20)
    assert table[Algo.PAT, Proto.SIMPLE] > 0
    assert table[Algo.PAT, Proto.LL] == -1.0
    # log2(4) × interLat(Tree NET Simple 14)/3.5 + nRanks × 2.8 on top of PAT's base 8
    assert model_entry(one_per_node, Op.ALLGATHER, Algo.PAT, Proto.SIMPLE)[1] == pytest.approx(
        8 + 2 * 14 / 3.5 + 4 * 2.8)
    assert cost_table(A100_2N, Op.ALLGATHER, 1 << 20)[Algo.PAT, Proto.SIMPLE] == -1.0
    assert cost_table(one_per_node, Op.ALLREDUCE, 1 << 20)[Algo.PAT, Proto.SIMPLE] == -1.0


def test_nvls_needs_support_and_simple():
    h100 = replace(A100, sm_version=90, cpu_vendor="intel", bw_intra=30.0, bw_inter=30.0, nvls_support=True,
                   nvls_graph_channels=8, nvls_bw_intra=40.0, nvls_bw_inter=60.0, nvswitch=True)
    table = cost_table(h100, Op.ALLREDUCE, 1 << 30)
    assert table[Algo.NVLS, Proto.SIMPLE] > 0
    assert table[Algo.NVLS, Proto.LL] == table[Algo.NVLS, Proto.LL128] == -1.0
    assert table[Algo.NVLS_TREE, Proto.SIMPLE] == -1.0  # one node
    bw, lat = model_entry(h100, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)
    assert bw == pytest.approx(8 * min(40 * 0.85 * 7 / 8 * 2, 60) * 8 / 14)
    assert lat == 25.0
    assert cost_table(replace(h100, nvls_support=False), Op.ALLREDUCE, 1 << 30)[Algo.NVLS, Proto.SIMPLE] == -1
    assert cost_table(h100, Op.ALLREDUCE, 1 << 30, dtype="int8")[Algo.NVLS, Proto.SIMPLE] == -1
    # 2.27.5: NVLS bandwidth was min(bwIntra, bwInter) with a 5/6 bus->algorithm ratio
    old = replace(h100, nccl_version=(2, 27, 5))
    assert model_entry(old, Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)[0] == pytest.approx(8 * 40 * 5 / 6)


def test_multinode_nvls_needs_collnet_but_nvls_tree_does_not():
    h100_2n = replace(A100_2N, sm_version=90, cpu_vendor="intel", bw_intra=48.0, bw_inter=48.0,
                      nvls_support=True, nvls_graph_channels=8, nvls_bw_intra=40.0, nvls_bw_inter=48.0)
    table = cost_table(h100_2n, Op.ALLREDUCE, 1 << 30)
    assert table[Algo.NVLS, Proto.SIMPLE] == -1.0
    assert table[Algo.NVLS_TREE, Proto.SIMPLE] > 0
    bw, _ = model_entry(h100_2n, Op.ALLREDUCE, Algo.NVLS_TREE, Proto.SIMPLE)
    # min(intra 40×.85×7/8×2, inter 48×2, perChMaxNVLSTreeBw[Hopper][N2] 57.7)
    assert bw == pytest.approx(8 * 57.7 * 16 / 30)


def test_blackwell_tables_follow_the_release():
    b200 = replace(A100, sm_version=100)
    caps = {v: model_entry(replace(b200, nccl_version=v), Op.ALLREDUCE, Algo.RING, Proto.LL128)[0]
            for v in ((2, 27, 5), (2, 30, 7))}
    assert caps[(2, 27, 5)] == pytest.approx(min(12 * 20 * 0.92, 12 * 73.4) * 8 / 14)
    assert caps[(2, 30, 7)] == pytest.approx(min(12 * 20 * 0.92, 12 * 40.0) * 8 / 14)
    with pytest.raises(ValueError, match="predates"):
        replace(A100, nccl_version=(2, 7, 8))


def test_single_rank_fp8_and_p2p():
    table = cost_table(replace(A100, nranks=1, nchannels=2), Op.ALLREDUCE, 1024)
    assert table[Algo.RING, Proto.SIMPLE] == 0.0
    assert sum(t >= 0 for t in table.values()) == 1
    big = replace(A100_2N)
    plain = cost_table(big, Op.ALLREDUCE, 1 << 20)
    fp8 = cost_table(big, Op.ALLREDUCE, 1 << 20, dtype="fp8_e4m3")
    assert fp8[Algo.RING, Proto.SIMPLE] == pytest.approx(plain[Algo.RING, Proto.SIMPLE] * 1024)
    assert fp8[Algo.TREE, Proto.SIMPLE] == pytest.approx(plain[Algo.TREE, Proto.SIMPLE])
    with pytest.raises(ValueError, match="point-to-point"):
        cost_table(A100, Op.ALLTOALL, 1024)


def test_bad_comm_info():
    with pytest.raises(ValueError, match="nnodes"):
        replace(A100, nnodes=9)
    with pytest.raises(ValueError, match="cpu_vendor"):
        replace(A100, cpu_vendor="via")
    with pytest.raises(ValueError, match="path type"):
        replace(A100, inter_path="PCIE")
