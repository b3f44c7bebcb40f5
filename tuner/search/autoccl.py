"""AutoCCL (NSDI '25) as its code runs it: subspaces, then coordinate descent over ⟨NC, NT, C⟩.

Algorithm 1 of the paper searches every ⟨algo, proto, transport⟩ subspace and keeps the best;
Algorithm 2 runs coordinate descent inside one.  The published tuner (``gbxu/autoccl``,
``TUNER_MODE=5``, research/autoccl-anchors.md §1.4) fills in what the pseudo-code leaves open,
and this class follows it:

* **Native** — NCCL's own config is measured first (the baseline; it can win).
* **Rounds** — subspaces take turns, one round each (one step per occurrence of the task:
  a round is one or a few configs, each held for ``repeat`` calls).
* **Pretrain** — ``max(pretrain_steps // subspaces, 1)`` random unvisited points per subspace.
* **Descent** — from the subspace's best point, along axis ``dim`` (NC, NT, C) in direction ±:
  among the unvisited points whose offset from the current one lies within 90° of the axis
  (a positive projection on it), keep the ``k = max(topk, lr·count)`` nearest by (projection,
  angle) and measure the farthest ``topk`` of those.  Normally that is the 3 nearest along the
  axis; after an improvement ``lr = 0.8·(t_cur − t_new)/t_cur`` makes the next jump reach
  proportionally farther.  An improvement moves there and keeps the axis; a failure flips the
  direction, then moves to the next axis; ``2·dims`` failures in a row are a local optimum.
* **Restarts** — a local optimum restarts from a random unvisited point; after ``retries``
  (TUNER_RETRY = 5) the subspace is done.
* **Dropping** — a subspace stops when its best is above ``drop_ratio`` (1.5×) the reference
  after 10 % of its descent budget, or above ``drop_ratio_early`` (3×) it between 5 descent
  measurements and that point.  The reference is NCCL's default's score, replaced by a finished
  subspace's best when that is lower (the combined job's ``optimum``).
* **Score** — the mean of the fastest 75 % of a config's samples.

Kept quirks of the code: the failure counter is not reset by a restart (it stops matching
``2·dims`` until the next improvement), and a restart decided between rounds keeps the previous
round's neighbours as the points the random one is compared with.  Left out: the angle
tie-break ignores the candidate fields derived from the chunk (``iteration``,
``lastIterEffectiveChunksize``); chunks are effective bytes, not wire bytes.

Adaptations: without a descent budget (``train_steps=None``, the default) a subspace runs until
its restarts are spent and the 1.5× check comes after 10 rounds' measurements.  A warm start
(a plan's subspaces, fastest first, each with predicted best resources) orders the subspaces,
drops those predicted above ``drop_ratio`` × the predicted best (AutoCCL's own threshold), and
replaces pretraining with the plan's point as the first descent point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tuner.config import Config, Subspace
from tuner.search.base import Search, subspace_names
from tuner.search.warm import order_by_plan
from tuner.space import ConfigSpace

DIMS = 3  # nchannels, nthreads, chunk_bytes


@dataclass
class _Job:
    """One subspace's search (``CoDesJob`` inside ``NcclCombinedJob``)."""

    subspace: Subspace
    status: str = "pretrain"  # pretrain | train | converged | dropped | exhausted
    pretrain_left: int = 0
    start: int | None = None
    """Warm start: the plan's point, measured first."""
    train_trials: int = 0
    retry: int = 0
    cur: int = -1
    dim: int = 0
    positive: bool = True
    lr: float = -1.0
    conv: int = 0
    next_points: list[list] = field(default_factory=list)
    """[index, dim, positive] of the last round's neighbours."""
    visited: np.ndarray | None = None

    SAVED: ClassVar[tuple[str, ...]] = ("status", "pretrain_left", "start", "train_trials", "retry", "cur", "dim",
                                        "positive", "lr", "conv", "next_points")
    """The plain fields ``to_dict`` writes and ``AutoCCL._load`` reads back."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.SAVED}
        d["subspace"] = subspace_names(self.subspace)
        d["visited"] = np.flatnonzero(self.visited).tolist()
        return d


class AutoCCL(Search):
    """AutoCCL's subspace coordinate descent (see the module docstring)."""

    name = "autoccl"
    params = ("pretrain_steps", "train_steps", "repeat", "topk", "retries", "drop_ratio", "drop_ratio_early",
              "default", "warm_start")

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None,
                 pretrain_steps: int = 20, train_steps: int | None = None, repeat: int = 1, topk: int = 3,
                 retries: int = 5, drop_ratio: float = 1.5, drop_ratio_early: float = 3.0,
                 default: Config | None = None, warm_start: list[tuple[Config, float]] | None = None):
        super().__init__(space, seed=seed, max_trials=max_trials)
        self.pretrain_steps = pretrain_steps
        self.train_steps = train_steps
        self.repeat = repeat
        self.topk = topk
        self.retries = retries
        self.drop_ratio = drop_ratio
        self.drop_ratio_early = drop_ratio_early
        self.default = default
        self.warm_start = warm_start
        self.jobs: list[_Job] = []
        self.turn = 0
        self.started = False
        self.subspace_best: dict[Subspace, float] = {}

    # -- rounds ---------------------------------------------------------------------------

    def _record(self, config: Config, time_us: float) -> None:
        super()._record(config, time_us)
        s = config.subspace
        if self.space.candidates(s).index(config) is not None:
            self.subspace_best[s] = min(self.subspace_best.get(s, math.inf), self.scores[config])

    def _advance(self) -> None:
        if not self.started:
            self._start()
            if self.default is not None:
                self.pending = [self.default] * self.repeat
                return
        for _ in range(len(self.jobs)):
            job = self.jobs[self.turn]
            self.turn = (self.turn + 1) % len(self.jobs)
            if job.status not in ("pretrain", "train"):
                continue
            batch = self._round(job)
            if batch:
                self.pending = [job_config for i in batch
                                for job_config in [self.space.candidates(job.subspace).config(i)] * self.repeat]
                return

    def _start(self) -> None:
        self.started = True
        if self.warm_start is None:
            jobs = [_Job(s) for s in self.space.subspaces]
            share = max(self.pretrain_steps // len(jobs), 1)
            for job in jobs:
                job.pretrain_left = share
        else:
            jobs = []
            for start, _ in order_by_plan(self.space, self.warm_start, self.drop_ratio):
                job = _Job(start.subspace, status="train")
                job.start = self.space.candidates(start.subspace).index(start)
                jobs.append(job)
        for job in jobs:
            job.visited = np.zeros(self.space.candidates(job.subspace).size, dtype=bool)
        self.jobs = jobs

    def _budget(self) -> int | None:
        return None if self.train_steps is None else max(self.train_steps // len(self.jobs), 1)

    def _round(self, job: _Job) -> list[int]:
        """The configs of ``job``'s next round (empty: the job just finished)."""
        if job.status == "pretrain":
            if job.pretrain_left > 0:
                job.pretrain_left -= 1
                return self._emit(job, [self._random_unvisited(job)])
            job.status = "train"
        if self._should_drop(job):
            job.status = "dropped"
            return []
        budget = self._budget()
        if budget is not None and job.train_trials >= budget:
            job.status = "exhausted"
            return []
        if job.visited.all():
            job.status = "exhausted"
            return []
        batch = self._descent_round(job)
        if not batch:
            job.status = "converged"
            return []
        job.train_trials += len(batch) * self.repeat
        return self._emit(job, batch)

    def _reference(self) -> float:
        """What a subspace is compared with to drop it: NCCL's default, or the best of a finished
        subspace once one beats it (the combined job's ``optimum``)."""
        finished = [self.subspace_best.get(j.subspace, math.inf) for j in self.jobs
                    if j.status not in ("pretrain", "train")]
        native = [self.score(self.default)] if self.default is not None else []
        return min(native + finished, default=math.inf)

    def _should_drop(self, job: _Job) -> bool:
        mine = self.subspace_best.get(job.subspace, math.inf)
        reference = self._reference()
        if not (math.isfinite(mine) and math.isfinite(reference)):
            return False
        budget = self._budget()
        late = budget * 0.1 if budget is not None else 10 * self.repeat
        if job.train_trials > late:
            return mine > self.drop_ratio * reference
        return job.train_trials > 5 * self.repeat and mine > self.drop_ratio_early * reference

    def _emit(self, job: _Job, batch: list[int]) -> list[int]:
        job.visited[batch] = True
        return batch

    def _random_unvisited(self, job: _Job) -> int:
        rest = np.flatnonzero(~job.visited)
        if not len(rest):
            return self._job_best(job)
        return int(rest[self.rng.integers(len(rest))])

    def _job_best(self, job: _Job) -> int:
        cands = self.space.candidates(job.subspace)
        measured = [(self.scores[c], n, i) for n, c in enumerate(self.scores)
                    if c.subspace == job.subspace and (i := cands.index(c)) is not None]
        return min(measured)[2]

    # -- the descent (``CoDesJob::addTrain``) -----------------------------------------------

    def _descent_round(self, job: _Job) -> list[int]:
        if job.retry == 0:
            if job.subspace not in self.subspace_best:  # warm start: measure the plan's point first
                return [job.start if job.start is not None else self._random_unvisited(job)]
            job.cur, job.dim, job.positive, job.retry = self._job_best(job), 0, True, 1
            return self._survey(job)
        if job.retry < self.retries:
            if self._update(job):
                return self._survey(job)
            return [self._restart(job)]
        return []

    def _restart(self, job: _Job) -> int:
        job.cur = self._random_unvisited(job)
        job.dim, job.positive = 0, True
        job.retry += 1
        return job.cur

    def _point_score(self, job: _Job, i: int) -> float:
        return self.score(self.space.candidates(job.subspace).config(i))

    def _update(self, job: _Job) -> bool:
        """``updateStatus``: move to the best neighbour, or turn; False at a local optimum."""
        cur_score = self._point_score(job, job.cur)
        better, better_score = None, cur_score
        for i, dim, positive in job.next_points:
            score = self._point_score(job, i)
            if score < better_score:
                job.lr = (cur_score - score) / cur_score * 0.8
                better, better_score = (i, dim, positive), score
        if better is not None:
            job.conv = 0
            job.cur, job.dim, job.positive = better
        else:
            job.conv += 1
            if job.positive:
                job.positive = False
            else:
                job.positive, job.dim = True, (job.dim + 1) % DIMS
            job.lr = -1.0
        return job.conv != 2 * DIMS

    def _survey(self, job: _Job) -> list[int]:
        """``surveyWithAxis``: the neighbours along the current axis, turning while there are none."""
        job.next_points = []
        neighbours: list[int] = []
        while not neighbours:
            neighbours = self._neighbours(job)
            if not neighbours and not self._update(job):
                neighbours = [self._restart(job)]
        job.next_points = [[i, job.dim, job.positive] for i in neighbours]
        return neighbours

    def _neighbours(self, job: _Job) -> list[int]:
        """``findKCandidatesWithAxis`` over the unvisited points, farthest of the k nearest first."""
        axes = self.space.candidates(job.subspace).axes
        along = axes[job.dim] - axes[job.dim, job.cur]
        if not job.positive:
            along = -along
        half = np.flatnonzero((along > 0) & ~job.visited)
        if not len(half):
            return []
        k = max(self.topk, int(job.lr * len(half)))
        proj = along[half]
        if k < len(half):  # only points up to the k-th smallest projection can be among the k nearest
            near = proj <= np.partition(proj, k - 1)[k - 1]
            half, proj = half[near], proj[near]
        offset = axes[:, half] - axes[:, job.cur:job.cur + 1]
        angle = np.arccos(np.clip(proj / np.sqrt((offset ** 2).sum(axis=0)), -1.0, 1.0))
        key = proj + angle / math.pi  # projections are whole numbers, angle/pi < 0.5: (proj, angle) order
        pos = np.argpartition(key, k - 1)[:k] if k < len(half) else np.arange(len(half))
        pos = pos[np.argsort(key[pos], kind="stable")]
        return [int(i) for i in half[pos][::-1][:self.topk]]

    # -- saving ---------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"started": self.started, "turn": self.turn, "jobs": [j.to_dict() for j in self.jobs]}

    def _load(self, state: dict[str, Any]) -> None:
        self.started, self.turn = state["started"], state["turn"]
        self.jobs = []
        for d in state["jobs"]:
            subspace = self._subspace_named(d["subspace"])
            job = _Job(subspace, **{k: d[k] for k in _Job.SAVED})
            job.visited = np.zeros(self.space.candidates(subspace).size, dtype=bool)
            job.visited[d["visited"]] = True
            self.jobs.append(job)
