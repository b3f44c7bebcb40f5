"""live.coordinator on real gloo jobs: every rank applies the same config at every call index.

Each job runs rounds over the job's real c10d TCPStore on 3 forked ranks; the leader wants a new
config every round. The call-by-call configs each rank applied (by the plugin's rule: the
largest from-occurrence at or below the call) must be identical on all ranks, whatever the
faults: a rank that sleeps past the deadline, a leader that stops publishing.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from launch import rank_results, run_job

from live.schedule import Rule, TaskKey, rules_from_json, rules_to_json
from traces.task import Op
from tuner.config import Algo, Proto

WORLD = 3


def _same_everywhere(results: list[dict]) -> None:
    applied = [r["applied"] for r in results]
    assert all(a == applied[0] for a in applied), "ranks applied different configs at the same call index"
    committed = [[o for o in r["outcomes"] if o[1] == "commit"] for r in results]
    assert all(c == committed[0] for c in committed)


def test_rounds_commit_and_every_rank_switches_at_the_same_call(tmp_path):
    run_job("coordinator", tmp_path, world=WORLD, rounds=12, calls=3, deadline_s=5.0, final_at=11)
    results = rank_results(tmp_path, WORLD)
    _same_everywhere(results)
    assert [o[1] for o in results[0]["outcomes"]] == ["commit"] * 12
    # the rule of round i takes effect at the first call after boundary i: 3 calls per round
    firsts = [o[2][0]["from"] for o in results[0]["outcomes"]]
    assert firsts == [3 * (i + 1) for i in range(12)]
    assert all(r["final"] for r in results)
    assert len({tuple(a) for a in results[0]["applied"]}) > 3


def test_a_slow_rank_postpones_the_switch_for_everyone(tmp_path):
    """Rank 2 sleeps past the deadline before rounds 3 and 4: those rounds abort on every rank
    and the leader's wish is re-proposed, from later occurrences, at round 5."""
    run_job("coordinator", tmp_path, world=WORLD, rounds=9, calls=2, deadline_s=0.4, slow_s=1.0,
            slow={"2": [3, 4]})
    results = rank_results(tmp_path, WORLD)
    _same_everywhere(results)
    outcomes = [[o[1] for o in r["outcomes"]] for r in results]
    assert all(o == outcomes[0] for o in outcomes)
    assert outcomes[0][3:5] == ["abort", "abort"] and outcomes[0].count("commit") == 7
    assert results[0]["stopped"] is None


def test_a_leader_that_stops_leaves_the_last_committed_schedule_everywhere(tmp_path):
    """The leader stops publishing after round 4: the workers give up after 2 missed rounds with
    a message, tuning stops and every rank keeps the schedule committed up to round 3."""
    run_job("coordinator", tmp_path, world=WORLD, rounds=10, calls=2, deadline_s=0.3, max_misses=2,
            leader_stops_at=4)
    results = rank_results(tmp_path, WORLD)
    _same_everywhere(results)
    for worker in results[1:]:
        assert "the leader published nothing for 2 rounds in a row" in worker["stopped"]
        assert [o[1] for o in worker["outcomes"]][:6] == ["commit"] * 4 + ["abort", "abort"]
        assert len(worker["messages"]) == 1
    assert results[0]["applied"][-1] == results[0]["applied"][8]  # nothing changed after the last commit


@given(st.lists(st.builds(
    Rule, st.builds(TaskKey, st.integers(0, 2**64 - 1), st.sampled_from(list(Op)), st.integers(0, 2**64 - 1)),
    st.integers(0, 2**63), st.tuples(st.none() | st.sampled_from(list(Algo)), st.none() | st.sampled_from(list(Proto)),
                                     st.integers(0, 64), st.integers(0, 2**40)), st.integers(1, 2**32 - 1))))
def test_rules_travel_through_the_store_unchanged(rules):
    assert rules_from_json(json.loads(json.dumps(rules_to_json(rules)))) == rules
