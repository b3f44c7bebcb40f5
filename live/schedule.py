"""What every rank of a communicator agrees on: task keys and the rules of a schedule.

An AllReduce of 16,640 bytes on communicator ``0x5eed`` is the task key ``TaskKey(0x5eed, 4,
16640)`` (4 is ``ncclFuncAllReduce``); its 12th call on that communicator in a process is its
occurrence 11, on every rank, because every rank issues the same calls in the same order.
A rule reads "from occurrence 40 of that key use ring/LL128 on 8 channels" and carries the
schedule version that introduced it; the tuner plugin applies, at occurrence k, the rule with
the largest ``from_occurrence`` ≤ k (the largest version among equal ones), and NCCL's own
choice where there is none (LIVE.md, "Decision key").

Rules travel through the job's c10d store as JSON (``rules_to_json`` / ``rules_from_json``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from traces.task import Op
from tuner.config import Algo, Config, Proto

__all__ = ["COLL_OF_OP", "NCCL_DEFAULT", "Rule", "TaskKey", "comm_id", "config_fields", "rules_from_json",
           "rules_to_json"]

COLL_OF_OP = {Op.BROADCAST: 0, Op.REDUCE: 1, Op.ALLGATHER: 2, Op.REDUCESCATTER: 3, Op.ALLREDUCE: 4}
"""``ncclFunc_t`` of every collective NCCL asks a tuner plugin about (point-to-point is never asked)."""
OP_OF_COLL = {coll: op for op, coll in COLL_OF_OP.items()}

NCCL_DEFAULT = (-1, -1, 0, 0)
"""(algo, proto, nchannels, chunk_bytes) of a rule that leaves every choice to NCCL."""


@dataclass(frozen=True, order=True, slots=True)
class TaskKey:
    """What a plugin decision is keyed on, identical on every rank of the communicator."""

    comm: int
    """The communicator's 64-bit id (NCCL's commHash; on gloo ``comm_id`` of the process group)."""
    coll: int
    """``ncclFunc_t``: Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3, AllReduce 4."""
    nbytes: int
    """NCCL's ``nBytes`` (nccl-tests' size)."""

    @property
    def op(self) -> Op:
        return OP_OF_COLL[self.coll]

    def __str__(self) -> str:
        return f"{self.op} {self.nbytes} B on comm {self.comm:#x}"


@dataclass(frozen=True, slots=True)
class Rule:
    """From occurrence ``from_occurrence`` of ``key`` use this config (NCCL indices; -1/0: NCCL's)."""

    key: TaskKey
    from_occurrence: int
    algo: int
    proto: int
    nchannels: int
    chunk_bytes: int
    version: int

    @property
    def leaves_default(self) -> bool:
        """The rule hands every choice back to NCCL."""
        return (self.algo, self.proto, self.nchannels, self.chunk_bytes) == NCCL_DEFAULT

    def fields(self) -> dict[str, int]:
        """The keywords of the plugin's ``set_rule`` (the C parameter names)."""
        return {"comm": self.key.comm, "coll": self.key.coll, "nbytes": self.key.nbytes,
                "from_occurrence": self.from_occurrence, "algo": self.algo, "proto": self.proto,
                "nchannels": self.nchannels, "chunk_bytes": self.chunk_bytes, "version": self.version}

    @classmethod
    def from_fields(cls, obj: dict[str, Any]) -> Rule:
        """The rule ``fields`` described."""
        key = TaskKey(int(obj["comm"]), int(obj["coll"]), int(obj["nbytes"]))
        return cls(key, *(int(obj[name]) for name in
                          ("from_occurrence", "algo", "proto", "nchannels", "chunk_bytes", "version")))


def config_fields(config: Config | None, *, chunk: bool) -> tuple[int, int, int, int]:
    """(algo, proto, nchannels, chunk_bytes) a rule carries for ``config`` (``None``: NCCL's own
    choice); ``chunk=False`` where the NCCL release cannot set a chunk per call.

    >>> from tuner.config import Transport
    >>> config_fields(Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 576000), chunk=False)
    (1, 1, 8, 0)
    """
    if config is None:
        return NCCL_DEFAULT
    return config.algo.nccl_index, config.proto.nccl_index, config.nchannels, config.chunk_bytes if chunk else 0


def algo_proto(algo: int, proto: int) -> tuple[Algo, Proto]:
    """tuner's names of NCCL's algorithm and protocol indices."""
    return list(Algo)[algo], list(Proto)[proto]


def comm_id(name: str, ranks: tuple[int, ...]) -> int:
    """A 64-bit communicator id every member computes alike, for process groups with no NCCL
    communicator behind them (gloo): a hash of the group's name and global ranks.

    >>> comm_id("0", (0, 1)) == comm_id("0", (0, 1)) != comm_id("1", (0, 1))
    True
    """
    text = f"{name}|{','.join(map(str, ranks))}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def rules_to_json(rules: list[Rule]) -> str:
    """Rules as the store carries them (``rules_from_json`` reads them back)."""
    return json.dumps([r.fields() for r in rules], separators=(",", ":"))


def rules_from_json(text: str) -> list[Rule]:
    return [Rule.from_fields(item) for item in json.loads(text)]
