"""Read a YAML document strictly: UTF-8 text only, no key given twice, bounded nesting, and every
problem one line that names the file.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "plan.yaml"
>>> _ = path.write_text("tp: 8\\ntp: 4\\n")
>>> try:
...     read_yaml(path, str(path))
... except YamlError as err:
...     print(str(err).split(": ", 1)[1])
YAML syntax error at line 2, column 1: key 'tp' given twice (first at line 1)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from traces.errors import CcltwinError

MAX_YAML_DEPTH = 64
"""Nesting deeper than this is no description ccltwin reads (the deepest real one is 5 levels)."""


class YamlError(CcltwinError):
    """A YAML file that cannot be read: names the file and the problem, on one line."""


def read_yaml(path: Path, source: str) -> Any:
    """The document in the YAML file ``path`` (``source`` names it in errors)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise YamlError(f"{source}: cannot read the file ({err.strerror or err})") from None
    return parse_yaml(data, source)


def parse_yaml(data: bytes, source: str) -> Any:
    """The document in ``data``, the bytes of a YAML file named ``source``."""
    try:
        return yaml.load(_decode(data, source), Loader=_StrictLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join((getattr(err, "problem", None) or str(err)).split("\n  in ")[0].split())
        raise YamlError(f"{source}: YAML syntax error{where}: {problem}") from None


def _decode(data: bytes, source: str) -> str:
    """The file's text; a file that is not UTF-8 (UTF-16, binary) is a ``YamlError``."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlError(f"{source}: UTF-16 text; save the YAML as UTF-8")
    if (nul := data.find(b"\0")) >= 0:
        raise YamlError(f"{source}: a binary file (NUL byte at {nul}), not YAML text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise YamlError(f"{source}: not UTF-8 text (byte {err.start}: {data[err.start]:#04x})") from None


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
