"""What one rank's profiler saw during a capture: when the backend's work ran, and the compute around it.

torch.profiler writes one Kineto trace per rank; three kinds of record in it matter here:

- **work**: the span in which the backend ran a collective. gloo runs it on a worker thread
  (``pt_gloo_runloop``) inside a ``gloo:<op>`` annotation whose ``Input Dims`` give its size:
  CPU wall time of the work. NCCL runs it as a GPU kernel (``ncclDevKernel_*``) whose args,
  or those of the ``record_param_comms`` op that launched it, give op, size and group.
- **comms**: the ``record_param_comms`` ops NCCL records for each call it is given (op, sizes,
  dtype, group); see ``traces.capture.issued``.
- **calls**: the ``c10d::<op>`` dispatcher ops on the threads that issue collectives. They
  say what the job asked for, where a backend runs something else (gloo runs a
  reduce-scatter as an all-reduce).
- **compute**: GPU kernels, memcpys and memsets when the job used a GPU; otherwise the
  top-level CPU ops of every thread that is not a backend worker.

All times become wall-clock ns (``baseTimeNanoseconds`` + ``ts``), the clock of
``time.time_ns()`` and of the flight recorder's ``time_created_ns``. This module reads a
file and imports no torch.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from traces.capture.issued import op_of
from traces.errors import TraceError
from traces.json_stream import stream_object
from traces.task import Op

__all__ = ["Profile", "Span", "read_profile"]

_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_")
_GPU_WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
_COMM_OPS = ("c10d::", "_c10d_functional::", "record_param_comms", "nccl:", "gloo:")


@dataclass(frozen=True, slots=True)
class Span:
    """Something that ran from ``start_ns`` to ``end_ns`` (wall clock) on ``stream``."""

    start_ns: int
    end_ns: int
    stream: str
    name: str
    op: Op | None = None
    """For work and calls: the collective it is, if ccltwin models it."""
    in_numel: int | None = None
    """For work: input elements, to match it with its flight-recorder entry."""
    group: str | None = None
    """For NCCL work: the process-group name its kernel records (gloo records none)."""
    launch_ns: int | None = None
    """For GPU work: when the CPU launched it."""


@dataclass
class Profile:
    """What a capture uses of one rank's Kineto trace, each list in start order."""

    work: list[Span] = field(default_factory=list)
    comms: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """The ``record_param_comms`` ops: (wall-clock start ns, args)."""
    calls: list[Span] = field(default_factory=list)
    compute: list[Span] = field(default_factory=list)
    device: str = "cpu"
    """``"cuda"`` when compute comes from GPU activity, else ``"cpu"``."""


class _Collector:
    """Gathers the events a capture needs while the profiler's file streams past.

    Times are kept in ns on the profiler's clock (``ts``) until ``base_ns`` is known, which
    ``spans`` then adds.
    """

    def __init__(self, path: str):
        self.path = path
        self.gloo: list[Span] = []
        self.nccl: list[tuple[Span, dict[str, Any] | None, int | None]] = []  # kernel, comm args, correlation
        self.gpu: list[tuple[Span, int | None]] = []
        self.launches: dict[int, tuple[Any, int]] = {}  # correlation → (tid, ns)
        self.comm_args: dict[Any, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)  # tid → spans
        self.calls: list[Span] = []
        self.cpu: dict[Any, list[tuple[int, int, str]]] = defaultdict(list)  # tid → (start, end, name)

    def _ns(self, event: dict, key: str) -> int:
        value = event.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise TraceError(f"profiler event {event.get('name')!r} has no numeric {key!r}", self.path)
        return round(value * 1000)

    def take(self, event: Any) -> None:
        if not isinstance(event, dict) or event.get("ph") != "X" or not isinstance(event.get("name"), str):
            return
        cat, name, tid = event.get("cat"), event["name"], event.get("tid")
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        start = self._ns(event, "ts")
        end = start + self._ns(event, "dur")
        correlation = args.get("correlation") if isinstance(args.get("correlation"), int) else None
        if cat in _GPU_WORK:
            stream = f"cuda:{args.get('stream', '?')}"
            if cat == "kernel" and _NCCL_KERNEL.match(name):
                comm = args if "Collective name" in args else None
                self.nccl.append((Span(start, end, stream, name), comm, correlation))
            else:
                self.gpu.append((Span(start, end, stream, name), correlation))
        elif cat in ("cuda_runtime", "cuda_driver") and correlation is not None:
            self.launches[correlation] = (tid, start)
        elif cat == "user_annotation" and name.startswith("gloo:"):
            self.gloo.append(Span(start, end, f"thread {tid}", name, op_of(name), _dims_numel(args)))
        elif cat == "cpu_op":
            if name == "record_param_comms" and "Collective name" in args:
                self.comm_args[tid].append((start, end, args))
            if name.startswith("c10d::"):
                self.calls.append(Span(start, end, f"thread {tid}", name, op_of(name)))
            self.cpu[tid].append((start, end, name))

    def nccl_work(self) -> list[Span]:
        """NCCL kernels with op, size and group from their own args or their launching op's."""
        for spans in self.comm_args.values():
            spans.sort(key=lambda span: span[0])
        work = []
        for kernel, comm, correlation in self.nccl:
            launch = self.launches.get(correlation) if correlation is not None else None
            if comm is None and launch is not None:
                comm = _containing(self.comm_args.get(launch[0], []), launch[1])
            if comm is None:
                continue
            numel, group = comm.get("In msg nelems"), comm.get("Process Group Name")
            work.append(
                replace(
                    kernel,
                    op=op_of(str(comm.get("Collective name"))),
                    in_numel=numel if isinstance(numel, int) else None,
                    group=None if group is None else str(group),
                    launch_ns=launch[1] if launch else None,
                )
            )
        return work

    def gpu_compute(self) -> list[Span]:
        out = []
        for span, correlation in self.gpu:
            launch = self.launches.get(correlation) if correlation is not None else None
            out.append(replace(span, launch_ns=launch[1] if launch else None))
        return out

    def cpu_compute(self) -> list[Span]:
        """Top-level CPU ops of the threads that are not backend workers, communication ops left out."""
        workers = {span.stream for span in self.gloo}
        out = []
        for tid, ops in self.cpu.items():
            if f"thread {tid}" in workers:
                continue
            ops.sort(key=lambda op: (op[0], -op[1]))
            top_end = -1
            for start, end, name in ops:
                if start < top_end:
                    continue  # nested in the previous top-level op
                top_end = end
                if not name.startswith(_COMM_OPS):
                    out.append(Span(start, end, f"cpu:{tid}", name))
        return out


def _shifted(spans: list[Span], base_ns: int) -> list[Span]:
    """Spans moved from the profiler's clock to the wall clock, in start order."""
    return sorted(
        (
            replace(
                span,
                start_ns=span.start_ns + base_ns,
                end_ns=span.end_ns + base_ns,
                launch_ns=None if span.launch_ns is None else span.launch_ns + base_ns,
            )
            for span in spans
        ),
        key=lambda span: span.start_ns,
    )


def _dims_numel(args: dict[str, Any]) -> int:
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return 0
    return sum(math.prod(shape) for shape in dims if isinstance(shape, list) and all(isinstance(d, int) for d in shape))


def _containing(spans: list[tuple[int, int, dict[str, Any]]], ns: int) -> dict[str, Any] | None:
    position = bisect.bisect_right(spans, ns, key=lambda span: span[0]) - 1
    if position >= 0 and spans[position][1] >= ns:
        return spans[position][2]
    return None


def read_profile(path: str) -> Profile:
    """Read the Kineto trace that the profiler exported for one rank during a capture."""
    collector = _Collector(path)
    others = stream_object(path, "traceEvents", collector.take)
    base = others.get("baseTimeNanoseconds")
    if not isinstance(base, int):
        raise TraceError("no baseTimeNanoseconds: this profiler's times cannot be put on the wall clock", path)
    gpu = collector.gpu_compute()
    return Profile(
        work=_shifted(collector.gloo + collector.nccl_work(), base),
        comms=sorted((start + base, args) for spans in collector.comm_args.values() for start, _, args in spans),
        calls=_shifted(collector.calls, base),
        compute=_shifted(gpu or collector.cpu_compute(), base),
        device="cuda" if gpu or collector.nccl else "cpu",
    )
