"""Google's gIB tuner configs as Google ships them: protobuf text format (``.txtpb``).

A gIB VM's ``NCCL_TUNER_CONFIG_PATH`` names a ``TunerConfigs`` message (``# proto-message:
TunerConfigs`` at the top of ``/usr/local/gib/configs/tuner_config_*.txtpb``; the copies in
apple/axlearn ``axlearn/cloud/gcp/nccl/*/tuner_config.txtpb``, Apache-2.0, are the public ones).
Its shape, as those files write it::

    communicator_configs {                      # repeated: the first that matches rules
      node_range: { min: 2 max: 3 }             # nNodes in [min, max); no max: no bound
      rank_per_node_range: { min: 1 max: 2 }    # nRanks / nNodes in [min, max)
      coll_configs {                            # repeated, one per coll_type
        coll_type: COLL_ALL_REDUCE              # COLL_DEFAULT: the collectives not listed
        msg_size_tuning_rules {                 # repeated, in order: the first that covers wins
          per_rank_message_size: { min: 0 max: 65536 }
          coll_tuning_spec: { algorithm: ALGO_TREE protocol: PROTO_LL num_channel: 8 }
        }
      }
    }

A field's value is a number or an enum name after ``:``, a message in ``{ }`` (``:`` optional, ``< >``
also taken), fields optionally ended by ``,`` or ``;``, comments from ``#`` to the end of a line. An
absent ``min`` is 0 (proto3's default) and an absent ``max`` no bound (a3-mega's ``rank_per_node_range:
{ min: 8 }``, "only 8 gpus per node"); an absent ``num_channel`` leaves NCCL's channel count (a3-mega's
8-GPU rules name none; the plugin's code is not public, so that is read as proto3's unset 0: no
channel count to impose).  The schema is the one the public files use; a field or an enum value
outside it, a range whose max is not above its min, or text that is not the format is refused,
naming the file, the line and the problem (``TunerConfigError``).

>>> text = '''communicator_configs { node_range: { min: 2 max: 3 } rank_per_node_range: { min: 1 }
...   coll_configs { coll_type: COLL_DEFAULT
...     msg_size_tuning_rules { per_rank_message_size: { min: 0 max: 65536 }
...       coll_tuning_spec: { algorithm: ALGO_RING protocol: PROTO_LL num_channel: 8 } } } }'''
>>> config = parse_txtpb(text, "mine.txtpb")
>>> config.rule(2, 8, Op.ALLGATHER, 16 * 4096, nranks=16)
GibRule(min_bytes=0, max_bytes=65536, algo=<Algo.RING: 'ring'>, proto=<Proto.LL: 'll'>, nchannels=8)
>>> parse_txtpb(format_txtpb(config), "mine.txtpb") == config
True
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from traces.errors import CcltwinError
from traces.task import Op
from tuner.config import Algo, Proto
from twin.nccl_model.gib_tuner import TUNER_CONFIGS, GibBlock, GibRule, GibTunerConfig, tuner_config

__all__ = ["TunerConfigError", "config_table", "format_txtpb", "parse_txtpb", "read_txtpb"]

COLL_TYPES = {"COLL_ALL_REDUCE": Op.ALLREDUCE, "COLL_ALL_GATHER": Op.ALLGATHER,
              "COLL_REDUCE_SCATTER": Op.REDUCESCATTER, "COLL_BROADCAST": Op.BROADCAST, "COLL_REDUCE": Op.REDUCE,
              "COLL_DEFAULT": None}
"""``coll_type`` values: NCCL's collectives a tuner is asked about; ``COLL_DEFAULT`` the rest."""
ALGORITHMS = {f"ALGO_{a.name}": a for a in Algo}
"""``algorithm`` values: ``ALGO_`` and NCCL's algorithm (``ALGO_TREE`` … ``ALGO_PAT``)."""
PROTOCOLS = {f"PROTO_{p.name}": p for p in Proto}
"""``protocol`` values: ``PROTO_LL``, ``PROTO_LL128``, ``PROTO_SIMPLE``."""

_RANGE = {"min": int, "max": int}
_SCHEMA: dict[str, dict[str, object]] = {
    "TunerConfigs": {"communicator_configs": ["CommunicatorConfig"]},
    "CommunicatorConfig": {"node_range": "Range", "rank_per_node_range": "Range", "coll_configs": ["CollConfig"]},
    "CollConfig": {"coll_type": COLL_TYPES, "msg_size_tuning_rules": ["MsgSizeTuningRule"]},
    "MsgSizeTuningRule": {"per_rank_message_size": "Range", "coll_tuning_spec": "CollTuningSpec"},
    "CollTuningSpec": {"algorithm": ALGORITHMS, "protocol": PROTOCOLS, "num_channel": int},
    "Range": _RANGE,
}
"""Per message, its fields: a message name, ``[name]`` (repeated), an enum's values, or ``int``."""
_TOKEN = re.compile(r"\s+|#[^\n]*|(?P<tok>-?\d+|[A-Za-z_][A-Za-z0-9_]*|[{}<>:;,])|(?P<bad>\S)")
_CLOSE = {"{": "}", "<": ">"}


class TunerConfigError(CcltwinError):
    """A gIB tuner config that cannot be read: the file, the line and the problem."""


def read_txtpb(path: str | Path) -> GibTunerConfig:
    """The gIB tuner config in the text-format file ``path`` (read again only once the file changes)."""
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError as err:
        raise TunerConfigError(f"{resolved}: cannot read the gIB tuner config ({err.strerror})") from None
    return _read(str(resolved), stat.st_mtime_ns, stat.st_size)


@cache
def _read(path: str, _mtime_ns: int, _size: int) -> GibTunerConfig:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TunerConfigError(f"{path}: cannot read the gIB tuner config ({getattr(err, 'strerror', None) or err})"
                               ) from None
    return parse_txtpb(text, path)


def config_table(config: str) -> GibTunerConfig:
    """The table a communicator's ``tuner_config`` names: a bundled one (``TUNER_CONFIGS``: ``gib-a3u``,
    ``gib-a4``) or a text-format file."""
    if config in TUNER_CONFIGS:
        return tuner_config(config)
    if not Path(config).is_file():
        raise TunerConfigError(f"unknown tuner config {config!r} (known: {', '.join(TUNER_CONFIGS)}) and no such file")
    return read_txtpb(config)


def parse_txtpb(text: str, source: str) -> GibTunerConfig:
    """The ``TunerConfigs`` message in ``text``; ``source`` names it in errors and is the config's name."""
    tokens = _tokens(text, source)
    message = _Parser(tokens, source).message("TunerConfigs", None)
    return GibTunerConfig(source, tuple(_block(b, source) for b in message.get("communicator_configs", [])))


def format_txtpb(config: GibTunerConfig) -> str:
    """``config`` in the text format Google ships (``parse_txtpb`` reads it back equal)."""
    lines = ["# proto-file: config_proto/tuner_config.proto", "# proto-message: TunerConfigs", ""]
    colls = {op: name for name, op in COLL_TYPES.items()}
    for block in config.blocks:
        lines += ["communicator_configs {", *_range_lines("node_range", block.nodes),
                  *_range_lines("rank_per_node_range", block.ranks_per_node)]
        for op, rules in block.rules.items():
            lines += ["  coll_configs {", f"    coll_type: {colls[op]}"]
            for r in rules:
                channels = "" if r.nchannels is None else f" num_channel: {r.nchannels}"
                lines += ["    msg_size_tuning_rules {",
                          "  " + _range_lines("per_rank_message_size", (r.min_bytes, r.max_bytes), one_line=True)[0],
                          f"      coll_tuning_spec: {{ algorithm: ALGO_{r.algo.name} protocol: PROTO_{r.proto.name}"
                          f"{channels} }}", "    }"]
            lines.append("  }")
        lines += ["}", ""]
    return "\n".join(lines)


def _range_lines(name: str, bounds: tuple[int, int | None], *, one_line: bool = False) -> list[str]:
    low, high = bounds
    body = f"min: {low}" + ("" if high is None else f" max: {high}")
    return [f"    {name}: {{ {body} }}" if one_line else f"  {name}: {{ {body} }}"]


# -- reading ----------------------------------------------------------------------------------

def _tokens(text: str, source: str) -> list[tuple[str, int]]:
    """(token, line) of every word, number and punctuation mark; comments and space dropped."""
    out, line = [], 1
    for m in _TOKEN.finditer(text):
        if m["bad"] is not None:
            quoted = " (strings are not part of a gIB tuner config)" if m["bad"] in "\"'" else ""
            raise TunerConfigError(f"{source}:{line}: unexpected {m['bad']!r}{quoted}")
        if m["tok"] is not None:
            out.append((m["tok"], line))
        line += m.group().count("\n")
    return out


class _Parser:
    """A recursive descent over the tokens, checking each field against ``_SCHEMA`` as it goes."""

    def __init__(self, tokens: list[tuple[str, int]], source: str) -> None:
        self.tokens, self.source, self.at = tokens, source, 0

    def error(self, problem: str, line: int | None = None) -> TunerConfigError:
        if line is None:
            line = self.tokens[min(self.at, len(self.tokens) - 1)][1] if self.tokens else 1
        return TunerConfigError(f"{self.source}:{line}: {problem}")

    def next(self, what: str) -> tuple[str, int]:
        if self.at >= len(self.tokens):
            raise self.error(f"the file ends where {what} should be")
        self.at += 1
        return self.tokens[self.at - 1]

    def message(self, kind: str, close: str | None) -> dict:
        """The fields of one ``kind`` message up to ``close`` (``None``: the end of the file)."""
        fields: dict = {}
        schema = _SCHEMA[kind]
        while True:
            if self.at == len(self.tokens):
                if close is not None:
                    raise self.error(f"the file ends inside a {kind} (no closing {close!r})")
                return fields
            token, line = self.next("a field")
            if token == close:
                return fields
            if token in ",;":
                continue
            if token in "}>":
                raise self.error(f"unexpected {token!r}: no message is open here", line)
            if token not in schema:
                raise self.error(f"{kind} has no field {token!r} (fields: {', '.join(schema)})", line)
            spec = schema[token]
            value = self.value(token, spec, line)
            if isinstance(spec, list):
                fields.setdefault(token, []).append(value)
            elif token in fields:
                raise self.error(f"{kind} sets {token} twice", line)
            else:
                fields[token] = value

    def value(self, name: str, spec: object, line: int):
        token, at = self.next(f"the value of {name}")
        if isinstance(spec, str | list):
            kind = spec if isinstance(spec, str) else spec[0]
            if token == ":":
                token, at = self.next(f"the value of {name}")
            if token not in _CLOSE:
                raise self.error(f"{name} is a {kind} message: expected '{{', got {token!r}", at)
            return {**self.message(kind, _CLOSE[token]), "_line": at}
        if token != ":":
            raise self.error(f"expected ':' after {name}, got {token!r}", at)
        token, at = self.next(f"the value of {name}")
        if spec is int:
            if not re.fullmatch(r"-?\d+", token):
                raise self.error(f"{name} takes a whole number, got {token!r}", at)
            return int(token), at
        if token not in spec:
            raise self.error(f"{name} {token!r} is not one of {', '.join(spec)}", at)
        return spec[token], at


def _bounds(doc: dict | None, what: str, source: str) -> tuple[int, int | None]:
    """A ``Range``: [min, max) with an absent min 0 and an absent max no bound."""
    if doc is None:
        return 0, None
    low, _ = doc.get("min", (0, 0))
    high = doc.get("max")
    if low < 0:
        raise TunerConfigError(f"{source}:{doc['min'][1]}: {what} min {low} is negative")
    if high is not None and high[0] <= low:
        raise TunerConfigError(f"{source}:{high[1]}: {what} max {high[0]} is not above its min {low} "
                               "(max is exclusive)")
    return low, None if high is None else high[0]


def _block(doc: dict, source: str) -> GibBlock:
    rules: dict[Op | None, tuple[GibRule, ...]] = {}
    for coll in doc.get("coll_configs", []):
        if "coll_type" not in coll:
            raise TunerConfigError(f"{source}:{coll['_line']}: coll_configs names no coll_type")
        op, line = coll["coll_type"]
        if op in rules:
            raise TunerConfigError(f"{source}:{line}: this communicator_configs lists {_coll_name(op)} twice")
        rules[op] = tuple(_rule(r, source) for r in coll.get("msg_size_tuning_rules", []))
    return GibBlock(_bounds(doc.get("node_range"), "node_range", source),
                    _bounds(doc.get("rank_per_node_range"), "rank_per_node_range", source), rules)


def _rule(doc: dict, source: str) -> GibRule:
    low, high = _bounds(doc.get("per_rank_message_size"), "per_rank_message_size", source)
    spec = doc.get("coll_tuning_spec")
    if spec is None:
        raise TunerConfigError(f"{source}:{doc['_line']}: msg_size_tuning_rules has no coll_tuning_spec")
    for field in ("algorithm", "protocol"):
        if field not in spec:
            raise TunerConfigError(f"{source}:{spec['_line']}: coll_tuning_spec names no {field}")
    channels = spec.get("num_channel")
    if channels is not None and channels[0] < 1:
        raise TunerConfigError(f"{source}:{channels[1]}: num_channel {channels[0]} is below 1")
    return GibRule(low, high, spec["algorithm"][0], spec["protocol"][0], None if channels is None else channels[0])


def _coll_name(op: Op | None) -> str:
    return next(name for name, o in COLL_TYPES.items() if o == op)
