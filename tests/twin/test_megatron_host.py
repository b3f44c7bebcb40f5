"""Megatron-LM's host profile: the generator's kernels and the twin's host time follow the
measurement on the H200 (``benchmarks/data/h200-megatron-layer.json``), and a host-bound model's
iteration follows that host time where a GPU-bound one's does not."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.megatron_host_profile import load, megatron_profile
from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import ComputeEvent, Trace
from twin.compute import ComputeTimer
from twin.compute.timer import MEGATRON
from twin.hardware import gpu_spec
from twin.params import DEFAULT_PARAMS
from twin.placement import cluster_for
from twin.whatif import Candidate, evaluate_cluster

DATA = load()
PROFILE = megatron_profile(DATA)


def _trace(tp: int = 1, layers: int = 2, recompute: str = "none", **shape) -> Trace:
    size = {"hidden": 256, "heads": 8, "seq": 256, "micro_batch": 1, "global_batch": 2} | shape
    return generate(gpt_workload(layers=layers, tp=tp, dp=1, pp=1, recompute=recompute, **size))


def _kernels(trace: Trace) -> Counter:
    """Kernels of rank 0's first iteration: (inside a layer?, backward?) → count."""
    out: Counter = Counter()
    for e in trace.ranks[0].events:
        if isinstance(e, ComputeEvent) and e.iteration == 0 and e.category != "optimizer":
            out[e.name.startswith("L"), any(w in e.name for w in ("bwd", "grad"))] += e.kernels
    return out


def test_the_generator_launches_the_kernels_measured_in_megatrons_layer():
    """18 forward and 45 backward kernels per layer, as the profiler counted them."""
    for tp in (1, 8):
        one, three = _kernels(_trace(tp, layers=1, global_batch=1)), _kernels(_trace(tp, layers=3, global_batch=1))
        assert (three[True, False] - one[True, False]) / 2 == PROFILE.forward_kernels == 18
        assert (three[True, True] - one[True, True]) / 2 == PROFILE.backward_kernels == 45


@pytest.mark.parametrize("tp, variant", [(1, "tp1"), (8, "tp8")])
def test_the_generator_launches_the_kernels_measured_outside_the_layers(tp, variant):
    """Embedding, batch, loss and cross entropy: the single-stage intercept's kernels per micro-batch."""
    run = DATA["runs"][0]["variants"][variant]
    rows = {r["layers"]: r for r in run["rows"]}
    per_layer_fwd = rows[2]["forward_kernels"] - rows[1]["forward_kernels"]
    per_layer = rows[2]["kernels"] - rows[1]["kernels"]
    fwd_outside = rows[1]["forward_kernels"] - per_layer_fwd
    bwd_outside = rows[1]["kernels"] - per_layer - fwd_outside
    got = _kernels(_trace(tp, layers=1, global_batch=1))
    assert (got[False, False], got[False, True]) == (fwd_outside, bwd_outside)


def test_the_twins_megatron_parameters_are_the_measured_profile():
    kernels = DEFAULT_PARAMS.compute.kernels
    assert kernels.megatron_host_us_per_kernel == pytest.approx(PROFILE.reference_host_us_per_kernel, abs=0.05)
    assert kernels.megatron_step_host_us == pytest.approx(PROFILE.reference_step_host_us, abs=5)
    assert kernels.megatron_checkpoint_host_us == pytest.approx(PROFILE.reference_checkpoint_host_us, abs=1)
    # Megatron's layer costs more host time per kernel than the plain one, on the same host
    assert PROFILE.host_us_per_kernel > PROFILE.plain_host_us_per_kernel


def test_a_megatron_trace_pays_megatrons_host_time_and_another_keeps_the_plain_one():
    trace, h200 = _trace(), gpu_spec("h200")
    megatron = ComputeTimer.for_trace(trace, h200)
    plain = ComputeTimer(h200, None)
    qkv = next(e for e in trace.ranks[0].events if e.name == "L0.attn.qkv")
    assert megatron.framework == MEGATRON and plain.framework is None
    assert megatron.cost(qkv).host_us == DEFAULT_PARAMS.compute.kernels.megatron_host_us_per_kernel
    assert plain.cost(qkv).host_us == DEFAULT_PARAMS.compute.kernels.host_us_per_kernel
    step = next(e for e in trace.ranks[0].events if e.category == "host")
    assert megatron.cost(step).host_us == DEFAULT_PARAMS.compute.kernels.megatron_step_host_us
    assert plain.cost(step).host_us == 0.0
    said = ComputeEvent(0, "schedule.forward-step", category="host", host_us=7.0)
    assert megatron.cost(said).host_us == 7.0  # a trace that says its host time keeps it
    slow_host = ComputeTimer.for_trace(trace, h200, host_speed=0.5)
    assert slow_host.cost(qkv).host_us == 2 * megatron.cost(qkv).host_us


def test_each_micro_batch_has_two_schedule_steps_and_each_recomputed_layer_a_checkpoint():
    plain = [e.name for e in _trace(layers=3, global_batch=4).ranks[0].events
             if e.category == "host" and e.iteration == 0]
    assert Counter(plain) == {"schedule.forward-step": 4, "schedule.backward-step": 4}
    again = [e.name for e in _trace(layers=3, global_batch=4, recompute="full").ranks[0].events
             if e.category == "host" and e.iteration == 0]
    assert sum(name.endswith(".checkpoint") for name in again) == 3 * 4


def _iteration_ms(trace: Trace, params=DEFAULT_PARAMS) -> float:
    cluster = cluster_for(trace, "dgx-a100")
    return evaluate_cluster(trace, cluster, Candidate("dgx-a100"), tuned=False, params=params).breakdown.iteration_ms


def test_a_host_bound_model_follows_host_time_and_a_gpu_bound_one_does_not():
    """Doubling Megatron's host time per kernel nearly doubles a small model's iteration; a large
    model's GPU work hides it."""
    slow = DEFAULT_PARAMS.replace(**{"compute.kernels.megatron_host_us_per_kernel": 80.4})
    small = _trace(layers=4, global_batch=4)
    assert _iteration_ms(small, slow) / _iteration_ms(small) > 1.8
    large = _trace(layers=2, hidden=4096, heads=32, seq=2048, micro_batch=8, global_batch=8)
    assert _iteration_ms(large, slow) / _iteration_ms(large) < 1.03
