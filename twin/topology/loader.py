"""Read clusters from preset names or YAML files, and write descriptions back as YAML.

``load_cluster("dgx-h100", nodes=4)`` reads ``presets/dgx-h100.yaml`` and builds four
nodes; ``load_cluster("my.yaml", gpus_per_node=2)`` reads a file and keeps two GPUs of
each node.  Errors name the file (or preset) and the key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from traces.yaml_text import YamlError, read_yaml
from twin.hardware import TopologyError
from twin.nccl_model.gib_txtpb import TunerConfigError, config_table
from twin.topology.build import build_cluster, set_tuner
from twin.topology.cluster import Cluster
from twin.topology.spec import ClusterSpec

PRESET_DIR = Path(__file__).parent / "presets"


def list_presets() -> list[tuple[str, str]]:
    """``(name, description)`` of every shipped preset, sorted by name."""
    return [(path.stem, read_spec(path.stem).description) for path in sorted(PRESET_DIR.glob("*.yaml"))]


def read_spec(spec: str | Path) -> ClusterSpec:
    """The description behind a preset name or a YAML file path."""
    path, source = _resolve(spec)
    try:
        data = read_yaml(path, source)
    except YamlError as err:
        raise TopologyError(str(err)) from None
    result = ClusterSpec.from_dict(data, source)
    config = result.fabric.tuner_config if result.fabric else None
    if config is not None:
        if (path.parent / config).is_file():  # a file beside the description
            result = replace(result, fabric=replace(result.fabric, tuner_config=str((path.parent / config).resolve())))
        try:
            config_table(result.fabric.tuner_config)
        except TunerConfigError as err:
            raise TopologyError(f"{source}: fabric.tuner_config: {err}") from None
    return result if result.name else replace(result, name=path.stem)


def load_cluster(spec: str | Path, *, nodes: int | None = None, gpus_per_node: int | None = None,
                 nics_per_node: int | None = None, nic_gbps: float | None = None, tuner: str | None = None,
                 tuner_config: str | None = None) -> Cluster:
    """Build a preset or YAML file, re-parameterised by the overrides.

    ``gpus_per_node`` keeps the first G GPUs of each node, ``nics_per_node`` the first K
    NICs; ``nic_gbps`` sets every NIC's and the fabric's line rate (Gb/s); ``tuner`` (a
    ``TUNER_PLUGINS`` name) or ``tuner_config`` (a gIB table's name or file) replaces the
    description's NCCL tuner (``build.tuner_attributes``).

    >>> cluster = load_cluster("dgx-a100", nodes=4, nic_gbps=400)
    >>> cluster.nodes, len(cluster.gpus()), cluster.graph.nodes["n3/nic7"]["gbps"]
    (4, 32, 400.0)
    """
    description = read_spec(spec)
    _, source = _resolve(spec)
    try:
        description = description.with_overrides(nodes=nodes, nics_per_node=nics_per_node, nic_gbps=nic_gbps)
        cluster = build_cluster(description)
        if tuner is not None or tuner_config is not None:
            set_tuner(cluster.graph, tuner, tuner_config)
            cluster.validate()
        return cluster if gpus_per_node is None else cluster.subset(gpus_per_node=gpus_per_node)
    except TopologyError as err:
        raise TopologyError(f"{source}: {err}") from None


def dump_spec(spec: ClusterSpec) -> str:
    """The YAML text of a description (``load_cluster`` reads it back)."""
    return yaml.safe_dump(spec.to_dict(), sort_keys=False, default_flow_style=None, width=110)


def _resolve(spec: str | Path) -> tuple[Path, str]:
    if isinstance(spec, Path) or spec.endswith((".yaml", ".yml")) or "/" in spec:
        path = Path(spec)
        if path.is_dir():
            raise TopologyError(f"{path}: is a directory; give a cluster YAML file or a preset name")
        if not path.is_file():
            raise TopologyError(f"{path}: no such file")
        return path, str(path)
    preset = PRESET_DIR / f"{spec}.yaml"
    if not preset.is_file():
        names = ", ".join(p.stem for p in sorted(PRESET_DIR.glob("*.yaml")))
        raise TopologyError(f"unknown preset {spec!r} (presets: {names}; or give a path to a YAML file)")
    return preset, f"preset {spec!r}"


def read_source(text_or_path: str | Path, what: str) -> tuple[str, str, str]:
    """``(text, source, name)`` of an importer's input: a file path, or the text itself.

    ``source`` names the input in errors and ``name`` becomes the cluster's name.
    """
    path = text_or_path if isinstance(text_or_path, Path) else None
    if path is None and "\n" not in text_or_path and len(text_or_path) < 4096:
        try:
            path = Path(text_or_path) if Path(text_or_path).is_file() else None
        except (OSError, ValueError):  # not a usable path name: treat it as text
            path = None
    if path is None:
        return text_or_path, f"<{what} text>", "imported"
    try:
        return path.read_text(errors="replace"), str(path), path.stem
    except OSError as err:
        raise TopologyError(f"{path}: cannot read the file ({err.strerror})") from None
