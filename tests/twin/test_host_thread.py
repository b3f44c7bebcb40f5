"""The replay's per-rank host thread (``twin.replay.simulation``): the host issues a rank's events
in order, each after its ``host_us``; the GPU starts nothing before the host issued it; the host
blocks where Megatron synchronises; the GPU's wait for the host is reported as host wait, not as
pipeline bubble (``twin.iteration``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op
from twin.compute import ComputeTimer
from twin.iteration import breakdown
from twin.replay import replay
from twin.topology import load_cluster

CLUSTER = load_cluster("dgx-h100")
BIG = (16384, 16384, 8192)
"""A product of milliseconds on an H100."""
SMALL = (64, 64, 64)
"""A product of one kernel floor."""


def _trace(*events_of_rank: tuple) -> Trace:
    ranks = tuple(RankTrace(r, events) for r, events in enumerate(events_of_rank))
    return Trace(len(ranks), (ProcessGroup("g", tuple(range(len(ranks)))),), ranks, "test", {})


def _gemm(i: int, shape, host_us: float, name: str = "mm", iteration: int = 0) -> ComputeEvent:
    return ComputeEvent(i, name, category="gemm", shape=shape, host_us=host_us, kernels=1, iteration=iteration)


def _gpu_us(shape) -> float:
    return ComputeTimer(CLUSTER.gpu, None).cost(_gemm(0, shape, 0.0)).gpu_us


def _split(trace: Trace):
    result = replay(trace, CLUSTER)
    return result, breakdown(trace, result)


def test_a_host_bound_rank_waits_for_its_host_not_for_a_bubble():
    small = _gpu_us(SMALL)
    trace = _trace(tuple(_gemm(i, SMALL, 100.0) for i in range(50)))
    result, split = _split(trace)
    assert result.mean_iteration_us == pytest.approx(50 * 100.0 + small, rel=1e-6)  # the host's time, then one kernel
    assert split.host_wait_ms == pytest.approx(split.iteration_ms - split.compute_ms, rel=1e-6)
    assert split.host_wait_ms > 0.9 * split.iteration_ms and split.bubble_ms < 1e-6
    assert split.iteration_ms == pytest.approx(split.compute_ms + split.exposed_comm_ms + split.host_wait_ms
                                               + split.bubble_ms)


def test_a_gpu_bound_rank_waits_for_its_host_only_for_the_first_issue():
    trace = _trace(tuple(_gemm(i, BIG, 20.0) for i in range(5)))
    result, split = _split(trace)
    assert result.mean_iteration_us == pytest.approx(20.0 + 5 * _gpu_us(BIG), rel=1e-6)
    assert result.host_wait_us == pytest.approx(20.0)
    assert split.bubble_ms < 1e-6


def test_the_host_runs_ahead_during_a_long_kernel():
    """Ten small phases issued while the product runs cost their kernels, not their host time
    (max(GPU, host) per phase would have charged 10 × 50 µs after it)."""
    events = (_gemm(0, BIG, 10.0), *(_gemm(i, SMALL, 50.0) for i in range(1, 11)))
    result, _ = _split(_trace(events))
    assert _gpu_us(BIG) > 10 * 50.0
    assert result.mean_iteration_us == pytest.approx(10.0 + _gpu_us(BIG) + 10 * _gpu_us(SMALL), rel=1e-6)


@pytest.mark.parametrize(("name", "blocks"), [("clip_grad_norm", True), ("amp_unscale", True), ("adam_step", False)])
def test_the_host_blocks_on_the_loss_scale_check_and_the_gradient_norm(name, blocks):
    """Megatron reads the overflow flag and the gradient norm with ``.item()``: the host cannot
    issue the small phases after them during the product before."""
    step = ComputeEvent(1, name, category="optimizer", mem_bytes=1 << 20, host_us=10.0, kernels=1)
    events = (_gemm(0, BIG, 10.0), step, *(_gemm(i, SMALL, 50.0) for i in range(2, 12)))
    result, split = _split(_trace(events))
    ahead = 10.0 + _gpu_us(BIG) + ComputeTimer(CLUSTER.gpu, None).cost(step).gpu_us + 10 * _gpu_us(SMALL)
    if blocks:
        assert result.mean_iteration_us > ahead + 10 * 45.0
        assert split.host_wait_ms * 1e3 > 10 * 45.0
    else:
        assert result.mean_iteration_us == pytest.approx(ahead, rel=1e-6)


def test_a_pipeline_receive_holds_the_gpu_not_the_host():
    """The receiver's host issues the phases after its receive at once; they wait on the GPU for
    the sender's product and send (comm and bubble), so no host wait is left after it."""
    send = CollectiveEvent(1, Op.SENDRECV, 1 << 20, "g", "float16", "pp", peer=1, after=(0,))
    recv = CollectiveEvent(0, Op.SENDRECV, 1 << 20, "g", "float16", "pp", peer=0)
    sender = (_gemm(0, BIG, 10.0), send)
    first = replace(_gemm(1, SMALL, 50.0), after=(0,))  # computes on what it receives
    receiver = (recv, first, *(_gemm(i, SMALL, 50.0) for i in range(2, 11)))
    result, _ = _split(_trace(sender, receiver))
    assert result.mean_iteration_us < _gpu_us(BIG) + 500.0
    assert result.ranks[1].host_wait_us < 1.0


def test_the_host_waits_for_the_iteration_before_issuing_the_next():
    events = (_gemm(0, BIG, 10.0), _gemm(1, SMALL, 500.0, iteration=1), _gemm(2, BIG, 10.0, iteration=1))
    result, _ = _split(_trace(events))
    first, second = result.iteration_us
    assert first == pytest.approx(10.0 + _gpu_us(BIG), rel=1e-6)
    assert second == pytest.approx(510.0 + _gpu_us(SMALL) + _gpu_us(BIG) - _gpu_us(SMALL), rel=1e-3)


def test_a_small_gpt_on_one_stage_reports_host_wait_and_no_bubble():
    work = gpt_workload(hidden=256, heads=4, layers=2, seq=128, tp=2, micro_batch=1, global_batch=2)
    trace = generate(work)
    _, split = _split(trace)
    assert split.host_wait_ms > 0.3 * split.iteration_ms
    assert split.bubble_ms < 0.02 * split.iteration_ms
