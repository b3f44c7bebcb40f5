"""The knobs NCCL reads once per process, and the environment variables that set them.

NCCL caches ``NCCL_NTHREADS``, ``NCCL_LL128_NTHREADS``, the three buffer sizes and the
transport switches the first time a process creates a communicator (research/nccl-mechanisms.md
§2), so a tuner cannot change them call by call: they are decided before the launch and
written into the job's environment. A buffer size fixes a protocol's chunk: with
``NCCL_STEPS = 8`` slots per connection, NCCL's ``calcCollChunking`` gives

====================================  ======================================
Simple, Ring AllReduce/AllGather/RS    chunk = BUFFSIZE / 8 × 4
Simple, everything else                chunk = BUFFSIZE / 8
LL                                     chunk = LL_BUFFSIZE / 8 / 2
LL128                                  chunk = LL128_BUFFSIZE / 8 / 16 × 15
====================================  ======================================

(then special cases for NVLS, CollNet, PAT and Tree/LL128 lower it for small messages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traces.task import Op
from tuner.codec import FieldError, get_field
from tuner.config import Algo, Proto, Transport, parse_enum

__all__ = ["NCCL_DEFAULT_BUFFSIZE", "ProcessSettings", "buffsize_for_chunk"]

NCCL_STEPS = 8
NCCL_DEFAULT_BUFFSIZE = {Proto.SIMPLE: 4_194_304, Proto.LL: 524_288, Proto.LL128: 4_915_200}
"""``DEFAULT_BUFFSIZE``, ``DEFAULT_LL_BUFFSIZE``, ``DEFAULT_LL128_BUFFSIZE``."""
NTHREADS_RANGE = (64, 512)
"""What NCCL accepts for ``NCCL_NTHREADS`` (``getNthreads`` clamps to it; Simple and LL maxima)."""
LL128_NTHREADS_RANGE = (160, 640)
"""What NCCL accepts for ``NCCL_LL128_NTHREADS``."""

MIN_BUFFSIZE = {"buffsize": NCCL_STEPS * 512, "ll_buffsize": NCCL_STEPS * 2 * 16, "ll128_buffsize": NCCL_STEPS * 2048}
"""Smallest buffers whose steps hold one protocol grain (Simple 512 B, LL 16 B, LL128 1920 B of data)."""

_RING_CHUNK_STEPS_OPS = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER)


def buffsize_for_chunk(op: Op, algo: Algo, proto: Proto, chunk_bytes: int) -> int:
    """The buffer size whose chunk (table in the module docstring) is ``chunk_bytes``.

    >>> buffsize_for_chunk(Op.ALLREDUCE, Algo.RING, Proto.SIMPLE, 2 * 1024 * 1024)
    4194304
    >>> buffsize_for_chunk(Op.ALLREDUCE, Algo.RING, Proto.LL128, 576_000)
    4915200
    """
    if proto is Proto.SIMPLE:
        steps = 4 if algo is Algo.RING and op in _RING_CHUNK_STEPS_OPS else 1
        return chunk_bytes * NCCL_STEPS // steps
    if proto is Proto.LL:
        return chunk_bytes * 2 * NCCL_STEPS
    return -(-chunk_bytes * 16 // 15) * NCCL_STEPS


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessSettings:
    """Per-process NCCL knobs; ``None`` leaves NCCL's own default in place."""

    transport: Transport = Transport.P2P
    """Intra-node transport: p2p (NCCL's default), shm (``NCCL_P2P_DISABLE=1``) or net (both disabled)."""
    nthreads: int | None = None
    """``NCCL_NTHREADS``: threads per block of Ring/Tree Simple and LL kernels (64 to 512, multiple of 32)."""
    ll128_nthreads: int | None = None
    """``NCCL_LL128_NTHREADS`` (160 to 640, multiple of 32)."""
    buffsize: int | None = None
    """``NCCL_BUFFSIZE``: bytes of a Simple connection buffer."""
    ll_buffsize: int | None = None
    """``NCCL_LL_BUFFSIZE``."""
    ll128_buffsize: int | None = None
    """``NCCL_LL128_BUFFSIZE``."""

    def __post_init__(self) -> None:
        for name, (low, high) in (("nthreads", NTHREADS_RANGE), ("ll128_nthreads", LL128_NTHREADS_RANGE)):
            value = getattr(self, name)
            if value is not None and not (low <= value <= high and value % 32 == 0):
                raise ValueError(f"{name} must be a multiple of 32 from {low} to {high}, got {value}")
        for name, low in MIN_BUFFSIZE.items():
            value = getattr(self, name)
            if value is not None and value < low:
                raise ValueError(f"{name} must be at least {low} bytes (one grain per step), got {value}")

    def env(self) -> dict[str, str]:
        """The ``NCCL_*`` variables that put these settings in force (transport always explicit).

        >>> ProcessSettings(transport=Transport.SHM, nthreads=256).env()
        {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '0', 'NCCL_NTHREADS': '256'}
        """
        env = {"NCCL_P2P_DISABLE": "0" if self.transport is Transport.P2P else "1",
               "NCCL_SHM_DISABLE": "1" if self.transport is Transport.NET else "0"}
        for name, value in (("NCCL_NTHREADS", self.nthreads), ("NCCL_LL128_NTHREADS", self.ll128_nthreads),
                            ("NCCL_BUFFSIZE", self.buffsize), ("NCCL_LL_BUFFSIZE", self.ll_buffsize),
                            ("NCCL_LL128_BUFFSIZE", self.ll128_buffsize)):
            if value is not None:
                env[name] = str(value)
        return env

    def to_dict(self) -> dict[str, Any]:
        return {"transport": self.transport.value, "nthreads": self.nthreads, "ll128_nthreads": self.ll128_nthreads,
                "buffsize": self.buffsize, "ll_buffsize": self.ll_buffsize, "ll128_buffsize": self.ll128_buffsize}

    @classmethod
    def from_dict(cls, obj: Any, where: str = "process") -> ProcessSettings:
        transport = get_field(obj, "transport", "str", where, "p2p")
        try:
            return cls(transport=parse_enum(Transport, transport),
                       **{key: get_field(obj, key, "int", where, None, nullable=True)
                          for key in ("nthreads", "ll128_nthreads", "buffsize", "ll_buffsize", "ll128_buffsize")})
        except FieldError:
            raise
        except ValueError as err:
            raise FieldError(f"{where}: {err}") from None
