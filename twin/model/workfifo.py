"""The CTAs of a call fetching their work from NCCL's FIFO in host memory (NCCL 2.8 – 2.21).

Before a CTA of an NCCL kernel moves a byte it copies its work descriptor into shared memory.
Up to 2.21 that descriptor sits in host memory: 2.8 – 2.12 pass the first work to block 0 as the
kernel's argument and every other CTA copies its ``ncclWork`` out of ``channel->workFifo``
(``load_coll``, ``src/collectives/device/common.h`` @ v2.8.4-1, the FIFO ``ncclCudaHostCalloc``'d in
``src/channel.cc``), reading the host-side ``abortFlag`` with it; 2.13 – 2.21 have every CTA copy
``workHead + blockIdx.x`` out of ``comm->workFifoHeap``, ``cudaHost`` memory unless GDRCopy is
enabled (``src/init.cc``, ``src/collectives/device/common.h`` @ v2.18.5-1).  From 2.22.3 the work
travels in the kernel's arguments (release notes: "Utilize the full amount of kernel argument
space permitted (4k) before resorting to work fifo"; ``ncclDevWorkStorageTypeArgs``).  Which CTAs
read host memory per release: ``ReleaseFacts.host_work_fifo``.

A read of host memory from the GPU is one PCIe round trip, about 1 µs (``net.pcie_read_rtt_us``,
Neugebauer et al., SIGCOMM 2018).  On A100 nodes these fetches add up, one round trip per CTA:
every A100 nccl-tests file in the repository, whatever the release (2.8.4, 2.18.5, or the Echo
logs' unprinted one, a 2022 release by their nccl-tests: ``ECHO_NCCL`` in ``benchmarks/accuracy.py``)
and launch, takes 1.1–1.6 µs more per channel a call uses, independent of the bytes per channel
and of the ring's step count (``tests/data/nccl-tests``: Azure ND A100 v4 2 GPUs 14.9 → 46.2 µs
from 2 to 24 channels at 8–11 KiB each, while doubling the bytes at 24 channels costs 2.8 µs;
ABCI 8 GPUs on 2.8.4, 14 steps, 40.2 → 58.3 µs from 2 to 16 channels).  What serialises them is
not known.  On Hopper they do not add up: the Azure ND H100 v5 file (NCCL 2.18.5, 16 NVLS CTAs)
takes 25.6 µs for a whole call at 1 KiB, less than 16 fetches in turn would leave for its NVLS
pass, so sm90 and newer GPUs are not charged.
"""

from __future__ import annotations

from twin.model.geometry import CommGeometry
from twin.nccl_model.constants import tuner_constants

HOPPER_SM = 90
"""The first GPU generation whose CTAs' work fetches are not seen to add up (above)."""


def fifo_readers(host_work_fifo: str, ctas: int) -> int:
    """CTAs of a ``ctas``-CTA kernel that read their work from host memory.

    >>> [fifo_readers(kind, 24) for kind in ("after_first", "every", "none")]
    [23, 24, 0]
    """
    return {"after_first": max(ctas - 1, 0), "every": ctas, "none": 0}[host_work_fifo]


def work_fetch_us(geom: CommGeometry, ctas: int) -> float:
    """What a call of ``ctas`` CTAs on ``geom`` spends fetching its work from host memory before
    its last CTA starts: one PCIe read round trip per CTA that reads it, on GPUs older than Hopper.

    >>> from twin.topology import load_cluster
    >>> a100 = load_cluster("dgx-a100")
    >>> [work_fetch_us(CommGeometry(a100, nccl_version=v), 24) for v in ((2, 8, 4), (2, 18, 5), (2, 28, 9))]
    [23.0, 24.0, 0.0]
    >>> work_fetch_us(CommGeometry(load_cluster("dgx-h100"), nccl_version=(2, 18, 5)), 16)
    0.0
    """
    if geom.cluster.gpu.sm_version >= HOPPER_SM:
        return 0.0
    readers = fifo_readers(tuner_constants(geom.nccl_version).facts.host_work_fifo, ctas)
    return readers * geom.params.net.pcie_read_rtt_us
