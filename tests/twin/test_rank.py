"""Twin pre-ranking: warm-start plans for real and generated traces, per-process settings, the CLI."""

import numpy as np
import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.example_plugin import plugin_choose, plugin_load
from tests.testdata import DATA
from tests.twin.test_replay import TraceBuilder
from traces import read_chakra, read_flight_recorder
from traces.generate import generate, workload
from traces.task import Op, Task
from traces.trace_file import save_trace
from tuner.candidates import Candidates
from tuner.plan import load_plan, save_plan
from tuner.space import ConfigSpace, ResourceGrid
from twin.fastpath import sweep_subspace
from twin.placement import Communicator
from twin.predict import predict
from twin.rank import comm_facts, rank_tasks, rank_trace
from twin.replay import replay
from twin.topology import load_cluster

RESNET = DATA / "traces" / "param" / "resnet_2gpu_et.json.gz"
FLIGHT_RECORDER = sorted((DATA / "traces" / "flight-recorder").glob("*.json"))
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
    comm = Communicator.first(load_cluster("l40s-pcie").subset(nodes=1, gpus_per_node=2))
    for entry in plan.entries:
        times = [r.time_us for r in entry.ranked]
        assert times == sorted(times)
        assert entry.best.time_us <= entry.default.time_us
        assert len({r.subspace for r in entry.ranked}) == len(entry.ranked)
        space = ConfigSpace(entry.task, comm_facts(comm))
        assert {r.subspace for r in entry.ranked} <= set(space.subspaces)
        for r in entry.ranked:
            assert r.config == entry.default.config or space.problems(r.config) == []
        c = entry.best.config
        again = predict(comm, entry.task.op, entry.task.nbytes, algo=c.algo, proto=c.proto, transport=c.transport,
                        nchannels=c.nchannels, nthreads=c.nthreads, chunk_bytes=c.chunk_bytes)
        assert again.time_us == pytest.approx(entry.best.time_us)
        default = predict(comm, entry.task.op, entry.task.nbytes)
        assert (default.config, default.time_us) == (entry.default.config, pytest.approx(entry.default.time_us))
    assert plan.cluster.startswith("l40s-pcie") and plan.nccl_version == "2.28.9"


def test_every_group_runs_on_the_gpus_of_its_ranks_as_in_the_replay(phi2_small, tmp_path):
    """Rank r runs on GPU r: the DP pair (ranks 0 and 2) spans both nodes, one GPU each; the TP pair
    (ranks 0 and 1) shares a node. The replay places the same communicators, so its NCCL defaults
    and their times alone are the plan's."""
    trace, ranking = phi2_small
    assert {e.task: e.calls_per_iteration for e in ranking.plan.entries} == trace.tasks()
    cluster = load_cluster("a40-nvlink-pairs", gpus_per_node=2)
    comms = {"dp:0": Communicator.first(cluster.subset(nodes=2, gpus_per_node=1)),
             "tp:0": Communicator.first(cluster.subset(nodes=1))}
    for entry in ranking.plan.entries:
        comm = comms[entry.task.group]
        default = predict(comm, entry.task.op, entry.task.nbytes)
        assert (default.config, default.time_us) == (entry.default.config, pytest.approx(entry.default.time_us))
        c = entry.best.config
        again = predict(comm, entry.task.op, entry.task.nbytes, algo=c.algo, proto=c.proto, transport=c.transport,
                        nchannels=c.nchannels, nthreads=c.nthreads, chunk_bytes=c.chunk_bytes)
        assert again.time_us == pytest.approx(entry.best.time_us)
    dp = next(e for e in ranking.plan.entries if e.task.group == "dp:0")
    assert all(r.subspace.transport.value == "p2p" for r in dp.ranked)  # one GPU per node: no transport choice
    replayed = {t.task: t for t in replay(trace, cluster).tasks}
    for entry in ranking.plan.entries:
        assert replayed[entry.task].config == entry.default.config
        assert replayed[entry.task].alone_us == pytest.approx(entry.default.time_us)
    path = tmp_path / "plan.json"
    save_plan(ranking.plan, path)
    assert load_plan(path) == ranking.plan


def test_a_trace_of_representative_ranks_places_absent_members_across_nodes():
    """The bundled traces keep one rank per stage: a data-parallel group of ranks 0 and 8 still
    spans two nodes of eight, though rank 8 is not in the trace."""
    b = TraceBuilder(16, {"dp": (0, 8), "tp": tuple(range(8))})
    b.call(0, Op.ALLREDUCE, 64 << 20, "dp")
    b.call(0, Op.ALLGATHER, 8 << 20, "tp")
    cluster = load_cluster("dgx-a100", nodes=2)
    ranking = rank_trace(b.trace(), cluster)
    dp = next(e for e in ranking.plan.entries if e.task.group == "dp")
    across = predict(Communicator.first(cluster.subset(nodes=2, gpus_per_node=1)), Op.ALLREDUCE, 64 << 20)
    within = predict(Communicator.first(cluster.subset(nodes=1, gpus_per_node=2)), Op.ALLREDUCE, 64 << 20)
    assert dp.default.time_us == pytest.approx(across.time_us)
    assert dp.default.time_us > 2 * within.time_us  # the network, not NVLink
    assert {e.task.nranks for e in ranking.plan.entries} == {2, 8}


def test_per_process_settings_never_predict_slower_than_nccls_defaults(phi2_small, resnet_ranking):
    for _, ranking in (phi2_small, resnet_ranking):
        process = ranking.process
        assert process.default_us == pytest.approx(sum(e.calls_per_iteration * e.default.time_us
                                                       for e in ranking.plan.entries))
        assert process.tuned_us <= process.per_call_us <= process.default_us * (1 + 1e-9)
        assert ranking.plan.process == process.settings


@pytest.mark.parametrize("preset,gpus,op,nbytes", [("l40s-pcie", 2, Op.ALLREDUCE, 3 << 20),
                                                   ("a40-nvlink-pairs", 4, Op.ALLGATHER, 80_000_000),
                                                   ("dgx-h100", 8, Op.REDUCESCATTER, 1 << 16)])
def test_the_sweep_times_every_grid_point_as_the_schedule_alone_does(preset, gpus, op, nbytes):
    """The vectorised sweep (all thread counts and chunks of a channel count at once) gives each
    point the time of its own schedule, in ``tuner.candidates`` order, and its best is the least."""
    comm = Communicator.first(load_cluster(preset, nodes=1, gpus_per_node=gpus))
    space = ConfigSpace(Task(op, nbytes, gpus), comm_facts(comm))
    rng = np.random.default_rng(7)
    for s in space.subspaces:
        full = space.grid(s)
        grid = ResourceGrid(full.nchannels[:6], full.nthreads, full.chunks)
        sweep = sweep_subspace({s.transport: comm.geometry(s.transport)}, op, nbytes, s, grid)
        candidates = Candidates(s, grid)
        assert sweep.flat.shape == (candidates.size,) and np.isfinite(sweep.flat).all()
        for i in rng.choice(candidates.size, 25, replace=False):
            config = candidates.config(int(i))
            assert sweep.config(int(i)) == config
            assert sweep.flat[i] == pytest.approx(float(comm.schedule(comm.task(op, nbytes), config).time_us()),
                                                  rel=1e-12)
        config, time_us = sweep.best()
        assert time_us == sweep.flat.min() and sweep.flat[candidates.index(config)] == time_us
        nt = config.nthreads
        assert sweep.times[nt].shape == (len(grid.nchannels), len(grid.chunks[nt]))
        assert sweep.best(objective=-sweep.flat)[1] == sweep.flat.max()


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


def test_rank_command_sizes_the_cluster_to_the_trace_or_says_it_is_too_small(phi2_small, tmp_path):
    trace = tmp_path / "phi2.json"
    save_trace(phi2_small[0], trace)
    args = ["rank", "--trace", str(trace), "--topology", "dgx-h100", "--gpus-per-node", "2"]
    sized = runner.invoke(app, [*args, "-o", str(tmp_path / "plan.json")])
    assert sized.exit_code == 0, sized.output
    assert load_plan(tmp_path / "plan.json").cluster == "dgx-h100:2x2"
    small = runner.invoke(app, [*args, "--nodes", "1", "-o", str(tmp_path / "small.json")])
    assert small.exit_code == 2
    assert "needs 4 GPUs" in small.output and "use at least 2 nodes" in small.output
    assert not (tmp_path / "small.json").exists()


def test_rank_command_writes_the_predicted_winners_as_tuner_plugin_rules(tmp_path):
    """Llama-3.1-8B TP8×DP4 on 4 DGX H100: every plan entry's best config comes back from the CSV as
    the example plugin reads it, for its communicator's node and rank count (TP: 1 node of 8, DP: 4
    nodes of 1), and sizes between two winners go to the nearer one."""
    plan_path, csv = tmp_path / "plan.json", tmp_path / "tuner.csv"
    result = runner.invoke(app, ["rank", "--trace", "traces/examples/llama8b-tp8dp4.json.gz", "--topology",
                                 "dgx-h100", "-o", str(plan_path), "--csv", str(csv)])
    assert result.exit_code == 0, result.output
    assert f"NCCL_TUNER_CONFIG_FILE={csv.resolve()}" in result.output
    rules = plugin_load(csv.read_text())
    nodes = {8: 1, 4: 4}
    for e in load_plan(plan_path).entries:
        c = e.best.config
        assert plugin_choose(rules, e.task.op.value, e.task.nbytes, nodes[e.task.nranks], e.task.nranks) == (
            c.algo.value, c.proto.value, c.nchannels)
    assert plugin_choose(rules, "allreduce", 1 << 20, 2, 8) == (None, None, 1)  # no rule for another shape


def test_rank_command_checks_its_inputs_and_outputs_before_any_work(tmp_path):
    trace = "traces/examples/vgg19-dp32.json.gz"
    base = ["rank", "--topology", "dgx-h100"]
    missing = runner.invoke(app, [*base, "--trace", str(tmp_path / "nope.json"), "-o", str(tmp_path / "p.json")])
    assert missing.exit_code == 2 and "nope.json: cannot read the trace (No such file or directory)" in missing.output
    into_dir = runner.invoke(app, [*base, "--trace", trace, "-o", str(tmp_path / "p.json"), "--csv", str(tmp_path)])
    assert into_dir.exit_code == 2 and "is a directory; give a file name for the tuner rules" in into_dir.output
    assert not (tmp_path / "p.json").exists()  # nothing half-written
    channels = runner.invoke(app, [*base, "--trace", trace, "-o", str(tmp_path / "p.json"), "--max-channels", "-3"])
    assert channels.exit_code == 2 and "--max-channels" in channels.output and "Traceback" not in channels.output
    both = runner.invoke(app, [*base, "--trace", trace, "-o", str(tmp_path / "p.json"), "--csv",
                               str(tmp_path / "t.csv"), "--env", str(tmp_path / "n.env")])
    assert both.exit_code == 0, both.output
    assert f"NCCL_TUNER_CONFIG_FILE={(tmp_path / 't.csv').resolve()}" in (tmp_path / "n.env").read_text()
