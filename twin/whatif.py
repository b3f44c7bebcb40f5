"""What-if: one workload on several candidate clusters, with NCCL's default and tuned, side by side.

For each cluster the trace is replayed twice (``twin.replay``): once with what stock NCCL would
choose for every collective, once with the best configuration the fast path finds per task.
The report gives per cluster the iteration time both ways, the communication share, the
communication that compute does not hide, each task's bus bandwidth both ways, and the cost
of an iteration (and of a million tokens when the trace says how many an iteration trains).

    report = what_if(trace, [Candidate("dgx-h100"), Candidate("dgx-a100")])
    print(format_text(report))

The tuned search is ``ccltwin rank``'s engine (``twin.rank.rank_task``): per task, on the
communicator of its first call, every ⟨algorithm, protocol⟩ the tuner's config space admits
(``tuner.space.ConfigSpace``) with NCCL's default p2p transport (the transport is a per-process
setting, not a per-call one) over the whole resource grid, channels up to the space's cap (NCCL
is set up before the job, so a communicator may get more channels than NCCL's default).  It
minimises what a call costs the iteration, not its time alone: the part of a call that compute
hides (as much as it hid with NCCL's default, in the default replay) costs only the compute its
channels' SMs hold back, the rest costs its time (``call_cost``), so hidden calls get fewer
channels but no more time than compute covers.  Then, as the live tuner keeps only its winners,
a task whose tuned calls cost more than the default's in the tuned replay (where they share
links with everything else) goes back to NCCL's default and the trace is replayed again; if the
iteration is still slower, NCCL's default stays everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from traces.errors import CcltwinError
from traces.schema import Trace
from traces.task import Task
from tuner.config import Config, Transport
from tuner.knobs import DEFAULT_NCCL_VERSION
from tuner.space import CHANNEL_FIELD_MAX, ConfigError
from twin.hardware import GPUS
from twin.iteration import IterationBreakdown, breakdown
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement import Communicator, Placement, cluster_for
from twin.rank import call_cost, rank_task
from twin.replay import ReplayResult, TaskTimes, replay
from twin.topology import Cluster

PRICE_PER_GPU_HOUR = {model: gpu.price_per_gpu_hour for model, gpu in GPUS.items()}
"""USD per GPU-hour by GPU model: each ``twin.hardware.GpuSpec.price_per_gpu_hour`` (rounded 2025
on-demand list prices).  They only put clusters on one scale; pass your own price for a real quote."""



MAX_PRICE_PER_GPU_HOUR = 10_000.0
"""A price per GPU-hour above this is a typing mistake: list prices of 2026's largest GPUs are
under 100 USD (``PRICE_PER_GPU_HOUR``); far larger ones would overflow the costs printed."""


@dataclass(frozen=True)
class Candidate:
    """A cluster to try: a preset or YAML file, its node count (None: as many as the trace
    needs), a price per GPU-hour (None: ``PRICE_PER_GPU_HOUR`` by GPU model) and the NCCL
    release it runs."""

    topology: str
    nodes: int | None = None
    price_per_gpu_hour: float | None = None
    nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION
    tuner: str | None = None
    """NCCL's tuner plugin in place of the description's (``load_cluster``'s ``tuner``)."""
    tuner_config: str | None = None
    """A gIB tuner config in place of the description's tuner (``load_cluster``'s ``tuner_config``)."""

    def __post_init__(self) -> None:
        price = self.price_per_gpu_hour
        if price is not None and not (math.isfinite(price) and 0 <= price <= MAX_PRICE_PER_GPU_HOUR):
            raise CcltwinError(f"{self.topology}: a price per GPU-hour must be a number from 0 to "
                               f"{MAX_PRICE_PER_GPU_HOUR:,.0f} USD, got {price}")


@dataclass(frozen=True)
class TaskComparison:
    """One task on one cluster: NCCL's default and the tuned configuration, as replayed."""

    default: TaskTimes
    tuned: TaskTimes | None

    @property
    def task(self) -> Task:
        return self.default.task

    def as_dict(self) -> dict:
        d = self.default.as_dict()
        out = {k: d[k] for k in ("op", "nbytes", "dtype", "nranks", "group", "calls_per_iteration")}
        out["default"] = {k: d[k] for k in ("config", "time_us", "alone_us", "busbw_gbps")}
        out["tuned"] = None
        if self.tuned is not None:
            t = self.tuned.as_dict()
            out["tuned"] = {k: t[k] for k in ("config", "chosen_by", "time_us", "alone_us", "busbw_gbps")}
        return out


@dataclass(frozen=True)
class ClusterReport:
    """One candidate cluster: its replays with NCCL's default and tuned, and their cost."""

    cluster: str
    """The cluster's identity (``dgx-h100:8x2``, ``tuner.identity``)."""
    topology: str
    nodes: int
    gpus: int
    gpu: str
    price_per_gpu_hour: float
    price_given: bool
    default: ReplayResult
    tuned: ReplayResult | None
    tokens_per_iteration: float | None = None
    tasks: tuple[TaskComparison, ...] = field(default=())
    breakdown: IterationBreakdown | None = None
    """Where the iteration's time goes with NCCL's default (``twin.iteration``)."""
    tuned_breakdown: IterationBreakdown | None = None

    @property
    def best(self) -> ReplayResult:
        return self.tuned if self.tuned is not None else self.default

    @property
    def speedup(self) -> float | None:
        """Default iteration time over tuned."""
        if self.tuned is None or not self.tuned.mean_iteration_us:
            return None
        return self.default.mean_iteration_us / self.tuned.mean_iteration_us

    def cost_per_iteration(self, result: ReplayResult) -> float:
        """USD for one iteration on the whole cluster."""
        return self.gpus * self.price_per_gpu_hour * result.mean_iteration_us / 3.6e9

    def cost_per_million_tokens(self, result: ReplayResult) -> float | None:
        if not self.tokens_per_iteration:
            return None
        return self.cost_per_iteration(result) / self.tokens_per_iteration * 1e6

    def as_dict(self) -> dict:
        def cost(result: ReplayResult) -> dict:
            per_m = self.cost_per_million_tokens(result)
            return {"usd_per_iteration": _sig(self.cost_per_iteration(result)),
                    "usd_per_million_tokens": None if per_m is None else _sig(per_m)}

        return {
            "cluster": self.cluster, "topology": self.topology, "nodes": self.nodes, "gpus": self.gpus, "gpu": self.gpu,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "price_source": "given" if self.price_given else "PRICE_PER_GPU_HOUR (list price, 2025)",
            "tokens_per_iteration": self.tokens_per_iteration,
            "default": {**_summary(self.default), "cost": cost(self.default)},
            "tuned": None if self.tuned is None else {**_summary(self.tuned), "cost": cost(self.tuned)},
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "tasks": [t.as_dict() for t in self.tasks],
            "breakdown": {"default": self.breakdown and self.breakdown.as_dict(),
                          "tuned": self.tuned_breakdown and self.tuned_breakdown.as_dict()},
            "notes": list(self.default.notes),
        }


@dataclass(frozen=True)
class WhatIfReport:
    """A trace on several clusters."""

    trace_name: str
    trace: Trace
    clusters: tuple[ClusterReport, ...]

    def as_dict(self) -> dict:
        t = self.trace
        return {
            "trace": {"name": self.trace_name, "source": t.source, "world_size": t.world_size,
                      "ranks_in_trace": len(t.ranks), "iterations": t.iterations,
                      "events": sum(len(r.events) for r in t.ranks),
                      "workload": t.metadata.get("workload"), "tokens_per_iteration": _tokens(t)},
            "predicted": True,
            "clusters": [c.as_dict() for c in self.clusters],
        }


def _sig(x: float) -> float:
    """``x`` to 6 significant digits (costs per iteration are fractions of a cent)."""
    return float(f"{x:.6g}")


def _summary(result: ReplayResult) -> dict:
    d = result.as_dict()
    return {k: d[k] for k in ("iteration_us", "iterations_us", "compute_us", "comm_us", "exposed_comm_us",
                              "comm_share", "exposed_share")}


def _tokens(trace: Trace) -> float | None:
    value = trace.metadata.get("tokens_per_iteration")
    return float(value) if isinstance(value, int | float) and value > 0 else None


# ---- the search ----------------------------------------------------------------------------


def replayed_cost(t: TaskTimes, sm_count: int) -> float:
    """``call_cost`` of a task's calls as a replay saw them."""
    return float(call_cost(t.time_us, t.config.nchannels, t.time_us - t.exposed_us, sm_count))


def tuned_config(comm: Communicator, task: Task, hidden_us: float = 0.0) -> Config | None:
    """The configuration of ``task`` on ``comm`` with the least ``call_cost`` alone on the network,
    if compute hides ``hidden_us`` of each call (``twin.rank.rank_task`` with NCCL's transport and
    as many channels as the config space allows); ``None`` when nothing beats NCCL's default."""
    try:
        entry = rank_task(comm, task, transports=(Transport.P2P,), hidden_us=hidden_us, max_channels=CHANNEL_FIELD_MAX)
    except ConfigError:
        return None
    sms = comm.cluster.gpu.sm_count
    best = min((entry.default, *entry.ranked), key=lambda r: float(call_cost(r.time_us, r.config.nchannels,
                                                                             hidden_us, sms)))
    return None if best.config == entry.default.config else best.config


def tuned_configs(placement: Placement, default: ReplayResult) -> dict[Task, Config]:
    """The tuned configuration of every task that beats NCCL's default on the communicator of its
    first call, counting on compute to hide as much of each call as it hid in the default replay."""
    hidden = {t.task: t.time_us - t.exposed_us for t in default.tasks}
    tuned = {task: tuned_config(comm, task, hidden[task]) for task, comm in placement.task_communicators().items()
             if task in hidden}
    return {task: config for task, config in tuned.items() if config is not None}


def tune(trace: Trace, placement: Placement, default: ReplayResult) -> ReplayResult:
    """Replay with the tuned configurations and keep only the winners, as the live tuner does: a
    task whose tuned calls cost more in the replay (sharing links with everything else) than
    NCCL's default goes back to it and the trace is replayed again; if the iteration is still
    slower, NCCL's default stays for every task."""
    configs = tuned_configs(placement, default)
    tuned = replay(trace, placement.cluster, configs, placement=placement, params=placement.params)
    sms = placement.cluster.gpu.sm_count
    before = {t.task: t for t in default.tasks}
    losers = [t.task for t in tuned.tasks
              if t.task in configs and replayed_cost(t, sms) > replayed_cost(before[t.task], sms)]
    if losers:
        for task in losers:
            del configs[task]
        tuned = replay(trace, placement.cluster, configs, placement=placement, params=placement.params)
    if tuned.mean_iteration_us > default.mean_iteration_us:
        return replace(default, notes=(*default.notes, "no tuned configuration shortened the iteration: "
                                       "NCCL's default kept for every task"))
    return tuned


# ---- the report ----------------------------------------------------------------------------


def evaluate(trace: Trace, candidate: Candidate, *, tuned: bool = True, params: TwinParams = DEFAULT_PARAMS
             ) -> ClusterReport:
    """Replay ``trace`` on one candidate cluster (sized to the trace unless ``nodes`` is given),
    with the twin's physical constants ``params``."""
    cluster = cluster_for(trace, candidate.topology, nodes=candidate.nodes, tuner=candidate.tuner,
                          tuner_config=candidate.tuner_config)
    return evaluate_cluster(trace, cluster, candidate, tuned=tuned, params=params)


def evaluate_cluster(trace: Trace, cluster: Cluster, candidate: Candidate, *, tuned: bool = True,
                     params: TwinParams = DEFAULT_PARAMS, configs: dict[Task, Config] | None = None) -> ClusterReport:
    """Replay ``trace`` on ``cluster``, built already (an edited description, say); ``candidate``
    names it, gives its price and the NCCL release.  ``configs`` (a warm-start plan's,
    ``plan_configs``) replace the tuned search.  The job is priced for the GPUs it uses."""
    placement = Placement(trace, cluster, candidate.nccl_version, params=params)
    default = replay(trace, cluster, placement=placement, params=params)
    if configs is not None:
        tuned_result = replay(trace, cluster, configs, placement=placement, params=params)
    else:
        tuned_result = tune(trace, placement, default) if tuned else None
    by_task = {t.task: t for t in tuned_result.tasks} if tuned_result else {}
    price = candidate.price_per_gpu_hour
    gpus = min(len(cluster.gpus()), trace.world_size)
    return ClusterReport(
        cluster=cluster.identity, topology=candidate.topology, nodes=cluster.nodes, gpus=gpus,
        gpu=cluster.gpu.model, price_per_gpu_hour=price if price is not None else cluster.gpu.price_per_gpu_hour,
        price_given=price is not None, default=default, tuned=tuned_result, tokens_per_iteration=_tokens(trace),
        tasks=tuple(TaskComparison(t, by_task.get(t.task)) for t in default.tasks),
        breakdown=breakdown(trace, default), tuned_breakdown=tuned_result and breakdown(trace, tuned_result))


def what_if(trace: Trace, candidates: list[Candidate], *, tuned: bool = True, name: str = "trace",
            params: TwinParams = DEFAULT_PARAMS) -> WhatIfReport:
    """``trace`` on every candidate cluster, in the order given, with the twin's ``params``."""
    return WhatIfReport(name, trace, tuple(evaluate(trace, c, tuned=tuned, params=params) for c in candidates))
