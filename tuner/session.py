"""One tuning session: propose → measure → observe → record, over any executor.

Picture the live tuner's leader at an iteration boundary: it asks the session for the next
config (``propose``), installs it on every rank, and a few iterations later hands back the time
it measured (``observe``), which tells the search and lands in the store. The twin's executor
answers at once, so ``run`` does the same in a loop. A session first feeds its search the trials
the store already holds for its task (``resume``), so a restarted job goes on where it stopped
instead of measuring them again; it ends when the search is done or its budget (the search's
``max_trials``) is spent, and ``result`` gives the winner against NCCL's default and records it
as the store's best.

A failed run (a candidate that errors or times out) is observed as ``math.inf``: the search
never picks it, and the store, which holds times, gets no row for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traces.task import Task
from tuner.config import Config, ConfigError
from tuner.executor import Executor, Resumable, space_for
from tuner.measurement import Measurement
from tuner.search import Search, make_search
from tuner.search.base import fastest_share_mean
from tuner.store import Store

__all__ = ["DEFAULT_REPEATS", "TuningResult", "TuningSession", "search_for"]

DEFAULT_REPEATS = 3
"""Measurements of NCCL's default behind ``TuningResult.default_us`` when the search took none."""


@dataclass(frozen=True)
class TuningResult:
    """The winner of a session and NCCL's default, as measured by its executor."""

    task: Task
    search: str
    """The search's name (``tuner.search.SEARCHES``)."""
    winner: Config
    time_us: float
    """The winner's score: the mean of its fastest 75 % of samples (``fastest_share_mean``)."""
    default: Config
    """NCCL's own config for the task."""
    default_us: float
    """The default's score, from the search's samples or ``DEFAULT_REPEATS`` measurements."""
    trials: int
    """Trials the search observed, resumed ones included."""
    found_at: int
    """The trial (from 1) that first measured the winner."""
    resumed: int
    """Trials fed back from the store instead of measured again."""
    stopped_by_budget: bool
    """Whether the search's ``max_trials`` ended it (rather than the search itself)."""

    @property
    def speedup(self) -> float:
        """How many times faster the winner is than NCCL's default."""
        return self.default_us / self.time_us


def search_for(executor: Executor, task: Task, name: str, *, seed: int = 0,
               warm_start: list[tuple[Config, float]] | None = None, max_trials: int | None = None,
               **params: Any) -> Search:
    """The search ``name`` over the configs of ``task`` that ``executor`` can change, told NCCL's
    default (the searches that start from it) and ``warm_start`` (a plan entry's ranked subspaces)."""
    return make_search(name, space_for(executor, task), seed=seed, default=executor.default_config(task),
                       warm_start=warm_start, max_trials=max_trials, **params)


class TuningSession:
    """Tune ``task`` with ``search`` on ``executor``, recording every trial in ``store`` (if any)
    as a measurement from ``source``; ``default`` is NCCL's config (asked of the executor when
    not given)."""

    def __init__(self, executor: Executor, task: Task, search: Search, *, store: Store | None = None,
                 source: str = "twin", default: Config | None = None):
        self.executor = executor
        self.task = task
        self.search = search
        self.store = store
        self.source = source
        self.default = default if default is not None else executor.default_config(task)
        self.resumed = 0
        """Trials fed back from the store so far."""
        self._default_samples: list[float] | None = None

    def resume(self) -> int:
        """Feed the search, in order, the stored trials of this task, hardware and source that it
        would propose next; how many. A stored trial it would not propose is passed over."""
        if self.store is None:
            return 0
        n = 0
        for m in self.store.history(self.task, hardware=self.executor.hardware):
            if m.source != self.source or m.config is None:
                continue
            config = self.search.propose()
            if config is None:
                break
            if m.config == config:
                self.search.observe(config, m.time_us)
                if isinstance(self.executor, Resumable):
                    self.executor.resumed(self.task, config)
                n += 1
        self.resumed += n
        return n

    def propose(self) -> Config | None:
        """The next config to measure; ``None`` when the search is done or its budget spent."""
        return self.search.propose()

    def observe(self, config: Config, time_us: float, **fields: Any) -> Measurement | None:
        """Tell the search the time of the config ``propose`` returned and record it in the store
        (``fields``: more ``Measurement`` fields, e.g. ``interference``); the measurement, or
        ``None`` for a failed run (``math.inf``), which the search learns and the store does not."""
        measurement = None
        if math.isfinite(time_us):
            measurement = self._measurement(config, time_us, **{"occurrence": self.search.trials, **fields})
        self.search.observe(config, time_us)
        if measurement is not None and self.store is not None:
            self.store.add(measurement)
        return measurement

    def run(self, on_trial: Callable[[int, Config, float, tuple[Config, float] | None], None] | None = None
            ) -> TuningResult:
        """Propose, measure with the executor and observe until the search is done; ``on_trial``
        hears (trial, config, time, best so far) after each. Returns ``result()``."""
        while (config := self.propose()) is not None:
            time_us = self.executor.measure(self.task, config)
            self.observe(config, time_us)
            if on_trial is not None:
                on_trial(self.search.trials, config, time_us, self.search.best)
        return self.result()

    def result(self) -> TuningResult:
        """The winner so far against NCCL's default, also recorded as the store's best of the task
        (``Store.set_best``: measured sources only); ``ConfigError`` when every trial failed.

        NCCL's default is scored from the search's samples of it, or measured ``DEFAULT_REPEATS``
        times (once per session) when the search took none.
        """
        if self.search.best is None:
            raise ConfigError(f"{self.task.op} {self.task.nbytes} B: every trial failed")
        winner, time_us = self.search.best
        budget = self.search.max_trials
        result = TuningResult(
            task=self.task, search=self.search.name, winner=winner, time_us=time_us, default=self.default,
            default_us=fastest_share_mean(self._default_samples_now()), trials=self.search.trials,
            found_at=next(i for i, (c, _) in enumerate(self.search.history, 1) if c == winner),
            resumed=self.resumed, stopped_by_budget=budget is not None and self.search.trials >= budget)
        if self.store is not None:
            self.store.set_best(self._measurement(winner, time_us))
        return result

    def _measurement(self, config: Config, time_us: float, **fields: Any) -> Measurement:
        return Measurement(task=self.task, config=config, time_us=time_us, source=self.source,
                           hardware=self.executor.hardware, nccl_version=".".join(map(str, self.executor.nccl_version)),
                           **fields)

    def _default_samples_now(self) -> list[float]:
        samples = self.search.samples.get(self.default)
        if samples:
            return samples
        if self._default_samples is None:
            self._default_samples = [self.executor.measure(self.task, self.default) for _ in range(DEFAULT_REPEATS)]
        return self._default_samples
