"""What every rank of a communicator agrees on: task keys and the rules of a schedule.

An AllReduce of 16,640 bytes on communicator ``0x5eed`` is the task key ``TaskKey(0x5eed,
Op.ALLREDUCE, 16640)``; its 12th call on that communicator in a process is its occurrence 11,
on every rank, because every rank issues the same calls in the same order. A rule reads "from
occurrence 40 of that key use ring/LL128 on 8 channels" and carries the schedule version that
introduced it; the tuner plugin applies, at occurrence k, the rule with the largest
``from_occurrence`` ≤ k (the largest version among equal ones), and NCCL's own choice where
there is none (LIVE.md, "Decision key").

Rules travel through the job's c10d store as JSON (``rules_to_json`` / ``rules_from_json``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from traces.task import Op
from tuner.config import Algo, Config, Proto

__all__ = ["NCCL_DEFAULT", "Fields", "Rule", "TaskKey", "comm_id", "config_fields", "install", "rules_from_json",
           "rules_to_json"]

Fields = tuple[Algo | None, Proto | None, int, int]
"""(algo, proto, nchannels, chunk_bytes) a rule sets; ``None`` / 0: NCCL's own choice."""
NCCL_DEFAULT: Fields = (None, None, 0, 0)
"""A rule that leaves every choice to NCCL."""


@dataclass(frozen=True, order=True, slots=True)
class TaskKey:
    """What a plugin decision is keyed on, identical on every rank of the communicator."""

    comm: int
    """The communicator's 64-bit id (NCCL's commHash; on gloo ``comm_id`` of the process group)."""
    op: Op
    nbytes: int
    """NCCL's ``nBytes`` (nccl-tests' size)."""

    def __str__(self) -> str:
        return f"{self.op} {self.nbytes} B on comm {self.comm:#x}"


@dataclass(frozen=True, slots=True)
class Rule:
    """From occurrence ``from_occurrence`` of ``key`` use ``fields``, as schedule ``version``."""

    key: TaskKey
    from_occurrence: int
    fields: Fields
    version: int

    def to_dict(self) -> dict[str, Any]:
        algo, proto, nchannels, chunk = self.fields
        return {"comm": self.key.comm, "op": self.key.op.value, "nbytes": self.key.nbytes,
                "from": self.from_occurrence, "algo": algo and algo.value, "proto": proto and proto.value,
                "nchannels": nchannels, "chunk_bytes": chunk, "version": self.version}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Rule:
        fields = (obj["algo"] and Algo(obj["algo"]), obj["proto"] and Proto(obj["proto"]), int(obj["nchannels"]),
                  int(obj["chunk_bytes"]))
        return cls(TaskKey(int(obj["comm"]), Op(obj["op"]), int(obj["nbytes"])), int(obj["from"]), fields,
                   int(obj["version"]))


def install(plugin: Any, rule: Rule) -> None:
    """Put ``rule`` into the plugin (``live.plugin.Plugin.set_rule``)."""
    algo, proto, nchannels, chunk = rule.fields
    plugin.set_rule(rule.key.comm, rule.key.op, rule.key.nbytes, rule.from_occurrence, version=rule.version,
                    algo=algo, proto=proto, nchannels=nchannels, chunk_bytes=chunk)


def config_fields(config: Config | None, *, chunk: bool) -> Fields:
    """The fields a rule carries for ``config`` (``None``: NCCL's own choice); ``chunk=False``
    where the NCCL release cannot set a chunk per call.

    >>> from tuner.config import Transport
    >>> config_fields(Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 640, 576000), chunk=False)
    (<Algo.RING: 'ring'>, <Proto.LL128: 'll128'>, 8, 0)
    """
    if config is None:
        return NCCL_DEFAULT
    return config.algo, config.proto, config.nchannels, config.chunk_bytes if chunk else 0


def comm_id(name: str, ranks: tuple[int, ...]) -> int:
    """A 64-bit communicator id every member computes alike, for process groups with no NCCL
    communicator behind them (gloo): a hash of the group's name and global ranks.

    >>> comm_id("0", (0, 1)) == comm_id("0", (0, 1)) != comm_id("1", (0, 1))
    True
    """
    text = f"{name}|{','.join(map(str, ranks))}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def rules_to_json(rules: list[Rule]) -> list[dict[str, Any]]:
    """Rules as the store's JSON carries them (``rules_from_json`` reads them back)."""
    return [r.to_dict() for r in rules]


def rules_from_json(items: list[dict[str, Any]]) -> list[Rule]:
    return [Rule.from_dict(item) for item in items]
