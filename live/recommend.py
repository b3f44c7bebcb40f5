"""What the next launch should use, and what tuning achieved, task by task.

At the end of a tuning run (convergence, the end of the ``with`` block, or process exit) the
leader writes two files next to the store: ``<store>.nccl.env`` with the per-process knobs
(the plan's when one was given, else voted for by the store's winners: ``tuner.export``) and
``<store>.nccl_tuner.conf``, the store's per-call winners as NCCL's example tuner plugin reads
them (the env file points ``NCCL_TUNER_CONFIG_FILE`` at it). A later launch either sources the
env file and loads that plugin, or runs ``live.enable(mode="apply")`` on the same store.

``summary`` is the one screen printed beside them: per task NCCL's default time, the tuned
time, the speedup, trials and iterations to converge.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tuner.export import settings_from_winners, write_env, write_tuner_csv
from tuner.plan import Plan
from tuner.store import Store

__all__ = ["Recommendation", "TaskSummary", "summary", "write"]


@dataclass(frozen=True, slots=True)
class Recommendation:
    env: Path
    tuner_csv: Path
    winners: int
    """Per-call winners written as rules."""
    notes: tuple[str, ...]
    """What the rule file leaves out and why."""


def write(store: Store, *, hardware: str, plan: Plan | None = None, prefix: str | Path | None = None,
          title: str = "") -> Recommendation:
    """Write the env file and the tuner CSV of ``store``'s winners on ``hardware``; ``prefix``
    (default: the store's path) is the files' common beginning."""
    winners = store.bests(hardware=hardware)
    base = str(prefix if prefix is not None else store.path)
    csv, env = Path(base + ".nccl_tuner.conf"), Path(base + ".nccl.env")
    notes = write_tuner_csv(winners, csv, title=title)
    settings = plan.process if plan is not None else settings_from_winners(winners)
    write_env(settings, env, extra={"NCCL_TUNER_CONFIG_FILE": str(csv.resolve())}, title=title)
    return Recommendation(env, csv, sum(1 for m in winners if m.config is not None), tuple(notes))


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """One task's line of the summary."""

    task: str
    """``allreduce 16640 B float32 2x1 (2x1#0)``."""
    default_us: float | None
    tuned_us: float | None
    winner: str
    trials: int
    iterations: int | None
    """Boundaries from the task's first trial to its winner; ``None`` while still tuning."""
    failed: int


def summary(rows: Iterable[TaskSummary], *, hardware: str, overhead: str = "") -> str:
    """The one-screen table (``overhead``: a line on what tuning cost per iteration).

    >>> print(summary([TaskSummary("allreduce 1024 B", 10.0, 8.0, "ring/ll nc=2", 12, 14, 0)], hardware="x:2x1"))
    ccltwin live on x:2x1
    task                                   default us   tuned us  speedup  trials  iters  failed  winner
    allreduce 1024 B                            10.00       8.00    1.25x      12     14       0  ring/ll nc=2
    """
    lines = [f"ccltwin live on {hardware}",
             f"{'task':<36} {'default us':>12} {'tuned us':>10} {'speedup':>8} {'trials':>7} {'iters':>6} "
             f"{'failed':>7}  winner"]
    for r in rows:
        speed = f"{r.default_us / r.tuned_us:.2f}x" if r.default_us and r.tuned_us else "-"
        lines.append(f"{r.task:<36} {_num(r.default_us):>12} {_num(r.tuned_us):>10} {speed:>8} {r.trials:>7} "
                     f"{r.iterations if r.iterations is not None else 'tuning':>6} {r.failed:>7}  {r.winner}")
    if overhead:
        lines.append(overhead)
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
