"""The error live tuning raises when it cannot start or go on, with what to do about it."""

from __future__ import annotations

from traces.errors import CcltwinError


class LiveError(CcltwinError):
    """Live tuning cannot start (a bad argument, no time source on gloo) or go on (the flight
    recorder dropped calls, the plugin refused a rule); the message says why and what to do.

    At an iteration boundary the runtime turns it into one message and stops tuning, keeping the
    committed schedule: the job itself is never stopped by tuning.
    """
