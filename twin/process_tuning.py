"""One set of per-process NCCL knobs for a whole workload: threads, buffer sizes, transport.

NCCL reads ``NCCL_NTHREADS``, ``NCCL_LL128_NTHREADS``, the three buffer sizes and the transport
switches once per process (research/nccl-mechanisms.md §2), so one value serves every collective
of the job: a 2 MiB Simple chunk that suits the 256 MiB gradient all-reduce also applies to the
1 MiB all-gathers. The twin weighs them all.

Under a candidate setting each task runs as the live tuner leaves it: per call the tuner picks
the subspace (one with the setting's transport, or one the transport does not apply to) and the
channel count (the plan's best for that subspace, or NCCL's own); threads and chunk are what NCCL
derives from the setting (``twin.nccl_model``: ``maxThreads`` from ``NCCL_NTHREADS``, trimmed for
small messages; the chunk from the buffer size). The cost of a setting is the predicted
communication time per iteration, Σ calls per iteration × time. Coordinate descent starts from
NCCL's defaults, and a knob leaves its default only where that saves at least ``MIN_GAIN`` of
the cost, so the environment carries only changes that matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tuner.config import ConfigError, Proto, Subspace, Transport
from tuner.plan import PlanEntry
from tuner.process_knobs import NCCL_DEFAULT_BUFFSIZE, ProcessSettings
from twin.model.schedule import schedule_for
from twin.nccl_model import default_resources
from twin.replay.comms import Communicator

__all__ = ["CANDIDATES", "MIN_GAIN", "ProcessTuning", "tune_process_settings"]

MIN_GAIN = 0.005
"""Least share of the per-iteration time a knob must save to leave NCCL's default."""

CANDIDATES: dict[str, tuple[int | None, ...]] = {
    "nthreads": (None, *range(64, 513, 32)),
    "ll128_nthreads": (None, *range(160, 641, 32)),
    "buffsize": (None, *(1 << k for k in range(18, 25) if 1 << k != NCCL_DEFAULT_BUFFSIZE[Proto.SIMPLE])),
    "ll_buffsize": (None, *(1 << k for k in range(16, 22) if 1 << k != NCCL_DEFAULT_BUFFSIZE[Proto.LL])),
    "ll128_buffsize": (None, *(int(NCCL_DEFAULT_BUFFSIZE[Proto.LL128] * 2.0**k) for k in (-3, -2, -1, 1))),
}
"""Values tried per knob; ``None`` is NCCL's default (LL128 buffers stay whole 1,920-byte slices)."""

KNOBS_OF_PROTO = {Proto.SIMPLE: ("nthreads", "buffsize"), Proto.LL: ("nthreads", "ll_buffsize"),
                  Proto.LL128: ("ll128_nthreads", "ll128_buffsize")}
_INFO_FIELD = {"nthreads": "nthreads_env", "ll128_nthreads": "ll128_nthreads_env", "buffsize": "buffsize",
               "ll_buffsize": "ll_buffsize", "ll128_buffsize": "ll128_buffsize"}


@dataclass(frozen=True)
class ProcessTuning:
    """The chosen settings and the predicted communication time per iteration (µs) three ways."""

    settings: ProcessSettings
    default_us: float
    """NCCL alone: its default choice for every call, default environment."""
    per_call_us: float
    """The live tuner choosing subspace and channels per call, default environment."""
    tuned_us: float
    """The same with ``settings`` in the environment."""


@dataclass(frozen=True)
class _Task:
    weight: float
    default_us: float
    tables: dict[Subspace, np.ndarray]
    """Per subspace, time over (thread knob candidate, buffer knob candidate)."""


def _env_infos(comm: Communicator) -> dict[tuple[str, str], list[list]]:
    """``NcclCommInfo`` of the communicator under every (thread, buffer) candidate pair."""
    out = {}
    for thread_knob, buffer_knob in KNOBS_OF_PROTO.values():
        out[(thread_knob, buffer_knob)] = [
            [replace(comm.nccl, **{_INFO_FIELD[thread_knob]: nt_value},
                     **({} if buffer_value is None else {_INFO_FIELD[buffer_knob]: buffer_value}))
             for buffer_value in CANDIDATES[buffer_knob]]
            for nt_value in CANDIDATES[thread_knob]]
    return out


def _tables(comm: Communicator, infos: dict[tuple[str, str], list[list]], entry: PlanEntry
            ) -> dict[Subspace, np.ndarray]:
    op, nbytes = entry.task.op, entry.task.nbytes
    tables = {}
    for ranked in entry.ranked:
        s = ranked.subspace
        thread_knob, buffer_knob = KNOBS_OF_PROTO[s.proto]
        shape = (len(CANDIDATES[thread_knob]), len(CANDIDATES[buffer_knob]))
        nthreads, chunks = np.empty(shape), np.empty(shape)
        try:
            for i, row in enumerate(infos[(thread_knob, buffer_knob)]):
                for j, info in enumerate(row):
                    nc, nthreads[i, j], chunks[i, j] = default_resources(info, op, s.algo, s.proto, nbytes)
                    if i == j == 0:
                        nccl_channels = nc
        except ConfigError:  # NCCL's cost model has no such implementation: the tuner cannot pick it
            continue
        geom = comm.geometry(s.transport)
        times = np.min([np.broadcast_to(
            schedule_for(geom, op, nbytes, s.algo, s.proto, nc, nthreads, chunks,
                         gpus_per_process=comm.gpus_per_process).time_us(), shape)
            for nc in {ranked.config.nchannels, nccl_channels}], axis=0)
        tables[s] = np.where(np.isfinite(times), times, np.inf)  # a point the twin cannot time is never picked
    return tables


def _task_time(task: _Task, state: dict) -> float:
    transport = state["transport"]
    best = math.inf
    for s, table in task.tables.items():
        applies = s.transport is transport or (
            s.transport is Transport.P2P and Subspace(s.algo, s.proto, transport) not in task.tables)
        if applies:
            thread_knob, buffer_knob = KNOBS_OF_PROTO[s.proto]
            best = min(best, float(table[state[thread_knob], state[buffer_knob]]))
    return task.default_us if best == math.inf else best


def _cost(tasks: list[_Task], state: dict) -> float:
    return sum(t.weight * _task_time(t, state) for t in tasks)


def tune_process_settings(items: list[tuple[Communicator, PlanEntry]], *, min_gain: float = MIN_GAIN
                          ) -> ProcessTuning:
    """Choose the per-process settings for tasks ranked on their communicators (``twin.rank``)."""
    infos: dict[int, dict] = {}  # by id of the communicator's NcclCommInfo: calls of one group share it
    tasks = []
    for comm, entry in items:
        if id(comm.nccl) not in infos:
            infos[id(comm.nccl)] = _env_infos(comm)
        tasks.append(_Task(entry.calls_per_iteration, entry.default.time_us,
                           _tables(comm, infos[id(comm.nccl)], entry)))
    state: dict = {"transport": Transport.P2P, **dict.fromkeys(CANDIDATES, 0)}
    choices = {"transport": tuple(Transport), **{k: range(len(v)) for k, v in CANDIDATES.items()}}
    per_call = cost = _cost(tasks, state)
    moved = True
    while moved:
        moved = False
        for knob, values in choices.items():
            value, trial = min(((v, _cost(tasks, {**state, knob: v})) for v in values), key=lambda vc: vc[1])
            if trial < cost * (1 - min_gain):
                state[knob], cost, moved = value, trial, True
    settings = ProcessSettings(transport=state["transport"],
                               **{k: CANDIDATES[k][state[k]] for k in CANDIDATES})
    return ProcessTuning(settings=settings, default_us=sum(t.weight * t.default_us for t in tasks),
                         per_call_us=per_call, tuned_us=cost)
