"""Traces people already have, in whichever format: tell it from the content, read it.

A profiler run leaves one Kineto file per rank, a PyTorch job its execution traces (Chakra) or
flight-recorder dumps, a benchmark nccl-tests logs. ``read_files`` takes the files of one job in
one format and returns the trace (an nccl-tests run as a trace of its measured sizes, see
``traces.nccl_tests_trace``).  ``expand_paths`` lets a directory stand
for the trace files in it (one per rank, as a profiler's ``on_trace_ready`` writes them).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from traces.chakra import read_chakra
from traces.errors import TraceError
from traces.flight_recorder import read_flight_recorder
from traces.kineto import read_kineto
from traces.nccl_tests_trace import read_nccl_tests_trace
from traces.schema import Trace

__all__ = ["TraceFormat", "detect_format", "expand_paths", "files_format", "read_files"]


class TraceFormat(StrEnum):
    """The formats ``ccltwin trace import`` reads (``auto``: tell from the content)."""

    AUTO = "auto"
    KINETO = "kineto"
    CHAKRA = "chakra"
    FLIGHT_RECORDER = "flight-recorder"
    NCCL_TESTS = "nccl-tests"


_HEAD = 1 << 16
# (format, JSON keys that identify it), tried in order on the first 64 KiB of a JSON file
_JSON_SIGNS = (
    (TraceFormat.KINETO, ('"traceEvents"',)),
    (TraceFormat.CHAKRA, ('"nodes"', '"schema"')),
    (TraceFormat.FLIGHT_RECORDER, ('"entries"', '"pg_config"')),
    (TraceFormat.NCCL_TESTS, ('"results"',)),
)


TRACE_SUFFIXES = (".json", ".json.gz", ".log", ".txt")
"""The names ``expand_paths`` takes from a directory (trace files and nccl-tests logs)."""


def expand_paths(paths: Sequence[str]) -> list[str]:
    """``paths`` with each directory replaced by its trace files (``TRACE_SUFFIXES``), sorted by name."""
    files = []
    for path in paths:
        if not Path(path).is_dir():
            files.append(path)
            continue
        found = sorted(str(p) for p in Path(path).iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
        if not found:
            raise TraceError(f"no trace files ({', '.join(TRACE_SUFFIXES)}) in this directory", path)
        files.extend(found)
    return files


def detect_format(path: str) -> TraceFormat:
    """Tell the format of a file from its first 64 KiB."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as file:
                head = file.read(_HEAD).decode("utf-8", "replace")
        else:
            with open(path, "rb") as file:
                head = file.read(_HEAD).decode("utf-8", "replace")
    except (OSError, EOFError, zlib.error) as err:
        raise TraceError(f"cannot read ({err})", path) from None
    if not head.lstrip().startswith("{"):
        return TraceFormat.NCCL_TESTS
    for fmt, signs in _JSON_SIGNS:
        if all(sign in head for sign in signs):
            return fmt
    raise TraceError("cannot tell the format of this JSON file: give --format", path)


def files_format(paths: Sequence[str], fmt: TraceFormat = TraceFormat.AUTO,
                 ranks: Sequence[int] | None = None) -> TraceFormat:
    """The one format of ``paths`` (``fmt``, or told from each file); ``ranks`` (the rank of each
    file) only where the format does not record it."""
    formats = {detect_format(p) if fmt is TraceFormat.AUTO else fmt for p in paths}
    if len(formats) > 1:
        raise TraceError(f"the files are of different formats ({', '.join(sorted(formats))})")
    chosen = formats.pop()
    if ranks and chosen in (TraceFormat.KINETO, TraceFormat.NCCL_TESTS):
        raise TraceError(f"--rank does not apply to {chosen} files")
    return chosen


def read_files(paths: Sequence[str], fmt: TraceFormat, ranks: Sequence[int] | None = None) -> Trace:
    """The trace of one job's files in the format ``fmt`` (Kineto, Chakra, flight recorder, nccl-tests)."""
    if fmt is TraceFormat.KINETO:
        return read_kineto(list(paths))
    if fmt is TraceFormat.NCCL_TESTS:
        return read_nccl_tests_trace(list(paths))
    readers = {TraceFormat.CHAKRA: read_chakra, TraceFormat.FLIGHT_RECORDER: read_flight_recorder}
    return readers[fmt](list(paths), list(ranks) if ranks else None)
