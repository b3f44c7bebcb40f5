"""What LL, LL128 and Simple cost on each kind of link, and how fast one channel copies.

Facts carried over from NCCL (research/nccl-mechanisms.md §4): LL sends 8 bytes of data with
8 bytes of flags in each 16-byte store; LL128 sends 120 bytes of data in each 128-byte line;
Simple sends plain data and synchronises once per step.  Per-hop latencies start from NCCL's
own ``hwLatencies`` table (µs per step, by link and protocol).

What the twin adds is the physics those tables summarise:

* A store of ``s`` bytes crosses an NVLink or PCIe link as a packet with a header, so small
  stores waste bandwidth: efficiency ``s / (s + header)`` (a PCIe TLP costs about 24 bytes of
  header and framing).
* A channel is one CTA: its copy rate grows with threads (more loads in flight) and saturates
  at what one SM can move.  Polling flags costs LL and LL128 part of that rate.
* Every link kind delivers a fraction of its raw rate to bulk payload (flow control, CRC,
  encoding): ``LINK_EFFICIENCY``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.config import Proto

PAYLOAD_FRACTION = {Proto.LL: 0.5, Proto.LL128: 120 / 128, Proto.SIMPLE: 1.0}
"""Data bytes per wire byte of each protocol's format."""

STORE_BYTES = {Proto.LL: 128, Proto.LL128: 128, Proto.SIMPLE: 256}
"""Bytes one packet carries: a warp's contiguous 16-byte LL stores combine into 128-byte writes,
LL128 writes whole 128-byte lines, Simple fills full packets."""

PACKET_HEADER_BYTES = {"nvlink": 16, "pcie": 24, "cpu": 24, "net": 0, "local": 0}
"""Per-packet overhead; the NIC moves whole buffers by RDMA, so the protocol's store size does
not matter there (only its payload fraction does)."""

LINK_EFFICIENCY = {"nvlink": 0.84, "pcie": 1.0, "cpu": 0.75, "net": 0.92, "local": 1.0}
"""Share of a link's one-way rate left for packets after flow control, CRC and encoding.
PCIe links in the topology already carry usable rates (NCCL's convention: 12 GB/s for Gen3
x16, 24 for Gen4), so only the per-packet header is charged there."""

HOP_LATENCY_US = {
    # link kind: (LL, LL128, Simple) per step, from NCCL's hwLatencies (ring rows); NET adds the
    # proxy thread's round trip.
    "nvlink": (0.6, 1.9, 3.4),
    "pcie": (1.0, 2.5, 5.7),
    "cpu": (1.0, 2.5, 5.7),
    "net": (5.0, 7.0, 14.0),
    "local": (0.0, 0.0, 0.0),
}

LAUNCH_US = {Proto.LL: 6.0, Proto.LL128: 7.5, Proto.SIMPLE: 7.5}
"""Kernel launch, argument setup and the first flag round trip (NCCL's base latencies, rounded)."""

EXTRA_GPU_LAUNCH_US = 2.3
"""Each further GPU launched from the same host thread (nccl-tests ``-g N``) adds one launch."""

PROTO_COPY_FACTOR = {Proto.LL: 0.25, Proto.LL128: 0.75, Proto.SIMPLE: 1.0}
"""Share of a CTA's copy rate left after polling flags.  LL spins on a flag for every 8 bytes
and its FIFO holds only 8 × 4 KiB lines per thread block, so one channel carries ~5 GB/s on
Ampere and ~8 GB/s on Hopper; LL128 polls once per
120-byte line and keeps ~20 GB/s per channel on Ampere (NCCL's perChMaxRingLL128Bw)."""

UNORDERED_LINK_PENALTY = {("pcie", Proto.LL128): 0.55}
"""LL128 trusts 128-byte stores to land whole, which NVLink guarantees and PCIe does not: a line
reaches the peer as several TLPs, the receiver re-polls, and throughput collapses (why NCCL
enables LL128 only over NVLink; forced on L40S Gen4 it runs at about half of Simple's rate)."""

ROOT_COMPLEX_P2P_EFFICIENCY = 0.72
"""Peer-to-peer TLPs forwarded by a CPU's root complex (GPUs with no PCIe switch between them,
nvidia-smi's NODE/SYS) move at about this share of the link rate: the host bridge is built for
traffic to memory, not between its ports."""

THREADS_AT_HALF_RATE = 160
"""Threads at which a CTA reaches half its peak copy rate (memory parallelism saturates)."""

REDUCE_COPY_FACTOR = 0.85
"""A step that reduces (load, add, store) moves data slower than a plain forward."""


@dataclass(frozen=True)
class ArchPhysics:
    """Per-GPU-generation constants of the copy engine that is one channel's CTA."""

    cta_peak_gbps: float
    """Payload one CTA moves per second with unlimited threads, GB/s."""


ARCH_PHYSICS = {
    "volta": ArchPhysics(cta_peak_gbps=18.0),
    "ampere": ArchPhysics(cta_peak_gbps=26.0),
    "ada": ArchPhysics(cta_peak_gbps=26.0),
    "hopper": ArchPhysics(cta_peak_gbps=42.0),
    "blackwell": ArchPhysics(cta_peak_gbps=70.0),
}


def store_efficiency(proto: Proto, link_kind: str, *, dma: bool = False) -> float:
    """Payload bytes per raw link byte for ``proto`` on a link of ``link_kind``.

    ``dma``: the bytes are moved by a NIC or copy engine in full-size packets, so only the
    protocol's payload fraction counts, not its store size.
    """
    header = PACKET_HEADER_BYTES[link_kind]
    store = STORE_BYTES[Proto.SIMPLE if dma else proto]
    penalty = 1.0 if dma else UNORDERED_LINK_PENALTY.get((link_kind, proto), 1.0)
    return LINK_EFFICIENCY[link_kind] * store / (store + header) * PAYLOAD_FRACTION[proto] * penalty


def hop_latency_us(proto: Proto, link_kind: str) -> float:
    return HOP_LATENCY_US[link_kind][proto.nccl_index]


def cta_copy_gbps(arch: str, proto: Proto, nthreads, *, reduces: bool = False):
    """Payload rate of one channel's CTA with ``nthreads`` threads (scalar or numpy array)."""
    peak = ARCH_PHYSICS[arch].cta_peak_gbps * PROTO_COPY_FACTOR[proto]
    rate = peak * nthreads / (nthreads + THREADS_AT_HALF_RATE)
    return rate * REDUCE_COPY_FACTOR if reduces else rate
