"""The closed form and the SimPy engine agree on lone collectives, and share links when concurrent."""

import numpy as np
import pytest

from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.des import CollectiveRun, simulate
from twin.model.geometry import CommGeometry
from twin.model.schedule import Unsupported, build_schedule
from twin.topology import load_cluster

CHUNK = {Proto.LL: 16384, Proto.LL128: 30720 * 4, Proto.SIMPLE: 1 << 19}


@pytest.fixture(scope="module")
def two_node_a100():
    cluster = load_cluster("dgx-a100", nodes=2)
    return CommGeometry(cluster, cluster.gpus())


@pytest.fixture(scope="module")
def one_node_h100():
    cluster = load_cluster("dgx-h100")
    return CommGeometry(cluster, cluster.gpus())


@pytest.fixture(scope="module")
def two_node_a100_nccl28():
    cluster = load_cluster("dgx-a100", nodes=2)
    return CommGeometry(cluster, cluster.gpus(), nccl_version=(2, 8, 4))


def _cases(geom):
    for op in Op:
        for algo in Algo:
            for proto in Proto:
                for nbytes in (8, 1 << 16, 1 << 22, 1 << 27):
                    config = Config(algo, proto, Transport.P2P, 8, 512, CHUNK[proto])
                    try:
                        yield op, algo, proto, nbytes, build_schedule(geom, op, nbytes, config)
                    except Unsupported:
                        continue


@pytest.mark.parametrize("geometry", ["two_node_a100", "one_node_h100"])
def test_engines_agree_within_2_percent_on_lone_collectives(geometry, request):
    geom = request.getfixturevalue(geometry)
    cases = list(_cases(geom))
    covered = {(op, algo) for op, algo, *_ in cases}
    assert {Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.BROADCAST, Op.REDUCE, Op.ALLTOALL,
            Op.SENDRECV} <= {op for op, _ in covered}
    # Across nodes the pipelines' network hops hold their first step (``Schedule.hold_bytes``).
    assert geometry == "one_node_h100" or any(s.shape == "pipeline" and np.any(s.hold_bytes) for *_, s in cases)
    for op, algo, proto, nbytes, schedule in cases:
        fast = float(schedule.time_us())
        des = simulate([CollectiveRun(schedule)])[0]
        assert des == pytest.approx(fast, rel=0.02), (op, algo, proto, nbytes)


def test_engines_agree_on_trees_that_reduce_up_before_they_broadcast_down(two_node_a100_nccl28):
    # NCCL 2.8's Tree LL and Simple run their two passes one after the other (``Schedule.passes``).
    trees = [(proto, nbytes, s) for op, algo, proto, nbytes, s in _cases(two_node_a100_nccl28)
             if op is Op.ALLREDUCE and algo is Algo.TREE]
    assert {proto for proto, _, s in trees if s.passes == 2} == {Proto.LL, Proto.SIMPLE}
    for proto, nbytes, schedule in trees:
        assert simulate([CollectiveRun(schedule)])[0] == pytest.approx(float(schedule.time_us()), rel=0.02), (
            proto, nbytes)


def test_concurrent_collectives_share_links(two_node_a100):
    # 32 channels put 4 on each NIC, so the NICs (not the channels' CTAs) set the pace.
    config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 32, 512, 1 << 21)
    schedule = build_schedule(two_node_a100, Op.ALLREDUCE, 1 << 30, config)
    alone = simulate([CollectiveRun(schedule)])[0]
    together = simulate([CollectiveRun(schedule), CollectiveRun(schedule)])
    # Same links: each gets at most half the bottleneck, but neither is slower than running second.
    for end in together:
        assert 1.3 * alone < end <= 2.0 * alone
    staggered = simulate([CollectiveRun(schedule), CollectiveRun(schedule, start_us=alone)])
    assert staggered[0] == pytest.approx(alone, rel=1e-6)


def test_collectives_on_disjoint_links_do_not_interfere():
    cluster = load_cluster("dgx-a100", nodes=2)
    left = CommGeometry(cluster, cluster.gpus()[:8])
    right = CommGeometry(cluster, cluster.gpus()[8:])
    config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8, 512, 1 << 21)
    a = build_schedule(left, Op.ALLREDUCE, 1 << 26, config)
    b = build_schedule(right, Op.ALLREDUCE, 1 << 26, config)
    ends = simulate([CollectiveRun(a), CollectiveRun(b)])
    assert ends == pytest.approx([float(a.time_us()), float(b.time_us())], rel=1e-9)


def test_data_parallel_groups_on_their_own_rails_do_not_interfere():
    """Eight groups of one GPU per node (GPU g of every node, as data parallelism makes them) on a
    rail-optimised DGX H100 cluster: each group's channels use its GPU's own NIC, as NCCL picks
    them, so all eight at once take about as long as each alone."""
    cluster = load_cluster("dgx-h100", nodes=4)
    config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 4, 512, 1 << 21)
    schedules = [build_schedule(CommGeometry(cluster, [f"n{h}/gpu{g}" for h in range(4)]), Op.ALLREDUCE,
                                1 << 28, config) for g in range(8)]
    alone = [simulate([CollectiveRun(s)])[0] for s in schedules]
    together = simulate([CollectiveRun(s) for s in schedules])
    assert together == pytest.approx(alone, rel=0.02)
