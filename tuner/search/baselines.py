"""The baselines: NCCL's default, exhaustive enumeration (the twin's oracle) and random search."""

from __future__ import annotations

from typing import Any

import numpy as np

from tuner.config import Config
from tuner.search.base import Search
from tuner.space import ConfigSpace


class Default(Search):
    """NCCL's own config (supplied by the caller), measured ``repeat`` times."""

    name = "default"
    params = ("default", "repeat")

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None,
                 default: Config | None = None, repeat: int = 1):
        super().__init__(space, seed=seed, max_trials=max_trials)
        if default is None:
            raise ValueError("the default search needs NCCL's default config (default=...)")
        self.default = default
        self.repeat = repeat

    def _advance(self) -> None:
        if self.trials < self.repeat:
            self.pending = [self.default] * (self.repeat - self.trials)


class Exhaustive(Search):
    """Every config of the space, subspace by subspace, in grid order."""

    name = "exhaustive"

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None):
        super().__init__(space, seed=seed, max_trials=max_trials)
        self.cursor = [0, 0]  # subspace, index

    def _advance(self) -> None:
        s, i = self.cursor
        while s < len(self.space.subspaces):
            cands = self.space.candidates(self.space.subspaces[s])
            if i < cands.size:
                self.pending = [cands.config(i)]
                self.cursor = [s, i + 1]
                return
            s, i = s + 1, 0
        self.cursor = [s, i]

    def _state(self) -> dict[str, Any]:
        return {"cursor": self.cursor}

    def _load(self, state: dict[str, Any]) -> None:
        self.cursor = list(state["cursor"])


class RandomSearch(Search):
    """Configs drawn uniformly from the whole space without replacement, ``budget`` of them."""

    name = "random"
    params = ("budget",)

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None, budget: int = 200):
        super().__init__(space, seed=seed, max_trials=max_trials)
        self.budget = budget

    def _advance(self) -> None:
        if self.trials >= min(self.budget, self.space.size):
            return
        sizes = np.array([self.space.candidates(s).size for s in self.space.subspaces])
        while True:
            flat = int(self.rng.integers(sizes.sum()))
            s = int(np.searchsorted(np.cumsum(sizes), flat, side="right"))
            config = self.space.candidates(self.space.subspaces[s]).config(flat - int(sizes[:s].sum()))
            if config not in self.samples:
                self.pending = [config]
                return
