"""NCCL's built-in numbers: cost-model tables and kernel/buffer constants.

Values are those of NCCL v2.28.9 (``src/graph/tuning.cc``, ``src/include/device.h``,
``collectives.h``, ``comm.h``); the few entries that differ in v2.27.5, v2.29.7 and v2.30.7
are chosen by :func:`tuner_constants`, and releases 2.8 – 2.26 take theirs from the table of
:mod:`twin.nccl_model.releases`.  Tables are indexed like NCCL's: ``[algo][proto]`` with
the :class:`~tuner.config.Algo` / :class:`~tuner.config.Proto` index order, compute
capability rows Volta/Ampere/Hopper/Blackwell, node-count columns N1/N2/N4+.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from twin.nccl_model.releases import ReleaseFacts, facts

Version = tuple[int, int, int]

# Kernel and buffer constants (device.h, collectives.h, comm.h).
NCCL_STEPS = 8
MAXCHANNELS = 64
WARP_SIZE = 32
MAX_NTHREADS = 640
SIMPLE_MAX_NTHREADS = 512
LL_MAX_NTHREADS = 512
LL128_MAX_NTHREADS = 640
THREAD_THRESHOLD = (8, 8, 64)  # LL, LL128, Simple (Ring LL is multiplied by nRanks)
COLLNET_THREAD_THRESHOLD = 512
LL128_LINEELEMS, LL128_DATAELEMS = 16, 15
LL128_SHMEM_ELEMS_PER_THREAD = 8  # NCCL_LL128_SHMEM_ELEMS_PER_THREAD (src/include/device.h; devcomm.h @ v2.8.4-1)
GRAIN_BYTES = (16, 1920, 512)  # ncclProtoGrainSize: LL, LL128, Simple
PCI_BW = 12.0  # GB/s, PCIe Gen3 x16 as NCCL counts it
NVLS_CHUNK = 128 << 10
MAX_NVLS_ARITY = 32
MAX_DIRECT_ARITY = 7
P2P_NVL_CHUNK, P2P_PCI_CHUNK, P2P_NET_CHUNK = 512 << 10, 128 << 10, 128 << 10
MIN_TRAFFIC_PER_CHANNEL = 16 << 10  # scheduleCollTasksToPlan's cell granularity

VOLTA, AMPERE, HOPPER, BLACKWELL = range(4)
HW_NVLINK, HW_PCI, HW_NET = range(3)

NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)

_BASE_LAT = (
    (6.8, 14.0, 8.4), (6.6, 14.0, 8.4),  # Tree, Ring
    (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),  # CollNetDirect, CollNetChain
    (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),  # NVLS, NVLSTree
    (8.0, 8.0, 8.0),  # PAT
)

_HW_LAT = (
    (  # NVLink
        (0.6, 1.25, 4.0), (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7), (0.0, 0.0, 2.8),
        (0.0, 0.0, 25.0), (0.0, 0.0, 25.0),
        (0.0, 0.0, 4.0),
    ),
    (  # PCI
        (1.0, 1.9, 4.0), (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7), (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),
        (0.0, 0.0, 4.0),
    ),
    (  # NET
        (5.0, 8.5, 14.0), (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0), (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0), (0.0, 0.0, 20.9),
        (0.0, 0.0, 14.0),
    ),
)

_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
_NVLS_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5))

# Blackwell rows, which moved between releases (2.27 has no NVLSTree table).
_BLACKWELL = {
    (2, 27): dict(ring_ll128=(73.4, 73.4, 73.4), tree_ll128=(73.4, 73.4, 58.0), tree=(77.4, 82.8, 72.0),
                  nvls_tree=None),
    (2, 28): dict(ring_ll128=(73.4, 34.6, 73.4), tree_ll128=(55.6, 31.67, 20.0), tree=(70.0, 42.8, 24.0),
                  nvls_tree=(0.0, 96.0, 43.8)),
    (2, 29): dict(ring_ll128=(40.0, 40.0, 40.0), tree_ll128=(55.6, 31.67, 20.0), tree=(70.0, 42.8, 24.0),
                  nvls_tree=(0.0, 96.0, 43.8)),
    (2, 30): dict(ring_ll128=(40.0, 40.0, 40.0), tree_ll128=(55.6, 31.67, 20.0), tree=(70.0, 42.8, 24.0),
                  nvls_tree=(0.0, 96.0, 80.0)),
}

# Tree correction factor, indexed by log2(nBytes >> 6): 64 B ... 512 MiB (from v2.29 24
# columns, older releases 23 with the same first 23 values).
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)


@dataclass(frozen=True)
class TunerConstants:
    """``ncclTunerConstants_t`` of one NCCL release (plus release-dependent switches)."""

    base_lat: tuple
    hw_lat: tuple
    ring_ll128: tuple
    tree_ll128: tuple
    tree: tuple
    nvls_tree: tuple | None  # perChMaxNVLSTreeBws (none before 2.28)
    nvls_efficiency_model: bool  # ≥ 2.28: NVLS bandwidth from nvlsEfficiency; 2.27: min(bwIntra, bwInter)
    tree_correction_cols: int  # 23 before 2.29, 24 from 2.29
    nvls_tree_correction: bool  # ≥ 2.29: NVLSTree AllReduce also gets the tree correction on sm100 x86
    max_dev_work_batch_colls: int  # 1024 B / sizeof(ncclDevWorkColl): 10 (96 B) before 2.30, 8 (128 B)
    collnet_chain_arity_check: bool  # ≥ 2.28 drops CollNetChain above 8 local ranks
    nvls_multinode_channel_cap: bool  # ≥ 2.28 caps multi-node NVLS at comm->nChannels
    tree_correction: tuple  # treeCorrectionFactor rows LL, LL128, Simple
    facts: ReleaseFacts
    """The release's entry of :mod:`twin.nccl_model.releases` (older formula switches)."""


def release(version: Version) -> tuple[int, int]:
    """The table generation a version uses: (2, minor) up to (2, 30); refuses one before 2.8.3."""
    facts(version)  # refuses versions before the oldest modelled release
    return (2, 30) if tuple(version[:2]) >= (2, 30) else (2, version[1])


def tuner_constants(version: Version) -> TunerConstants:
    """The tables of ``version``'s release (refuses one before 2.8.3)."""
    return _tables(tuple(version))


@cache  # a pure function of the release, asked for by every schedule the twin builds
def _tables(version: Version) -> TunerConstants:
    rel = release(version)
    if rel < (2, 27):
        return _from_facts(facts(version))
    bw = _BLACKWELL[rel]
    hw_lat = _HW_LAT
    if rel == (2, 27):  # NVLSTree over the network had the Tree value
        hw_lat = (hw_lat[0], hw_lat[1], (*hw_lat[2][:5], (0.0, 0.0, 14.0), hw_lat[2][6]))
    return TunerConstants(
        base_lat=_BASE_LAT,
        hw_lat=hw_lat,
        ring_ll128=(*_RING_LL128, bw["ring_ll128"]),
        tree_ll128=(*_TREE_LL128, bw["tree_ll128"]),
        tree=(*_TREE, bw["tree"]),
        nvls_tree=None if bw["nvls_tree"] is None else (*_NVLS_TREE, bw["nvls_tree"]),
        nvls_efficiency_model=rel >= (2, 28),
        tree_correction_cols=24 if rel >= (2, 29) else 23,
        nvls_tree_correction=rel >= (2, 29),
        max_dev_work_batch_colls=8 if rel >= (2, 30) else 10,
        collnet_chain_arity_check=rel >= (2, 28),
        nvls_multinode_channel_cap=rel >= (2, 28),
        tree_correction=TREE_CORRECTION,
        facts=facts(version),
    )


def _from_facts(f: ReleaseFacts) -> TunerConstants:
    """A release before 2.27: every table from :mod:`twin.nccl_model.releases`."""
    return TunerConstants(
        base_lat=f.base_lat, hw_lat=f.hw_lat, ring_ll128=f.ring_ll128, tree_ll128=f.tree_ll128, tree=f.tree,
        nvls_tree=None, nvls_efficiency_model=False, tree_correction_cols=23, nvls_tree_correction=False,
        max_dev_work_batch_colls=10, collnet_chain_arity_check=False, nvls_multinode_channel_cap=False,
        tree_correction=(TREE_CORRECTION[0][:23], f.tree_correction_ll128, TREE_CORRECTION[2][:23]), facts=f,
    )
