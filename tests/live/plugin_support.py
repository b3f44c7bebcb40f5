"""What the plugin tests share: the plugin compiled once per session with the real C compiler, fresh
instances of it (a copy at another path is another dlopen: a process of its own), the C harness, and
a pure-Python reference of the decision rules of /work/wt/LIVE.md."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from live.plugin.binding import Plugin
from live.plugin.build import CFLAGS, SOURCE_DIR, PluginBuildError, build, find_compiler
from live.plugin.emulate import IGNORE, EmulatedComm, Selection, cost_table, nccl_select
from traces.task import Op
from tuner.config import Algo, Proto

HARNESS = Path(__file__).with_name("plugin_harness.c")


def compiler() -> str:
    """The C compiler, or skip: the only reason these tests may not run."""
    try:
        return find_compiler()
    except PluginBuildError as e:
        pytest.skip(str(e))


@functools.cache
def _session_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="ccltwin-plugin-tests-"))


@functools.cache
def built_plugin() -> Path:
    """The plugin as :func:`live.plugin.build.build` compiles it, into a cache private to this session."""
    compiler()
    return build({**os.environ, "XDG_CACHE_HOME": str(_session_dir() / "cache")})


_copies = iter(range(10**9))


def fresh_plugin() -> Plugin:
    """A new instance of the plugin: empty tables, as in a process of its own."""
    path = _session_dir() / f"copy{next(_copies)}" / built_plugin().name
    path.parent.mkdir()
    shutil.copy(built_plugin(), path)
    return Plugin(path)


SANITIZERS = {"plain": [], "thread": ["-fsanitize=thread"],
              "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]}


@functools.cache
def harness(sanitizer: str = "plain") -> tuple[Path, Path]:
    """(harness executable, plugin library), both built with ``sanitizer``."""
    cc, out, extra = compiler(), _session_dir() / f"harness-{sanitizer}", SANITIZERS[sanitizer]
    out.mkdir()
    lib, exe = out / "libccltwin-live.so", out / "plugin_harness"
    flags = [f for f in CFLAGS if f != "-O2"] + ["-O1", "-g", *extra]
    for cmd in ([cc, *flags, "-o", str(lib), str(SOURCE_DIR / "ccltwin_live.c")],
                [cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread", *extra,
                 f"-I{SOURCE_DIR}", "-o", str(exe), str(HARNESS), "-ldl"]):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode and sanitizer != "plain":
            pytest.skip(f"{Path(cc).name} cannot build with {' '.join(extra)}: {done.stderr.strip()[:200]}")
        assert done.returncode == 0, done.stderr
    return exe, lib


def run_harness(*args: str, sanitizer: str = "plain", env: dict | None = None) -> subprocess.CompletedProcess:
    exe, lib = harness(sanitizer)
    return subprocess.run([str(exe), str(lib), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)


def records(output: str, kind: str) -> list[dict[str, int]]:
    """The ``kind key=value ...`` lines the harness printed, as dicts of ints."""
    return [{k: int(v) for k, v in (item.split("=") for item in line.split()[1:])}
            for line in output.splitlines() if line.startswith(kind + " ")]


# ---- the rules of LIVE.md, in plain Python ---------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    from_occurrence: int
    version: int
    algo: Algo | None = None
    proto: Proto | None = None
    nchannels: int = 0
    chunk_bytes: int = 0

    def install(self, plugin: Plugin, comm: int, op: Op, nbytes: int) -> None:
        plugin.set_rule(comm, op, nbytes, self.from_occurrence, version=self.version, algo=self.algo,
                        proto=self.proto, nchannels=self.nchannels, chunk_bytes=self.chunk_bytes)


def rule_at(rules: list[Rule], k: int) -> Rule | None:
    """The largest from-occurrence ≤ k, then the largest version; a (from, version) set again replaces."""
    latest = {(r.from_occurrence, r.version): r for r in rules}
    live = [key for key in latest if key[0] <= k]
    return latest[max(live)] if live else None


def forced(table: list[list[float]], algo: Algo | None, proto: Proto | None) -> list[list[float]] | None:
    """The table after forcing (algo, proto), or None when that entry (or no entry of a lone algo or
    proto) is ≥ 0: then the plugin must leave NCCL's default."""
    t = [row[:] for row in table]
    a = None if algo is None else algo.nccl_index
    p = None if proto is None else proto.nccl_index
    if a is None and p is None:
        return t
    if a is not None and p is not None:
        if a >= len(t) or p >= len(t[a]) or not t[a][p] >= 0:
            return None
        t[a][p] = 0.0
        return t
    def matches(i, j):
        return i == a or j == p
    cells = [(i, j) for i in range(len(t)) for j in range(len(t[i]))]
    if not any(matches(i, j) and t[i][j] >= 0 for i, j in cells):
        return None
    for i, j in cells:
        if not matches(i, j) and t[i][j] >= 0:
            t[i][j] = IGNORE
    return t


def expected(rules: list[Rule], k: int, table: list[list[float]], tuner_abi: int) -> Selection:
    """What NCCL runs at occurrence k of a task with these rules installed, by LIVE.md."""
    rule = rule_at(rules, k)
    after = forced(table, rule.algo, rule.proto) if rule else None
    applied = after is not None
    a, p = nccl_select(after if applied else table)
    return Selection(list(Algo)[a], list(Proto)[p], rule.nchannels if applied else 0,
                     rule.chunk_bytes if applied and tuner_abi >= 6 else 0)


def full_table(seed: int = 0) -> list[list[float]]:
    """Every entry available, distinct positive costs (µs)."""
    return [[10.0 + ((3 * a + p) * 7 + seed) % 21 for p in range(len(Proto))] for a in range(len(Algo))]


H200_TABLE = cost_table({(Algo.TREE, Proto.LL): 14.2, (Algo.TREE, Proto.LL128): 13.1, (Algo.TREE, Proto.SIMPLE): 21.0,
                         (Algo.RING, Proto.LL): 12.9, (Algo.RING, Proto.LL128): 11.7, (Algo.RING, Proto.SIMPLE): 19.4})
"""An 8-GPU one-node AllReduce table as NCCL 2.28.9 fills it with NVLS off: Tree and Ring only."""


def run_schedule(plugin: Plugin, comm: int, schedule: list[tuple[int, Rule]], calls: int, *,
                 tuner_abi: int = 6, op: Op = Op.ALLREDUCE, nbytes: int = 1 << 20,
                 table: list[list[float]] = H200_TABLE) -> list[Selection]:
    """One rank: each (k, rule) installed just before that rank's occurrence k, then ``calls`` calls."""
    with EmulatedComm(plugin, comm, nranks=4, tuner_abi=tuner_abi) as ctx:
        out = []
        for k in range(calls):
            for at, rule in schedule:
                if at == k:
                    rule.install(plugin, comm, op, nbytes)
            out.append(ctx.select(op, nbytes, table))
        return out


def rank_process(path: str, comm: int, schedule: list[tuple[int, Rule]], calls: int, tuner_abi: int) -> list:
    """A rank in a process of its own (multiprocessing spawn target): its selections, as tuples."""
    plugin = Plugin(path)
    return [(s.algo.value, s.proto.value, s.nchannels, s.chunk_bytes)
            for s in run_schedule(plugin, comm, schedule, calls, tuner_abi=tuner_abi)]
