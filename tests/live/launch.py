"""Run a multi-process gloo job of tests/live/jobs.py in a subprocess and read what each rank wrote.

pytest's own process never imports torch: ``run_job("coordinator", tmp_path, world=3, ...)``
starts ``python tests/live/jobs.py coordinator DIR JSON`` which forks the ranks (torch is
imported once, before the fork); each rank writes ``DIR/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).with_name("jobs.py")
ROOT = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 240


def job_env(**extra: str) -> dict[str, str]:
    """The environment of a job: this checkout first on the path, no inherited NCCL or torchrun settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCHELASTIC_", "CCLTWIN_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**env, **extra}


def run_job(scenario: str, folder: Path, *, world: int, expect_ok: bool = True, env: dict[str, str] | None = None,
            **params) -> subprocess.CompletedProcess:
    """Run ``scenario`` on ``world`` ranks with ``params``; asserts it exited 0 unless ``expect_ok`` is False."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, str(JOBS), scenario, str(folder), json.dumps({"world": world, **params})],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=job_env(**(env or {})))
    if expect_ok:
        assert done.returncode == 0, f"{scenario} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done


def rank_results(folder: Path, world: int) -> list[dict]:
    """What each rank wrote, rank 0 first."""
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)]


def decision_logs(folder: Path, world: int, name: str = "decisions{rank}.jsonl") -> list[dict[tuple, tuple]]:
    """Each rank's plugin decisions: (comm, op, bytes, occurrence) → (algo, proto, channels, chunk, version)."""
    logs = []
    for rank in range(world):
        log: dict[tuple, tuple] = {}
        for line in (folder / name.format(rank=rank)).read_text().splitlines():
            d = json.loads(line)
            key = (d["comm"], d["op"], d["nbytes"], d["occurrence"])
            assert key not in log, f"rank {rank} decided occurrence {key} twice"
            log[key] = (d["algo"], d["proto"], d["nchannels"], d["chunk_bytes"], d["version"])
        logs.append(log)
    return logs


def assert_same_configs(logs: list[dict[tuple, tuple]], *, same_calls: bool = True) -> None:
    """Every call index that several ranks decided got the same config on all of them (and, with
    ``same_calls``, every rank decided the same calls); each rank's occurrences count from 0 up."""
    for rank, log in enumerate(logs):
        per_task: dict[tuple, list[int]] = {}
        for comm, op, nbytes, occurrence in log:
            per_task.setdefault((comm, op, nbytes), []).append(occurrence)
        for task, occurrences in per_task.items():
            assert sorted(occurrences) == list(range(len(occurrences))), f"rank {rank}: {task} skips occurrences"
    if same_calls:
        assert all(log.keys() == logs[0].keys() for log in logs), "the ranks decided different calls"
    for key in set().union(*logs):
        configs = {log[key] for log in logs if key in log}
        assert len(configs) == 1, f"call {key} ran {configs} on different ranks"
