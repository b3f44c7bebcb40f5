"""Host CPUs' single-thread speed: how fast a node's CPU runs the framework's host thread.

An eager PyTorch job issues every kernel from one Python thread per rank: the interpreter, the
dispatcher and the CUDA launch are single-thread integer work, so their time scales with one
core's speed (clock × instructions per clock), not with the core count.  The twin's host time per
kernel (``compute.kernels.host_us_per_kernel``) was measured on the H200 machine's host; a node
whose CPU is ``single_thread`` times as fast pays ``1 / single_thread`` of it.

Speed is the maximum single-core boost clock (the vendor's data sheet) times the core's
Geekbench 5 single-core score per GHz.  The per-GHz figures come from one public pair of
dual-socket results (BenchLeaks, reported Sept 2022: two Xeon Platinum 8468, Sapphire Rapids,
3.8 GHz max turbo, 1,257 single-core; two EPYC 7763, Zen 3, 3.5 GHz max boost, 1,249) and the
vendors' stated generation-on-generation IPC gains: Zen 2 → Zen 3 +19 % (AMD, EPYC 7003 launch,
2021), Zen 3 → Zen 4 +13 % (AMD, Ryzen 7000 launch, 2022); Emerald Rapids' Raptor Cove core is
taken at Sapphire Rapids' Golden Cove IPC (an assumption: Intel attributes 5th Gen Xeon's gains
to more cores, a larger L3 and faster memory).  The reference (speed 1.0) is the H200 machine's
host as the ``hgx-h200`` preset names it, an Emerald Rapids Xeon at 4.0 GHz (Xeon Platinum
8568Y+); the VM's exact SKU was not recorded, so this is the figure's largest uncertainty.

>>> round(host_cpu("EPYC-7742").single_thread, 3)  # a DGX A100's host
0.771
>>> host_cpu("unknown") is REFERENCE_HOST_CPU
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twin.hardware import TopologyError

GB5_PER_GHZ = {
    "golden-cove": 1257 / 3.8,  # Xeon Platinum 8468 pair, 1,257 at 3.8 GHz
    "raptor-cove": 1257 / 3.8,  # taken at Golden Cove's IPC (module docstring)
    "zen3": 1249 / 3.5,  # EPYC 7763 pair, 1,249 at 3.5 GHz
    "zen2": 1249 / 3.5 / 1.19,  # Zen 3 has 19 % more IPC (AMD)
    "zen4": 1249 / 3.5 * 1.13,  # Zen 4 has 13 % more IPC than Zen 3 (AMD)
}
"""Geekbench 5 single-core points per GHz of boost clock, by core (module docstring)."""


@dataclass(frozen=True)
class HostCpu:
    """One server CPU model as the host thread sees it."""

    model: str
    """Canonical name, e.g. ``"EPYC-7742"``."""
    core: str
    """Core microarchitecture, a ``GB5_PER_GHZ`` key."""
    boost_ghz: float
    """Maximum single-core boost clock (the vendor's data sheet)."""
    aliases: tuple[str, ...] = ()
    socket_memory_gbps: float | None = None
    """GB/s per direction that DMA to the other socket's memory (a NIC or GPU reading or writing
    host memory across the socket interconnect) gets in a two-socket node: the vendor's links per
    socket times each link's payload rate (``_HOST_CPUS``); None where not sourced.  Not NCCL's
    inter-CPU figure (``twin.hardware.socket_link_gbps``), which its search uses for GPU-to-GPU
    peer traffic through the CPUs."""

    @property
    def single_thread(self) -> float:
        """One core's speed relative to the reference host (the H200 machine's)."""
        return self.boost_ghz * GB5_PER_GHZ[self.core] / _REFERENCE_SCORE


UPI_BYTES_PER_TRANSFER = 2.0
"""Payload bytes a UPI (or QPI) link moves per transfer in each direction: 20 lanes, 64 data bits
of each 80-bit flit (9.6 GT/s QPI: 19.2 GB/s, 10.4 GT/s UPI: 20.8 GB/s per direction per link).
Intel publishes no GB/s for UPI 2.0's 24 lanes; the UPI 1.0 figure is taken, a lower bound."""
XGMI2_LINK_GBPS = 18 * 16 / 8 * 8 / 9
"""AMD xGMI-2 (Rome, Milan) socket-to-socket link: x16 at 18 GT/s, 36 GB/s per direction, less
the CRC's 1/9 (32 GB/s).  Two-socket EPYC joins the sockets with 4 such links (64 lanes as x16 × 4)."""

# Boost clocks from AMD's and Intel's product pages; socket links from Intel's product pages (ARK:
# Xeon Platinum 8568Y+ 4 UPI links at 20 GT/s, 8480C/8480+ 4 at 16 GT/s) and AMD's xGMI-2.
_HOST_CPUS = (
    HostCpu("Xeon-8568Y+", "raptor-cove", 4.0, aliases=("emerald-rapids",),
            socket_memory_gbps=4 * 20 * UPI_BYTES_PER_TRANSFER),
    HostCpu("Xeon-8480C", "golden-cove", 3.8, aliases=("xeon-8480+", "sapphire-rapids"),
            socket_memory_gbps=4 * 16 * UPI_BYTES_PER_TRANSFER),
    HostCpu("EPYC-7742", "zen2", 3.4, aliases=("rome",), socket_memory_gbps=4 * XGMI2_LINK_GBPS),
    HostCpu("EPYC-7763", "zen3", 3.5, aliases=("milan",), socket_memory_gbps=4 * XGMI2_LINK_GBPS),
    HostCpu("EPYC-9654", "zen4", 3.7, aliases=("genoa",)),
)
REFERENCE_HOST_CPU = _HOST_CPUS[0]
"""Where ``host_us_per_kernel`` was measured; also taken for a node that names no CPU model."""
_REFERENCE_SCORE = REFERENCE_HOST_CPU.boost_ghz * GB5_PER_GHZ[REFERENCE_HOST_CPU.core]

HOST_CPUS = {c.model: c for c in _HOST_CPUS}


def _key(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip().lower()).replace("xeon-platinum-", "xeon-")
    return re.sub(r"^(amd-|intel-)+", "", key)


_BY_KEY = {_key(name): c for c in _HOST_CPUS for name in (c.model, *c.aliases)}


def host_cpu(name: str) -> HostCpu:
    """The host CPU by model name or generation (``"unknown"``: the reference).

    >>> host_cpu("AMD EPYC 7742").model, host_cpu("Intel Xeon Platinum 8480C").core
    ('EPYC-7742', 'golden-cove')
    """
    if _key(name) == "unknown":
        return REFERENCE_HOST_CPU
    cpu = _BY_KEY.get(_key(name))
    if cpu is None:
        raise TopologyError(f"unknown host CPU model {name!r} (known: {', '.join(HOST_CPUS)}, or unknown)")
    return cpu
