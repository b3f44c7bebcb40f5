"""Physical plausibility of a measured collective: the one check every importer shares.

A row of an nccl-tests log, a Kineto kernel or a flight-recorder entry is a message of
``nbytes`` bytes (``count`` elements of ``dtype``) that took ``time_us`` and, for nccl-tests,
moved data at ``busbw`` GB/s. Numbers that no hardware can produce are bad input, not
measurements: ``implausible`` says what is wrong, or ``None``; ``implausible_call`` does the same for
one timed collective call of a trace (its busbw from nccl-tests' factors)::

    >>> implausible(nbytes=1 << 20, count=262144, dtype="float32", time_us=20.5, busbw=95.0)
    >>> implausible(nbytes=1 << 20, count=1000, dtype="float32", time_us=20.5)
    'size 1048576 B is not count 1000 x 4 B (float32) = 4000 B, nor a whole multiple of it (per-rank counts)'
    >>> implausible(nbytes=1024, time_us=-3.0)
    'time -3.0 us is not a positive finite number'
    >>> implausible_call(Op.ALLREDUCE, nbytes=1 << 30, nranks=8, time_us=10.0)
    "busbw 187904.8 GB/s is outside 0 to 10000 GB/s (over 5x NVLink 5's 1,800 GB/s per GPU)"

The bounds are generous on purpose (they reject the impossible, not the unusual):

* ``MAX_BUSBW_GBPS`` = 10,000 GB/s: bus bandwidth cannot exceed what a GPU's links carry;
  the fastest today, NVLink 5 (Blackwell), gives 1,800 GB/s per GPU in both directions
  together (NVIDIA GB200 NVL72 datasheet), so 10 TB/s is over 5x anything built.
* ``MAX_NBYTES`` = 2**48 (256 TiB): one collective's buffer lives in one GPU's memory
  (192 GB on a B200); 256 TiB is over 1,000x that.
* ``MAX_TIME_US`` = one day: nccl-tests and profilers time single collectives; a day-long
  one is a broken clock, not a measurement.
"""

from __future__ import annotations

import math

from traces.task import DTYPE_BYTES, Op, busbw_factor

__all__ = ["MAX_BUSBW_GBPS", "MAX_NBYTES", "MAX_TIME_US", "implausible", "implausible_call"]

MAX_BUSBW_GBPS = 10_000.0
MAX_NBYTES = 1 << 48
MAX_TIME_US = 86_400e6


def implausible(*, nbytes: int, count: int | None = None, dtype: str | None = None,
                time_us: float | None = None, busbw: float | None = None) -> str | None:
    """What makes this measurement impossible, or ``None`` when it could be real.

    ``time_us``/``busbw`` ``None``: not measured (only the given values are checked).
    """
    if not 0 <= nbytes <= MAX_NBYTES:
        return f"size {nbytes} B is outside 0 to {MAX_NBYTES} B (2**48, over 1,000x a GPU's memory)"
    if count is not None and dtype in DTYPE_BYTES:
        # older nccl-tests print all-gather/reduce-scatter counts per rank: size = count x type x ranks
        element = count * DTYPE_BYTES[dtype]
        if (nbytes % element if element else nbytes) != 0:
            return (f"size {nbytes} B is not count {count} x {DTYPE_BYTES[dtype]} B ({dtype}) = {element} B, "
                    "nor a whole multiple of it (per-rank counts)")
    if time_us is not None:
        if not (math.isfinite(time_us) and time_us > 0):
            return f"time {time_us} us is not a positive finite number"
        if time_us > MAX_TIME_US:
            return f"time {time_us:g} us is over a day (limit {MAX_TIME_US:g} us)"
    if busbw is not None and not (math.isfinite(busbw) and 0 <= busbw <= MAX_BUSBW_GBPS):
        return (f"busbw {busbw} GB/s is outside 0 to {MAX_BUSBW_GBPS:g} GB/s (over 5x NVLink 5's 1,800 GB/s "
                "per GPU)")
    return None


def implausible_call(op: Op, *, nbytes: int, nranks: int, time_us: float) -> str | None:
    """What makes a collective call of ``nbytes`` on ``nranks`` ranks that took ``time_us`` impossible."""
    if not (math.isfinite(time_us) and time_us > 0):
        return implausible(nbytes=nbytes, time_us=time_us)
    busbw = nbytes / (time_us * 1e3) * busbw_factor(op, max(nranks, 1))
    return implausible(nbytes=nbytes, time_us=time_us, busbw=round(busbw, 1))
