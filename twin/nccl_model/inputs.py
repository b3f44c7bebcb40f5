"""What NCCL knows about a communicator once its topology search is done.

:class:`NcclCommInfo` carries the handful of numbers NCCL's tuning code reads from
``comm`` and ``comm->graphs`` — ranks, nodes, compute capability, the search's channels
and per-channel bandwidths, path types — plus the environment that changes its choices.
Build it by hand for a what-if, or with :func:`twin.nccl_model.search.comm_info` from a
cluster description.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.hardware import TUNER_PLUGINS
from twin.nccl_model.constants import MAX_NVLS_ARITY, MAXCHANNELS, release
from twin.nccl_model.envparse import parse_algo_env, parse_proto_env
from twin.nccl_model.gib_txtpb import config_table

CPU_VENDORS = ("intel", "amd", "arm", "power")


class PathType(IntEnum):
    """NCCL's path types (``PATH_*`` in ``src/graph/topo.h``), nearest first."""

    LOC = 0
    NVL = 1  # NVLink, direct or through NVSwitches
    NVB = 2  # NVLink through an intermediate GPU
    C2C = 3
    PIX = 4  # at most one PCIe switch
    PXB = 5  # several PCIe switches, no host bridge
    P2C = 6
    PXN = 7  # to a NIC through an NVLink peer GPU
    PHB = 8  # through a PCIe host bridge (CPU)
    SYS = 9  # across the inter-socket link
    NET = 10
    DIS = 11

    @classmethod
    def parse(cls, value: PathType | str) -> PathType:
        if isinstance(value, PathType):
            return value
        try:
            return cls[value.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown NCCL path type {value!r}; expected one of "
                             f"{', '.join(m.name for m in cls)}") from None


@dataclass(frozen=True)
class NcclCommInfo:
    """What NCCL knows about a communicator after its topology search.

    Bandwidths are NCCL's per-channel GB/s of the search graphs (``graph->bwIntra`` /
    ``bwInter``); ``nchannels`` is ``comm->nChannels``, i.e. after NCCL duplicated the
    search channels.  Fields after ``proto_env`` refine the model and have defaults that
    match a plain NVLink or PCIe node.
    """

    nranks: int
    nnodes: int
    sm_version: int
    intra_nvlink: bool
    bw_intra: float
    bw_inter: float
    nchannels: int
    tree_bw_intra: float
    tree_bw_inter: float
    nvls_support: bool = False
    nvls_channels: int = 16
    collnet_support: bool = False
    cpu_vendor: str = "intel"
    ll128_enabled: bool | None = None
    nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION
    nthreads_env: int | None = None
    ll128_nthreads_env: int | None = None
    buffsize: int = 4 << 20
    ll_buffsize: int = 524288
    ll128_buffsize: int = 4915200
    algo_env: str | None = None
    proto_env: str | None = None
    graph_channels: int | None = None
    """Ring/tree search channels (``graph->nChannels``); None: ``nchannels // 2``."""
    intra_path: PathType | str | None = None
    """Ring graph's ``typeIntra``; None: NVL with ``intra_nvlink``, else PHB."""
    inter_path: PathType | str = PathType.PIX
    """Ring graph's ``typeInter`` (GPU to NIC); PIX on a single node."""
    tree_pattern_split: bool = False
    """The tree search fell back from balanced to plain trees (Tree bw ×0.85)."""
    same_channels: bool = True
    latency_inter: float = 0.0
    """``graph->latencyInter`` in µs (the NIC's reported latency, usually 0)."""
    nvls_graph_channels: int | None = None
    """NVLS search channels = NVLS heads; None: ranks per node (one node) or 0."""
    nvls_bw_intra: float | None = None
    nvls_bw_inter: float | None = None
    nvswitch: bool = False
    """An NVSwitch is present (CollNetDirect needs one)."""
    collnet_heads: int = 1
    p2p_channels_per_peer: int | None = None
    """``comm->p2pnChannelsPerPeer``; None: derived as documented in :mod:`select`."""
    tuner: str = "none"
    """The tuner plugin NCCL loads (``twin.hardware.TUNER_PLUGINS``): ``none`` (NCCL's own
    choice) or ``aws-ofi-nccl`` (the EFA net plugin's, :mod:`twin.nccl_model.ofi_tuner`)."""
    instance: str | None = None
    """The EC2 product name the aws-ofi-nccl tuner reads (``p5.48xlarge``); None: unknown, so the
    plugin keeps NCCL's choice."""
    tuner_config: str | None = None
    """The tuner config NCCL runs with (``NCCL_TUNER_CONFIG_PATH``): a bundled
    ``twin.nccl_model.gib_tuner`` table, ``gib-a3u`` or ``gib-a4``, or a gIB tuner config file in
    Google's text format (``twin.nccl_model.gib_txtpb``); None: none."""

    def __post_init__(self) -> None:
        if self.nranks < 1 or self.nnodes < 1 or self.nnodes > self.nranks:
            raise ValueError(f"need 1 ≤ nnodes ≤ nranks, got nranks={self.nranks} nnodes={self.nnodes}")
        if not 1 <= self.nchannels <= MAXCHANNELS:
            raise ValueError(f"nchannels must be in 1..{MAXCHANNELS}, got {self.nchannels}")
        if self.cpu_vendor not in CPU_VENDORS:
            raise ValueError(f"unknown cpu_vendor {self.cpu_vendor!r}; "
                             f"expected one of {', '.join(CPU_VENDORS)}")
        if min(self.bw_intra, self.bw_inter, self.tree_bw_intra, self.tree_bw_inter) < 0:
            raise ValueError("graph bandwidths must be ≥ 0")
        release(self.nccl_version)
        if self.tuner not in TUNER_PLUGINS:
            raise ValueError(f"unknown tuner plugin {self.tuner!r}; expected one of {', '.join(TUNER_PLUGINS)}")
        PathType.parse(self.inter_path)
        if self.intra_path is not None:
            PathType.parse(self.intra_path)
        if self.algo_env is not None:
            parse_algo_env(self.algo_env, self.nccl_version)
        if self.proto_env is not None:
            parse_proto_env(self.proto_env, self.nccl_version)
        if self.tuner_config is not None:
            config_table(self.tuner_config)  # a bundled table's name, or a file that parses

    @property
    def ppn(self) -> float:
        """Ranks per node, as NCCL's float ``nRanks / nNodes``."""
        return self.nranks / self.nnodes

    @property
    def search_channels(self) -> int:
        return self.graph_channels if self.graph_channels is not None else max(1, self.nchannels // 2)

    @property
    def type_intra(self) -> PathType:
        if self.intra_path is not None:
            return PathType.parse(self.intra_path)
        return PathType.NVL if self.intra_nvlink else PathType.PHB

    @property
    def type_inter(self) -> PathType:
        return PathType.parse(self.inter_path)

    @property
    def nvls_graph(self) -> tuple[int, float, float]:
        """NVLS search graph: (channels = heads, bwIntra, bwInter)."""
        heads = self.nvls_graph_channels
        if heads is None:
            heads = min(self.nranks, MAX_NVLS_ARITY) if self.nnodes == 1 else 0
        bw_intra = self.nvls_bw_intra if self.nvls_bw_intra is not None else self.bw_intra
        bw_inter = self.nvls_bw_inter if self.nvls_bw_inter is not None else self.bw_inter
        return heads, bw_intra, bw_inter
