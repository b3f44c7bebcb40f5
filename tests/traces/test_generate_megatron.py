"""The generator's Megatron features change collectives, bytes and compute exactly as Megatron-LM
does: pipeline scatter-gather, sequence parallelism, recompute modes, interleaved 1F1B, tied
embeddings, ZeRO stages; and every compute phase says what it is (category, shape, dtype, kernels)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.testdata import DATA
from traces.generate import generate, job_flops
from traces.generate.gpt import gpt_workload
from traces.generate.parallelism import Parallelism
from traces.generate.pipeline import interleaved_order
from traces.generate.workload import Workload
from traces.schema import COMPUTE_CATEGORIES, CollectiveEvent, ComputeEvent
from twin.iteration import breakdown
from twin.placement import cluster_for
from twin.replay import replay

H, HEADS, SEQ = 512, 8, 256


def _gpt(**plan) -> Workload:
    shape = {"hidden": H, "heads": HEADS, "layers": 4, "seq": SEQ, "micro_batch": 2}
    return gpt_workload(**{**shape, **plan})


def _calls(work: Workload, rank: int = 0) -> list[CollectiveEvent]:
    trace = generate(work, ranks=[rank])
    return [e for e in trace.ranks[0].events if isinstance(e, CollectiveEvent)]


def _with(work: Workload, **fields) -> Workload:
    from dataclasses import replace

    return replace(work, parallelism=replace(work.parallelism, **fields))


ACT = 2 * SEQ * H * 2  # micro-batch 2 × seq × hidden × float16


def test_without_sequence_parallelism_each_tp_rank_sends_a_tp_th_and_the_next_stage_all_gathers():
    work = _gpt(tp=4, pp=2)
    sends = [e for e in _calls(work, 0) if e.name == "pp-send.act"]
    assert {e.nbytes for e in sends} == {ACT // 4} and len(sends) == 1
    stage1 = _calls(work, rank=4)
    recv = [i for i, e in enumerate(stage1) if e.name == "pp-recv.act"]
    assert [stage1[i + 1].name for i in recv] == ["pp-gather.act"]
    gather = stage1[recv[0] + 1]
    assert gather.op.value == "allgather" and gather.nbytes == ACT and gather.group == "tp:4"
    # Megatron without scatter_gather_tensors_in_pipeline: the full tensor, nothing gathered
    plain = _calls(_with(work, scatter_gather_pipeline=False), rank=4)
    assert {e.nbytes for e in plain if e.op.value == "sendrecv"} == {ACT}
    assert not [e for e in plain if e.name.startswith("pp-gather")]


def test_with_sequence_parallelism_the_split_is_sent_and_nothing_gathered_for_the_pipeline():
    calls = _calls(_gpt(tp=4, pp=2, sequence_parallel=True), rank=4)
    assert {e.nbytes for e in calls if e.op.value == "sendrecv"} == {ACT // 4}
    assert not [e for e in calls if e.name.startswith("pp-gather")]
    ops = Counter(e.op.value for e in calls if e.group == "tp:4" and e.nbytes == ACT)
    assert ops == {"allgather": 6 * 2 + 2, "reducescatter": 4 * 2 + 1}  # 2 layers; the output layer's


def test_element_wise_work_is_split_over_tp_only_with_sequence_parallelism():
    def norm_bytes(sp: bool) -> int:
        trace = generate(_gpt(tp=4, sequence_parallel=sp), ranks=[0])
        return next(e.mem_bytes for e in trace.ranks[0].events if e.name == "L0.attn.norm")

    assert norm_bytes(False) == 4 * norm_bytes(True) == 2 * 2 * SEQ * H * 2


def test_gemms_have_megatron_shapes_under_tensor_parallelism():
    trace = generate(_gpt(tp=4), ranks=[0])
    phases = {e.name: e for e in trace.ranks[0].events if isinstance(e, ComputeEvent)}
    tokens = 2 * SEQ
    assert phases["L0.attn.qkv"].shape == (tokens, 3 * H // 4, H)
    assert phases["L0.attn.proj"].shape == (tokens, H, H // 4)
    assert phases["L0.mlp.fc1"].shape == (tokens, 4 * H // 4, H)
    assert phases["L0.mlp.fc2"].shape == (tokens, H, 4 * H // 4)
    assert phases["L0.mlp.fc1.wgrad"].shape == (H, H, tokens)
    assert phases["L0.attn.core"].shape == (2, HEADS // 4, SEQ, SEQ, H // HEADS)
    assert phases["L0.attn.core"].category == "attention-fused-softmax" and phases["L0.attn.core"].kernels == 5
    for e in phases.values():
        assert e.category in COMPUTE_CATEGORIES and e.dtype in ("float16", "float32")
        if e.category == "gemm":
            m, n, k = e.shape
            assert e.flops == 2 * m * n * k


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_recompute_modes_add_the_work_megatron_recomputes(recompute):
    work = _gpt(tp=2, recompute=recompute)
    events = generate(work, ranks="all").ranks[0].events
    flops = sum(e.flops for e in events if isinstance(e, ComputeEvent) and e.name != "optimizer")
    assert flops * 2 == pytest.approx(job_flops(work), rel=1e-9)
    again = [e.name for e in events if ".recompute" in e.name]
    tp_reduces = sum(1 for e in events if isinstance(e, CollectiveEvent) and e.name.startswith("tp-reduce.attn"))
    if recompute == "none":
        assert not again and tp_reduces == 4  # forward of 4 layers
    elif recompute == "selective":  # the core attention of each layer, no collective again
        assert again == [f"L{i}.attn.core.recompute" for i in (3, 2, 1, 0)] and tp_reduces == 4
    else:  # the whole layer forward again, its TP all-reduces included
        assert len([n for n in again if n.endswith("qkv.recompute")]) == 4 and tp_reduces == 8


def test_interleaved_chunks_hold_megatrons_layers_and_replay_without_deadlock():
    order = interleaved_order(4, 0, 8, 2)
    assert sorted(order) == sorted((k, j, c) for k in "FB" for j in range(8) for c in range(2))
    assert order[:10] == [("F", j, c) for c, j in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2),
                                                   (1, 3), (0, 4), (0, 5)]]  # 2·3 + 4 warm-up forwards
    plain = _gpt(layers=8, tp=2, pp=4, global_batch=16)
    interleaved = _with(plain, virtual_stages=2)
    trace = generate(interleaved, ranks="all")
    trace.validate()
    stage0 = {e.name.split(".")[0] for e in trace.ranks[0].events if e.name.endswith("attn.qkv")}
    assert stage0 == {"L0", "L4"}  # chunk 0 holds virtual stage 0, chunk 1 virtual stage 4
    sends = [e for e in trace.ranks[0].events if isinstance(e, CollectiveEvent) and e.name == "pp-send.act"]
    assert len(sends) == 2 * 8  # each chunk's activations of every micro-batch

    # the stages agree on the order of their messages (pp:4 and the wrap from the last stage to the
    # first on a stream per neighbour), so every send meets its receive
    result = replay(trace, cluster_for(trace, "dgx-a100"))
    split = breakdown(trace, result)
    assert split.bubble_ms > 0 and split.comm_ms_by_op["sendrecv"] > 0
    assert len(result.iteration_us) == 1 and result.mean_iteration_us > 0


def test_tied_embeddings_are_all_reduced_between_the_first_and_last_stage():
    work = _gpt(tp=2, pp=2)
    padded = work.parallelism.padded_vocab(work.model.vocab)
    for rank in (0, 2):
        (grads,) = [e for e in _calls(work, rank) if e.name == "embedding-grads"]
        assert grads.op.value == "allreduce" and grads.group == "embedding:0"
        assert grads.nbytes == padded * H // 2 * 2
    assert not [e for e in _calls(_gpt(tp=2)) if e.name == "embedding-grads"]  # one stage: nothing to tie


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stages_issue_their_data_parallel_collectives(zero):
    work = _gpt(dp=4, zero=zero, global_batch=16)  # two micro-batches
    calls = Counter((e.op.value, e.name.split(".")[0]) for e in _calls(work))
    expected = {
        0: {("allreduce", "dp-grads"): 1},
        1: {("reducescatter", "dp-grads"): 1, ("allgather", "dp-params"): 1},  # the distributed optimizer
        2: {("reducescatter", "dp-grads"): 2, ("allgather", "dp-params"): 1},  # every micro-batch
        3: {("reducescatter", "dp-grads"): 2, ("allgather", "dp-params"): 1,
            ("allgather", "fsdp-gather"): 2 * 2 * 4, ("reducescatter", "fsdp-scatter"): 2 * 4},
    }[zero]
    assert {k: v for k, v in calls.items() if k[1].startswith(("dp-", "fsdp-"))} == expected
    grads = next(e for e in _calls(work) if e.name.startswith("dp-grads"))
    assert grads.dtype == ("float32" if zero else "float16")


def test_the_optimizer_step_and_gradient_clipping_are_phases_of_their_own():
    work = _gpt(dp=2, zero=1)
    events = generate(work, ranks=[0]).ranks[0].events
    unscale = next(e for e in events if e.name == "grad-unscale")  # fp16: the loss scaler's inf check
    clip = next(e for e in events if e.name == "grad-clip")
    step = next(e for e in events if e.name == "optimizer")
    assert {unscale.category, clip.category, step.category} == {"optimizer"}
    assert unscale.id in clip.after and clip.id in step.after
    assert unscale.mem_bytes == 8 * (step.flops // 12) and clip.mem_bytes == 12 * (step.flops // 12)
    assert step.mem_bytes == 32 * (step.flops // 12)  # sharded over the 2 data-parallel ranks
    _ = Parallelism  # the plan type these workloads carry


def test_a_layer_launches_as_many_kernels_as_a_profiled_megatron_layer():
    """Forward and backward of one layer: products, attention, norms and element-wise ops, plus
    bias-gradient reductions, the residual branch's gradient add and one accumulation per
    parameter tensor; torch's profiler counted 63 for Megatron-LM's layer (fused-softmax
    attention, dropout) on H200 (``benchmarks/gpu_megatron_layer.py``; a plain pre-norm layer
    with SDPA attention: 50-55)."""
    runs = json.loads((DATA.parents[1] / "benchmarks" / "data" / "h200-megatron-layer.json").read_text())["runs"]
    profiled = runs[0]["variants"]["tp1-middle-stage"]["fit"]["kernels"]["per_layer"]
    events = generate(_gpt(tp=2), ranks=[0]).ranks[0].events
    layer = [e for e in events if isinstance(e, ComputeEvent) and e.name.startswith("L1.")]
    gpt = sum(e.kernels for e in layer)
    assert gpt == round(profiled) == 63, (gpt, profiled)


@pytest.mark.parametrize("batch, heads, seq_q, seq_kv, runs", [
    (1, 2, 1024, 1024, False),  # b·np = 2
    (2, 2, 1024, 1024, True),
    (1, 4, 1024, 1024, True),
    (3, 3, 1024, 1024, False),  # 9
    (4, 8, 4096, 4096, False),  # keys past the kernel's 2048
    (4, 8, 2048, 2048, True),
    (4, 8, 16, 16, False),  # 16 keys or fewer
    (4, 8, 18, 18, False),  # queries not a multiple of 4
])
def test_megatrons_fused_softmax_runs_within_its_kernels_constraints(batch, heads, seq_q, seq_kv, runs):
    from traces.generate.transformer import fused_softmax_runs

    assert fused_softmax_runs(batch, heads, seq_q, seq_kv) is runs
