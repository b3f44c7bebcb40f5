"""``ccltwin tune``: trajectory and winner per task, JSON contract, store resume, warm start, errors."""

from __future__ import annotations

import json
from dataclasses import replace

from typer.testing import CliRunner

from ccltwin import app
from traces.task import Op, Task
from traces.trace_file import load_trace
from tuner.plan import load_plan, save_plan
from tuner.store import Store
from twin.placement import Placement, trace_tasks
from twin.rank import rank_tasks
from twin.topology import load_cluster

ONE_TASK = ["tune", "--executor", "twin", "--topology", "a40-pcie", "--nodes", "1", "--gpus-per-node", "4",
            "--op", "allreduce", "--nbytes", "8MiB", "--nranks", "4"]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_json_has_the_winner_its_time_trials_and_nccls_default():
    result = invoke(*ONE_TASK, "--search", "ours", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert {"algo", "proto", "transport", "nchannels", "nthreads", "chunk_bytes", "time_us", "trials",
            "default_time_us"} <= set(row)
    assert (row["op"], row["nbytes"], row["nranks"], row["group"]) == ("allreduce", 8 << 20, 4, "4x1")
    assert row["trials"] > 10 and row["time_us"] <= row["default_time_us"]


def test_text_prints_every_trial_and_the_winner():
    result = invoke(*ONE_TASK, "--search", "random", "--max-trials", "25")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    trials = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(trials) == 25
    assert lines[-1].startswith("winner: ") and "after 25 trials" in lines[-1] and "NCCL default" in lines[-1]


def test_store_records_trials_and_a_rerun_resumes_where_it_stopped(tmp_path):
    """Stopped after 40 trials and rerun, the search replays those and ends as an uninterrupted run."""
    db = tmp_path / "tuning.db"
    whole = json.loads(invoke(*ONE_TASK, "--search", "ours", "--json").output)[0]
    first = invoke(*ONE_TASK, "--search", "ours", "--store", str(db), "--max-trials", "40", "--json")
    assert first.exit_code == 0, first.output
    with Store(db) as store:
        assert store.count() == 40 and {m.source for m in store.history()} == {"twin"}
    second = json.loads(invoke(*ONE_TASK, "--search", "ours", "--store", str(db), "--json").output)[0]
    assert second["replayed"] == 40
    assert (second["trials"], second["nchannels"], second["chunk_bytes"]) == (
        whole["trials"], whole["nchannels"], whole["chunk_bytes"])


def test_warm_start_from_a_rank_plan_cuts_the_trials(tmp_path):
    cluster = load_cluster("a40-pcie", nodes=1, gpus_per_node=4)
    task = Task(Op.ALLREDUCE, 8 << 20, 4, group="4x1")
    save_plan(rank_tasks({task: 1.0}, cluster).plan, tmp_path / "plan.json")
    cold = json.loads(invoke(*ONE_TASK, "--search", "ours", "--json").output)[0]
    warm = json.loads(invoke(*ONE_TASK, "--search", "ours", "--json", "--warm-start",
                             str(tmp_path / "plan.json")).output)[0]
    assert warm["warm_start"] and not cold["warm_start"]
    assert warm["trials"] < cold["trials"]
    assert warm["time_us"] <= 1.05 * cold["time_us"]


def test_trace_tunes_each_task_above_the_size_floor():
    """Phi-2's bundled trace on the PCIe cluster: only the 632 MiB data-parallel AllReduce is ≥ 600 MiB."""
    result = invoke("tune", "--topology", "a40-pcie", "--trace", "traces/examples/phi2-tp8dp4.json.gz",
                    "--min-size", "600MiB", "--search", "ours", "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["op"], row["nranks"], row["group"]) == ("allreduce", 4, "1x4")


def test_errors_are_one_line_with_exit_code_2():
    for args, message in [
        (("tune", "--topology", "a40-pcie", "--executor", "live", "--op", "allreduce"),
         "add `live.enable()` to the training script"),
        (("tune", "--topology", "a40-pcie", "--executor", "live"), "torchrun --nproc-per-node N -m ccltwin bench"),
        (("tune", "--topology", "a40-pcie", "--executor", "gpu"), "--executor gpu: expected twin"),
        (("tune", "--topology", "a40-pcie", "--op", "allreduce"), "--op needs --nbytes and --nranks"),
        (("tune", "--topology", "a40-pcie"), "give either --trace or --op"),
        ((*ONE_TASK, "--search", "annealing"), "expected one of autoccl"),
        ((*ONE_TASK, "--warm-start", "/nonexistent/plan.json"), "cannot read the plan"),
        (("tune", "--topology", "a40-pcie", "--op", "allreduce", "--nbytes", "1MiB", "--nranks", "64"), "64"),
        (("tune", "--topology", "dgx-h100", "--op", "allreduce", "--nbytes", "1MiB", "--nranks", "9"),
         "allreduce 1048576 B float32 on 9 ranks"),
    ]:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_trace_tasks_take_their_shapes_from_the_placement_whatif_and_rank_use():
    """Phi-2 TP8×DP4 on nodes of 4 GPUs: a tensor-parallel group of 8 spans two nodes, a data-parallel
    group (ranks r, r+8, r+16, r+24) one GPU on each of four."""
    trace = load_trace("traces/examples/phi2-tp8dp4.json.gz")
    cluster = load_cluster("dgx-h100", nodes=8, gpus_per_node=4)
    shapes = {(shaped.op, shaped.nranks): shaped.group for _, shaped, _ in trace_tasks(trace, cluster)}
    assert shapes[(Op.ALLGATHER, 8)] == "4x2" and shapes[(Op.ALLREDUCE, 4)] == "1x4"
    placed = Placement(trace, cluster).task_communicators()
    named = {named for named, _, _ in trace_tasks(trace, cluster)}
    assert named <= set(placed)


def test_tune_says_when_a_plan_is_from_another_cluster_or_lacks_the_task(tmp_path):
    h100 = tmp_path / "h100.json"
    assert invoke("rank", "--trace", "traces/examples/vgg19-dp32.json.gz", "--topology", "dgx-h100",
                  "-o", str(h100)).exit_code == 0
    other = invoke(*ONE_TASK, "--search", "ours", "--max-trials", "5", "--warm-start", str(h100))
    assert other.exit_code == 0, other.output
    assert "was ranked on dgx-h100:8x4, not on a40-pcie:4x1" in other.output
    assert "cold start (the plan has no entry for it)" in other.output
    assert "(stopped by --max-trials)" in other.output


def test_a_plan_names_groups_as_its_trace_does_and_a_one_task_tune_still_finds_its_entry(tmp_path):
    """The plan calls the data-parallel group "dp:0"; ``tune --op`` knows it as the shape "1x4"."""
    plan = tmp_path / "plan.json"
    assert invoke("rank", "--trace", "traces/examples/phi2-tp8dp4.json.gz", "--topology", "a40-pcie",
                  "-o", str(plan)).exit_code == 0
    result = invoke("tune", "--topology", "a40-pcie", "--nodes", "4", "--op", "allreduce", "--nbytes", "663050240",
                    "--nranks", "4", "--gpus-per-node", "1", "--search", "ours", "--max-trials", "3",
                    "--warm-start", str(plan))
    assert result.exit_code == 0, result.output
    assert "warm start from the plan" in result.output and "was ranked on" in result.output


def test_impossible_numbers_are_refused_up_front():
    for args, message in [((*ONE_TASK[:-4], "--nbytes", "0", "--nranks", "4"), "at least 1 byte"),
                          ((*ONE_TASK, "--max-trials", "0"), "--max-trials"),
                          ((*ONE_TASK, "--seed", "-1"), "--seed")]:
        result = invoke(*args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_a_size_floor_above_every_task_says_so():
    result = invoke("tune", "--topology", "dgx-h100", "--trace", "traces/examples/vgg19-dp32.json.gz",
                    "--min-size", "1TiB")
    assert result.exit_code == 0
    assert "no task of traces/examples/vgg19-dp32.json.gz moves at least 1TiB" in result.output


def test_a_plan_with_several_entries_for_the_task_says_so(tmp_path):
    plan_path = tmp_path / "plan.json"
    assert invoke("rank", "--trace", "traces/examples/phi2-tp8dp4.json.gz", "--topology", "dgx-h100",
                  "-o", str(plan_path)).exit_code == 0
    plan = load_plan(plan_path)
    entry = next(e for e in plan.entries if e.task.op is Op.ALLREDUCE and e.task.nranks == 8)
    twin_entry = replace(entry, task=replace(entry.task, group="tp:1"))
    save_plan(replace(plan, entries=(*plan.entries, twin_entry)), plan_path)
    result = invoke("tune", "--topology", "dgx-h100", "--op", "allreduce", "--nbytes", str(entry.task.nbytes),
                    "--nranks", "8", "--max-trials", "2", "--warm-start", str(plan_path))
    assert result.exit_code == 0, result.output
    assert "the plan has 2 entries of this op, size and rank count" in result.output
