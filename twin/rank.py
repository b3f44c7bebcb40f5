"""Rank NCCL's subspaces for every task of a workload: the warm-start plan, and what-if's search.

A trace of a tensor- and data-parallel job holds, say, 40 distinct tasks: all-gathers on the
8-GPU TP groups, reduce-scatters and all-reduces on the 16-rank DP groups. The trace's ranks are
placed on the cluster as the replay places them (rank r on GPU r, ``twin.placement``), so each
task runs on the GPUs of its group. For each task the engine (``rank_task``) sweeps every
⟨NC, NT, C⟩ of every subspace the search space admits with the closed-form fast path and keeps
the best point per subspace, fastest subspace first, beside what NCCL's default would do. A
sweep runs once per distinct (communicator, op, size, dtype), so the cost grows with the number
of distinct tasks, not with the trace's length.

The same engine finds ``ccltwin whatif``'s tuned configurations, with the transport NCCL picks
and minimising what a call costs the iteration when compute hides part of it (``hidden_us``,
``call_cost``) instead of its time alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from traces.errors import CcltwinError
from traces.schema import Trace
from traces.task import Task
from tuner.config import Algo, Transport
from tuner.knobs import DEFAULT_NCCL_VERSION, check_nccl_version
from tuner.measurement import Measurement
from tuner.plan import Plan, PlanEntry, RankedSubspace
from tuner.rules import CommFacts
from tuner.space import ConfigError, ConfigSpace, ResourceGrid
from twin.fastpath import sweep_subspace
from twin.model.schedule import Unsupported
from twin.nccl_model.cost_table import ll128_default
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement import Communicator, Placement, TaskPlacement, describe
from twin.process_tuning import ProcessTuning, tune_process_settings
from twin.topology import Cluster

__all__ = ["Ranking", "call_cost", "comm_facts", "predicted_winners", "rank_task", "rank_tasks", "rank_trace"]


@dataclass(frozen=True)
class Ranking:
    """What ``rank_trace`` produced: the plan, the per-process tuning behind its settings, and
    notes on tasks left out or placed by assumption."""

    plan: Plan
    process: ProcessTuning
    notes: list[str] = field(default_factory=list)


def call_cost(time_us, nchannels, hidden_us, sm_count: int):
    """What a call costs the iteration when compute can hide ``hidden_us`` of it: the rest in
    full, and the hidden part as the compute its channels' SMs hold back meanwhile
    (``twin.compute``). With nothing hidden it is the call's time."""
    hidden = np.minimum(time_us, hidden_us)
    return time_us - hidden + hidden * nchannels / sm_count


def comm_facts(comm: Communicator, transports: tuple[Transport, ...] = tuple(Transport)) -> CommFacts:
    """The search-space facts of a call on ``comm`` (as NCCL would find them), choosing among
    ``transports``: ranks and nodes of the call's GPUs, the rest of the whole communicator."""
    info, geom = comm.nccl, comm.geometry()
    return CommFacts(nranks=geom.nranks, nnodes=geom.nnodes, sm_count=comm.cluster.gpu.sm_count,
                     sm_version=info.sm_version, nccl_version=info.nccl_version, nvls=info.nvls_support,
                     collnet=info.collnet_support, ll128=ll128_default(info), channel_cap=info.nchannels,
                     transports=transports)


def rank_task(comm: Communicator, task: Task, calls_per_iteration: float = 1.0, *,
              transports: tuple[Transport, ...] = tuple(Transport), hidden_us: float = 0.0,
              max_channels: int | None = None, notes: list[str] | None = None) -> PlanEntry:
    """Sweep every subspace of ``task`` on ``comm``.

    Per subspace the point with the least ``call_cost`` is kept: with ``hidden_us`` = 0 (the
    warm-start plan) the fastest. The channel axis stops at ``max_channels`` (within the config
    space's caps); by default at the channels the communicator has (NVLS: its NVLS channels),
    which is what a per-call tuner can use without creating another communicator. Grid points
    the twin gives no finite time for are never chosen and are reported in ``notes``. Raises
    ``ConfigError`` when no subspace applies (a 1-rank group).
    """
    try:
        space = ConfigSpace(task, comm_facts(comm, transports))
        config = comm.default_config(task)
        default = RankedSubspace(config=config, time_us=float(comm.schedule(task, config).time_us()))
    except CcltwinError as err:  # ConfigError, Unsupported, a group NCCL could not form (PlacementError)
        raise ConfigError(f"{describe(task)}: {err}") from None
    sms = comm.cluster.gpu.sm_count

    def cost(r: RankedSubspace) -> float:
        return float(call_cost(r.time_us, r.config.nchannels, hidden_us, sms))

    geoms = {t: comm.geometry(t) for t in {s.transport for s in space.subspaces}}
    ranked = []
    for subspace in space.subspaces:
        nvls = subspace.algo in (Algo.NVLS, Algo.NVLS_TREE)
        cap = max_channels or (comm.nccl.nvls_channels if nvls else comm.nccl.nchannels)
        points = space.grid(subspace)
        points = ResourceGrid(points.nchannels[points.nchannels <= cap], points.nthreads, points.chunks)
        try:
            sweep = sweep_subspace(geoms, task.op, task.nbytes, subspace, points,
                                   gpus_per_process=comm.gpus_per_process)
        except Unsupported:  # valid for NCCL but outside what the twin models here
            continue
        bad = int((~np.isfinite(sweep.flat)).sum())
        if bad and notes is not None:
            notes.append(f"{describe(task)}: the twin gave no finite time for {bad} of {points.size} points "
                         f"of {subspace}; they were not considered")
        objective = call_cost(sweep.flat, sweep.nchannels, hidden_us, sms) if hidden_us else None
        config, time_us = sweep.best(objective)
        if not np.isfinite(time_us):
            continue
        best = RankedSubspace(config=config, time_us=time_us)
        if subspace == default.subspace and cost(default) < cost(best):
            best = default  # NCCL's own point is off the grid and better
        ranked.append(best)
    if not ranked:
        raise ConfigError(f"{describe(task)}: the twin models none of its subspaces here")
    ranked.sort(key=lambda r: (r.time_us, r.subspace))
    return PlanEntry(task=task, ranked=tuple(ranked), default=default, calls_per_iteration=calls_per_iteration)


def rank_trace(trace: Trace, cluster: Cluster, *, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION,
               max_channels: int | None = None, params: TwinParams = DEFAULT_PARAMS) -> Ranking:
    """The warm-start plan of every distinct task of ``trace`` on ``cluster``, rank r on GPU r,
    predicted with the twin's physical constants ``params``.

    Per-process settings are chosen over all tasks weighted by their calls per iteration
    (``twin.process_tuning``). Tasks without a size are not in ``Trace.tasks`` and so not here.
    Raises ``twin.placement.PlacementError`` when the cluster has fewer GPUs than the trace's world.
    """
    notes: list[str] = [note] if (note := check_nccl_version(nccl_version)) else []
    tasks = _sized(trace.tasks(), notes)
    comms = Placement(trace, cluster, nccl_version, params=params).task_communicators()
    return _rank([(task, calls, comms[task]) for task, calls in tasks], cluster, nccl_version, max_channels, notes)


def rank_tasks(tasks: dict[Task, float], cluster: Cluster, *, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION,
               max_channels: int | None = None, params: TwinParams = DEFAULT_PARAMS) -> Ranking:
    """Rank ``tasks`` given without a trace (task → calls per iteration) on ``cluster``, each on
    the GPUs its shape names (``twin.placement.TaskPlacement``); ``max_channels`` and ``params``
    as in ``rank_trace``."""
    notes: list[str] = []
    placement = TaskPlacement(cluster, nccl_version=nccl_version, params=params)
    placed = []
    for task, calls in _sized(tasks, notes):
        comm, note = placement.place(task)
        if note and note not in notes:
            notes.append(note)
        placed.append((task, calls, comm))
    return _rank(placed, cluster, nccl_version, max_channels, notes)


def predicted_winners(plan: Plan, shapes: dict[Task, Task]) -> list[Measurement]:
    """Each plan entry's best config as a twin measurement of its task with a ``GxN`` group
    (``shapes``: the task as the plan names it → the task with its group's shape)."""
    return [Measurement(task=shapes.get(e.task, e.task), config=e.best.config, time_us=e.best.time_us,
                        source="twin", hardware=plan.cluster, nccl_version=plan.nccl_version)
            for e in plan.entries if e.best.time_us > 0]


def _sized(tasks: dict[Task, float], notes: list[str]) -> list[tuple[Task, float]]:
    """``tasks`` in a stable order, without empty messages (noted)."""
    out = []
    for task, calls in sorted(tasks.items(), key=lambda kv: (kv[0].op, kv[0].nranks, kv[0].group, kv[0].nbytes,
                                                             kv[0].dtype)):
        if task.nbytes == 0:
            notes.append(f"{describe(task)}: empty message, nothing to tune; left out")
        else:
            out.append((task, calls))
    return out


def _rank(placed: list[tuple[Task, float, Communicator]], cluster: Cluster, nccl_version: tuple[int, int, int],
          max_channels: int | None, notes: list[str]) -> Ranking:
    swept: dict[tuple, PlanEntry | str] = {}  # (communicator, op, nbytes, dtype) -> entry, or why there is none
    entries, pairs = [], []
    for task, calls, comm in placed:
        key = (comm, task.op, task.nbytes, task.dtype)  # the group's name does not change the sweep
        if key not in swept:
            try:
                swept[key] = rank_task(comm, task, max_channels=max_channels, notes=notes)
            except ConfigError as err:
                swept[key] = str(err)
        if isinstance(swept[key], str):
            notes.append(f"{swept[key]}; left out")
            continue
        entry = PlanEntry(task=task, ranked=swept[key].ranked, default=swept[key].default, calls_per_iteration=calls)
        entries.append(entry)
        pairs.append((comm, entry))
    process = tune_process_settings(pairs)
    plan = Plan(cluster=cluster.identity,
                nccl_version=".".join(map(str, nccl_version)), created_by="ccltwin rank (twin fast path)",
                process=process.settings, entries=tuple(entries))
    return Ranking(plan=plan, process=process, notes=notes)

