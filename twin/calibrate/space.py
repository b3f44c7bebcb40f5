"""Which of the twin's constants a fit may move, how far, and in what coordinates.

A fit works in ``x = log(value / prior)``: every constant, a 0.84 efficiency or a 3.4 µs step,
moves by relative amounts on the same scale, and ``x = 0`` is the prior.  Each constant may move
only within its *plausible range*: its sourced value (``DEFAULT_PARAMS``, the *anchor*) times the
factors of ``SPREAD`` for its unit, cut to its valid range (``TwinParams.bounds``): an efficiency
stays at most 1, a latency at least 80 % of what NCCL's tables or the public measurements behind it
say, so that a fitted profile keeps its physical meaning on systems it was not fitted on.  The
range is the anchor's, not the prior's, so fits stacked on fits cannot walk away from physics (a
prior outside it starts at its nearest wall).  Within the walls a Gaussian prior (``PRIOR_SIGMA``
in ``x``) pulls every moved constant back to its prior, so a few points cannot drag a constant far
for a small gain.

Not fitted by default (``NOT_FITTED``): the packet headers (protocol facts: NVLink's 16-byte
header, a PCIe TLP's 24) and the compute shares of the trace replay (no collective measures them;
``twin.calibrate.kernels`` fits them to kernel timings).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from twin.calibrate.errors import CalibrationError
from twin.params import DEFAULT_PARAMS, TwinParams

__all__ = ["DEFAULT_FREE", "NOT_FITTED", "PRIOR_SIGMA", "SPREAD", "FitSpace"]

SPREAD = {"fraction": (0.7, 1.3), "µs": (0.8, 3.0), "ns": (0.8, 3.0), "ratio": (0.6, 1.6), "threads": (0.5, 2.0),
          "bytes": (0.75, 1.5), "elements": (0.5, 2.0), "passes": (0.6, 1.6)}
"""How far below and above its prior a constant of each unit may be fitted (factors).  Shares and
efficiencies within 30 % (and never above 1); latencies at most 20 % below the prior, which comes
from NCCL's latency tables or public hardware measurements (a faster hop than the hardware's is
not physics), and up to 3x above it (hosts, drivers and older NCCL releases only add), CPU times
per cache line in ns alike (older hosts than the one measured are slower); ratios and
thread counts within their measured spread and more."""

PRIOR_SIGMA = math.log(1.5)
"""The Gaussian prior's width in ``x = log(value / prior)``: 50 % is one sigma."""

SHAPE_MODEL = ("compute.gemm.", "compute.attention.", "compute.kernels.", "compute.interference.")
"""The compute model's shape constants: fitted to kernel sweeps (``benchmarks/compute_fit.py``),
which collective measurements do not see."""

NOT_FITTED = ("link.nvlink.header_bytes", "link.pcie.header_bytes", "link.cpu.header_bytes",
              "compute.flops_fraction", "compute.hbm_fraction", "compute.min_speed", "net.message_us",
              *(name for name in TwinParams.bounds() if name.startswith(("fabric.", *SHAPE_MODEL))))
"""Constants ``calibrate`` leaves alone unless asked by name (see the module docstring).  The fabric
kinds' figures (``fabric.<kind>.*``, which ``net.*`` takes on a cluster of that kind, and the
per-message cost, 0 on InfiniBand) are fitted by name on a cluster of that kind; the compute
model's shape constants by ``benchmarks/compute_fit.py``."""

DEFAULT_FREE = tuple(name for name in TwinParams.bounds() if name not in NOT_FITTED)
"""What ``calibrate`` may move: latencies and efficiencies per link kind and protocol, the CTA
copy rate against threads, the Simple slice hand-over, NVLS, the network path's components,
launch costs (one GPU and each further GPU of a process) and the copy rate under compute.  Which
of them a given set of measurements moves is for the data to say (``twin.calibrate.fit``)."""


@dataclass(frozen=True)
class FitSpace:
    """The constants ``names`` of ``prior`` as a vector ``x`` (see the module docstring)."""

    prior: TwinParams
    names: tuple[str, ...]
    anchor: TwinParams = DEFAULT_PARAMS
    """The values the plausible ranges are drawn around (the sourced constants)."""

    def __post_init__(self) -> None:
        known = TwinParams.bounds()
        unknown = [n for n in self.names if n not in known]
        if unknown:
            raise CalibrationError(f"unknown parameter(s) {', '.join(map(repr, unknown))}; "
                                   f"the twin's parameters are {', '.join(known)}")
        values, anchor = self.prior.to_dict(), self.anchor.to_dict()
        zero = [n for n in self.names if values[n] <= 0 or anchor[n] <= 0]
        if zero:
            raise CalibrationError(f"cannot fit {', '.join(zero)}: a prior of 0 has no relative scale; "
                                   "give a prior profile with a positive value")

    @classmethod
    def of(cls, prior: TwinParams, names: Sequence[str] | None = None) -> FitSpace:
        return cls(prior, tuple(DEFAULT_FREE if names is None else names))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The plausible range of every constant, in ``x`` (a prior outside it has a range that
        does not hold 0: the fit starts at the nearest wall)."""
        values, anchor = self.prior.to_dict(), self.anchor.to_dict()
        valid, units = TwinParams.bounds(), TwinParams.units()
        low, high = [], []
        for name in self.names:
            down, up = SPREAD[units[name]]
            a, v = anchor[name], values[name]
            lo, hi = max(valid[name][0], a * down), min(valid[name][1], a * up)
            low.append(math.log(lo / v))
            high.append(math.log(hi / v))
        return np.array(low), np.array(high)

    def params(self, x: np.ndarray) -> TwinParams:
        """The prior with the constants set from ``x`` (clipped to their plausible ranges)."""
        low, high = self.bounds()
        values = self.prior.to_dict()
        x = np.clip(x, low, high)
        return self.prior.replace(**{n: float(min(max(values[n] * math.exp(xi), _low(n)), _high(n)))
                                     for n, xi in zip(self.names, x, strict=True)})

    def x(self, params: TwinParams) -> np.ndarray:
        """``params``' constants as a vector of this space (clipped to the plausible ranges)."""
        values, prior = params.to_dict(), self.prior.to_dict()
        low, high = self.bounds()
        return np.clip(np.array([math.log(values[n] / prior[n]) for n in self.names]), low, high)

    def at_bounds(self, x: np.ndarray, tol: float = 1e-3) -> tuple[str, ...]:
        """The constants of ``x`` on a wall of their plausible range (the data wanted more)."""
        low, high = self.bounds()
        return tuple(n for n, xi, lo, hi in zip(self.names, x, low, high, strict=True)
                     if hi - lo > tol and (xi - lo < tol or hi - xi < tol))


def _low(name: str) -> float:
    return TwinParams.bounds()[name][0]


def _high(name: str) -> float:
    return TwinParams.bounds()[name][1]
