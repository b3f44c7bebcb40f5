"""nccl-tests logs as a trace: every rank issues each measured size once, in the log's order.

A benchmark run is a workload too: one communicator of all its ranks, one collective per row
(the message size of the row, its measured out-of-place time as ``duration_us``, else the
in-place one), so that ``trace summary``, ``whatif`` and ``predict`` take it like any other
trace.  Ranks land on the hosts that the log's ``# Rank N Pid P on HOST`` lines name (so a
2-node run is a ``8x2`` group); logs without those lines leave the nodes unknown.  Several logs
(one per op) of one run go into one trace, one after another.

``metadata`` keeps what the log says about the run: the NCCL library that ran
(``nccl_version``) and the one the benchmark was built against (``nccl_headers_version``),
the ``NCCL_*`` environment, and per row the measurements (time and busbw, out-of-place and
in-place) that a replay can be scored against.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from typing import Any

from traces.errors import TraceError
from traces.nccl_tests import NcclTestsLog, NcclTestsRow, read_nccl_tests
from traces.schema import CollectiveEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op

__all__ = ["log_trace", "read_nccl_tests_trace"]

_DTYPES = {"float": "float32", "half": "float16", "double": "float64"}  # nccl-tests' names → Task dtypes
GROUP = "nccl-tests"
"""The id of the one communicator of an nccl-tests run."""


def read_nccl_tests_trace(paths: Sequence[str | PathLike[str]]) -> Trace:
    """The trace of one run's nccl-tests logs (see the module docstring); ``TraceError`` names the log."""
    return log_trace([read_nccl_tests(path) for path in paths])


def log_trace(logs: Sequence[NcclTestsLog]) -> Trace:
    """One validated Trace of the rows of ``logs``, all of one rank count."""
    if not logs:
        raise TraceError("no nccl-tests logs given")
    first = logs[0]
    for log in logs:
        if log.op is None or log.nranks is None:
            missing = "collective" if log.op is None else "rank count"
            raise TraceError(f"the {missing} of this run is not in the log, so it is no workload", log.path)
        if log.op is Op.SENDRECV:
            raise TraceError("sendrecv_perf sends to one neighbour and receives from the other; a trace's "
                             "send/receive has one peer, so this log is no trace", log.path)
        if log.nranks != first.nranks:
            raise TraceError(f"{log.nranks} ranks here but {first.nranks} in {first.path}", log.path)
    nranks = first.nranks
    hosts = first.hosts if len(first.hosts) == nranks else {}
    rows = [(log, row) for log in logs for row in log.rows]
    ranks = tuple(
        RankTrace(rank, tuple(_event(index, log, row) for index, (log, row) in enumerate(rows)), hosts.get(rank))
        for rank in range(nranks)
    )
    trace = Trace(
        world_size=nranks,
        groups=(ProcessGroup(GROUP, tuple(range(nranks)), name="nccl-tests communicator"),),
        ranks=ranks,
        source="nccl-tests",
        metadata=_metadata(logs),
    )
    trace.validate(first.path)
    return trace


def _event(index: int, log: NcclTestsLog, row: NcclTestsRow) -> CollectiveEvent:
    rooted = log.op in (Op.BROADCAST, Op.REDUCE)
    return CollectiveEvent(
        id=index,
        op=log.op,
        nbytes=row.nbytes,
        group=GROUP,
        dtype=_DTYPES.get(row.dtype, row.dtype),
        stream="nccl",
        name=f"{log.op.value}_perf",
        root=(row.root if row.root is not None and 0 <= row.root < log.nranks else 0) if rooted else None,
        duration_us=row.time_us,
    )


def _one(values: list[Any]) -> Any:
    """The value all logs agree on, else ``None`` (the per-log values stay in ``logs``)."""
    return values[0] if len(set(map(str, values))) == 1 else None


def _metadata(logs: Sequence[NcclTestsLog]) -> dict[str, Any]:
    return {
        "importer": "nccl-tests",
        "files": [log.path for log in logs],
        "nccl_version": _one([log.nccl_version for log in logs]),
        "nccl_headers_version": _one([log.nccl_headers_version for log in logs]),
        "env": _one([log.env for log in logs]) or {},
        "logs": [
            {"path": log.path, "op": log.op.value, "nccl_version": log.nccl_version,
             "nccl_headers_version": log.nccl_headers_version, "env": log.env, "format": log.format}
            for log in logs
        ],
        "measurements": [
            {"op": log.op.value, "nbytes": row.nbytes, "dtype": row.dtype, "nranks": log.nranks,
             "oop_time_us": row.oop_time_us, "oop_busbw": row.oop_busbw,
             "ip_time_us": row.ip_time_us, "ip_busbw": row.ip_busbw}
            for log in logs for row in log.rows
        ],
    }
