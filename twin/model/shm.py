"""A GPU's CTAs receiving through host memory: NCCL's SHM transport between two GPUs of a host.

NCCL sends through host memory where it will not go peer to peer: a PCIe path through the CPU's
root complex (nvidia-smi's PHB, NODE, SYS) on Intel, and on AMD with more than two GPUs
(``ncclTopoCheckP2p``, ``src/graph/paths.cc``: P2P level PXB there; NCCL issue #896: "it is faster
to use shared memory").  By default the buffer sits in the receiver's host memory; the sender's
CTA stores into it and the receiver's CTA loads from it (``NCCL_SHM_USE_CUDA_MEMCPY=0``,
``NCCL_SHM_LOCALITY`` receiver side, ``src/transport/shm.cc``).

A load of host memory is a round trip across PCIe: a Simple thread keeps ``ncclCollUnroll`` loads
of 16 B in flight (8 on sm_80 and later, 4 before; ``src/include/device.h``), so ``T`` receiving
threads move at most ``T × 128 B`` per read latency.  Measured on one H200 (PCIe Gen5 x16, Intel
host, ``benchmarks/gpu_shm_duplex.cu``, ``benchmarks/data/h200-shm-duplex.txt``): CTAs that only load
host memory see ``SHM_READ_LATENCY_US``; while the same GPU's other CTAs store into host memory
at the same pace (a tree rank's up and down passes through one SHM hop), the read requests queue
behind the posted writes on the GPU's link (PCIe ordering: a read request does not pass a posted
write) and each direction moves ``1 / (1/R + 1/x)``, ``x`` the latency-bound rate above and ``R``
``SHM_DUPLEX_SHARE`` of the link's one-way rate.  nvbandwidth shows the same on A100 PCIe Gen4
(NVIDIA/nvbandwidth issues #11, #53: copies into the GPU fall from 25 to 11-13 GB/s while copies
out run, which keep 24-25).

>>> round(float(receive_gbps(4 * 256, 52.3, duplex=False, sm_version=90)), 1)  # alone: measured 35.7
34.5
>>> round(float(receive_gbps(4 * 256, 52.3, duplex=True, sm_version=90)), 1)  # coupled: measured 20.6
19.4
"""

from __future__ import annotations

SHM_READ_LATENCY_US = 3.8
"""Host-memory read latency seen by CTAs loading it, Little's law over their loads in flight: the
mean of 1-2 CTAs of 256-512 threads (3.5-4.2 µs) on an H200, PCIe Gen5 x16, Intel host
(``benchmarks/data/h200-shm-duplex.txt``)."""
SHM_DUPLEX_SHARE = 0.85
"""Each direction's ceiling ``R``, as a share of the link's one-way rate, while a GPU loads and
stores host memory at once: ``1/(1/R + 1/x)`` with ``R`` = 44.4 GB/s fits every coupled run
(1-4 CTAs of 256-512 threads each way, 7.2-25.5 GB/s) within 6 %, against 52.3 GB/s one way
(CTAs storing alone, ``benchmarks/data/h200-host-memory.txt``)."""
LOAD_BYTES = 16
"""One thread's load: ``BytePack<16>`` (``reduceCopyPacks``, ``src/device/common_kernel.h``)."""


def loads_in_flight(sm_version: int) -> int:
    """Loads a Simple thread keeps in flight: ``ncclCollUnroll`` (``src/include/device.h``)."""
    return 8 if sm_version >= 80 else 4


def receive_gbps(threads, one_way_gbps: float, *, duplex: bool, sm_version: int):
    """What ``threads`` receiving threads of one GPU load from host memory per second, in GB/s
    (scalar or numpy array): latency-bound, and with ``duplex`` (the GPU also stores into host
    memory at the same pace) in series with the link's duplex ceiling."""
    latency_bound = threads * loads_in_flight(sm_version) * LOAD_BYTES / (SHM_READ_LATENCY_US * 1e3)
    if not duplex:
        return latency_bound
    ceiling = SHM_DUPLEX_SHARE * one_way_gbps
    return 1.0 / (1.0 / ceiling + 1.0 / latency_bound)
