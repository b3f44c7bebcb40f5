"""Read clusters from preset names or YAML files, and write descriptions back as YAML.

``load_cluster("dgx-h100", nodes=4)`` reads ``presets/dgx-h100.yaml`` and builds four
nodes; ``load_cluster("my.yaml", gpus_per_node=2)`` reads a file and keeps two GPUs of
each node.  Errors name the file (or preset) and the key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from twin.hardware import TopologyError
from twin.topology.build import build_cluster
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
        data = yaml.load(_decode(path.read_bytes(), source), Loader=_StrictLoader)
    except OSError as err:
        raise TopologyError(f"{source}: cannot read the file ({err.strerror})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join((getattr(err, "problem", None) or str(err)).split("\n  in ")[0].split())
        raise TopologyError(f"{source}: YAML syntax error{where}: {problem}") from None
    result = ClusterSpec.from_dict(data, source)
    return result if result.name else replace(result, name=path.stem)


MAX_YAML_DEPTH = 64
"""Nesting deeper than this is no cluster description (the deepest real one is 5 levels)."""


def _decode(data: bytes, source: str) -> str:
    """The file's text; a file that is not UTF-8 (UTF-16, binary) is a ``TopologyError``."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TopologyError(f"{source}: UTF-16 text; save the YAML as UTF-8")
    if (nul := data.find(b"\0")) >= 0:
        raise TopologyError(f"{source}: a binary file (NUL byte at {nul}), not YAML text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise TopologyError(f"{source}: not UTF-8 text (byte {err.start}: {data[err.start]:#04x})") from None


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping and nesting deeper than
    ``MAX_YAML_DEPTH`` (PyYAML recurses once per level)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.constructor.ConstructorError(
                    None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first at line {seen[key] + 1})", key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_cluster(spec: str | Path, *, nodes: int | None = None, gpus_per_node: int | None = None,
                 nics_per_node: int | None = None, nic_gbps: float | None = None) -> Cluster:
    """Build a preset or YAML file, re-parameterised by the overrides.

    ``gpus_per_node`` keeps the first G GPUs of each node, ``nics_per_node`` the first K
    NICs; ``nic_gbps`` sets every NIC's and the fabric's line rate (Gb/s).

    >>> cluster = load_cluster("dgx-a100", nodes=4, nic_gbps=400)
    >>> cluster.nodes, len(cluster.gpus()), cluster.graph.nodes["n3/nic7"]["gbps"]
    (4, 32, 400.0)
    """
    description = read_spec(spec)
    _, source = _resolve(spec)
    try:
        description = description.with_overrides(nodes=nodes, nics_per_node=nics_per_node, nic_gbps=nic_gbps)
        cluster = build_cluster(description)
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
