"""``NCCL_ALGO`` / ``NCCL_PROTO`` as NCCL reads them (``parseList`` in ``tuning.cc``).

A value is ``;``-separated entries; each entry is an optional ``function:`` prefix and a
``,``-separated list, optionally negated with a leading ``^``.  An entry without a prefix
(only the first may lack one) applies to every function.  A plain list enables exactly its
members; a ``^`` list enables everything except its members.  Names are case-insensitive::

    NCCL_ALGO="ring,tree"                        # Ring and Tree everywhere
    NCCL_PROTO="^LL128;allreduce:LL128"          # no LL128, except LL128 only for AllReduce
    NCCL_ALGO="allreduce:ring;allgather:^pat"

The result maps each function to ``{name: 0 | 1}``; names not mentioned keep the default
(1, or 2 = "auto" for LL128, which NCCL then decides from the topology).
"""

from __future__ import annotations

from traces.task import Op
from tuner.config import Algo, Proto

FUNCS = (Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLREDUCE)
_FUNC_NAMES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
_ALGO_NAMES = ("tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
_PROTO_NAMES = ("ll", "ll128", "simple")


def parse_algo_env(value: str) -> dict[Op, dict[Algo, int]]:
    """Per function, 1/0 for each algorithm (``NCCL_ALGO``)."""
    table = _parse(value, "NCCL_ALGO", _ALGO_NAMES, [1] * len(Algo))
    return {f: dict(zip(Algo, row, strict=True)) for f, row in table.items()}


def parse_proto_env(value: str) -> dict[Op, dict[Proto, int]]:
    """Per function, 1/0 (or 2 = auto for LL128) for each protocol (``NCCL_PROTO``)."""
    table = _parse(value, "NCCL_PROTO", _PROTO_NAMES, [1, 2, 1])
    return {f: dict(zip(Proto, row, strict=True)) for f, row in table.items()}


def _parse(value: str, var: str, names: tuple[str, ...], default: list[int]) -> dict[Op, list[int]]:
    rows = {f: list(default) for f in FUNCS}
    # strtok skips empty tokens, so "a;;b" and "ring,,tree" are accepted like in NCCL.
    entries = [e for e in value.split(";") if e]
    for i, entry in enumerate(entries):
        parts = [p for p in entry.split(":") if p]
        if len(parts) == 1:
            if i != 0:
                raise ValueError(f"{var}={value!r}: all entries except the first must have a prefix")
            prefix, items = None, parts[0]
        else:
            prefix, items = parts[0], parts[1]
        negate = items.startswith("^")
        tokens = [t for t in items.removeprefix("^").split(",") if t]
        if prefix is None:
            targets = list(FUNCS)
        elif prefix.lower() in _FUNC_NAMES:
            targets = [FUNCS[_FUNC_NAMES.index(prefix.lower())]]
        else:
            raise ValueError(f"{var}={value!r}: unknown function {prefix!r}; expected one of "
                             f"{', '.join(_FUNC_NAMES)} (case-insensitive)")
        for token in tokens:
            if token.lower() not in names:
                raise ValueError(f"{var}={value!r}: unknown element {token!r}; expected one of "
                                 f"{', '.join(names)} (case-insensitive)")
        for f in targets:
            rows[f] = [1 if negate else 0] * len(names)
            for token in tokens:
                rows[f][names.index(token.lower())] = 0 if negate else 1
    return rows
