"""The live job as a tuning executor, and the saved search states that let a killed job resume.

A :class:`tuner.session.TuningSession` drives any executor; the live one cannot time a config on
demand — its measurements are calls of the running job, timed at iteration boundaries — so the
leader drives the session with ``propose`` / ``observe`` (``live.trials``) and
:class:`LiveExecutor` supplies the rest: the knob tiers a running job can change (per call), the
cluster identity, the communicator's facts and NCCL's own choice (from the time source).

Every trial lands in the store as it is observed, and the search's whole state
(``Search.state_dict``) is saved after it in ``<store>.live/rank<r>.json`` (atomically), so a job
killed at any point and launched again resumes each task's search where it stood. Without a
state file the session replays the store's trials of the task instead (``TuningSession.resume``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from live.clock import TimeSource
from live.errors import LiveError
from traces.task import Task
from traces.trace_file import write_atomic
from tuner.codec import task_to_dict
from tuner.config import Config
from tuner.executor import space_for
from tuner.knobs import Tier
from tuner.plan import Plan
from tuner.rules import CommFacts
from tuner.search import USES_WARM_START, SearchStateError, resume
from tuner.session import TuningSession, search_for
from tuner.store import Store

__all__ = ["LiveExecutor", "SearchStates", "open_session"]

SEARCHES = ("ours", "autoccl", "default")
"""The searches a live job runs: those that measure NCCL's default first (a live executor cannot
time the default on demand afterwards)."""


class LiveExecutor:
    """Configs of the running job, changed per call by the tuner plugin (see the module docstring)."""

    tiers = frozenset({Tier.PER_CALL})

    def __init__(self, source: TimeSource, hardware: str):
        self.source = source
        self.hardware = hardware
        self.nccl_version = tuple(source.nccl_version)

    def facts(self, task: Task) -> CommFacts:
        return self.source.facts(task)

    def default_config(self, task: Task) -> Config:
        return self.source.default_config(task)

    def measure(self, task: Task, config: Config) -> float:
        raise LiveError("a live job's measurements arrive at iteration boundaries; drive its tuning session "
                        "with propose and observe (live.trials), not run")

    def resumed(self, task: Task, config: Config) -> None:
        """Tell a time source that counts measurements (the twin's, in CI) about one taken before."""
        note = getattr(getattr(self.source, "executor", None), "resumed", None)
        if note is not None:
            note(task, config)


class SearchStates:
    """The saved search state of every task one rank leads (one JSON file, rewritten atomically)."""

    def __init__(self, store_path: str | Path, rank: int):
        self.path = Path(f"{store_path}.live") / f"rank{rank}.json"
        self._states: dict[str, Any] = {}
        if self.path.is_file():
            try:
                self._states = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise LiveError(f"{self.path}: cannot read the saved search states ({err}); move it away to "
                                "start tuning over") from None
            if not isinstance(self._states, dict):
                raise LiveError(f"{self.path}: not a file of saved search states")

    @staticmethod
    def key(hardware: str, task: Task, comm: str, search: str) -> str:
        return json.dumps([hardware, task_to_dict(task), comm, search], sort_keys=True)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._states.get(key)

    def put(self, key: str, state: dict[str, Any]) -> None:
        self._states[key] = state

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, [json.dumps(self._states)])


def open_session(executor: LiveExecutor, task: Task, *, search: str, seed: int, budget: int | None,
                 plan: Plan | None, store: Store | None, saved: dict[str, Any] | None,
                 log) -> TuningSession:
    """A tuning session for ``task``: its search resumed from ``saved`` (a ``state_dict``) when it
    still fits the task's space, else new (warm-started from ``plan``'s entry for the task) and
    fed the store's trials of the task."""
    session = None
    if saved is not None:
        try:
            found = resume(space_for(executor, task), saved)
        except SearchStateError as err:
            log(f"ccltwin live: {task.op} {task.nbytes} B: the saved search does not fit ({err}); starting it over")
        else:
            session = TuningSession(executor, task, found, store=store, source="live")
            for config, _ in found.history:
                executor.resumed(task, config)
            session.resumed = found.trials
    if session is None:
        entry = plan.find(task) if plan is not None else None
        warm = entry.warm_start() if entry is not None and search in USES_WARM_START else None
        session = TuningSession(executor, task,
                                search_for(executor, task, search, seed=seed, warm_start=warm, max_trials=budget),
                                store=store, source="live")
        session.resume()
    return session
