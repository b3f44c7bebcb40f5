"""Tasks and configs as JSON objects, read back with errors that name the faulty field.

One task and one config look like this in every ccltwin file (plans, measurement records)::

    {"op": "allreduce", "nbytes": 1048576, "nranks": 8, "dtype": "float32", "group": "8x1"}
    {"algo": "ring", "proto": "simple", "transport": "p2p",
     "nchannels": 16, "nthreads": 512, "chunk_bytes": 2097152}

Readers raise ``FieldError`` whose message starts with the field's path in the document
(``entries[3].ranked[0].config.nthreads: ...``); file readers prefix the file name.
"""

from __future__ import annotations

import math
from typing import Any

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport, parse_enum

__all__ = ["FieldError", "config_from_dict", "config_to_dict", "get_field", "task_from_dict", "task_to_dict"]


class FieldError(CcltwinError):
    """A field of a JSON document is missing or has the wrong type or value."""


_KINDS = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a finite number",
               lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "object": ("an object", lambda v: isinstance(v, dict)),
}


def get_field(obj: Any, key: str, kind: str, where: str, default: Any = ..., *, nullable: bool = False) -> Any:
    """``obj[key]`` checked to be of ``kind`` (int, number, str, list, object).

    A missing key returns ``default`` (an error when there is none); ``null`` is accepted
    only when ``nullable``.

    >>> get_field({"nbytes": 8}, "nbytes", "int", "task")
    8
    >>> get_field({"nbytes": "8"}, "nbytes", "int", "task")
    Traceback (most recent call last):
    ...
    tuner.codec.FieldError: task.nbytes: expected an integer, got '8'
    """
    if not isinstance(obj, dict):
        raise FieldError(f"{where}: expected an object, got {_show(obj)}")
    if key not in obj:
        if default is ...:
            raise FieldError(f"{where}: missing {key!r}")
        return default
    value = obj[key]
    if value is None and nullable:
        return None
    name, check = _KINDS[kind]
    if not check(value):
        raise FieldError(f"{where}.{key}: expected {name}, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    return f"{value!r:.60}"


def task_to_dict(task: Task) -> dict[str, Any]:
    return {"op": task.op.value, "nbytes": task.nbytes, "nranks": task.nranks, "dtype": task.dtype,
            "group": task.group}


def task_from_dict(obj: Any, where: str = "task") -> Task:
    """Read a task object; ``dtype`` defaults to float32 and ``group`` to ""."""
    op = get_field(obj, "op", "str", where)
    try:
        op = Op(op)
    except ValueError:
        raise FieldError(f"{where}.op: unknown collective {op!r}; expected one of "
                         f"{', '.join(o.value for o in Op)}") from None
    try:
        return Task(op=op, nbytes=get_field(obj, "nbytes", "int", where), nranks=get_field(obj, "nranks", "int", where),
                    dtype=get_field(obj, "dtype", "str", where, "float32"),
                    group=get_field(obj, "group", "str", where, ""))
    except ValueError as err:
        if isinstance(err, FieldError):
            raise
        raise FieldError(f"{where}: {err}") from None


def config_to_dict(config: Config) -> dict[str, Any]:
    return {"algo": config.algo.value, "proto": config.proto.value, "transport": config.transport.value,
            "nchannels": config.nchannels, "nthreads": config.nthreads, "chunk_bytes": config.chunk_bytes}


def config_from_dict(obj: Any, where: str = "config") -> Config:
    """Read a config object; every field is required (a config is a full point of the space)."""
    try:
        enums = [parse_enum(kind, get_field(obj, key, "str", where))
                 for kind, key in ((Algo, "algo"), (Proto, "proto"), (Transport, "transport"))]
    except FieldError:
        raise
    except ValueError as err:
        raise FieldError(f"{where}: {err}") from None
    ints = [get_field(obj, key, "int", where) for key in ("nchannels", "nthreads", "chunk_bytes")]
    try:
        return Config(*enums, *ints)
    except ValueError as err:
        raise FieldError(f"{where}: {err}") from None
