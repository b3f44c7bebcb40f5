"""Gradient buckets: which gradients are reduced together, as PyTorch DDP and Megatron-LM group them.

Gradients are taken in the order backward produces them. A bucket closes as soon as it holds
at least its cap; the first bucket may have a smaller cap (DDP: 1 MiB, so the first gradients
are not held back), the rest the regular one (DDP: 25 MiB). A tensor larger than the cap gets a
bucket of its own, so VGG19's first classifier layer makes a 392 MiB bucket under the default
caps. Without a cap everything is one bucket, reduced after the whole backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Bucket", "GradUnit", "assign_buckets"]


@dataclass(frozen=True)
class GradUnit:
    """Gradients that become ready together (one layer's), with their size in elements."""

    name: str
    params: int


@dataclass(frozen=True)
class Bucket:
    """Consecutive grad units (indices into the ready-order list) and their total elements."""

    units: tuple[int, ...]
    params: int


def assign_buckets(
    units: Sequence[GradUnit], element_bytes: int, cap: int | None, first_cap: int | None = None
) -> list[Bucket]:
    """Group ``units`` (in ready order) into buckets of at least ``cap`` bytes each but the last.

    >>> [b.units for b in assign_buckets([GradUnit("a", 10), GradUnit("b", 30), GradUnit("c", 5)], 4, 100)]
    [(0, 1), (2,)]
    >>> [b.units for b in assign_buckets([GradUnit("a", 10), GradUnit("b", 30)], 4, None)]
    [(0, 1)]
    """
    if not units:
        return []
    if cap is None:
        return [Bucket(tuple(range(len(units))), sum(u.params for u in units))]
    limit = first_cap if first_cap is not None else cap
    buckets: list[Bucket] = []
    members: list[int] = []
    size = 0
    for index, unit in enumerate(units):
        members.append(index)
        size += unit.params
        if size * element_bytes >= limit:
            buckets.append(Bucket(tuple(members), size))
            members, size, limit = [], 0, cap
    if members:
        buckets.append(Bucket(tuple(members), size))
    return buckets
