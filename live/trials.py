"""One task's tuning on its communicator's leader: which config it should run now, and its times.

A task moves through trials. Its session proposes a config; the leader wants it (the
coordinator commits it from the next call after some boundary, as rule version v); the calls
the plugin logs with version v ran it, and the leader asks the time source for their times.
At the first boundary that has some, their median is the trial's time: the session observes it
(and records it in the store) and proposes the next config. When the session has nothing left
to propose, the winner is wanted for good.

Things go wrong in three ways, none of which stops the job:

* **failure**: the plugin reports that NCCL cannot run the config on this communicator, the
  time source reports ``inf`` (the call failed), or the call took more than ``fail_factor`` ×
  NCCL's default. The trial is observed as failed (``inf``), the config is never run again (not
  even if the search proposes it once more) and the task falls back to NCCL's default for one
  committed round before the next candidate;
* **lost or late times**: the calls ran but no time came; the trial waits, taking a time from
  any later call that ran it, for ``max_wait`` boundaries, then counts as failed;
* **stale**: no call of the task for ``stale_after`` boundaries (DDP's first-iteration buckets,
  an evaluation-only collective): the task wants its best config so far and does not hold up
  the end of tuning; when its calls come back, its trial is committed and measured again.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from typing import Any

from live.clock import TimeSource
from live.schedule import NCCL_DEFAULT, Fields, TaskKey, config_fields
from traces.task import Task
from tuner.config import Config
from tuner.session import TuningResult, TuningSession

__all__ = ["TaskTuning"]


class TaskTuning:
    """The leader's side of tuning one task (see the module docstring)."""

    def __init__(self, key: TaskKey, session: TuningSession, *, comm: str, chunk: bool, first_round: int,
                 fail_factor: float = 10.0, max_wait: int = 5, stale_after: int = 3, interference: float = 0.0):
        self.key = key
        self.session = session
        self.comm = comm
        self.chunk = chunk
        self.fail_factor = fail_factor
        self.max_wait = max_wait
        self.stale_after = stale_after
        self.first_round = first_round
        self.interference = interference
        """Share of the GPU's SMs that compute held while the trials ran (recorded with each)."""
        self.converged_round: int | None = None
        self.result: TuningResult | None = None
        self.failed: list[tuple[Config, str]] = []
        self.lost = 0
        """Calls whose time never came while their trial waited."""
        self.config: Config | None = None
        """The config on trial (``None``: falling back to NCCL's default, or done)."""
        self.version: int | None = None
        """The committed rule version the trial runs under (``None`` until it is committed)."""
        self.done = False
        self.changed = False
        """A trial was observed since the caller last looked (the search's state moved)."""
        self._waiting: list[Any] = []
        self._waited = 0
        self._idle = 0
        self._propose()

    @property
    def task(self) -> Task:
        return self.session.task

    @property
    def stale(self) -> bool:
        return self._idle >= self.stale_after

    @property
    def fields(self) -> Fields:
        """The rule fields the task wants committed now: the trial's; the winner once done; the
        best so far while the task is stale (its trial resumes when its calls come back)."""
        if self.done:
            return self._fields(self.result.winner if self.result else None)
        if self.stale:
            best = self.session.search.best
            return self._fields(best[0] if best else None)
        return self._fields(self.config)

    def _fields(self, config: Config | None) -> Fields:
        return NCCL_DEFAULT if config is None or config == self.session.default else config_fields(
            config, chunk=self.chunk)

    def committed(self, version: int | None) -> None:
        """The coordinator committed this task's wanted fields as rule ``version`` (``None``: the
        trial waits for its rule to be committed again)."""
        self.version = version
        self._waiting.clear()
        self._waited = 0

    def settle(self, i: int) -> None:
        """End tuning now (the task went stale, or tuning stops): keep the best so far if the
        search measured more than NCCL's default, else leave the task to NCCL."""
        if not self.done:
            self._finish(i, winner=self.session.search.trials > 1)

    def boundary(self, i: int, decisions: list[Any], source: TimeSource) -> None:
        """Boundary ``i``: take in this task's ``decisions`` since the last one, time the trial."""
        was_stale = self.stale
        self._idle = 0 if decisions else self._idle + 1
        if self.done:
            return
        if was_stale and decisions:  # back: these calls ran the best so far; the trial runs again
            self.committed(None)
            return
        if self.version is None:
            return
        if self.config is None:  # the fallback to NCCL's default is committed: next candidate
            self._propose(i)
            return
        ran = [d for d in decisions if d.version == self.version]
        if any(d.has("unavailable") for d in ran):
            self._fail(i, "NCCL cannot run it on this communicator (its cost-table entry is -1)")
            return
        wrong = next((d for d in ran if self.applied(d) != self.config), None)
        if wrong is not None:
            self._fail(i, f"the plugin applied {self.applied(wrong)} instead")
            return
        self._waiting += ran
        times, still = [], []
        for d in self._waiting:
            t = source.time_us(self.task, self.config, d)
            (still if t is None else times).append(d if t is None else t)
        self._waiting = still
        if times:
            self._measured(i, statistics.median(times))
        elif self._waiting or self._waited:
            self._waited += 1
            if self._waited > self.max_wait:
                self.lost += len(self._waiting)
                self._fail(i, f"no time arrived for its calls in {self.max_wait} boundaries")

    def applied(self, decision: Any) -> Config:
        """The config a logged call ran with: what NCCL took from the table, and NCCL's own
        values for what the plugin left to it."""
        d = self.session.default
        if decision.algo is None:
            return d
        return replace(d, algo=decision.algo, proto=decision.proto, nchannels=decision.nchannels or d.nchannels,
                       chunk_bytes=decision.chunk_bytes or d.chunk_bytes)

    # ---- the session ----------------------------------------------------------------------

    def _measured(self, i: int, time_us: float) -> None:
        reference = self.session.search.score(self.session.default)
        if not math.isfinite(time_us):
            self._fail(i, "the call failed")
        elif math.isfinite(reference) and time_us > self.fail_factor * reference:
            self._fail(i, f"it took {time_us:.1f} us, over {self.fail_factor:g} x NCCL's default ({reference:.1f} us)")
        else:
            self.session.observe(self.config, time_us, timestamp=time.time(), interference=self.interference)
            self.changed = True
            self._propose(i)

    def _fail(self, i: int, why: str) -> None:
        self.failed.append((self.config, why))
        self.session.observe(self.config, math.inf)
        self.changed = True
        fallback_needed = self.fields != NCCL_DEFAULT
        self.config = None
        self.version = None
        if not fallback_needed:
            self._propose(i)

    def _propose(self, i: int | None = None) -> None:
        banned = {c for c, _ in self.failed}
        while (config := self.session.propose()) in banned:
            self.session.observe(config, math.inf)
        if config is None:
            self._finish(self.first_round if i is None else i)
            return
        self.config = config
        self.version = None
        self._waiting.clear()
        self._waited = 0

    def _finish(self, i: int, *, winner: bool = True) -> None:
        self.done = True
        self.config = None
        self.converged_round = i
        self.result = self.session.result() if winner and self.session.search.best is not None else None
