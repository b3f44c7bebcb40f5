"""What a calibration fits: measured calls, each with where it came from and how it was launched.

A ``Point`` is one ``Measurement`` (a task, the config that ran or NCCL's own choice under the
recorded ``NCCL_*`` variables, a time) plus the record it came from, named so that a message can
point at it (``all_reduce.log: 1048576 B float32``, ``tuning.db: history row 12``), the GPUs one
host thread drove (nccl-tests ``-g``) and, for logs, the hardware description of their header.

``read_points`` takes files and stores as ``ccltwin calibrate --measurements`` names them: an
SQLite tuning store (its history, without twin predictions), a JSON or JSON-lines file of
measurement records (``Measurement.to_dict``, as ``ccltwin bench`` writes them), a PyTorch
profiler (Kineto) trace, or any nccl-tests result file ``traces.nccl_tests`` reads.

From a Kineto trace every NCCL kernel with a size becomes a ``live`` measurement of its GPU
duration, with the algorithm and protocol its kernel name says (``..._RING_LL``) as forced
``NCCL_ALGO``/``NCCL_PROTO``, and as interference the share of its duration that compute kernels
of the same rank ran beside it.  A kernel's duration includes waiting for late peers, which the
fit's robust loss keeps from dominating.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from traces.errors import TraceError
from traces.kineto import read_kineto
from traces.nccl_tests import read_nccl_tests
from traces.schema import CollectiveEvent, ComputeEvent
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
        elif _is_kineto(path):
            out += _trace_points(path, hardware, gpus_per_process or 1)
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
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise CalibrationError(f"{path}: not UTF-8 text (byte {err.start}: {data[err.start]:#04x}), so not a JSON "
                               "measurement file") from None
    try:
        if text.lstrip().startswith("["):
            docs = list(enumerate(json.loads(text), 1))
        else:
            docs = [(n, json.loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except json.JSONDecodeError as err:
        raise CalibrationError(f"{path}: not a JSON measurement file ({err})") from None
    except RecursionError:
        raise CalibrationError(f"{path}: not a JSON measurement file (nested too deep)") from None
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


_KERNEL_CONFIG = re.compile(r"_(RING|TREE|NVLS_TREE|NVLSTREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)"
                            r"_(LL128|LL|SIMPLE)\b")
"""The algorithm and protocol in an NCCL kernel's name (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``)."""


def _is_kineto(path: Path) -> bool:
    """A PyTorch profiler trace (plain or gzipped JSON with Kineto's top-level keys)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as file:
            start = file.read(4096)
    except (OSError, EOFError, zlib.error):
        return False
    return start.lstrip().startswith("{") and any(key in start for key in ('"schemaVersion"', '"traceEvents"',
                                                                           '"deviceProperties"'))


def _trace_points(path: Path, hardware: str | None, gpus_per_process: int) -> list[Point]:
    try:
        trace = read_kineto([path])
    except TraceError as err:
        raise CalibrationError(str(err)) from None
    devices = ", ".join(trace.metadata.get("devices") or [])
    hardware = hardware or devices or path.name
    out = []
    for rank in trace.ranks:
        busy = [(e.start_us, e.end_us) for e in rank.events if isinstance(e, ComputeEvent)
                and e.start_us is not None and e.end_us is not None]
        for event in rank.events:
            if not isinstance(event, CollectiveEvent) or not event.nbytes or event.start_us is None \
                    or event.end_us is None or event.end_us <= event.start_us:
                continue
            ranks = trace.group(event.group).ranks
            span = event.end_us - event.start_us
            beside = sum(max(0.0, min(end, event.end_us) - max(start, event.start_us)) for start, end in busy)
            env = {}
            if match := _KERNEL_CONFIG.search(event.name or ""):
                env = {"NCCL_ALGO": match[1].replace("_", ""), "NCCL_PROTO": match[2]}
            task = Task(event.op, event.nbytes, len(ranks), event.dtype, trace.shape(ranks) or "")
            m = Measurement(task=task, config=None, time_us=span, source="live", hardware=hardware,
                            nccl_version=trace.metadata.get("nccl_version") or "", env=env,
                            interference=min(1.0, beside / span), comm=event.group)
            out.append(Point(measurement=m, where=f"{path}: rank {rank.rank} event {event.id} ({event.op} "
                                                  f"{event.nbytes} B)", gpus_per_process=gpus_per_process,
                             described=devices))
    return out
