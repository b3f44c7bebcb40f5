"""The computations behind the collective explorer and the configuration landscape.

``predict_curve`` is ``ccltwin simulate`` on one cluster: an op over a range of sizes, with NCCL's
choice or with the algorithm, protocol and channels given. ``landscape`` is ``ccltwin rank`` on
one task: every subspace's best point, the full ⟨channels, threads, chunk⟩ grid of one subspace
for the heatmap, and a tuner run in the twin whose trials are drawn on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboards.clusters import CandidateCluster
from dashboards.inputs import InputError
from dashboards.twin_api import (
    SEARCHES,
    PlanEntry,
    SubspaceSweep,
    heatmap_sweep,
    nccl_label,
    predict_sizes,
    rank,
    tune_trajectory,
)
from traces.task import Op, parse_op
from traces.units import parse_size_range
from tuner.config import Algo, Config, Proto, Subspace, parse_enum


@dataclass(frozen=True)
class PredictedCurve:
    """The twin's busbw of one op over sizes on one cluster."""

    cluster: str
    op: str
    nranks: int
    setting: str
    """``NCCL default``, or the knobs given (``ring/ll128 nc=8``)."""
    nccl: str
    nbytes: tuple[int, ...]
    busbw_gbps: tuple[float, ...]
    configs: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"predicted: {self.op} x{self.nranks} on {self.cluster} ({self.setting})"


def parse_sizes(text: str) -> list[int]:
    """``8B:1GiB`` (factor 2), ``1KiB:1GiB:4`` or a comma list, as ``ccltwin simulate --sizes``."""
    try:
        sizes = parse_size_range(text)
    except ValueError as err:
        raise InputError(f"sizes {text!r}: {err}") from None
    if not sizes or min(sizes) < 1:
        raise InputError(f"sizes {text!r}: give sizes of at least 1 byte")
    return sizes


def _knobs(algo: str | None, proto: str | None, nchannels: int | None) -> dict:
    try:
        return {"algo": parse_enum(Algo, algo) if algo else None, "proto": parse_enum(Proto, proto) if proto else None,
                "nchannels": nchannels}
    except ValueError as err:
        raise InputError(str(err)) from None


def predict_curve(candidate: CandidateCluster, op: str, sizes: list[int], *, nranks: int | None = None,
                  algo: str | None = None, proto: str | None = None, nchannels: int | None = None,
                  params=None) -> PredictedCurve:
    """``op`` at every size on ``candidate`` (``nodes`` nodes, else 1), on ``nranks`` of its GPUs."""
    the_op = _op(op)
    knobs = _knobs(algo, proto, nchannels)
    cluster = _cluster(candidate, nranks)
    predictions = predict_sizes(cluster, the_op, sizes, nranks=nranks, params=params, **knobs)
    given = [f"{v}" for v in (knobs["algo"], knobs["proto"]) if v] + (
        [f"nc={nchannels}"] if nchannels else [])
    return PredictedCurve(cluster.label, str(the_op), predictions[0].task.nranks if predictions else 0,
                          "/".join(given) if given else "NCCL default", nccl_label(),
                          tuple(p.task.nbytes for p in predictions), tuple(p.busbw_gbps for p in predictions),
                          tuple(str(p.config) for p in predictions))


def _cluster(candidate: CandidateCluster, nranks: int | None):
    """``candidate`` with the nodes ``nranks`` needs; ``InputError`` unless the ranks fill whole
    nodes or part of one (where the twin places a communicator)."""
    per_node = candidate.node_gpus()
    if nranks is not None and nranks > per_node and nranks % per_node:
        raise InputError(f"{candidate.label}: {nranks} ranks do not fill whole nodes of {per_node} GPUs")
    cluster = candidate.build(candidate.nodes_for(nranks or 1))
    if nranks is not None and nranks > len(cluster.gpus()):
        raise InputError(f"{candidate.label}: {nranks} ranks, but {cluster.label} has {len(cluster.gpus())} GPUs")
    return cluster


def _op(op: str) -> Op:
    try:
        return parse_op(op)
    except ValueError as err:
        raise InputError(str(err)) from None


@dataclass(frozen=True)
class Landscape:
    """One task on one cluster: the ranked subspaces, one subspace's grid, and a tuner run."""

    cluster: str
    entry: PlanEntry
    subspace: Subspace
    grid: SubspaceSweep
    search: str
    trials: tuple[tuple[Config, float], ...]
    default: Config

    @property
    def task(self):
        return self.entry.task


def landscape(candidate: CandidateCluster, op: str, nbytes: int, nranks: int | None = None, *,
              subspace: str | None = None, search: str = "autoccl", seed: int = 0, params=None,
              on_trial=None) -> Landscape:
    """Rank ``op`` of ``nbytes`` on ``nranks`` GPUs of ``candidate``, sweep ``subspace`` (default:
    the fastest) over its whole grid and run ``search`` on the task in the twin (2% noise)."""
    if search not in SEARCHES:
        raise InputError(f"unknown search {search!r}; expected one of {', '.join(SEARCHES)}")
    if nbytes < 1:
        raise InputError("the message size must be at least 1 byte")
    cluster = _cluster(candidate, nranks)
    twin, task, entry = rank(cluster, _op(op), nbytes, nranks, params=params)
    chosen = entry.ranked[0].subspace
    if subspace:
        by_name = {str(r.subspace): r.subspace for r in entry.ranked}
        if subspace not in by_name:
            raise InputError(f"subspace {subspace!r} is not among this task's: {', '.join(by_name)}")
        chosen = by_name[subspace]
    grid = heatmap_sweep(twin, task, entry, chosen)
    trials, default = tune_trajectory(cluster, task, search, seed=seed, on_trial=on_trial, params=params)
    return Landscape(cluster.label, entry, chosen, grid, search, tuple(trials), default)


def predict_curves(candidates: list[CandidateCluster], ops: list[str], sizes: list[int], *, nranks: int | None = None,
                   algo: str | None = None, proto: str | None = None, nchannels: int | None = None, params=None,
                   on_progress=None) -> list[PredictedCurve]:
    """``predict_curve`` for every candidate and op, reporting each finished curve."""
    if not candidates or not ops:
        raise InputError("choose at least one cluster and one collective")
    jobs = [(c, op) for c in candidates for op in ops]
    out = []
    for c, op in jobs:
        out.append(predict_curve(c, op, sizes, nranks=nranks, algo=algo, proto=proto, nchannels=nchannels,
                                 params=params))
        if on_progress is not None:
            on_progress(len(out), len(jobs))
    return out
