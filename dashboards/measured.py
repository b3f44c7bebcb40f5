"""What the tuning store (or an nccl-tests log) measured, shaped for the pages, and the twin's
predictions of the same calls.

An nccl-tests log imported into the store is one measured curve per (op, ranks, forced
algorithm/protocol): ``measured_curves`` gives it back as sizes and bus bandwidths for the
collective explorer. The trials of a tuning run are ``tuning_runs`` (a run starts again where the
trial index drops back to 0). ``calibration_points`` pairs every measured call with the twin's
prediction of it on a cluster the user says the hardware is.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from dashboards.clusters import CandidateCluster
from dashboards.inputs import InputError
from dashboards.twin_api import USER_ERRORS, Store, predict_measured
from traces.errors import TraceError
from traces.task import Task
from tuner.measurement import Measurement, read_nccl_tests_measurements

SIZE_REGIMES = ((64 << 10, "latency-bound (< 64 KiB)"), (16 << 20, "middle (64 KiB to 16 MiB)"),
                (math.inf, "bandwidth-bound (≥ 16 MiB)"))
"""Size classes for accuracy: below 64 KiB a collective's time is mostly per-step latency (NCCL's
LL range), above 16 MiB mostly bytes over the slowest link; between, both."""


def regime(nbytes: int) -> str:
    """The ``SIZE_REGIMES`` label of a size.

    >>> regime(1 << 30)
    'bandwidth-bound (≥ 16 MiB)'
    """
    return next(label for top, label in SIZE_REGIMES if nbytes < top)


def read_store(path: str | Path, hardware: str | None = None) -> list[Measurement]:
    """Every measurement of ``hardware`` (or all) in the store at ``path``, in recorded order."""
    with Store(path, create=False) as store:
        return store.history(hardware=hardware)


def measured_hardware_ids(path: str | Path) -> list[str]:
    """The hardware ids of the store's measured rows (not twin predictions)."""
    with Store(path, create=False) as store:
        return store.hardware_ids(measured=True)


def read_log_upload(filename: str, content: bytes, hardware: str | None = None) -> list[Measurement]:
    """The measurements of an uploaded nccl-tests log; errors name ``filename``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / (Path(filename).name or "upload.log")
        path.write_bytes(content)
        try:
            return read_nccl_tests_measurements(path, hardware=hardware)
        except TraceError as err:
            raise InputError(str(err).replace(str(path), f"upload {filename!r}")) from None


def forced(m: Measurement) -> str:
    """What constrained NCCL's choice in a measurement: ``NCCL_ALGO=ring`` etc., or ``""``."""
    return " ".join(f"{k}={v}" for k, v in sorted(m.env.items()) if k in ("NCCL_ALGO", "NCCL_PROTO"))


@dataclass(frozen=True)
class MeasuredCurve:
    """Measured calls of one op on one rank count under one setting, by size."""

    hardware: str
    op: str
    nranks: int
    source: str
    nccl_version: str
    setting: str
    nbytes: tuple[int, ...]
    busbw_gbps: tuple[float, ...]

    @property
    def label(self) -> str:
        setting = f", {self.setting}" if self.setting else ""
        return f"measured: {self.op} x{self.nranks} on {self.hardware} ({self.source}{setting})"


def measured_curves(measurements: list[Measurement], op: str | None = None) -> list[MeasuredCurve]:
    """Curves of NCCL-default measurements (``config`` None) by (hardware, op, ranks, setting);
    a size measured several times shows its fastest time, as nccl-tests' best-of does."""
    groups: dict[tuple, dict[int, Measurement]] = defaultdict(dict)
    for m in measurements:
        if m.config is not None or (op is not None and m.task.op != op):
            continue
        key = (m.hardware, str(m.task.op), m.task.nranks, m.source, m.nccl_version, forced(m))
        seen = groups[key].get(m.task.nbytes)
        if seen is None or m.time_us < seen.time_us:
            groups[key][m.task.nbytes] = m
    out = []
    for (hardware, the_op, nranks, source, version, setting), by_size in sorted(groups.items()):
        sizes = sorted(by_size)
        busbw = [by_size[n].task.busbw_gbps(by_size[n].time_us) for n in sizes]
        out.append(MeasuredCurve(hardware, the_op, nranks, source, version or "unknown", setting, tuple(sizes),
                                 tuple(busbw)))
    return out


def tuned_tasks(measurements: list[Measurement]) -> list[tuple[str, Task]]:
    """(hardware, task) of every task with trials (measurements with a config), in first-seen order."""
    seen: dict[tuple[str, Task], None] = {}
    for m in measurements:
        if m.config is not None:
            seen.setdefault((m.hardware, m.task), None)
    return list(seen)


def tuning_runs(measurements: list[Measurement], hardware: str, task: Task) -> list[list[Measurement]]:
    """The trials of ``task`` on ``hardware``, split into runs where the trial index (``occurrence``)
    drops back; trials without an index belong to the run before them."""
    runs: list[list[Measurement]] = []
    last = None
    for m in measurements:
        if m.hardware != hardware or m.task != task or m.config is None:
            continue
        if not runs or (m.occurrence is not None and last is not None and m.occurrence <= last):
            runs.append([])
        runs[-1].append(m)
        last = m.occurrence if m.occurrence is not None else last
    return runs


def default_measurements(measurements: list[Measurement], hardware: str, task: Task) -> list[Measurement]:
    """Measured NCCL-default calls (no config, no forced algorithm) of ``task``'s op, size and ranks."""
    return [m for m in measurements if m.hardware == hardware and m.config is None and not forced(m)
            and (m.task.op, m.task.nbytes, m.task.nranks) == (task.op, task.nbytes, task.nranks)]


@dataclass(frozen=True)
class CalibrationPoint:
    measurement: Measurement
    predicted_us: float

    @property
    def error(self) -> float:
        """Relative error of the prediction: (predicted − measured) / measured."""
        return self.predicted_us / self.measurement.time_us - 1


def calibration_points(measurements: list[Measurement], candidate: CandidateCluster, *, params=None
                       ) -> tuple[list[CalibrationPoint], list[str]]:
    """Every measured call (of any source but the twin) predicted on ``candidate`` sized to its rank
    count; calls the twin cannot place or run are left out with a note."""
    points, notes, clusters = [], [], {}
    for m in measurements:
        if m.source == "twin":
            continue
        nodes = candidate.nodes_for(m.task.nranks)
        try:
            if nodes not in clusters:
                clusters[nodes] = candidate.build(nodes)
            points.append(CalibrationPoint(m, predict_measured(clusters[nodes], m, params=params).time_us))
        except USER_ERRORS as err:
            note = f"{m.task.op} x{m.task.nranks} {forced(m)}: {err}".replace("  ", " ")
            if note not in notes:
                notes.append(note)
    return points, notes


def regime_errors(points: list[CalibrationPoint]) -> dict[str, tuple[int, float]]:
    """Per size regime (those with points): how many points, and their mean absolute relative error."""
    out = {}
    for _, label in SIZE_REGIMES:
        errors = [abs(p.error) for p in points if regime(p.measurement.task.nbytes) == label]
        if errors:
            out[label] = (len(errors), sum(errors) / len(errors))
    return out


CONVERGED_WITHIN = 0.01
"""A run has converged at the first trial whose best-so-far is within 1% of the run's final best."""


def best_so_far(times: list[float]) -> list[float]:
    """Running minimum.

    >>> best_so_far([5.0, 3.0, 4.0, 2.0])
    [5.0, 3.0, 3.0, 2.0]
    """
    out, best = [], math.inf
    for t in times:
        best = min(best, t)
        out.append(best)
    return out


def converged_at(times: list[float]) -> int:
    """1-based trial at which ``best_so_far`` first comes within ``CONVERGED_WITHIN`` of the final best.

    >>> converged_at([10.0, 6.0, 5.02, 5.0])
    3
    """
    running = best_so_far(times)
    final = running[-1]
    return next(i for i, b in enumerate(running, 1) if b <= final * (1 + CONVERGED_WITHIN))
