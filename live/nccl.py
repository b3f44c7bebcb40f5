"""Which NCCL this process runs, which plugin ABIs it takes, and what that lets live tuning change.

>>> info = NcclInfo((2, 28, 9), "CCLTWIN_NCCL_VERSION")
>>> info.tuner_abi, info.profiler_abi
(5, 5)
>>> info.summary()
'NCCL 2.28.9 (CCLTWIN_NCCL_VERSION): tuner plugin v5, profiler plugin v5; per call: algo, proto, nchannels; \
per process: transport, nthreads, chunk_bytes'
>>> NcclInfo((2, 30, 3), "log").changeable(Tier.PER_CALL)
['algo', 'proto', 'nchannels', 'chunk_bytes']
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from live.notice import say_once
from tuner.knobs import Knob, Tier, Version, knob_tiers

OVERRIDE = "CCLTWIN_NCCL_VERSION"
"""Environment variable that names the NCCL version instead of detecting it (``2.30.3``)."""

TUNER_ABI_SINCE = ((6, (2, 30, 3)), (5, (2, 28, 3)), (4, (2, 24, 3)), (3, (2, 22, 3)))
"""The newest tuner ABI each NCCL probes (``ncclTunerPlugin_v6`` first from 2.30.3, …; 2.21 takes only
v2, which the plugin does not export).  research/nccl-mechanisms.md §1.1."""
PROFILER_ABI_SINCE = ((6, (2, 29, 2)), (5, (2, 28, 3)), (4, (2, 27, 3)))
"""The newest profiler ABI each NCCL probes, among those the plugin exports (v4..v6; NCCL 2.23–2.26
take v1–v3 only, so there the plugin runs without the profiler)."""

NO_PLUGIN = (2, 19, 0)
"""A release before any tuner plugin: what knob_tiers says of the per-call knobs without one."""

_LOG_LINE = re.compile(r"NCCL version (\d+)\.(\d+)\.(\d+)")
_VERSION = re.compile(r"^\s*(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> Version:
    """``"2.28.9+cuda13.0"`` → ``(2, 28, 9)``; ValueError naming the text otherwise.

    >>> parse_version("2.28.9+cuda13.0")
    (2, 28, 9)
    """
    m = _VERSION.match(text)
    if not m:
        raise ValueError(f"not an NCCL version: {text!r} (expected MAJOR.MINOR.PATCH, e.g. 2.28.9)")
    return int(m[1]), int(m[2]), int(m[3])


def version_from_log(text: str) -> Version | None:
    """The version an ``NCCL_DEBUG=INFO`` log announces (``NCCL INFO NCCL version 2.28.9+cuda13.0``).

    >>> version_from_log("h:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9")
    (2, 27, 5)
    """
    m = _LOG_LINE.search(text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _newest(table: tuple[tuple[int, Version], ...], version: Version) -> int | None:
    return next((abi for abi, since in table if tuple(version) >= since), None)


@dataclass(frozen=True)
class NcclInfo:
    """The NCCL of this process (``version`` None: there is none) and where that was learned."""

    version: Version | None
    source: str

    @property
    def tuner_abi(self) -> int | None:
        """The ``ncclTunerPlugin_vN`` NCCL will take from the plugin; None: it cannot load it."""
        return None if self.version is None else _newest(TUNER_ABI_SINCE, self.version)

    @property
    def profiler_abi(self) -> int | None:
        """The ``ncclProfiler_vN`` NCCL will take; None: no profiler events (time with CUDA events)."""
        return None if self.version is None else _newest(PROFILER_ABI_SINCE, self.version)

    def tiers(self) -> dict[Knob, Tier]:
        """How often each knob can change here; per-call knobs need the tuner plugin to load."""
        tiers = knob_tiers(self.version or (0, 0, 0))
        if self.tuner_abi is None:  # as without any tuner plugin: NCCL_ALGO/PROTO per init, channels per process
            tiers.update({k: knob_tiers(NO_PLUGIN)[k] for k in (Knob.ALGO, Knob.PROTO, Knob.NCHANNELS)})
        return tiers

    def changeable(self, tier: Tier) -> list[str]:
        """The knobs of one tier, in :class:`Knob` order."""
        tiers = self.tiers()
        return [k.value for k in Knob if tiers[k] is tier]

    def summary(self) -> str:
        """One line: the version, the ABIs it takes, and the knobs by tier."""
        if self.version is None:
            return f"no NCCL here ({self.source}): live tuning can only emulate the plugin (gloo)"
        abis = (f"tuner plugin v{self.tuner_abi}" if self.tuner_abi else "no tuner plugin (needs NCCL ≥ 2.22.3)")
        abis += f", profiler plugin v{self.profiler_abi}" if self.profiler_abi else ", no profiler plugin"
        names = {Tier.PER_CALL: "per call", Tier.PER_COMMUNICATOR: "per communicator", Tier.PER_PROCESS: "per process"}
        parts = [f"{names[t]}: {', '.join(k)}" for t in Tier if (k := self.changeable(t))]
        return f"NCCL {'.'.join(map(str, self.version))} ({self.source}): {abis}; {'; '.join(parts)}"


def detect(env: Mapping[str, str] = os.environ) -> NcclInfo:
    """The NCCL this process runs: ``CCLTWIN_NCCL_VERSION`` if set, else torch's runtime NCCL
    (``torch.cuda.nccl.version()``), else an NCCL library already loaded in the process."""
    if env.get(OVERRIDE):
        return NcclInfo(parse_version(env[OVERRIDE]), OVERRIDE)
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None
    if dist is not None and dist.is_available() and dist.is_nccl_available():
        import torch.cuda.nccl

        version = torch.cuda.nccl.version()
        if isinstance(version, int):  # older torch: NCCL_VERSION_CODE
            version = (version // 10000, version // 100 % 100, version % 100)
        return NcclInfo(tuple(version), "torch.cuda.nccl.version()")
    loaded = _loaded_nccl()
    if loaded:
        return NcclInfo(loaded, "ncclGetVersion of the loaded libnccl.so.2")
    why = "torch without NCCL, e.g. a CPU build" if dist is not None else "no torch, no libnccl loaded"
    return NcclInfo(None, why)


def _loaded_nccl() -> Version | None:
    try:
        lib = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD)
    except OSError:
        return None
    code = ctypes.c_int(0)
    if lib.ncclGetVersion(ctypes.byref(code)) or code.value < 10000:
        return None
    return code.value // 10000, code.value // 100 % 100, code.value % 100


def report_once(info: NcclInfo | None = None) -> NcclInfo:
    """Detect (unless given) and say once per process what this NCCL lets live tuning change."""
    info = info or detect()
    say_once("nccl", info.summary())
    return info
