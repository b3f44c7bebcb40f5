"""Predict a collective on a communicator: with a given configuration, or with what NCCL would pick.

>>> from traces.task import Op
>>> from twin.placement import Communicator
>>> from twin.topology import load_cluster
>>> prediction = predict(Communicator.first(load_cluster("dgx-h100")), Op.ALLREDUCE, 1 << 30)
>>> str(prediction.config), prediction.chosen_by, round(prediction.busbw_gbps)
('nvls/simple/p2p nc=16 nt=640 chunk=131072', 'nccl', 461)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from twin.model.host import NCCL_TESTS_ITERS
from twin.nccl_model import nccl_choice
from twin.nccl_model.envparse import env_name
from twin.placement import Communicator

__all__ = ["Prediction", "predict", "resolve"]


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
    repeated_us: float | None = None
    """Time per call of calls issued back to back on every rank's stream, as nccl-tests' timed
    loop reports it (``Schedule.back_to_back_us``): down a Broadcast/Reduce chain less than
    ``time_us``, one call's latency, where the calls overlap."""

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
            "repeated_us": None if self.repeated_us is None else round(self.repeated_us, 3),
        }


def resolve(comm: Communicator, op: Op, nbytes: int, *, dtype: str = "float32", algo: Algo | None = None,
            proto: Proto | None = None, transport: Transport | None = None, nchannels: int | None = None,
            nthreads: int | None = None, chunk_bytes: int | None = None) -> tuple[Config, str, float | None]:
    """Fill every knob not given with what NCCL would use for ``dtype`` on ``comm``; say who chose."""
    given = [k for k in (algo, proto, transport, nchannels, nthreads, chunk_bytes) if k is not None]
    for name, value in (("nchannels", nchannels), ("nthreads", nthreads), ("chunk size", chunk_bytes)):
        if value is not None and value <= 0:
            raise CcltwinError(f"a forced {name} must be positive, got {value}")
    # A forced algorithm or protocol works as NCCL_ALGO / NCCL_PROTO do: NCCL picks the rest
    # (in the release's spelling: ``nvlstree``, ``collnetdirect``).
    version = comm.nccl.nccl_version
    info = replace(comm.nccl, algo_env=env_name(algo, version) if algo else comm.nccl.algo_env,
                   proto_env=str(proto) if proto else comm.nccl.proto_env)
    choice = nccl_choice(info, op, nbytes, dtype)
    config = Config(choice.algo, choice.proto, transport or Transport.P2P, nchannels or choice.nchannels,
                    nthreads or choice.nthreads, chunk_bytes or choice.chunk_bytes)
    if not given:
        return config, "nccl", choice.nccl_time_us
    return config, "user" if len(given) == 6 else "user+nccl", None


def predict(comm: Communicator, op: Op, nbytes: int, *, dtype: str = "float32", engine: str = "fast",
            iters: int = NCCL_TESTS_ITERS, **knobs) -> Prediction:
    """Time ``op`` on ``nbytes`` on ``comm`` with the knobs given (others as NCCL would choose them):
    one call's latency from ``engine``, and the time per call of ``iters`` calls back to back
    (the closed form's; ``twin.des.repeat`` checks it call by call)."""
    task = comm.task(op, nbytes, dtype)
    config, chosen_by, nccl_time = resolve(comm, op, nbytes, dtype=dtype, **knobs)
    if nbytes == 0:
        return Prediction(task, config, 0.0, chosen_by, nccl_time, 0.0)
    schedule = comm.schedule(task, config)
    if engine == "fast":
        time_us = float(schedule.time_us())
    elif engine == "des":
        from twin.des import CollectiveRun, simulate

        time_us = simulate([CollectiveRun(schedule)])[0]
    else:
        raise CcltwinError(f"unknown engine {engine!r}; expected fast or des")
    return Prediction(task, config, time_us, chosen_by, nccl_time, float(schedule.back_to_back_us(iters)))
