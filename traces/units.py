"""Byte sizes as people write them: ``8``, ``8B``, ``64K``, ``1MiB``, ``8GiB``, ``1.5GB``."""

from __future__ import annotations

import re

from traces.errors import CcltwinError


class SizeError(CcltwinError):
    """Text that is not a byte size or a range of sizes."""


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 1000**2,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 1000**3,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``parse_size("1MiB") == 1048576``; K/M/G alone are binary, as in nccl-tests' ``-b 1M``."""
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise SizeError(f"not a size: {text!r} (write e.g. 8B, 64K, 1MiB, 8GiB)")
    return int(float(m.group(1)) * _UNITS[unit])


def parse_size_range(text: str) -> list[int]:
    """Sizes from ``8B:8GiB`` (doubling, like ``nccl-tests -f 2``), ``1K:1M:4`` (factor 4) or ``1K,3K``."""
    if "," in text:
        return [parse_size(part) for part in text.split(",")]
    parts = text.split(":")
    if len(parts) == 1:
        return [parse_size(parts[0])]
    if len(parts) > 3:
        raise SizeError(f"not a size range: {text!r} (write MIN:MAX or MIN:MAX:FACTOR)")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    if len(parts) == 3 and not parts[2].strip().isdigit():
        raise SizeError(f"size range {text!r}: FACTOR must be a whole number ≥ 2, got {parts[2]!r}")
    factor = int(parts[2]) if len(parts) == 3 else 2
    if lo < 1 or hi < lo or factor < 2:
        raise SizeError(f"size range {text!r} needs 1 ≤ MIN ≤ MAX and FACTOR ≥ 2")
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def format_size(nbytes: float) -> str:
    """``format_size(1048576) == "1MiB"``; exact binary multiples get a unit, others stay bytes."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{int(nbytes // scale)}{unit}"
    return f"{int(nbytes)}B"
