"""A real machine's description in, a cluster description out.

``nvidia-smi topo -m`` output and NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) describe one
node; ``import_spec`` reads either (telling XML from the matrix by its first character), fills
what the file lacks from the arguments, and returns a ``ClusterSpec`` that ``dump_spec`` writes
as YAML, refusing one that would not load.
"""

from __future__ import annotations

import math
from dataclasses import replace
from enum import StrEnum
from pathlib import Path

from twin.hardware import TopologyError, fabric_kind
from twin.topology.build import build_cluster
from twin.topology.loader import read_source
from twin.topology.nccl_xml import parse_nccl_topo_xml
from twin.topology.nvidia_smi import parse_nvidia_smi_topo
from twin.topology.spec import MAX_NIC_GBPS, ClusterSpec

__all__ = ["TopologyFormat", "import_spec"]


class TopologyFormat(StrEnum):
    """The descriptions ``import_spec`` reads (``auto``: tell from the content)."""

    AUTO = "auto"
    NVIDIA_SMI = "nvidia-smi"
    NCCL_XML = "nccl-xml"


def import_spec(file: str | Path, format: TopologyFormat = TopologyFormat.AUTO, *, gpu_model: str | None = None,
                nic_gbps: float | None = None, nvswitch: bool = False, fabric: str | None = None) -> ClusterSpec:
    """The one-node cluster description of ``file`` (``nvswitch``: an XML without ``<nvlink>``
    whose GPUs sit on an NVSwitch; ``fabric``: the NICs' kind, which neither file says);
    raises ``TopologyError`` naming the file and the problem."""
    if nic_gbps is not None and not (math.isfinite(nic_gbps) and 0 < nic_gbps <= MAX_NIC_GBPS):
        raise TopologyError(f"--nic-gbps {nic_gbps:g}: a NIC's line rate must be above 0 and at most "
                            f"{MAX_NIC_GBPS:g} Gb/s (12.5x the fastest NIC, 800 Gb/s)")
    if fabric is not None:
        fabric_kind(fabric)
    text, source, name = read_source(file, "topology")
    if format is TopologyFormat.AUTO:
        format = TopologyFormat.NCCL_XML if text.lstrip().startswith("<") else TopologyFormat.NVIDIA_SMI
    if format is TopologyFormat.NCCL_XML:
        spec = parse_nccl_topo_xml(text, gpu_model=gpu_model, nic_gbps=nic_gbps, nvswitch=nvswitch,
                                   source=source, name=name)
    else:
        spec = parse_nvidia_smi_topo(text, gpu_model=gpu_model, nic_gbps=nic_gbps, source=source, name=name)
    if fabric is not None and spec.fabric is not None:
        spec = replace(spec, fabric=replace(spec.fabric, kind=fabric))
    build_cluster(spec)  # refuse a description that does not build,
    ClusterSpec.from_dict(spec.to_dict(), source)  # or that the loader would not read back
    return spec
