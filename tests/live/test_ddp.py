"""A torchrun DDP job with the one added line ``live.enable()`` tunes its collectives on gloo.

``tests/live/data/ddp_train.py`` runs twice under ``torchrun --nproc-per-node 2`` through
``tests/live/twin_run.py`` (which makes the twin's executor the time source, as CI has no GPU):
once with live tuning, once with ``CCLTWIN_LIVE=0``. Tuning must reach the twin's exhaustive
optimum of the space a live job can search, leave the training bit for bit as it was, decide
every call alike on both ranks, record every trial and write the next launch's files.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from launch import JOB_TIMEOUT_S, ROOT, assert_same_configs, decision_logs, job_env

from traces.task import Op, Task
from tuner.knobs import Tier
from tuner.space import ConfigSpace
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.topology import load_cluster

ITERATIONS = 150
SCRIPT = ROOT / "tests" / "live" / "data" / "ddp_train.py"
TASKS = (Task(Op.ALLREDUCE, 20_800, 2, "float32", "2x1"), Task(Op.ALLREDUCE, 256, 2, "float32", "2x1"))
"""DDP's gradient bucket and the job's logged loss statistics."""


def _torchrun(folder, *, live: bool) -> subprocess.CompletedProcess:
    env = job_env(CCLTWIN_LIVE_STORE=str(folder / "tuning.db"), CCLTWIN_TEST_DECISIONS=str(folder / "dec{rank}.jsonl"),
                  **({} if live else {"CCLTWIN_LIVE": "0"}))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(ROOT / "tests" / "live" / "twin_run.py"), str(SCRIPT), str(folder / "out"),
                           str(ITERATIONS)], capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tuned, plain = tmp_path_factory.mktemp("tuned"), tmp_path_factory.mktemp("plain")
    return tuned, _torchrun(tuned, live=True), plain, _torchrun(plain, live=False)


def test_the_loss_curve_is_bit_identical_to_the_run_without_live(runs):
    tuned, _, plain, _ = runs
    for rank in (0, 1):
        with_live = json.loads((tuned / "out" / f"loss{rank}.json").read_text())
        without = json.loads((plain / "out" / f"loss{rank}.json").read_text())
        assert len(with_live) == ITERATIONS and with_live == without
    assert not (plain / "tuning.db").exists()


def test_tuning_reaches_the_twins_optimum_of_the_live_space(runs):
    tuned, done, _, _ = runs
    executor = TwinExecutor(load_cluster("dgx-h100", nodes=1))
    with Store(tuned / "tuning.db", create=False) as store:
        for task in TASKS:
            default = executor.default_config(task)
            space = ConfigSpace(task, executor.facts(task), tiers={Tier.PER_CALL}, fixed=default)
            _, optimum_us = executor.load_sweep(task, space)
            (best,) = store.bests(task=task)
            assert best.config in space and best.source == "live"
            assert executor.true_time(task, best.config) <= 1.02 * optimum_us
            assert optimum_us < 0.97 * executor.true_time(task, default)  # there was something to gain
            trials = [m for m in store.history(task) if m.source == "live"]
            assert 20 < len(trials) <= ITERATIONS
    assert "tuning converged" in done.stderr and "allreduce 20800 B float32 2x1" in done.stdout


def test_both_ranks_ran_the_same_config_at_every_call(runs):
    tuned, *_ = runs
    logs = decision_logs(tuned, 2, "dec{rank}.jsonl")
    assert_same_configs(logs)
    ddp_calls = [v for (_, op, nbytes, _), v in logs[0].items() if (op, nbytes) == ("allreduce", 20_800)]
    assert len(ddp_calls) == ITERATIONS and len({v[:4] for v in ddp_calls}) > 5  # tuning moved it


def test_the_next_launch_gets_an_env_file_and_the_winners_as_tuner_rules(runs):
    tuned, *_ = runs
    rules = [line.split(",") for line in (tuned / "tuning.db.nccl_tuner.conf").read_text().splitlines()
             if line.startswith("allreduce")]
    assert {(r[0], r[7]) for r in rules} == {("allreduce", "2")}
    env = (tuned / "tuning.db.nccl.env").read_text()
    assert f"NCCL_TUNER_CONFIG_FILE={tuned / 'tuning.db.nccl_tuner.conf'}" in env
    assert (tuned / "tuning.db.live" / "rank0.json").is_file()
