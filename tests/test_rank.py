"""Twin pre-ranking: warm-start plans for real and generated traces, per-process settings, the CLI."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccltwin import app
from traces import read_chakra, read_flight_recorder
from traces.generate import generate, workload
from traces.task import Op, Task
from traces.trace_file import save_trace
from tuner.plan import load_plan, save_plan
from tuner.space import ConfigSpace
from twin.predict import Twin
from twin.rank import comm_facts, rank_tasks, rank_trace
from twin.topology import load_cluster

ROOT = Path(__file__).resolve().parents[1]
RESNET = ROOT.parent / "shared" / "data" / "traces" / "param" / "resnet_2gpu_et.json.gz"
FLIGHT_RECORDER = sorted((ROOT / "tests" / "data" / "traces" / "flight-recorder").glob("*.json"))
runner = CliRunner()


@pytest.fixture(scope="module")
def resnet_ranking():
    trace = read_chakra([RESNET])
    return trace, rank_trace(trace, load_cluster("l40s-pcie"))


@pytest.fixture(scope="module")
def phi2_small():
    """Phi-2 from the AutoCCL preset, shrunk to TP2 x DP2 on two nodes of two GPUs."""
    trace = generate(workload("autoccl-phi2", overrides={"world_size": 4, "tp": 2, "dp": 2, "gpus_per_node": 2,
                                                          "micro_batches": 2}))
    return trace, rank_trace(trace, load_cluster("a40-nvlink-pairs", gpus_per_node=2))


def test_every_task_of_a_real_trace_gets_an_ordered_entry_no_slower_than_the_default(resnet_ranking):
    trace, ranking = resnet_ranking
    plan = ranking.plan
    assert {e.task: e.calls_per_iteration for e in plan.entries} == trace.tasks()
    twin = Twin(load_cluster("l40s-pcie").subset(nodes=1, gpus_per_node=2))
    for entry in plan.entries:
        times = [r.time_us for r in entry.ranked]
        assert times == sorted(times)
        assert entry.best.time_us <= entry.default.time_us
        assert len({r.subspace for r in entry.ranked}) == len(entry.ranked)
        space = ConfigSpace(entry.task, comm_facts(twin))
        assert {r.subspace for r in entry.ranked} <= set(space.subspaces)
        for r in entry.ranked:
            assert r.config == entry.default.config or space.problems(r.config) == []
        c = entry.best.config
        again = twin.predict(entry.task.op, entry.task.nbytes, algo=c.algo, proto=c.proto, transport=c.transport,
                             nchannels=c.nchannels, nthreads=c.nthreads, chunk_bytes=c.chunk_bytes)
        assert again.time_us == pytest.approx(entry.best.time_us)
        default = twin.predict(entry.task.op, entry.task.nbytes)
        assert (default.config, default.time_us) == (entry.default.config, pytest.approx(entry.default.time_us))
    assert plan.cluster.startswith("l40s-pcie") and plan.nccl_version == "2.28.9"


def test_a_generated_workload_is_placed_as_torchrun_places_ranks(phi2_small, tmp_path):
    trace, ranking = phi2_small
    assert {e.task: e.calls_per_iteration for e in ranking.plan.entries} == trace.tasks()
    assert any("'dp:0' (ranks 0,2)" in n and "1x2" in n for n in ranking.notes)
    assert any("'tp:0' (ranks 0,1)" in n and "2x1" in n for n in ranking.notes)
    path = tmp_path / "plan.json"
    save_plan(ranking.plan, path)
    assert load_plan(path) == ranking.plan
    dp = next(e for e in ranking.plan.entries if e.task.group == "dp:0")
    assert all(r.subspace.transport.value == "p2p" for r in dp.ranked)  # one GPU per node: no transport choice


def test_per_process_settings_never_predict_slower_than_nccls_defaults(phi2_small, resnet_ranking):
    for _, ranking in (phi2_small, resnet_ranking):
        process = ranking.process
        assert process.default_us == pytest.approx(sum(e.calls_per_iteration * e.default.time_us
                                                       for e in ranking.plan.entries))
        assert process.tuned_us <= process.per_call_us <= process.default_us * (1 + 1e-9)
        assert ranking.plan.process == process.settings


def test_one_rank_groups_and_empty_messages_are_left_out_with_a_note():
    tasks = {Task(Op.ALLREDUCE, 1 << 20, 1, group="1x1"): 1.0, Task(Op.ALLREDUCE, 0, 2, group="2x1"): 1.0,
             Task(Op.ALLREDUCE, 1 << 20, 2, group="2x1"): 3.0}
    ranking = rank_tasks(tasks, load_cluster("l40s-pcie"))
    assert [e.task.nranks for e in ranking.plan.entries] == [2]
    assert any("1-rank" in n for n in ranking.notes) and any("empty message" in n for n in ranking.notes)


def test_rank_command_writes_the_plan_and_the_environment(tmp_path):
    trace = tmp_path / "job.json"
    save_trace(read_flight_recorder(FLIGHT_RECORDER), trace)
    plan, env = tmp_path / "plan.json", tmp_path / "nccl.env"
    result = runner.invoke(app, ["rank", "--trace", str(trace), "--topology", "l40s-pcie", "-o", str(plan),
                                 "--env", str(env)])
    assert result.exit_code == 0, result.output
    loaded = load_plan(plan)
    assert len(loaded.entries) == 3
    lines = result.output.splitlines()
    assert lines[0].startswith("# ccltwin rank: 3 tasks") and "predicted, not measured" in lines[0]
    rows = [line for line in lines if line.startswith("  ")]
    assert [row.split()[0] for row in rows] == [e.task.op.value for e in loaded.entries]
    assert all(row.endswith("x") for row in rows)  # the speedup column
    assert "# per-process settings: NCCL_P2P_DISABLE=" in result.output
    assert "NCCL_P2P_DISABLE=" in env.read_text()


def test_rank_command_says_when_the_cluster_is_too_small(phi2_small, tmp_path):
    trace = tmp_path / "phi2.json"
    save_trace(phi2_small[0], trace)
    result = runner.invoke(app, ["rank", "--trace", str(trace), "--topology", "dgx-h100", "--gpus-per-node", "2",
                                 "-o", str(tmp_path / "plan.json")])
    assert result.exit_code == 2
    assert "needs 2 node(s) of 1 GPUs" in result.output and "--nodes" in result.output
    assert not (tmp_path / "plan.json").exists()
