"""``calibrate``: measurements of one cluster in, the twin's fitted constants and their proof out.

Picture a 2-node H200 cluster whose nccl-tests logs and live tuning trials sit in a store.
``calibrate(read_points(["tuning.db"]), load_cluster("hgx-h200", nodes=2), prior=type_profile)``

1. checks the measurements (``twin.calibrate.checks``: another cluster's log, busbw above what
   the links carry, too few points, contradicting repeats);
2. times every measured call through the twin's own model (``twin.calibrate.model``);
3. measures what a fit would do on points it does not see: per split of ``holdout`` (k-fold
   over sizes by default), fits on the training points only and scores the others, before
   (the prior) and after, per size regime; with ``residual``, also with a residual model
   (``twin.calibrate.residual``) fitted on the same training points on top;
4. refuses the fit (``CalibrationResult.refused``; ``save`` then writes nothing) when its
   held-out score, the geometric mean over the size regimes of their median error (each
   regime's relative change counts the same, ``holdout.heldout_score``), is not lower than the
   prior's, or when one regime gets worse than ``WORSE`` times its error before plus
   ``WORSE_POINTS`` (an average gain bought with one regime is no improvement); keeps the residual
   model only when it brings that score below ``RESIDUAL_GAIN`` of the physics fit's;
5. otherwise fits on every point (``twin.calibrate.fit``) and returns the constants with a
   profile's provenance: the cluster, sources, points, NCCL, date, what moved and by how much,
   what was held and why, the held-out table and the profiles it was stacked on.

``prior`` may be a ``Profile`` (a cluster-type profile: its constants are the prior and its
provenance the first layer of the new profile's stack), plain ``TwinParams``, or ``None``
(``DEFAULT_PARAMS``).  ``start`` (the last fit of an incremental refit) is where the optimiser
starts; the prior stays the prior.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from os import PathLike

import numpy as np

from tuner.measurement import Measurement
from twin.calibrate.checks import check_points, check_units
from twin.calibrate.errors import CalibrationRefused
from twin.calibrate.fit import FitOutcome, fit
from twin.calibrate.holdout import ALL, DEFAULT_HOLDOUT, Holdout, busbw_errors, error_rows, heldout_score
from twin.calibrate.model import TwinModel
from twin.calibrate.points import Point, points_of
from twin.calibrate.report import changes_lines, heldout_table
from twin.calibrate.residual import ResidualModel
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.profile import HeldOutError, HeldParam, ParamChange, Profile, ProfileMeta, save_profile
from twin.topology import Cluster

__all__ = ["RESIDUAL_GAIN", "WORSE", "WORSE_POINTS", "CalibrationResult", "HeldOutPrediction", "calibrate"]

RESIDUAL_GAIN = 0.9
"""The residual model is kept only when it brings the held-out error below this share of the
physics fit's."""
WORSE = 1.1
WORSE_POINTS = 1.0
"""A size regime whose held-out error rises above ``WORSE`` times the prior's plus ``WORSE_POINTS``
percentage points refuses the fit."""


@dataclass(frozen=True)
class HeldOutPrediction:
    """One held-out point as one split scored it: relative busbw errors before and after."""

    where: str
    nbytes: int
    split: str
    predicted_us: float
    """The time the split's fit predicts (the physics, without a residual model)."""
    before: float
    after: float
    after_residual: float | None
    """With the residual model of that split (``None`` when none was tried)."""


@dataclass(frozen=True)
class CalibrationResult:
    """What ``calibrate`` found (module docstring)."""

    params: TwinParams
    """The fitted constants; the prior's when the fit was refused."""
    prior: TwinParams
    heldout: tuple[HeldOutError, ...]
    """Held-out errors per size regime, the last row over all sizes."""
    holdout: str
    profile_meta: ProfileMeta
    refused: str | None = None
    """Why no profile may be written; ``None`` when the fit is accepted."""
    outcome: FitOutcome | None = None
    """The final fit on every point (``None`` when refused)."""
    residual: ResidualModel | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    predictions: tuple[HeldOutPrediction, ...] = ()
    """Every scored held-out prediction (a point scored by several splits appears once per split)."""

    @property
    def accepted(self) -> bool:
        return self.refused is None

    def table(self) -> str:
        """The held-out errors before and after, per size regime."""
        return heldout_table(self.heldout, self.holdout)

    def report(self) -> str:
        """Everything ``ccltwin calibrate`` prints: verdict, table, what moved and was held,
        warnings and notes."""
        meta = self.profile_meta
        verdict = (f"REFUSED, no profile written: {self.refused}" if self.refused else
                   f"accepted: {len(meta.changes)} constant(s) moved")
        lines = [f"calibration of {meta.hardware} on {meta.points} measurement(s) from "
                 f"{', '.join(meta.sources) or 'memory'}: {verdict}", self.table()]
        if self.accepted:
            lines += changes_lines(meta.changes, meta.held)
            if self.outcome is not None and self.outcome.at_bounds:
                lines.append(f"at the wall of their plausible range (the data wanted them further; a mechanism the "
                             f"twin lacks?): {', '.join(self.outcome.at_bounds)}")
            lines.append(f"residual model: {len(self.residual.rows)} points, applied only inside the sizes, ops and "
                         "GPU counts it saw" if self.residual else "residual model: not kept (the physics alone)")
        lines += [f"warning: {w}" for w in self.warnings] + [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def save(self, path: str | PathLike[str]) -> None:
        """Write the profile; raises ``CalibrationRefused`` (nothing written) when refused."""
        if self.refused:
            raise CalibrationRefused(f"{path}: not written: {self.refused}")
        save_profile(self.params, path, meta=self.profile_meta,
                     residual=None if self.residual is None else self.residual.to_dict())


def calibrate(measurements: Sequence[Point | Measurement], cluster: Cluster, *,
              prior: TwinParams | Profile | None = None, holdout: Holdout = DEFAULT_HOLDOUT,
              parameters: Sequence[str] | None = None, residual: bool = True,
              nccl_version: tuple[int, int, int] | None = None, sources: Sequence[str] = (),
              start: TwinParams | None = None, notes: str = "") -> CalibrationResult:
    """Fit the twin's constants for ``cluster`` to ``measurements`` (module docstring).

    ``measurements`` are ``Point``s (``read_points``) or plain ``Measurement``s (one process
    per GPU); ``parameters`` the constants the fit may move (default ``space.DEFAULT_FREE``);
    ``nccl_version`` the NCCL release whose choices are emulated (default: each measurement's).
    Raises ``CalibrationError`` naming the records for bad input.
    """
    points = [m for m in measurements if isinstance(m, Point)]
    points += points_of([m for m in measurements if not isinstance(m, Point)], "measurements")
    prior_params, stack = _prior(prior)
    points, warnings = check_points(points, cluster)
    model = TwinModel(cluster, points, nccl_version=nccl_version)
    before_us = model.times(prior_params)
    check_units(points, before_us)
    measured = model.measured_us
    sizes, before, after, corrected, scored = [], [], [], [], []
    outside = 0
    for split in holdout.splits(points):
        train, test = np.array(split.train), np.array(split.test)
        fitted = fit(lambda p, train=train: model.log_errors(p, train), prior_params, parameters, start=start)
        after_us = model.times(fitted.params)
        sizes += [points[i].task.nbytes for i in test]
        before += list(busbw_errors(measured[test], before_us[test]))
        after += list(busbw_errors(measured[test], after_us[test]))
        if residual:
            kept = ResidualModel.of([points[i] for i in train], [model.configs[i] for i in train],
                                    model.log_errors(fitted.params, train))
            factors = [kept.correction(points[i], model.configs[i]) for i in test]
            outside += sum(f is None for f in factors)
            fixed = after_us[test] * np.array([1.0 if f is None else f for f in factors])
            corrected += list(busbw_errors(measured[test], fixed))
        scored += [(points[i].where, points[i].task.nbytes, split.name, float(after_us[i])) for i in test]
    predictions = tuple(HeldOutPrediction(*where, float(b), float(a), float(c) if residual else None)
                        for where, b, a, c in zip(scored, before, after, corrected if residual else before,
                                                  strict=True))
    rows = error_rows(sizes, before, after, corrected if residual else None)
    score = {key: heldout_score(rows, key) for key in ("before_pct", "after_pct", "after_residual_pct")}
    notes_out = list(model.notes)
    if residual and outside:
        notes_out.append(f"the residual model saw no call like {outside} of {len(sizes)} held-out predictions "
                         "(another op, GPU count, algorithm or protocol, or a size outside those seen): "
                         "those got the physics alone")
    worse = [r for r in rows if r.regime != ALL and r.after_pct > WORSE * r.before_pct + WORSE_POINTS]
    use_residual = residual and score["after_residual_pct"] < RESIDUAL_GAIN * score["after_pct"]
    meta = ProfileMeta(hardware=cluster.identity, nccl_version=_versions(points), sources=tuple(map(str, sources)),
                       created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), points=len(points),
                       holdout=holdout.describe(), heldout=rows, stack=stack, notes=_notes(points, notes))
    common = dict(prior=prior_params, heldout=rows, holdout=holdout.describe(), warnings=tuple(warnings),
                  notes=tuple(notes_out), predictions=predictions)
    reason = None
    if score["after_pct"] >= score["before_pct"]:
        reason = (f"the fit does not lower the held-out error (geometric mean of the size regimes' medians: "
                  f"{score['before_pct']:.1f} % before, {score['after_pct']:.1f} % after)")
    elif worse:
        reason = "the fit makes held-out errors worse " + ", ".join(
            f"{r.regime} ({r.before_pct:.1f} % before, {r.after_pct:.1f} % after)" for r in worse)
    if reason:
        return CalibrationResult(params=prior_params, profile_meta=meta, refused=reason, **common)
    final = fit(lambda p: model.log_errors(p), prior_params, parameters, start=start)
    values, fitted_values = prior_params.to_dict(), final.params.to_dict()
    changes = tuple(ParamChange(n, values[n], fitted_values[n]) for n in final.free)
    meta = replace(meta, moved=final.free, changes=changes, held=tuple(HeldParam(h.name, h.reason) for h in final.held))
    kept = (ResidualModel.of(points, model.configs, model.log_errors(final.params)) if use_residual else None)
    return CalibrationResult(params=final.params, profile_meta=meta, outcome=final, residual=kept, **common)


def _prior(prior: TwinParams | Profile | None) -> tuple[TwinParams, tuple[ProfileMeta, ...]]:
    if prior is None:
        return DEFAULT_PARAMS, ()
    if isinstance(prior, Profile):
        return prior.params, prior.meta.stacked()
    return prior, ()


def _versions(points: Sequence[Point]) -> str:
    return ", ".join(sorted({p.measurement.nccl_version for p in points if p.measurement.nccl_version}))


def _notes(points: Sequence[Point], notes: str) -> str:
    measured_on = sorted({p.measurement.hardware for p in points})
    text = f"measured on: {'; '.join(measured_on)}"
    return f"{notes}; {text}" if notes else text
