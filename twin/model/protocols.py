"""What LL, LL128 and Simple cost on each kind of link, and how fast one channel copies.

Facts carried over from NCCL (research/nccl-mechanisms.md §4): LL sends 8 bytes of data with
8 bytes of flags in each 16-byte store; LL128 sends 120 bytes of data in each 128-byte line;
Simple sends plain data and synchronises once per step.  Per-hop latencies start from NCCL's
own ``hwLatencies`` table (µs per step, by link and protocol).

What the twin adds is the physics those tables summarise:

* A store of ``s`` bytes crosses an NVLink or PCIe link as a packet with a header, so small
  stores waste bandwidth: efficiency ``s / (s + header)`` (a PCIe TLP costs about 24 bytes of
  header and framing; LL128's flagged stores cross PCIe one 32-byte sector at a time).
* A channel is one CTA, and what limits a Simple or LL128 CTA is the memory operations it
  issues: every byte it loads or stores, local or remote.  That rate grows with threads (more
  loads in flight) and saturates at what one SM can move (a fixed share of the GPU's memory
  bandwidth); LL128's flag synchronisation costs it a quarter.  How many operations a payload
  byte costs depends on the algorithm's primitives (a plain send loads once and stores once; a
  reduce loads twice), see ``schedule.memory_ops_per_byte``.  An LL CTA handles one line per
  thread at a time, so its rate grows linearly with threads, at a fixed time per operation.
* Every link kind delivers a fraction of its raw rate to bulk payload (flow control, CRC,
  encoding).

The numbers of that physics (header sizes, efficiencies, per-step latencies, copy rates) are
parameters, ``twin.params.TwinParams``; what stays here is the protocols' formats.
"""

from __future__ import annotations

from tuner.config import Proto
from twin.params import DEFAULT_PARAMS, TwinParams

LL_LINE_DATA_BYTES = 8
"""Data bytes in one 16-byte LL line (the other 8 are flags): ``EltPerLine`` in ``prims_ll.h``."""

PAYLOAD_FRACTION = {Proto.LL: 0.5, Proto.LL128: 120 / 128, Proto.SIMPLE: 1.0}
"""Data bytes per wire byte of each protocol's format."""

STORE_BYTES = {Proto.LL: 128, Proto.LL128: 128, Proto.SIMPLE: 256}
"""Bytes one NVLink packet carries: a warp's contiguous 16-byte LL stores combine into 128-byte
writes, LL128 writes whole 128-byte lines, Simple fills full packets."""

PCIE_LL128_STORE_BYTES = 32
"""What one LL128 write TLP carries across PCIe, as its measured rate says: a 2×L40S ring over
the host bridge moves LL128 at 0.57 of Simple's rate (``tests/data/nccl-tests`` L40S files at
128 MiB, 8.9 against 15.7 GB/s busbw), what 32-byte TLPs with ~24-byte headers give (0.59;
32-byte sectors are the unit of every global-memory transaction: CUDA C++ Best Practices Guide,
"Coalesced Access to Global Memory").  Its stores have LL's shape (16 bytes per thread, a warp's 512 bytes contiguous:
``store128`` at ``wireOffset = … + 2 * wid``, ``prims_ll128.h``), so what splits them is not
the store itself; NCCL leaves LL128 off on PCIe (it relies on NVLink's 128-byte write
atomicity), and that cause is not modelled."""


def link_store_bytes(proto: Proto, link_kind: str) -> int:
    """Bytes one write packet carries for ``proto`` on a link inside a node.

    LL writes one 16-byte line per thread, a warp's 32 lines contiguous (``storeLL``,
    ``st.volatile.global.v4.u32`` at ``sendPtr + offset``, ``offset`` stepping by thread,
    ``prims_ll.h``): four whole 128-byte lines per store instruction, on NVLink and PCIe alike.
    On 2×L40S over the host bridge LL runs at 0.38 of Simple's rate (5.9 against 15.7 GB/s at
    128 MiB): 128-byte TLPs give 0.46 (0.5 × 128/152 against 256/280), 32-byte ones 0.31; the
    rest (the receiver's polling of each line's flag) is not modelled.  LL128 across PCIe:
    ``PCIE_LL128_STORE_BYTES``.
    """
    if proto is Proto.LL128 and link_kind in ("pcie", "cpu"):
        return PCIE_LL128_STORE_BYTES
    return STORE_BYTES[proto]


def store_efficiency(proto: Proto, link_kind: str, *, dma: bool = False, params: TwinParams = DEFAULT_PARAMS
                     ) -> float:
    """Payload bytes per raw link byte for ``proto`` on a link of ``link_kind``.

    ``dma``: the bytes are moved by a NIC or copy engine in full-size packets, so only the
    protocol's payload fraction counts, not its store size.  The NIC moves whole buffers by RDMA,
    so across the network the protocol's store size never matters (only its payload fraction).
    """
    if link_kind == "net":
        efficiency, header = params.net.efficiency, 0.0
    else:
        link = params.link.of(link_kind)
        efficiency, header = link.efficiency, link.header_bytes
    store = STORE_BYTES[Proto.SIMPLE] if dma else link_store_bytes(proto, link_kind)
    return efficiency * store / (store + header) * PAYLOAD_FRACTION[proto]


def hop_latency_us(proto: Proto, link_kind: str, params: TwinParams = DEFAULT_PARAMS, *, tree: bool = False
                   ) -> float:
    """One step of ``proto`` over a link of ``link_kind`` inside a node (none without a link);
    ``tree``: a tree's hop (``IntraLink.tree_step_us``).

    >>> hop_latency_us(Proto.SIMPLE, "pcie"), hop_latency_us(Proto.SIMPLE, "pcie", tree=True)
    (5.7, 4.0)
    """
    if link_kind == "local":
        return 0.0
    link = params.link.of(link_kind)
    return (link.tree_step_us if tree else link.step_us).of(proto)


def cta_copy_gbps(hbm_gbps: float, proto: Proto, nthreads, ops_per_byte: float = 2.0, *,
                  params: TwinParams = DEFAULT_PARAMS):
    """Payload rate of one channel's CTA with ``nthreads`` threads (scalar or numpy array) on a
    GPU with ``hbm_gbps`` of memory bandwidth, when each payload byte costs ``ops_per_byte``
    bytes of loads and stores (2 for a plain copy).  LL is bound by its one-line passes; LL128
    copies at ``protocol.ll128_copy_factor`` of Simple's rate."""
    if proto is Proto.LL:
        return nthreads * 8 / (params.protocol.ll_op_us * 1e3 * ops_per_byte)
    factor = params.protocol.ll128_copy_factor if proto is Proto.LL128 else 1.0
    peak = params.cta.hbm_share * hbm_gbps * factor / ops_per_byte
    return peak * nthreads / (nthreads + params.cta.threads_at_half_rate)
