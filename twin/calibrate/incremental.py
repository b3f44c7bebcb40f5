"""Calibration that keeps up with live tuning: refit from a filling store, re-rank what is left.

A tuning job records every trial in the store (``source="live"``).  A ``Recalibrator`` on that
store refits the cluster's constants once ``min_new`` new measurements have arrived since its
last fit (the optimiser starts from the last accepted fit, the prior stays the prior, so the
data is not counted twice), and keeps the fit only when ``calibrate`` accepts it.  Between fits
it answers, with the current constants, what a tuning session wants to know next:

* ``warm_start(task)``: the warm-start plan entry of a task not tuned yet (every subspace's
  predicted best resources, fastest first), for ``make_search(..., warm_start=...)``;
* ``rerank(task, configs)``: the configs a search has left to try, fastest predicted first.

    recal = Recalibrator("tuning.db", cluster, prior=load_profile("h200-type.json"))
    for task in tasks:
        search = make_search("ours", space, warm_start=recal.warm_start(task), default=default)
        ...                                   # the session runs it; trials land in the store
        recal.refit()                         # None until enough new trials arrived
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from os import PathLike

from traces.task import Task
from tuner.config import Config
from tuner.space import ConfigError
from twin.calibrate.calibrate import CalibrationResult, calibrate
from twin.calibrate.holdout import DEFAULT_HOLDOUT, Holdout
from twin.calibrate.points import read_points
from twin.model.schedule import Unsupported
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement import TaskPlacement
from twin.profile import Profile
from twin.rank import rank_task
from twin.topology import Cluster

__all__ = ["Recalibrator"]


class Recalibrator:
    """Refits ``cluster``'s constants from the store at ``store`` (module docstring).

    ``hardware`` is the cluster identity whose rows are fitted (default: the cluster's own);
    ``calibrate_options`` go to every ``calibrate`` (``parameters``, ``residual``...).
    """

    def __init__(self, store: str | PathLike[str], cluster: Cluster, *, prior: TwinParams | Profile | None = None,
                 hardware: str | None = None, min_new: int = 20, holdout: Holdout = DEFAULT_HOLDOUT,
                 gpus_per_process: int = 1, **calibrate_options) -> None:
        self.store = str(store)
        self.cluster = cluster
        self.prior = prior
        self.hardware = hardware or cluster.identity
        self.min_new = min_new
        self.holdout = holdout
        self.gpus_per_process = gpus_per_process
        self.options = calibrate_options
        self.params: TwinParams = prior.params if isinstance(prior, Profile) else (prior or DEFAULT_PARAMS)
        """The constants the twin uses now: the last accepted fit, else the prior."""
        self.last: CalibrationResult | None = None
        """The last fit tried (accepted or refused)."""
        self.fitted_points = 0
        self._placement = TaskPlacement(cluster, params=self.params)

    def refit(self, *, force: bool = False) -> CalibrationResult | None:
        """Refit when ``min_new`` measurements arrived since the last fit (any number with
        ``force``); ``None`` when there was nothing new enough to fit."""
        points = read_points([self.store], hardware=self.hardware, gpus_per_process=self.gpus_per_process)
        if len(points) - self.fitted_points < (1 if force else self.min_new):
            return None
        start = None if self.last is None or not self.last.accepted else self.params
        result = calibrate(points, self.cluster, prior=self.prior, holdout=self.holdout, sources=(self.store,),
                           start=start, **self.options)
        self.last = result
        self.fitted_points = len(points)
        if result.accepted:
            self.params = result.params
            self._placement = TaskPlacement(self.cluster, params=self.params)
        return result

    def warm_start(self, task: Task) -> list[tuple[Config, float]]:
        """The warm-start plan entry of ``task`` under the current constants."""
        comm, _ = self._placement.place(task)
        return rank_task(comm, task).warm_start()

    def rerank(self, task: Task, configs: Sequence[Config]) -> list[tuple[Config, float]]:
        """``configs`` with their predicted times under the current constants, fastest first
        (configs the twin cannot run here last, at ``inf``)."""
        comm, _ = self._placement.place(task)
        timed = []
        for config in configs:
            try:
                timed.append((config, float(comm.schedule(task, config).time_us())))
            except (Unsupported, ConfigError):
                timed.append((config, math.inf))
        return sorted(timed, key=lambda ct: ct[1])
