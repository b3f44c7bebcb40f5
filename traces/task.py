"""The unit that is tuned: one collective of a given size on a given group.

``nbytes`` follows nccl-tests' ``size`` column: the per-rank input for AllReduce,
Broadcast and Reduce, the total output for AllGather, the total input for
ReduceScatter, the total per-rank send buffer for AllToAll, and the message for
SendRecv.  ``busbw`` uses nccl-tests' correction factors so that it can be
compared with link speeds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from traces.errors import CcltwinError


class TaskError(CcltwinError):
    """A task that cannot exist: an unknown collective or dtype, a negative size, too few ranks."""


class Op(StrEnum):
    """The collective operations NCCL offers."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    SENDRECV = "sendrecv"


_OP_ALIASES = {
    "all_reduce": Op.ALLREDUCE,
    "all_gather": Op.ALLGATHER,
    "allgather_into_tensor": Op.ALLGATHER,
    "all_gather_into_tensor": Op.ALLGATHER,
    "_allgather_base": Op.ALLGATHER,
    "reduce_scatter": Op.REDUCESCATTER,
    "reduce_scatter_tensor": Op.REDUCESCATTER,
    "_reduce_scatter_base": Op.REDUCESCATTER,
    "all_to_all": Op.ALLTOALL,
    "alltoall_base": Op.ALLTOALL,
    "all_to_all_single": Op.ALLTOALL,
    "send_recv": Op.SENDRECV,
    "sendrecv": Op.SENDRECV,
    "send": Op.SENDRECV,
    "recv": Op.SENDRECV,
}

GROUP_SHAPE = re.compile(r"^(\d+)x(\d+)$|^(\d+(?:\+\d+)+)$")
"""A group written as its shape: ``GxN`` (G GPUs on each of N nodes) or ``a+b+…`` (GPUs per node)."""

DTYPE_BYTES = {
    "int8": 1, "uint8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "float16": 2, "half": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "float": 4,
    "int64": 8, "uint64": 8, "float64": 8, "double": 8,
}
DTYPE_ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "f16": "float16", "fp32": "float32", "f32": "float32",
    "fp64": "float64", "f64": "float64", "f8e4m3": "fp8_e4m3", "f8e5m2": "fp8_e5m2",
}
"""Short names people write for the element types of ``DTYPE_BYTES`` (nccl-tests' ``f8e4m3``)."""


def parse_dtype(name: str) -> str:
    """An element type as people write it, as the ``DTYPE_BYTES`` name: ``bf16``, ``BFloat16``,
    ``torch.bfloat16`` are ``bfloat16``; ``half`` stays ``half`` (2 bytes, as ``float16``).

    >>> parse_dtype("bf16"), parse_dtype("torch.float16"), parse_dtype("FP32"), parse_dtype("half")
    ('bfloat16', 'float16', 'float32', 'half')
    """
    key = name.strip().lower().removeprefix("torch.")
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise TaskError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPE_BYTES)} "
                        f"(or {', '.join(DTYPE_ALIASES)})")
    return key


def whole_elements(nbytes: int, dtype: str, where: str = "") -> int:
    """The number of ``dtype`` elements in ``nbytes``; ``TaskError`` (its message starting with
    ``where``, e.g. the option) when that is not whole.

    >>> whole_elements(8, "float32")
    2
    """
    size = DTYPE_BYTES[dtype]
    if nbytes % size:
        raise TaskError(f"{where}{': ' if where else ''}{nbytes} B is not a whole number of {dtype} elements "
                        f"({size} B each): give a multiple of {size} B")
    return nbytes // size


def parse_op(name: str) -> Op:
    """Read an op name as people write it: ``AllReduce``, ``all_reduce``, ``allreduce_perf``...

    >>> parse_op("AllReduce"), parse_op("all_gather_perf"), parse_op("nccl:reduce_scatter")
    (<Op.ALLREDUCE: 'allreduce'>, <Op.ALLGATHER: 'allgather'>, <Op.REDUCESCATTER: 'reducescatter'>)
    """
    key = name.strip().lower().removeprefix("nccl:").removeprefix("c10d::").removesuffix("_perf")
    key = key.removesuffix("_")
    if key in _OP_ALIASES:
        return _OP_ALIASES[key]
    compact = key.replace("_", "").replace("-", "")
    for op in Op:
        if compact == op.value:
            return op
    raise TaskError(f"unknown collective {name!r}; expected one of {', '.join(o.value for o in Op)}")


def busbw_factor(op: Op, nranks: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth."""
    n = nranks
    if op is Op.ALLREDUCE:
        return 2 * (n - 1) / n
    if op in (Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLTOALL):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Task:
    """⟨op, nbytes, dtype, nranks, group⟩: one distinct collective of a workload.

    ``group`` names the communicator's shape so that two groups of the same size but
    different placement (8 GPUs of one node, or 1 GPU on each of 8 nodes) are different
    tasks; it is free text such as ``"8x1"`` (8 GPUs per node, 1 node) or a group id.
    """

    op: Op
    nbytes: int
    nranks: int
    dtype: str = "float32"
    group: str = ""

    def __post_init__(self) -> None:
        if self.nbytes < 0:
            raise TaskError(f"negative message size {self.nbytes} for {self.op}")
        if self.nranks < 1:
            raise TaskError(f"a communicator needs at least 1 rank, got {self.nranks}")
        if self.op is Op.SENDRECV and self.nranks < 2:
            raise TaskError("sendrecv needs 2 ranks")
        if self.dtype not in DTYPE_BYTES:
            raise TaskError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def count(self) -> int:
        """Element count as nccl-tests prints it."""
        return self.nbytes // self.dtype_bytes

    @property
    def busbw_factor(self) -> float:
        return busbw_factor(self.op, self.nranks)

    def algbw_gbps(self, time_us: float) -> float:
        """nccl-tests' algbw in GB/s (10^9 bytes per second)."""
        return self.nbytes / (time_us * 1e3) if time_us > 0 else 0.0

    def busbw_gbps(self, time_us: float) -> float:
        return self.algbw_gbps(time_us) * self.busbw_factor
