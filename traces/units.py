"""Byte sizes as people write them: ``8``, ``8B``, ``64K``, ``1MiB``, ``8GiB``, ``1.5GB``.

One rule (``SIZE_RULE``, printed by ``--help`` and in docs/cli.md): a bare K, M, G, T is binary,
as nccl-tests reads ``-b 1M`` (2^20 bytes), and so are KiB, MiB, GiB, TiB; KB, MB, GB, TB are SI
(``1GB`` is 10^9 bytes, ``1G`` and ``1GiB`` 2^30). Case does not matter; a size is a whole number
of bytes.
"""

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
SIZE_RULE = ("K/M/G/T and KiB/MiB/GiB/TiB are powers of 2 (nccl-tests' -b 1M: 1G = 1GiB = 2^30 B), "
             "KB/MB/GB/TB powers of 10 (1GB = 10^9 B)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in ``text``, by ``SIZE_RULE``; ``SizeError`` for anything else or a fraction of a byte.

    >>> parse_size("1MiB"), parse_size("1M"), parse_size("1MB"), parse_size("1.5K")
    (1048576, 1048576, 1000000, 1536)
    """
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise SizeError(f"not a size: {text!r} (write e.g. 8B, 64K, 1MiB, 8GiB; {SIZE_RULE})")
    number, scale = m.group(1), _UNITS[unit]
    whole, _, fraction = number.partition(".")
    numerator = int(whole + fraction) * scale
    denominator = 10 ** len(fraction)
    if numerator % denominator:
        raise SizeError(f"not a whole number of bytes: {text!r}")
    return numerator // denominator


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
