"""What a user typed into a page, read into numbers, or an ``InputError`` that says what is wrong.

A candidate cluster's "nodes" cell holding ``0`` becomes ``InputError("dgx-h100: nodes must be
at least 1, got 0")``, shown on the page under the table; nothing is computed.

>>> positive_int("4", "nodes")
4
>>> number_list("1, 2,4", "values")
[1.0, 2.0, 4.0]
>>> optional_number("-1", "NIC rate (Gb/s)", positive=True)
Traceback (most recent call last):
...
dashboards.inputs.InputError: NIC rate (Gb/s) must be positive, got -1
"""

from __future__ import annotations

import base64
import binascii
import math

from traces.errors import CcltwinError


class InputError(CcltwinError):
    """A value typed into a page that cannot be used; the message names the field."""


def _number(text, what: str) -> float | None:
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{what}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{what}: expected a finite number, got {text!r}")
    return value


def optional_int(text, what: str, *, minimum: int = 1) -> int | None:
    """``text`` as an integer of at least ``minimum``; ``None`` when empty."""
    value = _number(text, what)
    if value is None:
        return None
    if not value.is_integer():
        raise InputError(f"{what} must be a whole number, got {text!r}")
    if value < minimum:
        raise InputError(f"{what} must be at least {minimum}, got {int(value)}")
    return int(value)


def positive_int(text, what: str) -> int:
    """``text`` as an integer ≥ 1 (required)."""
    value = optional_int(text, what)
    if value is None:
        raise InputError(f"{what}: required")
    return value


def optional_number(text, what: str, *, positive: bool = False) -> float | None:
    """``text`` as a number ≥ 0 (> 0 with ``positive``); ``None`` when empty."""
    value = _number(text, what)
    if value is None:
        return None
    if positive and value <= 0:
        raise InputError(f"{what} must be positive, got {text if isinstance(text, str) else f'{value:g}'}")
    if value < 0:
        raise InputError(f"{what} must not be negative, got {text if isinstance(text, str) else f'{value:g}'}")
    return value


def number_list(text: str | None, what: str) -> list[float]:
    """A comma-separated list of numbers (at least one)."""
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not parts:
        raise InputError(f"{what}: give at least one number, separated by commas")
    values = [_number(p, what) for p in parts]
    return [v for v in values if v is not None]


def decode_upload(filename: str, data_url: str | None) -> bytes:
    """The bytes of a ``dcc.Upload`` value (``data:...;base64,...``); ``InputError`` naming the file."""
    _, _, encoded = (data_url or "").partition(",")
    try:
        content = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"upload {filename!r}: could not be decoded") from None
    if not content:
        raise InputError(f"upload {filename!r}: the file is empty")
    return content
