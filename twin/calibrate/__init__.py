"""Calibration: real measurements flow back into the twin's physical constants.

``calibrate(read_points(files), cluster, prior=...)`` fits the constants of ``twin.params`` that
the measurements identify, by bounded least squares through the twin's own model, proves the fit
on points it did not see (or refuses it), and returns the constants with a profile's provenance
(``CalibrationResult.save`` writes the profile; ``show_profile`` prints one).  ``Recalibrator``
refits from a store that live tuning keeps filling and re-ranks what a tuning session has left to
try with the current constants.  ``twin.calibrate.kernels`` fits the compute and interference
constants to kernel timings.

The command line (wired by the CLI):

    ccltwin calibrate --measurements FILES_OR_STORE --topology X [--nodes N] [--prior P] [-o profile.json]
    ccltwin calibrate --show profile.json
"""

from twin.calibrate.calibrate import CalibrationResult, calibrate
from twin.calibrate.errors import CalibrationError, CalibrationRefused
from twin.calibrate.holdout import Holdout
from twin.calibrate.incremental import Recalibrator
from twin.calibrate.model import TwinModel
from twin.calibrate.points import Point, points_of, read_points
from twin.calibrate.report import show_profile
from twin.calibrate.residual import ResidualModel

__all__ = ["CalibrationError", "CalibrationRefused", "CalibrationResult", "Holdout", "Point", "Recalibrator",
           "ResidualModel", "TwinModel", "calibrate", "points_of", "read_points", "show_profile"]
