"""Predict a collective on a cluster: with a given configuration, or with what NCCL would pick.

>>> twin = Twin(load_cluster("dgx-h100"))                                   # doctest: +SKIP
>>> twin.predict(Op.ALLREDUCE, 1 << 30).busbw_gbps                          # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from twin.hardware import TopologyError
from twin.model.geometry import CommGeometry
from twin.model.schedule import Schedule, build_schedule
from twin.nccl_model import NcclCommInfo, nccl_choice
from twin.nccl_model.search import comm_info


@dataclass(frozen=True)
class Prediction:
    """A predicted collective: the task, the configuration it ran with, and its time."""

    task: Task
    config: Config
    time_us: float
    chosen_by: str
    """``nccl`` when NCCL's default picked the configuration, ``user`` when all of it was given,
    ``user+nccl`` when NCCL filled in what was not given."""
    nccl_time_us: float | None = None
    """NCCL's own cost-model estimate of its choice (``None`` for a user configuration)."""

    @property
    def algbw_gbps(self) -> float:
        return self.task.algbw_gbps(self.time_us)

    @property
    def busbw_gbps(self) -> float:
        return self.task.busbw_gbps(self.time_us)

    def as_dict(self) -> dict:
        c = self.config
        return {
            "op": str(self.task.op), "nbytes": self.task.nbytes, "count": self.task.count,
            "dtype": self.task.dtype, "nranks": self.task.nranks,
            "algo": str(c.algo), "proto": str(c.proto), "transport": str(c.transport),
            "nchannels": c.nchannels, "nthreads": c.nthreads, "chunk_bytes": c.chunk_bytes,
            "time_us": round(self.time_us, 3), "algbw_gbps": round(self.algbw_gbps, 3),
            "busbw_gbps": round(self.busbw_gbps, 3), "chosen_by": self.chosen_by,
            "nccl_time_us": None if self.nccl_time_us is None else round(self.nccl_time_us, 3),
        }


def pick_ranks(cluster, nranks: int | None) -> list[str]:
    """The GPUs of an ``nranks`` communicator: whole nodes in order, or the first GPUs of one node."""
    gpus = cluster.gpus()
    if nranks is None:
        return gpus
    if not 1 <= nranks <= len(gpus):
        raise TopologyError(f"--nranks {nranks}: the cluster has {len(gpus)} GPUs")
    per_node = cluster.gpus_per_node
    if nranks > per_node and nranks % per_node:
        raise TopologyError(f"--nranks {nranks} does not fill whole nodes of {per_node} GPUs; "
                         f"use a multiple of {per_node} or --gpus-per-node")
    return gpus[:nranks]


class Twin:
    """One communicator on one cluster, ready to predict any collective on it."""

    def __init__(self, cluster, nranks: int | None = None, *, gpus_per_process: int = 1,
                 nccl_version: tuple[int, int, int] = (2, 28, 9)):
        self.cluster = cluster
        self.ranks = pick_ranks(cluster, nranks)
        self.gpus_per_process = gpus_per_process
        self.nccl: NcclCommInfo = comm_info(cluster, self.ranks, nccl_version=nccl_version)
        self._geoms: dict[Transport, CommGeometry] = {}

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def geometry(self, transport: Transport = Transport.P2P) -> CommGeometry:
        if transport not in self._geoms:
            self._geoms[transport] = CommGeometry(self.cluster, self.ranks, transport)
        return self._geoms[transport]

    def task(self, op: Op, nbytes: int, dtype: str = "float32") -> Task:
        shape = f"{self.nranks // self.geometry().nnodes}x{self.geometry().nnodes}"
        return Task(op=op, nbytes=nbytes, nranks=self.nranks, dtype=dtype, group=shape)

    def resolve(self, op: Op, nbytes: int, *, dtype: str = "float32", algo: Algo | None = None,
                proto: Proto | None = None, transport: Transport | None = None, nchannels: int | None = None,
                nthreads: int | None = None, chunk_bytes: int | None = None) -> tuple[Config, str, float | None]:
        """Fill every knob not given with what NCCL would use for ``dtype``; say who chose."""
        given = [k for k in (algo, proto, transport, nchannels, nthreads, chunk_bytes) if k is not None]
        # A forced algorithm or protocol works as NCCL_ALGO / NCCL_PROTO do: NCCL picks the rest.
        info = replace(self.nccl, algo_env=algo and str(algo), proto_env=proto and str(proto))
        choice = nccl_choice(info, op, nbytes, dtype)
        config = Config(choice.algo, choice.proto, transport or Transport.P2P, nchannels or choice.nchannels,
                        nthreads or choice.nthreads, chunk_bytes or choice.chunk_bytes)
        if not given:
            return config, "nccl", choice.nccl_time_us
        return config, "user" if len(given) == 6 else "user+nccl", None

    def schedule(self, task: Task, config: Config) -> Schedule:
        return build_schedule(self.geometry(config.transport), task.op, task.nbytes, config,
                              gpus_per_process=self.gpus_per_process)

    def predict(self, op: Op, nbytes: int, *, dtype: str = "float32", engine: str = "fast", **knobs
                ) -> Prediction:
        """Time ``op`` on ``nbytes`` with the knobs given (others as NCCL would choose them)."""
        task = self.task(op, nbytes, dtype)
        config, chosen_by, nccl_time = self.resolve(op, nbytes, dtype=dtype, **knobs)
        if nbytes == 0:
            return Prediction(task, config, 0.0, chosen_by, nccl_time)
        schedule = self.schedule(task, config)
        if engine == "fast":
            time_us = float(schedule.time_us())
        elif engine == "des":
            from twin.des import CollectiveRun, simulate

            time_us = simulate([CollectiveRun(schedule)])[0]
        else:
            raise CcltwinError(f"unknown engine {engine!r}; expected fast or des")
        return Prediction(task, config, time_us, chosen_by, nccl_time)
