"""Calibration profiles: a ``TwinParams`` saved as a versioned JSON file with what it was fitted on.

A profile fitted on two H200 nodes reads::

    {"format": "ccltwin-profile", "version": 1,
     "meta": {"hardware": "hgx-h200 2x8 H200-SXM-141GB", "nccl_version": "2.28.9",
              "sources": ["runs/h200-sweep.jsonl"], "created": "2025-11-30", "points": 412,
              "moved": ["link.nvlink.efficiency", "protocol.ll128_copy_factor"], "notes": ""},
     "params": {"link.nvlink.efficiency": 0.81, "protocol.ll128_copy_factor": 0.78, ...}}

``params`` may name a subset of the parameters (``TwinParams.to_dict`` names them all); the
others keep their defaults, and ``Profile.defaulted`` says which.  ``save_profile`` writes every
parameter, atomically; ``load_profile`` raises ``ParamsError`` naming the file and the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from os import PathLike
from typing import Any

from traces.trace_file import write_atomic
from tuner.codec import FieldError, get_field, read_document
from twin.params import ParamsError, TwinParams

__all__ = ["PROFILE_FORMAT", "PROFILE_VERSION", "Profile", "ProfileMeta", "load_profile", "save_profile"]

PROFILE_FORMAT = "ccltwin-profile"
PROFILE_VERSION = 1


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

    def __post_init__(self) -> None:
        if self.points is not None and self.points < 0:
            raise ParamsError(f"meta.points must be ≥ 0, got {self.points}")
        unknown = [name for name in self.moved if name not in TwinParams.bounds()]
        if unknown:
            raise ParamsError(f"meta.moved names unknown parameter(s) {', '.join(map(repr, unknown))}")

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "nccl_version": self.nccl_version, "sources": list(self.sources),
                "created": self.created, "points": self.points, "moved": list(self.moved), "notes": self.notes}

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
        return cls(hardware=get_field(obj, "hardware", "str", where, ""),
                   nccl_version=get_field(obj, "nccl_version", "str", where, ""),
                   sources=tuple(lists["sources"]), created=get_field(obj, "created", "str", where, ""),
                   points=get_field(obj, "points", "int", where, None, nullable=True),
                   moved=tuple(lists["moved"]), notes=get_field(obj, "notes", "str", where, ""))


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A profile as loaded: the parameters, what they were fitted on, and which were defaulted."""

    params: TwinParams
    meta: ProfileMeta
    defaulted: tuple[str, ...] = ()
    """Parameters the file did not set, so taken from ``DEFAULT_PARAMS``."""


def save_profile(params: TwinParams, path: str | PathLike[str], *, meta: ProfileMeta) -> None:
    """Write ``params`` (every parameter) and ``meta`` to ``path``, atomically."""
    doc = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "meta": meta.to_dict(), "params": params.to_dict()}
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
    if version != PROFILE_VERSION:
        raise FieldError(f"profile version {version} is not supported; this ccltwin reads version {PROFILE_VERSION}")
    unknown = sorted(set(doc) - {"format", "version", "meta", "params"})
    if unknown:
        raise FieldError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    values = get_field(doc, "params", "object", "profile")
    try:
        meta = ProfileMeta.from_dict(get_field(doc, "meta", "object", "profile", {}))
    except ParamsError as err:
        raise FieldError(str(err)) from None
    params = TwinParams.from_dict(values, where=where)
    return Profile(params=params, meta=meta, defaulted=tuple(k for k in params.to_dict() if k not in values))
