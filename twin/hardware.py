"""GPU and link specifications: the numbers a cluster description is built from.

A DGX H100 node is eight ``H100-SXM5-80GB``: each has 18 NVLink4 links of 25 GB/s per
direction (450 GB/s), HBM3 at 3,350 GB/s and a PCIe Gen5 x16 port.  This module keeps
those spec-sheet numbers in one table and turns the names people type ("h100",
"NVIDIA H100 80GB HBM3", a PCI device id, an sm version) into one canonical model.

Units: every bandwidth here is GB/s (10^9 bytes per second) in one direction, except
where a name says Gb/s (NIC line rates).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traces.errors import CcltwinError


class TopologyError(CcltwinError):
    """A cluster description, a hardware name in it, or a file describing it is wrong.

    The message names the element or file and the problem.  ``twin.topology``
    re-exports it; it lives here because GPU names are checked here.
    """


@dataclass(frozen=True)
class PeakTflops:
    """Dense peak TFLOP/s of one GPU model by element type (half the "with sparsity" figures).

    ``float32`` is the CUDA-core rate (PyTorch's default matmul precision), the others tensor-core
    rates.  A type a generation lacks takes the next slower one it has (V100 has no TF32: the FP32
    rate; no BF16: its FP32 rate; no FP8 before Ada: the FP16 rate).
    """

    float32: float
    tf32: float
    float16: float
    bfloat16: float
    fp8: float


@dataclass(frozen=True)
class GpuSpec:
    """Every fact ccltwin uses about one GPU model; a new model is one entry of ``_GPUS``."""

    model: str
    """Canonical name, e.g. ``"A100-SXM4-40GB"``."""
    arch: str
    """``volta``, ``ampere``, ``ada``, ``hopper`` or ``blackwell``."""
    sm_version: int
    """Compute capability × 10 (80 for sm_80)."""
    sm_count: int
    hbm_gbps: float
    """Memory bandwidth, GB/s."""
    nvlink_gbps: float
    """GB/s per direction of ONE NVLink link (0 without NVLink)."""
    nvlinks: int
    """NVLink links per GPU (a bridge's links for PCIe cards)."""
    pcie_gen: int
    pcie_lanes: int
    peak: PeakTflops
    """Dense peak TFLOP/s by element type (``peak_tflops`` reads it by dtype name)."""
    price_per_gpu_hour: float
    """USD per GPU-hour, the what-if report's default cost: a rounded public on-demand cloud list
    price (2025).  It only puts clusters on one scale; a real quote passes its own price."""
    pci_device_ids: tuple[int, ...]
    """PCI device ids (vendor 0x10de) that identify this model in NCCL's topology XML."""
    aliases: tuple[str, ...] = ()
    """Short names people type for it (``gpu_spec`` also takes what nvidia-smi prints)."""
    default_for_sm: bool = False
    """The model assumed for its sm version when nothing else names the GPU."""

    @property
    def nvlink_total_gbps(self) -> float:
        """All NVLinks together, GB/s per direction (450 for an H100 SXM5)."""
        return float(self.nvlink_gbps * self.nvlinks)


# Sources: NVIDIA data sheets (V100, A100, A40, RTX A6000, L40S, H100, H200, HGX B200, and those
# named above the newer entries).
# NVLink per link and direction: NVLink2/3/4 25 GB/s, NVLink5 50 GB/s, the GA102 bridge
# (A40, RTX A6000) 14.0625 GB/s ("112.5 GB/s bidirectional" over 4 links).
# Peak TFLOP/s are dense (half the "with sparsity" figure).  PCI ids from pci.ids.  Prices:
# rounded public on-demand cloud list prices (2025).
_GPUS = (
    GpuSpec("V100-SXM2-16GB", "volta", 70, 80, 900, 25, 6, 3, 16, PeakTflops(15.7, 15.7, 125.0, 15.7, 125.0),
            0.55, (0x1DB1,), aliases=("v100-16gb",)),
    GpuSpec("V100-SXM2-32GB", "volta", 70, 80, 900, 25, 6, 3, 16, PeakTflops(15.7, 15.7, 125.0, 15.7, 125.0),
            0.55, (0x1DB5,), aliases=("v100", "v100-sxm2", "v100-32gb"), default_for_sm=True),
    GpuSpec("A100-SXM4-40GB", "ampere", 80, 108, 1555, 25, 12, 4, 16, PeakTflops(19.5, 156.0, 312.0, 312.0, 312.0),
            1.29, (0x20B0,), aliases=("a100", "a100-sxm4", "a100-40gb", "a100-sxm-40gb"), default_for_sm=True),
    GpuSpec("A100-SXM4-80GB", "ampere", 80, 108, 2039, 25, 12, 4, 16, PeakTflops(19.5, 156.0, 312.0, 312.0, 312.0),
            1.79, (0x20B2,), aliases=("a100-80gb", "a100-sxm-80gb")),
    GpuSpec("A100-PCIE-40GB", "ampere", 80, 108, 1555, 25, 12, 4, 16, PeakTflops(19.5, 156.0, 312.0, 312.0, 312.0),
            1.29, (0x20F1,), aliases=("a100-pcie", "a100-40gb-pcie")),
    GpuSpec("A100-PCIE-80GB", "ampere", 80, 108, 1935, 25, 12, 4, 16, PeakTflops(19.5, 156.0, 312.0, 312.0, 312.0),
            1.79, (0x20B5,), aliases=("a100-80gb-pcie",)),
    GpuSpec("A40", "ampere", 86, 84, 696, 14.0625, 4, 4, 16, PeakTflops(37.4, 74.8, 149.7, 149.7, 149.7),
            0.75, (0x2235,), default_for_sm=True),
    GpuSpec("RTX-A6000", "ampere", 86, 84, 768, 14.0625, 4, 4, 16, PeakTflops(38.7, 77.4, 154.8, 154.8, 154.8),
            0.80, (0x2230,), aliases=("a6000",)),
    GpuSpec("L40S", "ada", 89, 142, 864, 0, 0, 4, 16, PeakTflops(91.6, 183.0, 362.05, 362.05, 733.0),
            1.00, (0x26B9,), default_for_sm=True),
    GpuSpec("H100-SXM5-80GB", "hopper", 90, 132, 3350, 25, 18, 5, 16, PeakTflops(67.0, 494.7, 989.4, 989.4, 1978.9),
            2.99, (0x2330,), aliases=("h100", "h100-sxm", "h100-sxm5", "h100-80gb-hbm3"), default_for_sm=True),
    GpuSpec("H100-PCIE", "hopper", 90, 114, 2000, 25, 12, 5, 16, PeakTflops(51.0, 378.0, 756.4, 756.4, 1513.0),
            2.49, (0x2331,)),
    GpuSpec("H200-SXM-141GB", "hopper", 90, 132, 4800, 25, 18, 5, 16, PeakTflops(67.0, 494.7, 989.4, 989.4, 1978.9),
            3.79, (0x2335,), aliases=("h200", "h200-sxm", "h200-141gb")),
    GpuSpec("B200", "blackwell", 100, 148, 8000, 50, 18, 5, 16, PeakTflops(75.0, 1125.0, 2250.0, 2250.0, 4500.0),
            4.99, (0x2901,), default_for_sm=True),
    # H100 NVL (NVIDIA H100 NVL data sheet): 94 GB HBM3 at 3.9 TB/s, a PCIe Gen5 card bridged in
    # pairs by three NVLink bridges, 600 GB/s bidirectional (12 NVLink4 links); 835 TFLOPS BF16
    # dense; price: H100 PCIe's (no separate public list price).
    GpuSpec("H100-NVL", "hopper", 90, 132, 3900, 25, 12, 5, 16, PeakTflops(60.0, 417.5, 835.0, 835.0, 1670.0),
            2.49, (0x2321,), aliases=("h100-nvl-94gb",)),
    # GH200 Grace Hopper Superchip (NVIDIA GH200 data sheet): the H100 die with 96 GB HBM3 at
    # 4 TB/s, 18 NVLink4 links (900 GB/s bidirectional), NVLink-C2C 900 GB/s to its Grace CPU;
    # price: Lambda's public on-demand GH200 rate ($1.49/GPU-hour, 2024-25).
    GpuSpec("GH200", "hopper", 90, 132, 4000, 25, 18, 5, 16, PeakTflops(67.0, 494.7, 989.4, 989.4, 1978.9),
            1.49, (0x2342,), aliases=("gh200-96gb", "gh200-480gb", "grace-hopper")),
    # GB200 (NVIDIA GB200 NVL72 data sheet, per GPU = rack figure / 72): 186 GB HBM3e at 8 TB/s,
    # 18 NVLink5 links (1.8 TB/s bidirectional), FP32 80 TFLOPS, TF32 1.25, BF16 2.5, FP8 5 PFLOPS
    # dense; price: CoreWeave's public GB200 NVL72 rate ($42 per 4-GPU instance-hour, 2025).
    GpuSpec("GB200", "blackwell", 100, 148, 8000, 50, 18, 5, 16, PeakTflops(80.0, 1250.0, 2500.0, 2500.0, 5000.0),
            10.50, (0x2941,), aliases=("gb200-nvl72", "b200-grace")),
    # B300 / Blackwell Ultra (NVIDIA HGX B300 data sheet, per GPU = board figure / 8; 160 SMs from
    # NVIDIA's "Inside NVIDIA Blackwell Ultra" blog, 2025): 288 GB HBM3e at 8 TB/s, 18 NVLink5 links
    # (1.8 TB/s bidirectional), PCIe Gen6; BF16 2.25, FP8 4.5 PFLOPS dense (Blackwell Ultra raises
    # FP4, not these); no public list price yet: B200's; PCI id from pci.ids ("GB110 [B300 SXM6 AC]").
    GpuSpec("B300", "blackwell", 103, 160, 8000, 50, 18, 6, 16, PeakTflops(75.0, 1125.0, 2250.0, 2250.0, 4500.0),
            4.99, (0x3182,), aliases=("b300-sxm", "b300-sxm6-ac", "blackwell-ultra"), default_for_sm=True),
)
GPUS: dict[str, GpuSpec] = {g.model: g for g in _GPUS}
"""Every known model by canonical name."""

DEFAULT_MODEL_BY_SM = {g.sm_version: g.model for g in _GPUS if g.default_for_sm}
"""The model assumed for an sm version when nothing else names the GPU."""


def _key(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return re.sub(r"^(nvidia-|tesla-)+", "", key)


_BY_KEY = {_key(name): g.model for g in _GPUS for name in (g.model, *g.aliases)}


def gpu_spec(name: str) -> GpuSpec:
    """The spec of a GPU model, by canonical name, alias or the name nvidia-smi prints.

    >>> gpu_spec("NVIDIA H100 80GB HBM3").nvlink_total_gbps
    450.0
    >>> gpu_spec("a100").model
    'A100-SXM4-40GB'
    """
    model = _BY_KEY.get(_key(str(name)))
    if model is None:
        raise TopologyError(f"unknown GPU model {name!r} (known: {', '.join(GPUS)})")
    return GPUS[model]


def gpu_for_pci_device(device_id: int) -> GpuSpec | None:
    """The model with this PCI device id, or None."""
    return next((g for g in _GPUS if device_id in g.pci_device_ids), None)


# NCCL's per-lane PCIe rate in units of 100 Mb/s (kvDictPciGen in src/graph/topo.cc);
# a link gets width × rate / 80 GB/s: Gen3 x16 = 12 GB/s (NCCL's PCI_BW), about 75 % of
# the 15.75 GB/s raw rate, Gen4 x16 = 24, Gen5 x16 = 48.
_PCIE_LANE_RATE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}


def pcie_gbps(gen: int, lanes: int = 16) -> float:
    """Usable GB/s per direction of a PCIe link, as NCCL estimates it.

    >>> pcie_gbps(3), pcie_gbps(4), pcie_gbps(5, 8)
    (12.0, 24.0, 24.0)
    """
    if gen not in _PCIE_LANE_RATE:
        raise TopologyError(f"unknown PCIe generation {gen} (known: 1-6)")
    if lanes < 1:
        raise TopologyError(f"a PCIe link needs at least 1 lane, got {lanes}")
    return lanes * _PCIE_LANE_RATE[gen] / 80


CPU_VENDORS = ("intel", "amd", "arm", "power", "unknown")

# Inter-socket GB/s per direction as NCCL's topology search assumes (src/graph/topo.h):
# AMD_BW 16, ARM_BW 6, P9_BW 32, Intel by generation BDW_QPI 6, SKL_QPI 10, SRP_QPI 22,
# ERP_QPI 40.  "unknown" takes the Skylake figure.
_SOCKET_LINK_GBPS = {"amd": 16.0, "arm": 6.0, "power": 32.0, "intel": 10.0, "unknown": 10.0}
_INTEL_MODEL_GBPS = {0x8F: 22.0, 0xCF: 40.0}  # Sapphire Rapids, Emerald Rapids


def socket_link_gbps(vendor: str, intel_model: int | None = None) -> float:
    """GB/s between two sockets for a CPU vendor (and Intel model number, as NCCL reads it).

    >>> socket_link_gbps("amd"), socket_link_gbps("intel", 143), socket_link_gbps("intel", 79)
    (16.0, 22.0, 6.0)
    """
    if vendor not in _SOCKET_LINK_GBPS:
        raise TopologyError(f"unknown CPU vendor {vendor!r} (known: {', '.join(CPU_VENDORS)})")
    if vendor == "intel" and intel_model is not None:
        if intel_model < 0x55:  # Broadwell and older
            return 6.0
        return _INTEL_MODEL_GBPS.get(intel_model, 10.0)
    return _SOCKET_LINK_GBPS[vendor]


_PEAK_FIELD = {"bfloat16": "bfloat16", "float32": "float32", "float": "float32", "tf32": "tf32",
               "float16": "float16", "half": "float16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "int8": "fp8",
               "uint8": "fp8"}


def peak_tflops(gpu: GpuSpec, dtype: str = "bfloat16") -> float:
    """Dense peak TFLOP/s of ``gpu`` on ``dtype`` (a ``traces.task`` dtype name or ``tf32``).

    >>> peak_tflops(gpu_spec("h100"), "bfloat16"), peak_tflops(gpu_spec("a100"), "float32")
    (989.4, 19.5)
    """
    if dtype not in _PEAK_FIELD:
        raise TopologyError(f"no peak FLOP rate for element type {dtype!r} (known: {', '.join(_PEAK_FIELD)})")
    return getattr(gpu.peak, _PEAK_FIELD[dtype])


TUNER_PLUGINS = ("none", "aws-ofi-nccl")
"""Tuner plugins the twin's NCCL model emulates: ``none`` is NCCL's own choice."""


@dataclass(frozen=True)
class FabricKind:
    """What a cluster's NICs speak and how NCCL drives them: the structural facts of a fabric kind.

    The kind's times and its share of line rate are parameters (``TwinParams.fabric``); what is
    here does not get fitted: whether the NIC moves GPU memory itself, which NCCL network module
    drives it, and the NCCL settings its vendor's profile fixes (which the twin's NCCL model
    honours between nodes).
    """

    name: str
    title: str
    nccl_net: str
    """NCCL's network module: the built-in ``IB`` or ``Socket`` transport, or a net plugin."""
    gpudirect: bool
    """The NIC reads and writes GPU memory (GPUDirect RDMA, or TCPX's dma-buf zero copy); False:
    every byte is staged through host memory, crossing the CPU's root complex on both sides."""
    nccl_env: tuple[tuple[str, str], ...] = ()
    """NCCL variables the vendor's required profile sets (``NCCL_PROTO``, ``NCCL_ALGO``,
    ``NCCL_BUFFSIZE``, ``NCCL_NVLS_ENABLE``, ``NCCL_TUNER_CONFIG_PATH``)."""
    sources: tuple[str, ...] = ()
    reported_latency_us: float = 0.0
    """The latency the network module reports to NCCL (``ncclNetProperties_t.latency``): NCCL's
    topology takes it as the NIC's ``latency`` (``src/graph/topo.cc``), its search as the graph's
    ``latencyInter``, which the cost model adds to every network step, twice for Simple
    (``src/graph/tuning.cc``).  It steers NCCL's choice of algorithm and protocol, not the time a
    step takes (that is ``TwinParams.fabric``)."""
    tuner_plugin: str = "none"
    """The tuner NCCL ≥ 2.21.5 loads from the kind's net plugin by default (``TUNER_PLUGINS``;
    ``src/misc/tuner.cc``): ``aws-ofi-nccl`` on the libfabric kinds, whose tuner acts only on the
    AWS instances it knows (``twin.nccl_model.ofi_tuner``)."""
    striped_rails: bool = False
    """The net plugin presents the NICs nearest a GPU as one device of their summed speed and spreads
    each message over them: aws-ofi-nccl's RDMA protocol, the default on p5/p5e/p5en
    (``platform_data_map``'s ``PROTOCOL::RDMA``, ``src/platform-aws.cpp``), groups the NICs by GPU
    locality (``nccl_ofi_topo.cpp``), reports the first rail's speed times the group's size
    (``getProperties``, ``nccl_ofi_rdma.cpp``) and writes each message in stripes, one RDMA write
    (``fi_writedata``) each, to the rails in turn: as many stripes as the largest divisor of the
    group's rails up to ``ceil(size / OFI_NCCL_MIN_STRIPE_SIZE)`` (128 KiB), so on a p5's 4 rails a
    message under 128 KiB goes whole to one rail, one up to 384 KiB to 2, a larger one to all 4
    (``get_num_stripes``, ``nccl_ofi_scheduler.cpp``, aws-ofi-nccl v1.13.0 to master 2daf7d30;
    v1.7 to v1.12 sent a message of up to ``OFI_NCCL_ROUND_ROBIN_THRESHOLD``, 256 KiB, whole to
    one rail and a larger one over all).  Over many messages each rail so carries its share of the
    device's flows, as the twin spreads them (``Cluster.striped_route``)."""
    times: str = ""
    """The kind whose times and line-rate share (``TwinParams.fabric``) this one shares; empty: its
    own (a kind that differs from another only in how NCCL may drive it)."""

    @property
    def env(self) -> dict[str, str]:
        return dict(self.nccl_env)


_GOOGLE_TCPX = ("Google Cloud, 'Maximize GPU network bandwidth with GPUDirect-TCPX' and the "
                "GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx nccl-config.yaml: "
                "NCCL_ALGO=Ring, NCCL_PROTO=Simple, NCCL_BUFFSIZE=4194304, NCCL_NVLS_ENABLE=0",)
_GOOGLE_TCPXO = ("Google Cloud, 'Maximize GPU network bandwidth with GPUDirect-TCPXO' (a3-mega) and its "
                 "nccl-env-profile.sh (AI-Hypercomputer/gpu-recipes): NCCL_ALGO=Ring,Tree, NCCL_PROTO=Simple, "
                 "NCCL_BUFFSIZE=8388608, NCCL_NVLS_ENABLE=0, plugin 'FasTrak' (libnccl-net.so)",)
_GOOGLE_GIB = ("Google Cloud a3-ultra / a4 (ConnectX-7 RoCE v2): the gIB net plugin, NCCL's IB verbs transport, with "
               "/usr/local/gib/scripts/set_nccl_env.sh: NCCL_NET=gIB, NCCL_CROSS_NIC=0, NCCL_NET_GDR_LEVEL=PIX, "
               "NCCL_IB_QPS_PER_CONNECTION=4, NCCL_IB_ADAPTIVE_ROUTING=1, NCCL_IB_TC=52, NCCL_IB_FIFO_TC=84, "
               "NCCL_P2P_NET_CHUNKSIZE=131072, NCCL_NVLS_CHUNKSIZE=524288 (the gIB diagnostic image's Dockerfile "
               "ENV); none adds time per message in NCCL's IB transport (src/transport/net_ib/p2p.cc: whole "
               "requests take the QPs in turn unless NCCL_IB_SPLIT_DATA_ON_QPS, adaptive routing one zero-byte "
               "write with immediate after a message over 8 KiB), so the kinds keep RoCE's figures",
               "NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb (a4: tuner_config_a4.txtpb): "
               "Google's config-based tuner plugin; its tables as apple/axlearn ships them "
               "(axlearn/cloud/gcp/nccl/{a3_ultra,a4_high}/tuner_config.txtpb, Apache-2.0), "
               "twin.nccl_model.gib_tuner")
_GIB_CONFIGS = "/usr/local/gib/configs/"
_AWS_OFI = ("aws/aws-ofi-nccl src/platform-aws.c (v1.7-1.8, 2023): NCCL_PROTO=simple unless the EFA endpoint "
            "delivers 128-byte aligned writes in order "
            "(FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES / ..._SENDRECV_...), 'such as on P4d/P4de'; "
            "platform_data_map reports a net latency of 75 us on p4d, p4de and p5 (150 elsewhere)",)
# The same file also sets NCCL_NVLS_ENABLE=0, 'a bug with EFA and NCCL 2.17/2.18 ... we need to come back
# to this when the bug is fixed': a workaround for two NCCL releases, not a property of the fabric, so
# the kinds leave NVLS to NCCL (the twin emulates later releases too).
_AWS_OFI_LATENCY_US = 75.0
"""What aws-ofi-nccl tells NCCL a network message takes on p4d, p4de and p5 (``platform_data_map``)."""
_FABRIC_KINDS = (
    FabricKind("infiniband", "InfiniBand verbs (RDMA)", "IB", True,
               sources=("NCCL src/transport/net_ib.cc", "NVIDIA perftest ib_write_lat, ConnectX-6/7")),
    FabricKind("roce", "RoCE v2 (RDMA over Converged Ethernet)", "IB", True,
               sources=("NCCL drives RoCE through its IB transport (NCCL_IB_GID_INDEX)",
                        "IBTA RoCEv2 annex: Ethernet, IP and UDP headers around the IB transport")),
    FabricKind("tcp", "TCP sockets (host-staged)", "Socket", False,
               sources=("NCCL src/transport/net_socket.cc: host-memory buffers, helper threads "
                        "(NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD)",)),
    FabricKind("gpudirect-tcpx", "Google GPUDirect-TCPX (a3-high)", "GPUDirectTCPX plugin", True,
               (("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "Simple"), ("NCCL_BUFFSIZE", "4194304"),
                ("NCCL_NVLS_ENABLE", "0")), _GOOGLE_TCPX),
    FabricKind("gpudirect-tcpxo", "Google GPUDirect-TCPXO (a3-mega)", "FasTrak plugin", True,
               (("NCCL_ALGO", "Ring,Tree"), ("NCCL_PROTO", "Simple"), ("NCCL_BUFFSIZE", "8388608"),
                ("NCCL_NVLS_ENABLE", "0")), _GOOGLE_TCPXO),
    FabricKind("efa", "AWS Elastic Fabric Adapter v2+ (SRD, libfabric; p5, p5e, p5en)", "aws-ofi-nccl plugin", True,
               sources=("AWS, 'Elastic Fabric Adapter' (EC2 user guide): OS bypass, SRD, GPUDirect RDMA on p4d/p5",
                        "aws/aws-ofi-nccl: the libfabric net plugin, RDMA protocol striping over the EFA rails",
                        *_AWS_OFI),
               reported_latency_us=_AWS_OFI_LATENCY_US, tuner_plugin="aws-ofi-nccl", striped_rails=True),
    FabricKind("efa-v1", "AWS Elastic Fabric Adapter v1 (SRD, libfabric; p4d, p4de)", "aws-ofi-nccl plugin", True,
               (("NCCL_PROTO", "Simple"),),
               ("AWS, 'Elastic Fabric Adapter' (EC2 user guide): first-generation EFA on p4d/p4de, 4x 100 Gb/s",
                *_AWS_OFI), reported_latency_us=_AWS_OFI_LATENCY_US, times="efa",
               tuner_plugin="aws-ofi-nccl"),
    FabricKind("slingshot", "HPE Slingshot-11 (Cassini NIC, libfabric cxi)", "aws-ofi-nccl plugin (cxi)", True,
               sources=("HPE Slingshot-11: Cassini 200 Gb/s NIC, Rosetta 64-port switch",
                        "NERSC/CSCS docs: NCCL on Slingshot through aws-ofi-nccl with the cxi provider"),
               tuner_plugin="aws-ofi-nccl"),
    FabricKind("gib-a3u", "RoCE v2 through Google's gIB plugin and tuner (a3-ultra)", "gIB plugin (IB verbs)", True,
               (("NCCL_TUNER_CONFIG_PATH", _GIB_CONFIGS + "tuner_config_a3u.txtpb"),), _GOOGLE_GIB, times="roce"),
    FabricKind("gib-a4", "RoCE v2 through Google's gIB plugin and tuner (a4)", "gIB plugin (IB verbs)", True,
               (("NCCL_TUNER_CONFIG_PATH", _GIB_CONFIGS + "tuner_config_a4.txtpb"),), _GOOGLE_GIB, times="roce"),
)
FABRIC_KINDS: dict[str, FabricKind] = {k.name: k for k in _FABRIC_KINDS}
"""Every known fabric kind by name; ``infiniband`` is the default."""
DEFAULT_FABRIC_KIND = "infiniband"


def fabric_kind(name: str) -> FabricKind:
    """The fabric kind called ``name``.

    >>> fabric_kind("gpudirect-tcpxo").env["NCCL_PROTO"], fabric_kind("tcp").gpudirect
    ('Simple', False)
    """
    if name not in FABRIC_KINDS:
        raise TopologyError(f"unknown fabric kind {name!r} (known: {', '.join(FABRIC_KINDS)})")
    return FABRIC_KINDS[name]
