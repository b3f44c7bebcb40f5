"""GPU specs, name resolution and link-rate helpers in twin/hardware.py."""

import dataclasses
import doctest
from collections import Counter

import pytest

import twin.hardware
from twin.hardware import (
    DEFAULT_MODEL_BY_SM,
    FABRIC_KINDS,
    GPUS,
    GpuSpec,
    TopologyError,
    fabric_kind,
    gpu_for_pci_device,
    gpu_spec,
    pcie_gbps,
    socket_link_gbps,
)
from twin.topology import load_cluster


@pytest.mark.parametrize(("name", "model"), [
    ("a100", "A100-SXM4-40GB"),
    ("h100", "H100-SXM5-80GB"),
    ("H200", "H200-SXM-141GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("NVIDIA RTX A6000", "RTX-A6000"),
    ("nvidia a40", "A40"),
    ("h100-pcie", "H100-PCIE"),
])
def test_gpu_spec_accepts_aliases_and_nvidia_smi_names(name, model):
    """Canonical names, short aliases and what nvidia-smi prints resolve, case-insensitively."""
    assert gpu_spec(name).model == model


def test_unknown_model_names_it_and_lists_known_ones():
    """An unknown model is a TopologyError naming it and listing the known models."""
    with pytest.raises(TopologyError, match=r"unknown GPU model 'B999' \(known: V100-SXM2-16GB, .*L40S"):
        gpu_spec("B999")


def test_topology_error_is_a_value_error():
    """Callers that catch ValueError (``twin.rank`` turns one into a ConfigError naming the task)
    also catch a bad cluster found deep inside a build, with the preset and the problem named."""
    with pytest.raises(ValueError, match=r"^preset 'dgx-a100': cluster 'dgx-a100': cannot take 9 GPUs per node of 8$"):
        load_cluster("dgx-a100", gpus_per_node=9)


@pytest.mark.parametrize(("model", "links", "total"), [
    ("V100-SXM2-32GB", 6, 150.0), ("A100-SXM4-40GB", 12, 300.0), ("H100-SXM5-80GB", 18, 450.0),
    ("H200-SXM-141GB", 18, 450.0), ("A40", 4, 56.25), ("L40S", 0, 0.0), ("B200", 18, 900.0),
    ("B300", 18, 900.0), ("GB200", 18, 900.0), ("GH200", 18, 450.0), ("H100-NVL", 12, 300.0),
    ("H100-PCIE", 12, 300.0),
])
def test_nvlink_counts_and_totals_follow_the_data_sheets(model, links, total):
    """NVLink links per GPU and GB/s per direction in total (e.g. H100: 18 × 25 = 450)."""
    spec = GPUS[model]
    assert (spec.nvlinks, spec.nvlink_total_gbps) == (links, total)


def test_every_model_has_every_fact():
    """A new GPU model is one ``GpuSpec`` entry, and it must carry everything the twin reads: sizes
    and rates a real GPU can have, peak rates that rise as precision falls, a price, a PCI id, names
    no other model uses; every sm version has exactly one default model."""
    for spec in GPUS.values():
        assert all(getattr(spec, f.name) is not None for f in dataclasses.fields(GpuSpec)), spec.model
        assert spec.sm_count > 0 and spec.hbm_gbps > 0 and spec.pcie_gen >= 3 and spec.pcie_lanes > 0, spec.model
        assert (spec.nvlinks == 0) == (spec.nvlink_gbps == 0), spec.model
        peak = spec.peak
        assert all(isinstance(v, float) and v > 0 for v in dataclasses.astuple(peak)), spec.model
        assert peak.float32 <= peak.tf32 <= peak.float16 <= peak.fp8 and peak.float32 <= peak.bfloat16 <= peak.fp8
        assert isinstance(spec.price_per_gpu_hour, float) and spec.price_per_gpu_hour > 0, spec.model
        assert spec.pci_device_ids and all(0 < i <= 0xFFFF for i in spec.pci_device_ids), spec.model
    names = Counter(n.lower() for g in GPUS.values() for n in (g.model, *g.aliases))
    assert [n for n, count in names.items() if count > 1] == []
    assert [(g.model, gpu_spec(alias).model) for g in GPUS.values() for alias in g.aliases
            if gpu_spec(alias).model != g.model] == []
    ids = Counter(i for g in GPUS.values() for i in g.pci_device_ids)
    assert [hex(i) for i, count in ids.items() if count > 1] == []
    defaults = Counter(g.sm_version for g in GPUS.values() if g.default_for_sm)
    assert set(defaults) == {g.sm_version for g in GPUS.values()} and set(defaults.values()) == {1}
    assert all(GPUS[DEFAULT_MODEL_BY_SM[g.sm_version]].default_for_sm for g in GPUS.values())


def test_arch_and_sm_version_agree():
    """Each architecture has its compute capability."""
    sm_by_arch = {"volta": {70}, "ampere": {80, 86}, "ada": {89}, "hopper": {90}, "blackwell": {100, 103}}
    for spec in GPUS.values():
        assert spec.sm_version in sm_by_arch[spec.arch], spec.model


def test_pci_device_ids_identify_models():
    """NCCL's XML device ids map to models; unknown ids map to nothing."""
    assert gpu_for_pci_device(0x2330).model == "H100-SXM5-80GB"
    assert gpu_for_pci_device(0x20B2).model == "A100-SXM4-80GB"
    assert gpu_for_pci_device(0xFFFF) is None


@pytest.mark.parametrize(("gen", "lanes", "gbps"), [(3, 16, 12.0), (4, 16, 24.0), (5, 16, 48.0), (4, 8, 12.0),
                                                    (1, 16, 3.0), (6, 16, 96.0)])
def test_pcie_gbps_matches_nccl_width_times_speed_over_80(gen, lanes, gbps):
    """PCIe GB/s per direction as NCCL computes it (Gen3 x16 = PCI_BW = 12)."""
    assert pcie_gbps(gen, lanes) == gbps


def test_pcie_gbps_rejects_unknown_generations_and_lanes():
    """Generation 7 and zero lanes are errors."""
    with pytest.raises(TopologyError, match="unknown PCIe generation 7"):
        pcie_gbps(7)
    with pytest.raises(TopologyError, match="at least 1 lane"):
        pcie_gbps(4, 0)


def test_socket_link_gbps_follows_nccls_constants():
    """AMD 16, Intel by model (Skylake 10, Sapphire Rapids 22, Emerald Rapids 40), POWER9 32."""
    assert socket_link_gbps("amd") == 16.0
    assert socket_link_gbps("intel", 85) == 10.0
    assert socket_link_gbps("intel", 207) == 40.0
    assert socket_link_gbps("power") == 32.0
    with pytest.raises(TopologyError, match="unknown CPU vendor 'via'"):
        socket_link_gbps("via")


def test_docstring_examples_run():
    """The examples in twin/hardware.py's docstrings hold."""
    assert doctest.testmod(twin.hardware).failed == 0


@pytest.mark.parametrize(("name", "model"), [
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300 SXM6 AC", "B300"), ("b300", "B300"),
])
def test_2026_machines_resolve_by_what_nvidia_smi_prints(name, model):
    """The Blackwell and Grace machines resolve by the names nvidia-smi prints for them."""
    assert gpu_spec(name).model == model


def test_newer_gpus_carry_their_data_sheet_figures():
    """HBM and dense BF16 rise from H100 NVL to GH200 to Blackwell; GB200 runs faster than B200 (its
    NVL72 power budget); B300 is sm_103 on PCIe Gen6; A100 80 GB differs from 40 GB only in HBM."""
    nvl, gh, gb, b200, b300 = (gpu_spec(m) for m in ("H100-NVL", "GH200", "GB200", "B200", "B300"))
    assert nvl.hbm_gbps < gh.hbm_gbps < gb.hbm_gbps == b200.hbm_gbps == b300.hbm_gbps == 8000
    assert nvl.peak.bfloat16 < gh.peak.bfloat16 < b200.peak.bfloat16 < gb.peak.bfloat16
    assert (b300.sm_version, b300.pcie_gen, b300.sm_count) == (103, 6, 160)
    a40, a80 = gpu_spec("A100-SXM4-40GB"), gpu_spec("A100-SXM4-80GB")
    assert (a40.hbm_gbps, a80.hbm_gbps) == (1555, 2039) and a40.peak == a80.peak


def test_fabric_kinds_say_how_nccl_drives_them():
    """Every kind has a title, NCCL module and sources; TCP alone is host-staged; Google's plugins
    and aws-ofi-nccl on first-generation EFA fix NCCL_PROTO=Simple; aws-ofi-nccl reports 75 µs to
    NCCL; an unknown kind lists the known ones."""
    assert set(FABRIC_KINDS) == {"infiniband", "roce", "tcp", "gpudirect-tcpx", "gpudirect-tcpxo", "efa",
                                 "efa-v1", "slingshot", "gib-a3u", "gib-a4"}
    assert all(k.title and k.nccl_net and k.sources for k in FABRIC_KINDS.values())
    assert [k.name for k in FABRIC_KINDS.values() if not k.gpudirect] == ["tcp"]
    assert {k.name for k in FABRIC_KINDS.values() if k.env.get("NCCL_PROTO") == "Simple"} == {
        "gpudirect-tcpx", "gpudirect-tcpxo", "efa-v1"}
    assert {k.name: k.reported_latency_us for k in FABRIC_KINDS.values() if k.reported_latency_us} == {
        "efa": 75.0, "efa-v1": 75.0}
    assert fabric_kind("efa-v1").times == "efa"  # the same wire: only how NCCL may drive it differs
    assert fabric_kind("gib-a3u").times == fabric_kind("gib-a4").times == "roce"  # gIB's tuner on RoCE's wire
    assert fabric_kind("gib-a4").env["NCCL_TUNER_CONFIG_PATH"].endswith("/tuner_config_a4.txtpb")
    with pytest.raises(TopologyError, match=r"^unknown fabric kind 'omnipath' \(known: infiniband, roce, tcp, "):
        fabric_kind("omnipath")
