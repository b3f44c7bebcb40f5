"""Winners out of ccltwin: the rule file of NCCL's example tuner plugin, and an environment file.

**Tuner CSV.** NCCL ships a CSV-driven tuner plugin (``plugins/tuner/example`` from 2.29.7,
``ext-tuner/example`` in 2.27.5–2.29.3; build it with ``make``, load it with
``NCCL_TUNER_PLUGIN=<path to libnccl-tuner-example.so>``; build it from 2.30.3 or later: the
examples of 2.27.5–2.29.7 index NCCL's contiguous cost table as row pointers and crash on the
first matching rule, see docs/store.md). It reads ``NCCL_TUNER_CONFIG_FILE``
(default ``nccl_tuner.conf``) once per communicator; each line is one rule::

    collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff
    allreduce,0,1048576,ring,ll128,16,2,16,-1,-1

Lines starting with ``#`` and empty lines are skipped, at most 255 characters are read per line,
fields are split on commas and trimmed of spaces and tabs, and 8 to 10 fields make a rule
(``numPipeOps`` and ``regBuff`` default to -1, any). The first rule whose collective, inclusive
byte range (``nBytes``: nccl-tests' size, e.g. the whole output of an AllGather), node count and
rank count (-1: any) match wins: its (algorithm, protocol) entry of NCCL's cost table is set to
0 so NCCL picks it, and ``channels`` (-1: NCCL's) replaces the channel count. The plugin
**sets one channel for any call no rule matches**, and maps unknown names to allreduce, ring
and simple without a word, so ``write_tuner_csv`` writes only names it knows and, by default,
covers every size: each winner's rule reaches halfway (geometrically) to the next size of the
same collective and communicator shape, the first from 0 and the last to 2^64 − 1. AllToAll and
SendRecv are point-to-point in NCCL, which asks no tuner about them; they are left out.

**Environment.** Threads, buffer sizes and the transport are per-process knobs
(``tuner.process_knobs``); ``write_env`` writes them as ``NAME=value`` lines, which a shell
reads with ``set -a; . ./nccl.env; set +a`` and docker/systemd read as an env file.
``settings_from_winners`` picks them from a store's winners when no plan is at hand.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from os import PathLike

from traces.task import GROUP_SHAPE, Op, Task
from traces.trace_file import write_atomic
from tuner.config import Algo, Proto, Transport
from tuner.measurement import Measurement
from tuner.process_knobs import LL128_NTHREADS_RANGE, NTHREADS_RANGE, ProcessSettings, buffsize_for_chunk
from tuner.store import Store, StoreError

__all__ = ["NO_WINNERS", "TUNER_CSV_HEADER", "TunerRule", "plugin_winners", "settings_from_winners", "store_winners",
           "tuner_rules", "write_env", "write_tuner_csv"]

TUNER_CSV_HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
PLUGIN_OPS = (Op.BROADCAST, Op.REDUCE, Op.ALLGATHER, Op.REDUCESCATTER, Op.ALLREDUCE)
"""The collectives the example plugin can name (NCCL consults no tuner for point-to-point)."""
MAX_BYTES = 2**64 - 1
MAX_LINE = 255
NO_WINNERS = ("winners are measured times with a known config (live tuning): nccl-tests rows record NCCL's "
              "default and twin trials are predictions, both kept as history; for the twin's picks use "
              "'ccltwin rank --csv'")
"""Why a store can hold measurements and no winners."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TunerRule:
    """One line of the example plugin's CSV."""

    op: Op
    min_bytes: int
    max_bytes: int
    algo: Algo
    proto: Proto
    nchannels: int
    nnodes: int
    nranks: int

    def line(self) -> str:
        return (f"{self.op.value},{self.min_bytes},{self.max_bytes},{self.algo.value},{self.proto.value},"
                f"{self.nchannels},{self.nnodes},{self.nranks},-1,-1")


def nodes_of(task: Task) -> int:
    """Nodes the task's group spans, from its shape (``"8x2"`` → 2, ``"3+5"`` → 2); -1 when unknown.

    >>> nodes_of(Task(Op.ALLREDUCE, 1024, 16, group="8x2")), nodes_of(Task(Op.ALLREDUCE, 1024, 2, group="tp"))
    (2, -1)
    """
    match = GROUP_SHAPE.match(task.group)
    if not match:
        return -1
    return int(match[2]) if match[2] else len(match[3].split("+"))


def plugin_winners(winners: Iterable[Measurement]) -> tuple[dict[tuple[Op, int, int, int], Measurement], list[str]]:
    """The winner the plugin applies per (collective, nodes, ranks, size), and notes on the rest.

    The plugin sees neither dtype nor communicator, so of winners it cannot tell apart the
    fastest stays; point-to-point winners and those without a config are left out.
    """
    notes = []
    chosen: dict[tuple[Op, int, int, int], Measurement] = {}
    for m in winners:
        if m.config is None:
            continue
        if m.task.op not in PLUGIN_OPS:
            notes.append(f"{m.task.op} {m.task.nbytes} B: point-to-point, NCCL asks no tuner plugin")
            continue
        key = (m.task.op, nodes_of(m.task), m.task.nranks, m.task.nbytes)
        if key in chosen:
            faster, slower = sorted((chosen[key], m), key=lambda x: x.time_us)
            if _rule_fields(faster) != _rule_fields(slower):
                t = slower.task
                comm = f" on communicator {slower.comm}" if slower.comm else ""
                notes.append(f"{t.op} of {t.nbytes} B on {t.nranks} ranks ({t.group or 'group unknown'}, {t.dtype})"
                             f"{comm}: its winner {_rule_fields(slower)} loses to {_rule_fields(faster)}, a faster "
                             "winner of the same size and shape that the plugin cannot tell apart")
            m = faster
        chosen[key] = m
    return chosen, notes


def tuner_rules(winners: Iterable[Measurement], *, cover_all_sizes: bool = True) -> tuple[list[TunerRule], list[str]]:
    """Rules for the example plugin from winning measurements, and notes on what was left out.

    Winners the plugin cannot tell apart (same collective, size, node and rank count: it sees
    neither dtype nor communicator) keep the fastest (``plugin_winners``). ``cover_all_sizes=False``
    writes one exact-size rule per winner.
    """
    chosen, notes = plugin_winners(winners)
    groups: dict[tuple[Op, int, int], list[Measurement]] = defaultdict(list)
    for (op, nnodes, nranks, _), m in sorted(chosen.items(), key=_rule_order):
        groups[(op, nnodes, nranks)].append(m)
    rules = []
    for (op, nnodes, nranks), members in groups.items():
        sizes = [m.task.nbytes for m in members]
        for i, m in enumerate(members):
            if cover_all_sizes:
                low = 0 if i == 0 else _split(sizes[i - 1], sizes[i]) + 1
                high = MAX_BYTES if i == len(members) - 1 else _split(sizes[i], sizes[i + 1])
            else:
                low = high = m.task.nbytes
            c = m.config
            rules.append(TunerRule(op=op, min_bytes=low, max_bytes=high, algo=c.algo, proto=c.proto,
                                   nchannels=c.nchannels, nnodes=nnodes, nranks=nranks))
    return rules, notes


def _rule_fields(m: Measurement) -> str:
    """What a rule sets: algorithm, protocol, channels."""
    return f"{m.config.algo}/{m.config.proto}/{m.config.nchannels}"


def _rule_order(item: tuple[tuple[Op, int, int, int], Measurement]) -> tuple:
    """Collective, then exact node counts before "any" (the first matching rule wins), ranks, size."""
    op, nnodes, nranks, nbytes = item[0]
    return PLUGIN_OPS.index(op), nnodes == -1, nnodes, nranks, nbytes


def _split(small: int, large: int) -> int:
    """The last size that still belongs to ``small``: the geometric midpoint, rounded down."""
    return max(small, math.isqrt(small * large))


def write_tuner_csv(winners: Iterable[Measurement], path: str | PathLike[str], *, cover_all_sizes: bool = True,
                    title: str = "") -> list[str]:
    """Write the example plugin's rule file atomically; returns the notes of ``tuner_rules``."""
    rules, notes = tuner_rules(winners, cover_all_sizes=cover_all_sizes)
    lines = [f"# NCCL example tuner plugin rules written by ccltwin{': ' + title if title else ''}",
             f"# {TUNER_CSV_HEADER}"]
    lines += [_comment(note) for note in notes]
    lines += [rule.line() for rule in rules]
    write_atomic(path, [line + "\n" for line in lines])
    return notes


def _comment(text: str) -> str:
    return ("# " + text)[:MAX_LINE]


def write_env(settings: ProcessSettings, path: str | PathLike[str], *, extra: dict[str, str] | None = None,
              title: str = "") -> None:
    """Write ``settings`` (plus ``extra`` variables) as ``NAME=value`` lines, atomically."""
    env = {**settings.env(), **(extra or {})}
    lines = [f"# NCCL per-process settings written by ccltwin{': ' + title if title else ''}",
             "# bash: set -a; . ./this-file; set +a"]
    lines += [f"{name}={_quote(value)}" for name, value in env.items()]
    write_atomic(path, [line + "\n" for line in lines])


def _quote(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:,+-]*", value) else "'" + value.replace("'", "'\\''") + "'"


def settings_from_winners(winners: Sequence[Measurement]) -> ProcessSettings:
    """Per-process knobs voted for by the winners, each vote weighted by the winner's time.

    The transport, ``NCCL_NTHREADS`` (Ring Simple and LL winners: Tree and PAT always run 640
    threads, NVLS and CollNet 640 too), ``NCCL_LL128_NTHREADS`` and the buffer size that gives
    each winner's chunk: for each knob the value carrying the most winner time wins, so the
    slowest collectives decide. Thread counts are clamped to what NCCL accepts.
    """
    votes: dict[str, dict[object, float]] = defaultdict(lambda: defaultdict(float))
    for m in winners:
        c = m.config
        if c is None:
            continue
        votes["transport"][c.transport] += m.time_us
        if c.algo is Algo.RING and c.proto in (Proto.SIMPLE, Proto.LL) and m.task.op in PLUGIN_OPS:
            votes["nthreads"][min(max(c.nthreads, NTHREADS_RANGE[0]), NTHREADS_RANGE[1])] += m.time_us
        if c.algo is Algo.RING and c.proto is Proto.LL128:
            votes["ll128_nthreads"][min(max(c.nthreads, LL128_NTHREADS_RANGE[0]), LL128_NTHREADS_RANGE[1])] \
                += m.time_us
        if m.task.op in PLUGIN_OPS and c.algo in (Algo.RING, Algo.TREE):
            name = {Proto.SIMPLE: "buffsize", Proto.LL: "ll_buffsize", Proto.LL128: "ll128_buffsize"}[c.proto]
            votes[name][buffsize_for_chunk(m.task.op, c.algo, c.proto, c.chunk_bytes)] += m.time_us
    chosen = {name: max(tally, key=lambda value: (tally[value], value)) for name, tally in votes.items()}
    return ProcessSettings(transport=chosen.pop("transport", Transport.P2P), **chosen)


def store_winners(store: Store, hardware: str | None = None) -> tuple[str, list[Measurement]]:
    """The hardware id and the winners of ``store`` to export: those of ``hardware``, or of the
    only hardware the store holds winners of; ``StoreError`` when there are none to export."""
    every = store.bests()
    if not every:
        raise StoreError(f"{store.path}: no winners to export ({NO_WINNERS})")
    if hardware is None:
        ids = sorted({m.hardware for m in every})
        if len(ids) != 1:
            raise StoreError(f"{store.path}: give --hardware; the store holds winners of "
                             f"{', '.join(repr(i) for i in ids)}")
        hardware = ids[0]
    winners = [m for m in every if m.hardware == hardware]
    if not winners:
        raise StoreError(f"{store.path}: no winners for hardware {hardware!r}")
    return hardware, winners
