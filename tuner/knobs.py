"""When each of the six knobs can change under stock NCCL, by release.

A live tuner inside a PyTorch job can move ``algo``, ``proto`` and ``nchannels`` between two
calls of the same collective through the tuner plugin's cost table (NCCL ≥ 2.19.1), and
``chunk_bytes`` through ``getChunkSize`` (NCCL ≥ 2.30.3).  ``nthreads`` is read once per
communicator at best (``NCCL_NTHREADS`` with ``NCCL_NO_CACHE``, ≥ 2.29.7; once per process
before), and the intra-node ``transport`` once per process (``NCCL_P2P_LEVEL`` is cached even
with ``NCCL_NO_CACHE``).  Sources: research/nccl-mechanisms.md §1.5, §2, §7; DESIGN.md.

>>> knob_tiers((2, 27, 5))[Knob.CHUNK_BYTES]
<Tier.PER_PROCESS: 2>
>>> sorted(k.value for k in changeable_knobs((2, 30, 7), {Tier.PER_CALL}))
['algo', 'chunk_bytes', 'nchannels', 'proto']
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum, StrEnum

from traces.errors import CcltwinError

Version = tuple[int, int, int]

DEFAULT_NCCL_VERSION: Version = (2, 28, 9)
"""The NCCL release modelled when none is given: the one whose tables ``twin.nccl_model`` carries
and on which our H200 measurements ran."""
OLDEST_NCCL_VERSION: Version = (2, 8, 3)
"""The oldest release modelled: v2.8.3-1, the first 2.8 tag (``twin.nccl_model.releases``)."""
NEWEST_MODELLED_VERSION: Version = (2, 30, 7)
"""The newest release whose source was read (v2.30.7-1): cost tables, knob tiers."""


def check_nccl_version(version: Version) -> str | None:
    """Refuse a release outside the modelled range; a note for one newer than the newest modelled::

        >>> check_nccl_version((99, 99, 99))
        'NCCL 99.99.99 is newer than the newest modelled release (2.30.7); modelled as 2.30.7 would behave'
        >>> check_nccl_version((2, 28, 9)) is None
        True
    """
    name = ".".join(map(str, version))
    if tuple(version) < OLDEST_NCCL_VERSION:
        raise CcltwinError(f"NCCL {name} is not modelled: the supported releases are "
                           f"{'.'.join(map(str, OLDEST_NCCL_VERSION))} to "
                           f"{'.'.join(map(str, NEWEST_MODELLED_VERSION))} (newer ones run as the newest)")
    if tuple(version) > NEWEST_MODELLED_VERSION:
        newest = ".".join(map(str, NEWEST_MODELLED_VERSION))
        return f"NCCL {name} is newer than the newest modelled release ({newest}); modelled as {newest} would behave"
    return None


class Knob(StrEnum):
    """The six fields of a :class:`~tuner.config.Config`, named as the dataclass names them."""

    ALGO = "algo"
    PROTO = "proto"
    TRANSPORT = "transport"
    NCHANNELS = "nchannels"
    NTHREADS = "nthreads"
    CHUNK_BYTES = "chunk_bytes"


class Tier(IntEnum):
    """How often a knob can change, cheapest first: an executor that can change a tier can
    change every tier below it only if it says so (a live job changes per-call knobs online,
    per-communicator ones by creating communicators, per-process ones only in a new launch)."""

    PER_CALL = 0
    PER_COMMUNICATOR = 1
    PER_PROCESS = 2


ALL_TIERS = frozenset(Tier)


def knob_tiers(nccl_version: Version) -> dict[Knob, Tier]:
    """The tier of every knob under stock NCCL ``nccl_version`` with our tuner plugin loaded."""
    v = tuple(nccl_version)
    per_call_plugin = v >= (2, 19, 1)  # tuner plugin v1: algo/proto/nChannels per call
    no_cache = v >= (2, 29, 7)  # NCCL_NO_CACHE makes NCCL_PARAMs re-read at each comm init
    return {
        # Before the plugin, NCCL_ALGO/NCCL_PROTO are re-read at every communicator init.
        Knob.ALGO: Tier.PER_CALL if per_call_plugin else Tier.PER_COMMUNICATOR,
        Knob.PROTO: Tier.PER_CALL if per_call_plugin else Tier.PER_COMMUNICATOR,
        # Before the plugin, NCCL_MIN/MAX_NCHANNELS are NCCL_PARAMs: cached per process.
        Knob.NCHANNELS: Tier.PER_CALL if per_call_plugin else Tier.PER_PROCESS,
        Knob.CHUNK_BYTES: (Tier.PER_CALL if v >= (2, 30, 3)
                           else Tier.PER_COMMUNICATOR if no_cache else Tier.PER_PROCESS),
        Knob.NTHREADS: Tier.PER_COMMUNICATOR if no_cache else Tier.PER_PROCESS,
        Knob.TRANSPORT: Tier.PER_PROCESS,
    }


def changeable_knobs(nccl_version: Version, tiers: Iterable[Tier]) -> frozenset[Knob]:
    """The knobs an executor that can change ``tiers`` may vary under ``nccl_version``."""
    allowed = set(tiers)
    return frozenset(k for k, t in knob_tiers(nccl_version).items() if t in allowed)
