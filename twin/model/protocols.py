"""What LL, LL128 and Simple cost on each kind of link, and how fast one channel copies.

Facts carried over from NCCL (research/nccl-mechanisms.md §4): LL sends 8 bytes of data with
8 bytes of flags in each 16-byte store; LL128 sends 120 bytes of data in each 128-byte line;
Simple sends plain data and synchronises once per step.  Per-hop latencies start from NCCL's
own ``hwLatencies`` table (µs per step, by link and protocol).

What the twin adds is the physics those tables summarise:

* A store of ``s`` bytes crosses an NVLink or PCIe link as a packet with a header, so small
  stores waste bandwidth: efficiency ``s / (s + header)`` (a PCIe TLP costs about 24 bytes of
  header and framing; LL and LL128's flagged stores cross PCIe one 32-byte sector at a time).
* A channel is one CTA, and what limits a Simple or LL128 CTA is the memory operations it
  issues: every byte it loads or stores, local or remote.  That rate grows with threads (more
  loads in flight) and saturates at what one SM can move (a fixed share of the GPU's memory
  bandwidth); LL128's flag synchronisation costs it a quarter.  How many operations a payload
  byte costs depends on the algorithm's primitives (a plain send loads once and stores once; a
  reduce loads twice), see ``schedule.memory_ops_per_byte``.  An LL CTA handles one line per
  thread at a time, so its rate grows linearly with threads, at a fixed time per operation.
* Every link kind delivers a fraction of its raw rate to bulk payload (flow control, CRC,
  encoding): ``LINK_EFFICIENCY``.
"""

from __future__ import annotations

from tuner.config import Proto

PAYLOAD_FRACTION = {Proto.LL: 0.5, Proto.LL128: 120 / 128, Proto.SIMPLE: 1.0}
"""Data bytes per wire byte of each protocol's format."""

STORE_BYTES = {Proto.LL: 128, Proto.LL128: 128, Proto.SIMPLE: 256}
"""Bytes one NVLink packet carries: a warp's contiguous 16-byte LL stores combine into 128-byte
writes, LL128 writes whole 128-byte lines, Simple fills full packets."""

PCIE_FLAG_STORE_BYTES = 32
"""LL and LL128 write with volatile stores, which leave the GPU one 32-byte sector at a time
(the unit of every global-memory transaction, CUDA C++ Best Practices Guide, "Coalesced Access
to Global Memory"); across PCIe each sector is one write TLP with its own ~24-byte header."""

PACKET_HEADER_BYTES = {"nvlink": 16, "pcie": 24, "cpu": 24, "net": 0, "local": 0}
"""Per-packet overhead; the NIC moves whole buffers by RDMA, so the protocol's store size does
not matter there (only its payload fraction does)."""

LINK_EFFICIENCY = {"nvlink": 0.84, "pcie": 1.0, "cpu": 0.75, "net": 0.92, "local": 1.0}
"""Share of a link's one-way rate left for packets after flow control, CRC and encoding.
PCIe links in the topology already carry usable rates (NCCL's convention: 12 GB/s for Gen3
x16, 24 for Gen4), so only the per-packet header is charged there."""

HOP_LATENCY_US = {
    # link kind: (LL, LL128, Simple) per step, from NCCL's hwLatencies (ring rows).  Network
    # steps are built from the proxy path instead (``netpath``).
    "nvlink": (0.6, 1.9, 3.4),
    "pcie": (1.0, 2.5, 5.7),
    "cpu": (1.0, 2.5, 5.7),
    "local": (0.0, 0.0, 0.0),
}

LAUNCH_US = {Proto.LL: 6.0, Proto.LL128: 7.5, Proto.SIMPLE: 7.5}
"""Kernel launch, argument setup and the first flag round trip (NCCL's base latencies, rounded)."""

EXTRA_GPU_LAUNCH_US = 2.3
"""Each further GPU launched from the same host thread (nccl-tests ``-g N``) adds one launch."""

PROTO_COPY_FACTOR = {Proto.LL128: 0.75, Proto.SIMPLE: 1.0}
"""A channel's payload rate with LL128 as a share of Simple's: 120 data bytes per 128-byte line,
each warp synchronised on its flag thread.  Measured on H200 (NCCL 2.28.9, 2-rank ring, 1-16
channels, ``benchmarks/nccl_channels.py``): 0.74-0.83 of Simple for AllReduce, AllGather and
ReduceScatter."""

LL_OP_US = 0.19
"""An LL thread handles one 16-byte line (8 data bytes) at a time: it polls the line until its
flag is valid, then loads, reduces and stores what the primitive needs, and only then takes its
next line.  So a channel moves ``nthreads × 8`` bytes per pass, and a pass lasts this long per
memory operation of the primitive (rate linear in threads, no saturation).  Measured on H200
(NCCL 2.28.9, 512 threads, ``benchmarks/nccl_channels.py``): a 2-rank ring sends 5.3 GB/s per
channel for AllReduce (4 operations per byte), 4.1-4.3 for AllGather and ReduceScatter (5)."""


ROOT_COMPLEX_P2P_EFFICIENCY = 0.72
"""Peer-to-peer TLPs forwarded by a CPU's root complex (GPUs with no PCIe switch between them,
nvidia-smi's NODE/SYS) move at about this share of the link rate: the host bridge is built for
traffic to memory, not between its ports."""

THREADS_AT_HALF_RATE = 160
"""Threads at which a CTA reaches half its peak rate (memory parallelism saturates)."""


CTA_HBM_SHARE = 0.0215
"""Bytes one CTA loads plus stores per second with unlimited threads, as a share of its GPU's
memory bandwidth.  Two measurements agree on it: 24 A100 channels of a ring AllReduce sustain
about 595 GB/s of loads plus stores whether the ring has 2, 4 or 8 ranks (vTrain and Azure
ND A100 v4 nccl-tests: busbw × operations per byte = 206×3, 222×2.67, 231×2.57; 0.0209 of
1,555 GB/s at unlimited threads), and one channel of a 2-rank ring on H200 (NCCL 2.28.9,
``benchmarks/nccl_channels.py``) sends 20.9 GB/s at 4 operations per byte (0.0225 of 4,800)."""


def store_efficiency(proto: Proto, link_kind: str, *, dma: bool = False) -> float:
    """Payload bytes per raw link byte for ``proto`` on a link of ``link_kind``.

    ``dma``: the bytes are moved by a NIC or copy engine in full-size packets, so only the
    protocol's payload fraction counts, not its store size.
    """
    header = PACKET_HEADER_BYTES[link_kind]
    store = STORE_BYTES[Proto.SIMPLE if dma else proto]
    if link_kind in ("pcie", "cpu") and proto is not Proto.SIMPLE and not dma:
        store = PCIE_FLAG_STORE_BYTES
    return LINK_EFFICIENCY[link_kind] * store / (store + header) * PAYLOAD_FRACTION[proto]


def hop_latency_us(proto: Proto, link_kind: str) -> float:
    return HOP_LATENCY_US[link_kind][proto.nccl_index]


def cta_copy_gbps(hbm_gbps: float, proto: Proto, nthreads, ops_per_byte: float = 2.0):
    """Payload rate of one channel's CTA with ``nthreads`` threads (scalar or numpy array) on a
    GPU with ``hbm_gbps`` of memory bandwidth, when each payload byte costs ``ops_per_byte``
    bytes of loads and stores (2 for a plain copy).  LL is bound by its one-line passes."""
    if proto is Proto.LL:
        return nthreads * 8 / (LL_OP_US * 1e3 * ops_per_byte)
    peak = CTA_HBM_SHARE * hbm_gbps * PROTO_COPY_FACTOR[proto] / ops_per_byte
    return peak * nthreads / (nthreads + THREADS_AT_HALF_RATE)
