"""``--nccl-version``: the NCCL release a command models, checked against the modelled range.

A version before the oldest modelled release is refused (exit 2, the range in the message); one
newer than the newest modelled runs as the newest does, with a ``warning:`` naming it.
"""

from __future__ import annotations

import warnings
from typing import Annotated

import typer

from traces.errors import CcltwinError, CcltwinWarning
from tuner.knobs import DEFAULT_NCCL_VERSION, check_nccl_version

DEFAULT_VERSION_TEXT = ".".join(map(str, DEFAULT_NCCL_VERSION))
"""``--nccl-version``'s default, as the option spells it."""

NcclVersionOption = Annotated[str, typer.Option(
    help="NCCL release to model, MAJOR.MINOR.PATCH (2.8.3 to 2.30.7; newer ones run as 2.30.7).")]


def nccl_version_of(text: str) -> tuple[int, int, int]:
    """``--nccl-version TEXT`` as a version tuple; a malformed or unmodelled one is refused."""
    version = parse_nccl_version(text)
    note = check_nccl_version(version)
    if note:
        warnings.warn(note, CcltwinWarning, stacklevel=2)
    return version


def parse_nccl_version(text: str) -> tuple[int, int, int]:
    """MAJOR.MINOR.PATCH as a tuple (the range is checked by :func:`nccl_version_of`)."""
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise CcltwinError(f"--nccl-version {text!r}: expected MAJOR.MINOR.PATCH, e.g. {DEFAULT_VERSION_TEXT}")
    return int(parts[0]), int(parts[1]), int(parts[2])
