"""``live.enable``: tune the job's collectives at its iteration boundaries, on every rank alike.

Add one line to a training script, before or after ``init_process_group``::

    live.enable()                       # or: with live.enable(plan="plan.json"): train()

Every optimizer step (PyTorch's global step hook, whichever optimizer) then ends an iteration;
a script without an optimizer calls ``live.step()`` instead (the first explicit call turns the
hook off). At each boundary, on every rank (``Live.step``):

1. read the calls the job issued since the last boundary and the config each ran with
   (``live.observe``: the tuner plugin's decision log; on gloo the flight recorder's calls put
   through the same plugin);
2. for each communicator, in the same order everywhere: its leader (communicator rank 0) times
   its tasks' trials, tells their tuning sessions, records every trial in the store, saves the
   searches' states and wants the next configs (``live.trials``); then all members run one round
   of the schedule protocol (``live.coordinator``) and install what it committed into the plugin;
3. once every task has a winner (or stopped appearing) and no new one came for a few boundaries,
   a final round fixes the winners for the rest of the run, the leader writes the recommendation
   for the next launch and prints the summary (``live.recommend``), and boundaries cost nothing.

``mode="apply"`` skips tuning: the leader publishes the store's winners for the tasks it sees.
Nothing here ever stops the job: a problem stops tuning with one message (``LiveError``) and the
committed schedule stays in force. ``CCLTWIN_LIVE=0`` in the environment turns ``enable`` off.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from live.clock import ExecutorClock, TimeSource
from live.coordinator import Coordinator
from live.errors import LiveError
from live.executor import SEARCHES, LiveExecutor, SearchStates, open_session
from live.hardware import job_hardware
from live.observe import CommView, key_of
from live.recommend import TaskSummary, summary, write
from live.schedule import NCCL_DEFAULT, Fields, TaskKey, config_fields, install
from live.trials import TaskTuning
from traces.errors import CcltwinError
from tuner.config import ConfigError
from tuner.knobs import Knob, changeable_knobs
from tuner.plan import Plan, PlanError, load_plan
from tuner.store import Store, StoreError

__all__ = ["MODES", "Live", "Settings"]

MODES = ("tune", "apply")
QUIET_BOUNDARIES = 3
"""Boundaries without a new task before tuning may end (DDP re-buckets after its first iteration)."""
MAX_TASKS = 256
"""Tasks tuned per communicator at most (the plugin keeps two rules per task)."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What ``live.enable`` was asked to do (see ``live.enable`` for each field)."""

    plan: Plan | None = None
    store: str = "ccltwin.db"
    search: str = "ours"
    budget: int | None = None
    mode: str = "tune"
    hardware: str | None = None
    seed: int = 0
    min_bytes: int = 0
    deadline_s: float = 10.0
    max_misses: int = 3
    fail_factor: float = 10.0
    max_wait: int = 5
    decision_log: str | None = None
    quiet: bool = False
    interference: float = 0.0
    keep_open: bool = False


@dataclass
class BoundaryStats:
    """What one boundary cost this rank."""

    boundary: int
    seconds: float
    """Wall time spent in live tuning at the boundary."""
    calls: int
    """Calls observed since the previous boundary."""
    slower_us: float
    """Leader: how much longer the calls timed at this boundary took than NCCL's default would have."""


class Live:
    """One process's live tuning (see the module docstring); made by ``live.enable``."""

    def __init__(self, settings: Settings, *, clock: Any = None):
        self.settings = settings
        self.clock = clock
        self.boundaries = 0
        self.stats: list[BoundaryStats] = []
        self.stopped: str | None = None
        self.finished = False
        self.hardware = ""
        self._ready = False
        self._hook: Any = None
        self._plugin: Any = None
        self._observer: Any = None
        self._source: TimeSource | None = None
        self._executor: LiveExecutor | None = None
        self._store: Store | None = None
        self._states: SearchStates | None = None
        self._coordinators: dict[int, Coordinator] = {}
        self._tunings: dict[int, dict[TaskKey, TaskTuning]] = defaultdict(dict)
        self._applied: dict[int, dict[TaskKey, Fields]] = defaultdict(dict)
        self._counts: dict[TaskKey, int] = {}
        self._untuned: set[TaskKey] = set()
        self._last_new: dict[int, int] = {}
        self._said: set[str] = set()
        self._log_file: Any = None
        self._reported_trials = -1
        self.converged_at: int | None = None
        """The boundary at which the last communicator's schedule became final (or tuning stopped)."""

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self, launch_epoch: int) -> Live:
        """Hook the optimizer step, point NCCL at the plugin, and finish at exit."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._launch = f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}.{launch_epoch}"
        if torch.cuda.is_available():
            from live.plugin import install_env

            install_env()
        self._hook = register_optimizer_step_post_hook(lambda optimizer, args, kwargs: self._boundary())
        atexit.register(self.close)
        return self

    def __enter__(self) -> Live:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def step(self) -> None:
        """End an iteration explicitly (every rank at the same point); turns the optimizer hook off."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
            self._say("live.step() marks the iterations from now on (the optimizer-step hook is off)")
        self._boundary()

    def close(self) -> None:
        """Stop at the current schedule (it stays in force), write the recommendation, print the summary."""
        if self.finished:
            return
        self.finished = True
        atexit.unregister(self.close)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        for t in self.tasks():
            t.settle(self.boundaries)
        self._save_states(force=True)
        self._report(closing=True)
        if self._log_file is not None:
            self._log_file.close()
        if self._store is not None:
            self._store.close()

    def time_source(self) -> TimeSource:
        """Where this job's times come from (setting live tuning up now if no boundary has yet)."""
        self._setup()
        return self._source

    def tasks(self) -> list[TaskTuning]:
        """The tasks this rank leads, in the order it met them (empty on a rank that leads nothing)."""
        return [t for ts in self._tunings.values() for t in ts.values()]

    # ---- one boundary -------------------------------------------------------------------------

    def _boundary(self) -> None:
        i = self.boundaries
        self.boundaries += 1
        if self.finished or self.stopped is not None or not self._dist_ready():
            return
        started = time.perf_counter()
        slower = 0.0
        calls = 0
        try:
            self._setup()
            if self.converged_at is not None and self.settings.decision_log is None and self._observer.quiet():
                self.stats.append(BoundaryStats(i, time.perf_counter() - started, 0, 0.0))
                return  # converged: the plugin applies the final schedule; nothing to read
            decisions = self._observer.poll()
            calls = len(decisions)
            self._log_decisions(decisions)
            per_comm: dict[int, list[Any]] = defaultdict(list)
            for d in decisions:
                key = key_of(d)
                self._counts[key] = max(self._counts.get(key, 0), d.occurrence + 1)
                per_comm[d.comm].append(d)
            for comm in sorted(self._observer.views.by_comm):
                slower += self._round(i, self._observer.views.by_comm[comm], per_comm.get(comm, []))
            if self.converged_at is None and self._coordinators and not any(
                    c.active for c in self._coordinators.values()):
                self.converged_at = i
        except CcltwinError as err:  # a LiveError, a store that fails, a flight recorder missing
            self._stop(str(err))
            self.converged_at = i
        self.stats.append(BoundaryStats(i, time.perf_counter() - started, calls, slower))

    def _round(self, i: int, view: CommView, decisions: list[Any]) -> float:
        coord = self._coordinators.get(view.comm)
        if coord is None:
            import torch.distributed as dist

            coord = self._coordinators[view.comm] = Coordinator(
                self._c10d_store, comm=view.comm, rank=view.rank, nranks=view.nranks, launch=self._launch,
                deadline_s=self.settings.deadline_s, max_misses=self.settings.max_misses, log=self._say,
                timeout_error=dist.DistStoreError, store_errors=(dist.DistError,))
            self._last_new[view.comm] = i
        if not coord.active:
            return 0.0
        slower, final = 0.0, False
        if coord.leader:
            slower, final = (self._tune if self.settings.mode == "tune" else self._apply)(i, view, coord, decisions)
        result = coord.exchange(i, {k: n for k, n in self._counts.items() if k.comm == view.comm}, final=final)
        for rule in result.installed:
            install(self._plugin, rule)
        if coord.final and coord.leader:
            self._say(f"communicator {view.label} ({view.comm:#x}): tuning converged at boundary {i}; "
                      "the winners stay applied for the rest of the run")
            self._report()
        return slower

    def _tune(self, i: int, view: CommView, coord: Coordinator, decisions: list[Any]) -> tuple[float, bool]:
        """The leader's part: time trials, tell sessions, want next configs; whether tuning may end."""
        tunings = self._tunings[view.comm]
        by_key: dict[TaskKey, list[Any]] = defaultdict(list)
        for d in decisions:
            by_key[key_of(d)].append(d)
        for key in by_key:
            if (key not in tunings and key not in self._untuned and self._tunable(key, view, tunings)
                    and self._source.ready(self._observer.task(key))):
                tuning = self._open(i, key, view)
                if tuning is not None:
                    tunings[key] = tuning
                    self._last_new[view.comm] = i
        slower = 0.0
        for key, t in tunings.items():
            self._sync(coord, t)
            reference = t.session.search.score(t.session.default)
            before = len(t.session.search.history)
            t.boundary(i, by_key.get(key, []), self._source)
            for _, time_us in t.session.search.history[before:]:
                if math.isfinite(time_us) and math.isfinite(reference):
                    slower += time_us - reference
            self._sync(coord, t)
        quiet = i - self._last_new[view.comm] >= QUIET_BOUNDARIES
        final = (not self.settings.keep_open and bool(tunings) and quiet
                 and all(t.done or t.stale for t in tunings.values()))
        if final:
            for t in tunings.values():
                t.settle(i)
        for key, t in tunings.items():
            coord.want(key, t.fields)
        self._save_states()
        return slower, final

    def _apply(self, i: int, view: CommView, coord: Coordinator, decisions: list[Any]) -> tuple[float, bool]:
        """The leader in apply mode: want the store's winner of every task seen; end when quiet."""
        applied = self._applied[view.comm]
        for d in decisions:
            key = key_of(d)
            if key in applied:
                continue
            self._last_new[view.comm] = i
            task = self._observer.task(key)
            winners = sorted((m for m in self._store.bests(hardware=self.hardware, task=task) if m.config),
                             key=lambda m: m.time_us)
            applied[key] = NCCL_DEFAULT
            if winners:
                applied[key] = config_fields(winners[0].config, chunk=self._chunk_per_call)
                coord.want(key, applied[key])
            else:
                self._say(f"no winner for {task.op} {task.nbytes} B on {task.nranks} ranks ({task.group}) on "
                          f"{self.hardware} in {self.settings.store}: NCCL's default stays")
        return 0.0, (not self.settings.keep_open and bool(applied)
                     and i - self._last_new[view.comm] >= QUIET_BOUNDARIES)

    def _sync(self, coord: Coordinator, t: TaskTuning) -> None:
        """Start the trial of ``t`` when what it wants is what is committed (a repeat, or NCCL's
        default before any rule)."""
        fields, version = coord.committed_fields(t.key)
        if t.version is None and not t.done and fields == t.fields:
            t.committed(version)

    def _tunable(self, key: TaskKey, view: CommView, tunings: dict[TaskKey, TaskTuning]) -> bool:
        if key.nbytes < self.settings.min_bytes:
            return False
        if len(tunings) >= MAX_TASKS:
            self._say(f"communicator {view.label}: more than {MAX_TASKS} tasks; the others keep NCCL's default")
            return False
        return True

    def _open(self, i: int, key: TaskKey, view: CommView) -> TaskTuning | None:
        task = self._observer.task(key)
        states = self._states_file()
        saved = states.get(states.key(self.hardware, task, view.label, self.settings.search))
        try:
            session = open_session(self._executor, task, search=self.settings.search, seed=self.settings.seed,
                                   budget=self.settings.budget, plan=self.settings.plan, store=self._open_store(),
                                   saved=saved, log=self._say)
        except ConfigError as err:
            self._untuned.add(key)
            self._say(f"{task.op} {task.nbytes} B on {view.label} is not tuned: {err}")
            return None
        if session.resumed:
            self._say(f"{task.op} {task.nbytes} B on {view.label}: resumed with {session.resumed} trials")
        return TaskTuning(key, session, comm=view.label, chunk=self._chunk_per_call, first_round=i,
                          fail_factor=self.settings.fail_factor, max_wait=self.settings.max_wait,
                          interference=self.settings.interference)

    # ---- setup --------------------------------------------------------------------------------

    @staticmethod
    def _dist_ready() -> bool:
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()

    def _setup(self) -> None:
        if self._ready:
            return
        import torch
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        from live.observe import GlooObserver, local_world_size
        from live.plugin.binding import Plugin

        self._c10d_store = distributed_c10d._get_default_store()
        self._plugin = Plugin.load()
        nccl = dist.get_backend() == "nccl"
        source = self.clock
        if source is not None and not hasattr(source, "time_us"):
            source = ExecutorClock(source)
        local_world = local_world_size()
        if source is None:
            if not nccl:
                raise LiveError(f"the job runs on {dist.get_backend()}, not NCCL: nothing to tune; CI passes a time "
                                "source (live.enable(clock=TwinExecutor(...)))")
            from live.nccl import report_once
            from live.nccl_source import NcclObserver, NcclSource

            info = report_once()
            if info.tuner_abi is None:
                raise LiveError(info.summary())
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            source = NcclSource(self._plugin, info.version, sm_count=props.multi_processor_count,
                                sm_version=props.major * 10 + props.minor)
            self._observer = NcclObserver(self._plugin, source, say=self._say)
        else:
            self._observer = GlooObserver(self._plugin, source, local_world=local_world)
        self._source = source
        self.hardware = job_hardware(
            hardware=self.settings.hardware, source_hardware=source.hardware, plan=self.settings.plan,
            world=dist.get_world_size(), local_world=local_world,
            device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
        self._executor = LiveExecutor(source, self.hardware)
        self._chunk_per_call = Knob.CHUNK_BYTES in changeable_knobs(source.nccl_version, self._executor.tiers)
        if self.settings.mode == "apply":
            self._open_store()
        self._ready = True

    def _open_store(self) -> Store:
        if self._store is None:
            try:
                self._store = Store(self.settings.store, create=self.settings.mode == "tune")
            except StoreError as err:
                raise LiveError(str(err)) from None
        return self._store

    def _states_file(self) -> SearchStates:
        if self._states is None:
            import torch.distributed as dist

            self._states = SearchStates(self.settings.store, dist.get_rank())
        return self._states

    def _save_states(self, *, force: bool = False) -> None:
        changed = [t for t in self.tasks() if t.changed or force]
        if not changed:
            return
        states = self._states_file()
        for t in changed:
            states.put(states.key(self.hardware, t.task, t.comm, self.settings.search), t.session.search.state_dict())
            t.changed = False
        states.save()

    # ---- reporting ------------------------------------------------------------------------------

    def _log_decisions(self, decisions: list[Any]) -> None:
        if self.settings.decision_log is None or not decisions:
            return
        if self._log_file is None:
            import torch.distributed as dist

            path = Path(self.settings.decision_log.format(rank=dist.get_rank()))
            path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = path.open("a", encoding="utf-8")
        for d in decisions:
            self._log_file.write(json.dumps({f: _plain(getattr(d, f)) for f in DECISION_FIELDS}) + "\n")
        self._log_file.flush()

    def _report(self, *, closing: bool = False) -> None:
        """Leaders: the recommendation files and the summary of the tasks they led (once more at
        the end only if trials came since; then just what tuning cost after converging)."""
        tunings = self.tasks()
        trials = sum(t.session.search.trials for t in tunings)
        if not tunings or self._store is None:
            return
        if trials == self._reported_trials:
            if closing and not self.settings.quiet:
                print(f"ccltwin live: {self._overhead()}", flush=True)
            return
        self._reported_trials = trials
        try:
            rec = write(self._store, hardware=self.hardware, plan=self.settings.plan, title=f"live on {self.hardware}")
        except OSError as err:
            self._say(f"cannot write the recommendation next to {self.settings.store}: {err}")
            rec = None
        tuned = [t for t in tunings if t.result is not None or not t.done]
        text = summary([self._row(t) for t in tuned], hardware=self.hardware, overhead=self._overhead())
        if len(tuned) < len(tunings):
            text += (f"\n{len(tunings) - len(tuned)} task(s) ran only before they could be tuned (start-up "
                     "broadcasts, DDP's first buckets): NCCL's default")
        if rec is not None:
            text += f"\nnext launch: {rec.env} (per-process knobs) and {rec.tuner_csv} ({rec.winners} per-call winners)"
        if not self.settings.quiet:
            print(text, flush=True)

    def _row(self, t: TaskTuning) -> TaskSummary:
        task = t.task
        r = t.result
        default = t.session.search.score(t.session.default)
        return TaskSummary(task=f"{task.op} {task.nbytes} B {task.dtype} {task.group} ({t.comm})",
                           default_us=default if math.isfinite(default) else None,
                           tuned_us=r.time_us if r else None, winner=str(r.winner) if r else "NCCL default",
                           trials=t.session.search.trials,
                           iterations=None if t.converged_round is None else t.converged_round - t.first_round,
                           failed=len(t.failed))

    def _overhead(self) -> str:
        """What tuning cost per iteration, while it ran and after it converged."""
        end = self.converged_at if self.converged_at is not None else math.inf
        during = [s.seconds for s in self.stats if s.boundary <= end]
        after = [s.seconds for s in self.stats if s.boundary > end]
        text = f"tuning cost per iteration: {_mean_ms(during):.3f} ms at the boundary while tuning ({len(during)} its)"
        if after:
            text += f", {_mean_ms(after):.3f} ms after ({len(after)} its)"
        return text + (f"; trials ran {sum(s.slower_us for s in self.stats) / 1e3:.3f} ms longer in all than "
                       "NCCL's default would have")

    def _say(self, message: str) -> None:
        if message in self._said:
            return
        self._said.add(message)
        if not self.settings.quiet:
            print(f"ccltwin live: {message}", file=sys.stderr, flush=True)

    def _stop(self, reason: str) -> None:
        """Stop tuning here, and tell the other ranks of each communicator (they stop at their next
        round instead of waiting for this rank's acknowledgements)."""
        self.stopped = reason
        self._say(f"tuning stops: {reason}; the committed schedule stays in force and the job goes on")
        for coord in self._coordinators.values():
            coord.stop(f"rank {coord.rank} of the communicator stopped tuning ({reason})")


def _mean_ms(seconds: list[float]) -> float:
    return 1e3 * sum(seconds) / len(seconds) if seconds else 0.0


def _plain(value: Any) -> Any:
    return value.value if hasattr(value, "value") else value


DECISION_FIELDS = ("comm", "op", "nbytes", "occurrence", "algo", "proto", "nchannels", "chunk_bytes", "version",
                   "flags")


def settings_from(plan: str | os.PathLike | Plan | None, **kwargs: Any) -> Settings:
    """``Settings`` from ``live.enable``'s arguments, checked; a bad one raises ``LiveError``."""
    if isinstance(plan, str | os.PathLike):
        try:
            plan = load_plan(plan)
        except PlanError as err:
            raise LiveError(str(err)) from None
    s = Settings(plan=plan, **{k: str(v) if k == "store" else v for k, v in kwargs.items()})
    if s.mode not in MODES:
        raise LiveError(f"mode must be one of {', '.join(MODES)}, got {s.mode!r}")
    if s.search not in SEARCHES:
        raise LiveError(f"a live job runs one of the searches {', '.join(SEARCHES)} (they measure NCCL's "
                        f"default first), got {s.search!r}")
    if s.budget is not None and s.budget < 1:
        raise LiveError(f"budget is trials per task, at least 1; got {s.budget}")
    if s.mode == "apply" and not Path(s.store).is_file():
        raise LiveError(f"{s.store}: no such store to apply winners from")
    if not 0.0 <= s.interference <= 1.0:
        raise LiveError(f"interference is a share of the GPU's SMs, 0 to 1; got {s.interference}")
    if s.deadline_s <= 0 or s.max_misses < 1 or s.fail_factor <= 1 or s.max_wait < 1:
        raise LiveError("deadline_s must be > 0, max_misses and max_wait >= 1, fail_factor > 1")
    return s
