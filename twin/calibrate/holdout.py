"""Errors on points a fit did not see: the splits, the size regimes and the before/after table.

``Holdout(by="size", folds=3)`` is k-fold over message sizes: the distinct sizes in order are
dealt to the folds in turn (size 0 to fold 0, size 1 to fold 1, ...), so every fold spans the
whole range, and every point of one size (all its configs and repeats, every op and rank count)
is in one fold.  Each split fits on the other folds and scores the one left out
(``train_on="rest"``), or, for "calibrate on a third of the sizes, predict the rest", fits on
one fold and scores the others (``train_on="fold"``).  ``Holdout(by="gpus")`` leaves one GPU
count out (or, ``train_on="fold"``, fits on one GPU count and scores the others).

An error is nccl-tests' accuracy measure, the relative error of busbw: ``|measured / predicted
- 1|`` (busbw is inversely proportional to time), reported as the median per size regime.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from twin.calibrate.errors import CalibrationError
from twin.calibrate.points import Point
from twin.profile import HeldOutError

__all__ = ["ALL", "DEFAULT_HOLDOUT", "REGIMES", "Holdout", "Split", "busbw_errors", "error_rows", "heldout_score"]

KIB, MIB = 1 << 10, 1 << 20
REGIMES = (("< 64 KiB", 0, 64 * KIB), ("64 KiB - 1 MiB", 64 * KIB, MIB), (">= 1 MiB", MIB, math.inf))
"""Size regimes of the error table: latency-bound, between, bandwidth-bound."""
ALL = "all sizes"
MIN_TRAIN = 3
SCORE_FLOOR = 1e-6
"""Smallest median error (%) a score counts (an exact fit scores this, not zero)."""
"""Fewest points a split may fit on."""


def busbw_errors(measured_us: np.ndarray, predicted_us: np.ndarray) -> np.ndarray:
    """Relative busbw errors ``|measured / predicted - 1|`` (busbw ∝ 1 / time)."""
    return np.abs(np.asarray(measured_us) / np.asarray(predicted_us) - 1.0)


@dataclass(frozen=True)
class Split:
    """One fit of a held-out evaluation: the points it fits on and those it is scored on."""

    name: str
    train: tuple[int, ...]
    test: tuple[int, ...]


@dataclass(frozen=True)
class Holdout:
    """How held-out errors are measured (module docstring)."""

    by: str = "size"
    """``size`` (k-fold over message sizes) or ``gpus`` (one GPU count left out)."""
    folds: int = 3
    train_on: str = "rest"
    """``rest``: fit on all folds but one, score it; ``fold``: fit on one fold, score the rest."""

    def __post_init__(self) -> None:
        if self.by not in ("size", "gpus"):
            raise CalibrationError(f"held-out evaluation by {self.by!r}: expected 'size' or 'gpus'")
        if self.train_on not in ("rest", "fold"):
            raise CalibrationError(f"train_on {self.train_on!r}: expected 'rest' or 'fold'")
        if self.by == "size" and self.folds < 2:
            raise CalibrationError(f"{self.folds} fold(s): k-fold over sizes needs at least 2")

    def describe(self) -> str:
        """``3-fold over message sizes, fitted on 2 folds, scored on the third``, and the like."""
        if self.by == "size":
            what = f"{self.folds}-fold over message sizes"
            unit = "fold"
        else:
            what, unit = "one GPU count at a time", "GPU count"
        how = (f"fitted on one {unit}, scored on the others" if self.train_on == "fold"
               else f"fitted on the other {unit}s, scored on the one left out")
        return f"{what}, {how}"

    def splits(self, points: Sequence[Point]) -> list[Split]:
        """The splits of ``points``; ``CalibrationError`` when there are too few sizes, GPU counts
        or points for them."""
        if self.by == "size":
            keys = sorted({p.task.nbytes for p in points})
            if len(keys) < self.folds:
                raise CalibrationError(f"too few message sizes for {self.folds}-fold held-out evaluation: "
                                       f"{len(keys)} distinct size(s) in {len(points)} measurement(s)")
            fold_of = {size: i % self.folds for i, size in enumerate(keys)}
            folds = [tuple(i for i, p in enumerate(points) if fold_of[p.task.nbytes] == f) for f in range(self.folds)]
            names = [f"sizes fold {f + 1}/{self.folds}" for f in range(self.folds)]
        else:
            counts = sorted({p.task.nranks for p in points})
            if len(counts) < 2:
                raise CalibrationError(f"leave-one-GPU-count-out needs measurements on 2 or more GPU counts; "
                                       f"all {len(points)} are on {counts[0] if counts else 0} GPUs")
            folds = [tuple(i for i, p in enumerate(points) if p.task.nranks == n) for n in counts]
            names = [f"{n} GPUs" for n in counts]
        every = set(range(len(points)))
        out = []
        for name, fold in zip(names, folds, strict=True):
            rest = tuple(sorted(every - set(fold)))
            train, test = (fold, rest) if self.train_on == "fold" else (rest, fold)
            label = f"fit on {name}" if self.train_on == "fold" else f"{name} held out"
            if len(train) < MIN_TRAIN:
                raise CalibrationError(f"too few points to fit: split '{label}' would fit on {len(train)} "
                                       f"measurement(s) (at least {MIN_TRAIN}); {len(points)} in all")
            out.append(Split(label, train, test))
        return out


DEFAULT_HOLDOUT = Holdout()
"""3-fold over message sizes, fitted on two folds, scored on the third."""


def error_rows(sizes: Sequence[int], before: Sequence[float], after: Sequence[float],
               after_residual: Sequence[float] | None = None) -> tuple[HeldOutError, ...]:
    """Per regime with points, and for all sizes, the median of the relative errors given per
    scored prediction (``sizes`` aligned with them), as percentages."""
    rows = []
    for label, low, high in (*REGIMES, (ALL, 0, math.inf)):
        idx = [i for i, s in enumerate(sizes) if low <= s < high]
        if not idx:
            continue
        rows.append(HeldOutError(label, len(idx), _median(before, idx), _median(after, idx),
                                 None if after_residual is None else _median(after_residual, idx)))
    return tuple(rows)


def heldout_score(rows: Sequence[HeldOutError], key: str = "after_pct") -> float:
    """The geometric mean over the size regimes (not the all-sizes row) of their median error
    ``key`` (``before_pct``, ``after_pct``, ``after_residual_pct``; ``inf`` where it was not
    measured): every regime's relative change counts the same, however many sizes it has and
    however large its error (a regime the model misses by 200 % does not drown the others).

    >>> heldout_score([HeldOutError("< 64 KiB", 9, 16.0, 4.0), HeldOutError(">= 1 MiB", 3, 4.0, 1.0),
    ...                HeldOutError(ALL, 12, 9.0, 3.0)])
    2.0
    """
    values = [getattr(r, key) for r in rows if r.regime != ALL]
    if not values or None in values:
        return math.inf
    return math.exp(sum(math.log(max(v, SCORE_FLOOR)) for v in values) / len(values))


def _median(values: Sequence[float], idx: Sequence[int]) -> float:
    """The median of ``values[idx]``, as a percentage."""
    return 100 * statistics.median(values[i] for i in idx)
