"""Measurements a fit must not use as they stand, found before fitting and named record by record.

Errors (``CalibrationError``, nothing is fitted):

* measurements of another cluster than the one named: a cluster identity of another name
  (``dgx-h100:8x2`` for ``--topology a40-pcie``), or a log whose hardware description names GPU
  models of which none is the cluster's (an H100 log for an A100 cluster);
* calls on more GPUs than the cluster has (the hint: ``--nodes``);
* units that look wrong: a busbw above twice what the links out of a GPU carry one way (no
  algorithm reaches that, in-switch reduction included: NVLS's busbw tops out below it), or
  times whose median is more than ``UNIT_RATIO`` times off the twin's (ms or ns read as µs);
* too few points: fewer than ``MIN_POINTS`` measurements.

Warnings (fitted anyway, listed in the result):

* empty messages (left out: nothing to time);
* measurements of one call (same task, config, launch and interference) that contradict each
  other, their times more than ``CONTRADICTION`` apart: the robust loss keeps the fit from
  following either far, but the records are named so the cause can be looked for.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from tuner.identity import parse_identity
from twin.calibrate.errors import CalibrationError
from twin.calibrate.points import Point
from twin.hardware import GPUS
from twin.topology import Cluster

__all__ = ["CONTRADICTION", "LINK_BOUND", "MIN_POINTS", "UNIT_RATIO", "check_points", "check_units"]

MIN_POINTS = 6
CONTRADICTION = 1.5
"""Two times of one call further apart than this ratio contradict each other."""
LINK_BOUND = 2.0
"""No collective's busbw exceeds this many times the one-way bandwidth of a GPU's links."""
UNIT_RATIO = 20.0
"""Median measured/predicted time beyond which (either way) the units look wrong."""
SHOWN = 3
"""Records named per problem."""


def _families() -> dict[str, str]:
    """Each known GPU model's family as a hardware description names it (``A100``, ``H200``, ``L40S``)."""
    return {model: re.search(r"[A-Z]\d+S?", model.replace("RTX-", ""))[0] for model in GPUS}


def _named(points: Sequence[Point]) -> str:
    shown = ", ".join(p.where for p in points[:SHOWN])
    more = f" and {len(points) - SHOWN} more" if len(points) > SHOWN else ""
    return shown + more


def check_points(points: Sequence[Point], cluster: Cluster) -> tuple[list[Point], list[str]]:
    """The points a fit can use and warnings about the others (module docstring); raises
    ``CalibrationError`` for the errors."""
    warnings = []
    empty = [p for p in points if p.task.nbytes == 0]
    if empty:
        warnings.append(f"left out {len(empty)} empty message(s), nothing to time: {_named(empty)}")
    usable = [p for p in points if p.task.nbytes > 0]
    _check_cluster(usable, cluster)
    if len(usable) < MIN_POINTS:
        raise CalibrationError(f"too few points: {len(usable)} measurement(s) with a message; a fit and its "
                               f"held-out evaluation need at least {MIN_POINTS}")
    _check_link_bound(usable, cluster)
    warnings += _contradictions(usable)
    return usable, warnings


def _check_cluster(points: Sequence[Point], cluster: Cluster) -> None:
    name = cluster.identity.split(":")[0]
    other = [p for p in points if (ident := parse_identity(p.measurement.hardware)) is not None and ident.name != name]
    if other:
        raise CalibrationError(f"measurements of another cluster ({other[0].measurement.hardware}), not "
                               f"{cluster.identity}: {_named(other)}")
    families = _families()
    ours = families[cluster.gpu.model]
    for described in sorted({p.described or p.measurement.hardware for p in points}):
        named = {f for f in set(families.values()) if re.search(rf"(?<![A-Za-z0-9]){f}(?![0-9A-Za-z])", described)}
        if named and ours not in named:
            wrong = [p for p in points if (p.described or p.measurement.hardware) == described]
            raise CalibrationError(f"measurements of another cluster: their hardware names {', '.join(sorted(named))}, "
                                   f"cluster {cluster.identity} has {cluster.gpu.model} GPUs: {_named(wrong)}")
    gpus = len(cluster.gpus())
    big = [p for p in points if p.task.nranks > gpus]
    if big:
        need = max(p.task.nranks for p in big)
        raise CalibrationError(f"calls on up to {need} GPUs, cluster {cluster.identity} has {gpus} (give it more "
                               f"nodes: --nodes {-(-need // cluster.gpus_per_node)}): {_named(big)}")


def _check_link_bound(points: Sequence[Point], cluster: Cluster) -> None:
    graph = cluster.graph
    one_way = max(sum(d["bw"] for _, _, d in graph.edges(g, data=True)) for g in cluster.gpus())
    over = [p for p in points if p.task.busbw_gbps(p.time_us) > LINK_BOUND * one_way]
    if over:
        worst = max(p.task.busbw_gbps(p.time_us) for p in over)
        raise CalibrationError(f"busbw up to {worst:,.0f} GB/s, above {LINK_BOUND:g}x the {one_way:,.0f} GB/s a GPU's "
                               f"links carry one way on {cluster.identity}: are the times in µs? {_named(over)}")


def _contradictions(points: Sequence[Point]) -> list[str]:
    calls: dict[tuple, list[Point]] = {}
    for p in points:
        m = p.measurement
        key = (m.task, m.config, tuple(sorted(m.env.items())), p.gpus_per_process, m.interference, m.hardware)
        calls.setdefault(key, []).append(p)
    out = []
    for same in calls.values():
        fast, slow = min(same, key=lambda p: p.time_us), max(same, key=lambda p: p.time_us)
        if slow.time_us > CONTRADICTION * fast.time_us:
            out.append(f"contradicting measurements of one call ({fast.task.op} {fast.task.nbytes} B on "
                       f"{fast.task.nranks} ranks): {fast.where} took {fast.time_us:.4g} µs, {slow.where} "
                       f"{slow.time_us:.4g} µs ({slow.time_us / fast.time_us:.2g}x)")
    return out


def check_units(points: Sequence[Point], predicted_us: Sequence[float]) -> None:
    """Raise ``CalibrationError`` when the measured times are ``UNIT_RATIO`` times off the twin's
    predictions (``predicted_us``, aligned with ``points``) in the median."""
    ratio = statistics.median(p.time_us / t for p, t in zip(points, predicted_us, strict=True))
    if not 1 / UNIT_RATIO <= ratio <= UNIT_RATIO:
        way = "slower" if ratio > 1 else "faster"
        raise CalibrationError(f"the measured times are {max(ratio, 1 / ratio):,.0f}x {way} than the twin predicts in "
                               f"the median: are they in µs (not ms or ns)? {_named(list(points))}")
