"""Where a training iteration's time goes, from a replay: compute, exposed communication per op
and per group, the GPU waiting for its host, and the pipeline bubble.

Per rank of the trace, mean over them, per iteration (ms):

* ``compute_ms``: time at least one compute phase runs (``ReplayResult.compute_us``);
* ``comm_ms``: time at least one call of the rank is in flight, from the rank's own launch, so
  including time a posted call (a pipeline receive, say) waits for its peers
  (``ReplayResult.comm_us``);
* ``comm_ms_by_op``: time the calls of each op run (from their last member's arrival to their end),
  summed over calls, so less than ``comm_ms`` where calls wait for peers, more where they overlap;
* ``exposed_comm_ms_by_op`` / ``_by_group``: the part of those calls no compute of the rank hides,
  by op and by the kind of group they run on (``tp``, ``dp``, ``pp``, ``embedding``...);
* ``exposed_comm_ms``: their sum, at most what the iteration leaves beside compute;
* ``host_wait_ms``: time the GPU runs nothing because the rank's host thread has not yet issued
  work that is otherwise ready (the framework's Python, autograd and launches are slower than the
  kernels: small models, high TP; ``ReplayResult.host_wait_us``), at most what is left;
* ``bubble_ms``: the rest of the iteration, when a rank neither computes nor runs a call it is
  holding up nor waits for its host: waiting for the previous pipeline stage's activations or the
  next one's gradients (the pipeline bubble) or for a late peer.

So ``iteration_ms = compute_ms + exposed_comm_ms + host_wait_ms + bubble_ms``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from traces.errors import CcltwinError
from traces.schema import Trace
from traces.task import Task
from twin.placement import distinct_calls, task_of
from twin.replay import ReplayResult
from twin.topology import Cluster

__all__ = ["IterationBreakdown", "breakdown", "check_fits", "check_ranks"]


@dataclass(frozen=True)
class IterationBreakdown:
    """One replay's iteration, split as the module docstring says (ms)."""

    iteration_ms: float
    compute_ms: float
    exposed_comm_ms: float
    bubble_ms: float
    comm_ms: float
    comm_ms_by_op: dict[str, float] = field(default_factory=dict)
    exposed_comm_ms_by_op: dict[str, float] = field(default_factory=dict)
    exposed_comm_ms_by_group: dict[str, float] = field(default_factory=dict)
    host_wait_ms: float = 0.0

    def as_dict(self) -> dict:
        def r(x: float) -> float:
            return round(x, 4)

        return {
            "iteration_ms": r(self.iteration_ms), "compute_ms": r(self.compute_ms),
            "exposed_comm_ms": r(self.exposed_comm_ms), "host_wait_ms": r(self.host_wait_ms),
            "bubble_ms": r(self.bubble_ms), "comm_ms": r(self.comm_ms),
            "comm_ms_by_op": {k: r(v) for k, v in self.comm_ms_by_op.items()},
            "exposed_comm_ms_by_op": {k: r(v) for k, v in self.exposed_comm_ms_by_op.items()},
            "exposed_comm_ms_by_group": {k: r(v) for k, v in self.exposed_comm_ms_by_group.items()},
        }


def _issued(trace: Trace) -> tuple[Counter[Task], dict[Task, str]]:
    """How often the trace's ranks issue each task, and the kind of group it runs on."""
    issued: Counter[Task] = Counter()
    kinds: dict[Task, str] = {}
    names = {group.id: group.name or group.id for group in trace.groups}
    for rank, event, calls in distinct_calls(trace):
        task = task_of(trace, rank, event)
        if task is not None:
            issued[task] += calls
            kinds.setdefault(task, names.get(event.group, event.group))
    return issued, kinds


def _sorted(values: dict[str, float]) -> dict[str, float]:
    return dict(sorted(values.items(), key=lambda kv: -kv[1]))


def breakdown(trace: Trace, result: ReplayResult) -> IterationBreakdown:
    """The iteration of ``result`` (a replay of ``trace``), split into compute, exposed
    communication by op and group, host wait and bubble."""
    issued, kinds = _issued(trace)
    per_rank = 1.0 / (max(len(trace.ranks), 1) * max(trace.iterations, 1) * 1e3)  # µs → ms per rank and iteration
    comm: dict[str, float] = {}
    exposed: dict[str, float] = {}
    by_group: dict[str, float] = {}
    for times in result.tasks:
        n = issued.get(times.task, 0) * per_rank
        op = str(times.task.op)
        comm[op] = comm.get(op, 0.0) + times.time_us * n
        exposed[op] = exposed.get(op, 0.0) + times.exposed_us * n
        kind = kinds.get(times.task, times.task.group)
        by_group[kind] = by_group.get(kind, 0.0) + times.exposed_us * n
    iteration, compute = result.mean_iteration_us / 1e3, result.compute_us / 1e3
    exposed_total = min(sum(exposed.values()), max(iteration - compute, 0.0))
    host_wait = min(result.host_wait_us / 1e3, max(iteration - compute - exposed_total, 0.0))
    return IterationBreakdown(
        iteration_ms=iteration, compute_ms=compute, exposed_comm_ms=exposed_total,
        bubble_ms=max(iteration - compute - exposed_total - host_wait, 0.0), comm_ms=result.comm_us / 1e3,
        comm_ms_by_op=_sorted(comm), exposed_comm_ms_by_op=_sorted(exposed), exposed_comm_ms_by_group=_sorted(by_group),
        host_wait_ms=host_wait,
    )


def check_ranks(trace: Trace, path: str | None = None) -> None:
    """Refuse a multi-rank trace that lacks some of its ranks without saying which stand for them.

    One rank standing for all (a profile of rank 0) or the generator's representative ranks are
    predicted as they are; a trace of several ranks that is not marked so must hold all of them.
    """
    present = {r.rank for r in trace.ranks}
    if len(present) <= 1 or trace.metadata.get("ranks") in ("representative", "subset"):
        return
    missing = sorted(set(range(trace.world_size)) - present)
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        where = f"{path}: " if path else ""
        raise CcltwinError(f"{where}the trace holds {len(present)} of its {trace.world_size} ranks; rank(s) "
                           f"{shown} are missing (give every rank's events, or one rank's to stand for all)")


def check_fits(trace: Trace, cluster: Cluster) -> None:
    """Refuse a cluster with fewer GPUs than the job (naming both counts)."""
    gpus = len(cluster.gpus())
    if gpus < trace.world_size:
        plan = trace.metadata.get("plan") or {}
        degrees = " × ".join(f"{k} {plan[k]}" for k in ("tp", "cp", "dp", "pp") if plan.get(k, 1) > 1)
        job = f"the plan needs {trace.world_size} GPUs" + (f" ({degrees})" if degrees else "")
        raise CcltwinError(f"{job}; {cluster.identity} has {gpus} ({cluster.nodes} node(s) × "
                           f"{cluster.gpus_per_node}): use at least {-(-trace.world_size // cluster.gpus_per_node)} "
                           "nodes")
