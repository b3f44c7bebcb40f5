"""What a calibration fits: measured calls, each with where it came from and how it was launched.

A ``Point`` is one ``Measurement`` (a task, the config that ran or NCCL's own choice under the
recorded ``NCCL_*`` variables, a time) plus the record it came from, named so that a message can
point at it (``all_reduce.log: 1048576 B float32``, ``tuning.db: history row 12``), the GPUs one
host thread drove (nccl-tests ``-g``) and, for logs, the hardware description of their header.

``read_points`` takes files and stores as ``ccltwin calibrate --measurements`` names them: an
SQLite tuning store (its history, without twin predictions), a JSON or JSON-lines file of
measurement records (``Measurement.to_dict``, as ``ccltwin bench`` writes them), or any
nccl-tests result file ``traces.nccl_tests`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from traces.errors import TraceError
from traces.nccl_tests import read_nccl_tests
from traces.task import Task
from tuner.codec import FieldError
from tuner.measurement import Measurement, read_nccl_tests_measurements
from tuner.store import Store, StoreError
from twin.calibrate.errors import CalibrationError

__all__ = ["Point", "points_of", "read_points"]

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One measured call and where it came from."""

    measurement: Measurement
    where: str
    """The record, as a message names it (``file: 1048576 B float32``, ``store: history row 12``)."""
    gpus_per_process: int = 1
    """GPUs one host thread drove (nccl-tests ``-g``; 1 for a job with a process per GPU)."""
    described: str = ""
    """The hardware as the source describes it (an nccl-tests header's ``HARDWARE`` line);
    empty when only ``measurement.hardware`` says."""

    @property
    def task(self) -> Task:
        return self.measurement.task

    @property
    def time_us(self) -> float:
        return self.measurement.time_us

    @property
    def back_to_back(self) -> bool:
        """nccl-tests times calls issued back to back: one-way collectives overlap there."""
        return self.measurement.source == "nccl-tests"


def points_of(measurements: Iterable[Measurement], where: str, *, gpus_per_process: int = 1,
              described: str = "") -> list[Point]:
    """Points of measurements held in memory, named ``where: record N``; predictions
    (``source="twin"``) are left out: a fit learns from measured times only."""
    return [Point(measurement=m, where=f"{where}: record {i}", gpus_per_process=gpus_per_process, described=described)
            for i, m in enumerate(measurements, 1) if m.source != "twin"]


def read_points(sources: Sequence[str | PathLike[str]], *, hardware: str | None = None,
                gpus_per_process: int | None = None) -> list[Point]:
    """Every measured call in ``sources`` (stores, measurement files, nccl-tests logs).

    ``hardware`` picks one cluster's rows of a store that holds several (and names the hardware
    of logs that do not say); ``gpus_per_process`` overrides what a log says of its launch (and
    is 1 elsewhere by default). Raises ``CalibrationError`` naming the source that cannot be read.
    """
    out: list[Point] = []
    for source in sources:
        path = Path(source)
        if not path.is_file():
            raise CalibrationError(f"{path}: no such file (expected a tuning store, a measurement file or an "
                                   "nccl-tests log)")
        with open(path, "rb") as file:
            head = file.read(len(SQLITE_MAGIC))
        if head == SQLITE_MAGIC:
            out += _store_points(path, hardware, gpus_per_process or 1)
        elif path.suffix in (".jsonl", ".json") and _holds_records(path):
            out += _record_points(path, gpus_per_process or 1)
        else:
            out += _log_points(path, hardware, gpus_per_process)
    return out


def _store_points(path: Path, hardware: str | None, gpus_per_process: int) -> list[Point]:
    try:
        with Store(path, create=False) as store:
            known = store.hardware_ids()
            if hardware is None and len(known) > 1:
                raise CalibrationError(f"{path}: the store holds measurements of {', '.join(map(repr, known))}; "
                                       "say which cluster's to fit (--hardware)")
            rows = store.history(hardware=hardware)
    except StoreError as err:
        raise CalibrationError(str(err)) from None
    return [Point(measurement=m, where=f"{path}: history row {i} ({m.source} {m.task.op} {m.task.nbytes} B)",
                  gpus_per_process=gpus_per_process) for i, m in enumerate(rows, 1) if m.source != "twin"]


def _holds_records(path: Path) -> bool:
    """Whether a JSON file starts like measurement records rather than nccl-tests' own JSON."""
    with open(path, encoding="utf-8", errors="replace") as file:
        start = file.read(4096).lstrip()
    return start.startswith("[") or (start.startswith("{") and '"results"' not in start)


def _record_points(path: Path, gpus_per_process: int) -> list[Point]:
    text = path.read_text(encoding="utf-8")
    try:
        if text.lstrip().startswith("["):
            docs = list(enumerate(json.loads(text), 1))
        else:
            docs = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except json.JSONDecodeError as err:
        raise CalibrationError(f"{path}: not a JSON measurement file ({err})") from None
    out = []
    for n, doc in docs:
        where = f"{path}: record {n}" if text.lstrip().startswith("[") else f"{path}:{n}"
        try:
            m = Measurement.from_dict(doc, where)
        except FieldError as err:
            raise CalibrationError(str(err)) from None
        if m.source != "twin":
            out.append(Point(measurement=m, where=where, gpus_per_process=gpus_per_process))
    return out


def _log_points(path: Path, hardware: str | None, gpus_per_process: int | None) -> list[Point]:
    try:
        log = read_nccl_tests(path)
        measurements = read_nccl_tests_measurements(path, hardware=hardware)
    except TraceError as err:
        raise CalibrationError(str(err)) from None
    per_process = gpus_per_process or log.gpus_per_thread or 1
    return [Point(measurement=m, where=f"{path}: {m.task.nbytes} B {m.task.dtype}", gpus_per_process=per_process,
                  described=log.header.get("HARDWARE", "")) for m in measurements]
