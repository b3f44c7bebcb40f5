"""Generated training traces: the AutoCCL paper's Table 1, structure, FLOPs, plan files, examples, CLI."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from traces import examples
from traces.generate import (
    Layout,
    Parallelism,
    PipelineSchedule,
    Transformer,
    WorkloadError,
    generate,
    job_flops,
    list_presets,
    load_workload,
    workload,
)
from traces.generate.pipeline import pipeline_order
from traces.generate.workload import Workload
from traces.schema import CollectiveEvent, ComputeEvent
from traces.summary import summarize
from traces.task import Op
from traces.trace_file import load_trace

MiB = 1 << 20


def _rows(trace) -> list[tuple[str, float, int, float]]:
    """(op, size in MiB, group size, calls per iteration) of every task in the trace's summary."""
    return [
        (row["op"], row["nbytes"] / MiB, row["nranks"], row["count_per_iteration"])
        for row in summarize(trace)["tasks"]
    ]


def _find(rows, op: str, mib: float, nranks: int) -> list[float]:
    return [count for o, size, n, count in rows if o == op and round(size) == mib and n == nranks]


# ---- the AutoCCL paper's Table 1 ---------------------------------------------------------


def test_phi2_matches_table1():
    """Phi-2 TP8×DP4: AllGather 80 MB ×3,120 and ReduceScatter 80 MB ×2,064 in 8s, AllReduce 632 MB ×1 in 4s."""
    rows = _rows(generate(workload("autoccl-phi2")))
    assert _find(rows, "allgather", 80, 8) == [3120]
    assert _find(rows, "reducescatter", 80, 8) == [2064]
    assert _find(rows, "allreduce", 632, 4) == [1]
    assert all(size == 80 for op, size, n, _ in rows if op in ("allgather", "reducescatter"))


def test_llama8b_matches_table1_tensor_parallel_rows():
    rows = _rows(generate(workload("autoccl-llama8b")))
    assert _find(rows, "allgather", 128, 8) == [6240]
    assert _find(rows, "reducescatter", 128, 8) == [4128]
    # the distributed optimizer: one fp32 gradient reduce-scatter, one bf16 parameter all-gather, in 4s
    dp = {op: (size, count) for op, size, n, count in rows if n == 4}
    assert dp["reducescatter"][1] == dp["allgather"][1] == 1
    assert dp["reducescatter"][0] == pytest.approx(2 * dp["allgather"][0])


def test_yi34b_matches_the_papers_counts_on_the_first_stage():
    """56 MB in groups of 8: 93,184 and 61,440 calls per iteration (TP8×PP4, 1,024 micro-batches)."""
    trace = generate(workload("autoccl-yi34b"), ranks=[0])
    # rank 0 alone is in the trace, so its calls are what Trace.tasks() counts; counted directly
    # here because building a Task for each of its 160,000 collectives doubles the test's time
    calls = Counter((e.op.value, e.nbytes / MiB, e.group, e.peer) for _, e in trace.collectives())
    assert trace.group("tp:0").ranks == tuple(range(8))
    assert calls[("allgather", 56, "tp:0", None)] == 93184
    assert calls[("reducescatter", 56, "tp:0", None)] == 61440
    # activations to stage 1 (rank 8) and their gradients back: 56 MiB / 8 with sequence parallelism
    assert calls[("sendrecv", 7, "pp:0", 8)] == 2048


def test_vgg19_has_six_ddp_buckets_of_15_to_392_mb():
    trace = generate(workload("autoccl-vgg19"))
    rows = _rows(trace)
    assert {n for _, _, n, _ in rows} == {32}
    sizes = sorted(size for op, size, n, count in rows for _ in range(int(count)))
    assert [round(s, 1) for s in sizes] == [15.6, 22.4, 27.0, 27.0, 64.0, 392.0]
    assert trace.metadata["model"]["params"] == 143_667_240  # torchvision's vgg19


# ---- structure ---------------------------------------------------------------------------


def _tiny(**plan) -> Workload:
    model = Transformer(
        "tiny", layers=4, hidden=64, ffn=256, heads=4, kv_heads=2, vocab=1000, seq_len=32, tied_embeddings=True
    )
    return Workload("tiny", model, Parallelism(**plan))


PLANS = [
    {"dp": 2, "tp": 2, "pp": 2, "micro_batches": 3, "sequence_parallel": True},
    {"dp": 2, "tp": 2, "pp": 2, "cp": 2, "zero": 1, "micro_batches": 4, "sequence_parallel": True,
     "grad_bucket_bytes": 20_000},
    {"dp": 2, "zero": 2, "micro_batches": 2, "grad_bucket_bytes": 10_000},
    {"dp": 4, "tp": 2, "zero": 3, "micro_batches": 2, "recompute": "full"},
    {"tp": 4, "pp": 2, "schedule": "gpipe", "micro_batches": 4},
]


@pytest.mark.parametrize("plan", PLANS)
def test_every_rank_agrees_and_flops_add_up(plan):
    work = _tiny(**plan)
    trace = generate(work, iterations=2, ranks="all")
    trace.validate()  # every member issues the same collectives on every group, in the same order
    flops = sum(e.flops for r in trace.ranks for e in r.events if isinstance(e, ComputeEvent) and e.name != "optimizer")
    assert flops == pytest.approx(2 * job_flops(work), rel=1e-9)
    assert trace.iterations == 2


@pytest.mark.parametrize("plan", PLANS)
def test_representative_ranks_issue_what_the_full_job_issues(plan):
    work = _tiny(**plan)
    full = {r.rank: r for r in generate(work, ranks="all").ranks}
    picked = generate(work)
    assert [r.rank for r in picked.ranks] == Layout(work.parallelism).representatives()
    for rank in picked.ranks:
        assert rank == full[rank.rank]
    for group in picked.groups:
        assert len(group.ranks) == {"tp": work.parallelism.tp, "pp": work.parallelism.pp, "cp": work.parallelism.cp,
                                    "dp": work.parallelism.dp, "dp-cp": work.parallelism.dp * work.parallelism.cp,
                                    "embedding": 2}[group.name]


def test_training_flops_are_six_params_tokens_plus_attention():
    for name in ("autoccl-phi2", "autoccl-llama8b", "autoccl-yi34b", "llama3-405b-16k"):
        work = workload(name)
        model, plan = work.model, work.parallelism
        tokens = plan.dp * plan.micro_batches * plan.micro_batch_size * model.seq_len
        six_pt = 6 * model.params() * tokens
        attention = 12 * model.layers * model.seq_len * model.hidden * tokens
        assert job_flops(work) == pytest.approx(six_pt + attention, rel=0.07), name
        assert 1.0 < job_flops(work) / six_pt < 1.35, name


def test_phi2_rank_flops_times_ranks_is_the_job():
    work = workload("autoccl-phi2")
    trace = generate(work)
    flops = sum(e.flops for e in trace.ranks[0].events if isinstance(e, ComputeEvent) and e.name != "optimizer")
    assert flops * work.parallelism.world_size == pytest.approx(job_flops(work), rel=1e-9)


@given(
    tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2]), dp=st.integers(1, 5), pp=st.integers(1, 4),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_layout_is_megatron_order(tp, cp, dp, pp, data):
    plan = Parallelism(tp=tp, cp=cp, dp=dp, pp=pp)
    layout = Layout(plan)
    rank = data.draw(st.integers(0, plan.world_size - 1))
    at = layout.coordinates(rank)
    assert layout.rank(at.tp, at.cp, at.dp, at.pp) == rank
    tp_group = layout.tp_group(rank).ranks
    assert tp_group == tuple(range(rank - at.tp, rank - at.tp + tp))  # TP innermost: consecutive ranks
    grad = layout.grad_group(rank)
    assert len(grad.ranks) == dp * cp and set(layout.cp_group(rank).ranks) <= set(grad.ranks)
    dp_ranks = tuple(layout.rank(at.tp, at.cp, d, at.pp) for d in range(dp))
    assert grad.ranks == dp_ranks if cp == 1 else set(dp_ranks) <= set(grad.ranks)
    assert all(b - a == tp * cp for a, b in itertools.pairwise(dp_ranks))
    pp_ranks = layout.pp_group(rank).ranks
    assert all(b - a == tp * cp * dp for a, b in itertools.pairwise(pp_ranks))
    assert rank in tp_group and rank in dp_ranks and rank in pp_ranks


@given(stages=st.integers(1, 8), micro_batches=st.integers(1, 12), data=st.data())
def test_pipeline_schedules_run_each_micro_batch_forward_then_backward(stages, micro_batches, data):
    stage = data.draw(st.integers(0, stages - 1))
    for schedule in PipelineSchedule:
        order = pipeline_order(schedule, stages, stage, micro_batches)
        assert sorted(order) == sorted([(kind, j) for kind in "FB" for j in range(micro_batches)])
        assert all(order.index(("F", j)) < order.index(("B", j)) for j in range(micro_batches))
        if schedule is PipelineSchedule.ONE_F_ONE_B:  # at most stages - stage micro-batches in flight
            in_flight = peak = 0
            for kind, _ in order:
                in_flight += 1 if kind == "F" else -1
                peak = max(peak, in_flight)
            assert peak <= stages - stage


def test_gradient_buckets_overlap_the_backward():
    """Each DDP bucket waits for the backward of its last layer and is issued before the earlier layers' backward."""
    events = generate(workload("autoccl-vgg19")).ranks[0].events
    by_id = {e.id: e for e in events}
    buckets = [e for e in events if isinstance(e, CollectiveEvent)]
    assert len(buckets) == 6
    for bucket in buckets:
        (ready,) = bucket.after
        assert by_id[ready].name.endswith(".bwd")
    assert [by_id[b.after[0]].name for b in buckets][:3] == ["fc3.bwd", "fc2.bwd", "fc1.bwd"]
    later = [e for e in events if e.id > buckets[0].id and isinstance(e, ComputeEvent) and e.name.endswith(".bwd")]
    assert later, "backward continues after the first bucket is issued"
    optimizer = next(e for e in events if getattr(e, "name", "") == "optimizer")
    assert {b.id for b in buckets} <= set(optimizer.after)


def test_sequence_parallel_gather_feeds_the_compute_that_needs_it():
    events = generate(_tiny(tp=2, sequence_parallel=True)).ranks[0].events
    by_id = {e.id: e for e in events}
    attn = next(e for e in events if isinstance(e, ComputeEvent) and e.name == "L0.attn.qkv")
    (gather,) = [by_id[i] for i in attn.after]
    assert gather.op is Op.ALLGATHER and gather.group == "tp:0" and gather.stream == "tp"


def test_next_iteration_waits_for_the_parameter_all_gather():
    work = workload("autoccl-llama8b", overrides={"micro_batches": 1})
    events = generate(work, iterations=2).ranks[0].events
    first = next(e for e in events if e.iteration == 1)
    gathers = [e for e in events if e.iteration == 0 and (e.name or "").startswith("dp-params")]
    assert gathers and {g.id for g in gathers} <= set(first.after)


def test_405b_on_16k_gpus_keeps_one_rank_per_stage_with_full_groups():
    trace = generate(workload("llama3-405b-16k", overrides={"micro_batches": 2}))
    assert trace.world_size == 16384
    assert [r.rank for r in trace.ranks] == [stage * 1024 for stage in range(16)]
    sizes = Counter((g.name, len(g.ranks)) for g in trace.groups)
    assert sizes == {("tp", 8): 16, ("dp", 128): 16, ("pp", 16): 1}
    assert trace.metadata["ranks"] == "representative"
    layers = Counter(e.name.split(".")[0] for r in trace.ranks[:2] for e in r.events if e.name.endswith(".attn.qkv"))
    assert len([k for k in layers if k.startswith("L")]) == 7 + 8  # 7 layers on stage 0, 8 on stage 1
    trace.validate()


def test_context_parallel_gathers_keys_and_values():
    trace = generate(workload("llama3-405b-cp16", overrides={"micro_batches": 1}))
    rows = _rows(trace)
    kv = 131072 * 2 * 1 * 128 * 2 / MiB  # whole sequence × K and V × 1 KV head per TP rank × head dim × bf16
    assert [n for op, size, n, _ in rows if op == "allgather" and size == kv] == [16] * 16


def test_more_events_than_a_trace_should_hold_are_refused():
    with pytest.raises(WorkloadError, match="events"):
        generate(workload("autoccl-yi34b"), ranks="all")


# ---- plan and workload files -------------------------------------------------------------


def _write(tmp_path: Path, plan: dict, model: str | dict = "phi-2") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({"name": "job", "model": model, "plan": plan}))
    return path


@given(
    tp=st.integers(1, 40), dp=st.integers(1, 8), pp=st.integers(1, 8), world=st.integers(1, 300) | st.none()
)
@settings(max_examples=80, deadline=None)
def test_plan_loader_accepts_exactly_the_plans_that_fit(tmp_path_factory, tp, dp, pp, world):
    path = _write(tmp_path_factory.mktemp("p"), {"tp": tp, "dp": dp, "pp": pp, "world_size": world})
    fits = world in (None, tp * dp * pp) and 32 % tp == 0 and 10240 % tp == 0 and 32 % pp == 0
    if fits:
        assert load_workload(path).parallelism.world_size == tp * dp * pp
        return
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    message = str(caught.value)
    assert message.startswith(str(path))
    field = "plan.world_size" if world not in (None, tp * dp * pp) else ("plan.tp" if 32 % tp else "plan.pp")
    assert field in message


@pytest.mark.parametrize(
    ("plan", "model", "expected"),
    [
        ({"tp": 3}, "phi-2", "plan.tp: 3 does not divide model.heads (32)"),
        ({"tp": 8, "dp": 4, "world_size": 16}, "phi-2", "plan.world_size: 16 GPUs, but dp·tp·pp·cp = 4·8·1·1 = 32"),
        ({"tp": 16}, "llama-3.1-8b", "plan.tp: 16 does not divide model.kv_heads (8)"),
        ({"tpp": 2}, "phi-2", "plan.tpp: unknown field"),
        ({"tp": "eight"}, "phi-2", "plan.tp: must be an integer"),
        ({"zero": 4}, "phi-2", "plan.zero: 4 is not one of 0, 1, 2, 3"),
        ({"tp": 2}, "vgg19", "plan.tp: a CNN is trained with data parallelism only"),
        ({"schedule": "zigzag"}, "phi-2", "plan.schedule: 'zigzag' is not one of 1f1b, gpipe"),
        ({"pp": 4, "first_stage_layers": 3}, "phi-2", "plan.first_stage_layers: 3 first"),
        ({"zero": 1}, "phi-2", "plan.zero: ZeRO shards over data parallelism"),
        ({}, {"kind": "transformer", "name": "x", "layers": 2, "hidden": 30, "ffn": 8, "heads": 4, "vocab": 10,
              "seq_len": 8}, "model.heads: 4 does not divide model.hidden (30)"),
        ({}, "no-such-model", "unknown model 'no-such-model'"),
    ],
)
def test_bad_plans_are_named_by_file_and_field(tmp_path, plan, model, expected):
    path = _write(tmp_path, plan, model)
    with pytest.raises(WorkloadError, match=None) as caught:
        load_workload(path)
    assert expected in str(caught.value)


def test_unreadable_workload_files_say_why(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("plan: [unclosed")
    with pytest.raises(WorkloadError, match=r"broken\.yaml: YAML syntax error at line 1, column 16"):
        load_workload(path)
    for content, problem in ((b"tp: 8\ntp: 4\n", "key 'tp' given twice"), (b"tp: \xf6\n", "not UTF-8 text"),
                             (b"a:\n" + b"".join(b" " * i + b"- \n" for i in range(1, 3000)), "nested more than"),
                             ("tp: 8".encode("utf-16"), "UTF-16 text")):
        path.write_bytes(content)
        with pytest.raises(WorkloadError, match=rf"^{path}: [^\n]*{problem}[^\n]*$"):
            load_workload(path)
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(WorkloadError, match=r"deep\.json: not valid JSON"):
        load_workload(path)
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "missing.yaml")


def test_every_preset_loads_and_generates():
    for name in list_presets():
        assert workload(name).parallelism.world_size >= 32
        work = workload(name, overrides={"micro_batches": 1})  # the structure, not the full iteration
        trace = generate(work)
        assert trace.tasks() and trace.metadata["workload"] == name


# ---- bundled examples and the CLI --------------------------------------------------------


@pytest.mark.parametrize("name", examples.names())
def test_bundled_examples_are_what_the_generator_makes(name):
    path = examples.path(name)
    assert path.stat().st_size < 1 << 20
    assert load_trace(path) == examples.regenerate(name)


def test_default_example_exists_and_unknown_names_are_refused():
    assert examples.path(examples.DEFAULT).exists()
    with pytest.raises(ValueError, match="unknown example trace 'nope'"):
        examples.path("nope")


def test_cli_generate_writes_a_trace(tmp_path):
    out = tmp_path / "phi2.json.gz"
    result = CliRunner().invoke(
        app, ["trace", "generate", "--preset", "autoccl-phi2", "-o", str(out), "--iterations", "2",
              "--set", "micro_batches=2"]
    )
    assert result.exit_code == 0, result.output
    trace = load_trace(out)
    assert trace.iterations == 2 and trace.metadata["plan"]["micro_batches"] == 2
    assert _find(_rows(trace), "allgather", 80, 8) == [195 * 2]


def test_cli_generate_from_model_and_plan_file(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("tp: 8\ndp: 2\nsequence_parallel: true\nmicro_batches: 2\n")
    out = tmp_path / "job.json"
    command = ["trace", "generate", "--model", "llama-3.1-8b", "--plan", str(plan), "-o", str(out)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert load_trace(out).world_size == 16


def test_cli_generate_reports_a_bad_plan_and_writes_nothing(tmp_path):
    out = tmp_path / "x.json"
    command = ["trace", "generate", "--preset", "autoccl-phi2", "-o", str(out)]
    command += ["--set", "tp=3", "--set", "world_size=12"]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2
    assert "plan.tp: 3 does not divide model.heads (32)" in result.output
    assert not out.exists()


def test_cli_changing_a_degree_changes_the_world_size(tmp_path):
    out = tmp_path / "phi2-dp2.json"
    command = ["trace", "generate", "--preset", "autoccl-phi2", "-o", str(out), "--set", "dp=2"]
    result = CliRunner().invoke(app, [*command, "--set", "micro_batches=1"])
    assert result.exit_code == 0, result.output
    assert load_trace(out).world_size == 16 and "world size 16" in result.output


def test_cli_lists_presets():
    result = CliRunner().invoke(app, ["trace", "presets"])
    assert result.exit_code == 0
    assert all(name in result.output for name in list_presets())
    assert examples.DEFAULT in result.output


def test_docstring_examples_run():
    """The examples in the generator's docstrings hold (Table 1 in the package docstring, VGG19's parameters...)."""
    import doctest

    import traces.generate as package
    from traces.generate import buckets, model, parallelism, pipeline

    for module in (package, buckets, model, parallelism, pipeline):
        failed, tried = doctest.testmod(module)
        assert tried and not failed, module.__name__
