"""``ccltwin store export`` of live winners: tuning sessions recorded with source ``live`` (the twin's
executor standing in for the job's measurements, as in every live CI test) become the example tuner
plugin's rules — each winner chosen for its own size, node and rank count — and an env file; the
same sessions recorded as twin predictions export nothing."""

from __future__ import annotations

from typer.testing import CliRunner

from ccltwin import app
from tests.example_plugin import plugin_choose, plugin_load
from traces.task import Op, Task
from tuner.export import TUNER_CSV_HEADER, settings_from_winners
from tuner.session import TuningSession, search_for
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.topology import load_cluster

runner = CliRunner()
TASKS = (Task(Op.ALLREDUCE, 1 << 20, 16), Task(Op.ALLREDUCE, 256 << 20, 16), Task(Op.ALLGATHER, 8 << 20, 8))
"""Two sizes of one shape (16 ranks over 2 nodes) and one of another (8 ranks on a node)."""


def tuned_store(path, source: str) -> list:
    """Tune every task in the twin (no noise), recording its trials and winner as ``source``."""
    executor = TwinExecutor(load_cluster("dgx-h100", nodes=2), noise=0.0)
    results = []
    with Store(path) as store:
        for shape in TASKS:
            task = executor.communicator(shape).task(shape.op, shape.nbytes, shape.dtype)
            session = TuningSession(executor, task, search_for(executor, task, "ours", max_trials=40), store=store,
                                    source=source)
            results.append(session.run())
    return results


def test_live_winners_export_as_the_example_plugins_rules_and_an_env_file(tmp_path):
    db, csv, env = tmp_path / "live.db", tmp_path / "nccl_tuner.conf", tmp_path / "nccl.env"
    results = tuned_store(db, "live")
    result = runner.invoke(app, ["store", "export", str(db), "--csv", str(csv), "--env", str(env)])
    assert result.exit_code == 0, result.output
    text = csv.read_text()
    assert f"# {TUNER_CSV_HEADER}\n" in text and "3 winners of" in text
    rules = plugin_load(text)
    assert len(rules) == 3
    for r in results:
        nodes = 2 if r.task.nranks == 16 else 1
        expected = (str(r.winner.algo), str(r.winner.proto), r.winner.nchannels)
        assert plugin_choose(rules, str(r.task.op), r.task.nbytes, nodes, r.task.nranks) == expected
    # every size of a shape has a rule: the two all-reduce winners split the byte range between them
    small, large = (r for r in results if r.task.op is Op.ALLREDUCE)
    assert plugin_choose(rules, "allreduce", 0, 2, 16) == plugin_choose(rules, "allreduce", 1 << 20, 2, 16)
    assert plugin_choose(rules, "allreduce", 1 << 40, 2, 16)[2] == large.winner.nchannels
    assert plugin_choose(rules, "allreduce", 1 << 20, 1, 8) == (None, None, 1)  # no winner of that shape
    lines = env.read_text().splitlines()
    assert f"NCCL_TUNER_CONFIG_FILE={csv.resolve()}" in lines
    with Store(db, create=False) as store:  # the per-process knobs the live winners vote for
        assert {f"{k}={v}" for k, v in settings_from_winners(store.bests()).env().items()} <= set(lines)
    exact = runner.invoke(app, ["store", "export", str(db), "--csv", str(tmp_path / "exact.conf"), "--exact-sizes"])
    assert exact.exit_code == 0, exact.output
    sizes = sorted((r["coll"], r["min"], r["max"]) for r in plugin_load((tmp_path / "exact.conf").read_text()))
    assert sizes == sorted((str(r.task.op), r.task.nbytes, r.task.nbytes) for r in results)
    assert small.task.nbytes < large.task.nbytes


def test_twin_predictions_are_not_exported_as_winners(tmp_path):
    db = tmp_path / "twin.db"
    tuned_store(db, "twin")
    result = runner.invoke(app, ["store", "export", str(db), "--csv", str(tmp_path / "t.conf")])
    assert result.exit_code == 2 and "no winners to export" in result.stderr and "ccltwin rank --csv" in result.stderr
    assert not (tmp_path / "t.conf").exists()
