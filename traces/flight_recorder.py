"""Import PyTorch NCCL flight-recorder dumps (JSON, format version 2.x), one file per rank.

A dump (``TORCH_FR_BUFFER_SIZE`` > 0, written by ``_dump_nccl_trace_json`` or on a timeout
to ``TORCH_FR_DUMP_TEMP_FILE<rank>``) holds ``version``, ``comm_lib_version``, ``pg_config``
(per group: ``name``, ``desc``, ``ranks`` as a string such as ``"[0, 1]"``) and ``entries``,
the last collectives of each group: ``record_id``, ``pg_id``, ``process_group`` [name, desc],
``collective_seq_id``, ``p2p_seq_id``, ``profiling_name`` (``nccl:all_reduce``,
``nccl:send 0->1``), ``input_sizes``/``input_dtypes``, ``output_sizes``/``output_dtypes``,
``duration_ms`` (with ``TORCH_NCCL_ENABLE_TIMING=1``), ``state``, ``is_p2p`` and more.

The buffer is a ring, so the ranks' windows need not start at the same call: collectives
are kept from the first ``collective_seq_id`` every member rank in the set still holds to
the last one they all reached. The dump does not name its rank: it comes from the file name
(``..._rank_3``, ``rank3.json``, trailing digits) or is given. There are no iterations in a
dump: everything is iteration 0.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from traces.errors import TraceError
from traces.json_stream import open_text
from traces.kineto import TORCH_DTYPES, collective_op, message_bytes
from traces.merge import RankPart, merge_ranks
from traces.schema import CollectiveEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op

__all__ = ["KNOWN_MAJOR_VERSIONS", "read_flight_recorder"]

KNOWN_MAJOR_VERSIONS = ("2",)
_RANK_IN_NAME = re.compile(r"(?:rank[_-]?)?(\d+)(?:\.json)?(?:\.gz)?$", re.IGNORECASE)
_P2P = re.compile(r"^nccl:(send|recv) (\d+)(?:->|<-)(\d+)$")


def read_flight_recorder(paths: Sequence[str | PathLike[str]], ranks: Sequence[int] | None = None) -> Trace:
    """Import flight-recorder dumps, one per rank; ``ranks`` overrides the ranks in the file names."""
    if ranks is not None and len(ranks) != len(paths):
        raise TraceError(f"{len(paths)} files but {len(ranks)} ranks given")
    dumps = []
    for index, path in enumerate(map(str, paths)):
        rank = ranks[index] if ranks is not None else _rank_from_name(path)
        dumps.append((path, rank, _load(path)))
    groups = _groups(dumps)
    world = max(max(r for g in groups.values() for r in g.ranks), max(rank for _, rank, _ in dumps)) + 1
    window = _common_window(dumps, groups)
    skipped: Counter[str] = Counter()
    parts = [_rank_part(path, rank, dump, groups, window, world, skipped) for path, rank, dump in dumps]
    metadata: dict[str, Any] = {
        "importer": "flight-recorder",
        "files": [str(p) for p in paths],
        "comm_lib_version": dumps[0][2].get("comm_lib_version"),
    }
    if skipped:
        metadata["not_imported"] = dict(skipped)
    return merge_ranks(parts, "flight recorder", metadata)


def _rank_from_name(path: str) -> int:
    match = _RANK_IN_NAME.search(Path(path).name)
    if not match:
        raise TraceError("the rank is not in the file name (…_rank_3): give it explicitly", path)
    return int(match[1])


def _load(path: str) -> dict[str, Any]:
    try:
        with open_text(path) as file:
            dump = json.load(file)
    except OSError as err:
        raise TraceError(f"cannot read ({err})", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, RecursionError, zlib.error) as err:
        raise TraceError(f"not a readable flight-recorder JSON dump ({err})", path) from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise TraceError("not a flight-recorder dump (no 'entries' list; dumped without collectives?)", path)
    version = dump.get("version")
    if not isinstance(version, str) or version.split(".")[0] not in KNOWN_MAJOR_VERSIONS:
        raise TraceError(f"unknown flight-recorder version {version!r}; known: 2.x", path)
    return dump


def _groups(dumps: list[tuple[str, int, dict]]) -> dict[str, ProcessGroup]:
    groups: dict[str, ProcessGroup] = {}
    for path, _, dump in dumps:
        config = dump.get("pg_config")
        if not isinstance(config, dict):
            raise TraceError("no 'pg_config' object", path)
        for key, pg in config.items():
            try:
                ranks = tuple(json.loads(pg["ranks"]) if isinstance(pg["ranks"], str) else pg["ranks"])
                if not ranks or not all(isinstance(r, int) and r >= 0 for r in ranks):
                    raise ValueError
            except (TypeError, KeyError, ValueError):
                raise TraceError(f"pg_config[{key!r}] has no list of ranks", path) from None
            group = ProcessGroup(str(pg.get("name", key)), ranks, name=pg.get("desc"))
            if groups.setdefault(group.id, group).ranks != ranks:
                raise TraceError(
                    f"group {group.id!r} has ranks {list(ranks)} here, "
                    f"{list(groups[group.id].ranks)} in another dump",
                    path,
                )
    return groups


def _entries(path: str, dump: dict) -> list[dict]:
    """The entries in record order, each checked for the fields the import relies on."""
    entries = []
    for index, entry in enumerate(dump["entries"]):
        if not isinstance(entry, dict):
            raise TraceError(f"entries[{index}] is not an object", path)
        for key, kind in (("record_id", int), ("collective_seq_id", int), ("profiling_name", str)):
            if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
                raise TraceError(f"entries[{index}] has no {kind.__name__} {key!r}", path)
        entries.append(entry)
    return sorted(entries, key=lambda entry: entry["record_id"])


def _group_of(entry: dict) -> str:
    pg = entry.get("process_group")
    return str(pg[0]) if isinstance(pg, list) and pg else str(entry.get("pg_id"))


def _common_window(dumps: list[tuple[str, int, dict]], groups: dict[str, ProcessGroup]) -> dict[str, range]:
    """Per group, the collective_seq_ids that every member rank in the set holds."""
    seen: dict[str, dict[int, set[int]]] = defaultdict(dict)
    for path, rank, dump in dumps:
        for entry in _entries(path, dump):
            if not entry.get("is_p2p"):
                seen[_group_of(entry)].setdefault(rank, set()).add(entry["collective_seq_id"])
    present = {rank for _, rank, _ in dumps}
    window = {}
    for group_id, by_rank in seen.items():
        members = [r for r in groups[group_id].ranks if r in present] if group_id in groups else list(by_rank)
        held = [by_rank.get(rank, set()) for rank in members]
        low = max((min(ids) for ids in held if ids), default=0)
        high = min((max(ids) for ids in held if ids), default=-1)
        window[group_id] = range(low, high + 1) if all(held) else range(0)
    return window


def _numel(sizes: Any) -> int:
    if not isinstance(sizes, list) or not all(isinstance(s, list) for s in sizes):
        raise ValueError(f"sizes {sizes!r} are not a list of shapes")
    return sum(math.prod(shape) for shape in sizes)


def _rank_part(
    path: str,
    rank: int,
    dump: dict,
    groups: dict[str, ProcessGroup],
    window: dict[str, range],
    world: int,
    skipped: Counter[str],
) -> RankPart:
    events, used = [], {}
    for entry in _entries(path, dump):
        index = entry["record_id"]
        group_id = _group_of(entry)
        if group_id not in groups:
            raise TraceError(f"record {index}: group {group_id!r} is not in pg_config", path, rank=rank)
        name = entry["profiling_name"]
        try:
            event = _event(len(events), entry, name, groups[group_id], rank)
        except (ValueError, TypeError) as err:
            raise TraceError(f"record {index} ({name}): {err}", path, rank=rank) from None
        if event is None:
            skipped[f"{name} (not a collective ccltwin models)"] += 1
        elif event.op is not Op.SENDRECV and entry.get("collective_seq_id") not in window.get(
            group_id, range(0)
        ):
            skipped["collectives outside the window all ranks hold"] += 1
        else:
            events.append(event)
            used[group_id] = groups[group_id]
    return RankPart(path, world, RankTrace(rank, tuple(events)), tuple(used.values()))


def _event(event_id: int, entry: dict, name: str, group: ProcessGroup, rank: int) -> CollectiveEvent | None:
    p2p = _P2P.match(name)
    op = Op.SENDRECV if p2p else collective_op(name.removeprefix("nccl:"))
    if op is None:
        return None
    dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or []
    dtype = TORCH_DTYPES.get(dtypes[0]) if isinstance(dtypes, list) and dtypes else None
    if dtype is None:
        raise ValueError(f"unknown dtype {dtypes!r}")
    nbytes = message_bytes(op, _numel(entry.get("input_sizes")), _numel(entry.get("output_sizes")), dtype)
    peer = None
    if p2p:
        me, other = (int(p2p[2]), int(p2p[3]))
        peer_in_group = other if me == group.ranks.index(rank) else me
        if not 0 <= peer_in_group < len(group.ranks):
            raise ValueError(f"peer {peer_in_group} is not a rank of group {group.id!r}")
        peer = group.ranks[peer_in_group]
    duration = entry.get("duration_ms")
    duration_us = (
        float(duration) * 1e3
        if isinstance(duration, int | float) and not isinstance(duration, bool)
        else None
    )
    return CollectiveEvent(
        event_id,
        op,
        nbytes,
        group.id,
        dtype,
        f"nccl:{group.id}",
        name=name,
        peer=peer,
        duration_us=duration_us,
    )
