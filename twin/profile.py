"""Calibration profiles: a ``TwinParams`` saved as a versioned JSON file with what it was fitted on.

A profile fitted on two H200 nodes reads::

    {"format": "ccltwin-profile", "version": 2,
     "meta": {"hardware": "hgx-h200:8x2", "nccl_version": "2.28.9",
              "sources": ["runs/h200-sweep.jsonl"], "created": "2025-11-30T10:12:00", "points": 412,
              "moved": ["link.nvlink.efficiency", "protocol.ll128_copy_factor"],
              "changes": [{"name": "link.nvlink.efficiency", "before": 0.84, "after": 0.81}, ...],
              "held": [{"name": "net.efficiency", "reason": "the measurements do not depend on it ..."}, ...],
              "holdout": "3-fold over message sizes, fitted on the other folds, scored on the one left out",
              "heldout": [{"regime": ">= 1 MiB", "points": 120, "before_pct": 9.1, "after_pct": 3.2, ...}, ...],
              "stack": [{"hardware": "dgx-h100:8x1", "created": "2025-11-02", ...}],
              "notes": ""},
     "params": {"link.nvlink.efficiency": 0.81, "protocol.ll128_copy_factor": 0.78, ...},
     "residual": null}

``params`` may name a subset of the parameters (``TwinParams.to_dict`` names them all); the
others keep their defaults, and ``Profile.defaulted`` says which.  ``meta.stack`` lists the
profiles this one was fitted on top of, oldest first (a cluster-type prior, then this cluster's
measurements); ``residual`` is the optional residual model of ``twin.calibrate.residual``.
``save_profile`` writes every parameter, atomically; ``load_profile`` reads version 1 (no
changes, held parameters, held-out errors, stack or residual) and 2, and raises ``ParamsError``
naming the file and the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import Any

from traces.trace_file import write_atomic
from tuner.codec import FieldError, get_field, read_document
from twin.params import ParamsError, TwinParams

__all__ = ["PROFILE_FORMAT", "PROFILE_VERSION", "HeldOutError", "HeldParam", "ParamChange", "Profile", "ProfileMeta",
           "load_profile", "save_profile"]

PROFILE_FORMAT = "ccltwin-profile"
PROFILE_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True)
class ParamChange:
    """A parameter a fit moved: from its prior to its fitted value."""

    name: str
    before: float
    after: float

    @property
    def relative(self) -> float:
        """``after / before - 1``."""
        return self.after / self.before - 1 if self.before else float("inf")


@dataclass(frozen=True, slots=True)
class HeldParam:
    """A parameter a fit left at its prior, and why (the data could not identify it)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class HeldOutError:
    """Median busbw error (%) of one size regime on points the fit did not see, before and after."""

    regime: str
    points: int
    before_pct: float
    after_pct: float
    after_residual_pct: float | None = None
    """With the residual model on top; ``None`` when none was tried."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileMeta:
    """What a profile's parameters were fitted on."""

    hardware: str = ""
    """The cluster identity of the measurements (``Measurement.hardware``); empty when unknown."""
    nccl_version: str = ""
    """The NCCL release measured (``"2.28.9"``); empty when unknown."""
    sources: tuple[str, ...] = ()
    """The measurement files or stores the fit read."""
    created: str = ""
    """When the fit ran (ISO 8601 date or time)."""
    points: int | None = None
    """How many measurements the fit used."""
    moved: tuple[str, ...] = ()
    """The parameters the fit was free to move (dotted names); the others stayed as given."""
    notes: str = ""
    """Free text."""
    changes: tuple[ParamChange, ...] = ()
    """How far each moved parameter moved."""
    held: tuple[HeldParam, ...] = ()
    """Parameters the fit left at their prior because the data could not identify them."""
    holdout: str = ""
    """How the held-out errors were measured."""
    heldout: tuple[HeldOutError, ...] = ()
    """Errors on points the fit did not see, per size regime, before and after."""
    stack: tuple[ProfileMeta, ...] = ()
    """The profiles this one was fitted on top of, oldest first."""

    def __post_init__(self) -> None:
        if self.points is not None and self.points < 0:
            raise ParamsError(f"meta.points must be ≥ 0, got {self.points}")
        for key, names in (("moved", self.moved), ("changes", [c.name for c in self.changes]),
                           ("held", [h.name for h in self.held])):
            unknown = [name for name in names if name not in TwinParams.bounds()]
            if unknown:
                raise ParamsError(f"meta.{key} names unknown parameter(s) {', '.join(map(repr, unknown))}")

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "nccl_version": self.nccl_version, "sources": list(self.sources),
                "created": self.created, "points": self.points, "moved": list(self.moved), "notes": self.notes,
                "changes": [{"name": c.name, "before": c.before, "after": c.after} for c in self.changes],
                "held": [{"name": h.name, "reason": h.reason} for h in self.held], "holdout": self.holdout,
                "heldout": [{"regime": e.regime, "points": e.points, "before_pct": e.before_pct,
                             "after_pct": e.after_pct, "after_residual_pct": e.after_residual_pct}
                            for e in self.heldout],
                "stack": [layer.to_dict() for layer in self.stack]}

    def stacked(self) -> tuple[ProfileMeta, ...]:
        """This profile's layers, oldest first, itself last (each without its own stack)."""
        return (*self.stack, replace(self, stack=()))

    @classmethod
    def from_dict(cls, obj: Any) -> ProfileMeta:
        where = "meta"
        if not isinstance(obj, dict):
            raise FieldError(f"{where}: expected an object, got {obj!r:.60}")
        unknown = sorted(set(obj) - set(cls.__dataclass_fields__))
        if unknown:
            raise FieldError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
        lists = {key: get_field(obj, key, "list", where, []) for key in ("sources", "moved")}
        for key, items in lists.items():
            if not all(isinstance(item, str) for item in items):
                raise FieldError(f"{where}.{key}: expected a list of strings, got {items!r:.60}")

        def records(key: str) -> list[dict]:
            items = get_field(obj, key, "list", where, [])
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise FieldError(f"{where}.{key}[{i}]: expected an object, got {item!r:.60}")
            return items

        changes = tuple(ParamChange(get_field(c, "name", "str", f"{where}.changes"),
                                    get_field(c, "before", "number", f"{where}.changes"),
                                    get_field(c, "after", "number", f"{where}.changes")) for c in records("changes"))
        held = tuple(HeldParam(get_field(h, "name", "str", f"{where}.held"),
                               get_field(h, "reason", "str", f"{where}.held")) for h in records("held"))
        heldout = tuple(HeldOutError(get_field(e, "regime", "str", f"{where}.heldout"),
                                     get_field(e, "points", "int", f"{where}.heldout"),
                                     get_field(e, "before_pct", "number", f"{where}.heldout"),
                                     get_field(e, "after_pct", "number", f"{where}.heldout"),
                                     get_field(e, "after_residual_pct", "number", f"{where}.heldout", None,
                                               nullable=True)) for e in records("heldout"))
        return cls(hardware=get_field(obj, "hardware", "str", where, ""),
                   nccl_version=get_field(obj, "nccl_version", "str", where, ""),
                   sources=tuple(lists["sources"]), created=get_field(obj, "created", "str", where, ""),
                   points=get_field(obj, "points", "int", where, None, nullable=True),
                   moved=tuple(lists["moved"]), notes=get_field(obj, "notes", "str", where, ""),
                   changes=changes, held=held, holdout=get_field(obj, "holdout", "str", where, ""), heldout=heldout,
                   stack=tuple(cls.from_dict(layer) for layer in records("stack")))


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A profile as loaded: the parameters, what they were fitted on, and which were defaulted."""

    params: TwinParams
    meta: ProfileMeta
    defaulted: tuple[str, ...] = ()
    """Parameters the file did not set, so taken from ``DEFAULT_PARAMS``."""
    residual: dict | None = field(default=None, compare=False)
    """The residual model's document (``twin.calibrate.residual``), ``None`` without one."""


def save_profile(params: TwinParams, path: str | PathLike[str], *, meta: ProfileMeta,
                 residual: dict | None = None) -> None:
    """Write ``params`` (every parameter), ``meta`` and the residual model's document to ``path``,
    atomically."""
    doc = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "meta": meta.to_dict(), "params": params.to_dict(),
           "residual": residual}
    write_atomic(path, [json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False), "\n"])


def load_profile(path: str | PathLike[str]) -> Profile:
    """Read a profile file; raises ``ParamsError`` naming the file and the problem.

    >>> import os, tempfile
    >>> from twin.params import DEFAULT_PARAMS
    >>> path = os.path.join(tempfile.mkdtemp(), "h200.json")
    >>> fitted = DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.81})
    >>> save_profile(fitted, path, meta=ProfileMeta(points=412, moved=("link.nvlink.efficiency",)))
    >>> profile = load_profile(path)
    >>> profile.params == fitted, profile.meta.points, profile.defaulted
    (True, 412, ())
    """
    return read_document(path, "profile", lambda doc: _profile(doc, str(path)), ParamsError)


def _profile(doc: Any, where: str) -> Profile:
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise FieldError(f'not a ccltwin profile (expected "format": "{PROFILE_FORMAT}")')
    version = get_field(doc, "version", "int", "profile")
    if version not in READABLE_VERSIONS:
        raise FieldError(f"profile version {version} is not supported; this ccltwin reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}")
    unknown = sorted(set(doc) - {"format", "version", "meta", "params", *(("residual",) if version >= 2 else ())})
    if unknown:
        raise FieldError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    values = get_field(doc, "params", "object", "profile")
    try:
        meta = ProfileMeta.from_dict(get_field(doc, "meta", "object", "profile", {}))
    except ParamsError as err:
        raise FieldError(str(err)) from None
    params = TwinParams.from_dict(values, where=where)
    return Profile(params=params, meta=meta, defaulted=tuple(k for k in params.to_dict() if k not in values),
                   residual=get_field(doc, "residual", "object", "profile", None, nullable=True))
