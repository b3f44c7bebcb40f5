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
