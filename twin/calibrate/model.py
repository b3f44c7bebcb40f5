"""The twin's time for every measured call, as a function of its physical constants.

A calibration asks the same question hundreds of times: "with these ``TwinParams``, how long
would each measured call take?".  ``TwinModel`` answers it through the twin's own model
(``twin.model.schedule``), with everything that does not depend on the constants worked out once:
where each call ran (a communicator per launch shape, with NCCL's init facts), what ran (the
recorded config, or what NCCL would choose under the recorded ``NCCL_ALGO``/``NCCL_PROTO``),
and the routes and link loads of its geometry.  Calls that differ only in size, threads and chunk
are timed in one numpy evaluation, so one pass over a 1,024-row nccl-tests file costs a few
milliseconds, and over a thousand live trials tens.

How a call is timed follows how it was measured: nccl-tests times calls issued back to back
(``Schedule.back_to_back_us``: one-way collectives overlap); a call measured while compute held
part of the GPU (``Measurement.interference`` > 0) copies at ``compute.copy_rate_under_compute``
of its CTA rate, as the trace replay has it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from tuner.config import Algo, Config, Proto, parse_enum
from tuner.knobs import DEFAULT_NCCL_VERSION, OLDEST_NCCL_VERSION
from twin.calibrate.errors import CalibrationError
from twin.calibrate.points import Point
from twin.model.schedule import Schedule, Unsupported, check_supported, schedule_for
from twin.params import TwinParams
from twin.placement import Communicator, PlacementError, task_shape
from twin.predict import resolve
from twin.topology import Cluster

__all__ = ["OLDEST_MODELLED_RELEASE", "TwinModel", "emulated_release", "interfered_us"]

_GRID = re.compile(r"\d+x\d+")
"""A task's group given as its shape, ``GxN``: G GPUs on each of N nodes."""

OLDEST_MODELLED_RELEASE = OLDEST_NCCL_VERSION
"""The oldest NCCL release whose choices the twin's cost model emulates (``twin.nccl_model.releases``)."""


def emulated_release(version: str) -> tuple[int, int, int]:
    """The NCCL release whose choices the twin emulates for a measurement taken with ``version``:
    that release where the cost model knows it, else ``DEFAULT_NCCL_VERSION``.

    >>> emulated_release("2.29.2"), emulated_release("2.8.4"), emulated_release("2.7.8") == DEFAULT_NCCL_VERSION
    ((2, 29, 2), (2, 8, 4), True)
    """
    parts = version.split(".")[:3]
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        release = (int(parts[0]), int(parts[1]), int(parts[2]))
        if release >= OLDEST_MODELLED_RELEASE:
            return release
    return DEFAULT_NCCL_VERSION


def interfered_us(schedule: Schedule, copy_scale: float):
    """A call's time when its CTAs copy at ``copy_scale`` of their rate alone (compute shares the
    GPU's memory), as the trace replay times it: only copy-bound channels slow down."""
    gbps = np.minimum(schedule.gbps, schedule.cap_gbps * copy_scale)
    return schedule.launch_us + schedule.steps_time_us(gbps)


class TwinModel:
    """The twin's prediction of each of ``points`` on ``cluster`` (``times``).

    ``nccl_version`` forces the NCCL release whose choices are emulated (default: each
    measurement's own, ``emulated_release``).  Raises ``CalibrationError`` naming the record
    when a call cannot be placed on the cluster or cannot run there as recorded.
    """

    def __init__(self, cluster: Cluster, points: Sequence[Point], *,
                 nccl_version: tuple[int, int, int] | None = None) -> None:
        self.cluster = cluster
        self.points = tuple(points)
        self.measured_us = np.array([p.time_us for p in self.points], dtype=float)
        self.notes: list[str] = []
        self._comms: dict[tuple, Communicator] = {}
        self.configs: list[Config] = []
        groups: dict[tuple, list[int]] = {}
        for i, point in enumerate(self.points):
            release = nccl_version or self._release(point)
            shaped = _GRID.fullmatch(point.task.group) is not None
            key = (point.task.group if shaped else "", point.task.nranks, point.gpus_per_process, release)
            comm = self._communicator(key, point)
            config = self._config(comm, point)
            self.configs.append(config)
            groups.setdefault((key, point.task.op, config.algo, config.proto, config.transport, config.nchannels,
                               point.back_to_back, point.measurement.interference > 0), []).append(i)
        self._groups = [(key, np.array(idx), *(np.array(values, dtype=float) for values in zip(
            *((self.points[i].task.nbytes, self.configs[i].nthreads, self.configs[i].chunk_bytes) for i in idx),
            strict=True))) for key, idx in groups.items()]
        self._cached: tuple[TwinParams, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.points)

    def _release(self, point: Point) -> tuple[int, int, int]:
        measured = point.measurement.nccl_version
        release = emulated_release(measured)
        if measured and ".".join(map(str, release)) != measured.split("+")[0]:
            note = (f"measured with NCCL {measured}; the twin emulates NCCL {'.'.join(map(str, release))}'s choices "
                    f"(the oldest release it models is {'.'.join(map(str, OLDEST_MODELLED_RELEASE[:2]))})")
            if note not in self.notes:
                self.notes.append(note)
        return release

    def _communicator(self, key: tuple, point: Point) -> Communicator:
        if key not in self._comms:
            shape, nranks, per_process, release = key
            try:
                if shape:
                    (gpus, nodes), _ = task_shape(point.task, self.cluster.gpus_per_node)
                    if nodes > self.cluster.nodes or gpus > self.cluster.gpus_per_node:
                        raise PlacementError(f"group {shape} needs {nodes} node(s) of {gpus} GPUs")
                    cluster = self.cluster.subset(nodes=nodes, gpus_per_node=gpus)
                    comm = Communicator.first(cluster, gpus_per_process=per_process, nccl_version=release)
                else:
                    comm = Communicator.first(self.cluster, nranks, gpus_per_process=per_process, nccl_version=release)
            except ValueError as err:  # PlacementError, or ranks that do not fill whole nodes
                raise CalibrationError(f"{point.where}: a call on {nranks} ranks cannot be placed on cluster "
                                       f"{self.cluster.identity} ({err}); is this the cluster it ran on (--nodes)?"
                                       ) from None
            self._comms[key] = comm
        return self._comms[key]

    def _config(self, comm: Communicator, point: Point) -> Config:
        """What ran: the recorded config, or NCCL's choice under the recorded NCCL_ALGO/NCCL_PROTO."""
        m = point.measurement
        task = point.task
        try:
            if m.config is not None:
                config = m.config
            else:
                knobs = {}
                if "NCCL_ALGO" in m.env:
                    knobs["algo"] = parse_enum(Algo, m.env["NCCL_ALGO"])
                if "NCCL_PROTO" in m.env:
                    knobs["proto"] = parse_enum(Proto, m.env["NCCL_PROTO"])
                config = resolve(comm, task.op, task.nbytes, dtype=task.dtype, **knobs)[0]
            check_supported(comm.geometry(config.transport), task.op, config.algo, config.proto)
        except (Unsupported, PlacementError) as err:
            raise CalibrationError(f"{point.where}: {task.op} with {m.config or m.env or 'NCCL default'} cannot run on "
                                   f"cluster {self.cluster.identity} as the twin models it: {err}") from None
        except ValueError as err:  # an NCCL_ALGO / NCCL_PROTO value the twin does not know
            raise CalibrationError(f"{point.where}: {err}") from None
        return config

    def times(self, params: TwinParams) -> np.ndarray:
        """The twin's time (µs) of every point with ``params``, in ``points`` order."""
        if self._cached is not None and self._cached[0] == params:
            return self._cached[1]
        comms = {key: comm.with_params(params) for key, comm in self._comms.items()}
        out = np.empty(len(self.points))
        scale = params.compute.copy_rate_under_compute
        for (key, op, algo, proto, transport, nchannels, back_to_back, interfered), idx, nbytes, nthreads, chunks \
                in self._groups:
            comm = comms[key]
            schedule = schedule_for(comm.geometry(transport), op, nbytes, algo, proto, nchannels, nthreads, chunks,
                                    gpus_per_process=comm.gpus_per_process)
            if interfered:
                out[idx] = interfered_us(schedule, scale)
            else:
                out[idx] = schedule.back_to_back_us() if back_to_back else schedule.time_us()
        self._cached = (params, out)
        return out

    def log_errors(self, params: TwinParams, idx: np.ndarray | None = None) -> np.ndarray:
        """``log(predicted / measured)`` of the points ``idx`` (all by default)."""
        times = self.times(params)
        if idx is None:
            return np.log(times / self.measured_us)
        return np.log(times[idx] / self.measured_us[idx])
