"""live.trials: one task's trials on the leader, against the twin's executor as time source.

A small driver plays the plugin and the coordinator: each boundary one call of the task runs
with the rule committed last (NCCL's own choice before any), and whatever the task wants is
committed at once as the next version. Faults come from the time source or the decision.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from live.clock import ExecutorClock
from live.executor import LiveExecutor, open_session
from live.plugin.binding import Decision
from live.schedule import NCCL_DEFAULT, TaskKey
from live.trials import TaskTuning
from traces.task import Op, Task
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.topology import load_cluster

TASK = Task(Op.ALLREDUCE, 20_800, 2, "float32", "2x1")
KEY = TaskKey(0x5EED, Op.ALLREDUCE, 20_800)


class Clock(ExecutorClock):
    """The twin's times; ``slow`` configs take 20 times as long, ``silent`` ones never report
    (configs named by (algo, proto, nchannels))."""

    def __init__(self, executor, *, slow=frozenset(), silent=frozenset()):
        super().__init__(executor)
        self.slow, self.silent = slow, silent

    def time_us(self, task, config, call):
        if (config.algo, config.proto, config.nchannels) in self.silent:
            return None
        t = super().time_us(task, config, call)
        return 20 * t if (config.algo, config.proto, config.nchannels) in self.slow else t


@pytest.fixture
def twin():
    return TwinExecutor(load_cluster("dgx-h100", nodes=1), seed=3)


def _tuning(twin, folder, clock=None, *, budget=None) -> tuple[TaskTuning, Clock, Store]:
    clock = clock or Clock(twin)
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(folder / "t.db")
    session = open_session(LiveExecutor(clock, twin.hardware), TASK, search="ours", seed=0, budget=budget, plan=None,
                           store=store, saved=None, log=print)
    return TaskTuning(KEY, session, comm="2x1#0", chunk=False, first_round=0, max_wait=3), clock, store


class Driver:
    """The plugin and the coordinator for one task: one call per boundary under the last committed rule."""

    def __init__(self, t: TaskTuning, clock):
        self.t, self.clock = t, clock
        self.committed, self.version, self.i = NCCL_DEFAULT, 0, 0
        self.calls: list[Decision] = []

    def run(self, boundaries: int, *, unavailable=frozenset()) -> None:
        t, default = self.t, self.t.session.default
        for _ in range(boundaries):
            algo, proto, nchannels, chunk = self.committed
            d = Decision(KEY.comm, KEY.op, KEY.nbytes, self.i, algo or default.algo, proto or default.proto,
                         nchannels, chunk, self.version, 0x1 if self.version else 0, 0, default.algo, default.proto)
            if (algo, proto, nchannels) in unavailable:
                d = replace(d, algo=default.algo, proto=default.proto, nchannels=0, flags=0x3)
            self.calls.append(d)
            t.boundary(self.i, [d], self.clock)
            if t.fields != self.committed:
                self.committed, self.version = t.fields, self.i + 1
            if t.version is None and not t.done:
                t.committed(self.version)
            self.i += 1
            if t.done:
                return


def test_trials_run_to_a_winner_recorded_in_the_store(twin, tmp_path):
    t, clock, store = _tuning(twin, tmp_path)
    driver = Driver(t, clock)
    driver.run(200)
    assert t.done and t.result.winner == t.session.search.best[0] and not t.failed
    assert t.converged_round == len(driver.calls) - 1 and t.result.speedup > 1.0
    assert len(store.history(TASK)) == t.session.search.trials  # every trial, as it came
    assert store.best(TASK, hardware=twin.hardware).config == t.result.winner
    assert t.fields == (t.result.winner.algo, t.result.winner.proto, t.result.winner.nchannels, 0)


def test_a_config_nccl_cannot_run_fails_falls_back_and_never_runs_again(twin, tmp_path):
    t, clock, _ = _tuning(twin, tmp_path, budget=12)
    driver = Driver(t, clock)
    driver.run(2)
    tried = t.config
    assert tried is not None and tried != t.session.default
    driver.run(200, unavailable=frozenset({(tried.algo, tried.proto, tried.nchannels)}))
    assert t.failed[0] == (tried, "NCCL cannot run it on this communicator (its cost-table entry is -1)")
    calls = driver.calls
    forced = [d for d in calls if d.has("unavailable")]
    after = calls[calls.index(forced[0]) + 1]
    assert len(forced) == 1 and (after.nchannels, after.algo) == (0, t.session.default.algo)  # NCCL's default
    assert t.result.winner != tried


def _second_trial(twin, folder) -> tuple:
    """(algo, proto, nchannels) of the search's second trial (its first after NCCL's default)."""
    probe, clock, _ = _tuning(twin, folder)
    Driver(probe, clock).run(2)
    return probe.config.algo, probe.config.proto, probe.config.nchannels


def test_a_call_far_slower_than_the_default_counts_as_failed(twin, tmp_path):
    slow = _second_trial(twin, tmp_path / "probe")
    t, clock, store = _tuning(twin, tmp_path, Clock(twin, slow={slow}))
    Driver(t, clock).run(200)
    config, why = t.failed[0]
    assert (config.algo, config.proto, config.nchannels) == slow and "over 10 x NCCL's default" in why
    assert all((m.config.algo, m.config.proto, m.config.nchannels) != slow for m in store.history(TASK))
    assert math.isinf(t.session.search.score(config))


def test_a_trial_whose_times_never_come_fails_after_max_wait(twin, tmp_path):
    silent = _second_trial(twin, tmp_path / "probe")
    t, clock, _ = _tuning(twin, tmp_path, Clock(twin, silent={silent}))
    Driver(t, clock).run(200)
    assert t.failed[0][1] == "no time arrived for its calls in 3 boundaries" and t.lost == 4 and t.done


def test_a_task_that_stops_appearing_goes_stale_and_settles_on_its_best(twin, tmp_path):
    t, clock, _ = _tuning(twin, tmp_path)
    Driver(t, clock).run(5)
    for i in range(5, 8):
        t.boundary(i, [], clock)
    assert t.stale and not t.done
    t.settle(8)
    assert t.done and t.result.winner == t.session.search.best[0] and t.converged_round == 8


def test_a_stale_task_runs_its_best_so_far_and_its_trial_resumes_when_it_comes_back(twin, tmp_path):
    t, clock, _ = _tuning(twin, tmp_path)
    driver = Driver(t, clock)
    driver.run(6)
    trial, trials = t.config, t.session.search.trials
    for _ in range(3):
        t.boundary(driver.i, [], clock)
        driver.i += 1
    best = t.session.search.best[0]
    wanted = NCCL_DEFAULT if best == t.session.default else (best.algo, best.proto, best.nchannels, 0)
    assert t.stale and t.fields == wanted != (trial.algo, trial.proto, trial.nchannels, 0)
    driver.committed, driver.version = t.fields, driver.i
    driver.run(1)  # the call came back, under the best so far: not a sample of the trial, which is committed again
    assert not t.stale and t.session.search.trials == trials and t.config == trial
    assert driver.committed == (trial.algo, trial.proto, trial.nchannels, 0) and t.version == driver.version
    driver.run(200)
    assert t.done and t.session.search.trials > trials
