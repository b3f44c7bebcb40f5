"""aws-ofi-nccl's RDMA protocol on p5: one net device per GPU of its four EFA rails, striped.

NCCL sees the plugin's devices (the first rail's speed times the group's size), so its ring search
and channel count are a DGX H100's; the twin's flows spread each channel over the device's rails.
PXN (NCCL >= 2.12) lets the ring leave by the NIC it came in through (docs/physics.md, "EFA rails").
"""

from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.model.geometry import CommGeometry
from twin.nccl_model.inputs import PathType
from twin.nccl_model.search import comm_info
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster


@pytest.mark.parametrize(("preset", "rails"), [("aws-p5", 4), ("aws-p5en", 2)])
def test_the_plugin_merges_a_gpus_rails_into_one_device_nccl_searches_at_their_summed_speed(preset, rails):
    cluster = load_cluster(preset, nodes=2)
    for gpu in cluster.gpus()[:8]:
        near = cluster.local_nics(gpu)
        assert [cluster.rails(n) for n in near] == [near] * rails
    info = comm_info(cluster, cluster.gpus())
    h100 = load_cluster("dgx-h100", nodes=2)
    dgx = comm_info(h100, h100.gpus())
    # 8 rings at 48 GB/s on 8 devices of 400 Gb/s, 16 channels, as on 2 DGX H100 (8 NICs of 400 Gb/s)
    assert (info.graph_channels, info.nchannels, info.bw_inter) == (dgx.graph_channels, dgx.nchannels, dgx.bw_inter)
    assert info.nchannels == 16 and info.type_inter <= PathType.PXN  # LL128 on (ll128_default)


def test_first_generation_efa_and_infiniband_nics_stay_one_device_each():
    p4de = Path(__file__).resolve().parents[2] / "benchmarks/clusters/aws-p4de.yaml"  # efa-v1: SENDRECV protocol
    for preset in (str(p4de), "dgx-h100"):
        cluster = load_cluster(preset, nodes=2)
        assert all(cluster.rails(n) == [n] for n in cluster.nics(0))


def test_a_channels_network_flow_carries_a_quarter_of_its_payload_on_each_rail():
    geom = CommGeometry(load_cluster("aws-p5", nodes=2))
    between = [f for f in geom.channel_flows("ring", 0) if f.kind == "net"]
    assert between
    for flow in between:
        out = {h.src: h.share for h in flow.hops if h.kind == "net" and "/nic" in h.src}  # NIC -> fabric
        assert len(out) == 4 and sum(out.values()) == pytest.approx(1.0)
        assert geom.cluster.rails(next(iter(out))) == sorted(out, key=lambda n: int(n.rsplit("nic", 1)[1]))


def test_nvls_tree_on_two_p5_reaches_the_rate_of_all_32_rails():
    """The held-out two-p5 run reaches 487 GB/s busbw at 16 GiB (NVLS-Tree); on half the rails (a
    channel's payload on one NIC) the twin gave 240."""
    comm = Communicator.first(load_cluster("aws-p5", nodes=2))
    p = predict(comm, Op.ALLREDUCE, 16 << 30, algo=Algo.NVLS_TREE, proto=Proto.SIMPLE)
    assert 400 < p.busbw_gbps < 487 * 1.1


def test_pxn_lets_a_ring_leave_by_its_nic_from_another_gpu_from_nccl_2_12():
    cluster = load_cluster("aws-p5", nodes=2)
    before = comm_info(cluster, cluster.gpus(), nccl_version=(2, 11, 4))
    after = comm_info(cluster, cluster.gpus(), nccl_version=(2, 12, 12))
    assert before.type_inter > PathType.PXN >= after.type_inter
