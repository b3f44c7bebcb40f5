"""Collective calls as the CPU side of a PyTorch profile records them, for the NCCL kernels they launch.

A Kineto trace names a call in one of two ways, on the thread that issued it:

- a ``record_param_comms`` op with ``Collective name``, ``In/Out msg nelems``, ``dtype`` and
  the group (PyTorch ≥ 2.1);
- a ``nccl:all_reduce``-style annotation (PyTorch 1.13–2.0) whose ``Input Dims`` and
  ``Input type`` give the input tensor, inside a ``c10d::allreduce_``-style op whose
  ``Input Dims`` also give the output (``[[out], [in], ...]`` for ``_allgather_base_`` and
  ``alltoall_base_``).

Both become one set of args in ``record_param_comms``' own words, so that one reader
describes the collective.  The call of a kernel is the innermost span that holds its launch;
a ``coalesced`` call (``ProcessGroupNCCL::endCoalescing``) stands for the calls recorded
before it on its thread since the previous NCCL launch, summed::

    >>> annotation_args("nccl:_all_gather_base", {"Input Dims": [[8192, 64]], "Input type": ["float"]},
    ...                 ("c10d::_allgather_base_", {"Input Dims": [[65536, 64], [8192, 64], []]}), world=8)
    {'Collective name': '_allgather_base', 'dtype': 'Float', 'In msg nelems': 524288, 'Out msg nelems': 4194304}
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Any

__all__ = ["CPP_SCALAR_TYPES", "Spans", "annotation_args", "coalesce"]

# the C++ type names ``Input type`` holds → torch ScalarType names (as record_param_comms writes them)
CPP_SCALAR_TYPES = {
    "float": "Float",
    "double": "Double",
    "c10::Half": "Half",
    "c10::BFloat16": "BFloat16",
    "signed char": "Char",
    "unsigned char": "Byte",
    "bool": "Bool",
    "int": "Int",
    "long int": "Long",
    "long": "Long",
    "long long": "Long",
    "c10::Float8_e4m3fn": "Float8_e4m3fn",
    "c10::Float8_e5m2": "Float8_e5m2",
}
# annotation names (after ``nccl:``) → the Collective name record_param_comms uses
_ANNOTATION_NAMES = {
    "all_reduce": "allreduce",
    "_all_gather_base": "_allgather_base",
    "all_gather": "allgather",
    "all_gather_into_tensor_coalesced": "allgather",
    "_reduce_scatter_base": "_reduce_scatter_base",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "coalesced": "coalesced",
}
_OUTPUT_FIRST = ("c10d::_allgather_base_", "c10d::alltoall_base_", "c10d::_reduce_scatter_base_")
_GATHERS = ("_allgather_base", "allgather")
_MAX_NESTING = 64  # spans that enclose one another on one thread, at most (walked back to find the holder)


class Spans:
    """CPU spans ``(start, end, payload)`` per thread; the innermost one that holds a time.

    >>> spans = Spans()
    >>> spans.add(1, 0.0, 10.0, "outer"); spans.add(1, 2.0, 5.0, "inner")
    >>> spans.holding(1, 3.0), spans.holding(1, 7.0), spans.holding(1, 11.0), spans.holding(2, 3.0)
    ('inner', 'outer', None, None)
    """

    def __init__(self) -> None:
        self._by_tid: dict[Any, list[tuple[float, float, Any]]] = defaultdict(list)
        self._starts: dict[Any, list[float]] = {}

    def add(self, tid: Any, start: float, end: float, payload: Any) -> None:
        self._by_tid[tid].append((start, end, payload))
        self._starts.pop(tid, None)

    def _sorted(self, tid: Any) -> tuple[list[tuple[float, float, Any]], list[float]]:
        spans = self._by_tid.get(tid, [])
        if tid not in self._starts:
            spans.sort(key=lambda span: (span[0], -span[1]))
            self._starts[tid] = [span[0] for span in spans]
        return spans, self._starts[tid]

    def _index(self, tid: Any, ts: float) -> int | None:
        spans, starts = self._sorted(tid)
        position = bisect.bisect_right(starts, ts) - 1
        for index in range(position, max(position - _MAX_NESTING, -1), -1):
            if spans[index][1] >= ts:
                return index
        return None

    def holding(self, tid: Any, ts: float) -> Any:
        """The payload of the innermost span on thread ``tid`` that holds time ``ts``, or ``None``."""
        index = self._index(tid, ts)
        return None if index is None else self._by_tid[tid][index][2]

    def between(self, tid: Any, after: float, ts: float) -> list[Any]:
        """Payloads of the spans on ``tid`` that start after ``after`` and end before ``ts``, in order."""
        spans, starts = self._sorted(tid)
        first, last = bisect.bisect_right(starts, after), bisect.bisect_left(starts, ts)
        return [payload for _, end, payload in spans[first:last] if end <= ts]


def _numel(dims: Any) -> int | None:
    if isinstance(dims, list) and dims and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in dims):
        return math.prod(dims)
    return None


def annotation_args(name: str, args: dict, op: tuple[str, dict] | None, world: int) -> dict[str, Any] | None:
    """``record_param_comms``-style args of a ``nccl:*`` annotation, given the ``c10d::*`` op around it
    (name, args) and the job's world size; ``None`` when the profile recorded no shapes for it."""
    collective = _ANNOTATION_NAMES.get(name.removeprefix("nccl:"), name.removeprefix("nccl:"))
    if collective == "coalesced":
        return {"Collective name": "coalesced"}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and isinstance(types, list) and dims and types):
        return None
    counts = [_numel(d) for d in dims if d]
    if not counts or None in counts:
        return None
    in_n = sum(counts)
    out_n = in_n * world if collective in _GATHERS else in_n
    op_dims = op[1].get("Input Dims") if op and op[0] in _OUTPUT_FIRST else None
    if isinstance(op_dims, list) and len(op_dims) >= 2 and _numel(op_dims[1]) == in_n:
        out_n = _numel(op_dims[0]) or out_n
    return {"Collective name": collective, "dtype": CPP_SCALAR_TYPES.get(str(types[0]), str(types[0])),
            "In msg nelems": in_n, "Out msg nelems": out_n}


def coalesce(members: list[dict[str, Any]]) -> dict[str, Any] | str:
    """One call for the calls of a coalesced group, or why they cannot be one (mixed ops or types)."""
    if not members:
        return "coalesced group without recorded calls"
    kinds = {(m.get("Collective name"), m.get("dtype")) for m in members}
    if len(kinds) > 1:
        return "coalesced calls of mixed ops or types"
    sizes = [(m.get("In msg nelems"), m.get("Out msg nelems")) for m in members]
    if not all(isinstance(i, int) and isinstance(o, int) for i, o in sizes):
        return "coalesced calls without sizes"
    merged = dict(members[0])
    merged["In msg nelems"] = sum(i for i, _ in sizes)
    merged["Out msg nelems"] = sum(o for _, o in sizes)
    return merged
