"""Text a calibration prints: the held-out table, what moved and what was held, a profile's story.

``show_profile`` is what ``ccltwin calibrate --show profile.json`` prints: the cluster, what the
profile was fitted on (sources, points, NCCL, when), the held-out errors before and after, every
moved constant with its prior and fitted value, every constant held and why, the layers it was
stacked on, and the residual model's domain.
"""

from __future__ import annotations

from collections.abc import Sequence

from twin.calibrate.holdout import heldout_score
from twin.calibrate.residual import ResidualModel
from twin.params import TwinParams
from twin.profile import HeldOutError, HeldParam, ParamChange, Profile, ProfileMeta

__all__ = ["changes_lines", "heldout_table", "show_profile"]


def heldout_table(rows: Sequence[HeldOutError], holdout: str) -> str:
    """The held-out errors per size regime, before and after (and with the residual model)."""
    residual = any(r.after_residual_pct is not None for r in rows)
    head = f"{'size regime':<16} {'points':>6} {'before':>8} {'after':>8}" + (f" {'+residual':>9}" if residual else "")
    lines = [f"held-out median |busbw error| ({holdout}):", head]
    for r in rows:
        extra = (f" {r.after_residual_pct:>8.1f}%" if r.after_residual_pct is not None
                 else " " * 10 if residual else "")
        lines.append(f"{r.regime:<16} {r.points:>6} {r.before_pct:>7.1f}% {r.after_pct:>7.1f}%{extra}")
    scores = [heldout_score(rows, key) for key in ("before_pct", "after_pct", "after_residual_pct")]
    tail = f" {scores[2]:>8.1f}%" if residual else ""
    lines.append(f"{'score':<16} {'':>6} {scores[0]:>7.1f}% {scores[1]:>7.1f}%{tail}  "
                 "(geometric mean of the regimes' medians: what the verdict compares)")
    return "\n".join(lines)


def changes_lines(changes: Sequence[ParamChange], held: Sequence[HeldParam]) -> list[str]:
    """One line per moved constant (prior → fitted, unit) and per held one (why)."""
    units = TwinParams.units()
    lines = [f"moved ({len(changes)}):"] if changes else ["moved: none"]
    width = max([len(c.name) for c in changes] or [0])
    for c in changes:
        lines.append(f"  {c.name:<{width}}  {c.before:.4g} -> {c.after:.4g} {units[c.name]} "
                     f"({100 * c.relative:+.1f} %)")
    if held:
        lines.append(f"held at the prior ({len(held)}):")
        unseen = [h.name for h in held if h.reason.startswith(_INSENSITIVE)]
        if unseen:  # the data does not see them at all: one line
            lines.append(f"  {_INSENSITIVE}: {', '.join(unseen)}")
        lines += [f"  {h.name}: {h.reason}" for h in held if not h.reason.startswith(_INSENSITIVE)]
    return lines


_INSENSITIVE = "the measurements do not depend on it"


def _layer_line(meta: ProfileMeta) -> str:
    sources = ", ".join(meta.sources) or "no sources recorded"
    points = f"{meta.points} points" if meta.points is not None else "points not recorded"
    return (f"{meta.hardware or 'unknown hardware'}, {points}, NCCL {meta.nccl_version or '?'}, "
            f"{meta.created or 'date not recorded'}: {sources}")


def show_profile(profile: Profile, path: str = "") -> str:
    """What a profile was fitted on and what the fit did (module docstring)."""
    meta = profile.meta
    lines = [f"profile {path}".rstrip(), f"cluster: {meta.hardware or 'not recorded'}",
             f"fitted on: {_layer_line(meta)}"]
    if meta.stack:
        lines.append("stacked on (oldest first):")
        lines += [f"  {i}. {_layer_line(layer)} ({len(layer.moved)} moved)" for i, layer in enumerate(meta.stack, 1)]
    if meta.heldout:
        lines.append(heldout_table(meta.heldout, meta.holdout or "how not recorded"))
    lines += changes_lines(meta.changes, meta.held)
    if not meta.changes and meta.moved:
        lines.append(f"moved (values not recorded): {', '.join(meta.moved)}")
    if profile.defaulted:
        lines.append(f"not set by the file, so the defaults: {', '.join(profile.defaulted)}")
    if profile.residual is not None:
        model = ResidualModel.from_dict(profile.residual, f"{path}: residual")
        lines.append(f"residual model ({len(model.rows)} points), applied only inside what it saw:")
        lines += [f"  {kind}: {low:,} B to {high:,} B" for kind, (low, high) in sorted(model.domain.items())]
    else:
        lines.append("residual model: none (the physics alone)")
    if meta.notes:
        lines.append(f"notes: {meta.notes}")
    return "\n".join(lines)
