"""Import PyTorch profiler (Kineto) traces: one JSON file per rank, merged into one Trace.

What is read from each rank's ``traceEvents`` (streamed, see ``traces.json_stream``):

- NCCL kernels (``ncclKernel_*``/``ncclDevKernel_*``) become collectives, timed on the GPU.
  Op, size, dtype and group come from the kernel's own args (``Collective name``,
  ``In/Out msg nelems``, ``dtype``, ``Process Group Name/Ranks``; PyTorch ≥ 2.1), else from
  the ``record_param_comms`` op that launched it, else (PyTorch 1.13–2.0, recorded with
  ``record_shapes``) from the ``nccl:all_reduce``-style annotation around the launch
  (``Input Dims``, ``Input type``) and its ``c10d::*`` op (output dims of all-gathers and
  all-to-alls), in the job's default group (or, where a gather's sizes show fewer ranks, the
  block of consecutive ranks around this one, with a warning); else op and dtype from the kernel name with an
  unknown size.  A kernel launched inside ``coalesced`` runs the calls recorded before it
  on its thread since the previous NCCL launch: one collective of their summed size.
  An all-to-all whose output and input differ (all-to-allv) counts the larger of the two.
- Other kernels, memcpys and memsets become compute phases: consecutive work on one stream,
  cut at every collective and iteration boundary, with its busy time as ``duration_us``.
- ``ProfilerStep#N`` annotations number the iterations (by each kernel's CPU launch time).
- ``distributedInfo`` gives the rank, world size, NCCL version and process groups.

Dependencies keep the order that was observed: an event waits for the latest event of each
other stream of its rank that had ended before it started.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from traces.errors import CcltwinWarning, TraceError
from traces.json_stream import stream_object
from traces.kineto_calls import Spans, annotation_args, coalesce
from traces.kineto_compute import COMPUTE_OPS, Work, kernel_category, op_work
from traces.merge import RankPart, merge_ranks
from traces.schema import MAX_WORLD_SIZE, CollectiveEvent, ComputeEvent, Event, ProcessGroup, RankTrace, Trace
from traces.task import DTYPE_BYTES, Op, parse_op

__all__ = ["read_kineto"]

# torch ScalarType names (Kineto args, flight recorder) and NCCL kernel-name types → Task dtypes
TORCH_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Byte": "uint8",
    "Char": "int8",
    "Bool": "uint8",
    "Int": "int32",
    "Long": "int64",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Float8_e4m3fn": "fp8_e4m3",
    "Float8_e5m2": "fp8_e5m2",
}
_KERNEL_DTYPES = {
    "float": "float32",
    "f32": "float32",
    "double": "float64",
    "f64": "float64",
    "half": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "__nv_bfloat16": "bfloat16",
    "int8_t": "int8",
    "i8": "int8",
    "uint8_t": "uint8",
    "u8": "uint8",
    "int32_t": "int32",
    "i32": "int32",
    "uint32_t": "uint32",
    "u32": "uint32",
    "int64_t": "int64",
    "i64": "int64",
    "uint64_t": "uint64",
    "u64": "uint64",
    "f8e4m3": "fp8_e4m3",
    "__nv_fp8_e4m3": "fp8_e4m3",
    "f8e5m2": "fp8_e5m2",
    "__nv_fp8_e5m2": "fp8_e5m2",
}
# Collective names PyTorch records that are not NCCL collectives of their own
_NOT_COLLECTIVES = {"wait", "init", "coalesced", "gather", "scatter", ""}
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GPU_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
_LAUNCHES = {"cuda_runtime", "cuda_driver"}  # cudaLaunchKernel, and cuLaunchKernel (cuBLAS/CUTLASS kernels)
_READ = _GPU_WORK | _LAUNCHES | {"cpu_op", "user_annotation"}  # the event categories the import uses


def collective_op(name: str) -> Op | None:
    """The Op of a PyTorch collective name (``allreduce``, ``_allgather_base``...), None if not one."""
    name = name.removesuffix("_coalesced").removesuffix("_into_tensor")
    name = name.removesuffix("v") if name in ("all_to_allv", "alltoallv") else name  # sizes per peer
    if name in _NOT_COLLECTIVES:
        return None
    return Op.ALLREDUCE if name == "barrier" else parse_op(name)


def message_bytes(op: Op, in_nelems: int, out_nelems: int, dtype: str) -> int:
    """nccl-tests' size from PyTorch's element counts: output for AllGather, input otherwise
    (the larger for all-to-allv, whose input and output differ)."""
    nelems = out_nelems if op is Op.ALLGATHER else in_nelems
    if op in (Op.SENDRECV, Op.ALLTOALL):
        nelems = max(in_nelems, out_nelems)
    return nelems * DTYPE_BYTES[dtype]


@dataclass
class _Gpu:
    """One GPU activity, as much of it as the import needs."""

    ts: float
    dur: float
    stream: str
    correlation: int | None
    nccl_name: str | None = None  # the kernel name, for NCCL kernels only
    comm: dict[str, Any] | None = None  # collective args, for NCCL kernels
    launch: float = 0.0  # CPU time of the launch (the GPU time when unknown)
    category: str | None = None  # what the kernel's name says it is (compute kernels)
    op: tuple[Any, ...] | None = None  # (thread, start, name, CPU µs) of the GEMM/attention op that launched it
    work: Work | None = None  # that op's work


@dataclass
class _RankFile:
    """What one Kineto file contributes, gathered while its events stream past."""

    path: str
    gpu: list[_Gpu] = field(default_factory=list)
    launches: dict[int, tuple[Any, float]] = field(default_factory=dict)  # correlation → (tid, ts)
    comm_ops: Spans = field(default_factory=Spans)  # record_param_comms with a Collective name: args
    annotations: Spans = field(default_factory=Spans)  # nccl:* annotations: (name, args, start)
    c10d_ops: Spans = field(default_factory=Spans)  # c10d::* ops: (name, args)
    compute_ops: Spans = field(default_factory=Spans)  # GEMM and attention ops: (tid, start, name, µs, args)
    steps: list[tuple[float, int]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def take(self, event: Any) -> None:
        if not isinstance(event, dict) or event.get("cat") not in _READ or not isinstance(event.get("name"), str):
            return  # most events (flows, instant events, Python functions) are not read: drop them first
        cat, name, args, tid = event.get("cat"), event["name"], event.get("args") or {}, event.get("tid")
        if not isinstance(cat, str) or not isinstance(args, dict):
            return
        tid = tid if isinstance(tid, int | str) else None
        correlation = args.get("correlation") if isinstance(args.get("correlation"), int) else None
        if cat in _GPU_WORK:
            nccl = cat == "kernel" and _NCCL_KERNEL.match(name) is not None
            self.gpu.append(
                _Gpu(
                    _num(event, "ts", self.path),
                    _num(event, "dur", self.path),
                    str(args.get("stream", "?")),
                    correlation,
                    name if nccl else None,
                    args if nccl and "Collective name" in args else None,
                    category=None if nccl else kernel_category(name, cat),
                )
            )
        elif cat in _LAUNCHES and correlation is not None:
            self.launches[correlation] = (tid, _num(event, "ts", self.path))
        elif cat == "cpu_op" and name == "record_param_comms" and "Collective name" in args:
            self.comm_ops.add(tid, *self._span(event), args)
        elif cat == "cpu_op" and name in COMPUTE_OPS:
            start, end = self._span(event)
            self.compute_ops.add(tid, start, end, (tid, start, name, end - start, args))
        elif cat == "cpu_op" and name.startswith("c10d::"):
            self.c10d_ops.add(tid, *self._span(event), (name, args))
        elif cat == "user_annotation" and name.startswith("nccl:"):
            start, end = self._span(event)
            self.annotations.add(tid, start, end, (name, args, start))
        elif cat == "user_annotation" and (match := _STEP.match(name)):
            self.steps.append((_num(event, "ts", self.path), int(match[1])))

    def _span(self, event: dict) -> tuple[float, float]:
        start = _num(event, "ts", self.path)
        return start, start + _num(event, "dur", self.path)

    def resolve_launches(self, world: int) -> None:
        """Give each GPU activity its CPU launch time and each NCCL kernel its collective args."""
        previous: dict[Any, float] = {}  # thread → launch time of its previous NCCL kernel
        for gpu in sorted(self.gpu, key=lambda g: self.launches.get(g.correlation, (None, g.ts))[1]):
            tid_ts = self.launches.get(gpu.correlation) if gpu.correlation is not None else None
            gpu.launch = tid_ts[1] if tid_ts else gpu.ts
            if gpu.nccl_name and tid_ts:
                if gpu.comm is None:
                    gpu.comm = self._call_at(*tid_ts, previous.get(tid_ts[0], -math.inf), world)
                previous[tid_ts[0]] = tid_ts[1]
            elif tid_ts and (op := self.compute_ops.holding(*tid_ts)) is not None:
                gpu.op, gpu.work = op[:4], op_work(op[2], op[4])

    def _call_at(self, tid: Any, ts: float, since: float, world: int) -> dict[str, Any] | None:
        """The args of the call that launched an NCCL kernel at ``ts`` on thread ``tid``: its
        ``record_param_comms`` op, else its ``nccl:*`` annotation; a coalesced call sums the calls
        recorded after ``since`` (the previous NCCL launch on the thread)."""
        args = self.comm_ops.holding(tid, ts)
        members = self.comm_ops.between(tid, since, ts)
        if args is None:
            annotation = self.annotations.holding(tid, ts)
            if annotation is None:
                return None
            args = self._annotated(tid, annotation, world)
            members = [self._annotated(tid, a, world) for a in self.annotations.between(tid, since, ts)]
        if args is None or args.get("Collective name") != "coalesced":
            return args
        merged = coalesce([m for m in members if m is not None and m.get("Collective name") not in _NOT_COLLECTIVES])
        if isinstance(merged, str):
            self.skipped[merged] += 1
            return None
        return merged

    def _annotated(self, tid: Any, annotation: tuple[str, dict, float], world: int) -> dict[str, Any] | None:
        name, args, start = annotation
        return annotation_args(name, args, self.c10d_ops.holding(tid, start), world)


def _num(event: dict, key: str, path: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise TraceError(f"event {event.get('name')!r} has no numeric {key!r}", path)
    return float(value)


def read_kineto(paths: Sequence[str | PathLike[str]]) -> Trace:
    """Import one Kineto trace per rank (any subset of the ranks) into one validated Trace."""
    skipped: Counter[str] = Counter()
    metadata: dict[str, Any] = {"importer": "kineto", "files": [str(p) for p in paths]}
    parts = []
    for path in map(str, paths):
        part, info = _read_rank(path, skipped)
        parts.append(part)
        for key, value in info.items():
            metadata.setdefault(key, value)
    if skipped:
        metadata["not_imported"] = dict(skipped)
    return merge_ranks(parts, "kineto", metadata)


def _read_rank(path: str, skipped: Counter[str]) -> tuple[RankPart, dict[str, Any]]:
    state = _RankFile(path)
    others = stream_object(path, "traceEvents", state.take)
    info = others.get("distributedInfo")
    if not (
        isinstance(info, dict)
        and isinstance(info.get("rank"), int)
        and isinstance(info.get("world_size"), int)
    ):
        raise TraceError("no distributedInfo with rank and world_size (not a distributed job's trace?)", path)
    rank, world = info["rank"], info["world_size"]
    if not 1 <= world <= MAX_WORLD_SIZE:
        raise TraceError(f"implausible world size {world}", path)
    groups = _configured_groups(info, world)
    state.resolve_launches(world)
    skipped.update(state.skipped)
    steps = sorted(state.steps)
    events = _events(state.gpu, [ts for ts, _ in steps], groups, rank, world, path, skipped)
    devices = others.get("deviceProperties") if isinstance(others.get("deviceProperties"), list) else []
    meta = {
        "nccl_version": info.get("nccl_version"),
        "devices": sorted(
            {d["name"] for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)}
        ),
        "profiler_steps": [number for _, number in steps],
    }
    return RankPart(path, world, RankTrace(rank, tuple(events)), tuple(groups.values())), meta


def _configured_groups(info: dict, world: int) -> dict[str, ProcessGroup]:
    groups = {}
    for config in info.get("pg_config") or []:
        if isinstance(config, dict) and isinstance(config.get("pg_name"), str):
            ranks = config.get("ranks") or list(range(world))
            if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
                groups[config["pg_name"]] = ProcessGroup(
                    config["pg_name"], tuple(ranks), name=config.get("pg_desc")
                )
    return groups


def _ranks_of(args: dict[str, Any], world: int) -> tuple[int, ...] | None:
    text = args.get("Process Group Ranks")
    if isinstance(text, str):
        try:
            ranks = json.loads(text)
        except json.JSONDecodeError:
            ranks = None
        if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
            return tuple(ranks)
    size, start, stride = (
        args.get("Group size"),
        args.get("Global rank start"),
        args.get("Global rank stride"),
    )
    if all(isinstance(v, int) for v in (size, start, stride)) and 0 < size <= world:
        return tuple(start + i * stride for i in range(size))
    if size == world:
        return tuple(range(world))
    return None


def _world_group(groups: dict[str, ProcessGroup], world: int) -> str:
    """The group of all ranks; PyTorch's default group, assumed when a kernel names none."""
    for group in groups.values():
        if len(group.ranks) == world:
            return group.id
    groups["world"] = ProcessGroup("world", tuple(range(world)), name="assumed: all ranks")
    return "world"


def _from_kernel_name(gpu: _Gpu, groups: dict[str, ProcessGroup], world: int, skipped: Counter[str]):
    """Op and dtype from ``ncclKernel_AllReduce_RING_LL_Sum_float``; size unknown, group assumed."""
    kind = _NCCL_KERNEL.match(gpu.nccl_name)[1]
    try:
        op = parse_op(kind)
    except ValueError:
        skipped[f"NCCL kernels of unknown op ({kind})"] += 1
        return None
    if op is Op.SENDRECV:
        skipped["send/recv without a recorded peer"] += 1
        return None
    dtype = next(
        (_KERNEL_DTYPES[t] for t in re.split(r"[_(,]", gpu.nccl_name) if t in _KERNEL_DTYPES), "int8"
    )
    return op, None, dtype, _world_group(groups, world)


def _assumed_group(op: Op, in_n: int, out_n: int, rank: int, world: int, groups: dict[str, ProcessGroup],
                   path: str) -> str:
    """The group of a call whose profile names none: all ranks, unless a gather's sizes show it has g
    ranks (out = g × in); then the block of g consecutive ranks holding this rank (how Megatron, FSDP's
    hybrid shard and torchrun lay out node-local groups), said once per file as a warning."""
    big, small = (out_n, in_n) if op is Op.ALLGATHER else (in_n, out_n)
    size = big // small if op in (Op.ALLGATHER, Op.REDUCESCATTER) and small and big % small == 0 else world
    if size == world or world % size:
        return _world_group(groups, world)
    first = rank - rank % size
    group_id = f"assumed:{first}-{first + size - 1}"
    if group_id not in groups:
        groups[group_id] = ProcessGroup(group_id, tuple(range(first, first + size)),
                                        name=f"assumed: the {size} ranks around rank {rank} (sizes show {size})")
        warnings.warn(CcltwinWarning(
            f"{path}: {op.value} with {big} elements in all and {small} per rank runs on {size} of the job's "
            f"{world} ranks; the profile names no groups, so ranks {first}-{first + size - 1} are assumed"),
            stacklevel=2)
    return group_id


def _collective(gpu: _Gpu, groups: dict[str, ProcessGroup], rank: int, world: int, path: str,
                skipped: Counter[str]):
    """(op, nbytes, dtype, group id) of an NCCL kernel; None when it is not a collective ccltwin models."""
    args = gpu.comm
    if args is None:
        return _from_kernel_name(gpu, groups, world, skipped)
    where = f"NCCL kernel at {gpu.ts} µs"
    name = str(args.get("Collective name"))
    try:
        op = collective_op(name)
    except ValueError:
        raise TraceError(f"{where}: unknown collective {name!r}", path) from None
    if op is None or op is Op.SENDRECV:
        skipped["send/recv without a recorded peer" if op else f"{name or 'unnamed'} (not a collective)"] += 1
        return None
    dtype = TORCH_DTYPES.get(str(args.get("dtype")))
    if dtype is None:
        raise TraceError(f"{where}: unknown dtype {args.get('dtype')!r}", path)
    in_n, out_n = args.get("In msg nelems"), args.get("Out msg nelems")
    if not (isinstance(in_n, int) and isinstance(out_n, int)) or min(in_n, out_n) < 0:
        raise TraceError(f"{where}: bad message size {in_n!r}/{out_n!r}", path)
    if "Process Group Name" not in args and "Group size" not in args:
        group_id = _assumed_group(op, in_n, out_n, rank, world, groups, path)
        return op, message_bytes(op, in_n, out_n, dtype), dtype, group_id
    group_id = str(args.get("Process Group Name", "0"))
    if group_id not in groups:
        ranks = _ranks_of(args, world)
        if ranks is None:
            raise TraceError(f"{where}: the ranks of group {group_id!r} are not recorded", path)
        groups[group_id] = ProcessGroup(group_id, ranks, name=args.get("Process Group Description"))
    return op, message_bytes(op, in_n, out_n, dtype), dtype, group_id


def _events(
    gpu: list[_Gpu],
    step_starts: list[float],
    groups: dict[str, ProcessGroup],
    rank: int,
    world: int,
    path: str,
    skipped: Counter[str],
) -> list[Event]:
    """Collectives and compute phases in start order, with observed cross-stream dependencies."""
    items: list[tuple[float, float, str, tuple]] = []  # (start, end, stream, payload)
    phases: dict[str, list] = {}  # stream → [start, end, busy, count, iteration, key, first work] of the open phase

    def close(stream: str) -> None:
        start, end, busy, count, it, _, first = phases.pop(stream)
        items.append((start, end, stream, ("compute", busy, count, it, first)))

    for work in sorted(gpu, key=lambda g: (g.ts, g.dur)):
        it = max(bisect.bisect_right(step_starts, work.launch) - 1, 0)
        if work.nccl_name:
            for stream in list(phases):
                close(stream)
            if described := _collective(work, groups, rank, world, path, skipped):
                items.append(
                    (work.ts, work.ts + work.dur, work.stream, ("collective", *described, it, work.nccl_name))
                )
            continue
        # one phase per GEMM/attention op; consecutive kernels of one category (or none known) together
        key = ("op", work.op[:2]) if work.work else ("category", work.category)
        phase = phases.get(work.stream)
        if phase is not None and (phase[4] != it or phase[5] != key):
            close(work.stream)
            phase = None
        if phase is None:
            phases[work.stream] = [work.ts, work.ts + work.dur, work.dur, 1, it, key, work]
        else:
            phase[1], phase[2], phase[3] = (
                max(phase[1], work.ts + work.dur),
                phase[2] + work.dur,
                phase[3] + 1,
            )
    for stream in list(phases):
        close(stream)
    items.sort(key=lambda item: (item[0], item[1]))
    return _with_dependencies(items)


def _with_dependencies(items: list[tuple[float, float, str, Any]]) -> list[Event]:
    events: list[Event] = []
    ends: dict[str, list[tuple[float, int]]] = defaultdict(list)  # stream → (end, id), in start order
    waited: dict[tuple[str, str], int] = {}  # (stream, other stream) → newest id already waited for
    for index, (start, end, stream, payload) in enumerate(items):
        after = []
        for other, finished in ends.items():
            if other == stream:
                continue
            position = bisect.bisect_right(finished, (start, float("inf"))) - 1
            if position >= 0:
                dep = finished[position][1]
                if dep > waited.get((stream, other), -1):
                    after.append(dep)
                    waited[(stream, other)] = dep
        times = {"start_us": start, "end_us": end, "after": tuple(sorted(after))}
        if payload[0] == "collective":
            _, op, nbytes, dtype, group, it, name = payload
            events.append(CollectiveEvent(index, op, nbytes, group, dtype, stream, it, name=name, **times))
        else:
            _, busy, count, it, first = payload
            events.append(_compute(index, stream, it, busy, count, first, times))
        ends[stream].append((end, index))
    return events


def _compute(index: int, stream: str, it: int, busy: float, count: int, first: _Gpu, times: dict) -> ComputeEvent:
    """A compute phase: one GEMM/attention op's kernels (with its shape, dtype, FLOPs and CPU time),
    or a run of kernels of one category."""
    if first.work is not None:
        work, (_, _, name, host_us) = first.work, first.op
        return ComputeEvent(index, name, stream, it, busy, flops=work.flops, category=work.category,
                            shape=work.shape, dtype=work.dtype, kernels=count, host_us=host_us, **times)
    return ComputeEvent(index, f"{count} GPU ops", stream, it, busy, category=first.category, kernels=count,
                        **times)
