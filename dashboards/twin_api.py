"""Everything the dashboards take from twin/, tuner/ and traces/, in one module.

The pages and studies import these names from here only, so that one file follows the twin's
API. ``params`` (a calibration profile's twin parameters, ``twin.params.TwinParams``) is taken by
every function that runs the twin; ``None`` means the twin's default constants.
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike

from traces.errors import CcltwinError
from traces.generate.parallelism import Parallelism as ParallelismPlan
from traces.schema import Trace
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto
from tuner.knobs import DEFAULT_NCCL_VERSION
from tuner.measurement import Measurement
from tuner.plan import PlanEntry
from tuner.search import SEARCHES
from tuner.session import TuningSession, search_for
from tuner.space import ConfigSpace
from tuner.store import Store
from twin.executor import TwinExecutor
from twin.fastpath import SubspaceSweep, sweep_subspace
from twin.iteration import IterationBreakdown
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement import Communicator
from twin.predict import Prediction, predict
from twin.profile import load_profile as read_profile
from twin.rank import comm_facts, rank_task
from twin.whatif import PRICE_PER_GPU_HOUR, Candidate, ClusterReport, WhatIfReport, evaluate_cluster
from twin.whatif import evaluate as evaluate_candidate_in_twin

__all__ = [
    "NCCL_VERSION",
    "PRICE_PER_GPU_HOUR",
    "SEARCHES",
    "USER_ERRORS",
    "Candidate",
    "ClusterReport",
    "Communicator",
    "IterationBreakdown",
    "ParallelismPlan",
    "PlanEntry",
    "Prediction",
    "Store",
    "SubspaceSweep",
    "TwinExecutor",
    "WhatIfReport",
    "evaluate",
    "evaluate_candidate",
    "heatmap_sweep",
    "load_profile",
    "predict_measured",
    "predict_sizes",
    "profile_label",
    "rank",
    "tune_trajectory",
]

NCCL_VERSION = DEFAULT_NCCL_VERSION
"""The NCCL release the twin emulates unless told otherwise (the twin's own default)."""

USER_ERRORS = (CcltwinError,)
"""Errors that mean "the input cannot be used": shown as a message on the page."""


def nccl_label(version: tuple[int, int, int] = NCCL_VERSION) -> str:
    return "NCCL " + ".".join(map(str, version))


def _params(params: TwinParams | None) -> TwinParams:
    return DEFAULT_PARAMS if params is None else params


def load_profile(path: str | PathLike[str] | None) -> TwinParams | None:
    """The twin parameters of a calibration profile (``twin.profile``), ``None`` without one."""
    return None if path is None else read_profile(path).params


def profile_label(params: TwinParams | None) -> str:
    """What figures say about the twin's constants."""
    return "default constants" if params is None or params == DEFAULT_PARAMS else "calibrated profile"


def evaluate(trace: Trace, cluster, name: str, price_per_gpu_hour: float | None, *, tuned: bool = True,
             params: TwinParams | None = None) -> ClusterReport:
    """``twin.whatif``'s replay of ``trace`` on a built ``cluster``."""
    return evaluate_cluster(trace, cluster, Candidate(name, cluster.nodes, price_per_gpu_hour), tuned=tuned,
                            params=_params(params))


def evaluate_candidate(trace: Trace, candidate: Candidate, *, tuned: bool = True,
                       params: TwinParams | None = None) -> ClusterReport:
    """``twin.whatif.evaluate``: ``trace`` on a preset or YAML file (``ccltwin whatif --topology``)."""
    return evaluate_candidate_in_twin(trace, candidate, tuned=tuned, params=_params(params))


def predict_sizes(cluster, op: Op, sizes: list[int], *, nranks: int | None = None, dtype: str = "float32",
                  algo: Algo | None = None, proto: Proto | None = None, nchannels: int | None = None,
                  params: TwinParams | None = None) -> list[Prediction]:
    """``ccltwin simulate``'s fast-path prediction of ``op`` at every size (knobs not given: NCCL's)."""
    comm = Communicator.first(cluster, nranks, params=_params(params))
    return [predict(comm, op, n, dtype=dtype, algo=algo, proto=proto, nchannels=nchannels) for n in sizes]


def predict_measured(cluster, measurement: Measurement, *, params: TwinParams | None = None) -> Prediction:
    """The twin's time for a measured call, on ``cluster`` with the measured rank count, NCCL's
    choice under the measurement's ``NCCL_ALGO``/``NCCL_PROTO`` (or its config when it has one)."""
    task = measurement.task
    comm = Communicator.first(cluster, task.nranks, params=_params(params))
    c = measurement.config
    if c is not None:
        return predict(comm, task.op, task.nbytes, dtype=task.dtype, algo=c.algo, proto=c.proto,
                       transport=c.transport, nchannels=c.nchannels, nthreads=c.nthreads, chunk_bytes=c.chunk_bytes)
    forced = {}
    for key, kind, var in (("algo", Algo, "NCCL_ALGO"), ("proto", Proto, "NCCL_PROTO")):
        value = measurement.env.get(var, "")
        if value and "," not in value and not value.startswith("^"):
            forced[key] = kind(value.lower())
    return predict(comm, task.op, task.nbytes, dtype=task.dtype, **forced)


def rank(cluster, op: Op, nbytes: int, nranks: int | None = None, *, dtype: str = "float32",
         params: TwinParams | None = None) -> tuple[Communicator, Task, PlanEntry]:
    """``ccltwin rank``'s engine on one task: every subspace's best point, fastest first."""
    comm = Communicator.first(cluster, nranks, params=_params(params))
    task = comm.task(op, nbytes, dtype)
    return comm, task, rank_task(comm, task)


def heatmap_sweep(comm: Communicator, task: Task, entry: PlanEntry, subspace) -> SubspaceSweep:
    """Predicted time of every ⟨channels, threads, chunk⟩ of ``subspace`` (the ranking's grid),
    with the constants ``comm`` was built with."""
    space = ConfigSpace(task, comm_facts(comm))
    geoms = {t: comm.geometry(t) for t in {s.transport for s in space.subspaces}}
    return sweep_subspace(geoms, task.op, task.nbytes, subspace, space.grid(subspace),
                          gpus_per_process=comm.gpus_per_process)


def tune_trajectory(cluster, task: Task, search: str, *, seed: int = 0, noise: float = 0.02,
                    store: Store | None = None, on_trial: Callable[[int], None] | None = None,
                    params: TwinParams | None = None) -> tuple[list[tuple[Config, float]], Config]:
    """Run ``search`` on ``task`` against the twin's executor (seeded noise) in a tuning session,
    as ``ccltwin tune`` does; the (config, time) of every trial and NCCL's default. With ``store``
    every trial is recorded (source ``twin``)."""
    executor = TwinExecutor(cluster, noise=noise, seed=seed, params=_params(params))
    default = executor.default_config(task)
    session = TuningSession(executor, task, search_for(executor, task, search, seed=seed, warm_start=None,
                                                       max_trials=None), store=store, default=default)
    session.run(None if on_trial is None else lambda n, *_: on_trial(n))
    return list(session.search.history), default


def twin_default_time(cluster, task: Task, *, params: TwinParams | None = None) -> tuple[Config, float]:
    """NCCL's default configuration of ``task`` on ``cluster`` and the twin's noise-free time for it."""
    executor = TwinExecutor(cluster, noise=0.0, spike_prob=0.0, params=_params(params))
    default = executor.default_config(task)
    return default, executor.true_time(task, default)
