"""Bounded least squares on the twin's own constants, moving only those the data can identify.

``fit`` takes a function from ``TwinParams`` to the log errors ``log(predicted / measured)`` of
the points being fitted, and works in the coordinates of ``twin.calibrate.space`` (relative to the
prior, within plausible ranges).  Before it moves anything it asks which constants the data can
identify, from the Jacobian of the errors at the prior (finite differences of ``STEP``):

* a constant the predictions barely depend on (a factor of two moves them by less than
  ``SENSITIVITY_MIN`` rms) is held at its prior: "the measurements do not depend on it";
* of the rest, constants are taken greedily (orthogonal matching pursuit): first the one whose
  effect, orthogonal to those taken, explains most of the remaining error (errors clipped at
  ``3 DATA_SIGMA``, so that one wild point does not choose); one whose Jacobian column is at least
  ``1 - COLLINEAR_TOL`` explained by those taken is held: the data moves the predictions the same
  way for both, so it cannot tell them apart, and the message names the constant it shadows;
* a constant that the error would push through the wall of its plausible range it already sits
  on is held (the data asks for what the physics does not allow);
* at most one constant per ``POINTS_PER_PARAMETER`` points is moved ("too few points").

Then ``scipy.optimize.least_squares`` (trust-region reflective, with the walls of the plausible
ranges as bounds) minimises the errors in units of ``DATA_SIGMA`` under a soft-L1 loss, so that a
few outliers (a straggling run, a noisy cloud fabric) do not pull the fit, plus the Gaussian prior
of ``space.PRIOR_SIGMA`` on every moved constant.  Constants that become identifiable once the
others have moved (a link that binds only after the CTA rate rose) are found by asking again at
the fitted point, once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from twin.calibrate.space import PRIOR_SIGMA, FitSpace
from twin.params import TwinParams

__all__ = ["COLLINEAR_TOL", "DATA_SIGMA", "POINTS_PER_PARAMETER", "SENSITIVITY_MIN", "FitOutcome", "Held", "fit"]

STEP = 0.05
"""Finite-difference step of the identifiability Jacobian, in ``log(value / prior)``: 5 %, wide
enough to see through the model's kinks (a step's time is the larger of transfer and latency)."""
SENSITIVITY_MIN = 0.002
"""Rms change of the log predictions per factor-of-two change of a constant below which the data
is taken not to depend on it (0.2 %)."""
COLLINEAR_TOL = 0.1
"""Share of a constant's Jacobian column that the constants already moved must leave unexplained
for it to be moved too."""
POINTS_PER_PARAMETER = 3
"""Measurements needed per moved constant."""
DATA_SIGMA = 0.05
"""A measurement's typical relative error against the model (5 %): the unit of the residuals,
and where the soft-L1 loss turns from quadratic to linear."""


@dataclass(frozen=True)
class Held:
    """A constant the fit left at its prior, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class FitOutcome:
    """What ``fit`` found."""

    params: TwinParams
    free: tuple[str, ...]
    """The constants it moved."""
    held: tuple[Held, ...]
    """The candidates it left at their prior, with the reason."""
    sensitivity: dict[str, float]
    """Per candidate, the rms change (as a fraction) of the predictions for a factor-of-two change."""
    at_bounds: tuple[str, ...]
    """Moved constants that ended on a wall of their plausible range (the data wanted more:
    a mechanism the model lacks, or a wrong prior)."""
    rms_before: float
    rms_after: float
    """Rms log error of the fitted points before and after."""
    evaluations: int


def fit(errors: Callable[[TwinParams], np.ndarray], prior: TwinParams, names: Sequence[str] | None = None, *,
        start: TwinParams | None = None) -> FitOutcome:
    """Fit the constants ``names`` (default ``space.DEFAULT_FREE``) of ``prior`` to ``errors``.

    ``start`` (a previous fit, for an incremental refit) is where the moved constants start from;
    held constants stay at ``prior``.
    """
    space = FitSpace.of(prior, names)
    counter = [0]

    def counted(params: TwinParams) -> np.ndarray:
        counter[0] += 1
        return errors(params)

    base = counted(prior)
    low, high = space.bounds()
    # A prior outside its plausible range starts at the nearest wall.
    x_start = space.x(start) if start is not None else np.clip(np.zeros(len(space.names)), low, high)
    x = np.zeros(len(space.names))
    chosen: list[str] = []
    held: dict[str, str] = {}
    sensitivity: dict[str, float] = {}
    for attempt in range(2):
        at = x if attempt else x_start
        jac, error = _jacobian(counted, space, at, low, high)
        sensitivity = {name: float(np.sqrt(np.mean(jac[:, j] ** 2)) * math.log(2))
                       for j, name in enumerate(space.names)}
        picked, held = _identifiable(jac, error, space.names, at, low, high, sensitivity,
                                     seed=[space.names.index(c) for c in chosen])
        if attempt and picked == chosen:
            break
        chosen = picked
        x = _least_squares(counted, space, chosen, x if attempt else x_start, low, high)
    params = space.params(x)
    after = counted(params)
    return FitOutcome(params=params, free=tuple(chosen), held=tuple(Held(k, v) for k, v in held.items()),
                      sensitivity=sensitivity, at_bounds=tuple(n for n in space.at_bounds(x) if n in chosen),
                      rms_before=float(np.sqrt(np.mean(base ** 2))), rms_after=float(np.sqrt(np.mean(after ** 2))),
                      evaluations=counter[0])


def _jacobian(errors, space: FitSpace, x: np.ndarray, low: np.ndarray, high: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Forward differences of ``errors`` in each coordinate of ``x`` (backward at an upper wall),
    and the errors at ``x``."""
    e0 = errors(space.params(x))
    jac = np.zeros((len(e0), len(x)))
    for j in range(len(x)):
        if high[j] - low[j] < 1e-9:
            continue
        h = STEP if x[j] + STEP <= high[j] else -STEP
        moved = x.copy()
        moved[j] += h
        jac[:, j] = (errors(space.params(moved)) - e0) / h
    return jac, e0


def _identifiable(jac: np.ndarray, error: np.ndarray, names: tuple[str, ...], x: np.ndarray, low: np.ndarray,
                  high: np.ndarray, sensitivity: dict[str, float], seed: Sequence[int] = ()
                  ) -> tuple[list[str], dict[str, str]]:
    """The constants to move and why each other one is held (module docstring); the constants
    ``seed`` (moved already) are taken first while the data still identifies them."""
    held: dict[str, str] = {}
    target = -np.clip(error, -3 * DATA_SIGMA, 3 * DATA_SIGMA)
    candidates = []
    for j, name in enumerate(names):
        push = jac[:, j] @ target  # > 0: the error asks for a larger value
        if high[j] - low[j] < 1e-9:
            held[name] = "its plausible range is its prior alone (at the edge of its valid range)"
        elif sensitivity[name] < SENSITIVITY_MIN:
            held[name] = (f"the measurements do not depend on it (a factor of two moves them by "
                          f"{100 * sensitivity[name]:.2g} % rms)")
        elif j not in seed and ((push > 0 and high[j] - x[j] < 1e-6) or (push < 0 and x[j] - low[j] < 1e-6)):
            held[name] = (f"the data asks for it {'above' if push > 0 else 'below'} its plausible range, where it "
                          "sits already: a mechanism the twin lacks, not this constant")
        else:
            candidates.append(j)
    limit = max(1, len(error) // POINTS_PER_PARAMETER)
    basis: list[np.ndarray] = []
    kept: list[int] = []
    while candidates and len(kept) < limit:
        left = {j: _orthogonal(jac[:, j], basis) for j in candidates}
        able = [j for j in candidates if np.linalg.norm(left[j]) >= COLLINEAR_TOL * np.linalg.norm(jac[:, j])]
        if not able:
            break
        seeded = [j for j in seed if j in able]
        residual = _orthogonal(target, basis)
        best = seeded[0] if seeded else max(able, key=lambda j: abs(left[j] @ residual) / np.linalg.norm(left[j]))
        kept.append(best)
        basis.append(left[best] / np.linalg.norm(left[best]))
        candidates.remove(best)
    for j in candidates:
        if np.linalg.norm(_orthogonal(jac[:, j], basis)) >= COLLINEAR_TOL * np.linalg.norm(jac[:, j]):
            held[names[j]] = (f"too few points: {len(error)} measurements move at most {limit} constant(s) "
                              f"({POINTS_PER_PARAMETER} points each), and it explains less of the error than those")
        else:
            k = max(kept, key=lambda k: abs(_correlation(jac[:, j], jac[:, k])))
            held[names[j]] = (f"the constants moved already explain what it does to these predictions "
                              f"(most like {names[k]}, correlation {_correlation(jac[:, j], jac[:, k]):+.2f}): "
                              "the data cannot tell them apart")
    return [names[j] for j in sorted(kept)], held


def _orthogonal(v: np.ndarray, basis: list[np.ndarray]) -> np.ndarray:
    """``v`` less its projection on the orthonormal ``basis``."""
    return v - sum((b @ v) * b for b in basis) if basis else v


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _least_squares(errors, space: FitSpace, chosen: list[str], x0: np.ndarray, low: np.ndarray,
                   high: np.ndarray) -> np.ndarray:
    """``x`` with the ``chosen`` coordinates fitted and the others at the prior (0)."""
    idx = [space.names.index(name) for name in chosen]
    if not idx:
        return np.zeros(len(space.names))

    def full(z: np.ndarray) -> np.ndarray:
        x = np.zeros(len(space.names))
        x[idx] = z
        return x

    def residuals(z: np.ndarray) -> np.ndarray:
        return np.concatenate([errors(space.params(full(z))) / DATA_SIGMA, z / PRIOR_SIGMA])

    lo, hi = low[idx], high[idx]
    # Start inside the walls: trust-region reflective barely moves anything from a start on one.
    z0 = np.clip(x0[idx], lo + 0.01 * (hi - lo), hi - 0.01 * (hi - lo))
    result = least_squares(residuals, z0, bounds=(lo, hi), loss="soft_l1", f_scale=1.0, diff_step=1e-3,
                           x_scale=1.0, max_nfev=100 * (len(idx) + 1))
    return full(result.x)
