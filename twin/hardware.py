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
class GpuSpec:
    """Spec-sheet figures of one GPU model."""

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
    bf16_tflops: float
    """Dense BF16 tensor throughput (Volta has no BF16: its CUDA-core FP32 rate)."""
    pci_device_ids: tuple[int, ...] = ()
    """PCI device ids (vendor 0x10de) that identify this model in NCCL's topology XML."""

    @property
    def nvlink_total_gbps(self) -> float:
        """All NVLinks together, GB/s per direction (450 for an H100 SXM5)."""
        return float(self.nvlink_gbps * self.nvlinks)


# Sources: NVIDIA data sheets (V100, A100, A40, RTX A6000, L40S, H100, H200, HGX B200).
# NVLink per link and direction: NVLink2/3/4 25 GB/s, NVLink5 50 GB/s, the GA102 bridge
# (A40, RTX A6000) 14.0625 GB/s ("112.5 GB/s bidirectional" over 4 links).
# bf16_tflops is dense (half the "with sparsity" figure).  PCI ids from pci.ids.
_GPUS = (
    GpuSpec("V100-SXM2-16GB", "volta", 70, 80, 900, 25, 6, 3, 16, 15.7, (0x1DB1,)),
    GpuSpec("V100-SXM2-32GB", "volta", 70, 80, 900, 25, 6, 3, 16, 15.7, (0x1DB5,)),
    GpuSpec("A100-SXM4-40GB", "ampere", 80, 108, 1555, 25, 12, 4, 16, 312, (0x20B0,)),
    GpuSpec("A100-SXM4-80GB", "ampere", 80, 108, 2039, 25, 12, 4, 16, 312, (0x20B2,)),
    GpuSpec("A100-PCIE-40GB", "ampere", 80, 108, 1555, 25, 12, 4, 16, 312, (0x20F1,)),
    GpuSpec("A100-PCIE-80GB", "ampere", 80, 108, 1935, 25, 12, 4, 16, 312, (0x20B5,)),
    GpuSpec("A40", "ampere", 86, 84, 696, 14.0625, 4, 4, 16, 149.7, (0x2235,)),
    GpuSpec("RTX-A6000", "ampere", 86, 84, 768, 14.0625, 4, 4, 16, 154.8, (0x2230,)),
    GpuSpec("L40S", "ada", 89, 142, 864, 0, 0, 4, 16, 362.05, (0x26B9,)),
    GpuSpec("H100-SXM5-80GB", "hopper", 90, 132, 3350, 25, 18, 5, 16, 989.4, (0x2330,)),
    GpuSpec("H100-PCIE", "hopper", 90, 114, 2000, 25, 12, 5, 16, 756.4, (0x2331,)),
    GpuSpec("H200-SXM-141GB", "hopper", 90, 132, 4800, 25, 18, 5, 16, 989.4, (0x2335,)),
    GpuSpec("B200", "blackwell", 100, 148, 8000, 50, 18, 5, 16, 2250),
)
GPUS: dict[str, GpuSpec] = {g.model: g for g in _GPUS}
"""Every known model by canonical name."""

_ALIASES = {
    "v100": "V100-SXM2-32GB", "v100-sxm2": "V100-SXM2-32GB", "v100-32gb": "V100-SXM2-32GB",
    "v100-16gb": "V100-SXM2-16GB",
    "a100": "A100-SXM4-40GB", "a100-sxm4": "A100-SXM4-40GB", "a100-40gb": "A100-SXM4-40GB",
    "a100-sxm-40gb": "A100-SXM4-40GB", "a100-80gb": "A100-SXM4-80GB", "a100-sxm-80gb": "A100-SXM4-80GB",
    "a100-pcie": "A100-PCIE-40GB", "a100-40gb-pcie": "A100-PCIE-40GB",
    "a100-80gb-pcie": "A100-PCIE-80GB",
    "rtx-a6000": "RTX-A6000", "a6000": "RTX-A6000",
    "h100": "H100-SXM5-80GB", "h100-sxm": "H100-SXM5-80GB", "h100-sxm5": "H100-SXM5-80GB",
    "h100-80gb-hbm3": "H100-SXM5-80GB",
    "h200": "H200-SXM-141GB", "h200-sxm": "H200-SXM-141GB", "h200-141gb": "H200-SXM-141GB",
}

DEFAULT_MODEL_BY_SM = {70: "V100-SXM2-32GB", 80: "A100-SXM4-40GB", 86: "A40", 89: "L40S",
                       90: "H100-SXM5-80GB", 100: "B200"}
"""The model assumed for an sm version when nothing else names the GPU."""


def _key(name: str) -> str:
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    return re.sub(r"^(nvidia-|tesla-)+", "", key)


_BY_KEY = {_key(g.model): g.model for g in _GPUS} | _ALIASES


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


# Dense peak TFLOP/s by element type, from the same data sheets (half the "with sparsity"
# figures).  ``float32`` is the CUDA-core rate (PyTorch's default matmul precision), ``tf32``
# the tensor-core rate; BF16 is ``GpuSpec.bf16_tflops``.  A type a generation lacks takes the
# next slower one it has (V100 has no TF32: the FP32 rate; no FP8 before Ada: the FP16 rate).
_PEAK_TFLOPS = {
    # model:            float32, tf32, float16, fp8
    "V100-SXM2-16GB": (15.7, 15.7, 125.0, 125.0),
    "V100-SXM2-32GB": (15.7, 15.7, 125.0, 125.0),
    "A100-SXM4-40GB": (19.5, 156.0, 312.0, 312.0),
    "A100-SXM4-80GB": (19.5, 156.0, 312.0, 312.0),
    "A100-PCIE-40GB": (19.5, 156.0, 312.0, 312.0),
    "A100-PCIE-80GB": (19.5, 156.0, 312.0, 312.0),
    "A40": (37.4, 74.8, 149.7, 149.7),
    "RTX-A6000": (38.7, 77.4, 154.8, 154.8),
    "L40S": (91.6, 183.0, 362.05, 733.0),
    "H100-SXM5-80GB": (67.0, 494.7, 989.4, 1978.9),
    "H100-PCIE": (51.0, 378.0, 756.4, 1513.0),
    "H200-SXM-141GB": (67.0, 494.7, 989.4, 1978.9),
    "B200": (75.0, 1125.0, 2250.0, 4500.0),
}
_PEAK_COLUMN = {"float32": 0, "float": 0, "tf32": 1, "float16": 2, "half": 2,
                "fp8_e4m3": 3, "fp8_e5m2": 3, "int8": 3, "uint8": 3}


def peak_tflops(gpu: GpuSpec, dtype: str = "bfloat16") -> float:
    """Dense peak TFLOP/s of ``gpu`` on ``dtype`` (a ``traces.task`` dtype name or ``tf32``).

    >>> peak_tflops(gpu_spec("h100"), "bfloat16"), peak_tflops(gpu_spec("a100"), "float32")
    (989.4, 19.5)
    """
    if dtype == "bfloat16":
        return gpu.bf16_tflops
    if dtype not in _PEAK_COLUMN:
        known = ", ".join(["bfloat16", *_PEAK_COLUMN])
        raise TopologyError(f"no peak FLOP rate for element type {dtype!r} (known: {known})")
    return _PEAK_TFLOPS[gpu.model][_PEAK_COLUMN[dtype]]
