"""The LL send proxy's check of every line in host memory (``netpath.ll_scan_us``), against our H200
host's measurements (``benchmarks/data/h200-ll-scan.txt``) and as both engines cost it."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from traces.task import Op
from tuner.config import Algo, Proto
from twin.des import CollectiveRun, simulate
from twin.model.geometry import LL_SCAN_WAIT_SHARE, CommGeometry
from twin.model.netpath import ll_scan_us
from twin.model.schedule import schedule_for
from twin.params import DEFAULT_PARAMS
from twin.topology import load_cluster

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200-ll-scan.txt"
STREAM = re.compile(r"stream threads=\s*\d+ step=\s*(\d+) KiB nch=(\d)\s+gpu-only\s+([\d.]+) GB/s"
                    r"\s+scan\s+([\d.]+) GB/s.*scan:\s+([\d.]+) us per step")
LATENCY = re.compile(r"latency step=\s*65536 B .* extra\s+(-?[\d.]+) us")
ROUND_TRIP = re.compile(r"latency step=\s*16 B .*fence->post seen\s+([\d.]+) us")
PACED = re.compile(r"paced nch=1 pass_ns=\s*[1-9]\d* .*last store->post seen\s+([\d.]+) us")


def _runs() -> list[str]:
    return DATA.read_text().split("## run ")[1:]


def _thread_bound_ns_per_cache_line(run: str) -> list[float]:
    """ns per 64-B cache line where 4 or 8 CTAs stream steps and one thread checks them all."""
    out = []
    for kib, nch, gpu_only, scan, us in STREAM.findall(run):
        if int(nch) >= 4:
            assert float(gpu_only) > 2 * float(scan)  # the thread, not the GPU's stores, sets the pace
            out.append(float(us) * 1e3 / (int(kib) * 1024 / 64))
    return out


def test_the_scan_constant_is_the_median_of_the_h200_hosts_thread_bound_runs():
    runs = _runs()
    assert len(runs) == 4 and all("check ok" in r for r in runs)
    rows = [x for r in runs for x in _thread_bound_ns_per_cache_line(r)]
    assert len(rows) == 32
    net = DEFAULT_PARAMS.net
    assert statistics.median(rows) == pytest.approx(net.ll_scan_intel_ns, rel=0.02)
    assert min(rows) > 3.0 and max(rows) < 7.0  # one machine's slow run, 2x the others
    assert net.ll_scan_ns("amd") == 2 * net.ll_scan_ns("intel")  # NCCL's getNetOverhead ratio


def test_a_step_written_whole_waits_a_scan_and_one_written_as_its_data_comes_about_half():
    """A 64 KiB step of lines (32 KiB of data) already written is posted, beyond a one-line step's
    round trip, about its whole scan after the GPU's last store; written one CTA pass at a time
    (one channel, 2-8 GB/s), as a kernel forwards what it receives, the thread is rescanning while
    it fills and posts it sooner, after a quarter to two thirds of a scan: the model's latency term
    is their mean (``LL_SCAN_WAIT_SHARE``)."""
    scan = float(ll_scan_us(Proto.LL, 32 << 10, "intel"))
    extra = [float(m) for r in _runs() for m in LATENCY.findall(r)]
    assert len(extra) == 4
    assert statistics.median(extra) == pytest.approx(scan, rel=0.15)
    paced = [float(us) - float(ROUND_TRIP.search(r).group(1)) for r in _runs() for us in PACED.findall(r)]
    assert len(paced) == 9
    assert all(0.25 * scan < w < 0.65 * scan for w in paced)
    assert statistics.mean(paced) / scan == pytest.approx(LL_SCAN_WAIT_SHARE, abs=0.005)


def test_an_ll_ring_over_the_network_pays_the_scan_on_its_proxy_thread_and_its_steps():
    """Two one-GPU VMs: every channel's send leaves through one GPU, whose proxy thread checks each
    channel's LL step before it posts it, so per step the thread's work grows by one scan per
    channel, and every step (all the ring's hops cross the network) waits for half a scan."""
    geom = CommGeometry(load_cluster("gcp-a3-ultra", nodes=2, gpus_per_node=1))
    for nch in (1, 4):
        share = geom.share("ring", nch, Proto.LL)
        assert share.scan_sends == nch
        s = schedule_for(geom, Op.ALLREDUCE, 4 << 20, Algo.RING, Proto.LL, nch, 512, 1 << 15)
        scan = float(ll_scan_us(Proto.LL, s.step_bytes, geom.cpu_vendor, geom.params))
        assert scan > 0.5
        assert float(s.proxy_us) == pytest.approx(share.proxy_us + nch * scan)
        assert float(s.step_us) == pytest.approx(share.step_us + LL_SCAN_WAIT_SHARE * scan)
        assert simulate([CollectiveRun(s)])[0] == pytest.approx(float(s.time_us()), rel=0.02)
    # LL128 and Simple are not checked line by line with GPUDirect; one node has no proxy.
    assert geom.share("ring", 4, Proto.LL128).scan_sends == 0
    node = CommGeometry(load_cluster("gcp-a3-ultra"))
    assert node.share("ring", 8, Proto.LL).scan_sends == 0
    assert node.ll_scan("ring", 8, Proto.LL, 1 << 15, 1 << 15) == (0.0, 0.0)


def test_a_broadcast_chain_scans_each_network_message_once_and_per_byte_on_its_thread():
    """Down a chain over 2 nodes of 8 A100s the thread's scan work per grain is the grain's lines,
    whatever the grain, and each step waits for half the scan of a whole NCCL step (the message) at
    the chain's network share of hops."""
    geom = CommGeometry(load_cluster("dgx-a100", nodes=2))
    s = schedule_for(geom, Op.BROADCAST, 4 << 20, Algo.RING, Proto.LL, 8, 512, 1 << 15)
    share = geom.share("chain", 8, Proto.LL)
    assert share.scan_sends >= 1
    per_byte = float(ll_scan_us(Proto.LL, 1.0, geom.cpu_vendor, geom.params))
    assert float(s.proxy_us) - float(share.proxy_us * 16 / s.loops) == pytest.approx(
        share.scan_sends * float(s.step_bytes) * per_byte)
    assert float(s.step_us) - share.step_us == pytest.approx(
        geom.network_share("chain") * LL_SCAN_WAIT_SHARE * (1 << 15) * per_byte)
