"""The physical mechanisms of the twin's model: network steps, paths, channels' CTAs, back-to-back calls."""

import dataclasses
import json
from functools import cache
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from tuner.rules import ALGORITHMS_FOR_OP
from tuner.space import resource_grid
from twin.model.geometry import LL_SCAN_WAIT_SHARE, CommGeometry
from twin.model.host import NCCL_TESTS_ITERS
from twin.model.netpath import ll_scan_us, net_step_latency_us, proxy_overhead_us, proxy_post_us
from twin.model.protocols import cta_copy_gbps, hop_latency_us, store_efficiency
from twin.model.schedule import (
    Unsupported,
    build_schedule,
    check_supported,
    memory_ops_per_byte,
    phased_gbps,
    ring_phases,
    schedule_for,
    tree_cta_gbps,
    tree_split,
    tree_up_down_cta_gbps,
)
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def a100_nodes():
    return {n: CommGeometry(load_cluster("dgx-a100", nodes=n)) for n in (1, 2, 4, 8)}


def small_tree_us(geom: CommGeometry) -> float:
    config = Config(Algo.TREE, Proto.LL, Transport.P2P, 1, 640, 32768)
    return float(build_schedule(geom, Op.ALLREDUCE, 1024, config).time_us())


def test_network_step_costs_the_proxy_path_not_just_the_fabric():
    for proto in Proto:
        step = net_step_latency_us(proto, fabric_us=1.0, cpu_vendor="intel")
        assert step > 1.0 + proxy_overhead_us(proto, "intel")  # more than cables and the post
        assert step > 3 * hop_latency_us(proto, "nvlink")
    simple, ll = (net_step_latency_us(p, fabric_us=1.0, cpu_vendor="intel") for p in (Proto.SIMPLE, Proto.LL))
    assert simple > ll  # Simple's receiver must reap, flush and write the tail first
    for proto in Proto:
        intel = net_step_latency_us(proto, fabric_us=1.0, cpu_vendor="intel")
        assert net_step_latency_us(proto, fabric_us=1.0, cpu_vendor="amd") > intel
        assert net_step_latency_us(proto, fabric_us=2.0, cpu_vendor="intel") == pytest.approx(intel + 1.0)


def test_staging_through_host_memory_slows_the_receiving_kernel():
    gdr = net_step_latency_us(Proto.LL128, fabric_us=1.0, cpu_vendor="intel")
    staged = net_step_latency_us(Proto.LL128, fabric_us=1.0, cpu_vendor="intel", gdr_send=False, gdr_recv=False)
    assert staged > gdr


def test_nics_behind_the_cpu_lose_gpudirect(a100_nodes):
    geom = a100_nodes[2]
    flow = geom.ring_flows(0)[7]  # the hop that leaves node 0
    assert flow.kind == "net" and flow.gdr_send and flow.gdr_recv
    farmshare = load_cluster("benchmarks/clusters/farmshare-l40s.yaml", nodes=2)
    staged = CommGeometry(farmshare, transport=Transport.P2P).ring_flows(0)
    net = [f for f in staged if f.kind == "net"]
    assert net and not any(f.gdr_send and f.gdr_recv for f in net)


def test_small_message_latency_grows_with_network_levels(a100_nodes):
    times = [small_tree_us(a100_nodes[n]) for n in (1, 2, 4, 8)]
    assert times == sorted(times) and len(set(times)) == 4
    # Each extra tree level adds two network hops (up and down), a few µs each, not a whole
    # ring's worth of network latency on every NVLink hop.
    added = [b - a for a, b in pairwise(times[1:])]
    for step in added:
        assert 2 * net_step_latency_us(Proto.LL, fabric_us=1.0, cpu_vendor="intel") <= step < 30


def test_nvlink_hops_of_a_multinode_ring_do_not_pay_the_network_latency(a100_nodes):
    geom = a100_nodes[2]
    net = max(geom.hop_latency_us(f, Proto.LL) for f in geom.ring_flows(0))
    assert geom.path_latency_us("ring", Proto.LL) < net / 2


def test_a_multinode_ring_is_paced_by_its_busiest_proxys_posts_not_its_latency_plus_them(a100_nodes):
    """On 64 channels each GPU's proxy thread makes 8 channels' network sends and 8 receives a step
    (64 channels over 8 NICs a node), at a post's CPU time each: 30 steps of a 2×8 ring take at
    least 30 × 16 posts, one after another, while the steps' own wait stays the ring's mean hop (a
    step depends on the step before it one rank back, so the network hops' latency is spread over
    the ring)."""
    geom = a100_nodes[2]
    post = proxy_post_us(geom.cpu_vendor, geom.params)
    share = geom.share("ring", 64, Proto.LL128)
    assert share.proxy_us == pytest.approx(16 * post)
    assert share.step_us < share.proxy_us
    s = schedule_for(geom, Op.ALLREDUCE, 4 * MIB, Algo.RING, Proto.LL128, 64, 640, 576000)
    posts = s.n_steps * share.proxy_us
    assert float(s.steps_time_us(s.gbps)) > posts + share.proxy_lag_us
    # The grain a step's data waits for is on the ring's path, not on the thread's: not added per step.
    assert float(s.steps_time_us(s.gbps)) < s.n_steps * (share.proxy_us + s.unit_bytes / (s.gbps * 1e3))
    # A Simple step goes out in two slices, each posted (and flushed on arrival, sm_80) on its own:
    # per slice 2 sends, 2 receives and their 2 flushes on 16 channels.
    simple = schedule_for(geom, Op.ALLREDUCE, 64 * MIB, Algo.RING, Proto.SIMPLE, 16, 512, 1 << 19)
    assert float(simple.proxy_us) == pytest.approx(2 * geom.share("ring", 16, Proto.SIMPLE).proxy_us)
    assert geom.share("ring", 16, Proto.SIMPLE).proxy_us == pytest.approx(6 * post)
    assert a100_nodes[1].share("ring", 16, Proto.SIMPLE).proxy_us == 0


def _ring_walk_us(geom: CommGeometry, s, proto: Proto, nchannels: int) -> float:
    """A ring AllReduce's steps walked rank by rank: rank r's step k starts once it has the first
    grain of rank r−1's step k−1 and has written its own step k−1; over NVLink the data cuts through
    (hop latency plus a grain), across the network the sender's proxy thread posts the step once it
    is written, after the thread's work of the step before (``Schedule.proxy_us``, every channel of
    that GPU: its posts, and for LL its checks of every line, ``netpath.ll_scan_us``), and the rest
    of the hop follows (its latency less the post).  The first step is written at the CTA's own rate
    (``Schedule.write_gbps``: the FIFO is empty), the rest as the ring moves them."""
    flows = geom.channel_flows("ring", 0)
    n = len(flows)
    post = proxy_post_us(geom.cpu_vendor, geom.params)  # one request
    step, grain = (float(b) / (float(s.gbps) * 1e3) for b in (s.step_bytes, s.unit_bytes))
    first = [0.0] * n  # when rank r has the first grain of its next step's input
    last = [0.0] * n  # ... and its last byte
    write = float(s.step_bytes) / (max(float(s.write_gbps), float(s.gbps)) * 1e3)
    start, end, thread = [0.0] * n, [write] * n, [0.0] * n
    for _ in range(2 * (n - 1)):
        arrive, whole = [0.0] * n, [0.0] * n
        for r, f in enumerate(flows):
            lat = geom.hop_latency_us(f, proto)
            if f.kind == "net":
                thread[r] = max(end[r], thread[r]) + float(s.proxy_us)
                arrive[(r + 1) % n] = thread[r] + lat - post
                whole[(r + 1) % n] = arrive[(r + 1) % n] + step - grain
            else:
                arrive[(r + 1) % n], whole[(r + 1) % n] = start[r] + lat + grain, end[r] + lat
        first, last = arrive, whole
        start = [max(a, e) for a, e in zip(first, end, strict=True)]
        end = [max(b + step, w + grain) for b, w in zip(start, last, strict=True)]
    return max(end)


def test_a_rings_closed_form_is_its_step_by_step_walk_where_the_proxy_paces_it(a100_nodes):
    """Where the busiest proxy's posts outlast a step (2×8 A100, AMD hosts, LL128 on 64 channels at 1–4 MiB), the
    closed form is the ring walked step by step; elsewhere it is no slower than that walk, which
    adds the ring's fill and drain to the steps' mean."""
    geom = a100_nodes[2]
    for size in (1 * MIB, 4 * MIB):
        s = schedule_for(geom, Op.ALLREDUCE, size, Algo.RING, Proto.LL128, 64, 640, 576000)
        assert float(s.proxy_us) > float(s.step_time_us(s.gbps))
        assert float(s.steps_time_us(s.gbps)) == pytest.approx(_ring_walk_us(geom, s, Proto.LL128, 64), rel=1e-6)
    h100 = CommGeometry(load_cluster("dgx-h100", nodes=2))
    for proto, nthreads, chunk in ((Proto.LL, 512, 1 << 15), (Proto.LL128, 640, 576000)):
        s = schedule_for(h100, Op.ALLREDUCE, 4 * MIB, Algo.RING, proto, 8, nthreads, chunk)
        assert float(s.steps_time_us(s.gbps)) <= _ring_walk_us(h100, s, proto, 8)


def test_a_rings_data_cuts_through_nvlink_but_not_the_network():
    """Inside a node an LL ring step's data follows one grain behind its sender; across the network
    the proxy posts the step once the kernel has written all of it and it has checked every line
    (``sendProxyProgress``), so each network hop of the ring waits for the whole step: on two
    one-GPU VMs (every hop crosses the network) a step's wait grows by the step's own write and a
    share of its scan (``netpath.ll_scan_us``, ``LL_SCAN_WAIT_SHARE``), on one node not at all."""
    def wait_us(geom: CommGeometry, nbytes: int) -> tuple[float, float, float]:
        s = schedule_for(geom, Op.ALLREDUCE, nbytes, Algo.RING, Proto.LL, 1, 512, 1 << 15)
        scan = LL_SCAN_WAIT_SHARE * float(ll_scan_us(Proto.LL, s.step_bytes, geom.cpu_vendor, geom.params))
        return float(s.latency_us(s.gbps)), float(s.step_bytes - s.unit_bytes) / (float(s.gbps) * 1e3), scan

    vms = CommGeometry(load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1))
    (small, small_write, small_scan), (big, write, scan) = wait_us(vms, 8 << 10), wait_us(vms, 32 << 10)
    assert write > 0 and scan > small_scan > 0
    assert big == pytest.approx(small + write - small_write + scan - small_scan)
    node = CommGeometry(load_cluster("gcp-a3-ultra"), load_cluster("gcp-a3-ultra").gpus()[:2])
    assert wait_us(node, 8 << 10)[0] == pytest.approx(wait_us(node, 32 << 10)[0])


def test_a_pipelines_network_hops_wait_for_their_first_step_whole():
    """Down a Broadcast chain across two nodes the LL128 lines cut through NVLink a warp's grain
    behind, but the proxy posts a FIFO step to the network only once the kernel has written all
    of it (``sendProxyProgress``): the chain's fill waits, at each network hop, for its first chunk
    (576,000 B, or the channel's share if smaller) less the grain, written at the chain's rate.
    The chunks behind it follow their 8 posted steps unheld; on one node nothing is held."""
    nodes = CommGeometry(load_cluster("dgx-h100", nodes=2))
    for nbytes, first in ((4 * MIB, 576000), (256 << 10, 256 << 10)):
        s = schedule_for(nodes, Op.BROADCAST, nbytes, Algo.RING, Proto.LL128, 1, 640, 576000)
        net_hops = nodes.network_share("chain") * s.steps
        assert net_hops >= 1
        assert float(s.hold_bytes) * s.steps == pytest.approx(net_hops * (first - float(s.unit_bytes)))
        unheld = dataclasses.replace(s, hold_bytes=0.0)
        assert float(s.pace_us(s.gbps)) == pytest.approx(float(unheld.pace_us(unheld.gbps)))
        held_us = s.steps * float(s.hold_bytes) / (float(s.gbps) * 1e3)
        assert float(s.time_us() - unheld.time_us()) == pytest.approx(held_us)
    # Trees hold nothing yet (``schedule_for``, Tree branch).
    assert schedule_for(nodes, Op.ALLREDUCE, 4 * MIB, Algo.TREE, Proto.LL128, 8, 640, 34560).hold_bytes == 0
    one = CommGeometry(load_cluster("dgx-h100"))
    assert schedule_for(one, Op.BROADCAST, 4 * MIB, Algo.RING, Proto.LL128, 1, 640, 576000).hold_bytes == 0


def test_channels_on_one_proxy_queue_behind_each_other_on_the_network_hop():
    # Two a3-ultra VMs, one GPU each: every channel of the ring leaves through the same GPU's proxy,
    # which posts one send and one receive per channel per step in turn (``progressOps``,
    # ``src/proxy.cc``): each further channel adds two requests at a post's CPU time.
    geom = CommGeometry(load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1))
    post = proxy_post_us(geom.cpu_vendor, geom.params)
    one, four = (geom.share("ring", nc, Proto.LL).step_us for nc in (1, 4))
    assert four == pytest.approx(one + 6 * post)
    # Simple on Hopper flushes nothing (``ncclTopoNeedFlush``): the same requests.
    one, four = (geom.share("ring", nc, Proto.SIMPLE).step_us for nc in (1, 4))
    assert four == pytest.approx(one + 6 * post)
    # On Ampere each further channel's received Simple step adds its flush too.
    a100 = CommGeometry(load_cluster("dgx-a100", nodes=2, gpus_per_node=1))
    one, four = (a100.share("ring", nc, Proto.SIMPLE).step_us for nc in (1, 4))
    assert four == pytest.approx(one + 9 * proxy_post_us(a100.cpu_vendor, a100.params))
    # On one node nothing queues on a proxy; across 8-GPU nodes only the ring's network hops wait.
    single = CommGeometry(load_cluster("gcp-a3-ultra"))
    assert single.share("ring", 8, Proto.LL).step_us == single.share("ring", 1, Proto.LL).step_us
    nodes = CommGeometry(load_cluster("gcp-a3-ultra", nodes=2))
    assert nodes.network_share("ring") == pytest.approx(2 / 16)


def test_two_rank_ring_peak_is_below_the_n_rank_ring_peak():
    cluster = load_cluster("dgx-a100")
    busbw = {}
    for n in (2, 4, 8):
        comm = Communicator.first(cluster, n)
        config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 24, 544, 1 << 21)
        busbw[n] = predict(comm, Op.ALLREDUCE, 1 << 30, **vars_of(config)).busbw_gbps
    assert busbw[2] < busbw[4] <= busbw[8]


def vars_of(config: Config) -> dict:
    return dict(algo=config.algo, proto=config.proto, transport=config.transport, nchannels=config.nchannels,
                nthreads=config.nthreads, chunk_bytes=config.chunk_bytes)


def test_memory_operations_per_byte_follow_the_primitives():
    ring = [memory_ops_per_byte(Op.ALLREDUCE, Algo.RING, n) for n in (2, 4, 8, 64)]
    assert ring == sorted(ring, reverse=True) and ring[0] == 4 and ring[-1] == pytest.approx(3, abs=0.05)
    for n in (2, 8):
        assert memory_ops_per_byte(Op.ALLREDUCE, Algo.RING, n, direct=True) < memory_ops_per_byte(
            Op.ALLREDUCE, Algo.RING, n)
        assert memory_ops_per_byte(Op.ALLGATHER, Algo.RING, n, direct=True) < memory_ops_per_byte(
            Op.ALLGATHER, Algo.RING, n)
    assert memory_ops_per_byte(Op.ALLREDUCE, Algo.TREE, 16) > memory_ops_per_byte(Op.ALLREDUCE, Algo.RING, 16)


def test_a_cta_moves_less_payload_when_each_byte_costs_more_operations():
    fast, slow = (cta_copy_gbps(1555, Proto.SIMPLE, 544, ops) for ops in (2.5, 4.0))
    assert slow < fast
    assert cta_copy_gbps(4800, Proto.SIMPLE, 544, 3) > cta_copy_gbps(1555, Proto.SIMPLE, 544, 3)
    assert cta_copy_gbps(1555, Proto.SIMPLE, 544) > cta_copy_gbps(1555, Proto.SIMPLE, 128)
    # LL handles one line per thread at a time: its rate grows linearly with threads.
    assert cta_copy_gbps(1555, Proto.LL, 512, 4) == pytest.approx(2 * cta_copy_gbps(1555, Proto.LL, 256, 4))
    assert cta_copy_gbps(1555, Proto.LL, 512, 5) < cta_copy_gbps(1555, Proto.LL, 512, 4)


def test_one_process_per_gpu_moves_less_than_one_process_driving_all():
    cluster = load_cluster("dgx-a100")
    per_gpu = predict(Communicator.first(cluster, 2), Op.ALLREDUCE, 1 << 30).busbw_gbps
    one_process = predict(Communicator.first(cluster, 2, gpus_per_process=2), Op.ALLREDUCE, 1 << 30).busbw_gbps
    assert per_gpu < one_process


def test_only_simple_writes_straight_into_a_peer_s_buffer_when_one_process_drives_every_gpu():
    # NCCL's LL and LL128 primitives have no direct operations (``PrimitivesWithoutDirect``), so
    # their CTAs move the same bytes whichever process drives the peer.
    cluster = load_cluster("dgx-a100")
    per_gpu, one_process = (Communicator.first(cluster, 8, gpus_per_process=g) for g in (1, 8))
    task = per_gpu.task(Op.ALLREDUCE, 8 << 20, "float32")
    for proto, nthreads, chunk in ((Proto.LL, 512, 1 << 15), (Proto.LL128, 640, 576000), (Proto.SIMPLE, 544, 1 << 21)):
        config = Config(Algo.RING, proto, Transport.P2P, 8, nthreads, chunk)
        rates = [comm.schedule(task, config).cap_gbps for comm in (per_gpu, one_process)]
        assert rates[0] < rates[1] if proto is Proto.SIMPLE else rates[0] == rates[1]


def test_multinode_ring_is_bound_by_its_channels_before_its_nics():
    comm = Communicator.first(load_cluster("dgx-a100", nodes=2))
    kw = dict(algo=Algo.RING, proto=Proto.SIMPLE, nthreads=544, chunk_bytes=1 << 21)
    busbw = {nc: predict(comm, Op.ALLREDUCE, 1 << 31, nchannels=nc, **kw).busbw_gbps for nc in (8, 16, 32, 64)}
    nic_limit = 8 * 200 / 8  # 8 × 200 Gb/s per node
    assert busbw[8] < busbw[16] < busbw[32] <= nic_limit
    assert busbw[64] == pytest.approx(busbw[32], rel=0.05)  # the NICs, not the CTAs, now


def test_pipelines_forward_grains_not_whole_chunks(a100_nodes):
    geom = a100_nodes[2]
    config = Config(Algo.TREE, Proto.LL128, Transport.P2P, 16, 640, 71040)
    s = build_schedule(geom, Op.ALLREDUCE, 8 * MIB, config)
    per_channel = 8 * MIB / 16
    store_and_forward = (s.steps + per_channel / 71040 - 1) * 71040 / (float(s.gbps) * 1e3)
    assert float(s.time_us()) < 0.6 * store_and_forward
    assert float(s.time_us()) > per_channel / (float(s.gbps) * 1e3)


def test_back_to_back_broadcasts_overlap_but_allreduces_do_not(a100_nodes):
    geom = a100_nodes[2]
    config = Config(Algo.RING, Proto.LL, Transport.P2P, 1, 512, 32768)
    bcast = build_schedule(geom, Op.BROADCAST, 4096, config)
    assert float(bcast.back_to_back_us()) < 0.5 * float(bcast.time_us())
    allreduce = build_schedule(geom, Op.ALLREDUCE, 4096, config)
    # Nothing overlaps; only the first call's launch and the final stream poll are shared over
    # nccl-tests' 20 timed calls (twin.model.host).
    first = DEFAULT_PARAMS.protocol.host_launch_us + DEFAULT_PARAMS.protocol.stream_query_us
    assert float(allreduce.back_to_back_us()) == pytest.approx(float(allreduce.time_us()) + first / NCCL_TESTS_ITERS)


def test_flagged_stores_cross_pcie_in_sector_sized_packets():
    # LL128 keeps its 120/128 payload on NVLink, but across PCIe every 32-byte sector is a TLP.
    assert store_efficiency(Proto.LL128, "pcie") < 0.8 * store_efficiency(Proto.LL128, "nvlink")
    assert store_efficiency(Proto.SIMPLE, "pcie") > 1.5 * store_efficiency(Proto.LL128, "pcie")
    assert store_efficiency(Proto.LL, "pcie") < store_efficiency(Proto.LL128, "pcie")
    # LL's warp writes 32 consecutive 16-byte lines: whole 128-byte TLPs, half of them flags.
    assert store_efficiency(Proto.LL, "pcie") == pytest.approx(0.5 * 128 / (128 + 24))
    # A NIC moves whole buffers by DMA, whatever the protocol's stores.
    assert store_efficiency(Proto.LL128, "pcie", dma=True) > store_efficiency(Proto.LL128, "pcie")


def test_a_tree_channel_is_as_fast_as_its_slower_thread_group():
    up, down = tree_split(Proto.LL, 640)
    assert up + down == 640 and up > 2 * down and up % 32 == 0
    up, down = tree_split(Proto.SIMPLE, 640)
    assert up == 384 and down == 256
    for proto in (Proto.LL, Proto.LL128, Proto.SIMPLE):
        tree = tree_cta_gbps(1555, proto, 640, 16, direct=False)
        whole_cta = cta_copy_gbps(1555, proto, 640, 3.0)
        assert tree < whole_cta
    # LL's broadcast group has 30% of the threads, so a tree moves less per channel than a ring.
    assert tree_cta_gbps(1555, Proto.LL, 640, 16, direct=False) < 0.5 * cta_copy_gbps(1555, Proto.LL, 640, 3.0)


def test_cta_model_matches_channels_measured_on_h200():
    """Real measurements (benchmarks/data/h200x2-channels.json): 2 H200s, NCCL 2.28.9, 1-4 channels,
    where the channels' CTAs rather than NVLink set the pace."""
    data = json.loads((ROOT / "benchmarks" / "data" / "h200x2-channels.json").read_text())
    threads = {"simple": 544, "simple256": 288, "ll128": 640, "ll": 512}  # NCCL's, +32 sync for Simple
    protos = {"simple": Proto.SIMPLE, "simple256": Proto.SIMPLE, "ll128": Proto.LL128, "ll": Proto.LL}
    ops = {"allreduce": Op.ALLREDUCE, "allgather": Op.ALLGATHER, "reducescatter": Op.REDUCESCATTER}
    checked = 0
    for run, body in data["runs"].items():
        rows = [r for r in body["rows"] if r["kind"] == "bandwidth" and r["nchannels"] <= 4]
        for r in rows:
            per_byte = memory_ops_per_byte(ops[r["op"]], Algo.RING, 2)
            model = cta_copy_gbps(4800, protos[run], threads[run], per_byte)
            assert model == pytest.approx(r["sent_gbps_per_channel"], rel=0.2), (run, r)
            checked += 1
        by_op = {r["op"]: r["sent_gbps_per_channel"] for r in rows if r["nchannels"] == 1}
        assert by_op["allreduce"] > by_op["allgather"]  # 4 operations per byte sent against 5
    assert checked == 4 * 3 * 3


def test_one_gpu_per_node_groups_use_their_gpus_own_nics():
    """A data-parallel group (GPU g of every node) sends through GPU g's NICs, never across a CPU
    to another GPU's rail (NCCL picks each GPU's nearest NICs)."""
    cluster = load_cluster("dgx-a100", nodes=2)
    for g in range(8):
        geom = CommGeometry(cluster, [f"n0/gpu{g}", f"n1/gpu{g}"])
        flows = [f for c in range(4) for f in geom.ring_flows(c) + geom.tree_flows(c)]
        assert flows and not any(h.kind == "cpu" for f in flows for h in f.hops), g
        assert {geom.nic(0, c) for c in range(4)} == {f"n0/nic{2 * (g // 2)}", f"n0/nic{2 * (g // 2) + 1}"}


def test_a_tree_over_the_network_transport_pays_its_loopback_hops():
    """With P2P and SHM off, a one-node tree's chain hops go through the NICs: every step waits
    for the proxy path, not for nothing."""
    geom = CommGeometry(load_cluster("dgx-h100", gpus_per_node=4), transport=Transport.NET)
    for proto in Proto:
        loopback = min(f.latency_us(proto, geom.cpu_vendor) for f in geom.tree_flows(0))
        assert loopback > 2 * hop_latency_us(proto, "pcie")
        assert geom.share("tree", 4, proto).step_us >= loopback


SHAPES = (("dgx-h100", 1, 4), ("dgx-h100", 4, 1), ("dgx-a100", 2, 8), ("a40-nvlink-pairs", 1, 8),
          ("l40s-pcie", 2, 4), ("a40-pcie", 2, 2))


@cache
def shape_geometry(shape: tuple, transport: Transport) -> CommGeometry:
    preset, nodes, gpus = shape
    return CommGeometry(load_cluster(preset, nodes=nodes, gpus_per_node=gpus), transport=transport)


def _supported() -> list[tuple]:
    out = []
    for shape in SHAPES:
        for transport in Transport:
            for op, algos in ALGORITHMS_FOR_OP.items():
                for algo in algos:
                    for proto in Proto:
                        try:
                            check_supported(shape_geometry(shape, transport), op, algo, proto)
                        except Unsupported:
                            continue
                        out.append((shape, transport, op, algo, proto))
    return out


@settings(max_examples=150)
@given(case=st.sampled_from(_supported()), nbytes=st.integers(1, 1 << 32), data=st.data())
def test_every_supported_prediction_is_finite_and_positive(case, nbytes, data):
    """Any cluster, op, algorithm, protocol and transport NCCL can run, at any point of AutoCCL's
    resource grid (all its chunk sizes at once): a finite, positive time with a positive step."""
    shape, transport, op, algo, proto = case
    grid = resource_grid(algo, proto)
    nchannels = data.draw(st.sampled_from(list(grid.nchannels)))
    nthreads = data.draw(st.sampled_from(grid.nthreads))
    s = schedule_for(shape_geometry(shape, transport), op, nbytes, algo, proto, int(nchannels), nthreads,
                     grid.chunks[nthreads].astype(float))
    times = np.asarray(s.time_us())
    assert np.all(np.isfinite(times)) and np.all(times > 0), (case, nchannels, nthreads)
    assert np.all(np.asarray(s.step_us) > 0) and np.all(np.asarray(s.gbps) > 0)


def test_ring_channels_keep_in_step_so_the_final_copy_idles_the_link():
    """Real measurements (benchmarks/data/h200x2-channels.json, 256 MiB, 2 H200s): at 16 channels
    a channel sends 13-16 GB/s where 1-8 channels sent 15-21, though the NVLink share is still
    above its CTA's rate.  A channel runs its primitives one after another, and the final receive
    (a local copy) leaves the link idle, so once the link binds the sends the copy comes on top."""
    data = json.loads((ROOT / "benchmarks" / "data" / "h200x2-channels.json").read_text())
    geom = CommGeometry(load_cluster("hgx-h200", gpus_per_node=2))
    threads = {"simple": 544, "simple256": 288, "ll128": 640, "ll": 512}
    protos = {"simple": Proto.SIMPLE, "simple256": Proto.SIMPLE, "ll128": Proto.LL128, "ll": Proto.LL}
    chunks = {Proto.SIMPLE: 1 << 21, Proto.LL128: 576000, Proto.LL: 32768}
    ops = {"allreduce": Op.ALLREDUCE, "allgather": Op.ALLGATHER, "reducescatter": Op.REDUCESCATTER}
    checked = 0
    for run, body in data["runs"].items():
        proto = protos[run]
        for r in body["rows"]:
            if r["kind"] != "bandwidth" or r["nchannels"] < 8:
                continue
            config = Config(Algo.RING, proto, Transport.P2P, r["nchannels"], threads[run], chunks[proto])
            s = build_schedule(geom, ops[r["op"]], r["nbytes"], config)
            assert float(s.gbps) == pytest.approx(r["sent_gbps_per_channel"], rel=0.15), (run, r)
            checked += 1
    assert checked == 4 * 3 * 2
    sends_only = ring_phases(Op.ALLREDUCE, 2, direct=True)
    assert not any(not p.sends for p in sends_only)  # direct pointers: no final copy
    assert phased_gbps(ring_phases(Op.ALLREDUCE, 2), 100.0, 80.0) == pytest.approx(80.0 / 4)  # CTA-bound
    assert phased_gbps(ring_phases(Op.ALLREDUCE, 2), 15.0, 80.0) < 15.0 * 0.85  # link-bound sends


def test_nvls_needs_hopper_even_on_an_nvswitch_node(a100_nodes):
    """An A100 node has NVSwitches but no NVLink SHARP (NCCL enables NVLS from sm_90)."""
    with pytest.raises(Unsupported, match="sm_90"):
        check_supported(a100_nodes[1], Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)
    check_supported(CommGeometry(load_cluster("dgx-h100", nodes=1)), Op.ALLREDUCE, Algo.NVLS, Proto.SIMPLE)


def test_a_simple_ring_slice_is_half_of_what_a_step_carries(a100_nodes):
    """A loop that carries less than a chunk is cut into two slices of what it carries (not of the
    nominal chunk), never below NCCL's smallest slice, and each slice costs a hand-over."""
    geom = a100_nodes[1]
    small, large = (build_schedule(geom, Op.ALLREDUCE, 8 * MIB, Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8, 256,
                                                                      chunk)) for chunk in (1 * MIB, 4 * MIB))
    assert small.step_bytes == large.step_bytes == 8 * MIB / 8 / 8
    assert small.unit_bytes == large.unit_bytes == small.step_bytes / 2
    assert small.sync_us == large.sync_us == 2 * DEFAULT_PARAMS.protocol.simple_slice_sync_us
    tiny = build_schedule(geom, Op.ALLREDUCE, 64 * 8 * 8 * 8, Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8, 256,
                                                                   1 * MIB))
    assert tiny.unit_bytes == tiny.step_bytes and tiny.sync_us == DEFAULT_PARAMS.protocol.simple_slice_sync_us
    ll = build_schedule(geom, Op.ALLREDUCE, 8 * MIB, Config(Algo.RING, Proto.LL, Transport.P2P, 8, 256, 32768))
    assert ll.sync_us == 0


def test_multi_node_rings_gain_from_more_and_faster_nics():
    """Two DGX H100s (eight 400 Gb/s NICs each, one beside each GPU) beat two DGX A100s (200 Gb/s);
    more NICs per node never slow a ring down. Each GPU's ring enters the node at the GPU beside its
    NIC and leaves through it over NVLink (PXN), not across the CPU's root complex."""
    def ring_busbw(preset, **options):
        comm = Communicator.first(load_cluster(preset, nodes=2, **options), 16)
        return predict(comm, Op.ALLREDUCE, 1 << 30, algo=Algo.RING, proto=Proto.SIMPLE).busbw_gbps

    assert ring_busbw("dgx-h100") > 1.5 * ring_busbw("dgx-a100")
    by_nics = [ring_busbw("dgx-h100", nics_per_node=k) for k in (2, 4, 8)]
    assert by_nics == sorted(by_nics)
    geom = CommGeometry(load_cluster("dgx-h100", nodes=2))
    assert not any(h.dst.endswith("cpu0") or h.src.endswith("cpu0") for f in geom.ring_flows(0) for h in f.hops)


def test_an_alltoall_runs_its_peers_side_by_side():
    """Each rank's sends to its peers run on their own CTAs, a chunk to every peer per step: across
    two DGX H100s an AllToAll is bound by the NICs (tens of GB/s), not by one CTA stepping through
    one chunk at a time (it was 4.6 GB/s)."""
    comm = Communicator.first(load_cluster("dgx-h100", nodes=2), 16)
    busbw = [predict(comm, Op.ALLTOALL, n).busbw_gbps for n in (1 << 20, 64 << 20, 1 << 30)]
    assert busbw == sorted(busbw) and 25 < busbw[-1] < 100
    one_node = predict(Communicator.first(load_cluster("dgx-h100", nodes=1), 8), Op.ALLTOALL, 1 << 30).busbw_gbps
    assert 250 < one_node < 450  # NVLink 4: 450 GB/s per GPU and direction


def test_channels_on_different_nics_leave_their_node_from_different_gpus():
    """Eight rails, eight channels: every GPU of an HGX H200 node is the entry of one channel and the
    exit of another, so each proxy thread serves one network send and one receive per step."""
    geom = CommGeometry(load_cluster("hgx-h200", nodes=4))
    orders = [geom._local_order(0, channel) for channel in range(8)]
    assert sorted(order[0] for order in orders) == sorted(order[-1] for order in orders) == geom._hosts[0]


def test_a_pipeline_keeps_nccl_steps_chunks_in_flight():
    """NVLS, Tree and chains move one step per chunk and keep 8 in flight per connection: a
    latency-bound stream of small chunks goes 8 × faster than one chunk at a time would; ring
    rounds wait for every step."""
    geom = CommGeometry(load_cluster("dgx-h100"))
    nvls = schedule_for(geom, Op.ALLREDUCE, 64 * MIB, Algo.NVLS, Proto.SIMPLE, 16, 640, 16384)
    ring = schedule_for(geom, Op.ALLREDUCE, 64 * MIB, Algo.RING, Proto.SIMPLE, 16, 544, 2 * MIB)
    assert nvls.in_flight == 8 and ring.in_flight == 1
    one_at_a_time = dataclasses.replace(nvls, in_flight=1)
    assert float(nvls.time_us()) < 0.7 * float(one_at_a_time.time_us())
    assert float(ring.steps_time_us(ring.gbps)) == pytest.approx(float(ring.n_steps * ring.step_time_us(ring.gbps)))


def test_nvls_chunk_size_barely_moves_its_bandwidth_and_it_stays_under_the_measured_peak():
    """NCCL's NVLS chunk steps (64 → 128 KiB at 1 GiB) gain ~6 % busbw on real 8×H100 nodes
    (Azure ND H100 v5: 438 → 466 GB/s), never 1.5×, and nothing beats the ~480 GB/s measured."""
    comm = Communicator.first(load_cluster("dgx-h100"))
    below, above = (predict(comm, Op.ALLREDUCE, s) for s in ((1 << 30) - MIB, 1 << 30))
    assert (below.config.chunk_bytes, above.config.chunk_bytes) == (65536, 131072)
    assert 0.95 * below.time_us < above.time_us <= below.time_us
    forced = predict(comm, Op.ALLREDUCE, 1 << 30, algo=Algo.NVLS, chunk_bytes=65536)
    assert forced.time_us / above.time_us < 1.05  # no 1.45× "win" for a tuner moving the chunk
    for size in (1 << 30, 16 << 30):
        assert 440 < predict(comm, Op.ALLREDUCE, size).busbw_gbps < 490


def test_an_ll_chain_fills_one_cta_pass_per_hop_whatever_its_threads():
    """Thread t of every rank of a Broadcast chain forwards LL line t as it lands (``LLGenericOp``),
    so each hop's fill is one pass of the CTA, and fewer threads cost exactly the extra passes of
    the data; at NCCL's own thread threshold (8 B × 8 ranks per thread) the time then falls by
    less than rule (b)'s 25 % (it fell 32 % with a fixed 2 KiB grain)."""
    geom = CommGeometry(load_cluster("dgx-h100"))
    n = 16 << 10
    chains = {nt: schedule_for(geom, Op.BROADCAST, n, Algo.RING, Proto.LL, 1, nt, 32768) for nt in (128, 256, 512)}
    for nt, s in chains.items():
        assert float(s.unit_bytes) == pytest.approx(nt * 8 * float(s.gbps) / float(s.cap_gbps))
        extra = n / (float(s.gbps) * 1e3) - n / (float(chains[512].gbps) * 1e3)
        assert float(s.time_us()) - float(chains[512].time_us()) == pytest.approx(extra)
    comm = Communicator.first(load_cluster("dgx-h100"))
    below, above = predict(comm, Op.BROADCAST, n - 16), predict(comm, Op.BROADCAST, n)
    assert (below.config.nthreads, above.config.nthreads) == (128, 256)
    assert 0.75 < above.time_us / below.time_us < 1


def test_a_pipeline_pays_its_proxy_once_per_nccl_step_not_per_grain():
    """Across EFA a Broadcast chain's proxy posts one message per FIFO step (a 576,000-byte LL128
    chunk), however finely the lines cut through inside the nodes: 512 MiB on 64 channels is 15
    messages per channel, so the chain runs at its links, not at one message per grain."""
    geom = CommGeometry(load_cluster("aws-p5", nodes=2))
    s = schedule_for(geom, Op.BROADCAST, 512 * MIB, Algo.RING, Proto.LL128, 64, 640, 576000)
    share = geom.share("chain", 64, Proto.LL128)
    messages = np.ceil(8 * MIB / 576000)
    assert float(s.loops) > 10 * messages  # the grains the pipeline cuts through are far more
    assert float(s.proxy_us) == pytest.approx(share.proxy_us * messages / float(s.loops))
    at_links = 8 * MIB / (float(s.gbps) * 1e3)
    assert at_links < float(s.time_us()) < 1.3 * at_links


def test_every_broadcast_channel_starts_at_the_root():
    geom = CommGeometry(load_cluster("dgx-h100"))
    for channel in range(4):
        chain = geom.chain_flows(channel)
        assert chain[0].src == geom.ranks[0] and all(f.dst != geom.ranks[0] for f in chain)
        assert len(chain) == geom.nranks - 1


def test_nvls_tree_can_be_forced_by_its_name():
    comm = Communicator.first(load_cluster("dgx-h100", nodes=2))
    p = predict(comm, Op.ALLREDUCE, 256 * MIB, algo=Algo.NVLS_TREE)
    assert p.config.algo is Algo.NVLS_TREE and p.chosen_by == "user+nccl"


def _dgx_a100(version):
    return Communicator.first(load_cluster("dgx-a100"), nccl_version=version)


def test_nccl_2_8_trees_reduce_up_before_they_broadcast_down():
    """NCCL 2.8's Tree LL and Simple run the reduce over all the data up the tree, then the
    broadcast down, each on every thread (``all_reduce.h`` @ v2.8.4-1); LL128 and every protocol
    from 2.10.3 split the threads and run both at once.  So 2.8's LL tree is two pipelines one
    after the other, each chunk paced twice, at the rate of all 512 threads per pass, and on its
    links each pass alone."""
    cluster = load_cluster("dgx-a100", nodes=2)
    old, new = (CommGeometry(cluster, cluster.gpus(), nccl_version=v) for v in ((2, 8, 4), (2, 10, 3)))
    ll = Config(Algo.TREE, Proto.LL, Transport.P2P, 2, 512, 16384)
    up_down, split = (build_schedule(g, Op.ALLREDUCE, 4 * MIB, ll) for g in (old, new))
    assert (up_down.passes, split.passes) == (2, 1)
    assert up_down.n_steps == up_down.steps + 2 * (up_down.loops - 1)
    assert split.n_steps == split.steps + split.loops - 1
    ll128 = Config(Algo.TREE, Proto.LL128, Transport.P2P, 2, 640, 30720 * 4)
    assert build_schedule(old, Op.ALLREDUCE, 4 * MIB, ll128).passes == 1
    # One pass on all threads beats the split's 30% broadcast group, but each byte takes two.
    assert float(up_down.cap_gbps) > 2 * float(split.cap_gbps)
    assert float(up_down.cap_gbps) == pytest.approx(float(tree_up_down_cta_gbps(
        cluster.gpu.hbm_gbps, Proto.LL, 512, 16, False, params=old.params, root_net_children=1)))
    # A pass loads a subset of the tree's flows, so its links move at least the two passes' share.
    assert min(old.tree_pass_gbps(2, Proto.LL)) >= old.share("tree", 2, Proto.LL).gbps
    # Two ranks: the root reduces (3 operations per byte), then sends (2).
    rate = [cta_copy_gbps(1555.0, Proto.LL, 512, ops) for ops in (3.0, 2.0)]
    assert float(tree_up_down_cta_gbps(1555.0, Proto.LL, 512, 2, False)) == pytest.approx(
        2 / (1 / rate[0] + 1 / rate[1]))


def test_nccl_2_8_ring_kernels_step_at_the_rounded_piece():
    """NCCL 2.8 – 2.19 ring kernels round each rank's piece of the last loop up to a quantum
    (LL128 AllReduce: 640 threads × 30 B = 19,200 B, ``all_reduce.h`` @ v2.8.4-1): 2 MiB over 24
    channels and 8 ranks steps at 19,200 B, not the 10,923 B an even split (2.20+) gives, so its
    steps take longer; where the call fills its channels (512 KiB of LL on 16 channels) nothing
    changes.  (The launches differ only by each release's work fetches, ``twin.model.workfifo``:
    2.8.4's 23 CTAs after block 0, 2.20.3's 24, 2.28.9's none.)"""
    config = Config(Algo.RING, Proto.LL128, Transport.P2P, 24, 640, 576000)
    old, new = (_dgx_a100(v).schedule(_dgx_a100(v).task(Op.ALLREDUCE, 2 * MIB), config)
                for v in ((2, 8, 4), (2, 20, 3)))
    assert float(old.step_bytes) == 19200 and float(new.step_bytes) == pytest.approx(2 * MIB / 24 / 8)
    rtt = DEFAULT_PARAMS.net.pcie_read_rtt_us
    assert old.launch_us - 23 * rtt == pytest.approx(new.launch_us - 24 * rtt)
    assert old.time_us() - old.launch_us > (new.time_us() - new.launch_us) * 1.15  # the steps, launch aside
    ll = Config(Algo.RING, Proto.LL, Transport.P2P, 16, 512, 32768)
    even = [_dgx_a100(v).schedule(_dgx_a100(v).task(Op.ALLREDUCE, 512 << 10), ll) for v in ((2, 8, 4), (2, 28, 9))]
    assert even[0].time_us() - even[0].launch_us == pytest.approx(even[1].time_us() - even[1].launch_us)
    assert even[0].launch_us - even[1].launch_us == pytest.approx(15 * rtt)


def test_a_call_smaller_than_the_quantum_steps_at_its_own_bytes():
    """Rounding a piece up to the quantum cannot give it bytes the call lacks (``nelem =
    min(chunkSize, size - offset)``, ``all_reduce.h`` @ v2.8.4-1): 64 B of Ring LL on 64 threads
    (a 512-B quantum) over 8 ranks steps at 64 B, one piece carrying the whole call, where 4 KiB
    fills every rank's 512 B; so on ABCI's 8 A100s (NCCL 2.8.4, one process per GPU) 64 B takes
    about what the log measures (17.4 µs, ``tests/data/nccl-tests``), not the 4 KiB call's time."""
    comm = Communicator.first(load_cluster("abci-a"), 8, nccl_version=(2, 8, 4))
    config = Config(Algo.RING, Proto.LL, Transport.P2P, 1, 64, 32768)
    tiny, full = (comm.schedule(comm.task(Op.ALLREDUCE, n), config) for n in (64, 4096))
    assert float(tiny.step_bytes) == 64 and float(full.step_bytes) == 512
    assert float(tiny.time_us()) == pytest.approx(17.4, rel=0.1)
    assert float(tiny.time_us()) < float(full.time_us()) - 5
    gather = comm.schedule(comm.task(Op.ALLGATHER, 64), config)
    assert float(gather.step_bytes) == 8  # a rank's share: 64 B gathered from 8 ranks


@pytest.mark.parametrize("proto", list(Proto))
def test_rounded_pieces_keep_time_monotone_in_size(proto):
    """The rounding never makes a larger call of the same configuration faster (sizes 4 B to
    64 MiB, every 1/8 octave, NCCL 2.8.4)."""
    comm = _dgx_a100((2, 8, 4))
    threads = {Proto.LL: 512, Proto.LL128: 640, Proto.SIMPLE: 544}[proto]
    chunk = {Proto.LL: 32768, Proto.LL128: 576000, Proto.SIMPLE: 2 * MIB}[proto]
    config = Config(Algo.RING, proto, Transport.P2P, 24, threads, chunk)
    sizes = sorted({max(4, int(2 ** (2 + i / 8)) // 4 * 4) for i in range(8 * 24 + 1)})
    times = [comm.schedule(comm.task(Op.ALLREDUCE, n), config).time_us() for n in sizes]
    assert all(b >= a * (1 - 1e-12) for a, b in pairwise(times))


def test_a_proxy_threads_work_per_step_is_its_posts_not_the_waits_on_the_steps_path():
    """A full pipeline's chunks follow each other no faster than the busiest proxy thread posts:
    an ``isend`` per step it sends and an ``irecv`` per step it receives (``recvProxyProgress``),
    each at a post's CPU time, plus a flush per received Simple step where the GPU needs one
    (``ncclTopoNeedFlush``: sm < 90, or Grace over NVLink-C2C).  The receiver's wait for completion
    and flush is latency on one step's path, which stays in the step's latency (NCCL's
    ``getNetOverhead``, a step's latency in its cost model, not a post's CPU time)."""
    h100 = CommGeometry(load_cluster("dgx-h100", nodes=2))
    action = proxy_overhead_us(Proto.LL, h100.cpu_vendor, h100.params)
    post = proxy_post_us(h100.cpu_vendor, h100.params)
    assert post < action
    # 16 NVLS-Tree channels over 8 NICs: each head's thread sends and receives 2 channels' steps;
    # no flush on Hopper.
    assert h100.share("nvls", 16, Proto.SIMPLE).proxy_us == pytest.approx(4 * post)
    assert h100.share("nvls", 16, Proto.SIMPLE).proxy_us == h100.share("nvls", 16, Proto.LL).proxy_us
    # Two HGX B300 nodes, 32 channels over 8 NICs: 4 sends and 4 receives per chunk step, 2 µs,
    # within a 32 KiB chunk's 2.2 µs at its link share.
    b300 = CommGeometry(load_cluster("hgx-b300", nodes=2))
    assert b300.share("nvls", 32, Proto.SIMPLE).proxy_us == pytest.approx(8 * proxy_post_us(b300.cpu_vendor))
    a100 = CommGeometry(load_cluster("dgx-a100", nodes=2))
    simple, ll = (a100.share("tree", 16, p).proxy_us for p in (Proto.SIMPLE, Proto.LL))
    assert simple == pytest.approx(1.5 * ll)  # every received Simple step is also flushed on Ampere
    # The step's latency still carries the receiver's completion and flush (NCCL's 3 × netOverhead).
    assert net_step_latency_us(Proto.SIMPLE, fabric_us=1.0, cpu_vendor="intel") > (
        net_step_latency_us(Proto.LL128, fabric_us=1.0, cpu_vendor="intel") + 2 * action)


def test_nvls_tree_pays_the_nvls_pass_on_two_nodes_and_its_chunk_steps_barely_move_its_time():
    """The first chunk of an NVLS-Tree AllReduce goes up to the switch and back as on one node
    (NCCL's NVLSTree intra-node latency is its NVLS one, 25 µs); the tree between the node heads
    comes between.  With the proxy charged its posts, NCCL's 32 → 64 → 128 KiB chunk steps at 8
    and 64 MiB on two DGX H100 move the time by less than rule (b)'s 10 % (they fell 34 and 22 %)."""
    geom = CommGeometry(load_cluster("dgx-h100", nodes=2))
    slower = geom.with_params(dataclasses.replace(
        DEFAULT_PARAMS, link=dataclasses.replace(DEFAULT_PARAMS.link, nvls_pass_us=50.0)))
    base, more = (float(schedule_for(g, Op.ALLREDUCE, 64 * MIB, Algo.NVLS_TREE, Proto.SIMPLE, 16, 640,
                                     1 << 17).time_us()) for g in (geom, slower))
    assert more - base == pytest.approx(25.0)
    comm = Communicator.first(load_cluster("dgx-h100", nodes=2))
    for size, chunks in ((8 * MIB, (32768, 65536)), (64 * MIB, (65536, 131072))):
        below, above = predict(comm, Op.ALLREDUCE, size - size // 1024), predict(comm, Op.ALLREDUCE, size)
        assert (below.config.algo, below.config.chunk_bytes, above.config.chunk_bytes) == (Algo.NVLS_TREE, *chunks)
        assert above.time_us > 0.9 * below.time_us
