"""What every search shares: the propose/observe loop, the samples, the score, and saving.

A search proposes one config at a time and is told the time of each; ``propose`` returns
``None`` when the search is done.  Between any two calls its whole state is a JSON document
(``state_dict``) from which ``Search.from_state`` rebuilds a search that proposes exactly what
the original would have — the random generator's state is part of it — so a restarted job
resumes tuning where it stopped.  A failed run (a candidate that errors or times out) is
observed as ``math.inf`` and never wins.

Subclasses implement ``_advance`` (queue the next configs to measure, or none when done) and,
for their own fields, ``_state`` / ``_load``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from traces.errors import CcltwinError
from tuner.codec import config_from_dict, config_to_dict
from tuner.config import Config, Subspace
from tuner.space import ConfigSpace

STATE_VERSION = 1


class SearchStateError(CcltwinError):
    """A saved search state that does not belong to this search or space."""


def fastest_share_mean(samples: list[float], share: float = 0.75) -> float:
    """AutoCCL's score: the mean of the fastest ``ceil(share·n)`` samples.

    >>> fastest_share_mean([10.0, 11.0, 12.0, 30.0])
    11.0
    """
    ordered = sorted(samples)
    keep = ordered[:max(1, math.ceil(share * len(ordered)))]
    return sum(keep) / len(keep)


class Search:
    """Base of every search algorithm (see the module docstring)."""

    name: ClassVar[str] = ""
    params: ClassVar[tuple[str, ...]] = ()
    """Constructor keywords saved with the state (besides ``seed``)."""

    def __init__(self, space: ConfigSpace, *, seed: int = 0, max_trials: int | None = None):
        self.space = space
        self.seed = seed
        self.max_trials = max_trials
        self.rng = np.random.default_rng(seed)
        self.history: list[tuple[Config, float]] = []
        self.samples: dict[Config, list[float]] = {}
        self.scores: dict[Config, float] = {}
        """``score`` of every measured config, kept current."""
        self.pending: list[Config] = []
        self.done = False

    # -- the loop -------------------------------------------------------------------------

    def propose(self) -> Config | None:
        """The next config to measure, or ``None`` when the search is done."""
        if self.max_trials is not None and self.trials >= self.max_trials:
            self.done = True
        if not self.pending and not self.done:
            self._advance()
            self.done = not self.pending
        return None if self.done else self.pending[0]

    def observe(self, config: Config, time_us: float) -> None:
        """Record the time of the config ``propose`` returned (``math.inf``: the run failed)."""
        if not self.pending or config != self.pending[0]:
            expected = self.pending[0] if self.pending else "nothing (call propose first)"
            raise ValueError(f"observed {config}, but the search proposed {expected}")
        if not (time_us > 0 and not math.isnan(time_us)):
            raise ValueError(f"time_us must be > 0 (inf for a failed run), got {time_us}")
        self.pending.pop(0)
        self._record(config, float(time_us))

    def _record(self, config: Config, time_us: float) -> None:
        self.history.append((config, time_us))
        self.samples.setdefault(config, []).append(time_us)
        self.scores[config] = self._score(self.samples[config])

    @property
    def trials(self) -> int:
        """Measurements observed so far."""
        return len(self.history)

    def _score(self, samples: list[float]) -> float:
        """A config's score from its samples (AutoCCL's: mean of the fastest 75 %)."""
        return fastest_share_mean(samples)

    def score(self, config: Config) -> float:
        """What the search believes ``config`` takes (``inf`` if never measured)."""
        return self.scores.get(config, math.inf)

    @property
    def best(self) -> tuple[Config, float] | None:
        """The best config measured so far and its score (the first measured wins a tie);
        ``None`` before any successful run."""
        if not self.scores:
            return None
        config = min(self.scores, key=self.scores.__getitem__)
        score = self.scores[config]
        return (config, score) if math.isfinite(score) else None

    def _advance(self) -> None:
        """Queue the next configs in ``self.pending`` (leave it empty when done)."""
        raise NotImplementedError

    # -- saving ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as JSON-serialisable data."""
        return {
            "state_version": STATE_VERSION, "search": self.name, "space": self.space.fingerprint,
            "seed": self.seed, "max_trials": self.max_trials,
            "params": {p: _encode(getattr(self, p)) for p in self.params},
            "rng": self.rng.bit_generator.state, "done": self.done,
            "pending": [config_to_dict(c) for c in self.pending],
            "history": [[config_to_dict(c), t if math.isfinite(t) else None] for c, t in self.history],
            "algo": self._state(),
        }

    @classmethod
    def from_state(cls, space: ConfigSpace, state: dict[str, Any]) -> Search:
        """Rebuild the search ``state_dict`` described, on the same ``space``."""
        if state.get("state_version") != STATE_VERSION:
            raise SearchStateError(f"search state version {state.get('state_version')!r}; "
                                   f"this ccltwin reads version {STATE_VERSION}")
        if state.get("search") != cls.name:
            raise SearchStateError(f"the state is of search {state.get('search')!r}, not {cls.name!r}")
        if state.get("space") != space.fingerprint:
            raise SearchStateError("the state belongs to another config space (task, communicator or "
                                   "tunable knobs changed); start a new search")
        params = {p: _decode(v) for p, v in state["params"].items()}
        search = cls(space, seed=state["seed"], max_trials=state["max_trials"], **params)
        search.rng.bit_generator.state = state["rng"]
        for item in state["history"]:
            search._record(config_from_dict(item[0]), math.inf if item[1] is None else float(item[1]))
        search.pending = [config_from_dict(c) for c in state["pending"]]
        search.done = state["done"]
        search._load(state["algo"])
        return search

    def _state(self) -> dict[str, Any]:
        return {}

    def _load(self, state: dict[str, Any]) -> None:
        """Restore the fields ``_state`` saved."""

    def _subspace_named(self, names: list[str]) -> Subspace:
        """The space's subspace that ``subspace_names`` wrote as ``names``."""
        return next(s for s in self.space.subspaces if subspace_names(s) == names)


def subspace_names(subspace: Subspace) -> list[str]:
    """``[algo, proto, transport]``: how a saved state names a subspace."""
    return [str(subspace.algo), str(subspace.proto), str(subspace.transport)]


def _encode(value: Any) -> Any:
    """Constructor parameters as JSON: configs as objects, warm starts as [config, time] pairs."""
    if isinstance(value, Config):
        return {"config": config_to_dict(value)}
    if isinstance(value, list | tuple) and value and isinstance(value[0], tuple | list) \
            and isinstance(value[0][0], Config):
        return {"warm_start": [[config_to_dict(c), t] for c, t in value]}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "config" in value:
        return config_from_dict(value["config"])
    if isinstance(value, dict) and "warm_start" in value:
        return [(config_from_dict(c), float(t)) for c, t in value["warm_start"]]
    return value
