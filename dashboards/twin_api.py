"""Everything the dashboards take from twin/, tuner/ and traces/ that is moving, in one module.

The pages and studies import these names from here only, so that when the twin's modules move
(``twin.replay.comms`` and ``twin.predict`` into ``twin.placement``, the twin's constants into a
``TwinParams`` loaded from a calibration profile, the tune loop into ``tuner.session``, the
parallelism ``Plan`` renamed) one file changes.

``params`` (a calibration profile's twin parameters) is accepted by every function that runs
the twin and is passed nowhere yet: the twin takes no parameter object today, so a profile
cannot be loaded (``load_profile`` says so) and every figure says "default constants".
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike

from dashboards.inputs import InputError
from traces.errors import TraceError
from traces.generate.plan import Plan as ParallelismPlan
from traces.schema import Trace
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto
from tuner.executor import space_for
from tuner.measurement import Measurement
from tuner.plan import PlanEntry, PlanError
from tuner.search import SEARCHES, make_search, run
from tuner.space import ConfigError, ConfigSpace
from tuner.store import Store, StoreError
from twin.executor import TwinExecutor
from twin.fastpath import SubspaceSweep, sweep_subspace
from twin.hardware import TopologyError
from twin.model.schedule import Unsupported
from twin.predict import Prediction, Twin
from twin.rank import comm_facts, rank_task
from twin.replay.comms import ReplayError
from twin.whatif import PRICE_PER_GPU_HOUR, Candidate, ClusterReport, WhatIfReport, evaluate_cluster
from twin.whatif import evaluate as evaluate_candidate_in_twin

__all__ = [
    "NCCL_VERSION",
    "PRICE_PER_GPU_HOUR",
    "SEARCHES",
    "USER_ERRORS",
    "Candidate",
    "ClusterReport",
    "ParallelismPlan",
    "PlanEntry",
    "Prediction",
    "Store",
    "SubspaceSweep",
    "Twin",
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

NCCL_VERSION = (2, 28, 9)
"""The NCCL release the twin emulates unless told otherwise (the twin's own default)."""

USER_ERRORS = (InputError, TraceError, TopologyError, ReplayError, ConfigError, PlanError, StoreError, Unsupported)
"""Errors that mean "the input cannot be used": shown as a message on the page. (One error root,
``CcltwinError``, replaces this tuple when it lands.)"""


def nccl_label(version: tuple[int, int, int] = NCCL_VERSION) -> str:
    return "NCCL " + ".".join(map(str, version))


def load_profile(path: str | PathLike[str] | None):
    """The twin parameters of a calibration profile, ``None`` without one.

    The twin has no parameter object yet (``twin.params``), so a profile is refused with a
    message naming it rather than silently ignored.
    """
    if path is None:
        return None
    raise InputError(f"{path}: this twin cannot load calibration profiles yet (no twin.params); "
                     "start the dashboard without --profile")


def profile_label(params) -> str:
    """What figures say about the twin's constants."""
    return "default constants" if params is None else "calibrated profile"


def evaluate(trace: Trace, cluster, name: str, price_per_gpu_hour: float | None, *, tuned: bool = True,
             params=None) -> ClusterReport:
    """``twin.whatif``'s replay of ``trace`` on a built ``cluster`` (``params``: not passed yet)."""
    return evaluate_cluster(trace, cluster, Candidate(name, cluster.nodes, price_per_gpu_hour), tuned=tuned)


def evaluate_candidate(trace: Trace, candidate: Candidate, *, tuned: bool = True, params=None) -> ClusterReport:
    """``twin.whatif.evaluate``: ``trace`` on a preset or YAML file (``ccltwin whatif --topology``)."""
    return evaluate_candidate_in_twin(trace, candidate, tuned=tuned)


def predict_sizes(cluster, op: Op, sizes: list[int], *, nranks: int | None = None, dtype: str = "float32",
                  algo: Algo | None = None, proto: Proto | None = None, nchannels: int | None = None,
                  params=None) -> list[Prediction]:
    """``ccltwin simulate``'s fast-path prediction of ``op`` at every size (knobs not given: NCCL's)."""
    twin = Twin(cluster, nranks)
    return [twin.predict(op, n, dtype=dtype, algo=algo, proto=proto, nchannels=nchannels) for n in sizes]


def predict_measured(cluster, measurement: Measurement, *, params=None) -> Prediction:
    """The twin's time for a measured call, on ``cluster`` with the measured rank count, NCCL's
    choice under the measurement's ``NCCL_ALGO``/``NCCL_PROTO`` (or its config when it has one)."""
    task = measurement.task
    twin = Twin(cluster, task.nranks)
    c = measurement.config
    if c is not None:
        return twin.predict(task.op, task.nbytes, dtype=task.dtype, algo=c.algo, proto=c.proto,
                            transport=c.transport, nchannels=c.nchannels, nthreads=c.nthreads,
                            chunk_bytes=c.chunk_bytes)
    forced = {}
    for key, kind, var in (("algo", Algo, "NCCL_ALGO"), ("proto", Proto, "NCCL_PROTO")):
        value = measurement.env.get(var, "")
        if value and "," not in value and not value.startswith("^"):
            forced[key] = kind(value.lower())
    return twin.predict(task.op, task.nbytes, dtype=task.dtype, **forced)


def rank(cluster, op: Op, nbytes: int, nranks: int | None = None, *, dtype: str = "float32", params=None
         ) -> tuple[Twin, Task, PlanEntry]:
    """``ccltwin rank``'s engine on one task: every subspace's best point, fastest first."""
    twin = Twin(cluster, nranks)
    task = twin.task(op, nbytes, dtype)
    return twin, task, rank_task(twin, task)


def heatmap_sweep(twin: Twin, task: Task, entry: PlanEntry, subspace, *, params=None) -> SubspaceSweep:
    """Predicted time of every ⟨channels, threads, chunk⟩ of ``subspace`` (the ranking's grid)."""
    space = ConfigSpace(task, comm_facts(twin))
    geoms = {t: twin.geometry(t) for t in {s.transport for s in space.subspaces}}
    return sweep_subspace(geoms, task.op, task.nbytes, subspace, space.grid(subspace),
                          gpus_per_process=twin.gpus_per_process)


def tune_trajectory(cluster, task: Task, search: str, *, seed: int = 0, noise: float = 0.02,
                    store: Store | None = None, on_trial: Callable[[int], None] | None = None, params=None
                    ) -> tuple[list[tuple[Config, float]], Config]:
    """Run ``search`` on ``task`` against the twin's executor (seeded noise), as ``ccltwin tune``
    does; the (config, time) of every trial and NCCL's default. With ``store`` every trial is
    recorded (source ``twin``). (``tuner.session.TuningSession`` replaces this loop.)"""
    executor = TwinExecutor(cluster, noise=noise, seed=seed)
    default = executor.default_config(task)
    space = space_for(executor, task)
    searcher = make_search(search, space, seed=seed, default=default if search in ("autoccl", "ours", "default")
                           else None)

    def measure(config: Config) -> float:
        t = executor.measure(task, config)
        if store is not None:
            store.add(Measurement(task=task, config=config, time_us=t, source="twin", hardware=executor.hardware,
                                  nccl_version=".".join(map(str, executor.nccl_version)),
                                  occurrence=searcher.trials))
        if on_trial is not None:
            on_trial(searcher.trials + 1)
        return t

    return run(searcher, measure), default


def twin_default_time(cluster, task: Task, *, params=None) -> tuple[Config, float]:
    """NCCL's default configuration of ``task`` on ``cluster`` and the twin's noise-free time for it."""
    executor = TwinExecutor(cluster, noise=0.0, spike_prob=0.0)
    default = executor.default_config(task)
    return default, executor.true_time(task, default)
