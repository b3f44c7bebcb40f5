"""One host thread driving N GPUs (nccl-tests ``-g N``): serial launches, checked on every repo
file that runs several GPUs per process, at each GPU count and link kind it has."""

import doctest
import statistics
import sys
from pathlib import Path

import pytest

import twin.model.host
from traces.nccl_tests import read_nccl_tests
from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.model.host import NCCL_TESTS_ITERS, HostLaunch
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.topology import load_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import accuracy

HOST = DEFAULT_PARAMS.protocol.host_launch_us
SMALL = 4096
"""Sizes up to here are a launch's cost, not the links' (every GPU count's curve is flat there)."""


def log_path(stem: str) -> Path:
    return next(p for p in (accuracy.DATA / f"{stem}.txt", accuracy.HELDOUT / f"{stem}.txt") if p.exists())


def timed_small_sizes(stem: str) -> bool:
    return any(r.time_us and 0 < r.nbytes <= SMALL for r in read_nccl_tests(log_path(stem)).rows)


MULTI_GPU = sorted(stem for stem, run in accuracy.RUNS.items()
                   if run.gpus_per_process > 1 and not run.knobs and timed_small_sizes(stem))
"""The nccl-tests logs of one process driving several GPUs, at NCCL's own choice, with times of
small sizes (the busbw-only summaries and vTrain's 1 MiB-1 GiB table have none)."""


def test_docstring_examples_run():
    assert doctest.testmod(twin.model.host).failed == 0


def test_the_repo_has_several_gpu_counts_and_link_kinds_to_check_on():
    """2, 4 and 8 GPUs per process over NVLink (Azure ND A100 v4) and 2 over PCIe (L40S); no
    repo file drives several GPUs per process across nodes, so the network is not among them."""
    kinds = {(accuracy.RUNS[s].gpus_per_process, load_cluster(accuracy.RUNS[s].topology).has_nvswitch())
             for s in MULTI_GPU}
    assert {(2, True), (4, True), (8, True), (2, False)} <= kinds
    assert all(accuracy.RUNS[s].nodes == 1 for s in MULTI_GPU)


@pytest.mark.parametrize("stem", MULTI_GPU)
def test_small_sizes_of_every_multi_gpu_file_take_the_launches_the_model_says(stem):
    """Up to 4 KiB each log's time per call is within 15 % of the twin's (median), whether the
    thread (8 and 4 GPUs: N × 3.8 µs of launches) or the GPUs (2 GPUs) are the slower."""
    _, points = accuracy.predict_file(log_path(stem))
    errors = [accuracy.error(meas, pred) for size, meas, pred in points if size <= SMALL]
    assert len(errors) >= 5 and statistics.median(errors) <= 15.0, (stem, errors)


def floor_us(stem: str) -> float:
    log = read_nccl_tests(log_path(stem))
    return statistics.median(r.time_us for r in log.rows if 0 < r.nbytes <= SMALL)


def test_a_call_costs_one_launch_per_gpu_where_the_thread_is_the_bottleneck():
    """Measured: 8 GPUs per process take 1.9× the 4-GPU time per call at small sizes (31.2 and
    16.3 µs), the thread's launches, N × 3.8-3.9 µs; the twin gives the same ratio."""
    eight, four = floor_us("echo-azure-ndA100v4-allreduce-8gpu"), floor_us("echo-azure-ndA100v4-allreduce-4gpu")
    assert 1.7 < eight / four < 2.1
    assert eight / 8 == pytest.approx(HOST, rel=0.05) and four / 4 == pytest.approx(HOST, rel=0.1)

    def predicted(n: int) -> float:
        comm = Communicator.first(load_cluster("dgx-a100"), n, gpus_per_process=n)
        config = Config(Algo.RING, Proto.LL, Transport.P2P, 1, 128, 1 << 17)
        return float(comm.schedule(comm.task(Op.ALLREDUCE, 1024), config).back_to_back_us())
    assert predicted(8) / predicted(4) == pytest.approx(eight / four, rel=0.1)


def test_launches_overlap_the_gpus_work_once_it_is_longer():
    """Back to back, the thread launches call k+1 while the GPUs run call k: at 64 MiB eight GPUs
    driven by one thread take their GPUs' time per call (plus the first call's launches shared
    over the timed calls), at 1 KiB their thread's 8 launches; a single call still waits for its
    last GPU's launch (7 × 3.8 µs) either way."""
    comm = Communicator.first(load_cluster("dgx-a100"), 8, gpus_per_process=8)
    large = comm.schedule(comm.task(Op.ALLREDUCE, 64 << 20), Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 16,
                                                                     512, 1 << 19))
    small = comm.schedule(comm.task(Op.ALLREDUCE, 1 << 10), Config(Algo.RING, Proto.LL, Transport.P2P, 1, 128,
                                                                   1 << 17))
    share = (8 * HOST + 8 * DEFAULT_PARAMS.protocol.stream_query_us) / NCCL_TESTS_ITERS
    assert float(large.back_to_back_us()) == pytest.approx(float(large.gpu_period_us()) + share)
    assert float(small.gpu_period_us()) < 8 * HOST < float(small.back_to_back_us()) < 8 * HOST + 2.0
    for s in (large, small):
        assert float(s.time_us() - s.gpu_period_us()) == pytest.approx(7 * HOST)
    assert large.host == HostLaunch(8, HOST, DEFAULT_PARAMS.protocol.stream_query_us)


def test_each_gpu_keeps_its_own_proxy_thread_when_one_process_drives_them():
    """``ncclProxyInit`` makes one proxy state per communicator, so across nodes the network steps
    of each GPU are posted by its own thread however many GPUs a process drives."""
    config = Config(Algo.RING, Proto.SIMPLE, Transport.NET, 8, 512, 1 << 19)
    proxies = set()
    for n in (1, 8):
        comm = Communicator.first(load_cluster("dgx-h100", nodes=2), gpus_per_process=n)
        proxies.add(float(comm.schedule(comm.task(Op.ALLREDUCE, 1 << 20), config).proxy_us))
    assert len(proxies) == 1 and proxies.pop() > 0


def test_the_timed_loop_is_host_bound_or_gpu_bound_and_shares_the_first_call_over_the_iterations():
    host = HostLaunch(4, 4.0, 0.5)
    gpu_bound = float(host.timed_loop_us(40.0, 40.0))
    assert gpu_bound == pytest.approx(40.0 + (16.0 + 2.0) / NCCL_TESTS_ITERS)
    host_bound = float(host.timed_loop_us(10.0, 10.0, iters=100))
    assert host_bound == pytest.approx(16.0 + (10.0 + 2.0) / 100)
    assert float(host.timed_loop_us(10.0, 10.0, iters=5)) > host_bound  # fewer calls, more of the first
