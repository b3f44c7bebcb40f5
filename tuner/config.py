"""⟨algo, proto, transport, nchannels, nthreads, chunk_bytes⟩: the paper's ⟨A, P, T, NC, NT, C⟩.

Enum members carry NCCL's own indices (``NCCL_ALGO_*``, ``NCCL_PROTO_*``) so that cost
tables and plugin rules can be written without a translation table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from traces.errors import CcltwinError


class ConfigError(CcltwinError):
    """A configuration that is not one, or that this communicator cannot (or must not) run; the
    message lists why."""


class Algo(StrEnum):
    """NCCL's collective algorithms, in NCCL's index order."""

    TREE = "tree"
    RING = "ring"
    COLLNET_DIRECT = "collnet_direct"
    COLLNET_CHAIN = "collnet_chain"
    NVLS = "nvls"
    NVLS_TREE = "nvls_tree"
    PAT = "pat"

    @property
    def nccl_index(self) -> int:
        return list(Algo).index(self)


class Proto(StrEnum):
    """NCCL's protocols, in NCCL's index order."""

    LL = "ll"
    LL128 = "ll128"
    SIMPLE = "simple"

    @property
    def nccl_index(self) -> int:
        return list(Proto).index(self)


class Transport(StrEnum):
    """How peers on one node exchange data (NCCL chooses NET between nodes regardless).

    ``p2p`` is direct GPU-to-GPU over NVLink or PCIe, ``shm`` stages through host memory
    (``NCCL_P2P_DISABLE=1``), ``net`` loops through the NIC (``NCCL_P2P_DISABLE=1
    NCCL_SHM_DISABLE=1``).
    """

    P2P = "p2p"
    SHM = "shm"
    NET = "net"


E = TypeVar("E", bound=StrEnum)


def parse_enum(kind: type[E], text: str) -> E:
    """``parse_enum(Algo, "Ring")`` with an error that lists the choices."""
    key = text.strip().lower().replace("-", "_")
    aliases = {"collnetdirect": "collnet_direct", "collnetchain": "collnet_chain", "nvlstree": "nvls_tree"}
    key = aliases.get(key, key)
    try:
        return kind(key)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise ConfigError(f"unknown {kind.__name__.lower()} {text!r}; expected one of {choices}") from None


@dataclass(frozen=True, order=True)
class Subspace:
    """⟨algo, proto, transport⟩: an implementation subspace of the paper."""

    algo: Algo
    proto: Proto
    transport: Transport = Transport.P2P

    def __str__(self) -> str:
        return f"{self.algo}/{self.proto}/{self.transport}"


@dataclass(frozen=True, order=True)
class Config:
    """One point of the search space: a subspace plus resource parameters.

    ``chunk_bytes`` is the data carried by one chunk (NCCL's effective chunk: for LL half
    of the wire bytes, for LL128 15/16 of them).
    """

    algo: Algo
    proto: Proto
    transport: Transport
    nchannels: int
    nthreads: int
    chunk_bytes: int

    def __post_init__(self) -> None:
        if self.nchannels < 1:
            raise ConfigError(f"nchannels must be ≥ 1, got {self.nchannels}")
        if self.nthreads < 32 or self.nthreads % 32:
            raise ConfigError(f"nthreads must be a positive multiple of 32, got {self.nthreads}")
        if self.chunk_bytes < 1:
            raise ConfigError(f"chunk_bytes must be ≥ 1, got {self.chunk_bytes}")

    @property
    def subspace(self) -> Subspace:
        return Subspace(self.algo, self.proto, self.transport)

    def __str__(self) -> str:
        return (f"{self.algo}/{self.proto}/{self.transport} nc={self.nchannels} "
                f"nt={self.nthreads} chunk={self.chunk_bytes}")
