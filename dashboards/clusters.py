"""Candidate clusters as a purchase page edits them: a preset with some of its parts changed.

"A DGX H100, but with H200s, 200 Gb/s NICs and a 2:1 oversubscribed fabric, at $3.50 per
GPU-hour" is ``CandidateCluster(preset="dgx-h100", gpu="H200-SXM-141GB", nic_gbps=200,
oversubscription=2, price_per_gpu_hour=3.5)``; ``build`` turns it into the twin's ``Cluster``
through the same description (``ClusterSpec``) a YAML file gives, so every check a file gets, an
edited candidate gets too. ``from_row`` reads one row of the page's editable table, naming the
candidate and the column in its errors.

>>> c = CandidateCluster(preset="dgx-a100", nic_gbps=400)
>>> cluster = c.build(nodes=2)
>>> c.label, cluster.nodes, cluster.graph.nodes["n1/nic0"]["gbps"]
('dgx-a100 nic400', 2, 400.0)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from dashboards.inputs import InputError, optional_int, optional_number
from twin.hardware import TopologyError, gpu_spec
from twin.topology import ClusterSpec, build_cluster, list_presets, read_spec

INTRA_NODE = ("preset", "nvswitch", "pcie")
"""How GPUs of a node talk: as the preset says, through an NVSwitch plane using every NVLink of
the GPU, or over PCIe only (no NVLink)."""


def preset_for(description: str) -> str | None:
    """The preset whose GPU family (``H100``, ``A100``, ``L40S``...) a hardware description names,
    the longest match first, then NVIDIA's own DGX/HGX servers before the cloud instances built
    on the same GPU, then by name; ``None`` when none does.

    >>> preset_for("ABCI 2.0 Compute Node (A): 8x NVIDIA A100-SXM4-40GB per node")
    'dgx-a100'
    """
    text = description.upper()
    matches = []
    for name, _ in list_presets():
        family = read_spec(name).node.gpu.split("-")[0].upper()
        if family in text:
            matches.append((-len(family), not name.startswith(("dgx-", "hgx-")), name))
    return min(matches)[-1] if matches else None


@dataclass(frozen=True, kw_only=True, slots=True)
class CandidateCluster:
    """A preset (or cluster YAML file) with optional changes; ``None`` keeps the preset's value."""

    preset: str
    name: str = ""
    """What reports call it; default: the preset and its changes (``dgx-h100 nic200``)."""
    gpu: str | None = None
    """GPU model (a name ``twin.hardware.gpu_spec`` knows)."""
    gpus_per_node: int | None = None
    """Keep the first G GPUs of each node."""
    nodes: int | None = None
    """Node count; ``None``: as many as the workload needs."""
    nics_per_node: int | None = None
    nic_gbps: float | None = None
    """Line rate of every NIC and of the fabric, Gb/s."""
    intra_node: str = "preset"
    """One of ``INTRA_NODE``."""
    oversubscription: float | None = None
    """Leaf downlink to uplink capacity (1: non-blocking)."""
    sharp: bool | None = None
    """In-network reduction (SHARP) in the fabric's switches."""
    price_per_gpu_hour: float | None = None
    """USD; ``None``: ``twin.whatif.PRICE_PER_GPU_HOUR`` by GPU model."""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        changes = [(self.gpu and gpu_spec(self.gpu).model), self.gpus_per_node and f"{self.gpus_per_node}gpn",
                   self.nics_per_node is not None and f"{self.nics_per_node}nic",
                   self.nic_gbps and f"nic{self.nic_gbps:g}", self.intra_node != "preset" and self.intra_node,
                   self.oversubscription and self.oversubscription != 1 and f"{self.oversubscription:g}:1",
                   self.sharp and "sharp"]
        return " ".join([self.preset, *(c for c in changes if c)])

    def spec(self) -> ClusterSpec:
        """The preset's description with the changes applied (node count not yet set)."""
        spec = read_spec(self.preset)
        node = spec.node
        if self.gpu:
            node = replace(node, gpu=gpu_spec(self.gpu).model)
        links = gpu_spec(node.gpu).nvlinks
        if self.intra_node == "pcie" or (self.gpu and not links and self.intra_node == "preset"):
            node = replace(node, nvswitch_links=0, nvlink_pairs=())
        elif self.intra_node == "nvswitch" or (self.gpu and node.nvswitch_links):
            if not links:
                raise InputError(f"{self.label}: a {node.gpu} has no NVLink; choose PCIe for the intra-node fabric")
            node = replace(node, nvswitch_links=links, nvlink_pairs=())
        spec = replace(spec, name=self.label, node=node)
        if spec.fabric is not None and (self.oversubscription is not None or self.sharp is not None):
            fabric = spec.fabric
            if self.oversubscription is not None:
                fabric = replace(fabric, oversubscription=self.oversubscription)
            if self.sharp is not None:
                fabric = replace(fabric, sharp=self.sharp)
            spec = replace(spec, fabric=fabric)
        return spec

    def node_gpus(self) -> int:
        """GPUs per node once the changes are made."""
        return self.gpus_per_node or read_spec(self.preset).node.gpus

    def nodes_for(self, world_size: int) -> int:
        """``nodes``, or as many as ``world_size`` ranks need."""
        return self.nodes or max(1, math.ceil(world_size / self.node_gpus()))

    def build(self, nodes: int | None = None):
        """The twin's cluster with ``nodes`` nodes (default ``self.nodes``, else 1)."""
        spec = self.spec().with_overrides(nodes=nodes or self.nodes or 1, nics_per_node=self.nics_per_node,
                                          nic_gbps=self.nic_gbps)
        try:
            cluster = build_cluster(spec)
            return cluster if self.gpus_per_node is None else cluster.subset(gpus_per_node=self.gpus_per_node)
        except TopologyError as err:
            raise TopologyError(f"{self.label}: {err}") from None

    def to_row(self) -> dict:
        """The page table's row (every value a string or number; empty: the preset's)."""
        row = {k: ("" if v is None else v) for k, v in asdict(self).items()}
        row["sharp"] = "" if self.sharp is None else ("yes" if self.sharp else "no")
        return row

    @classmethod
    def from_row(cls, row: dict) -> CandidateCluster:
        """Read a table row; raises ``InputError`` naming the candidate and the column."""
        preset = str(row.get("preset") or "").strip()
        known = [name for name, _ in list_presets()]
        if preset not in known:
            raise InputError(f"unknown preset {preset!r}; choose one of {', '.join(known)}")
        who = str(row.get("name") or "").strip() or preset
        sharp = str(row.get("sharp") or "").strip().lower()
        if sharp not in ("", "yes", "no"):
            raise InputError(f"{who}: SHARP must be yes, no or empty, got {sharp!r}")
        intra = str(row.get("intra_node") or "preset").strip()
        if intra not in INTRA_NODE:
            raise InputError(f"{who}: intra-node fabric must be one of {', '.join(INTRA_NODE)}, got {intra!r}")
        gpu = str(row.get("gpu") or "").strip() or None
        if gpu is not None:
            try:
                gpu = gpu_spec(gpu).model
            except TopologyError as err:
                raise InputError(f"{who}: {err}") from None
        oversubscription = optional_number(row.get("oversubscription"), f"{who}: oversubscription", positive=True)
        if oversubscription is not None and oversubscription < 1:
            raise InputError(f"{who}: oversubscription must be at least 1 (1 is non-blocking), got "
                             f"{oversubscription:g}")
        candidate = cls(
            preset=preset, name=str(row.get("name") or "").strip(), gpu=gpu,
            gpus_per_node=optional_int(row.get("gpus_per_node"), f"{who}: GPUs per node"),
            nodes=optional_int(row.get("nodes"), f"{who}: nodes"),
            nics_per_node=optional_int(row.get("nics_per_node"), f"{who}: NICs per node", minimum=0),
            nic_gbps=optional_number(row.get("nic_gbps"), f"{who}: NIC rate (Gb/s)", positive=True),
            intra_node=intra, oversubscription=oversubscription, sharp=None if not sharp else sharp == "yes",
            price_per_gpu_hour=optional_number(row.get("price_per_gpu_hour"), f"{who}: price per GPU-hour"))
        candidate.check()
        return candidate

    def check(self) -> None:
        """Raise ``InputError`` when a change does not fit the preset (more GPUs or NICs than it has)."""
        node = read_spec(self.preset).node
        if self.gpus_per_node is not None and self.gpus_per_node > node.gpus:
            raise InputError(f"{self.label}: GPUs per node {self.gpus_per_node}, but a {self.preset} node has "
                             f"{node.gpus}")
        if self.nics_per_node is not None and self.nics_per_node > node.nics:
            raise InputError(f"{self.label}: NICs per node {self.nics_per_node}, but a {self.preset} node has "
                             f"{node.nics}")
        self.spec()
