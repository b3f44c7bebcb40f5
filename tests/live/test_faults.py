"""Faults during live tuning of a real DDP job on gloo: the job goes on and no two ranks ever
run different configs for the same call.

Each test forks a DDP job (``tests/live/jobs.py ddp``: ``tests/live/data/ddp_train.py`` with
``live.enable`` and the twin's executor as time source) with one fault injected, then compares
the plugin's decision logs of all ranks call by call (``assert_same_configs``).
"""

from __future__ import annotations

import json
import sqlite3

from launch import assert_same_configs, decision_logs, rank_results, run_job

DDP_BUCKET = ("allreduce", 20_800)


def _tuning(result: dict, op: str, nbytes: int) -> dict:
    return next(t for t in result["tunings"] if (t["task"][0], t["task"][1]) == (op, nbytes))


def _converged(result: dict) -> None:
    assert result["stopped"] is None and result["converged_at"] is not None
    assert _tuning(result, *DDP_BUCKET)["winner"] is not None


def test_a_rank_slow_to_acknowledge_postpones_the_switch_for_everyone(tmp_path):
    """Rank 1 sleeps past the deadline before rounds 8 and 9: both rounds abort everywhere, the
    trial in flight is re-proposed from later calls, and tuning still converges."""
    run_job("ddp", tmp_path, world=2, iterations=110, store=str(tmp_path / "t.db"), deadline_s=0.5, max_misses=4,
            slow={"1": [8, 9]}, slow_s=1.2)
    results = rank_results(tmp_path, 2)
    assert results[0]["aborted"] >= 2
    _converged(results[0])
    assert_same_configs(decision_logs(tmp_path, 2))


def test_a_leader_that_stops_publishing_leaves_everyone_on_the_last_committed_schedule(tmp_path):
    """The leader's tuning dies after boundary 12 (its process trains on): the workers give up
    after 2 missed rounds with one message and the job finishes on the schedule committed last."""
    run_job("ddp", tmp_path, world=3, iterations=40, store=str(tmp_path / "t.db"), deadline_s=0.4, max_misses=2,
            leader_dead_at=12)
    results = rank_results(tmp_path, 3)
    for worker in results[1:]:
        assert worker["comm_stopped"] == ["the leader published nothing for 2 rounds in a row"]
        assert len(worker["losses"]) == 40
    logs = decision_logs(tmp_path, 3)
    assert_same_configs(logs)
    ddp = sorted((k[3], v) for k, v in logs[1].items() if (k[1], k[2]) == DDP_BUCKET)
    assert len({v for occurrence, v in ddp if occurrence >= 13}) == 1  # nothing changed after the last commit


def test_late_and_lost_measurements_are_waited_for_or_replaced(tmp_path):
    """Every 3rd call's time comes a boundary late and every 7th call's never: trials take the
    time of a later call that ran their config, and tuning converges."""
    run_job("ddp", tmp_path, world=2, iterations=150, store=str(tmp_path / "t.db"),
            clock_faults={"late": 3, "lost": 7})
    results = rank_results(tmp_path, 2)
    assert results[0]["withheld"] > 20
    _converged(results[0])
    assert_same_configs(decision_logs(tmp_path, 2))


def test_a_failing_candidate_falls_back_to_the_default_and_never_runs_again(tmp_path):
    """Candidates on 3, 5 or 6 channels fail (the time source reports inf): each ran in one trial
    only, the next call ran NCCL's default, and the winner is another config."""
    bad = (3, 5, 6)
    run_job("ddp", tmp_path, world=2, iterations=150, store=str(tmp_path / "t.db"),
            clock_faults={"fail_channels": list(bad)})
    results = rank_results(tmp_path, 2)
    _converged(results[0])
    logs = decision_logs(tmp_path, 2)
    assert_same_configs(logs)
    failing = [t for t in results[0]["tunings"] if t["failed"]]
    assert failing
    for tuning in failing:
        assert all(why == "the call failed" and any(f" nc={n} " in c for n in bad) for c, why in tuning["failed"])
        assert not any(f" nc={n} " in tuning["winner"] for n in bad)
        op, nbytes = tuning["task"][:2]
        calls = [v for _, v in sorted((k[3], v) for k, v in logs[0].items() if (k[1], k[2]) == (op, nbytes))]
        for config in {v[:3] for v in calls if v[2] in bad}:
            ran = [i for i, v in enumerate(calls) if v[:3] == config]
            assert ran == list(range(ran[0], ran[-1] + 1)), f"{config} ran again after it failed"
            assert calls[ran[-1] + 1][2] == 0  # the next call: NCCL's own channels (its default)


def test_a_killed_job_resumes_from_its_saved_searches_and_loses_nothing(tmp_path):
    """SIGKILL of the leader at boundary 25; the job launched again on the same store resumes each
    search where it stood (the trials of the first launch are not measured again) and converges."""
    store = tmp_path / "t.db"
    first = run_job("ddp", tmp_path / "first", world=2, iterations=150, store=str(store), kill={"0": 25},
                    expect_ok=False)
    assert first.returncode != 0
    with sqlite3.connect(store) as db:
        before = db.execute("SELECT op, nbytes, algo, proto, nchannels, time_us FROM history WHERE nbytes = ? "
                            "AND op = ? ORDER BY id", (DDP_BUCKET[1], DDP_BUCKET[0])).fetchall()
    state = json.loads((tmp_path / "t.db.live" / "rank0.json").read_text())
    assert 15 < len(before) <= 26 and state
    run_job("ddp", tmp_path / "second", world=2, iterations=150, store=str(store))
    results = rank_results(tmp_path / "second", 2)
    _converged(results[0])
    tuning = _tuning(results[0], *DDP_BUCKET)
    assert tuning["resumed"] >= len(before) - 1  # at most the trial in flight when killed runs again
    assert [t for _, t in tuning["history"][:len(before) - 1]] == [row[5] for row in before[:len(before) - 1]]
    with sqlite3.connect(store) as db:
        after = db.execute("SELECT op, nbytes, algo, proto, nchannels, time_us FROM history WHERE nbytes = ? "
                           "AND op = ? ORDER BY id", (DDP_BUCKET[1], DDP_BUCKET[0])).fetchall()
    assert after[:len(before)] == before and len(after) == tuning["trials"] + (len(before) - tuning["resumed"])
    assert_same_configs(decision_logs(tmp_path / "second", 2))
