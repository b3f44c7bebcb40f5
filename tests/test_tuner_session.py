"""``tuner.session.TuningSession`` on the twin's executor and a real SQLite store: resuming, recording
every trial, the budget, failed runs, and the winner as the store's best."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from traces.task import Op, Task
from tuner.config import Config, ConfigError
from tuner.search import make_search
from tuner.session import DEFAULT_REPEATS, TuningSession, search_for
from tuner.space import ConfigSpace
from tuner.store import Store, StoreError
from twin.executor import TwinExecutor
from twin.topology import load_cluster

TASK = Task(Op.ALLREDUCE, 8 << 20, 4, group="4x1")
"""An 8 MiB AllReduce on 4 A40s of one PCIe switch: a cheap twin with a real landscape."""


@pytest.fixture(scope="module")
def cluster():
    return load_cluster("a40-pcie", nodes=1, gpus_per_node=4)


def executor(cluster) -> TwinExecutor:
    """A fresh executor: its noise depends on how many times it measured each config."""
    return TwinExecutor(cluster, seed=3)


def search(name: str, runner: TwinExecutor, *, seed: int = 5, max_trials: int | None = None):
    """``name`` over the task's space cut to 12 channels (short searches), told NCCL's default."""
    space = ConfigSpace(TASK, replace(runner.facts(TASK), max_channels=12))
    params = {"budget": 40} if name == "random" else {}
    return make_search(name, space, seed=seed, default=runner.default_config(TASK), max_trials=max_trials, **params)


def session(name: str, runner: TwinExecutor, store: Store | None = None, **options) -> TuningSession:
    source = options.pop("source", "twin")
    return TuningSession(runner, TASK, search(name, runner, **options), store=store, source=source)


@pytest.mark.parametrize("name", ["autoccl", "ours", "random"])
def test_a_session_resumed_after_an_interruption_proposes_what_an_uninterrupted_one_would(name, cluster, tmp_path):
    """A job killed after 30 trials and started again (a fresh executor, a fresh search, the same
    store) feeds those back and then measures exactly what a job that never stopped measured."""
    whole = session(name, executor(cluster))
    expected = whole.run()
    with Store(tmp_path / "tuning.db") as store:
        killed_runner = executor(cluster)
        killed = session(name, killed_runner, store)
        for _ in range(30):
            config = killed.propose()
            killed.observe(config, killed_runner.measure(TASK, config))
        again = session(name, executor(cluster), store)
        assert again.resume() == 30
        got = again.run()
        assert again.search.history == whole.search.history
        assert store.count() == expected.trials  # each trial measured and recorded once
    assert replace(got, resumed=0) == expected and (got.resumed, expected.resumed) == (30, 0)
    assert expected.trials > 30 and not expected.stopped_by_budget


def test_every_trial_is_recorded_with_its_trial_index_hardware_and_nccl_version(cluster, tmp_path):
    runner = executor(cluster)
    with Store(tmp_path / "tuning.db") as store:
        ours = session("ours", runner, store)
        result = ours.run()
        rows = store.history(TASK)
    assert [(m.config, m.time_us, m.occurrence) for m in rows] == [
        (c, t, i) for i, (c, t) in enumerate(ours.search.history)]
    assert {(m.source, m.hardware, m.nccl_version) for m in rows} == {("twin", "twin:a40-pcie", "2.28.9")}
    assert len(rows) == result.trials and result.found_at <= result.trials
    assert ours.search.history[result.found_at - 1][0] == result.winner
    assert result.winner not in {c for c, _ in ours.search.history[:result.found_at - 1]}
    assert result.time_us <= result.default_us and result.speedup == result.default_us / result.time_us


def test_observe_records_the_fields_it_is_given(cluster, tmp_path):
    """What a live job knows about a call (compute interference, the communicator) lands in the store."""
    runner = executor(cluster)
    with Store(tmp_path / "tuning.db") as store:
        live = session("ours", runner, store, source="live")
        config = live.propose()
        m = live.observe(config, 812.5, interference=0.3, comm="tp0")
        [stored] = store.history(TASK)
    assert stored == m
    assert (m.config, m.time_us, m.source, m.interference, m.comm, m.occurrence) == (
        config, 812.5, "live", 0.3, "tp0", 0)
    assert live.search.history == [(config, 812.5)]


def test_the_budget_stops_the_session_and_counts_resumed_trials(cluster, tmp_path):
    with Store(tmp_path / "tuning.db") as store:
        first = session("autoccl", executor(cluster), store, max_trials=5).run()
        assert (first.trials, first.stopped_by_budget, store.count()) == (5, True, 5)
        rerun = session("autoccl", executor(cluster), store, max_trials=7)
        assert rerun.resume() == 5
        second = rerun.run()
        assert (second.resumed, second.trials, second.stopped_by_budget, store.count()) == (5, 7, True, 7)
        assert rerun.propose() is None


def test_a_failing_candidate_never_wins_and_is_not_stored(cluster, tmp_path):
    """Every run of the subspace that wins when nothing fails times out (inf): another subspace
    wins, and the store holds the times of the runs that worked, none for the failures."""
    normal = session("ours", executor(cluster)).run()

    class TimingOut(TwinExecutor):
        def measure(self, task: Task, config: Config) -> float:
            if config.subspace == normal.winner.subspace:
                return math.inf
            return super().measure(task, config)

    with Store(tmp_path / "tuning.db") as store:
        flaky = TuningSession(TimingOut(cluster, seed=3), TASK, search("ours", executor(cluster)), store=store)
        recorded = []
        while (config := flaky.propose()) is not None:
            recorded.append(flaky.observe(config, flaky.executor.measure(TASK, config)))
        result = flaky.result()
        failed = [c for c, t in flaky.search.history if math.isinf(t)]
        assert failed and result.winner.subspace != normal.winner.subspace and math.isfinite(result.time_us)
        assert [m is None for m in recorded] == [math.isinf(t) for _, t in flaky.search.history]
        assert store.history(TASK) == [m for m in recorded if m is not None]
        assert normal.winner.subspace not in {m.config.subspace for m in store.history(TASK)}


def test_a_session_whose_every_trial_failed_has_no_winner(cluster):
    class Broken(TwinExecutor):
        def measure(self, task: Task, config: Config) -> float:
            return math.inf

    broken = TuningSession(Broken(cluster), TASK, search("random", executor(cluster)))
    with pytest.raises(ConfigError, match="every trial failed"):
        broken.run()
    assert broken.search.trials == 40


def test_the_winner_becomes_the_stores_best_for_a_measured_source(cluster, tmp_path):
    """Live samples enter ``best`` one by one as they come; the session's verdict, its winner with
    its score, replaces them. Twin trials stay history only."""
    with Store(tmp_path / "tuning.db") as store:
        twin = session("ours", executor(cluster), store).run()
        assert store.bests() == [] and store.count() == twin.trials
        live = session("ours", executor(cluster), store, source="live")
        samples = []
        while (config := live.propose()) is not None:
            samples.append(live.observe(config, live.executor.measure(TASK, config)).time_us)
            assert store.best(TASK, hardware="twin:a40-pcie").time_us == min(samples)
        result = live.result()
        best = store.best(TASK, hardware="twin:a40-pcie")
    assert (best.config, best.source) == (result.winner, "live")
    assert best.time_us == pytest.approx(result.time_us) and result.time_us > min(samples)


def test_the_store_refuses_a_best_that_is_not_in_its_history(cluster, tmp_path):
    with Store(tmp_path / "tuning.db") as store:
        live = session("ours", executor(cluster), store, source="live")
        config = live.propose()
        winner = live.observe(config, 100.0)
        other = replace(winner, config=replace(config, nchannels=config.nchannels + 1))
        with pytest.raises(StoreError, match=r"no live measurement of .* in history"):
            store.set_best(other)
        assert store.set_best(replace(winner, time_us=150.0))
        assert store.best(TASK, hardware=winner.hardware).time_us == 150.0
        assert not store.set_best(replace(winner, source="twin"))


def test_nccls_default_is_measured_once_when_the_search_never_ran_it(cluster):
    """Random search does not start from NCCL's default: the result measures it DEFAULT_REPEATS
    times, once, however often it is asked for."""
    measured: list[Config] = []

    class Counting(TwinExecutor):
        def measure(self, task: Task, config: Config) -> float:
            measured.append(config)
            return super().measure(task, config)

    runner = Counting(cluster, seed=3)
    rand = session("random", runner)
    first = rand.run()
    assert rand.default not in rand.search.samples
    assert measured.count(rand.default) == DEFAULT_REPEATS
    assert rand.result() == first and measured.count(rand.default) == DEFAULT_REPEATS
    assert math.isfinite(first.default_us)


def test_search_for_searches_the_space_the_executor_can_change(cluster):
    runner = executor(cluster)
    ours = search_for(runner, TASK, "ours", seed=1, max_trials=4)
    result = TuningSession(runner, TASK, ours).run()
    assert ours.space.task == TASK and result.trials == 4 and result.stopped_by_budget
    assert ours.history[0][0] == runner.default_config(TASK)  # ours measures NCCL's default first
