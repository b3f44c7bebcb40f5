"""Pre-rank NCCL's subspaces for every task of a workload: the warm-start plan.

A trace of a tensor- and data-parallel job holds, say, 40 distinct tasks: all-gathers on the
8-GPU TP groups, reduce-scatters and all-reduces on the 16-rank DP groups. For each, the twin
places the task's communicator on the cluster (its group shape: ``"8x1"`` is 8 GPUs of one
node, ``"1x16"`` one GPU on each of 16 nodes; a group of unknown shape fills whole nodes),
sweeps every ⟨NC, NT, C⟩ of every subspace the search space admits with the closed-form fast
path, and keeps the best point per subspace, fastest subspace first, beside what NCCL's default
would do. Communicators are built once per placement and a task's sweep once per distinct task,
so the cost grows with the number of distinct tasks, not with the trace's length.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from traces.schema import Trace
from traces.task import Task
from tuner.config import Algo, Transport
from tuner.plan import Plan, PlanEntry, PlanError, RankedSubspace
from tuner.rules import CommFacts
from tuner.space import ConfigError, ConfigSpace, ResourceGrid
from twin.fastpath import sweep_subspace
from twin.model.schedule import Unsupported
from twin.nccl_model.cost_table import ll128_default
from twin.predict import Twin
from twin.process_tuning import ProcessTuning, tune_process_settings

__all__ = ["Ranking", "comm_facts", "placement", "rank_task", "rank_tasks", "rank_trace"]

_GRID_SHAPE = re.compile(r"(\d+)x(\d+)")


@dataclass(frozen=True)
class Ranking:
    """What ``rank_trace`` produced: the plan, the per-process tuning behind its settings, and
    notes on tasks left out or placed by assumption."""

    plan: Plan
    process: ProcessTuning
    notes: list[str] = field(default_factory=list)


def placement(task: Task, gpus_per_node: int, ranks: tuple[int, ...] | None = None
              ) -> tuple[tuple[int, int], str | None]:
    """``((gpus per node, nodes), note)`` of the task's communicator on nodes of ``gpus_per_node``.

    A ``"GxN"`` group shape is taken as it is. Otherwise, given the group's global ``ranks``,
    they are laid out as torchrun does (rank r on node r // gpus_per_node); without them the
    group fills whole nodes. The note says which assumption was made.

    >>> from traces.task import Op
    >>> placement(Task(Op.ALLREDUCE, 1 << 20, 16, group="1x16"), 8)
    ((1, 16), None)
    >>> placement(Task(Op.ALLREDUCE, 1 << 20, 4, group="dp"), 8, ranks=(0, 8, 16, 24))[0]
    (1, 4)
    >>> placement(Task(Op.ALLREDUCE, 1 << 20, 4, group="tp"), 8)[0]
    (4, 1)
    """
    match = _GRID_SHAPE.fullmatch(task.group)
    if match and int(match[1]) * int(match[2]) == task.nranks:
        return (int(match[1]), int(match[2])), None
    n = task.nranks
    if ranks is not None and len(ranks) == n:
        per_node = Counter(r // gpus_per_node for r in ranks)
        if len(set(per_node.values())) == 1:
            shape = (n // len(per_node), len(per_node))
            return shape, (f"group {task.group!r} (ranks {_ranks(ranks)}): nodes unknown; placed as torchrun "
                           f"places ranks, {shape[0]}x{shape[1]}")
    if n <= gpus_per_node:
        shape = (n, 1)
    elif n % gpus_per_node == 0:
        shape = (gpus_per_node, n // gpus_per_node)
    else:
        raise PlanError(f"{_describe(task)}: {n} ranks do not fill whole nodes of {gpus_per_node} GPUs, and the "
                        "trace does not say where they run")
    return shape, f"group {task.group!r} of {n} ranks: nodes unknown; modelled as {shape[0]}x{shape[1]}"


def _ranks(ranks: tuple[int, ...]) -> str:
    return ",".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]},{ranks[1]},...,{ranks[-1]}"


def comm_facts(twin: Twin) -> CommFacts:
    """The search-space facts of the twin's communicator (as NCCL would find them)."""
    info = twin.nccl
    return CommFacts(nranks=info.nranks, nnodes=info.nnodes, sm_count=twin.cluster.gpu.sm_count,
                     sm_version=info.sm_version, nccl_version=info.nccl_version, nvls=info.nvls_support,
                     collnet=info.collnet_support, ll128=ll128_default(info), channel_cap=info.nchannels,
                     transports=tuple(Transport))


def rank_task(twin: Twin, task: Task, calls_per_iteration: float = 1.0, *, max_channels: int | None = None,
              notes: list[str] | None = None) -> PlanEntry:
    """Sweep every subspace of ``task`` on the twin's communicator.

    The channel axis stops at ``max_channels``; by default at the channels the communicator
    has (NVLS: its NVLS channels), which is what a per-call tuner can use without creating
    another communicator. Grid points the twin gives no finite time for are never chosen and
    are reported in ``notes``. Raises ``ConfigError`` when no subspace applies (a 1-rank group).
    """
    space = ConfigSpace(task, comm_facts(twin))
    geoms = {t: twin.geometry(t) for t in Transport}
    default = twin.predict(task.op, task.nbytes, dtype=task.dtype)
    ranked = []
    for subspace in space.subspaces:
        nvls = subspace.algo in (Algo.NVLS, Algo.NVLS_TREE)
        cap = max_channels or (twin.nccl.nvls_channels if nvls else twin.nccl.nchannels)
        grid = space.grid(subspace)
        grid = ResourceGrid(grid.nchannels[grid.nchannels <= cap], grid.nthreads, grid.chunks)
        try:
            sweep = sweep_subspace(geoms, task.op, task.nbytes, subspace, grid)
        except Unsupported:  # valid for NCCL but outside what the twin models here
            continue
        bad = sum(int((~np.isfinite(t)).sum()) for t in sweep.times.values())
        if bad:
            if notes is not None:
                notes.append(f"{_describe(task)}: the twin gave no finite time for {bad} of {grid.size} points "
                             f"of {subspace}; they were not considered")
            sweep = replace(sweep, times={nt: np.where(np.isfinite(t), t, np.inf) for nt, t in sweep.times.items()})
        config, time_us = sweep.best()
        if not np.isfinite(time_us):
            continue
        if subspace == default.config.subspace and default.time_us < time_us:
            config, time_us = default.config, default.time_us  # NCCL's own point is off the grid and faster
        ranked.append(RankedSubspace(config=config, time_us=time_us))
    if not ranked:
        raise ConfigError(f"{_describe(task)}: the twin models none of its subspaces here")
    ranked.sort(key=lambda r: (r.time_us, r.subspace))
    return PlanEntry(task=task, ranked=tuple(ranked), default=RankedSubspace(config=default.config,
                                                                              time_us=default.time_us),
                     calls_per_iteration=calls_per_iteration)


def rank_tasks(tasks: dict[Task, float], cluster, *, group_ranks: dict[str, tuple[int, ...]] | None = None,
               nccl_version: tuple[int, int, int] = (2, 28, 9), max_channels: int | None = None,
               created_by: str = "ccltwin rank (twin fast path)") -> Ranking:
    """Rank ``tasks`` (task → calls per iteration) on ``cluster``; ``group_ranks`` gives the global
    ranks of groups named by id (see ``placement``), ``max_channels`` as in ``rank_task``."""
    group_ranks = group_ranks or {}
    placed, notes = [], []
    for task, calls in sorted(tasks.items(), key=lambda kv: (kv[0].op, kv[0].nranks, kv[0].group, kv[0].nbytes,
                                                             kv[0].dtype)):
        if task.nbytes == 0:
            notes.append(f"{_describe(task)}: empty message, nothing to tune; left out")
            continue
        (g, n), note = placement(task, cluster.gpus_per_node, group_ranks.get(task.group))
        if n > cluster.nodes or g > cluster.gpus_per_node:
            raise PlanError(f"{_describe(task)}: needs {n} node(s) of {g} GPUs; cluster {cluster.name!r} has "
                            f"{cluster.nodes} node(s) of {cluster.gpus_per_node} (try --nodes)")
        if note and note not in notes:
            notes.append(note)
        placed.append((task, calls, (g, n)))
    twins: dict[tuple[int, int], Twin] = {}
    swept: dict[tuple, PlanEntry | str] = {}  # (placement, op, nbytes) -> entry, or why there is none
    entries, pairs = [], []
    for task, calls, shape in placed:
        if shape not in twins:
            twins[shape] = Twin(cluster.subset(nodes=shape[1], gpus_per_node=shape[0]), nccl_version=nccl_version)
        key = (shape, task.op, task.nbytes)  # the dtype and the group's name do not change the sweep
        if key not in swept:
            try:
                swept[key] = rank_task(twins[shape], task, max_channels=max_channels, notes=notes)
            except ConfigError as err:
                swept[key] = str(err)
        if isinstance(swept[key], str):
            notes.append(f"{swept[key]}; left out")
            continue
        entry = replace(swept[key], task=task, calls_per_iteration=calls)
        entries.append(entry)
        pairs.append((twins[shape], entry))
    process = tune_process_settings(pairs)
    plan = Plan(cluster=f"{cluster.name} {cluster.nodes}x{cluster.gpus_per_node} {cluster.gpu.model}",
                nccl_version=".".join(map(str, nccl_version)), created_by=created_by, process=process.settings,
                entries=tuple(entries))
    return Ranking(plan=plan, process=process, notes=notes)


def rank_trace(trace: Trace, cluster, *, nccl_version: tuple[int, int, int] = (2, 28, 9),
               max_channels: int | None = None) -> Ranking:
    """The warm-start plan of every distinct task of ``trace`` on ``cluster``.

    Per-process settings are chosen over all tasks weighted by their calls per iteration
    (``twin.process_tuning``). Tasks without a size are not in ``Trace.tasks`` and so not here.
    """
    return rank_tasks(trace.tasks(), cluster, group_ranks={g.id: g.ranks for g in trace.groups},
                      nccl_version=nccl_version, max_channels=max_channels)


def _describe(task: Task) -> str:
    group = f" group {task.group}" if task.group else ""
    return f"{task.op} {task.nbytes} B {task.dtype} on {task.nranks} ranks{group}"
