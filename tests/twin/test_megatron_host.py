"""Megatron-LM's host profile: the generator's kernels and the twin's host time follow the
measurement on the H200 (``benchmarks/data/h200-megatron-layer.json``), and a host-bound model's
iteration follows that host time where a GPU-bound one's does not."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

from benchmarks.megatron_host_profile import load, megatron_profile, torch_softmax_ratios
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
    """18 forward and 45 backward kernels per layer, as the profiler counted them (with Megatron's
    fused softmax: at TP 8, 32 heads leave 4 to a rank, as the kernel needs)."""
    for tp in (1, 8):
        one, three = (_kernels(_trace(tp, layers=n, global_batch=1, heads=32)) for n in (1, 3))
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


def test_attention_falls_back_to_torchs_softmax_where_megatrons_kernel_cannot_run():
    """Megatron's fused causal softmax needs b·np % 4 == 0: one sequence of 2 heads per rank (TP 8 of
    16 heads) runs torch's ops, with the kernels measured for that fallback; two sequences run the
    fused kernel again."""
    def cores(micro_batch: int) -> list[ComputeEvent]:
        trace = _trace(8, heads=16, hidden=1024, seq=1024, micro_batch=micro_batch, global_batch=micro_batch)
        return [e for e in trace.ranks[0].events if isinstance(e, ComputeEvent) and ".core" in e.name]

    fallback = cores(1)
    assert {e.category for e in fallback} == {"attention-unfused"}
    assert sorted(e.kernels for e in fallback) == [9, 9, 16, 16]  # 2 layers: 4 more each way than fused
    fused = cores(2)
    assert {e.category for e in fused} == {"attention-fused-softmax"}
    assert sorted(e.kernels for e in fused) == [5, 5, 12, 12]


def test_the_fallbacks_host_time_grows_as_its_kernels_do():
    """Measured on the H200 (same-round pairs, TP 1 and TP 8 shapes): the layer with torch's softmax
    takes as much more host time as it launches more kernels, so its kernels alone carry its cost."""
    ratios = torch_softmax_ratios(DATA)
    assert len(ratios) >= 10
    host, kernels = statistics.median(r for r, _ in ratios), statistics.median(k for _, k in ratios)
    assert kernels == pytest.approx(71 / 63, abs=0.01)
    assert host == pytest.approx(kernels, abs=0.05)


def test_a_host_bound_tp8_layer_of_one_sequence_costs_the_fallbacks_kernels():
    """The iteration of a host-bound TP 8 job of one sequence per micro-batch grows, per layer, by the
    fallback's 8 more kernels over two sequences' (where the fused kernel runs)."""
    def iteration_ms(micro_batch: int, layers: int) -> float:
        trace = _trace(8, layers=layers, heads=16, hidden=1024, seq=1024, micro_batch=micro_batch,
                       global_batch=micro_batch)
        return _iteration_ms(trace)

    one = iteration_ms(1, 4) - iteration_ms(1, 2)
    two = iteration_ms(2, 4) - iteration_ms(2, 2)
    extra_us = 8 * DEFAULT_PARAMS.compute.kernels.megatron_host_us_per_kernel / 0.771  # EPYC 7742
    assert (one - two) / 2 * 1e3 == pytest.approx(extra_us, rel=0.2)


def test_each_collective_call_costs_a_megatron_host_the_measured_c10d_time():
    """A host-bound TP 2 iteration grows by the collective calls' host time: rank 0's calls in the
    iteration × the extra µs per call ÷ the host CPU's speed; a trace of no framework pays none."""
    trace = _trace(2, layers=4, global_batch=4)
    plain = ComputeTimer(gpu_spec("h200"), None)
    assert plain.collective_host_us() == 0.0
    megatron = ComputeTimer.for_trace(trace, gpu_spec("a100"), host_speed=0.771)
    assert megatron.collective_host_us() == pytest.approx(DEFAULT_PARAMS.compute.kernels.megatron_collective_host_us
                                                          / 0.771)
    calls = sum(1 for e in trace.ranks[0].events if not isinstance(e, ComputeEvent))
    more = DEFAULT_PARAMS.replace(**{"compute.kernels.megatron_collective_host_us": 117.3})
    grown_ms = _iteration_ms(trace, more) - _iteration_ms(trace)
    assert grown_ms * 1e3 == pytest.approx(calls * 100.0 / 0.771, rel=0.1)


def test_the_collective_host_time_is_the_measured_c10d_call():
    """``megatron_collective_host_us``: the H200's ``dist.all_reduce`` call (median over the sizes
    measured) scaled to the reference host as the layer profile is; dearer than a plain op."""
    import json
    from pathlib import Path

    c10d = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/data/h200-c10d-host.json").read_text())
    sizes = [v for k, v in c10d.items() if k.endswith("MiB")]
    call = statistics.median(v["allreduce"] for v in sizes) * PROFILE.scale
    assert DEFAULT_PARAMS.compute.kernels.megatron_collective_host_us == pytest.approx(call, abs=0.1)
    assert all(v["allreduce"] > 1.5 * v["add"] for v in sizes)
