"""An AFNFA-style offline tuner (APNet '23, as AutoCCL evaluated it): a random forest fitted on
about 1 % of the space, sampled offline, then the predicted best configs verified.

AutoCCL's paper reproduces AFNFA by "training a random forest on 1 % of offline-sampled data"
(research/autoccl-anchors.md §3).  Here: ``samples`` configs drawn uniformly from the space
(default 1 % of it, at most ``max_samples``), a ``RandomForestRegressor`` on
(algo, proto, transport, channels, threads, log2 chunk) → log time, the predicted best
``verify`` configs of a random pool of ``pool`` configs measured, and the fastest of everything
measured wins.  Predicting every one of millions of configs costs minutes per task on a
2-core machine, hence the pool; the forest's resolution is far coarser than the pool anyway.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tuner.codec import config_from_dict, config_to_dict
from tuner.config import Config
from tuner.search.base import Search
from tuner.space import ConfigSpace


class Afnfa(Search):
    """Random-forest model of the space from offline samples (module docstring)."""

    name = "afnfa"
    params = ("sample_fraction", "max_samples", "pool", "verify", "n_estimators")

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None,
                 sample_fraction: float = 0.01, max_samples: int = 4096, pool: int = 200_000, verify: int = 5,
                 n_estimators: int = 30):
        super().__init__(space, seed=seed, max_trials=max_trials)
        self.sample_fraction = sample_fraction
        self.max_samples = max_samples
        self.pool = pool
        self.verify = verify
        self.n_estimators = n_estimators
        self.stage = "sample"  # sample | verify | done
        self.plan: list[Config] = []

    @property
    def n_samples(self) -> int:
        return max(8, min(self.max_samples, math.ceil(self.sample_fraction * self.space.size)))

    def _advance(self) -> None:
        if self.stage == "sample":
            self.stage = "verify"
            self.pending = self._draw(min(self.n_samples, self.space.size))
            return
        if self.stage == "verify":
            self.stage = "done"
            self.pending = self._predicted_best()

    def _draw_points(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` distinct configs drawn uniformly over the whole space, as (subspace, index) arrays."""
        sizes = np.array([self.space.candidates(s).size for s in self.space.subspaces])
        flat = self.rng.choice(int(sizes.sum()), size=n, replace=False)
        ends = np.cumsum(sizes)
        which = np.searchsorted(ends, flat, side="right")
        return which, flat - (ends - sizes)[which]

    def _draw(self, n: int) -> list[Config]:
        which, local = self._draw_points(n)
        return [self.space.candidates(self.space.subspaces[s]).config(int(i))
                for s, i in zip(which, local, strict=True)]

    def _features(self, which: np.ndarray, local: np.ndarray) -> np.ndarray:
        """(algo, proto, transport, channels, threads, log2 chunk) of each (subspace, index) point."""
        rows = np.zeros((len(which), 6))
        for s_i, s in enumerate(self.space.subspaces):
            mask = which == s_i
            points = self.space.candidates(s).points[local[mask]]
            rows[mask, :3] = [s.algo.nccl_index, s.proto.nccl_index, list(type(s.transport)).index(s.transport)]
            rows[mask, 3:5] = points[:, :2]
            rows[mask, 5] = np.log2(points[:, 2])
        return rows

    def _locate(self, configs: list[Config]) -> tuple[np.ndarray, np.ndarray]:
        subspaces = {s: i for i, s in enumerate(self.space.subspaces)}
        which = np.array([subspaces[c.subspace] for c in configs])
        local = np.array([self.space.candidates(c.subspace).index(c) for c in configs])
        return which, local

    def _predicted_best(self) -> list[Config]:
        from sklearn.ensemble import RandomForestRegressor

        measured = [(c, min(s)) for c, s in self.samples.items() if math.isfinite(min(s))]
        if not measured:
            return []
        model = RandomForestRegressor(n_estimators=self.n_estimators, min_samples_leaf=2, n_jobs=1,
                                      random_state=int(self.rng.integers(2**31)))
        model.fit(self._features(*self._locate([c for c, _ in measured])), np.log([t for _, t in measured]))
        which, local = self._draw_points(min(self.pool, self.space.size))
        order = np.argsort(model.predict(self._features(which, local)), kind="stable")[:self.verify]
        self.plan = [self.space.candidates(self.space.subspaces[which[i]]).config(int(local[i])) for i in order]
        return list(self.plan)

    def _state(self) -> dict[str, Any]:
        return {"stage": self.stage, "plan": [config_to_dict(c) for c in self.plan]}

    def _load(self, state: dict[str, Any]) -> None:
        self.stage = state["stage"]
        self.plan = [config_from_dict(c) for c in state["plan"]]
