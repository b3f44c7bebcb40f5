"""The what-if computations behind the purchase page and the static report.

``compare`` replays one workload on several candidate clusters side by side; ``sweep`` varies one
parameter of a candidate (nodes, NIC rate, GPUs per node, price) and ``knee`` finds where the
curve stops paying back. Both run their replays through ``dashboards.parallel.run_parallel``, so
twelve candidates take the time of twelve replays divided by the processes available. A
candidate that cannot run the workload (too few GPUs, say) gets its message instead of a report.

>>> knee([1, 2, 4, 8, 16], [100, 52, 30, 26, 25])
2
>>> knee([1, 2, 3], [3, 2, 1]) is None    # a straight line has no knee
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dashboards.clusters import CandidateCluster
from dashboards.inputs import InputError
from dashboards.parallel import Progress, run_parallel
from dashboards.twin_api import USER_ERRORS, Candidate, ClusterReport, WhatIfReport, evaluate, evaluate_candidate
from dashboards.workloads import WorkloadChoice
from traces.schema import Trace

SWEEP_PARAMETERS = {
    "nodes": "nodes",
    "nic_gbps": "NIC rate (Gb/s)",
    "gpus_per_node": "GPUs per node",
    "price_per_gpu_hour": "price (USD per GPU-hour)",
}
"""What a sweep can vary, with the axis title of each."""

METRICS = {
    "iteration_ms": "iteration time (ms)",
    "usd_per_million_tokens": "USD per million tokens",
    "usd_per_iteration": "USD per iteration",
    "exposed_share": "exposed communication (share of the iteration)",
}
"""What a sweep plots, with the axis title of each; every value is of the tuned iteration when
there is one (NCCL's default otherwise)."""

KNEE_MIN_BEND = 0.1
"""A curve whose farthest point lies less than this far from its chord (both axes scaled to
[0, 1]) is taken as straight: no knee."""


@dataclass(frozen=True)
class _Point:
    workload: WorkloadChoice
    candidate: CandidateCluster
    tuned: bool
    params: object = None


def _evaluate(point: _Point) -> ClusterReport | str:
    """One replay, or the message saying why it cannot run (module level: it runs in workers)."""
    try:
        trace = point.workload.trace()
        c = point.candidate
        cluster = c.build(c.nodes_for(trace.world_size))
        return evaluate(trace, cluster, c.label, c.price_per_gpu_hour, tuned=point.tuned, params=point.params)
    except USER_ERRORS as err:
        return f"{point.candidate.label}: {err}"


@dataclass(frozen=True)
class Comparison:
    """A workload on several candidates: the report of those that ran, messages for the others."""

    report: WhatIfReport
    errors: tuple[str, ...]


def compare(workload: WorkloadChoice, candidates: list[CandidateCluster], *, tuned: bool = True,
            engine: str = "local", params=None, on_progress: Progress | None = None) -> Comparison:
    """Replay ``workload`` on every candidate (sized to the workload unless it gives ``nodes``)."""
    if not candidates:
        raise InputError("no candidate cluster: add at least one row")
    labels = [c.label for c in candidates]
    if len(set(labels)) != len(labels):
        raise InputError("two candidates have the same name; give each row its own name")
    trace = workload.trace()
    outcomes = run_parallel(_evaluate, [_Point(workload, c, tuned, params) for c in candidates], engine=engine,
                            on_progress=on_progress)
    reports = tuple(o for o in outcomes if isinstance(o, ClusterReport))
    return Comparison(WhatIfReport(workload.name, trace, reports), tuple(o for o in outcomes if isinstance(o, str)))


def _evaluate_candidate(job: tuple) -> ClusterReport:
    trace, candidate, tuned, params = job
    return evaluate_candidate(trace, candidate, tuned=tuned, params=params)


def whatif_report(trace: Trace, candidates: list[Candidate], *, tuned: bool = True, name: str = "trace",
                  engine: str = "local", params=None, on_progress: Progress | None = None) -> WhatIfReport:
    """``twin.whatif.what_if`` with the clusters replayed in parallel (``ccltwin whatif --engine``)
    and each one reported to ``on_progress`` (the CLI's bar). A candidate that cannot run raises,
    as ``what_if`` does."""
    jobs = [(trace, c, tuned, params) for c in candidates]
    reports = run_parallel(_evaluate_candidate, jobs, engine=engine, on_progress=on_progress)
    return WhatIfReport(name, trace, tuple(reports))


@dataclass(frozen=True)
class SweepPoint:
    value: float
    report: ClusterReport | None
    error: str | None = None


@dataclass(frozen=True)
class Sweep:
    """One parameter of a candidate varied; a point per value, in the order given."""

    parameter: str
    base: CandidateCluster
    workload: str
    points: tuple[SweepPoint, ...]
    notes: tuple[str, ...] = ()

    def series(self, metric: str) -> tuple[list[float], list[float]]:
        """The values and the metric of the points that ran (and have the metric)."""
        xs, ys = [], []
        for p in self.points:
            y = None if p.report is None else metric_of(p.report, metric)
            if y is not None:
                xs.append(p.value)
                ys.append(y)
        return xs, ys


def metric_of(report: ClusterReport, metric: str) -> float | None:
    """``metric`` (a key of ``METRICS``) of a report's tuned iteration (NCCL's default without one)."""
    best = report.best
    if metric == "iteration_ms":
        return best.mean_iteration_us / 1e3
    if metric == "usd_per_million_tokens":
        return report.cost_per_million_tokens(best)
    if metric == "usd_per_iteration":
        return report.cost_per_iteration(best)
    if metric == "exposed_share":
        return best.exposed_share
    raise InputError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")


def sweep(workload: WorkloadChoice, base: CandidateCluster, parameter: str, values: list[float], *,
          tuned: bool = True, engine: str = "local", params=None, on_progress: Progress | None = None) -> Sweep:
    """Replay ``workload`` on ``base`` with ``parameter`` set to each of ``values``.

    Nodes: a workload with a plan (bundled or generated) grows with the cluster by its
    data-parallel degree, so every node works (a fixed uploaded trace keeps its world and needs
    enough nodes). Price: one replay, priced at each value.
    """
    if parameter not in SWEEP_PARAMETERS:
        raise InputError(f"unknown sweep parameter {parameter!r}; expected one of {', '.join(SWEEP_PARAMETERS)}")
    integer = parameter in ("nodes", "gpus_per_node")
    for v in values:
        if v <= 0 or (integer and not float(v).is_integer()):
            kind = "whole numbers of at least 1" if integer else "positive"
            raise InputError(f"{SWEEP_PARAMETERS[parameter]}: sweep values must be {kind}, got {v:g}")
    values = sorted(set(values))
    notes: list[str] = []
    if parameter == "price_per_gpu_hour":
        point = _Point(workload, base, tuned, params)
        outcome = run_parallel(_evaluate, [point], engine="serial", on_progress=on_progress)[0]
        points = tuple(SweepPoint(v, None, outcome) if isinstance(outcome, str) else
                       SweepPoint(v, replace(outcome, price_per_gpu_hour=v, price_given=True)) for v in values)
        return Sweep(parameter, base, workload.name, points)
    jobs, errors = [], {}
    for v in values:
        candidate = replace(base, **{parameter: int(v) if integer else float(v)})
        work = workload
        if parameter == "nodes" and workload.work is not None:
            try:
                work = workload.scaled(int(v) * candidate.node_gpus())
            except InputError as err:
                errors[v] = str(err)
                continue
        jobs.append((v, _Point(work, candidate, tuned, params)))
    if parameter == "nodes" and workload.work is not None:
        notes.append("the job grows with the cluster: one data-parallel replica more per tp·pp·cp GPUs added")
    outcomes = run_parallel(_evaluate, [p for _, p in jobs], engine=engine, on_progress=on_progress)
    done = {v: o for (v, _), o in zip(jobs, outcomes, strict=True)}
    points = []
    for v in values:
        outcome = done.get(v, errors.get(v))
        points.append(SweepPoint(v, None, outcome) if isinstance(outcome, str) else SweepPoint(v, outcome))
    return Sweep(parameter, base, workload.name, tuple(points), tuple(notes))


def bend(xs: list[float], ys: list[float]) -> np.ndarray:
    """Each point's distance from the chord joining the curve's ends, both axes scaled to [0, 1]
    (zeros for a curve flat on an axis)."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    span_x, span_y = np.ptp(x), np.ptp(y)
    if span_x == 0 or span_y == 0:
        return np.zeros(len(x))
    x, y = (x - x.min()) / span_x, (y - y.min()) / span_y
    dx, dy = x[-1] - x[0], y[-1] - y[0]
    return np.abs(dy * (x - x[0]) - dx * (y - y[0])) / np.hypot(dx, dy)


def knee(xs: list[float], ys: list[float]) -> int | None:
    """Index of the knee of a curve: its point of greatest ``bend`` (the Kneedle idea); ``None``
    for fewer than three points or a curve that bends less than ``KNEE_MIN_BEND``."""
    if len(xs) < 3:
        return None
    distance = bend(xs, ys)
    i = int(np.argmax(distance))
    return i if distance[i] >= KNEE_MIN_BEND and 0 < i < len(xs) - 1 else None
