"""Warm start from a plan, apply mode, and what ``live.enable`` refuses.

The jobs are tests/live/jobs.py's DDP job on 2 gloo ranks with the twin's executor as time
source; the first starts from a warm-start plan, the second applies its store's winners.
"""

from __future__ import annotations

import pytest
from launch import assert_same_configs, decision_logs, rank_results, run_job

from live.errors import LiveError
from live.session import settings_from
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.plan import Plan, PlanEntry, RankedSubspace, save_plan
from tuner.process_knobs import ProcessSettings
from tuner.store import Store

BUCKET = Task(Op.ALLREDUCE, 20_800, 2, "float32", "dp")
"""DDP's bucket as a plan names it (by its group's name; the job names it by its shape, 2x1)."""
PLAN_BEST = Config(Algo.RING, Proto.LL128, Transport.P2P, 12, 512, 32_768)


def _plan() -> Plan:
    ranked = (RankedSubspace(config=PLAN_BEST, time_us=6.0),
              RankedSubspace(config=Config(Algo.RING, Proto.LL, Transport.P2P, 20, 512, 32_768), time_us=6.5))
    entry = PlanEntry(task=BUCKET, ranked=ranked,
                      default=RankedSubspace(config=Config(Algo.RING, Proto.LL, Transport.P2P, 2, 512, 32_768),
                                             time_us=8.0))
    return Plan(cluster="dgx-h100:8x1", nccl_version="2.28.9", created_by="test", entries=(entry,),
                process=ProcessSettings(nthreads=256))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    save_plan(_plan(), folder / "plan.json")
    run_job("ddp", folder, world=2, iterations=110, store=str(folder / "t.db"), plan=str(folder / "plan.json"))
    return folder


def test_a_plan_warm_starts_the_search_at_its_predicted_best(warm):
    (tuning,) = [t for t in rank_results(warm, 2)[0]["tunings"] if t["task"][:2] == ["allreduce", 20_800]]
    assert tuning["history"][0][0].startswith("ring/ll/p2p nc=2 ")  # NCCL's default first
    assert tuning["history"][1][0].startswith("ring/ll128/p2p nc=12 ")  # then the plan's best
    assert tuning["winner"] is not None
    env = (warm / "t.db.nccl.env").read_text()
    assert "NCCL_NTHREADS=256" in env  # the plan's per-process knobs for the next launch


def test_apply_mode_runs_the_stores_winners_without_tuning(warm, tmp_path):
    with Store(warm / "t.db", create=False) as store:
        rows = store.count()
        winner = store.bests(task=Task(Op.ALLREDUCE, 20_800, 2, "float32", "2x1"))[0].config
    run_job("ddp", tmp_path, world=2, iterations=20, store=str(warm / "t.db"), mode="apply")
    results = rank_results(tmp_path, 2)
    assert results[0]["tunings"] == [] and results[0]["converged_at"] is not None
    logs = decision_logs(tmp_path, 2)
    assert_same_configs(logs)
    bucket = [v for k, v in sorted(logs[0].items(), key=lambda kv: kv[0][3]) if k[1:3] == ("allreduce", 20_800)]
    assert bucket[0][:3] == ("ring", "ll", 0)  # iteration 0 runs before the first boundary: NCCL's own
    assert {v[:3] for v in bucket[1:]} == {(winner.algo.value, winner.proto.value, winner.nchannels)}
    with Store(warm / "t.db", create=False) as store:
        assert store.count() == rows


@pytest.mark.parametrize(("options", "message"), [
    ({"mode": "train"}, "mode must be one of tune, apply, got 'train'"),
    ({"search": "random"}, "a live job runs one of the searches ours, autoccl, default"),
    ({"budget": 0}, "budget is trials per task, at least 1; got 0"),
    ({"mode": "apply", "store": "missing.db"}, "missing.db: no such store to apply winners from"),
    ({"plan": "missing-plan.json"}, "missing-plan.json: cannot read the plan"),
])
def test_enable_refuses_bad_options_with_one_clear_line(options, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    defaults = {"plan": None, "store": "ccltwin.db", "search": "ours", "budget": None, "mode": "tune"}
    with pytest.raises(LiveError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings_from(**{**defaults, **options})
