"""The root of ccltwin's errors on bad input, and the one every trace reader raises."""

from __future__ import annotations

from os import PathLike


class CcltwinError(ValueError):
    """Bad input that ccltwin reports in one line naming the file and the problem (exit 2), as
    opposed to a bug, which shows its traceback."""


class TraceError(ValueError):
    """A trace, log or dump that cannot be read as it stands.

    The message starts with where the problem is, as far as it is known:
    ``file:line``, then the rank and the event, then what is wrong::

        TraceError("expected 12 columns, got 9", "x.log", line=31)
        # x.log:31: expected 12 columns, got 9
    """

    def __init__(
        self,
        problem: str,
        path: str | PathLike[str] | None = None,
        *,
        line: int | None = None,
        rank: int | None = None,
        event: str | int | None = None,
    ) -> None:
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        self.rank = rank
        self.event = event
        where = []
        if self.path is not None:
            where.append(self.path if line is None else f"{self.path}:{line}")
        if rank is not None:
            where.append(f"rank {rank}")
        if event is not None:
            where.append(f"event {event}")
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)
