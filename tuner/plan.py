"""The warm-start plan: the twin's ranking of NCCL's subspaces for every task of a workload.

For "AllReduce of 64 MiB on 16 H100s" a plan entry says: nvls_tree/simple/p2p with 16 channels,
512 threads and 512 KiB chunks is predicted at 330 µs, ring/simple/p2p at 410 µs with its own
best resources, ... and NCCL's default would take 339 µs. The live tuner starts its search from
that list (``PlanEntry.warm_start``) instead of from scratch, and the plan's per-process
settings become the environment of the next launch. The file format is in docs/plan-format.md;
``save_plan`` writes atomically and ``load_plan`` names the file and the field of any problem.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from os import PathLike
from typing import Any

from traces.errors import CcltwinError
from traces.task import GROUP_SHAPE, Task
from traces.trace_file import write_atomic
from tuner.codec import FieldError, config_from_dict, config_to_dict, get_field, task_from_dict, task_to_dict
from tuner.config import Config, Subspace
from tuner.process_knobs import ProcessSettings

__all__ = ["PLAN_FORMAT", "PLAN_VERSION", "Plan", "PlanEntry", "PlanError", "RankedSubspace", "load_plan",
           "save_plan"]

PLAN_FORMAT = "ccltwin-plan"
PLAN_VERSION = 1


class PlanError(CcltwinError):
    """A plan file that cannot be read, or a plan that breaks its own rules."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankedSubspace:
    """One subspace with the best resource parameters predicted inside it."""

    config: Config
    time_us: float
    """Predicted time of one call with ``config``, µs."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_us) and self.time_us >= 0):
            raise ValueError(f"time_us must be a finite number >= 0, got {self.time_us}")

    @property
    def subspace(self) -> Subspace:
        return self.config.subspace


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanEntry:
    """A task's subspaces, fastest first, and what NCCL's default would do."""

    task: Task
    ranked: tuple[RankedSubspace, ...]
    """One per subspace the twin found valid, ordered by predicted time."""
    default: RankedSubspace
    """NCCL's own choice (no tuner) and its predicted time."""
    calls_per_iteration: float = 1.0
    """How often the workload runs the task per training iteration."""

    def __post_init__(self) -> None:
        if not self.ranked:
            raise ValueError(f"{self.task}: a plan entry needs at least one ranked subspace")
        times = [r.time_us for r in self.ranked]
        if times != sorted(times):
            raise ValueError(f"{self.task}: ranked subspaces must be ordered by time_us, fastest first")
        subspaces = [r.subspace for r in self.ranked]
        if len(set(subspaces)) != len(subspaces):
            raise ValueError(f"{self.task}: a subspace is ranked twice")
        if not (math.isfinite(self.calls_per_iteration) and self.calls_per_iteration > 0):
            raise ValueError(f"calls_per_iteration must be > 0, got {self.calls_per_iteration}")

    @property
    def best(self) -> RankedSubspace:
        return self.ranked[0]

    @property
    def speedup(self) -> float:
        """Predicted default time over predicted best time (1.0 when both are 0)."""
        return self.default.time_us / self.best.time_us if self.best.time_us > 0 else 1.0

    def warm_start(self) -> list[tuple[Config, float]]:
        """``(config, predicted time_us)`` of every ranked subspace, fastest first."""
        return [(r.config, r.time_us) for r in self.ranked]

    def to_dict(self) -> dict[str, Any]:
        return {"task": task_to_dict(self.task), "calls_per_iteration": self.calls_per_iteration,
                "default": _ranked_to_dict(self.default), "ranked": [_ranked_to_dict(r) for r in self.ranked]}

    @classmethod
    def from_dict(cls, obj: Any, where: str = "entry") -> PlanEntry:
        task = task_from_dict(get_field(obj, "task", "object", where), f"{where}.task")
        ranked = tuple(_ranked_from_dict(item, f"{where}.ranked[{i}]")
                       for i, item in enumerate(get_field(obj, "ranked", "list", where)))
        default = _ranked_from_dict(get_field(obj, "default", "object", where), f"{where}.default")
        try:
            return cls(task=task, ranked=ranked, default=default,
                       calls_per_iteration=get_field(obj, "calls_per_iteration", "number", where, 1.0))
        except FieldError:
            raise
        except ValueError as err:
            raise FieldError(f"{where}: {err}") from None


def _ranked_to_dict(ranked: RankedSubspace) -> dict[str, Any]:
    return {"config": config_to_dict(ranked.config), "time_us": ranked.time_us}


def _ranked_from_dict(obj: Any, where: str) -> RankedSubspace:
    config = config_from_dict(get_field(obj, "config", "object", where), f"{where}.config")
    try:
        return RankedSubspace(config=config, time_us=get_field(obj, "time_us", "number", where))
    except FieldError:
        raise
    except ValueError as err:
        raise FieldError(f"{where}: {err}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """Warm-start plan for one workload on one cluster."""

    cluster: str
    """The cluster or topology the predictions are for (``dgx-h100 2x8``)."""
    nccl_version: str
    """The NCCL release whose behaviour was modelled (``"2.28.9"``)."""
    created_by: str
    """What made the plan (``"ccltwin rank, fast path"``)."""
    process: ProcessSettings
    """Per-process knobs recommended for the whole workload."""
    entries: tuple[PlanEntry, ...]

    def __post_init__(self) -> None:
        tasks = [e.task for e in self.entries]
        if len(set(tasks)) != len(tasks):
            raise ValueError("a task has two plan entries")

    def entry(self, task: Task) -> PlanEntry:
        """The entry of ``task`` (exactly equal: op, size, ranks, dtype, group); ``KeyError`` if none."""
        for entry in self.entries:
            if entry.task == task:
                return entry
        raise KeyError(task)

    def like(self, task: Task) -> list[PlanEntry]:
        """The entries of the same op, size and rank count as ``task``, whatever their dtype and group."""
        return [e for e in self.entries
                if (e.task.op, e.task.nbytes, e.task.nranks) == (task.op, task.nbytes, task.nranks)]

    def find(self, task: Task) -> PlanEntry | None:
        """The entry of ``task``; else the only entry of the same op, size and rank count whose
        group is ``task.group`` or unspecified on either side; else the only one whose group is
        named where the other is a shape (a plan names groups as its trace does, ``tp:0``, a
        tuner by their shape, ``8x1``); ``None`` when there is none or several."""
        try:
            return self.entry(task)
        except KeyError:
            pass
        same = self.like(task)
        close = [e for e in same if not e.task.group or not task.group or e.task.group == task.group]
        named = [e for e in same if not (GROUP_SHAPE.match(e.task.group) and GROUP_SHAPE.match(task.group))]
        for found in (close, named):
            if len(found) == 1:
                return found[0]
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, "cluster": self.cluster,
                "nccl_version": self.nccl_version, "created_by": self.created_by,
                "process": self.process.to_dict(), "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, doc: Any) -> Plan:
        """Read ``to_dict``'s document; raises ``FieldError`` naming the bad field."""
        if get_field(doc, "format", "str", "plan", None) != PLAN_FORMAT:
            raise FieldError(f'not a ccltwin plan (expected "format": "{PLAN_FORMAT}")')
        version = get_field(doc, "version", "int", "plan")
        if version != PLAN_VERSION:
            raise FieldError(f"plan version {version} is not supported; this ccltwin reads version {PLAN_VERSION}")
        entries = tuple(PlanEntry.from_dict(item, f"entries[{i}]")
                        for i, item in enumerate(get_field(doc, "entries", "list", "plan")))
        try:
            return cls(cluster=get_field(doc, "cluster", "str", "plan"),
                       nccl_version=get_field(doc, "nccl_version", "str", "plan"),
                       created_by=get_field(doc, "created_by", "str", "plan", ""),
                       process=ProcessSettings.from_dict(get_field(doc, "process", "object", "plan", {})),
                       entries=entries)
        except FieldError:
            raise
        except ValueError as err:
            raise FieldError(f"plan: {err}") from None


def save_plan(plan: Plan, path: str | PathLike[str]) -> None:
    """Write ``plan`` as JSON, atomically (a failed save leaves any old file as it was)."""
    write_atomic(path, [json.dumps(plan.to_dict(), indent=1), "\n"])


def load_plan(path: str | PathLike[str]) -> Plan:
    """Read a plan file; raises ``PlanError`` naming the file and the problem."""
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except OSError as err:
        raise PlanError(f"{path}: cannot read the plan ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise PlanError(f"{path}: not a readable JSON plan ({err})") from None
    try:
        return Plan.from_dict(doc)
    except FieldError as err:
        raise PlanError(f"{path}: {err}") from None
