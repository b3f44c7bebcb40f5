"""The errors of a calibration: bad measurements, and a fit refused for not improving the twin."""

from __future__ import annotations

from traces.errors import CcltwinError

__all__ = ["CalibrationError", "CalibrationRefused"]


class CalibrationError(CcltwinError):
    """Measurements a calibration cannot use as they stand: names the records and the problem."""


class CalibrationRefused(CalibrationError):
    """A fit whose error on held-out points is not lower than the prior's: no profile is written."""
