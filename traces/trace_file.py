"""Read and write ccltwin trace files (JSON, gzip when the name ends in ``.gz``).

The format is documented in docs/trace-format.md. ``load_trace`` checks every field and the
trace's consistency and names the file, rank and event of the first problem; ``save_trace``
validates first and writes atomically (a temporary file renamed into place), so a failed
save never leaves a partial file behind.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import gzip
import json
import math
import os
import re
import stat
import tempfile
import zlib
from array import array
from collections.abc import Iterable, Iterator
from os import PathLike
from pathlib import Path
from typing import Any

from traces.errors import TraceError
from traces.schema import (
    COMPUTE_CATEGORIES,
    CollectiveEvent,
    ComputeEvent,
    Event,
    ProcessGroup,
    RankTrace,
    Signatures,
    Trace,
    event_signatures,
)
from traces.task import Op

__all__ = [
    "FORMAT",
    "VERSION",
    "load_trace",
    "save_trace",
    "trace_from_dict",
    "trace_to_dict",
    "write_atomic",
]

FORMAT = "ccltwin-trace"
VERSION = 1


_UNREADABLE = (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, RecursionError, zlib.error)


def load_trace(path: str | PathLike[str]) -> Trace:
    """Read and validate a trace file.

    A file in the layout ``save_trace`` writes (one event per line) is read line by line, and
    each distinct event is decoded and checked once (``_Lines``): a pipeline's thousand
    micro-batches repeat the same few hundred events but for their ids.  Any other layout is
    decoded whole."""
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    with _collector_paused():
        try:
            with opener(path, "rt", encoding="utf-8") as file:
                trace = _Lines(path).read(file)
            if trace is None:
                with opener(path, "rt", encoding="utf-8") as file:
                    trace = trace_from_dict(json.load(file), path)
        except _UNREADABLE as err:
            raise TraceError(f"not a readable trace JSON file ({err})", path) from None
        except OSError as err:
            raise TraceError(f"cannot read the trace ({err.strerror or err})", path) from None
        trace.validate(path)
    if sum(len(rank.events) for rank in trace.ranks) >= FROZEN_EVENTS:
        gc.freeze()
    return trace


FROZEN_EVENTS = 100_000
"""A loaded trace of at least this many events is moved out of the cyclic garbage collector's
generations (``gc.freeze``): it holds no reference cycles (it is freed as soon as nothing refers
to it), and every full collection while it lives would otherwise walk each of its objects (2–3 s
of a 32-GPU Yi-34B evaluation per collection, at 2.1 M events)."""


@contextlib.contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a trace is read (the objects it makes live on, so
    the collections it would trigger, each walking them all, find nothing)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def save_trace(trace: Trace, path: str | PathLike[str]) -> None:
    """Validate ``trace`` and write it to ``path`` atomically (gzip if it ends in ``.gz``)."""
    trace.validate(str(path))
    write_atomic(path, _encode(trace_to_dict(trace)))


def check_writable(path: str | PathLike[str], what: str = "file") -> None:
    """Raise ``TraceError`` naming ``path`` unless a ``what`` can be written there (not a directory,
    its folder exists and is writable): commands call it before any work, so that nothing is
    half-written."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise TraceError(f"is a directory; give a file name for the {what}", path)
    _check_replaceable(target, what)
    if folder.exists() and not folder.is_dir():
        raise TraceError(f"cannot write the {what}: {str(folder)!r} is a file, not a folder", path)
    if not folder.is_dir():
        raise TraceError(f"cannot write the {what}: folder {str(folder)!r} does not exist", path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TraceError(f"cannot write the {what}: folder {str(folder)!r} is not writable", path)


def write_atomic(path: str | PathLike[str], chunks: Iterable[str]) -> None:
    """Write text to a temporary file beside ``path``, then rename it into place (gzip for ``.gz``).

    On any failure the temporary file is removed and an existing ``path`` is left as it was; a
    failure to write (a full disk, a folder such as ``/proc`` that takes no new files) is a
    ``TraceError`` naming ``path`` and the reason. What is not a regular file (a FIFO, a device,
    a symbolic link) is never replaced.
    """
    path = Path(path)
    _check_replaceable(path, "file")
    _remove_stale_temporaries(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{_temporary_prefix(path)}{os.getpid()}-", dir=path.parent)
    except OSError as err:
        raise TraceError(f"cannot write here ({err.strerror or err})", path) from None
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as raw:
            out = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.name.endswith(".gz") else raw
            for chunk in chunks:
                out.write(chunk.encode())
            if out is not raw:
                out.close()
            raw.flush()
            os.fsync(raw.fileno())  # the data is on disk before the name points at it
        os.replace(tmp, path)
        _sync_folder(path.parent)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(f"cannot write ({err.strerror or err}); nothing was written", path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}.ccltwin-"


def _remove_stale_temporaries(path: Path) -> None:
    """Remove what an earlier writer of ``path`` that was killed (SIGKILL, power loss) left: its
    temporary files, whose names carry the writer's process id, when that process is gone."""
    prefix = _temporary_prefix(path)
    for leftover in path.parent.glob(f"{glob.escape(prefix)}*"):
        pid = leftover.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


def _sync_folder(folder: Path) -> None:
    """Make the rename durable (a folder's entries are data too); where the file system cannot
    sync a folder, the rename is as durable as it allows."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _check_replaceable(target: Path, what: str) -> None:
    """Refuse to replace what is not a regular file: a symbolic link, a FIFO, a device, a socket."""
    if target.is_symlink():
        raise TraceError(f"is a symbolic link (to {os.readlink(target)!r}); ccltwin replaces the {what} it "
                         "writes, which would break the link: give the link's target or another name", target)
    if str(target.resolve()).startswith(("/proc/", "/sys/")):
        raise TraceError(f"is in {str(target.resolve()).split('/')[1]!r}, a kernel file system, not a place for "
                         f"the {what}", target)
    try:
        mode = target.stat().st_mode
    except OSError:
        return  # nothing there yet
    for test, kind in _KINDS:
        if test(mode):
            raise TraceError(f"is {kind}, not a regular file; ccltwin writes the {what} to a regular file only",
                             target)


# ---- to JSON -----------------------------------------------------------------------------


def _drop_defaults(fields: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if key not in defaults or value != defaults[key]}


_COLLECTIVE_DEFAULTS = {
    "duration_us": None,
    "stream": "nccl",
    "iteration": 0,
    "start_us": None,
    "end_us": None,
    "after": [],
    "name": None,
    "root": None,
    "peer": None,
    "direction": None,
}
_COMPUTE_DEFAULTS = {
    "stream": "compute",
    "iteration": 0,
    "duration_us": None,
    "flops": None,
    "mem_bytes": None,
    "start_us": None,
    "end_us": None,
    "after": [],
    "category": None,
    "shape": [],
    "dtype": None,
    "kernels": 1,
    "host_us": None,
}


def _event_to_dict(event: Event) -> dict[str, Any]:
    if isinstance(event, CollectiveEvent):
        fields = {
            "id": event.id,
            "kind": "collective",
            "op": event.op.value,
            "nbytes": event.nbytes,
            "dtype": event.dtype,
            "group": event.group,
            "stream": event.stream,
            "iteration": event.iteration,
            "start_us": event.start_us,
            "end_us": event.end_us,
            "after": list(event.after),
            "name": event.name,
            "root": event.root,
            "peer": event.peer,
            "direction": event.direction,
            "duration_us": event.duration_us,
        }
        return _drop_defaults(fields, _COLLECTIVE_DEFAULTS)
    fields = {
        "id": event.id,
        "kind": "compute",
        "name": event.name,
        "stream": event.stream,
        "iteration": event.iteration,
        "duration_us": event.duration_us,
        "flops": event.flops,
        "mem_bytes": event.mem_bytes,
        "start_us": event.start_us,
        "end_us": event.end_us,
        "after": list(event.after),
        "category": event.category,
        "shape": list(event.shape),
        "dtype": event.dtype,
        "kernels": event.kernels,
        "host_us": event.host_us,
    }
    return _drop_defaults(fields, _COMPUTE_DEFAULTS)


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The JSON document of a trace (optional fields left out when they hold their default)."""
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "world_size": trace.world_size}
    if trace.source is not None:
        doc["source"] = trace.source
    if trace.metadata:
        doc["metadata"] = trace.metadata
    doc["groups"] = [
        _drop_defaults(
            {"id": g.id, "ranks": list(g.ranks), "comm": g.comm, "name": g.name}, {"comm": None, "name": None}
        )
        for g in trace.groups
    ]
    doc["ranks"] = [
        _drop_defaults(
            {"rank": r.rank, "node": r.node, "events": [_event_to_dict(e) for e in r.events]}, {"node": None}
        )
        for r in trace.ranks
    ]
    return doc


def _encode(doc: dict[str, Any]) -> Iterator[str]:
    """Compact JSON with one group and one event per line, so that diffs and ``grep`` work."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    head = {key: value for key, value in doc.items() if key not in ("groups", "ranks")}
    yield dumps(head)[:-1] + ',\n"groups":[\n'
    yield ",\n".join(dumps(group) for group in doc["groups"])
    yield '\n],\n"ranks":['
    for index, rank in enumerate(doc["ranks"]):
        header = {key: value for key, value in rank.items() if key != "events"}
        yield ("," if index else "") + "\n" + dumps(header)[:-1] + ',"events":[\n'
        yield ",\n".join(dumps(event) for event in rank["events"])
        yield "\n]}"
    yield "\n]}\n"


# ---- from JSON ---------------------------------------------------------------------------


class _Reader:
    """Typed access to one JSON object, with errors that say where the object sits."""

    def __init__(self, obj: Any, path: str | None, what: str, rank: int | None = None, event: Any = None):
        self.path, self.what, self.rank, self.event = path, what, rank, event
        if not isinstance(obj, dict):
            self.fail(f"{what} must be an object, got {type(obj).__name__}")
        self.obj = obj

    def fail(self, problem: str):
        raise TraceError(problem, self.path, rank=self.rank, event=self.event)

    def get(self, key: str, kind: str, default: Any = ..., *, nullable: bool = False) -> Any:
        if key not in self.obj or (self.obj[key] is None and nullable):
            if default is ... and not nullable:
                self.fail(f"{self.what} has no {key!r}")
            return None if default is ... else default
        value = self.obj[key]
        if not _IS_KIND[kind](value):
            self.fail(f"{self.what}: {key!r} must be {_KIND_NAMES[kind]}, got {value!r:.60}")
        return value


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


_IS_KIND = {  # only the kind asked for is checked: a trace has millions of fields
    "int": _is_int,
    "number": lambda v: (isinstance(v, float) or _is_int(v)) and math.isfinite(v),
    "str": lambda v: isinstance(v, str),
    "ints": lambda v: isinstance(v, list) and all(map(_is_int, v)),
    "list": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


_KIND_NAMES = {
    "int": "an integer",
    "number": "a finite number",
    "str": "a string",
    "ints": "a list of integers",
    "list": "a list",
    "object": "an object",
}


_NUMBER = r"(?:0|[1-9][0-9]*)"
_EVENT_LINE = re.compile(rf'\{{"id":({_NUMBER}),(.*)\}},?')
_AFTER = re.compile(rf',"after":\[((?:{_NUMBER}(?:,{_NUMBER})*)?)\]')


class _Lines:
    """A trace file in ``save_trace``'s layout, read line by line: everything but the events is
    decoded as one document; an event line is split into its id, its ``after`` list and the rest,
    and the rest is decoded and checked the first time it is seen, then copied with each id."""

    def __init__(self, path: str):
        self.path = path
        self.known: dict[str, tuple[Event, int]] = {}  # an event's text but its id and after -> it, its signature
        self.signatures = Signatures()

    def read(self, file) -> Trace | None:
        """The trace, or ``None`` when the file is not in that layout (then decode it whole)."""
        skeleton: list[str] = []
        blocks: list[list[Event]] = []
        signatures: list[array] = []
        events: list[Event] | None = None
        signs = array("q")
        rank = 0
        try:
            for line in file:
                if events is not None:
                    if line.startswith('{"id":'):
                        event, signature = self._event(line.rstrip("\n"), rank, len(events))
                        events.append(event)
                        signs.append(signature)
                        continue
                    events = None
                skeleton.append(line)
                if line.endswith(_EVENTS):
                    rank = _rank_of(line, len(blocks))
                    events, signs = [], array("q")
                    blocks.append(events)
                    signatures.append(signs)
            doc = json.loads("".join(skeleton))
        except (json.JSONDecodeError, TraceError):
            return None  # decoded whole, a problem is named as it always is
        entries = doc.get("ranks") if isinstance(doc, dict) else None
        if (not blocks or not isinstance(entries, list) or len(entries) != len(blocks)
                or any(not isinstance(e, dict) or e.get("events") != [] for e in entries)):
            return None
        trace = trace_from_dict(doc, self.path, blocks)
        event_signatures.store(trace, tuple(signatures))
        return trace

    def _event(self, line: str, rank: int, position: int) -> tuple[Event, int]:
        """The event on ``line`` and its signature (``traces.schema.event_signatures``)."""
        match = _EVENT_LINE.fullmatch(line)
        if match is None:
            event = self._decode(line, rank, position)
            return event, self.signatures.of(event)
        body = match[2]
        after = _AFTER.search(body)
        rest = body if after is None else body[:after.start()] + body[after.end():]
        known = self.known.get(rest)
        if known is None:
            event = self._decode(line, rank, position)
            signature = self.signatures.of(event)
            self.known[rest] = (_copy(event, 0, ()), signature)
            return event, signature
        template, signature = known
        return (_copy(template, int(match[1]), tuple(map(int, after[1].split(","))) if after and after[1] else ()),
                signature)

    def _decode(self, line: str, rank: int, position: int) -> Event:
        """One event line decoded and checked on its own."""
        return _event(json.loads(line[:-1] if line.endswith(",") else line), self.path, rank, position)


_EVENTS = '"events":[\n'


def _rank_of(line: str, index: int) -> int:
    """The rank a rank's header line (``{"rank":8,"node":"n1","events":[``) names, else ``index``."""
    try:
        header = json.loads(line[:-len(_EVENTS)].rstrip().rstrip(",") + "}")
    except json.JSONDecodeError:
        return index
    rank = header.get("rank") if isinstance(header, dict) else None
    return rank if _is_int(rank) else index


def _copy(event: Event, event_id: int, after: tuple[int, ...]) -> Event:
    """``event`` with another id and dependencies: its fields set directly, as ``copy.copy``
    does (``dataclasses.replace`` would check each field again, a thousand times per event)."""
    new = object.__new__(type(event))
    new.__dict__.update(event.__dict__)
    new.__dict__["id"] = event_id
    new.__dict__["after"] = after
    return new


def trace_from_dict(doc: Any, path: str | None = None, decoded: list[list[Event]] | None = None) -> Trace:
    """Build a ``Trace`` from its JSON document, checking every field (not yet the cross-references);
    ``decoded`` holds each rank's events when they were read already (``_Lines``)."""
    top = _Reader(doc, path, "the trace")
    if top.get("format", "str", None) != FORMAT:
        top.fail(f'not a ccltwin trace (expected "format": "{FORMAT}")')
    version = top.get("version", "int")
    if version != VERSION:
        top.fail(f"unsupported trace version {version}; this ccltwin reads version {VERSION}")
    groups = []
    for index, item in enumerate(top.get("groups", "list")):
        group = _Reader(item, path, f"groups[{index}]")
        groups.append(
            ProcessGroup(
                id=group.get("id", "str"),
                ranks=tuple(group.get("ranks", "ints")),
                comm=group.get("comm", "str", nullable=True),
                name=group.get("name", "str", nullable=True),
            )
        )
    ranks = []
    for index, item in enumerate(top.get("ranks", "list")):
        entry = _Reader(item, path, f"ranks[{index}]")
        rank = entry.get("rank", "int")
        events = (tuple(decoded[index]) if decoded is not None
                  else tuple(_event(e, path, rank, i) for i, e in enumerate(entry.get("events", "list"))))
        ranks.append(RankTrace(rank=rank, events=events, node=entry.get("node", "str", nullable=True)))
    return Trace(
        world_size=top.get("world_size", "int"),
        groups=tuple(groups),
        ranks=tuple(ranks),
        source=top.get("source", "str", nullable=True),
        metadata=top.get("metadata", "object", {}),
    )


_OPS = [op.value for op in Op]


def _compute_work(event: _Reader) -> dict[str, Any]:
    """What a compute phase's work is (category, shape, dtype, kernels, host time), checked."""
    category = event.get("category", "str", nullable=True)
    if category is not None and category not in COMPUTE_CATEGORIES:
        event.fail(f"unknown compute category {category!r}; expected one of {', '.join(COMPUTE_CATEGORIES)}")
    shape = tuple(event.get("shape", "ints", []))
    if any(dim < 1 for dim in shape):
        event.fail(f"shape must list sizes ≥ 1, not {list(shape)}")
    kernels = event.get("kernels", "int", 1)
    if kernels < 0:
        event.fail(f"kernels must be ≥ 0, not {kernels}")
    host_us = event.get("host_us", "number", nullable=True)
    if host_us is not None and not 0 <= host_us < float("inf"):
        event.fail(f"host_us must be a finite number ≥ 0, not {host_us}")
    return {"category": category, "shape": shape, "dtype": event.get("dtype", "str", nullable=True),
            "kernels": kernels, "host_us": host_us}


def _event(obj: Any, path: str | None, rank: int, index: int) -> Event:
    event = _Reader(obj, path, "the event", rank, f"#{index}")
    event_id = event.get("id", "int")
    event.event = event_id
    common = {
        "id": event_id,
        "iteration": event.get("iteration", "int", 0),
        "start_us": event.get("start_us", "number", nullable=True),
        "end_us": event.get("end_us", "number", nullable=True),
        "after": tuple(event.get("after", "ints", [])),
    }
    kind = event.get("kind", "str")
    if kind == "compute":
        return ComputeEvent(
            name=event.get("name", "str"),
            stream=event.get("stream", "str", "compute"),
            duration_us=event.get("duration_us", "number", nullable=True),
            flops=event.get("flops", "number", nullable=True),
            mem_bytes=event.get("mem_bytes", "int", nullable=True),
            **_compute_work(event),
            **common,
        )
    if kind != "collective":
        event.fail(f"unknown event kind {kind!r}; expected 'collective' or 'compute'")
    if "nbytes" not in event.obj:
        event.fail("the event has no 'nbytes' (null when unknown)")
    op_name = event.get("op", "str")
    if op_name not in _OPS:
        event.fail(f"unknown op {op_name!r}; expected one of {', '.join(_OPS)}")
    return CollectiveEvent(
        op=Op(op_name),
        nbytes=event.get("nbytes", "int", nullable=True),
        group=event.get("group", "str"),
        dtype=event.get("dtype", "str"),
        stream=event.get("stream", "str", "nccl"),
        name=event.get("name", "str", nullable=True),
        root=event.get("root", "int", nullable=True),
        peer=event.get("peer", "int", nullable=True),
        direction=event.get("direction", "str", nullable=True),
        duration_us=event.get("duration_us", "number", nullable=True),
        **common,
    )
