"""``ccltwin whatif``: the CLI contract, the JSON report, clusters side by side, bad inputs."""

from __future__ import annotations

import json

import pytest
from test_replay import TraceBuilder
from typer.testing import CliRunner

from ccltwin import app
from traces.examples import default_trace
from traces.task import Op
from traces.trace_file import load_trace, save_trace
from tuner.config import Transport
from tuner.space import CHANNEL_FIELD_MAX
from twin.rank import call_cost, rank_task
from twin.replay import Communicators, replay
from twin.topology import load_cluster
from twin.whatif import PRICE_PER_GPU_HOUR, tuned_config, tuned_configs

runner = CliRunner()


def data_parallel_trace(layers: int = 3) -> TraceBuilder:
    """8 data-parallel ranks on one node: each layer's backward (FLOPs, so it retimes on any GPU),
    then its gradient all-reduce, which overlaps the next layer's backward."""
    b = TraceBuilder(8, {"dp": tuple(range(8))}, {"tokens_per_iteration": 32768, "gpu": "H100-SXM5-80GB"},
                     gpus_per_node=8)
    for rank in range(8):
        last = b.compute(rank, flops=4e12, mem_bytes=2_000_000_000)
        for _ in range(layers):
            b.call(rank, Op.ALLREDUCE, 128 << 20, "dp", after=[last])
            last = b.compute(rank, flops=4e12, mem_bytes=2_000_000_000, after=[last])
        b.call(rank, Op.ALLREDUCE, 1 << 16, "dp", after=[last])
    return b


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("whatif") / "dp8.json"
    save_trace(data_parallel_trace().trace(), path)
    return path


@pytest.fixture(scope="module")
def report(trace_file):
    result = runner.invoke(app, ["whatif", "--trace", str(trace_file), "--topology", "dgx-a100",
                                 "--topology", "l40s-pcie", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_report_has_the_contract_fields(report):
    assert report["predicted"] is True
    assert report["trace"] | {"name": "dp8"} == report["trace"]
    assert report["trace"]["world_size"] == 8 and report["trace"]["tokens_per_iteration"] == 32768
    assert [c["label"] for c in report["clusters"]] == ["dgx-a100 x1", "l40s-pcie x1"]
    for cluster in report["clusters"]:
        assert cluster["gpus"] == 8
        for run in ("default", "tuned"):
            summary = cluster[run]
            assert {"iteration_us", "compute_us", "comm_us", "exposed_comm_us", "comm_share", "exposed_share",
                    "cost"} <= set(summary)
            assert 0 < summary["comm_share"] <= 1 and 0 <= summary["exposed_share"] <= summary["comm_share"]
            assert summary["exposed_comm_us"] <= summary["comm_us"] <= summary["iteration_us"]
        assert cluster["speedup"] == pytest.approx(
            cluster["default"]["iteration_us"] / cluster["tuned"]["iteration_us"], rel=1e-3)
        ops = sorted((t["op"], t["nbytes"]) for t in cluster["tasks"])
        assert ops == [("allreduce", 1 << 16), ("allreduce", 128 << 20)]
        for task in cluster["tasks"]:
            assert task["group"] == "8x1" and task["nranks"] == 8
            assert task["calls_per_iteration"] in (1, 3)
            for run in ("default", "tuned"):
                assert {"algo", "proto", "transport", "nchannels", "nthreads", "chunk_bytes"} == set(
                    task[run]["config"])
                assert task[run]["busbw_gbps"] > 0


def test_the_faster_cluster_is_predicted_faster(report):
    a100, l40s = report["clusters"]
    assert a100["default"]["iteration_us"] < l40s["default"]["iteration_us"]
    big = {c["label"]: next(t for t in c["tasks"] if t["nbytes"] == 128 << 20) for c in report["clusters"]}
    assert big["dgx-a100 x1"]["default"]["busbw_gbps"] > 5 * big["l40s-pcie x1"]["default"]["busbw_gbps"]
    # PCIe all-reduces hide less behind compute: a larger share of the L40S's iteration is exposed.
    assert l40s["default"]["exposed_share"] > a100["default"]["exposed_share"]


def test_tuned_configurations_never_cost_more_than_nccls_default(report):
    for cluster in report["clusters"]:
        assert cluster["tuned"]["iteration_us"] <= cluster["default"]["iteration_us"] * 1.01
        for task in cluster["tasks"]:
            if task["tuned"]["chosen_by"] == "given":
                assert task["tuned"]["config"] != task["default"]["config"]


def test_the_tuned_search_is_the_warm_start_ranking_weighed_by_what_compute_hides():
    trace = data_parallel_trace().trace()
    cluster = load_cluster("dgx-a100")
    comms = Communicators(trace, cluster)
    default = replay(trace, cluster, comms=comms)
    big = next(t for t in default.tasks if t.task.nbytes == 128 << 20)
    comm = comms.task_comms()[big.task]
    ranked = rank_task(comm, big.task, transports=(Transport.P2P,), max_channels=CHANNEL_FIELD_MAX)
    exposed = tuned_config(comm, big.task)  # nothing hidden: the plan's fastest, unless it is NCCL's default
    assert exposed == (None if ranked.best.config == ranked.default.config else ranked.best.config)
    hidden = tuned_config(comm, big.task, hidden_us=1e9)  # all hidden: its SMs are what a call costs
    sms = cluster.gpu.sm_count
    assert hidden.nchannels < exposed.nchannels
    assert (call_cost(comms.schedule(comm.members, big.task, hidden).time_us(), hidden.nchannels, 1e9, sms)
            < call_cost(ranked.default.time_us, ranked.default.config.nchannels, 1e9, sms))
    configs = tuned_configs(comms, default)
    assert all(configs[t.task] != t.config for t in default.tasks if t.task in configs)


def test_cost_follows_the_price_and_the_tokens(report):
    for cluster in report["clusters"]:
        price = PRICE_PER_GPU_HOUR[cluster["gpu"]]
        assert cluster["price_per_gpu_hour"] == price
        cost = cluster["tuned"]["cost"]
        per_iteration = 8 * price * cluster["tuned"]["iteration_us"] / 3.6e9
        assert cost["usd_per_iteration"] == pytest.approx(per_iteration, rel=1e-3)
        assert cost["usd_per_million_tokens"] == pytest.approx(per_iteration / 32768 * 1e6, rel=1e-3)


def test_text_table_and_markdown_report(trace_file, tmp_path):
    out = tmp_path / "report.md"
    result = runner.invoke(app, ["whatif", "--trace", str(trace_file), "--topology", "l40s-pcie", "--no-tuned",
                                 "--price-per-gpu-hour", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# ccltwin whatif: dp8 (test): 8 ranks, 8 in the trace")
    assert "predicted, not measured" in lines[0]
    row = next(line for line in lines if line.startswith("l40s-pcie x1"))
    assert "8 x L40S" in row and " 2 " in row
    markdown = out.read_text()
    assert markdown.startswith("# What-if report: dp8")
    assert "| cluster | GPUs |" in markdown and "## l40s-pcie x1" in markdown


def test_no_tuned_leaves_the_tuned_fields_empty(trace_file):
    result = runner.invoke(app, ["whatif", "--trace", str(trace_file), "--topology", "dgx-a100", "--no-tuned",
                                 "--json"])
    assert result.exit_code == 0, result.output
    [cluster] = json.loads(result.stdout)["clusters"]
    assert cluster["tuned"] is None and cluster["speedup"] is None
    assert all(t["tuned"] is None for t in cluster["tasks"])


def test_a_bad_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ccltwin-trace", "version": 1, "world_size": 2, "groups": [], "ranks": [')
    result = runner.invoke(app, ["whatif", "--trace", str(bad), "--topology", "dgx-a100"])
    assert result.exit_code == 2
    assert "error:" in result.stderr and "bad.json" in result.stderr and "not a readable trace" in result.stderr


def test_too_few_nodes_unknown_presets_and_report_formats_are_refused(trace_file, tmp_path):
    wide = TraceBuilder(16, {"all": tuple(range(16))})
    for rank in range(16):
        wide.call(rank, Op.ALLREDUCE, 1 << 20, "all")
    save_trace(wide.trace(), tmp_path / "wide.json")
    small = runner.invoke(app, ["whatif", "--trace", str(tmp_path / "wide.json"), "--topology", "dgx-a100",
                                "--nodes", "1"])
    assert small.exit_code == 2 and "needs 16 GPUs; dgx-a100 has 8" in small.stderr
    unknown = runner.invoke(app, ["whatif", "--trace", str(trace_file), "--topology", "dgx-z9000"])
    assert unknown.exit_code == 2 and "dgx-z9000" in unknown.stderr
    html = runner.invoke(app, ["whatif", "--trace", str(trace_file), "-o", str(tmp_path / "r.html")])
    assert html.exit_code == 2 and ".md" in html.stderr and not (tmp_path / "r.html").exists()
    mismatch = runner.invoke(app, ["whatif", "--trace", str(trace_file), "--topology", "dgx-a100", "--topology",
                                   "dgx-a100", "--nodes", "1", "--nodes", "2", "--nodes", "3"])
    assert mismatch.exit_code == 2 and "--nodes" in mismatch.stderr


def test_without_arguments_it_runs_on_a_bundled_example():
    path, name = default_trace()
    trace = load_trace(path)
    assert name in path.name and trace.world_size >= 8 and trace.tasks()
