"""What a rank issued to its process groups: one ``Issued`` per backend call, whoever made it.

Two records of a call exist, both written by the backend itself, so both see ``dist.*``,
DDP's reducer, FSDP and functional collectives alike:

- **the flight recorder**, the ring buffer c10d backends fill when a collective is enqueued
  (on by default for gloo; for NCCL when ``TORCH_FR_BUFFER_SIZE`` was set before the process
  group was made). An entry names its process group, the sizes and dtypes of its tensors, a
  ``profiling_name`` (``gloo:all_reduce``, ``nccl:send 0->1``) and ``time_created_ns``;
- **the profiler's** ``record_param_comms`` op, which ProcessGroupNCCL records for every call
  (``Collective name``, ``In/Out msg nelems``, ``dtype``, ``Process Group Name``); gloo
  records none.

This module turns either into ``Issued`` records; it neither imports torch nor reads files.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from traces.errors import TraceError
from traces.kineto import TORCH_DTYPES, collective_op, message_bytes
from traces.task import Op

__all__ = ["PROFILED_BACKENDS", "Issued", "issued_from_comms", "issued_from_entries", "op_of"]

PROFILED_BACKENDS = ("nccl",)
"""Backends whose calls the profiler records (``record_param_comms``): read there, not from the flight recorder."""

_P2P = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")
_BOOKKEEPING = {"wait", "init"}


@dataclass(frozen=True, slots=True)
class Issued:
    """One collective call a rank handed to its backend."""

    record_id: int
    """Issue order on this rank among the records of one source (the flight recorder's number)."""
    group: str
    """Process-group name (``"0"`` is the default group)."""
    backend: str
    """``"gloo"``, ``"nccl"``..., the prefix of the profiling name."""
    name: str
    """The backend's profiling name, e.g. ``gloo:all_reduce``."""
    op: Op
    in_numel: int
    out_numel: int
    dtype: str
    created_ns: int
    """Wall-clock ns when the call was enqueued (``time.time_ns()``'s clock)."""
    p2p_ranks: tuple[int, int] | None = None
    """For send/recv in the flight recorder: the two group ranks its name gives (``send 0->1``)."""
    peer_in_group: int | None = None
    """For send/recv in the profiler: the peer's group rank (``Dst Rank`` or ``Src Rank``)."""

    @property
    def nbytes(self) -> int:
        """nccl-tests' size of the call (see ``traces.task``)."""
        return message_bytes(self.op, self.in_numel, self.out_numel, self.dtype)


def op_of(name: str) -> Op | None:
    """The Op of a backend or c10d name (``gloo:all_reduce``, ``c10d::_reduce_scatter_base_``).

    ``None`` for calls that are not collectives ccltwin models (gather, scatter, a
    coalescing marker). A barrier counts as an all-reduce, as NCCL runs it.

    >>> op_of("c10d::_reduce_scatter_base_"), op_of("gloo:barrier"), op_of("nccl:send 0->1")
    (<Op.REDUCESCATTER: 'reducescatter'>, <Op.ALLREDUCE: 'allreduce'>, <Op.SENDRECV: 'sendrecv'>)
    >>> op_of("c10d::gather_") is None
    True
    """
    base = name.split(":")[-1].strip().rstrip("_")
    if _P2P.match(base) or base == "recv_any_source":
        return Op.SENDRECV
    if "barrier" in base:
        return Op.ALLREDUCE
    try:
        return collective_op(base)
    except ValueError:
        return None


def _numel(sizes: Any) -> int:
    if not isinstance(sizes, list) or not all(
        isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape) for shape in sizes
    ):
        raise ValueError(f"sizes {sizes!r:.80} are not a list of shapes")
    return sum(math.prod(shape) for shape in sizes)


def _dtype(entry: dict[str, Any]) -> str:
    names = entry.get("input_dtypes") or entry.get("output_dtypes") or []
    if not isinstance(names, list):
        raise ValueError(f"dtypes {names!r:.60} are not a list")
    if not names:
        return "uint8"  # a barrier moves no data
    dtype = TORCH_DTYPES.get(names[0])
    if dtype is None:
        raise ValueError(f"unknown dtype {names[0]!r}")
    return dtype


def issued_from_entries(entries: Iterable[Any], where: str, skipped: Counter[str]) -> list[Issued]:
    """``Issued`` records in issue order; calls ccltwin does not model are counted in ``skipped``.

    ``where`` names the dump in errors (``TraceError``) about malformed entries.
    """
    out = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TraceError(f"flight-recorder entry #{index} is not an object", where)
        name, record_id, created = entry.get("profiling_name"), entry.get("record_id"), entry.get("time_created_ns")
        group = entry.get("process_group")
        if not (
            isinstance(name, str)
            and isinstance(record_id, int)
            and isinstance(created, int)
            and isinstance(group, list)
            and group
        ):
            raise TraceError(
                f"flight-recorder entry #{index} lacks profiling_name, record_id, time_created_ns "
                "or process_group",
                where,
            )
        op = op_of(name)
        if op is None:
            skipped[f"{name} (not a collective ccltwin models)"] += 1
            continue
        backend, _, call = name.partition(":")
        p2p = _P2P.match(call.strip())
        try:
            out.append(
                Issued(
                    record_id=record_id,
                    group=str(group[0]),
                    backend=backend,
                    name=name,
                    op=op,
                    in_numel=_numel(entry.get("input_sizes")),
                    out_numel=_numel(entry.get("output_sizes")),
                    dtype=_dtype(entry),
                    created_ns=created,
                    p2p_ranks=(int(p2p[2]), int(p2p[3])) if p2p else None,
                )
            )
        except ValueError as err:
            raise TraceError(f"flight-recorder record {record_id} ({name}): {err}", where) from None
    return sorted(out, key=lambda issued: issued.record_id)


def issued_from_comms(records: Iterable[tuple[int, dict[str, Any]]], where: str, skipped: Counter[str]) -> list[Issued]:
    """``Issued`` records from the profiler's ``record_param_comms`` ops: (wall-clock start ns, args) each.

    Bookkeeping records (``wait``, ``init``) are passed over; a send/recv that names no peer
    is counted in ``skipped``.
    """
    out = []
    for index, (start_ns, args) in enumerate(sorted(records, key=lambda record: record[0])):
        name = str(args.get("Collective name"))
        if name in _BOOKKEEPING:
            continue
        op = op_of(name)
        peer = args.get("Dst Rank", args.get("Src Rank"))
        if op is None or (op is Op.SENDRECV and not isinstance(peer, int)):
            skipped[f"nccl:{name} ({'no peer recorded' if op else 'not a collective ccltwin models'})"] += 1
            continue
        in_numel, out_numel = args.get("In msg nelems"), args.get("Out msg nelems")
        group = args.get("Process Group Name")
        dtype = TORCH_DTYPES.get(str(args.get("dtype")))
        if not (isinstance(in_numel, int) and isinstance(out_numel, int) and min(in_numel, out_numel) >= 0):
            raise TraceError(f"record_param_comms #{index} ({name}) has bad sizes {in_numel!r}/{out_numel!r}", where)
        if dtype is None or group is None:
            raise TraceError(
                f"record_param_comms #{index} ({name}) has dtype {args.get('dtype')!r}, group {group!r}", where
            )
        out.append(
            Issued(
                index,
                str(group),
                "nccl",
                f"nccl:{name}",
                op,
                in_numel,
                out_numel,
                dtype,
                start_ns,
                peer_in_group=peer if op is Op.SENDRECV else None,
            )
        )
    return out
