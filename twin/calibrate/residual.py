"""What the physics leaves: a residual model over message size, used only inside what it saw.

After the bounded fit some structure the model lacks can remain (a host enqueue cost that grows
with channels, an old NCCL's kernels): errors that vary smoothly with message size for one kind
of call.  ``ResidualModel`` keeps the log errors ``log(measured / predicted)`` of the fitted
points per *call kind* (op, ranks, GPUs per process, algorithm, protocol) and predicts a
correction for a new call of the same kind by k-nearest-neighbour regression over log2 size
(scikit-learn's ``KNeighborsRegressor``, distance-weighted: between two measured sizes it blends
their errors, at a measured size it returns that size's).

It never extrapolates: a call of a kind it did not see, or of a size outside the sizes seen for
its kind, gets no correction, and ``correction`` says so (``None``).  ``calibrate`` keeps the
model only when it lowers the held-out error, and a profile stores its points, so a loaded model
is the fitted one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tuner.config import Config
from twin.calibrate.errors import CalibrationError
from twin.calibrate.points import Point

__all__ = ["NEIGHBOURS", "ResidualModel", "call_kind"]

NEIGHBOURS = 2
"""Neighbours each correction blends (sizes on either side)."""


def call_kind(point: Point, config: Config) -> str:
    """The kind of call a residual is kept for: ``allreduce 8r 1g ring/simple``."""
    t = point.task
    return f"{t.op} {t.nranks}r {point.gpus_per_process}g {config.algo}/{config.proto}"


@dataclass(frozen=True)
class ResidualModel:
    """Log errors left after the fit, by call kind (module docstring)."""

    rows: tuple[tuple[str, float, float], ...]
    """``(call kind, log2 size, log(measured / predicted))`` of every fitted point."""
    neighbours: int = NEIGHBOURS
    _models: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @classmethod
    def of(cls, points: Sequence[Point], configs: Sequence[Config], log_errors: np.ndarray) -> ResidualModel:
        """The model of ``points`` (run with ``configs``) whose predictions were off by ``log_errors``
        (``log(predicted / measured)``, as ``TwinModel.log_errors`` gives them)."""
        return cls(tuple((call_kind(p, c), math.log2(p.task.nbytes), float(-e))
                         for p, c, e in zip(points, configs, log_errors, strict=True)))

    @cached_property
    def domain(self) -> dict[str, tuple[int, int]]:
        """Per call kind, the smallest and largest message size seen."""
        out: dict[str, tuple[float, float]] = {}
        for kind, size, _ in self.rows:
            low, high = out.get(kind, (size, size))
            out[kind] = (min(low, size), max(high, size))
        return {k: (round(2 ** lo), round(2 ** hi)) for k, (lo, hi) in out.items()}

    def correction(self, point: Point, config: Config) -> float | None:
        """The factor to multiply the twin's time of ``point`` by, or ``None`` outside the kinds
        and sizes the model saw (no correction: the physics alone)."""
        kind = call_kind(point, config)
        span = self.domain.get(kind)
        if span is None or not span[0] <= point.task.nbytes <= span[1]:
            return None
        if kind not in self._models:
            from sklearn.neighbors import KNeighborsRegressor

            sizes = np.array([[s] for k, s, _ in self.rows if k == kind])
            errors = np.array([e for k, _, e in self.rows if k == kind])
            knn = KNeighborsRegressor(n_neighbors=min(self.neighbours, len(sizes)), weights="distance")
            self._models[kind] = knn.fit(sizes, errors)
        return float(math.exp(self._models[kind].predict([[math.log2(point.task.nbytes)]])[0]))

    def to_dict(self) -> dict:
        return {"model": "knn-log2-size", "neighbours": self.neighbours,
                "rows": [[kind, round(size, 6), round(error, 6)] for kind, size, error in self.rows]}

    @classmethod
    def from_dict(cls, obj: dict, where: str = "residual") -> ResidualModel:
        if not isinstance(obj, dict) or obj.get("model") != "knn-log2-size":
            raise CalibrationError(f"{where}: not a residual model this ccltwin reads (expected model "
                                   f"'knn-log2-size', got {obj.get('model') if isinstance(obj, dict) else obj!r:.40})")
        try:
            rows = tuple((str(k), float(s), float(e)) for k, s, e in obj["rows"])
            return cls(rows, int(obj["neighbours"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CalibrationError(f"{where}: malformed residual model ({err})") from None
