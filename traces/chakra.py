"""Import PyTorch execution traces (the Chakra host schema), one JSON file per rank.

An execution trace lists every operator a rank ran as a node (``id``, ``name``,
``ctrl_deps`` = parent id, ``inputs``, ``outputs``, ``attrs``), ids in execution order.
Collectives are the ``record_param_comms`` nodes: schema 1.1 puts their name, sizes, dtype
and group in ``attrs``; 1.0 only in the positional inputs (tensors as ``[id, storage,
offset, numel, itemsize, device]``). ``## process_group:init ##`` lists the groups, and
``ProfilerStep#N`` ancestors number the iterations. Execution traces carry no durations,
so the result holds the collectives only, on one stream per group, in issue order.

Schema 1.0.1 (PyTorch 2.0) writes ``parent`` for ``ctrl_deps``, ``inputs``/``outputs`` as plain
lists beside ``input_types``, and neither the groups nor the world size: the world is the
largest of the ranks given, the files' rank inputs and the all-to-allv split lists, and a
group known only by its address is the job's default group (all ranks), named by the order
in which the file first uses it (``pg0``, ``pg1``…).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

from traces.errors import TraceError
from traces.json_stream import stream_object
from traces.kineto import TORCH_DTYPES, collective_op, message_bytes
from traces.merge import RankPart, merge_ranks
from traces.schema import MAX_WORLD_SIZE, CollectiveEvent, ProcessGroup, RankTrace, Trace
from traces.task import Op

__all__ = ["KNOWN_SCHEMAS", "read_chakra"]

KNOWN_SCHEMAS = ("1.0", "1.1")  # major.minor of the "<pytorch>-chakra.<chakra>" schema string
_SCHEMA = re.compile(r"^(\d+)\.(\d+)\.\d+(?:-chakra\.\d+\.\d+\.\d+)?$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]+)\)")
# torch dtype names as execution traces print them
_ET_DTYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "long": "int64",
    "long int": "int64",
    "int": "int32",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "uint8",
    "int8": "int8",
    "uint8": "uint8",
}


def read_chakra(paths: Sequence[str | PathLike[str]], ranks: Sequence[int] | None = None) -> Trace:
    """Import execution traces, one per rank; ``ranks`` overrides the rank read from each file.

    A file's rank is read from its collectives (the ``rank`` input of a non-rooted one);
    ``TraceError`` if it cannot be, and ``ranks`` is not given.
    """
    if ranks is not None and len(ranks) != len(paths):
        raise TraceError(f"{len(paths)} files but {len(ranks)} ranks given")
    skipped: Counter[str] = Counter()
    parsed = [_parse(path, None if ranks is None else ranks[i], skipped) for i, path in enumerate(map(str, paths))]
    world = max((p.world for p in parsed), default=1)
    parts = [_part(p, world) for p in parsed]
    metadata: dict[str, Any] = {
        "importer": "chakra",
        "files": [str(p) for p in paths],
        "schemas": sorted({p.schema for p in parsed}),
    }
    if skipped:
        metadata["not_imported"] = dict(skipped)
    return merge_ranks(parts, "pytorch execution trace", metadata)


class _Nodes:
    """What the import keeps of the node stream: parents, step nodes, collective nodes, groups."""

    def __init__(self, path: str):
        self.path = path
        self.parent: dict[int, int] = {}
        self.steps: dict[int, int] = {}  # node id → step number
        self.comms: list[dict[str, Any]] = []
        self.group_configs: list[dict[str, Any]] = []

    def take(self, node: Any) -> None:
        if (
            not isinstance(node, dict)
            or not isinstance(node.get("id"), int)
            or not isinstance(node.get("name"), str)
        ):
            raise TraceError(f"malformed node {str(node)[:80]!r} (needs an integer id and a name)", self.path)
        name = node["name"]
        parent = node.get("ctrl_deps", node.get("parent"))  # 1.0.1 calls it parent
        if isinstance(parent, int):
            self.parent[node["id"]] = parent
        if match := _STEP.match(name):
            self.steps[node["id"]] = int(match[1])
        elif name == "record_param_comms":
            self.comms.append(node)
        elif name == "## process_group:init ##":
            self.group_configs += _group_configs(node, self.path)

    def step_of(self, node_id: int) -> int | None:
        seen = set()
        while node_id not in self.steps:
            if node_id in seen or node_id not in self.parent:
                return None
            seen.add(node_id)
            node_id = self.parent[node_id]
        return self.steps[node_id]


def _group_configs(node: dict, path: str) -> list[dict[str, Any]]:
    values = (node.get("inputs") or {}).get("values") or []
    try:
        configs = json.loads(values[0]) if values and isinstance(values[0], str) else []
    except json.JSONDecodeError:
        raise TraceError(f"node {node['id']}: process_group:init holds no JSON list", path) from None
    return [c for c in configs if isinstance(c, dict)] if isinstance(configs, list) else []


@dataclass
class _Parsed:
    """One file's collectives, before the job's world size is known."""

    path: str
    schema: str
    rank: int
    world: int  # the largest world size this file shows
    nodes: _Nodes
    comms: list[tuple[int, dict[str, Any]]]


def _parse(path: str, rank: int | None, skipped: Counter[str]) -> _Parsed:
    nodes = _Nodes(path)
    top = stream_object(path, "nodes", nodes.take)
    schema = top.get("schema")
    match = _SCHEMA.match(schema) if isinstance(schema, str) else None
    if not match or f"{match[1]}.{match[2]}" not in KNOWN_SCHEMAS:
        raise TraceError(
            f"unknown execution trace schema {schema!r}; known: {', '.join(KNOWN_SCHEMAS)}.x", path
        )
    comms = []
    for node in sorted(nodes.comms, key=lambda n: n["id"]):
        try:
            comm = _comm(node)
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise TraceError(f"record_param_comms node {node['id']}: {err}", path) from None
        if comm is None:
            skipped["wait and other non-collective record_param_comms"] += 1
            continue
        comms.append((node["id"], comm))
    if rank is None:
        rank = next((c["rank"] for _, c in comms if c["rank"] is not None), None)
        if rank is None:
            raise TraceError("the file does not say which rank it is: give the rank explicitly", path)
    world = max(
        [_int(c.get("group_size")) or 0 for c in nodes.group_configs]
        + [max(c["world"] or 0, c["splits"]) for _, c in comms] + [rank + 1]
    )
    if world > MAX_WORLD_SIZE:
        raise TraceError(f"implausible world size {world}", path)
    return _Parsed(path, schema, rank, world, nodes, comms)


def _part(parsed: _Parsed, world: int) -> RankPart:
    nodes, path = parsed.nodes, parsed.path
    groups = {c["pg_name"]: c for c in nodes.group_configs if isinstance(c.get("pg_name"), str)}
    steps = sorted(set(nodes.steps.values()))
    events, trace_groups = [], {}
    backends = {c["backend_id"]: name for name, c in groups.items() if _int(c.get("backend_id")) is not None}
    unnamed: dict[Any, str] = {}  # 1.0.1: a group's address → pg0, pg1… in order of first use
    for index, (node_id, comm) in enumerate(parsed.comms):
        # schema 1.0 names the group by its backend's address, 1.1 by its name
        key = comm["group"]
        if key in backends or isinstance(key, str) or key is None:
            comm["group"] = str(backends.get(key, key if key is not None else "0"))
        else:
            comm["group"] = unnamed.setdefault(key, f"pg{len(unnamed)}")
        group = trace_groups.get(comm["group"]) or _group(comm, groups, world, path)
        trace_groups[group.id] = group
        step = nodes.step_of(node_id)
        events.append(
            CollectiveEvent(
                id=index,
                op=comm["op"],
                nbytes=comm["nbytes"],
                group=group.id,
                dtype=comm["dtype"],
                stream=f"nccl:{group.id}",
                iteration=steps.index(step) if step is not None else 0,
                name=comm["name"],
                root=_global_root(comm["root"], group),
            )
        )
    return RankPart(path, world, RankTrace(parsed.rank, tuple(events)), tuple(trace_groups.values()))


def _global_root(root: int | None, group: ProcessGroup) -> int | None:
    """PyTorch records the root as a rank of the group; the trace wants the global rank."""
    return group.ranks[root] if root is not None and 0 <= root < len(group.ranks) else None


def _group(comm: dict, configs: dict[str, dict], world: int, path: str) -> ProcessGroup:
    config = configs.get(comm["group"], {})
    ranks = _of(config, "ranks", list)
    size = _int(config.get("group_size")) or comm["group_size"] or world
    if not ranks and comm["rank_start"] is not None and comm["rank_stride"]:
        ranks = [comm["rank_start"] + i * comm["rank_stride"] for i in range(size)]
    if not ranks and size == world:
        ranks = list(range(world))
    if not ranks or not all(isinstance(r, int) for r in ranks):
        raise TraceError(f"the ranks of group {comm['group']!r} are not recorded", path)
    name = config.get("pg_desc") or comm["group_desc"]
    return ProcessGroup(comm["group"], tuple(ranks), name=name if isinstance(name, str) else None)


def _comm(node: dict) -> dict[str, Any] | None:
    """Name, op, size, dtype, group and ranks of one record_param_comms node; None for ``wait``."""
    attrs = {
        a["name"]: a.get("value") for a in _of(node, "attrs", list) if isinstance(a, dict) and "name" in a
    }
    if isinstance(node.get("inputs"), list):  # schema 1.0.1: plain lists, types beside them
        values, types = node["inputs"], [str(t) for t in _of(node, "input_types", list)]
        out_values = _of(node, "outputs", list)
    else:
        inputs = _of(node, "inputs", dict)
        values, types = _of(inputs, "values", list), [str(t) for t in _of(inputs, "types", list)]
        out_values = _of(_of(node, "outputs", dict), "values", list)
    position = next((i for i, v in enumerate(values) if isinstance(v, str) and _is_collective_name(v)), None)
    name = attrs.get("collective_name") or (values[position] if position is not None else None)
    if not isinstance(name, str):
        raise ValueError("no collective name")
    op = collective_op(name)
    if op is None:
        return None
    if op is Op.SENDRECV:
        raise ValueError("send/recv records no peer")
    rank_input = _int(values[position - 1]) if position else None
    if "in_msg_nelems" in attrs:
        dtype = TORCH_DTYPES.get(attrs.get("dtype"))
        in_n, out_n = int(attrs["in_msg_nelems"]), int(attrs.get("out_msg_nelems", -1))
    else:
        dtype, in_n = _tensors(values[0] if values else None, types[0] if types else "")
        _, out_n = _tensors(out_values[:1], "")
    if dtype is None:
        raise ValueError(f"unknown dtype {attrs.get('dtype') or types[:1]}")
    group = values[position - 2] if position and position >= 2 else None
    rooted = op in (Op.BROADCAST, Op.REDUCE)
    return {
        "name": name,
        "op": op,
        "dtype": dtype,
        "nbytes": message_bytes(op, in_n, out_n, dtype),
        "rank": None if rooted else rank_input,
        "root": rank_input if rooted else None,
        "group": _group_key(
            attrs.get("pg_name") or (group[0] if isinstance(group, list) and group else group)
        ),
        "group_desc": attrs.get("pg_desc"),
        "group_size": _int(attrs.get("pg_size")),
        "rank_start": _int(attrs.get("global_rank_start")),
        "rank_stride": _int(attrs.get("global_rank_stride")),
        "world": _int(values[-1]) if values else None,
        "splits": _split_ranks(values[position + 1:] if position is not None else []),
    }


def _split_ranks(values: list) -> int:
    """How many ranks an all-to-allv's split lists (the inputs after its name) cover; 0 if none."""
    return max((len(v) for v in values if isinstance(v, list) and all(_int(x) is not None for x in v)), default=0)


def _group_key(value: Any) -> str | int | None:
    """A group's name (schema 1.1) or its backend's address (1.0)."""
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _of(obj: dict, key: str, kind: type) -> Any:
    """``obj[key]`` if it is a ``kind``, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, kind) else kind()


def _is_collective_name(value: str) -> bool:
    try:
        return collective_op(value) is not None or value == "wait"
    except ValueError:
        return False


def _tensors(value: Any, type_name: str) -> tuple[str | None, int]:
    """(dtype, element count) of a tensor ``[id, storage, offset, numel, itemsize, device]`` or a nest."""
    if isinstance(value, list) and len(value) == 6 and all(isinstance(v, int) for v in value[:5]):
        match = _TENSOR_TYPE.search(type_name)
        return (_ET_DTYPES.get(match[1]) if match else None), value[3]
    if isinstance(value, list):
        results = [_tensors(v, type_name) for v in value]
        return next((d for d, _ in results if d), None), sum(n for _, n in results)
    return None, 0
