"""Results worked out once per ``Trace`` object (a replay, its breakdown and the tuned search of one
evaluation read the same million events: each pass over them is paid once).

A trace is immutable, so what a function finds from it holds as long as the object lives; the
entry goes when the trace is collected.

>>> from traces.schema import Trace
>>> calls = []
>>> @per_trace
... def world(trace):
...     calls.append(1)
...     return trace.world_size
>>> t = Trace(4, (), ())
>>> world(t), world(t), len(calls)
(4, 4, 1)
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from traces.schema import Trace

__all__ = ["per_trace"]

R = TypeVar("R")


def per_trace(function: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """``function(trace)``, worked out once per trace object; ``.store(trace, result)`` records a
    result found otherwise (while the trace was read, say)."""
    results: dict[int, R] = {}

    def store(trace: Trace, result: R) -> None:
        key = id(trace)
        if key not in results:
            weakref.finalize(trace, results.pop, key, None)
        results[key] = result

    @functools.wraps(function)
    def cached(trace: Trace) -> R:
        if id(trace) not in results:
            store(trace, function(trace))
        return results[id(trace)]

    cached.store = store
    return cached
