"""``ccltwin predict`` on real presets: the JSON contract, the breakdown's sums, whatif using the
same prediction, and every kind of bad input refused on one line with exit status 2."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from ccltwin import app
from traces.generate import generate
from traces.generate.gpt import gpt_workload
from traces.schema import CollectiveEvent, ComputeEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op
from traces.trace_file import save_trace

runner = CliRunner()

GPT = ["--model", "gpt", "--hidden", "512", "--heads", "8", "--layers", "4", "--seq", "256"]
"""A small GPT whose iteration replays in about a second."""


def _predict(*args: str) -> dict:
    result = runner.invoke(app, ["predict", "--topology", "dgx-a100", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _refused(*args: str) -> str:
    result = runner.invoke(app, ["predict", "--topology", "dgx-a100", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def pipelined():
    return _predict(*GPT, "--tp", "2", "--pp", "2", "--micro-batch", "2", "--global-batch", "8")


def test_json_has_the_contract_keys_and_the_breakdown_adds_up(pipelined):
    doc = pipelined
    assert {"iteration_ms", "compute_ms", "exposed_comm_ms", "host_wait_ms", "bubble_ms", "comm_ms_by_op"} <= set(doc)
    assert doc["iteration_ms"] == pytest.approx(doc["compute_ms"] + doc["exposed_comm_ms"] + doc["host_wait_ms"]
                                                + doc["bubble_ms"], abs=1e-3)
    assert doc["compute_ms"] > 0 and doc["bubble_ms"] > 0  # two stages, four micro-batches: a bubble
    assert set(doc["comm_ms_by_op"]) == {"allreduce", "allgather", "sendrecv"}  # TP, pipeline split + gather
    assert set(doc["exposed_comm_ms_by_group"]) <= {"tp", "pp", "embedding"}
    assert sum(doc["exposed_comm_ms_by_op"].values()) == pytest.approx(doc["exposed_comm_ms"], rel=1e-3)
    tuned = doc["tuned"]
    assert tuned is not None and tuned["iteration_ms"] <= doc["iteration_ms"]
    assert doc["speedup"] == pytest.approx(doc["iteration_ms"] / tuned["iteration_ms"], rel=1e-3)


def test_a_job_smaller_than_a_node_is_placed_and_priced_on_its_gpus(pipelined):
    assert pipelined["gpus"] == 4 and pipelined["cluster"] == "dgx-a100:4x1"
    two = _predict(*GPT, "--tp", "2", "--no-tuned")
    assert two["gpus"] == 2 and two["cluster"] == "dgx-a100:2x1" and two["tuned"] is None


def test_one_stage_has_no_bubble_and_more_micro_batches_take_longer():
    """A small model on one stage waits for its host (Python, autograd, launches), never for a peer stage."""
    one = _predict(*GPT, "--tp", "2", "--micro-batch", "2", "--global-batch", "4", "--no-tuned")
    two = _predict(*GPT, "--tp", "2", "--micro-batch", "2", "--global-batch", "8", "--no-tuned")
    assert one["bubble_ms"] < 0.02 * one["iteration_ms"]
    assert one["host_wait_ms"] > 0.1 * one["iteration_ms"]
    assert 1.6 < two["compute_ms"] / one["compute_ms"] < 2.1
    assert 1.6 < two["iteration_ms"] / one["iteration_ms"] < 2.1


def test_text_output_names_every_part():
    result = runner.invoke(app, ["predict", "--topology", "dgx-h100", *GPT, "--tp", "4", "--pp", "2",
                                 "--micro-batch", "1", "--global-batch", "4", "--sequence-parallel"])
    assert result.exit_code == 0, result.output
    for words in ("iteration", "compute", "exposed comm", "host wait", "pipeline bubble", "## NCCL default", "## tuned",
                  "reducescatter", "group tp", "dgx-h100:8x1"):
        assert words in result.stdout, words


def test_whatif_reports_the_same_prediction(tmp_path):
    path = tmp_path / "gpt.json"
    save_trace(generate(gpt_workload(hidden=512, heads=8, layers=4, seq=256, tp=2, dp=4, micro_batch=2,
                                     global_batch=16)), path)
    predicted = _predict("--trace", str(path), "--no-tuned")
    result = runner.invoke(app, ["whatif", "--trace", str(path), "--topology", "dgx-a100", "--no-tuned", "--json"])
    assert result.exit_code == 0, result.output
    (cluster,) = json.loads(result.stdout)["clusters"]
    breakdown = cluster["breakdown"]["default"]
    assert breakdown["iteration_ms"] == predicted["iteration_ms"]
    assert breakdown["exposed_comm_ms_by_op"] == predicted["exposed_comm_ms_by_op"]
    assert "allreduce" in breakdown["comm_ms_by_op"]  # the data-parallel gradients and TP
    text = runner.invoke(app, ["whatif", "--trace", str(path), "--topology", "dgx-a100", "--no-tuned"]).stdout
    assert f"## dgx-a100:8x1: iteration {predicted['iteration_ms']:,.2f} ms = compute " in text


def test_a_warm_start_plan_is_the_tuned_run(tmp_path):
    path, plan = tmp_path / "gpt.json", tmp_path / "plan.json"
    save_trace(generate(gpt_workload(hidden=512, heads=8, layers=2, seq=256, tp=4, micro_batch=2)), path)
    made = runner.invoke(app, ["rank", "--trace", str(path), "--topology", "dgx-a100", "-o", str(plan)])
    assert made.exit_code == 0, made.output
    doc = _predict("--trace", str(path), "--plan", str(plan))
    assert doc["tuned"] is not None and doc["tuned"]["iteration_ms"] > 0


# ---- bad input ---------------------------------------------------------------------------


def test_a_plan_that_does_not_divide_the_model_is_refused():
    assert "plan.tp: 3 does not divide model.heads (8)" in _refused(*GPT, "--tp", "3")
    assert "does not divide model.layers (4)" in _refused(*GPT, "--pp", "3")
    line = _refused(*GPT, "--pp", "2", "--vpp", "4", "--global-batch", "2")
    assert "pp·virtual_stages = 2·4 does not divide model.layers (4)" in line
    line = _refused(*GPT, "--dp", "4", "--micro-batch", "2", "--global-batch", "10")
    assert "--global-batch 10 is not a multiple of --micro-batch × --dp = 2 × 4 = 8" in line
    assert "needs a multiple of pp = 2" in _refused(*GPT, "--pp", "2", "--vpp", "2", "--global-batch", "3")


def test_a_cluster_with_fewer_gpus_than_the_plan_is_refused():
    line = _refused(*GPT, "--tp", "8", "--dp", "2", "--nodes", "1")
    assert "the plan needs 16 GPUs (tp 8 × dp 2); dgx-a100:8x1 has 8" in line and "at least 2 nodes" in line


def test_a_trace_with_ranks_missing_is_refused(tmp_path):
    trace = generate(gpt_workload(hidden=512, heads=8, layers=2, seq=256, tp=2, dp=2), ranks="all")
    partial = replace(trace, ranks=trace.ranks[:3], metadata={})
    path = tmp_path / "partial.json"
    save_trace(partial, path)
    assert "holds 3 of its 4 ranks; rank(s) 3 are missing" in _refused("--trace", str(path))


def _two_ranks(events0: tuple, events1: tuple) -> Trace:
    groups = (ProcessGroup("a", (0, 1), "dp"), ProcessGroup("b", (0, 1), "dp"))
    return Trace(2, groups, (RankTrace(0, events0), RankTrace(1, events1)))


def test_dependencies_that_form_a_cycle_are_refused(tmp_path):
    def call(i: int, group: str, *after: int) -> CollectiveEvent:
        return CollectiveEvent(id=i, op=Op.ALLREDUCE, nbytes=1 << 20, group=group, dtype="float32", after=after,
                               stream=f"s{group}")

    # rank 0 reduces on a and then on b (b waits for a); rank 1 on b and then on a: neither call can start
    crossed = _two_ranks((call(0, "a"), call(1, "b", 0)), (call(0, "b"), call(1, "a", 0)))
    path = tmp_path / "crossed.json"
    save_trace(crossed, path)
    assert "waits forever" in _refused("--trace", str(path), "--no-tuned")
    # one rank whose compute and collective wait for each other (written by hand: save_trace refuses it)
    save_trace(_two_ranks((ComputeEvent(id=0, name="x", flops=1e9), call(1, "a", 0)), (call(0, "a"),)), path)
    doc = json.loads(path.read_text())
    doc["ranks"][0]["events"][0]["after"] = [1]
    path.write_text(json.dumps(doc))
    assert "'after' names [1]" in _refused("--trace", str(path))


def test_the_job_is_a_trace_or_a_model_and_versions_are_checked(tmp_path):
    assert "not both" in _refused(*GPT, "--trace", str(tmp_path / "x.json"))
    assert "--model gpt needs --layers" in _refused("--model", "gpt", "--hidden", "512", "--heads", "8",
                                                   "--seq", "256")
    assert "--model llama: expected one of gpt" in _refused("--model", "llama")
    assert "expected MAJOR.MINOR.PATCH" in _refused(*GPT, "--nccl-version", "2.x")
    assert "supported releases are 2.8.3 to 2.30.7" in _refused(*GPT, "--nccl-version", "1.0.0")


def test_the_whatif_html_report_stacks_the_same_breakdown(tmp_path):
    from dashboards.figures.whatif import split_figure
    from twin.whatif import Candidate, what_if

    trace = generate(gpt_workload(hidden=512, heads=8, layers=2, seq=256, tp=2, pp=2, micro_batch=2,
                                  global_batch=4))
    report = what_if(trace, [Candidate("dgx-a100")], tuned=False)
    compute, exposed, host, bubble = split_figure(report).data
    split = report.clusters[0].breakdown
    assert list(compute.y) == [split.compute_ms] and list(bubble.y) == [split.bubble_ms]
    assert list(host.y) == [split.host_wait_ms] and host.name == "GPU waiting for its host"
    assert compute.y[0] + exposed.y[0] + host.y[0] + bubble.y[0] == pytest.approx(split.iteration_ms)
