"""CTAs fetching their work from NCCL's host-memory FIFO (NCCL 2.8 – 2.21), on real A100 logs."""

import sys
from pathlib import Path

import pytest

from traces.nccl_tests import read_nccl_tests
from traces.task import Op
from tuner.config import Algo, Config, Proto, Transport
from twin.model.geometry import CommGeometry
from twin.model.schedule import build_schedule
from twin.model.workfifo import fifo_readers, work_fetch_us
from twin.nccl_model.releases import introduced
from twin.params import DEFAULT_PARAMS
from twin.placement import Communicator
from twin.predict import predict
from twin.topology import load_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from accuracy import HELDOUT, RUNS, nccl_release  # noqa: E402

DEV = ROOT / "tests" / "data" / "nccl-tests"
RTT = DEFAULT_PARAMS.net.pcie_read_rtt_us


def ring_ll_us(cluster: str, version, nchannels: int, nbytes: int) -> float:
    """One Ring LL AllReduce on a whole node at ``nchannels`` of 512 threads."""
    geom = CommGeometry(load_cluster(cluster), nccl_version=version)
    config = Config(Algo.RING, Proto.LL, Transport.P2P, nchannels, 512, 32768)
    return float(build_schedule(geom, Op.ALLREDUCE, nbytes, config).time_us())


def test_the_fifo_leaves_host_memory_at_the_release_that_moved_the_work_into_kernel_arguments():
    assert introduced("host_work_fifo") == [(2, 8, 3), (2, 13, 4), (2, 22, 3)]
    assert [fifo_readers(k, 1) for k in ("after_first", "every", "none")] == [0, 1, 0]


@pytest.mark.parametrize("version, readers", [((2, 8, 4), 8), ((2, 18, 5), 8), ((2, 22, 3), 0), ((2, 28, 9), 0)])
def test_each_extra_channel_costs_a100_one_pcie_read_until_2_22(version, readers):
    """Same bytes per channel (32 KiB), 8 → 16 channels: what the work fetches add, and nothing else."""
    extra = ring_ll_us("dgx-a100", version, 16, 16 * 32768) - ring_ll_us("dgx-a100", version, 8, 8 * 32768)
    assert extra == pytest.approx(readers * RTT, abs=0.5)


def test_hopper_ctas_are_not_charged_the_fetch():
    h100 = CommGeometry(load_cluster("dgx-h100"), nccl_version=(2, 18, 5))
    assert work_fetch_us(h100, 16) == 0.0
    extra = ring_ll_us("dgx-h100", (2, 18, 5), 16, 16 * 32768) - ring_ll_us("dgx-h100", (2, 18, 5), 8, 8 * 32768)
    assert extra == pytest.approx(0.0, abs=0.5)


def test_point_to_point_kernels_fetch_one_work_per_cta():
    geom = CommGeometry(load_cluster("dgx-a100"), nccl_version=(2, 8, 4))
    config = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 2, 512, 1 << 19)
    old = build_schedule(geom, Op.SENDRECV, 1 << 20, config)
    new = build_schedule(CommGeometry(load_cluster("dgx-a100")), Op.SENDRECV, 1 << 20, config)
    assert float(old.launch_us - new.launch_us) == pytest.approx(RTT)


def measured_and_predicted_us(path: Path, small: int, large: int) -> tuple[float, float]:
    """How much longer the log's ``large`` call takes than its ``small`` one, measured and predicted
    (NCCL's own choice, each call alone: both sizes are Ring/LL, which does not overlap)."""
    log = read_nccl_tests(path)
    run = RUNS[path.stem]
    cluster = load_cluster(run.topology, nodes=run.nodes, gpus_per_node=run.gpus_per_node)
    comm = Communicator.first(cluster, log.nranks, gpus_per_process=run.gpus_per_process,
                              nccl_version=nccl_release(log.nccl_version or run.nccl))
    rows = {row.nbytes: row for row in log.rows}
    times = []
    for size in (small, large):
        p = predict(comm, log.op, size, dtype=rows[size].dtype)
        assert (p.config.algo, p.config.proto) == (Algo.RING, Proto.LL)
        times.append(p.time_us)
    return rows[large].time_us - rows[small].time_us, times[1] - times[0]


@pytest.mark.parametrize("path", [DEV / "abci-intra_anode-8gpu-1node-allreduce.txt",
                                  HELDOUT / "abci-intra_anode-4gpu-1node-allreduce.txt"], ids=lambda p: p.stem)
def test_abci_calls_grow_with_their_channels_as_measured(path):
    """NCCL 2.8.4 on ABCI's A100s: from 2 to 16 channels at the same bytes per channel (8 GPUs:
    64 → 512 KiB; 4 GPUs: 32 → 256 KiB) the measured call grows by 18.1 and 17.4 µs; the 14 more
    fetches give the twin 14 µs of it, where without them it grew by under 1 µs."""
    small, large = (64 << 10, 512 << 10) if "8gpu" in path.stem else (32 << 10, 256 << 10)
    measured, predicted = measured_and_predicted_us(path, small, large)
    assert 14 * RTT - 1 <= predicted <= measured
