"""Google's gIB tuner plugin (GCP a3-ultra, a4): what its config makes NCCL choose.

Google's ``set_nccl_env.sh`` on a3-ultra and a4 VMs loads a tuner plugin with
``NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb`` (a4: ``_a4.txtpb``):
per communicator shape (nodes, ranks per node) and collective, byte ranges each naming an
algorithm, a protocol and a channel count.  The tables ship here as ``gib_tuner_a3u.yaml`` and
``gib_tuner_a4.yaml`` (transcribed from the copy in apple/axlearn, sources in each file).

How NCCL takes a tuner's answer (``getAlgoInfo``, ``src/enqueue.cc`` @ v2.25.1-1, 2.26.6-1; the
cost-table tuner API from 2.23): the plugin marks its (algorithm, protocol) in NCCL's cost table
as free (0), NCCL's argmin then picks it where the entry is available (an entry NCCL disabled,
-1, stays disabled and the cheapest other entry wins); NCCL works out threads from its own
channel count as without a tuner, then the tuner's channel count replaces NCCL's, and the
scheduler caps it at the communicator's channels.  A call no rule covers keeps NCCL's choice.

The rules compare ``per_rank_message_size`` (the config's field; the plugin's code is not public),
read here as its name says: the ``nBytes`` NCCL hands every tuner (the whole buffer: AllReduce
count, AllGather/ReduceScatter nRanks × count; ``src/include/enqueue.h``) over the ranks.

Which version: axlearn holds two of each table, April and June/July 2025; the newer ones ship here
(a4's 2-node tables are the same in both).  The held-out logs of these VMs (2 VMs × 1 GPU) fit
that: a3-ultra AllReduce busbw steps from 21 to 30 GB/s between 32 and 64 MiB, where the newer a3u
table turns Ring/Simple into Tree/Simple (32 MiB per rank); the April one would turn at 64 MiB per
rank.

>>> from traces.task import Op
>>> gib = tuner_config("gib-a3u")
>>> gib.rule(2, 1, Op.ALLREDUCE, 64 << 20, nranks=2)
GibRule(min_bytes=33554432, max_bytes=None, algo=<Algo.TREE: 'tree'>, proto=<Proto.SIMPLE: 'simple'>, nchannels=4)
>>> gib.rule(1, 8, Op.ALLREDUCE, 64 << 20, nranks=8) is None  # one node: no block of the table
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from traces.task import Op
from tuner.config import Algo, Proto, parse_enum

__all__ = ["TUNER_CONFIGS", "GibBlock", "GibRule", "GibTunerConfig", "tuner_config", "tuner_for_path"]

_HERE = Path(__file__).resolve().parent
TUNER_CONFIGS = {"gib-a3u": _HERE / "gib_tuner_a3u.yaml", "gib-a4": _HERE / "gib_tuner_a4.yaml"}
"""The bundled gIB tables by name; ``tuner_for_path`` maps Google's config paths onto them."""
_COLLS = {"all_reduce": Op.ALLREDUCE, "all_gather": Op.ALLGATHER, "reduce_scatter": Op.REDUCESCATTER,
          "broadcast": Op.BROADCAST, "reduce": Op.REDUCE}


@dataclass(frozen=True)
class GibRule:
    """One size range's pick: ``min_bytes ≤ bytes per rank < max_bytes`` (``None``: no upper bound)."""

    min_bytes: int
    max_bytes: int | None
    algo: Algo
    proto: Proto
    nchannels: int | None
    """The channels the tuner sets; None: NCCL's own count (a rule that names none)."""

    def covers(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)


@dataclass(frozen=True)
class GibBlock:
    """The rules of one communicator shape: nodes and ranks per node in ``[min, max)``."""

    nodes: tuple[int, int | None]
    ranks_per_node: tuple[int, int | None]
    rules: dict[Op | None, tuple[GibRule, ...]]
    """Per collective; ``None``: the config's ``COLL_DEFAULT``, for collectives not listed."""

    def matches(self, nnodes: int, ranks_per_node: int) -> bool:
        return _within(nnodes, self.nodes) and _within(ranks_per_node, self.ranks_per_node)


@dataclass(frozen=True)
class GibTunerConfig:
    """A gIB tuner config: the first block that matches a communicator rules its calls."""

    name: str
    blocks: tuple[GibBlock, ...]

    def rule(self, nnodes: int, ranks_per_node: int, op: Op, nbytes: int, *, nranks: int) -> GibRule | None:
        """The rule for ``op`` on ``nbytes`` (NCCL's ``nBytes``) among ``nranks`` on this shape;
        ``None``: NCCL's own choice."""
        for block in self.blocks:
            if block.matches(nnodes, ranks_per_node):
                rules = block.rules.get(op, block.rules.get(None, ()))
                return next((r for r in rules if r.covers(nbytes // nranks)), None)
        return None


@cache
def tuner_config(name: str) -> GibTunerConfig:
    """The bundled gIB table ``name`` (a key of ``TUNER_CONFIGS``)."""
    if name not in TUNER_CONFIGS:
        raise ValueError(f"unknown gIB tuner config {name!r} (known: {', '.join(TUNER_CONFIGS)})")
    doc = yaml.safe_load(TUNER_CONFIGS[name].read_text())
    return GibTunerConfig(doc["name"], tuple(_block(b) for b in doc["communicators"]))


def tuner_for_path(path: str) -> str | None:
    """The bundled table a ``NCCL_TUNER_CONFIG_PATH`` names (by Google's file name), else ``None``.

    >>> tuner_for_path("/usr/local/gib/configs/tuner_config_a4.txtpb"), tuner_for_path("/etc/mine.txtpb")
    ('gib-a4', None)
    """
    stem = Path(path).name.removesuffix(".txtpb").removeprefix("tuner_config_")
    return f"gib-{stem}" if f"gib-{stem}" in TUNER_CONFIGS else None


def _block(doc: dict) -> GibBlock:
    rules = {None if key == "default" else _COLLS[key]: tuple(_rule(r) for r in rows)
             for key, rows in doc.items() if key not in ("nodes", "ranks_per_node")}
    return GibBlock(tuple(doc["nodes"]), tuple(doc["ranks_per_node"]), rules)


def _rule(row: list) -> GibRule:
    low, high, algo, proto, nchannels = row
    return GibRule(int(low), None if high is None else int(high), parse_enum(Algo, algo), parse_enum(Proto, proto),
                   int(nchannels))


def _within(value: int, bounds: tuple[int, int | None]) -> bool:
    low, high = bounds
    return low <= value and (high is None or value < high)
