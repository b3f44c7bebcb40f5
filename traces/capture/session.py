"""The capture context manager: record a running job's collectives into one ccltwin trace.

Every rank runs the same code::

    with traces.capture.capture("job.trace.json", iterations=3, warmup=2) as cap:
        for batch in loader:
            train_step(batch)
            cap.step()                    # an iteration ends here

The first ``warmup`` iterations run unrecorded (DDP rebuilds its buckets after the first
and broadcasts them in the second). Then each rank records, for ``iterations`` iterations
(or until the block ends), what its process groups were handed, as their backends note it
whoever the caller (``dist.*``, DDP's reducer, FSDP, functional collectives): NCCL in the
profiler's ``record_param_comms`` ops, gloo in PyTorch's flight recorder
(``traces.capture.issued``); and when things ran, in the profiler: NCCL's GPU kernels or
gloo's worker spans, and the compute between them (``traces.capture.profile``). At the last
recorded iteration each rank turns its records into events (``traces.capture.timeline``),
rank 0 gathers them, checks that all ranks agree and writes one trace atomically.
Destroying the default process group inside the block ends the capture first, so a script
that tears its job down still gets its trace.

torch is imported when a capture starts, never by importing this module.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections import Counter
from dataclasses import replace
from os import PathLike
from typing import Any

from traces.capture.issued import PROFILED_BACKENDS, issued_from_comms, issued_from_entries
from traces.capture.profile import read_profile
from traces.capture.timeline import Window, assemble
from traces.errors import TraceError
from traces.merge import RankPart, merge_ranks
from traces.schema import CollectiveEvent, Event, ProcessGroup, RankTrace, Trace
from traces.trace_file import check_writable, save_trace

__all__ = ["Capture", "capture"]

SOURCE = "ccltwin capture"


def capture(path: str | PathLike[str], *, iterations: int | None = None, warmup: int = 0) -> Capture:
    """A context manager that records the job's collectives into the trace file ``path``.

    Parameters
    ----------
    path : str or PathLike
        Where rank 0 writes the trace (``.gz`` compresses).
    iterations : int, optional
        How many iterations to record; the capture ends at that ``step()``. ``None`` records
        until the block ends.
    warmup : int
        Iterations to run unrecorded first.

    Examples
    --------
    >>> cap = capture("job.trace.json", iterations=2, warmup=1)
    >>> cap.iterations, cap.warmup
    (2, 1)
    """
    return Capture(path, iterations=iterations, warmup=warmup)


class Capture:
    """Records one job's collectives on this rank; see the module docstring.

    ``trace`` holds the merged trace on rank 0 once the capture has finished.
    """

    def __init__(self, path: str | PathLike[str], *, iterations: int | None = None, warmup: int = 0):
        self.path = path
        self.iterations = iterations
        self.warmup = warmup
        self.trace: Trace | None = None
        self._steps = 0
        self._state = "idle"  # idle → waiting (warmup) → recording → finished
        self._boundaries: list[int] = []
        self._entries: list[dict[str, Any]] = []
        self._last_record = -1
        self._lost = 0
        self._start_ns = 0
        self._profiler: Any = None
        self._restore: list[tuple[Any, str, Any]] = []

    # ---- the context manager -----------------------------------------------------------

    def __enter__(self) -> Capture:
        if self._state != "idle":
            raise RuntimeError("a Capture can be entered once")
        if self.iterations is not None and self.iterations < 1:
            raise ValueError(f"iterations must be at least 1 (or None), got {self.iterations}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
        if rank == 0:
            check_writable(self.path, "trace")
        self._guard_destroy(dist)
        self._state = "waiting"
        if self.warmup == 0:
            self._start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None:
                self._abandon()
            elif self._state in ("waiting", "recording"):
                self._finish()
        finally:
            for owner, name, original in self._restore:
                setattr(owner, name, original)
            self._restore.clear()

    def step(self) -> None:
        """Mark the end of an iteration (call it on every rank at the same point)."""
        if self._state not in ("waiting", "recording"):
            return
        self._steps += 1
        if self._state == "waiting":
            if self._steps == self.warmup:
                self._start()
            return
        self._boundaries.append(time.time_ns())
        self._drain_flight_recorder()
        if self.iterations is not None and len(self._boundaries) == self.iterations:
            self._finish()

    # ---- recording -----------------------------------------------------------------------

    def _guard_destroy(self, dist: Any) -> None:
        """Finish the capture before the default process group is destroyed (its groups are needed)."""
        from torch.distributed import distributed_c10d

        original = distributed_c10d.destroy_process_group

        def destroy_process_group(group=None, *args, **kwargs):
            default = group is None or group is distributed_c10d.GroupMember.WORLD
            if default and self._state in ("waiting", "recording"):
                self._finish()
            return original(group, *args, **kwargs)

        for owner in (dist, distributed_c10d):
            self._restore.append((owner, "destroy_process_group", owner.destroy_process_group))
            owner.destroy_process_group = destroy_process_group

    def _start(self) -> None:
        import torch
        from torch.autograd.profiler import profile

        self._last_record = max((e.get("record_id", -1) for e in flight_recorder_entries()), default=-1)
        # torch.autograd.profiler rather than torch.profiler: the same Kineto profiler, without
        # torch.profiler's import of the compiler stack (seconds) when it starts
        self._profiler = profile(
            use_kineto=True,
            use_cpu=True,
            use_device="cuda" if torch.cuda.is_available() else None,
            record_shapes=True,
        )
        self._start_ns = time.time_ns()
        self._profiler.__enter__()
        self._state = "recording"

    def _drain_flight_recorder(self) -> None:
        """Keep the entries recorded since the last look, and count those the ring buffer dropped."""
        new = [e for e in flight_recorder_entries() if e.get("record_id", -1) > self._last_record]
        if not new:
            return
        new.sort(key=lambda e: e["record_id"])
        self._lost += max(new[0]["record_id"] - self._last_record - 1, 0)
        self._entries.extend(new)
        self._last_record = new[-1]["record_id"]

    def _abandon(self) -> None:
        if self._state == "recording":
            self._profiler.__exit__(None, None, None)
        self._state = "finished"

    def _finish(self) -> None:
        """Stop recording, build this rank's events, gather them on rank 0 and write the trace."""
        import torch
        import torch.distributed as dist

        if self._state == "waiting":
            self._state = "finished"
            raise TraceError(
                f"the capture ended after {self._steps} step(s), inside the {self.warmup} warmup iterations; "
                "nothing was recorded",
                self.path,
            )
        if not dist.is_initialized():
            self._abandon()
            raise TraceError("no process group was initialised during the capture; nothing to record", self.path)
        stop_ns = time.time_ns()
        try:
            self._drain_flight_recorder()
        finally:
            self._profiler.__exit__(None, None, None)
            self._state = "finished"
        rank, world = dist.get_rank(), dist.get_world_size()
        error: Exception | None = None
        try:
            part: Any = self._rank_part(stop_ns, rank, world, _process_groups())
        except Exception as err:  # every rank must reach the gather, or the others wait forever
            error = err
            part = err if isinstance(err, TraceError) else TraceError(f"rank {rank}: {err!r}", self.path)
        parts: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(part, parts, dst=0)
        if error is not None:
            raise error
        if rank != 0:
            return
        failed = [p for p in parts if isinstance(p, TraceError)]
        if failed:
            raise TraceError(f"the capture failed on another rank: {failed[0].problem}", self.path)
        self.trace = _merge(parts, self.path, self._metadata(torch.__version__, len(self._boundaries)))
        try:
            save_trace(self.trace, self.path)
        except OSError as err:
            raise TraceError(f"cannot write the trace ({err.strerror or err})", self.path) from None

    def _rank_part(self, stop_ns: int, rank: int, world: int, groups: dict[str, ProcessGroup]) -> dict[str, Any]:
        if self._lost:
            raise TraceError(
                f"rank {rank}: the flight recorder's ring buffer dropped {self._lost} collectives before "
                "they were read; set TORCH_FR_BUFFER_SIZE higher (before the process groups are made) "
                "or call step() more often",
                self.path,
            )
        skipped: Counter[str] = Counter()
        with tempfile.TemporaryDirectory(prefix="ccltwin-capture-") as folder:
            profile_path = os.path.join(folder, f"rank{rank}.json")
            self._profiler.export_chrome_trace(profile_path)
            profile = read_profile(profile_path)
        where = f"{self.path} (rank {rank})"
        recorded = [i for i in issued_from_entries(self._entries, where, skipped) if i.backend not in PROFILED_BACKENDS]
        recorded += issued_from_comms(profile.comms, where, skipped)
        issued = sorted((i for i in recorded if self._start_ns <= i.created_ns < stop_ns), key=lambda i: i.created_ns)
        if not issued and profile.calls:
            raise TraceError(
                f"rank {rank}: none of the {len(profile.calls)} c10d calls was recorded by its backend; "
                "gloo needs the flight recorder on (TORCH_FR_BUFFER_SIZE > 0)",
                self.path,
            )
        window = Window(self._start_ns, stop_ns, tuple(self._boundaries))
        events = assemble(issued, profile, groups, rank, window, skipped)
        used = {e.group for e in events if isinstance(e, CollectiveEvent)}
        return {
            "rank": rank,
            "world_size": world,
            "start_ns": self._start_ns,
            "node": socket.gethostname(),
            "events": events,
            "groups": [groups[g] for g in sorted(used)],
            "device": profile.device,
            "skipped": dict(skipped),
        }

    def _metadata(self, torch_version: str, boundaries: int) -> dict[str, Any]:
        return {
            "importer": "capture",
            "torch": torch_version,
            "warmup_iterations": self.warmup,
            "iterations_requested": self.iterations,
            "iterations_recorded": max(boundaries, 1),
            "iteration_marks": boundaries > 0,
        }


def _process_groups() -> dict[str, ProcessGroup]:
    """The job's live process groups by name, with their global ranks (as the profiler lists them)."""
    from torch.distributed import distributed_c10d

    groups = {}
    for config in distributed_c10d._get_all_pg_configs():
        desc = config.get("pg_desc")
        groups[config["pg_name"]] = ProcessGroup(
            config["pg_name"], tuple(config["ranks"]), name=None if desc in (None, "undefined") else desc
        )
    return groups


def flight_recorder_entries() -> list[dict[str, Any]]:
    """The entries now in PyTorch's flight recorder (all backends)."""
    from torch._C import _distributed_c10d as c10d

    dump = getattr(c10d, "_dump_fr_trace_json", None) or getattr(c10d, "_dump_nccl_trace_json", None)
    if dump is None:
        raise TraceError("this PyTorch has no flight recorder to dump; capture needs PyTorch >= 2.6")
    entries = json.loads(dump()).get("entries")
    return entries if isinstance(entries, list) else []


def _shifted(events: list[Event], offset_us: float) -> tuple[Event, ...]:
    def move(value: float | None) -> float | None:
        return None if value is None else value + offset_us

    return tuple(replace(e, start_us=move(e.start_us), end_us=move(e.end_us)) for e in events)


def _merge(parts: list[dict[str, Any]], path: str | PathLike[str], metadata: dict[str, Any]) -> Trace:
    """One validated trace from the ranks' parts, times in µs since the earliest rank started."""
    origin = min(p["start_ns"] for p in parts)
    skipped: Counter[str] = Counter()
    for part in parts:
        skipped.update(part["skipped"])
    untimed = sum(1 for p in parts for e in p["events"] if e.start_us is None)
    metadata = {**metadata, "device": sorted({p["device"] for p in parts}), "untimed_events": untimed}
    if skipped:
        metadata["not_captured"] = dict(skipped)
    ranks = [
        RankPart(
            f"{path} (rank {p['rank']})",
            p["world_size"],
            RankTrace(p["rank"], _shifted(p["events"], (p["start_ns"] - origin) / 1000), node=p["node"]),
            tuple(p["groups"]),
        )
        for p in parts
    ]
    return merge_ranks(ranks, SOURCE, metadata)
