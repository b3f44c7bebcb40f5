"""``NCCL_ALGO`` / ``NCCL_PROTO`` as the chosen NCCL release reads them (``parseList``, ``tuning.cc``).

From 2.24 a value is ``;``-separated entries; each entry is an optional ``function:`` prefix and a
``,``-separated list, optionally negated with a leading ``^``.  An entry without a prefix
(only the first may lack one) applies to every function.  A plain list enables exactly its
members; a ``^`` list enables everything except its members.  An unknown name is an error::

    NCCL_ALGO="ring,tree"                        # Ring and Tree everywhere
    NCCL_PROTO="^LL128;allreduce:LL128"          # no LL128, except LL128 only for AllReduce
    NCCL_ALGO="allreduce:ring;allgather:^pat"

Before 2.24 the value is one list (``^`` allowed), names NCCL does not know are ignored, and the
algorithm list binds AllReduce only ("Only disable algo for Allreduce since others only have
one", src/graph/tuning.cc @ v2.8.4-1; "Never disable ring for non-allreduce operations" later).
Names are NCCL's (``ncclAlgoStr`` of the release: ``CollNet`` in 2.8, ``CollNetDirect``,
``CollNetChain`` from 2.14, ``NVLS`` 2.17, ``NVLSTree`` 2.18, ``PAT`` 2.23), case-insensitive.

The result maps each function to ``{name: 0 | 1}``; names not mentioned keep the default
(1, or 2 = "auto" for LL128, which NCCL then decides from the topology).

>>> parse_algo_env("NVLSTree")[Op.ALLREDUCE][Algo.NVLS_TREE]
1
>>> parse_algo_env("^collnet", (2, 8, 4))[Op.ALLREDUCE][Algo.COLLNET_CHAIN]
0
>>> env_name(Algo.NVLS_TREE), env_name(Algo.COLLNET_CHAIN, (2, 8, 4))
('NVLSTree', 'CollNet')
"""

from __future__ import annotations

from traces.task import Op
from tuner.config import Algo, ConfigError, Proto
from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.nccl_model.releases import Version, facts, introduced

FUNCS = (Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLREDUCE)
_FUNC_NAMES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
_PROTO_NAMES = ("ll", "ll128", "simple")


def parse_algo_env(value: str, version: Version = DEFAULT_NCCL_VERSION) -> dict[Op, dict[Algo, int]]:
    """Per function, 1/0 for each algorithm (``NCCL_ALGO``); algorithms the release lacks are 0."""
    f = facts(version)
    algos = [Algo(a) for a in f.algorithms]
    names = tuple(n.lower() for n in f.algo_names)
    table = _parse(value, "NCCL_ALGO", names, [1] * len(names), f.env_prefixes)
    out = {}
    for func, row in table.items():
        if not f.env_prefixes and func is not Op.ALLREDUCE:
            row = [1] * len(names)  # before 2.24 the list binds AllReduce only
        enabled = dict(zip(algos, row, strict=True))
        out[func] = {a: enabled.get(a, 0) for a in Algo}
    return out


def parse_proto_env(value: str, version: Version = DEFAULT_NCCL_VERSION) -> dict[Op, dict[Proto, int]]:
    """Per function, 1/0 (or 2 = auto for LL128) for each protocol (``NCCL_PROTO``)."""
    table = _parse(value, "NCCL_PROTO", _PROTO_NAMES, [1, 2, 1], facts(version).env_prefixes)
    return {f: dict(zip(Proto, row, strict=True)) for f, row in table.items()}


def env_name(algo: Algo, version: Version = DEFAULT_NCCL_VERSION) -> str:
    """How ``NCCL_ALGO`` names ``algo`` in ``version``; a ConfigError if that release lacks it."""
    f = facts(version)
    if algo.value not in f.algorithms:
        since = next((v for v in introduced("algorithms") if algo.value in facts(v).algorithms), None)
        when = f" (added in NCCL {'.'.join(map(str, since))})" if since else ""
        raise ConfigError(f"NCCL {'.'.join(map(str, version))} has no {algo} algorithm{when}")
    return f.algo_names[f.algorithms.index(algo.value)]


def _parse(value: str, var: str, names: tuple[str, ...], default: list[int],
           prefixes: bool = True) -> dict[Op, list[int]]:
    if not prefixes:  # one list, unknown names ignored (parseList before 2.24)
        negate = value.startswith("^")
        tokens = {t.lower() for t in value.removeprefix("^").split(",") if t}
        row = [int(negate != (n in tokens)) for n in names]
        return {f: list(row) for f in FUNCS}
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
