"""One timed collective: what ran, how long it took, and under which circumstances.

A measurement from the live tuner reads "AllReduce of 64 MiB on the 8-GPU TP group ran with
ring/simple/p2p, 16 channels, 512 threads, 2 MiB chunks in 812.4 µs on cluster ``h100-a:8x4``
(its identity: ``tuner.identity``) with NCCL 2.28.9, while compute kernels occupied 30% of the
SMs". The twin writes the same record for a prediction (``source="twin"``), and a nccl-tests log gives one per row
(``source="nccl-tests"``): there NCCL chose the configuration and did not say what it was, so
``config`` is ``None`` and ``env`` keeps the ``NCCL_*`` variables (``NCCL_ALGO``,
``NCCL_PROTO``...) that constrained its choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from traces.errors import TraceError
from traces.nccl_tests import read_nccl_tests
from traces.task import Task
from tuner.codec import FieldError, config_from_dict, config_to_dict, get_field, task_from_dict, task_to_dict
from tuner.config import Config
from tuner.identity import normalise_identity

__all__ = ["SOURCES", "Measurement", "read_nccl_tests_measurements"]

SOURCES = ("twin", "live", "nccl-tests")
"""Where a time comes from: a twin prediction, the live tuner, or an nccl-tests log."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """A task, a config, a time, and the circumstances of the run."""

    task: Task
    config: Config | None
    """What ran; ``None`` when NCCL chose and did not record its choice (see ``env``)."""
    time_us: float
    """Duration of one call, µs (nccl-tests: the out-of-place time)."""
    source: str
    """One of ``SOURCES``."""
    hardware: str
    """The cluster the time belongs to: its identity (``dgx-h100:8x2``, ``tuner.identity``) when
    ccltwin knows the cluster, else a hardware id as given (an nccl-tests log's)."""
    nccl_version: str = ""
    """``"2.28.9"``; empty when unknown."""
    interference: float = 0.0
    """Share (0 to 1) of the GPU's SMs that compute kernels held while the collective ran;
    0 when it ran alone."""
    env: dict[str, str] = field(default_factory=dict, hash=False)
    """``NCCL_*`` variables in force that shaped NCCL's choice."""
    comm: str = ""
    """The communicator it ran on (a process-group name or NCCL comm hash); empty when unknown."""
    occurrence: int | None = None
    """Which call of this task on the communicator, counted from 0, when known."""
    timestamp: float | None = None
    """When it was measured, Unix seconds; ``None`` when unknown."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_us) and self.time_us > 0):
            raise ValueError(f"time_us must be a positive finite number, got {self.time_us}")
        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}; expected one of {', '.join(SOURCES)}")
        if not self.hardware:
            raise ValueError("hardware must name the cluster the time belongs to")
        if not 0.0 <= self.interference <= 1.0:
            raise ValueError(f"interference must be between 0 and 1, got {self.interference}")
        if self.occurrence is not None and self.occurrence < 0:
            raise ValueError(f"occurrence must be >= 0, got {self.occurrence}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this measurement (``from_dict`` reads it back).

        >>> from traces.task import Op
        >>> m = Measurement(task=Task(Op.ALLREDUCE, 1024, 8), config=None, time_us=12.5,
        ...                 source="nccl-tests", hardware="dgx-a100")
        >>> Measurement.from_dict(m.to_dict()) == m
        True
        """
        return {
            "task": task_to_dict(self.task),
            "config": None if self.config is None else config_to_dict(self.config),
            "time_us": self.time_us, "source": self.source, "hardware": self.hardware,
            "nccl_version": self.nccl_version, "interference": self.interference, "env": dict(self.env),
            "comm": self.comm, "occurrence": self.occurrence, "timestamp": self.timestamp,
        }

    @classmethod
    def from_dict(cls, obj: Any, where: str = "measurement") -> Measurement:
        """Read ``to_dict``'s object; raises ``FieldError`` naming the bad field. A cluster named as
        older versions named it is read as its identity (``normalise_identity``)."""
        config = get_field(obj, "config", "object", where, None, nullable=True)
        env = get_field(obj, "env", "object", where, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise FieldError(f"{where}.env: expected string names and values")
        try:
            return cls(
                task=task_from_dict(get_field(obj, "task", "object", where), f"{where}.task"),
                config=None if config is None else config_from_dict(config, f"{where}.config"),
                time_us=get_field(obj, "time_us", "number", where),
                source=get_field(obj, "source", "str", where),
                hardware=normalise_identity(get_field(obj, "hardware", "str", where)),
                nccl_version=get_field(obj, "nccl_version", "str", where, ""),
                interference=get_field(obj, "interference", "number", where, 0.0),
                env=dict(env),
                comm=get_field(obj, "comm", "str", where, ""),
                occurrence=get_field(obj, "occurrence", "int", where, None, nullable=True),
                timestamp=get_field(obj, "timestamp", "number", where, None, nullable=True),
            )
        except FieldError:
            raise
        except ValueError as err:
            raise FieldError(f"{where}: {err}") from None


def hardware_id(description: str) -> str:
    """A log's ``# HARDWARE:`` description cut to its first clause (outside parentheses, before a
    colon, semicolon, full stop or " - "), so that logs of one machine share an id a user can type.

    >>> hardware_id("Azure ND A100 v4 (ND96asr_v4): 8x NVIDIA A100-SXM4-40GB per node; 8 HDR NICs")
    'Azure ND A100 v4 (ND96asr_v4)'
    >>> hardware_id("single server with 8x A100 (SXM4, NVLink3: NVSwitch) - exact SKU not stated")
    'single server with 8x A100 (SXM4, NVLink3: NVSwitch)'
    """
    text = description.strip()
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and (char in ":;" or text.startswith(". ", i) or text.startswith(" - ", i)):
            return text[:i].strip()
    return text


def read_nccl_tests_measurements(path: str | PathLike[str], *, hardware: str | None = None) -> list[Measurement]:
    """One measurement per row of an nccl-tests log that has a time (or a busbw to derive it from).

    ``hardware`` defaults to the log's ``# HARDWARE:`` header. The configuration is NCCL's
    own choice (``config=None``) under the log's ``NCCL_*`` environment. Raises
    ``TraceError`` naming the file when the log cannot be read or does not say the op or
    the rank count, or when no hardware is known.
    """
    log = read_nccl_tests(path)
    hardware = hardware or hardware_id(log.header.get("HARDWARE", ""))
    if not hardware:
        raise TraceError("the log has no '# HARDWARE:' line; say which cluster it is from (--hardware)", log.path)
    out = []
    for row in log.rows:
        task = log.task(row)
        time_us = row.time_us
        if time_us is None and row.busbw and task.busbw_factor:
            # busbw-only tables: time = size / algbw, algbw = busbw / factor (GB/s = 1e3 B/µs)
            time_us = task.nbytes * task.busbw_factor / (row.busbw * 1e3)
        if not time_us or time_us <= 0:
            continue
        out.append(Measurement(task=task, config=None, time_us=time_us, source="nccl-tests", hardware=hardware,
                               nccl_version=log.nccl_version or "", env=dict(log.env)))
    return out
