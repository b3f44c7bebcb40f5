"""The root of every error bad input causes, and the one every trace reader raises.

Every error a person can fix — a file, an option, a value ccltwin cannot use as it stands —
derives from :class:`CcltwinError`; the ``ccltwin`` command prints its message as one line and
exits with status 2.  Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from os import PathLike


class CcltwinError(ValueError):
    """Bad input, named in the message: which file, option or value, and what is wrong with it.

    ``ValueError`` stays a base, so code that expects one for a wrong value still gets it::

        >>> issubclass(TraceError, CcltwinError) and issubclass(CcltwinError, ValueError)
        True
    """


class TraceError(CcltwinError):
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


class CcltwinWarning(UserWarning):
    """Input that is usable but suspicious (a log cut mid-row): the ``ccltwin`` command prints
    its message as one ``warning: …`` line on stderr and goes on."""
