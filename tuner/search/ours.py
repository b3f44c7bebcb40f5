"""Our search: AutoCCL's subspace rounds with bracketing line searches, repeats and pruning.

AutoCCL's descent steps to the 3 nearest unvisited points along an axis and accepts any point
that measures faster.  On the landscapes the twin predicts that has three weaknesses: plateaus
where 1–3 % noise decides every comparison (and where uniform random starting points land
when the chunk grid is linear but the message small), optima on a grid edge (1 channel)
reached one channel per round, and subspaces searched long after they clearly cannot win.
This search keeps the subspace rounds and changes the rest:

* **Line searches that use unimodality.**  A round measures a ladder of points along one axis
  through the current centre (channels and chunk sizes log-spaced, threads evenly), then
  brackets the best rung and measures the midpoints of the bracket until it closes or every
  remaining point is within noise of the best.  Lines cycle NC → NT → C → NC with NC·C held
  (the paper's own model counts ``M / (NC·C)`` steps, so the optimum often lies in a valley
  along which NC·C is constant, which single axes cross but do not follow) until a whole cycle
  moves nothing (or ``max_cycles``).  Chunks larger than one loop of a channel carries all run
  the same single loop, so the chunk line stops at the first of them, NC·C counts the chunk only
  up to that share, and the cold centre (NCCL's default resources) starts below it.
* **Noise.**  Scores are trimmed means (fastest 75 % of samples).  A move to a point less
  than ``tolerance`` faster than the centre is confirmed first: both are measured again, up
  to ``max_repeats`` samples each.  At the end the ``verify`` best configs are measured up to
  ``max_repeats`` times and the winner is picked on those.
* **Pruning.**  Every subspace's first round is the channel ladder; after it a subspace whose
  best is above ``screen_ratio`` × the global best stops, and after any later round one above
  ``prune_ratio`` × stops.  A warm start orders the subspaces by prediction and starts each at
  its predicted best point; one predicted above ``warm_ratio`` × the predicted best is only
  probed there once, and searched only if that probe is within ``screen_ratio`` of the best
  (a plan that misjudges a subspace costs one trial, not the optimum).  When the warm-started
  jobs are done and the winner measures slower than the plan predicted for its subspace, that
  subspace is searched once more from the cold centre (NCCL's default resources): the plan's
  point may have sat in a local optimum.

NCCL's default config is measured first when given, so the winner never measures slower than it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from traces.task import Op
from tuner.config import Algo, Config, Subspace
from tuner.search.base import Search, subspace_names
from tuner.search.warm import order_by_plan
from tuner.space import ConfigSpace

VALLEY = 3
"""The fourth line: NC with NC·C held (``valley_line=False`` leaves it out)."""


@dataclass
class _Job:
    """One subspace: its centre and the line search in progress."""

    subspace: Subspace
    center: int
    status: str = "active"  # active | done | pruned
    axis: int = 0
    rounds: int = 0
    cycles: int = 0
    stall: int = 0
    line: dict[str, int] = field(default_factory=dict)
    """Value position → point index of the points of the current line."""
    confirming: list[int] = field(default_factory=list)
    probe: bool | None = False
    """Warm start, predicted slow: measure the plan's point once before searching here.
    ``None`` marks the second start after a warm start (there is only one)."""

    SAVED: ClassVar[tuple[str, ...]] = ("center", "status", "axis", "rounds", "cycles", "stall", "confirming", "probe")
    """The plain fields ``to_dict`` writes and ``Ours._load`` reads back."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.SAVED}
        d["subspace"] = subspace_names(self.subspace)
        d["line"] = {str(k): v for k, v in self.line.items()}
        return d


class Ours(Search):
    """Subspace rounds of bracketing line searches with repeats and pruning (module docstring)."""

    name = "ours"
    params = ("ladder", "tolerance", "max_repeats", "max_cycles", "screen_ratio", "prune_ratio", "warm_ratio",
              "verify", "valley_line", "default", "warm_start")

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None, ladder: int = 6,
                 tolerance: float = 0.03, max_repeats: int = 3, max_cycles: int = 3, screen_ratio: float = 1.5,
                 prune_ratio: float = 1.15, warm_ratio: float = 1.25, verify: int = 3, valley_line: bool = True,
                 default: Config | None = None, warm_start: list[tuple[Config, float]] | None = None):
        super().__init__(space, seed=seed, max_trials=max_trials)
        self.ladder = ladder
        self.tolerance = tolerance
        self.max_repeats = max_repeats
        self.max_cycles = max_cycles
        self.screen_ratio = screen_ratio
        self.prune_ratio = prune_ratio
        self.warm_ratio = warm_ratio
        self.verify = verify
        self.valley_line = valley_line
        self.directions = 4 if valley_line else 3
        self.default = default
        self.warm_start = warm_start
        self.jobs: list[_Job] = []
        self.turn = 0
        self.stage = "start"  # start | search | verify | done

    # -- stages ---------------------------------------------------------------------------

    def _advance(self) -> None:
        if self.stage == "start":
            self._start()
            self.stage = "search"
            if self.default is not None:
                self.pending = [self.default]
                return
        while self.stage == "search":
            for _ in range(len(self.jobs)):
                job = self.jobs[self.turn]
                self.turn = (self.turn + 1) % len(self.jobs)
                if job.status != "active":
                    continue
                batch = self._round(job)
                if batch:
                    self.pending = [self._config(job, i) for i in batch]
                    return
            if not self._second_start():
                self.stage = "verify"
        if self.stage == "verify":
            top = sorted((s, n, c) for n, (c, s) in enumerate(self.scores.items()) if math.isfinite(s))
            need = [c for _, _, c in top[:self.verify] if len(self.samples[c]) < self.max_repeats]
            if need:
                self.pending = need
                return
            self.stage = "done"

    def _start(self) -> None:
        if self.warm_start is None:
            self.jobs = [_Job(s, self._index(self._cold_center(s))) for s in self.space.subspaces]
        else:
            starts = order_by_plan(self.space, self.warm_start)
            fastest = starts[0][1]
            self.jobs = [_Job(c.subspace, self._index(c), probe=t > self.warm_ratio * fastest) for c, t in starts]

    def _second_start(self) -> bool:
        """After a warm start whose winner measures slower than the plan promised, search the
        winning subspace once more from the cold centre: the plan's point is one guess, and a
        wrong one leaves the lines in its local optimum."""
        if self.warm_start is None or self.best is None or any(j.probe is None for j in self.jobs):
            return False
        s = self.best[0].subspace
        promised = min((t for c, t in self.warm_start if c.subspace == s), default=None)
        if s not in self.space.subspaces or promised is None or self.best[1] <= promised * (1 + self.tolerance):
            return False
        center = self._index(self._cold_center(s))
        if any(j.subspace == s and j.center == center for j in self.jobs):
            return False
        self.jobs.append(_Job(s, center, probe=None))
        self.turn = len(self.jobs) - 1
        return True

    def _cold_center(self, s: Subspace) -> Config:
        """NCCL's default resources (or the middle of the grid), with the chunk no larger than one
        loop of a channel carries: every larger chunk runs the same single loop, a plateau on which
        no line search can find a direction."""
        grid = self.space.grid(s)
        if self.default is not None:
            nc, nt, chunk = self.default.nchannels, self.default.nthreads, self.default.chunk_bytes
        else:
            nc, nt = int(grid.nchannels[len(grid.nchannels) // 4]), grid.nthreads[-1]
            chunk = int(grid.chunks[nt][len(grid.chunks[nt]) // 2])
        chunk = min(chunk, max(1, round(self._loop_share(s, nc))))
        return self.space.nearest(Config(s.algo, s.proto, s.transport, nc, nt, chunk))

    def _index(self, config: Config) -> int:
        return self.space.candidates(config.subspace).index(config)

    def _config(self, job: _Job, i: int) -> Config:
        return self.space.candidates(job.subspace).config(i)

    def _job_score(self, job: _Job, i: int) -> float:
        return self.score(self._config(job, i))

    # -- one round --------------------------------------------------------------------------

    def _round(self, job: _Job) -> list[int]:
        """The next batch of ``job`` (empty: the job just stopped)."""
        if job.probe:
            if self._config(job, job.center) not in self.samples:
                return [job.center]
            job.probe = False
            if self._job_score(job, job.center) > self.screen_ratio * self.best[1]:
                job.status = "pruned"
                return []
        while True:
            if job.confirming:
                batch = [i for i in job.confirming if len(self.samples[self._config(job, i)]) < self.max_repeats]
                job.confirming = []
                if batch:
                    return batch
                self._finish_line(job, confirmed=True)
                continue
            if not job.line:
                if self._should_prune(job):
                    job.status = "pruned"
                    return []
                if job.stall >= self.directions or job.cycles >= self.max_cycles:
                    job.status = "done"
                    return []
                batch = self._start_line(job)
                if batch:
                    return batch
            batch = self._zoom(job)
            if batch:
                return batch
            self._finish_line(job, confirmed=False)

    def _values(self, job: _Job, axis: int) -> np.ndarray:
        """The values a line along ``axis`` can take; chunks stop at the first one that holds a
        channel's whole share of the message (larger ones run the same single loop)."""
        grid = self.space.grid(job.subspace)
        nc, nt, _ = self.space.candidates(job.subspace).points[job.center]
        if axis in (0, VALLEY):
            return np.asarray(grid.nchannels)
        if axis == 1:
            return np.asarray(grid.nthreads)
        chunks = np.asarray(grid.chunks[int(nt)])
        return chunks[:int(np.searchsorted(chunks, self.space.task.nbytes / nc)) + 1]

    def _point(self, job: _Job, axis: int, value: int) -> int:
        """The grid point of the centre with ``axis`` set to ``value`` (chunk snapped for NT)."""
        cands = self.space.candidates(job.subspace)
        nc, nt, chunk = (int(v) for v in cands.points[job.center])
        coords = [nc, nt, chunk]
        if axis == VALLEY:  # hold NC·C, C counted only up to what one loop of a channel carries
            coords = [int(value), nt, max(1, round(nc * min(chunk, self._loop_share(job.subspace, nc)) / int(value)))]
        else:
            coords[axis] = int(value)
        s = job.subspace
        return cands.index(cands.nearest(Config(s.algo, s.proto, s.transport, *coords)))

    def _loop_share(self, subspace: Subspace, nc: int) -> float:
        """The bytes one chunk of a channel can carry: a ring loop of AllReduce, AllGather or
        ReduceScatter moves ``nranks`` chunks, every other schedule one."""
        task = self.space.task
        rounds = subspace.algo in (Algo.RING, Algo.PAT) and task.op in (Op.ALLREDUCE, Op.ALLGATHER,
                                                                              Op.REDUCESCATTER)
        return task.nbytes / (nc * (task.nranks if rounds else 1))

    def _rungs(self, n: int, log: bool, center_pos: int) -> list[int]:
        if n <= self.ladder + 1:
            return list(range(n))
        if log:
            pos = np.unique(np.round(np.geomspace(1, n, self.ladder)).astype(int) - 1)
        else:
            pos = np.unique(np.round(np.linspace(0, n - 1, self.ladder)).astype(int))
        return sorted(set(pos.tolist()) | {center_pos})

    def _start_line(self, job: _Job) -> list[int]:
        values = self._values(job, job.axis)
        here = self.space.candidates(job.subspace).points[job.center][job.axis % 3]
        center_pos = int(np.argmin(np.abs(values - here)))
        job.line = {p: self._point(job, job.axis, values[p]) for p in self._rungs(len(values), job.axis != 1,
                                                                                   center_pos)}
        job.line[center_pos] = job.center
        batch = self._unmeasured(job, job.line.values())
        return sorted(batch, key=lambda i: i != job.center)  # the centre first (a warm start's plan point)

    def _unmeasured(self, job: _Job, points) -> list[int]:
        return sorted({i for i in points if self._config(job, i) not in self.samples})

    def _line_best(self, job: _Job) -> int:
        return min(job.line, key=lambda p: (self._job_score(job, job.line[p]), p))

    def _zoom(self, job: _Job) -> list[int]:
        """Midpoints of the bracket around the line's best, unless the bracket is closed or flat."""
        values = self._values(job, job.axis)
        positions = sorted(job.line)
        b = self._line_best(job)
        k = positions.index(b)
        best = self._job_score(job, job.line[b])
        batch = {}
        for other in positions[max(k - 1, 0):k] + positions[k + 1:k + 2]:
            if abs(other - b) <= 1:
                continue
            if self._job_score(job, job.line[other]) <= best * (1 + self.tolerance):
                continue  # flat between the two: nothing to gain within the noise
            mid = self._midpoint(values, b, other, log=job.axis != 1)
            if mid not in job.line:
                batch[mid] = self._point(job, job.axis, values[mid])
        job.line.update(batch)
        return self._unmeasured(job, batch.values())

    @staticmethod
    def _midpoint(values: np.ndarray, a: int, b: int, *, log: bool) -> int:
        lo, hi = min(a, b), max(a, b)
        target = math.sqrt(values[lo] * values[hi]) if log else (values[lo] + values[hi]) / 2
        mid = lo + 1 + int(np.argmin(np.abs(values[lo + 1:hi] - target)))
        return mid

    def _finish_line(self, job: _Job, *, confirmed: bool) -> None:
        """Move the centre to the line's best if it is faster beyond doubt (a move of less than
        ``tolerance`` is measured again first); then on to the next axis."""
        best = job.line[self._line_best(job)] if job.line else job.center
        center_score, best_score = self._job_score(job, job.center), self._job_score(job, best)
        moved = best != job.center and best_score < center_score
        if moved and best_score > center_score * (1 - self.tolerance) and not confirmed:
            job.confirming = [best, job.center]
            return
        if moved:
            job.center = best
        job.line = {}
        job.rounds += 1
        job.stall = 0 if moved else job.stall + 1
        job.axis = (job.axis + 1) % self.directions
        if job.axis == 0:
            job.cycles += 1

    def _should_prune(self, job: _Job) -> bool:
        if job.rounds == 0 or self.best is None:
            return False
        cands = self.space.candidates(job.subspace)
        mine = min(self.score(c) for c in self.samples if c.subspace == job.subspace
                   and cands.index(c) is not None)
        ratio = self.screen_ratio if job.rounds == 1 else self.prune_ratio
        return mine > ratio * self.best[1]

    # -- saving ---------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"stage": self.stage, "turn": self.turn, "jobs": [j.to_dict() for j in self.jobs]}

    def _load(self, state: dict[str, Any]) -> None:
        self.stage, self.turn = state["stage"], state["turn"]
        self.jobs = []
        for d in state["jobs"]:
            subspace = self._subspace_named(d["subspace"])
            job = _Job(subspace, **{k: d[k] for k in _Job.SAVED})
            job.line = {int(k): v for k, v in d["line"].items()}
            self.jobs.append(job)
