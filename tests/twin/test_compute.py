"""The compute model (``twin.compute``): shape-based timing, host floors, interference both ways,
checked against the H200 measurements in ``benchmarks/data``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.testdata import DATA as TEST_DATA
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from twin.compute import (
    ComputeError,
    ComputeTimer,
    PhaseCost,
    attention_us,
    copy_ratio,
    gemm_us,
    gemm_waves,
    memory_us,
    optimizer_us,
    phase_speed,
)
from twin.compute.check import SweepError, compared, load_sweep, summary
from twin.compute.shapes import fused_softmax_attention_us, score_pass_bytes
from twin.hardware import gpu_spec
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.replay import replay
from twin.topology import load_cluster

BENCH = TEST_DATA.parents[1] / "benchmarks" / "data"
H200 = gpu_spec("H200-SXM-141GB")
ONE_WAVE = (1408, 3072, 8192)
"""11 × 12 tiles of 128×256: exactly one wave on 132 SMs."""

dims = st.integers(1, 40_000)


def cost_of(event: ComputeEvent, gpu=H200) -> PhaseCost:
    return ComputeTimer(gpu, None).cost(event)


# ---- shape-based timing ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, grow=st.integers(1, 5000), axis=st.sampled_from("mnk"),
       dtype=st.sampled_from(["bfloat16", "float16", "fp8_e4m3", "tf32", "float32"]),
       gpu=st.sampled_from(["H200-SXM-141GB", "A100-SXM4-80GB", "L40S", "V100-SXM2-32GB"]))
def test_a_product_never_gets_faster_when_any_dimension_grows(m, n, k, grow, axis, dtype, gpu):
    """On a free GPU.  With SMs held it need not be: a product of exactly one wave then loses a
    whole wave while a larger one does not (measured: 1408×3072 at 0.51 of its speed, 1408×3200 at 0.99)."""
    spec = gpu_spec(gpu)
    bigger = {"m": (m + grow, n, k), "n": (m, n + grow, k), "k": (m, n, k + grow)}[axis]
    assert gemm_us(spec, *bigger, dtype) >= gemm_us(spec, m, n, k, dtype) - 1e-9


@settings(max_examples=100, deadline=None)
@given(m=dims, n=dims, k=dims, busy=st.integers(0, 131))
def test_held_sms_never_speed_a_product_up_and_fewer_bytes_per_element_never_slow_it(m, n, k, busy):
    assert gemm_us(H200, m, n, k, busy_sms=busy) >= gemm_us(H200, m, n, k) - 1e-9
    assert gemm_us(H200, m, n, k, "fp8_e4m3") <= gemm_us(H200, m, n, k, "bfloat16") <= gemm_us(H200, m, n, k, "tf32")


@settings(max_examples=100, deadline=None)
@given(batch=st.integers(1, 64), heads=st.integers(1, 128), seq=st.integers(1, 16384),
       head_dim=st.sampled_from([32, 64, 80, 128, 256]), axis=st.integers(0, 3), fused=st.booleans())
def test_attention_never_gets_faster_when_its_shape_grows(batch, heads, seq, head_dim, axis, fused):
    shape = [batch, heads, seq, head_dim]
    grown = list(shape)
    grown[axis] *= 2
    t = attention_us(H200, shape[0], shape[1], shape[2], shape[2], shape[3], fused=fused)
    t2 = attention_us(H200, grown[0], grown[1], grown[2], grown[2], grown[3], fused=fused)
    assert t2 >= t
    assert attention_us(H200, batch, heads, seq, seq, head_dim, fused=fused, backward=True) > t


def test_wave_quantisation_one_wave_against_one_tile_more():
    """A product of exactly one wave, then one more row of tiles (1 % more FLOPs): the tail takes
    a quarter wave more, as measured (the H200 sweep: 89.6 → 104.6 µs for 132 → 143 tiles)."""
    m, n, k = ONE_WAVE
    assert gemm_waves(H200, m, n) == (1, 0, 132)
    one, more = gemm_us(H200, m, n, k), gemm_us(H200, m + 1, n, k)
    assert 1.15 < more / one < 1.35
    assert gemm_waves(H200, m, n, busy_sms=1) == (2, 0, 131)
    assert gemm_us(H200, m, n, k, busy_sms=1) / one == pytest.approx(2.0, rel=0.05)
    # 54 waves barely notice one held SM
    assert gemm_us(H200, 16384, 14336, 4096, busy_sms=1) / gemm_us(H200, 16384, 14336, 4096) < 1.03


def test_small_k_and_small_m_products_fall_far_below_peak():
    peak = 989.4e6  # MFLOP/µs
    big = 2 * 8192 * 8192 * 8192 / gemm_us(H200, 8192, 8192, 8192) / peak
    small_k = 2 * 32768 * 4096 * 64 / gemm_us(H200, 32768, 4096, 64) / peak  # bound by writing the result
    small_m = 2 * 16 * 8192 * 8192 / gemm_us(H200, 16, 8192, 8192) / peak  # bound by reading the weights
    assert 0.7 < big < 0.82 and small_k < 0.5 * big and small_m < 0.2 * big


def test_flash_attention_beats_unfused_and_memory_ops_pay_the_floor():
    assert attention_us(H200, 4, 32, 4096, 4096, 128, fused=False) > 10 * attention_us(H200, 4, 32, 4096, 4096, 128)
    tiny = cost_of(ComputeEvent(0, "add", category="memory", mem_bytes=64, kernels=5, host_us=0.0))
    assert tiny.gpu_us == pytest.approx(5 * DEFAULT_PARAMS.compute.kernels.floor_us)
    big = cost_of(ComputeEvent(0, "add", category="memory", mem_bytes=4 << 30, host_us=0.0))
    assert big.gpu_us == pytest.approx(memory_us(H200, 4 << 30))
    step = cost_of(ComputeEvent(0, "adam", category="optimizer", mem_bytes=28 << 28, host_us=0.0))
    assert step.gpu_us == pytest.approx(optimizer_us(H200, 28 << 28))
    clip = cost_of(ComputeEvent(0, "clip_grad_norm", category="optimizer", mem_bytes=12 << 28, host_us=0.0))
    scale = cost_of(ComputeEvent(0, "unscale_grads", category="optimizer", mem_bytes=8 << 28, host_us=0.0))
    assert clip.gpu_us == pytest.approx(DEFAULT_PARAMS.compute.kernels.grad_clip_us + memory_us(H200, 12 << 28))
    assert scale.gpu_us == pytest.approx(DEFAULT_PARAMS.compute.kernels.loss_scale_us + memory_us(H200, 8 << 28))


def test_megatron_fused_softmax_attention_sits_between_flash_and_unfused_and_is_memory_bound():
    """Megatron's baddbmm + fused causal softmax + dropout + bmm: far slower than flash, far
    faster than PyTorch's naive masked softmax, and bound by the score matrix's bytes, so on an
    A100 it slows by the bandwidth ratio (2.4×), not the tensor-peak ratio (3.2×)."""
    shape = (16, 8, 2048, 2048, 128)
    fused = fused_softmax_attention_us(H200, *shape, "float16")
    assert 5 * attention_us(H200, *shape) < fused < attention_us(H200, *shape, fused=False) / 2
    fwd = cost_of(ComputeEvent(0, "L0.attn.core", category="attention-fused-softmax", shape=shape, dtype="float16",
                               host_us=0.0))
    bwd = cost_of(ComputeEvent(1, "L0.attn.core.bwd", category="attention-fused-softmax", shape=shape,
                               dtype="float16", host_us=0.0))
    assert fwd.gpu_us == pytest.approx(fused)
    assert bwd.gpu_us == pytest.approx(fused_softmax_attention_us(H200, *shape, "float16", backward=True))
    assert bwd.gpu_us > fused
    a100 = gpu_spec("A100-SXM4-80GB")
    ratio = fused_softmax_attention_us(a100, *shape, "float16") / fused
    assert ratio == pytest.approx(4800 / 2039, rel=0.06) and ratio < 0.85 * 989.4 / 312
    # causal rows read half the matrix; a decode step's single row reads all of it
    assert score_pass_bytes(1, 1, 4096, "float16") == 4096 * (2 * 2 + 1 + 2 + 2)
    assert score_pass_bytes(2, 64, 64, "bfloat16") < score_pass_bytes(2, 64, 65, "bfloat16")


def test_other_gpus_scale_by_their_data_sheets():
    """A100/H100/B200 are derived (same shares of their peaks): a large product's time follows the peak."""
    shape = (16384, 16384, 8192)
    for model in ("A100-SXM4-80GB", "H100-SXM5-80GB", "B200"):
        gpu = gpu_spec(model)
        ratio = gemm_us(gpu, *shape) / gemm_us(H200, *shape)
        assert ratio == pytest.approx(989.4 / gpu.peak.bfloat16, rel=0.1), model
    assert memory_us(gpu_spec("A100-SXM4-80GB"), 1e9) / memory_us(H200, 1e9) == pytest.approx(4800 / 2039)


# ---- host time ------------------------------------------------------------------------------


def test_a_phase_takes_at_least_its_host_time():
    tiny = ComputeEvent(0, "ln", category="gemm", shape=(16, 64, 64), kernels=3)
    per_kernel = DEFAULT_PARAMS.compute.kernels.host_us_per_kernel
    assert ComputeTimer(H200, None).time_us(tiny) == pytest.approx(3 * per_kernel)
    told = ComputeEvent(0, "ln", category="gemm", shape=(16, 64, 64), kernels=3, host_us=500.0)
    assert ComputeTimer(H200, None).time_us(told) == 500.0
    big = ComputeEvent(0, "mlp", category="gemm", shape=(16384, 16384, 16384), host_us=500.0)
    assert ComputeTimer(H200, None).time_us(big) == pytest.approx(gemm_us(H200, 16384, 16384, 16384))
    host = cost_of(ComputeEvent(0, "python", category="host", host_us=120.0))
    assert (host.gpu_us, host.us) == (0.0, 120.0)
    assert copy_ratio([host], H200) == 1.0 and phase_speed(host, 64, True, H200) == 1.0


def test_communication_slows_a_phase_s_gpu_work_whatever_its_host_time():
    """The speed is the GPU work's; the host time is paid by the replay's host thread (was: a
    host-bound phase kept its speed, its time being max(GPU, host))."""
    bound = cost_of(ComputeEvent(0, "small", category="gemm", shape=ONE_WAVE, host_us=10_000.0))
    free = cost_of(ComputeEvent(0, "small", category="gemm", shape=ONE_WAVE, host_us=0.0))
    assert bound.us == 10_000.0 and free.us == bound.gpu_us
    assert phase_speed(bound, 1, True, H200) == phase_speed(free, 1, True, H200) < 0.5


def test_a_measured_phase_moves_to_another_gpu_by_the_shape_model():
    event = ComputeEvent(0, "qkv", category="gemm", shape=(8192, 12288, 4096), duration_us=1000.0)
    a100, h100 = gpu_spec("A100-SXM4-80GB"), gpu_spec("H100-SXM5-80GB")
    moved = ComputeTimer(h100, a100).time_us(event)
    assert moved == pytest.approx(1000.0 * gemm_us(h100, 8192, 12288, 4096) / gemm_us(a100, 8192, 12288, 4096))
    assert ComputeTimer(h100, h100).time_us(event) == 1000.0


# ---- against the H200 measurements --------------------------------------------------------------

TOLERANCE = {  # group: (median, 90th percentile) absolute relative error the model must stay within
    "gemm bfloat16": (0.05, 0.20), "gemm float16": (0.06, 0.22), "gemm fp8": (0.09, 0.33),
    "gemm tf32": (0.11, 0.23), "gemm wave": (0.07, 0.32), "attention flash fwd": (0.07, 0.14),
    "attention flash fwd+bwd": (0.05, 0.23), "attention unfused fwd": (0.16, 0.23),
    "attention unfused fwd+bwd": (0.06, 0.10), "memory add": (0.09, 0.32), "memory copy": (0.06, 0.27),
    "optimizer step": (0.04, 0.05), "optimizer clip": (0.09, 0.12), "optimizer scale": (0.15, 0.16),
    "gemm under held SMs": (0.16, 0.46), "attention fused-softmax fwd": (0.04, 0.07),
    "attention fused-softmax bwd": (0.05, 0.08),
}


@pytest.fixture(scope="module")
def h200_rows() -> dict:
    rows = {}
    for name in ("h200-compute.json", "h200-compute-interference.json", "h200-attention.json"):
        sweep = load_sweep(BENCH / name)
        assert gpu_spec(sweep["device"]).model == H200.model
        rows.update(compared(sweep, H200))
    return rows


def test_the_model_reproduces_the_h200_sweeps_within_tolerance(h200_rows):
    assert set(h200_rows) == set(TOLERANCE)
    assert len(h200_rows["gemm bfloat16"]) > 500
    for group, (median, p90) in TOLERANCE.items():
        med, high, _ = summary(h200_rows[group])
        assert med <= median and high <= p90, (group, med, high)


def test_a_refit_of_the_gemm_model_moves_it_off_the_measurements(h200_rows):
    """The tolerance is no formality: a 20 % lower tile efficiency breaks it."""
    worse = compared(load_sweep(BENCH / "h200-compute.json"), H200,
                     DEFAULT_PARAMS.replace(**{"compute.gemm.efficiency": 0.64}))
    assert summary(worse["gemm bfloat16"])[0] > 0.15


def test_a_file_that_is_no_sweep_is_refused_by_name(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(SweepError, match=r"x\.json: not a file of benchmarks/gpu_compute_sweep\.py"):
        load_sweep(bad)
    bad.write_text("{")
    with pytest.raises(SweepError, match=r"x\.json: not a readable JSON sweep"):
        load_sweep(bad)


# ---- interference, against benchmarks/interference.py's H200 rows --------------------------------


@pytest.fixture(scope="module")
def pairs() -> dict:
    return json.loads((BENCH / "h200-interference.json").read_text())["rows"]


def test_a_copy_keeps_what_the_compute_leaves_of_memory(pairs):
    """Beside products a copy keeps ~0.8 of its rate, beside a bandwidth-bound add ~0.15 (not a fixed 0.8)."""
    m, k, n = 8192, 8192, 8192
    gemm = cost_of(ComputeEvent(0, "gemm", category="gemm", shape=(m, n, k), host_us=0.0))
    add = cost_of(ComputeEvent(0, "add", category="memory", mem_bytes=3 << 30, host_us=0.0))
    for row in pairs["copy_under"]:
        model = copy_ratio([gemm if row["compute"] == "gemm" else add], H200)
        assert model == pytest.approx(row["copy_ratio"], abs=0.1), row
    assert copy_ratio([add], H200) < 0.2 < 0.75 < copy_ratio([gemm], H200) < 0.9


def test_a_copy_slows_a_product_by_more_than_the_sm_it_holds(pairs):
    """A product beside a copy on 1 CTA runs ~1.25× slower (measured 0.74-0.81), not 1/(1 - 1/132).
    (``benchmarks/interference.py`` ran its first product, 8192³ bf16, beside the copy.)"""
    shape = (8192, 8192, 8192)
    product = cost_of(ComputeEvent(0, "mlp", category="gemm", shape=shape, host_us=0.0))
    for row in pairs["compute_under"]:
        if row["compute"] == "gemm":
            model = phase_speed(product, row["ctas"], row["by"] == "copy", H200)
            assert model == pytest.approx(row["speed"], abs=0.1), row
    assert 0.7 < phase_speed(product, 1, True, H200) < 0.8 < 0.9 < phase_speed(product, 1, False, H200)
    add = cost_of(ComputeEvent(0, "add", category="memory", mem_bytes=3 << 30, host_us=0.0))
    assert phase_speed(add, 64, True, H200) == 1.0  # measured 0.94-1.03 with 64 SMs held


def test_interference_parameters_lie_within_their_bounds_and_the_measured_range():
    c = DEFAULT_PARAMS.compute.interference
    bounds = TwinParams.bounds()
    for name, value in (("gemm_beside_copy", c.gemm_beside_copy), ("copy_floor", c.copy_floor),
                        ("gemm_dram_traffic", c.gemm_dram_traffic)):
        low, high = bounds[f"compute.interference.{name}"]
        assert low <= value <= high
    assert 0.74 <= c.gemm_beside_copy <= 0.86 and 0.13 <= c.copy_floor <= 0.18


def test_the_replay_stretches_a_one_wave_product_beside_an_allreduce():
    """Wave quantisation reaches the replay: one channel's SM doubles a one-wave product's time."""
    def trace(shape):
        ranks = tuple(RankTrace(r, (ComputeEvent(0, "qkv", category="gemm", shape=shape, host_us=0.0),
                                    CollectiveEvent(1, Op.ALLREDUCE, 1 << 30, "g", "float32", "nccl")))
                      for r in (0, 1))
        return Trace(2, (ProcessGroup("g", (0, 1)),), ranks, "test", {})

    one_channel = Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 1, 512, 1 << 19)
    config = {Task(Op.ALLREDUCE, 1 << 30, 2, group="g"): one_channel}
    cluster = load_cluster("dgx-h100")
    m, n, k = ONE_WAVE
    alone = gemm_us(cluster.gpu, m, n, k)
    result = replay(trace(ONE_WAVE), cluster, config)
    assert result.ranks[0].compute_us > 1.5 * alone  # held SM and the copy beside it
    many = (16384, 14336, 4096)
    result = replay(trace(many), cluster, config)
    assert result.ranks[0].compute_us < 1.3 * gemm_us(cluster.gpu, *many)


def test_an_element_type_the_model_does_not_know_is_named_with_its_phase():
    timer = ComputeTimer(H200, None)
    same = [timer.time_us(ComputeEvent(0, "qkv", category="gemm", shape=(4096, 4096, 4096), dtype=d))
            for d in ("bf16", "bfloat16")]
    assert same[0] == same[1]
    with pytest.raises(ComputeError, match=r"compute phase 'qkv' \(id 7\): unknown element type 'bf17'"):
        timer.time_us(ComputeEvent(7, "qkv", category="gemm", shape=(4096, 4096, 4096), dtype="bf17"))
