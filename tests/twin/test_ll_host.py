"""LL lines received into host memory (no GPUDirect RDMA, ``netpath.ll_host_recv_gbps``), against our
H200's measurements (``benchmarks/data/h200-ll-host.txt``) and in a schedule."""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.model.geometry import CommGeometry
from twin.model.netpath import ll_host_recv_gbps
from twin.model.schedule import Phase, phased_gbps, schedule_for
from twin.params import DEFAULT_PARAMS
from twin.topology import load_cluster

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data" / "h200-ll-host.txt"
DRANET = ROOT / "benchmarks" / "clusters" / "gcp-a3-ultra-dranet-1gpu-1nic.yaml"
PASS = re.compile(r"pass recv=(\w+)\s+send=(\w+)\s+(\w+)\s+threads=\s*(\d+) ctas=\s*(\d+)\s+([\d.]+) ns/pass"
                  r"\s+([\d.]+) GB/s data per CTA")
CHAIN = re.compile(r"latency (host|device) (\d+ [KM]iB)\s+one thread.*:\s+([\d.]+) ns per load")


def _runs() -> list[str]:
    return DATA.read_text().split("## run ")[1:]


def _passes(recv: str, send: str, max_ctas: int = 2) -> list[tuple[int, float, float]]:
    """(threads, ns per pass, GB/s of data per CTA) of every row of both runs with that placement."""
    return [(int(t), float(ns), float(gbps)) for run in _runs()
            for r, s, _op, t, c, ns, gbps in PASS.findall(run) if (r, s) == (recv, send) and int(c) <= max_ctas]


def test_the_host_pass_constant_is_the_median_of_the_h200s_host_to_host_passes():
    runs = _runs()
    assert len(runs) == 2 and all("check ok" in r for r in runs)
    rows = _passes("host", "host")
    assert len(rows) == 24  # 2 runs x copy/reduce x 3 thread counts x 1-2 CTAs
    pass_us = DEFAULT_PARAMS.net.ll_host_pass_us
    assert statistics.median(ns for _, ns, _ in rows) / 1e3 == pytest.approx(pass_us, rel=0.01)
    assert all(abs(ns / 1e3 - pass_us) < 0.1 * pass_us for _, ns, _ in rows)  # whatever the threads


def test_a_host_pass_is_a_device_pass_plus_one_load_of_host_memory():
    """A volatile load of host memory takes 1.2-1.3 µs where one of device memory takes 0.15, and
    a pass over lines in host memory takes about that much longer than one over device memory."""
    chain = {(where, span): float(ns) for run in _runs() for where, span, ns in CHAIN.findall(run)}
    assert all(1150 < chain[("host", span)] < 1300 for span in ("256 MiB", "1 KiB"))
    assert chain[("device", "256 MiB")] < 200
    host = statistics.median(ns for _, ns, _ in _passes("host", "dev"))
    device = statistics.median(ns for _, ns, _ in _passes("dev", "dev"))
    assert host - device == pytest.approx(chain[("host", "256 MiB")], rel=0.1)


def test_the_bound_matches_every_measured_cta_rate():
    """Threads x 8 B per host pass: 0.6-0.7 GB/s a CTA of 128 threads, 2.4-2.7 of 512 (1-2 CTAs, into
    host or device memory, copying or reducing)."""
    rows = _passes("host", "host") + _passes("host", "dev")
    assert len(rows) == 48
    for threads, _, gbps in rows:
        assert float(ll_host_recv_gbps(threads)) == pytest.approx(gbps, rel=0.12)


def test_only_receiving_primitives_wait_for_host_memory():
    """A 2-rank AllGather loop: the copy-send of its own data goes at the CTA's pace, the final
    receive at most at the host pass's."""
    phases = (Phase(1, 3, receives=False), Phase(1, 2, sends=False))
    free = phased_gbps(phases, 50.0, 20.0)
    bound = phased_gbps(phases, 50.0, 20.0, recv_gbps=2.0)
    assert 1 / bound == pytest.approx(1 / free - 2 / 20.0 + 1 / 2.0)


def test_a_ring_without_gpudirect_polls_host_memory_and_its_sender_keeps_its_pace():
    """The dranet pods (GPU and NIC on other sockets: no GPUDirect RDMA) receive LL lines in host
    memory; a3-ultra's own GPU-NIC pairs (GPUDirect RDMA) in device memory.  Simple does not poll
    lines, and the network hop's hold waits for the sender's stores, not for the slower receiver."""
    dranet = CommGeometry(load_cluster(str(DRANET), nodes=2))
    aligned = CommGeometry(load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1))
    assert dranet.polls_host_memory("ring", 4) and not aligned.polls_host_memory("ring", 4)
    ll = schedule_for(dranet, Op.ALLGATHER, 256 << 10, Algo.RING, Proto.LL, 4, 512, 1 << 15)
    assert float(ll.gbps) < float(ll_host_recv_gbps(512))
    assert float(ll.write_share) < 1.0
    fast = replace(DEFAULT_PARAMS, net=replace(DEFAULT_PARAMS.net, ll_host_pass_us=1e-9))  # no bound
    free = schedule_for(dranet.with_params(fast), Op.ALLGATHER, 256 << 10, Algo.RING, Proto.LL, 4, 512, 1 << 15)
    assert free.write_share == pytest.approx(1.0) and float(free.gbps) > 1.5 * float(ll.gbps)
    assert ll.hold_bytes > 0 and ll.hold_bytes * ll.write_share / ll.gbps == pytest.approx(free.hold_bytes / free.gbps)
    simple = schedule_for(dranet, Op.ALLGATHER, 256 << 10, Algo.RING, Proto.SIMPLE, 4, 512, 1 << 21)
    assert simple.write_share == 1.0


def test_a_receive_beside_an_nvlink_peers_nic_keeps_gpudirect():
    """p5's tree receives into a GPU from a NIC under another GPU's switch, through the CPU: NCCL
    takes that PXN path's intermediate GPU's distance (``ncclTopoCheckGdr``), keeps GPUDirect RDMA
    and the receive buffer in the GPU, so nothing polls host memory there."""
    p5 = CommGeometry(load_cluster("aws-p5", nodes=2))
    through_cpu = [f for f in p5.channel_flows("tree", 0) if f.kind == "net" and not f.gdr_recv]
    assert through_cpu and not p5.polls_host_memory("tree", 4)

