"""A GPU's CTAs receiving through host memory: NCCL's SHM transport between two GPUs of a host.

NCCL sends through host memory where it will not go peer to peer: a PCIe path through the CPU's
root complex (nvidia-smi's PHB, NODE, SYS) on Intel, and on AMD with more than two GPUs
(``ncclTopoCheckP2p``, ``src/graph/paths.cc``: P2P level PXB there; NCCL issue #896: "it is faster
to use shared memory").  By default the buffer sits in the receiver's host memory; the sender's
CTA stores into it and the receiver's CTA loads from it (``NCCL_SHM_USE_CUDA_MEMCPY=0``,
``NCCL_SHM_LOCALITY`` receiver side, ``src/transport/shm.cc``).

A load of host memory is a round trip across PCIe: a Simple thread keeps ``ncclCollUnroll`` loads
of 16 B in flight (8 on sm_80 and later, 4 before; ``src/include/device.h``), so ``T`` copying
threads move at most ``T × 128 B`` per read latency.  A Simple thread group that sends keeps one
warp out of the copy, to fence and post each step while the others copy (``nworkers``,
``src/device/prims_simple.h``: ``nthreads - WARP_SIZE`` from 3 warps on), so of a ring's 544
threads 512 load, of a tree's 256 broadcast threads 224.  Measured on one H200 (PCIe Gen5 x16,
Intel host, ``benchmarks/gpu_shm_duplex.cu``, ``benchmarks/data/h200-shm-duplex.txt``, every
thread of its CTAs loading): CTAs that only load host memory see ``SHM_READ_LATENCY_US``; while
the same GPU's other CTAs store into host memory at the same pace (a tree rank's up and down
passes through one SHM hop), the read requests queue behind the posted writes on the GPU's link
(PCIe ordering: a read request does not pass a posted write) and each direction moves
``1 / (1/R + 1/x)``, ``x`` the latency-bound rate above and ``R`` ``SHM_DUPLEX_SHARE`` of the
link's rate as the twin carries it (NCCL's: 48 GB/s for Gen5 x16).  nvbandwidth shows the same on
A100 PCIe Gen4 (NVIDIA/nvbandwidth issues #11, #53: copies into the GPU fall from 25 to 11-13 GB/s
while copies out run, which keep 24-25).

>>> round(float(receive_gbps(4 * 256, 48.0, duplex=False, sm_version=90)), 1)  # alone: measured 35.7
34.5
>>> round(float(receive_gbps(4 * 256, 48.0, duplex=True, sm_version=90)), 1)  # coupled: measured 20.6
19.4
>>> copy_threads(256), copy_threads(544), copy_threads(64)
(224, 512, 64)
"""

from __future__ import annotations

SHM_READ_LATENCY_US = 3.8
"""Host-memory read latency seen by CTAs loading it, Little's law over their loads in flight: the
mean of 1-2 CTAs of 256-512 threads (3.5-4.2 µs) on an H200, PCIe Gen5 x16, Intel host
(``benchmarks/data/h200-shm-duplex.txt``)."""
SHM_DUPLEX_SHARE = 0.925
"""Each direction's ceiling ``R``, as a share of the link's rate as the twin carries it (NCCL's
``pcie_gbps``: 48 GB/s for Gen5 x16), while a GPU loads and stores host memory at once:
``1/(1/R + 1/x)`` with ``R`` = 44.4 GB/s fits every coupled run (1-4 CTAs of 256-512 threads each
way, 7.2-25.5 GB/s) within 6 % (``benchmarks/data/h200-shm-duplex.txt``), 0.925 of 48 (0.85 of the
52.3 GB/s its CTAs store alone, ``benchmarks/data/h200-host-memory.txt``).  Taken on the nominal
rate, not the twin's payload rate (48 GB/s less TLP headers, 43.9), which would have put it 16 %
below the rate it was measured at."""
SIMPLE_EXTRA_GROUP_IF_NTHREADS_GE = 96
"""A Simple thread group of at least 3 warps that sends keeps its last warp out of the copy
(``NCCL_SIMPLE_EXTRA_GROUP_IF_NTHREADS_GE``, ``src/include/device.h`` 2.22-2.28; ``nthreads -
WARP_SIZE >= 64`` in ``prims_simple.h`` 2.12-2.21; ``postThreads`` in ``primitives.h`` 2.8)."""
WARP_SIZE = 32
LOAD_BYTES = 16
"""One thread's load: ``BytePack<16>`` (``reduceCopyPacks``, ``src/device/common_kernel.h``)."""


def loads_in_flight(sm_version: int) -> int:
    """Loads a Simple thread keeps in flight: ``ncclCollUnroll`` (``src/include/device.h``)."""
    return 8 if sm_version >= 80 else 4


def copy_threads(threads):
    """Threads of a sending Simple group that copy (``nworkers``, ``prims_simple.h``): all but the
    warp that fences and posts each step, from ``SIMPLE_EXTRA_GROUP_IF_NTHREADS_GE`` threads on."""
    return threads - WARP_SIZE * (threads >= SIMPLE_EXTRA_GROUP_IF_NTHREADS_GE)


def receive_gbps(threads, link_gbps: float, *, duplex: bool, sm_version: int):
    """What ``threads`` loading threads of one GPU move from host memory per second, in GB/s
    (scalar or numpy array): latency-bound, and with ``duplex`` (the GPU also stores into host
    memory at the same pace) in series with the duplex ceiling of its link of ``link_gbps``."""
    latency_bound = threads * loads_in_flight(sm_version) * LOAD_BYTES / (SHM_READ_LATENCY_US * 1e3)
    if not duplex:
        return latency_bound
    ceiling = SHM_DUPLEX_SHARE * link_gbps
    return 1.0 / (1.0 / ceiling + 1.0 / latency_bound)
