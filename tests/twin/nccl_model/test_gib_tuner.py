"""Google's gIB tuner config (GCP a3-ultra, a4) as the twin's NCCL model applies it."""

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model import NcclCommInfo, default_resources, nccl_choice
from twin.nccl_model.cost_table import implemented
from twin.nccl_model.gib_tuner import TUNER_CONFIGS, tuner_config, tuner_for_path
from twin.nccl_model.inputs import PathType
from twin.nccl_model.search import comm_info
from twin.placement import Communicator
from twin.topology import load_cluster
from twin.topology.loader import dump_spec, read_spec

MIB = 1 << 20
A3U_DRANET = Path(__file__).resolve().parents[3] / "benchmarks" / "clusters" / "gcp-a3-ultra-dranet-1gpu-1nic.yaml"


@pytest.mark.parametrize("name", sorted(TUNER_CONFIGS))
def test_every_bundled_rule_is_an_ordered_range_of_something_nccl_implements(name):
    config = tuner_config(name)
    assert len(config.blocks) >= 10
    for block in config.blocks:
        assert block.nodes[0] >= 2 and block.rules  # multi-node shapes only
        for op, rules in block.rules.items():
            assert rules[0].min_bytes == 0 and rules[-1].max_bytes is None
            for low, high in pairwise(rules):
                assert low.max_bytes is not None and low.max_bytes <= high.min_bytes
            assert all(implemented(op or Op.ALLGATHER, r.algo, r.proto) for r in rules)  # default: AllGather's
            assert all(1 <= r.nchannels <= 32 for r in rules)


def test_a_size_between_rules_keeps_nccls_choice():
    # a4, 5-8 nodes of 4-8 ranks: the other collectives' rules skip 16-32 MiB per rank.
    a4 = tuner_config("gib-a4")
    assert a4.rule(8, 8, Op.ALLGATHER, 64 * 20 * MIB, nranks=64) is None
    assert a4.rule(8, 8, Op.ALLGATHER, 64 * 40 * MIB, nranks=64).proto is Proto.SIMPLE
    assert a4.rule(8, 8, Op.ALLGATHER, 64 * 8 * MIB, nranks=64).proto is Proto.LL128


def test_google_config_paths_name_the_bundled_tables():
    assert tuner_for_path("/usr/local/gib/configs/tuner_config_a3u.txtpb") == "gib-a3u"
    assert tuner_for_path("/usr/local/gib/configs/tuner_config_a4.txtpb") == "gib-a4"
    assert tuner_for_path("/usr/local/gib/configs/tuner_config_default.txtpb") is None
    with pytest.raises(ValueError, match=r"unknown tuner config 'gib-a5' \(known: gib-a3u, gib-a4\)"):
        NcclCommInfo(2, 2, 90, False, 24.0, 24.0, 4, 24.0, 24.0, tuner_config="gib-a5")


def test_a3_ultra_vms_run_nccl_with_the_a3u_table_and_stock_nccl_without_it(tmp_path):
    """Two a3-ultra VMs, one GPU each: the preset's fabric (gIB) loads Google's a3u table; the
    table's pick wins NCCL's argmin, its channels replace NCCL's up to the communicator's."""
    cluster = load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1)
    info = comm_info(cluster, cluster.gpus(), nccl_version=(2, 25, 1))
    assert info.tuner_config == "gib-a3u" and info.nchannels == 4
    big, mid = (nccl_choice(info, Op.ALLREDUCE, n) for n in (64 * MIB, 32 * MIB))
    assert (big.algo, big.proto, big.nchannels) == (Algo.TREE, Proto.SIMPLE, 4)
    assert (mid.algo, mid.proto, mid.nchannels) == (Algo.RING, Proto.SIMPLE, 4)  # the table's 8, capped at 4
    small = nccl_choice(info, Op.ALLGATHER, 64 << 10)  # 32 KiB per rank: Ring/LL, 2 channels
    assert (small.algo, small.proto, small.nchannels) == (Algo.RING, Proto.LL, 2)
    stock = replace(info, tuner_config=None)
    assert nccl_choice(stock, Op.ALLGATHER, 64 << 10).nchannels == 4
    assert nccl_choice(stock, Op.ALLREDUCE, 64 * MIB).algo is Algo.RING
    # NCCL_ALGO=Ring leaves Tree at -1 in the cost table: the tuner cannot bring it back, but its
    # channel count still replaces NCCL's.
    ring_only = replace(info, algo_env="Ring")
    assert nccl_choice(ring_only, Op.ALLREDUCE, 64 * MIB).algo is Algo.RING
    assert default_resources(info, Op.ALLGATHER, Algo.RING, Proto.LL, 64 << 10)[0] == 2
    # The same VMs described with plain RoCE (no gIB profile) run stock NCCL.
    spec = read_spec("gcp-a3-ultra")
    path = tmp_path / "a3u-roce.yaml"
    path.write_text(dump_spec(replace(spec, fabric=replace(spec.fabric, kind="roce"))))
    plain = load_cluster(path, nodes=2, gpus_per_node=1)
    assert comm_info(plain, plain.gpus(), nccl_version=(2, 25, 1)) == stock


def test_one_node_has_no_table_block_so_nccl_chooses_alone():
    cluster = load_cluster("gcp-a4")
    info = comm_info(cluster, cluster.gpus()[:2], nccl_version=(2, 26, 6))
    assert info.tuner_config is None  # the profile binds between nodes only; no block of either table has one node
    assert all(tuner_config(n).rule(1, 8, Op.ALLGATHER, 1 << 30, nranks=8) is None for n in TUNER_CONFIGS)


def test_a3_ultra_dranet_pods_reach_their_nic_through_both_sockets_so_nccl_stages_and_drops_ll128():
    """The held-out a3-ultra logs' pods (benchmarks/clusters/gcp-a3-ultra-dranet-1gpu-1nic.yaml): a
    GPU of socket 1, a NIC of socket 0.  NCCL's path between them is SYS: no GPUDirect RDMA (the
    bytes staged in host memory, across the socket link) and no LL128 (inter path worse than PXN),
    so the a3u table's Ring LL128 rows fall back on NCCL's own choice; the preset's own pairs keep
    both."""
    pod, paired = load_cluster(A3U_DRANET, nodes=2), load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1)
    info, own = (comm_info(c, c.gpus(), nccl_version=(2, 25, 1)) for c in (pod, paired))
    assert (info.type_inter, own.type_inter) == (PathType.SYS, PathType.PIX)
    assert info.tuner_config == own.tuner_config == "gib-a3u" and info.nchannels == own.nchannels == 4
    for nbytes in (256 << 10, 1 * MIB):  # the table: Ring LL128 from 64 KiB to 2 MiB per rank
        assert nccl_choice(own, Op.ALLREDUCE, nbytes).proto is Proto.LL128
        assert (nccl_choice(info, Op.ALLREDUCE, nbytes).algo, nccl_choice(info, Op.ALLREDUCE, nbytes).proto) == (
            Algo.RING, Proto.LL)
    flows = [Communicator.first(c, 2).geometry().flow(*c.gpus()) for c in (pod, paired)]
    assert [(f.gdr_send, f.gdr_recv) for f in flows] == [(False, False), (True, True)]
    assert [h.kind for h in flows[0].hops].count("cpu") == 2  # the socket link on both VMs
