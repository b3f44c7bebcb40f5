"""Does NCCL's own example tuner plugin pick the winners ``ccltwin store export --csv`` wrote?

Builds the example plugin from an NCCL source tree (``plugins/tuner/example`` from 2.29.7,
``ext-tuner/example`` before) with the C compiler, exports a store's winners the way
``ccltwin store export --csv`` does, loads the plugin with ctypes (its ``ncclTunerPlugin_v5`` or
``_v4`` symbol, as NCCL does), initialises it for each communicator shape of the winners, and
asks it, as NCCL's ``getCollInfo`` call would, for every winner's size and for both ends of
every rule's byte range: which (algorithm, protocol) entry of a cost table it zeroes and how
many channels it returns.  Prints one row per question and exits 1 if any answer differs from
the winner (2 on bad input).  Needs no GPU (the plugin is plain C) and no network (give it a checkout).

    python benchmarks/tuner_plugin_check.py --nccl-src ~/src/nccl --store tuning.db [--hardware ID]
    python benchmarks/tuner_plugin_check.py --nccl-src ~/src/nccl --trace job.json --topology dgx-h100

With ``--trace``/``--topology`` the winners are the twin's predicted best config per task, as
``ccltwin rank --csv`` writes them.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from traces.errors import TraceError
from traces.trace_file import load_trace
from tuner.export import plugin_winners, tuner_rules, write_tuner_csv
from tuner.measurement import Measurement
from tuner.store import Store, StoreError
from twin.rank import predicted_winners, rank_trace
from twin.replay import ReplayError
from twin.replay.comms import cluster_for, shaped_tasks
from twin.topology import TopologyError

NCCL_FUNC = {"broadcast": 0, "reduce": 1, "allgather": 2, "reducescatter": 3, "allreduce": 4}
NCCL_ALGO = ["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"]
NCCL_PROTO = ["ll", "ll128", "simple"]
"""Indices of NCCL's ``ncclFunc_t``, ``NCCL_ALGO_*`` and ``NCCL_PROTO_*`` (``nccl/common.h``, ``tuner.h``)."""

_GET_COLL_INFO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_int))
_INIT_V5 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_size_t,
                            ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_INIT_V4 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t,
                            ctypes.c_void_p)
_FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _Tuner(ctypes.Structure):
    """``ncclTuner_v4_t`` / ``ncclTuner_v5_t``: a name and three function pointers."""

    _fields_ = [("name", ctypes.c_char_p), ("init", ctypes.c_void_p), ("getCollInfo", ctypes.c_void_p),
                ("finalize", ctypes.c_void_p)]


def build_plugin(nccl_src: Path, out_dir: Path, parser: argparse.ArgumentParser) -> Path:
    """Compile the example tuner plugin of ``nccl_src`` as its Makefile does; the ``.so`` path."""
    for rel in ("plugins/tuner/example", "ext-tuner/example"):
        src = nccl_src / rel
        if (src / "plugin.c").is_file():
            break
    else:
        parser.error(f"{nccl_src}: no plugins/tuner/example/plugin.c or ext-tuner/example/plugin.c")
    lib = out_dir / "libnccl-tuner-example.so"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-Inccl", "-fPIC", "-shared", "-o", str(lib), "plugin.c"], cwd=src, check=True)
    return lib


class ExamplePlugin:
    """The built plugin, initialised for one communicator shape."""

    def __init__(self, lib: Path, nranks: int, nnodes: int, csv: Path):
        self._dll = ctypes.CDLL(str(lib))
        for version, init_type in ((5, _INIT_V5), (4, _INIT_V4)):
            try:
                table = _Tuner.in_dll(self._dll, f"ncclTunerPlugin_v{version}")
            except ValueError:
                continue
            self.version = version
            os.environ["NCCL_TUNER_CONFIG_FILE"] = str(csv)
            self._ctx = ctypes.c_void_p()
            args = (0, nranks, nnodes, None, None, None) if version == 5 else (nranks, nnodes, None)
            if init_type(table.init)(ctypes.byref(self._ctx), *args) != 0:
                raise SystemExit(f"{lib}: init failed for {nranks} ranks on {nnodes} node(s)")
            self._get = _GET_COLL_INFO(table.getCollInfo)
            self._finalize = _FINALIZE(table.finalize)
            return
        raise SystemExit(f"{lib}: exports neither ncclTunerPlugin_v5 nor ncclTunerPlugin_v4")

    def choose(self, op: str, nbytes: int) -> tuple[str, str, int] | None:
        """(algorithm, protocol, channels) the plugin sets for a call, None if it zeroes no entry."""
        costs = (ctypes.c_float * (len(NCCL_ALGO) * len(NCCL_PROTO)))(*[1.0] * (len(NCCL_ALGO) * len(NCCL_PROTO)))
        channels = ctypes.c_int(-7)
        if self._get(self._ctx, NCCL_FUNC[op], nbytes, 1, ctypes.addressof(costs), len(NCCL_ALGO),
                     len(NCCL_PROTO), 0, ctypes.byref(channels)) != 0:
            raise SystemExit(f"getCollInfo failed for {op} {nbytes} B")
        zeroed = [i for i, c in enumerate(costs) if c == 0.0]
        if len(zeroed) != 1:
            return None
        algo, proto = divmod(zeroed[0], len(NCCL_PROTO))
        return NCCL_ALGO[algo], NCCL_PROTO[proto], channels.value

    def close(self) -> None:
        self._finalize(self._ctx)


def check(lib: Path, winners: list[Measurement], csv: Path) -> list[tuple]:
    """One row per question: (op, bytes, nodes, ranks, what, expected, answered, ok)."""
    write_tuner_csv(winners, csv)
    rules, _ = tuner_rules(winners)
    questions: dict[tuple[int, int], list[tuple[str, int, str, tuple]]] = {}
    for (op, nnodes, nranks, nbytes), m in plugin_winners(winners)[0].items():
        c = m.config
        questions.setdefault((nnodes, nranks), []).append(
            (op.value, nbytes, "winner", (c.algo.value, c.proto.value, c.nchannels)))
    for r in rules:
        want = (r.algo.value, r.proto.value, r.nchannels)
        for edge, nbytes in (("rule min", r.min_bytes), ("rule max", r.max_bytes)):
            questions.setdefault((r.nnodes, r.nranks), []).append((r.op.value, nbytes, edge, want))
    rows = []
    for (nnodes, nranks), asked in sorted(questions.items()):
        # A rule for "any" node count (-1) is asked on a communicator of one node.
        plugin = ExamplePlugin(lib, nranks, max(nnodes, 1), csv)
        try:
            for op, nbytes, what, want in asked:
                got = plugin.choose(op, nbytes)
                rows.append((op, nbytes, nnodes, nranks, what, want, got, got == want))
        finally:
            plugin.close()
    return rows


def check_in_child(lib: Path, winners: list[Measurement], csv: Path) -> list[tuple]:
    """``check`` in a forked process, so that a plugin that crashes is reported, not fatal."""
    answers = csv.with_suffix(".answers.json")
    child = multiprocessing.get_context("fork").Process(
        target=lambda: answers.write_text(json.dumps(check(lib, winners, csv))))
    child.start()
    child.join()
    if child.exitcode != 0:
        how = "a segmentation fault" if child.exitcode == -signal.SIGSEGV else f"exit code {child.exitcode}"
        raise SystemExit(f"{lib}: the plugin crashed ({how}) when asked about a call its rules match. NCCL passes "
                         "getCollInfo one contiguous [algorithms][protocols] float table (enqueue.cc); the example "
                         "plugins of NCCL 2.27.5-2.29.7 index it as an array of row pointers (fixed in 2.30.3). "
                         "Build the example from NCCL 2.30.3 or later: its v5 symbol loads into NCCL 2.28.3 and later.")
    return [(*row[:5], tuple(row[5]), tuple(row[6]) if row[6] else None, row[7])
            for row in json.loads(answers.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nccl-src", type=Path, required=True, help="an NCCL source checkout")
    parser.add_argument("--store", type=Path, help="a ccltwin tuning store: its measured winners")
    parser.add_argument("--hardware", help="the store's hardware id (default: every one)")
    parser.add_argument("--trace", type=Path, help="a trace: the twin's predicted winners for it")
    parser.add_argument("--topology", help="with --trace: the cluster preset or YAML")
    args = parser.parse_args()
    if (args.store is None) == (args.trace is None) or (args.trace is not None and args.topology is None):
        parser.error("give --store, or --trace with --topology")
    try:
        if args.store is not None:
            source = str(args.store)
            with Store(args.store, create=False) as db:
                winners = db.bests(hardware=args.hardware)
        else:
            source = f"the twin's ranking of {args.trace} on {args.topology}"
            workload = load_trace(args.trace)
            cluster = cluster_for(workload, args.topology)
            winners = predicted_winners(rank_trace(workload, cluster).plan, shaped_tasks(workload, cluster))
    except (StoreError, TraceError, TopologyError, ReplayError) as err:
        parser.error(str(err))
    if not winners:
        parser.error(f"{source}: no winners")
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_plugin(args.nccl_src.expanduser(), Path(tmp), parser)
        rows = check_in_child(lib, winners, Path(tmp) / "nccl_tuner.csv")
    print(f"# NCCL example tuner plugin from {args.nccl_src}, {len(winners)} winners of {source}")
    print(f"{'op':<14}{'bytes':>22} {'nodes':>5} {'ranks':>5}  {'asked':<9} {'expected':<24} {'plugin':<24} ok")
    for op, nbytes, nnodes, nranks, what, want, got, ok in rows:
        print(f"{op:<14}{nbytes:>22} {nnodes:>5} {nranks:>5}  {what:<9} {'/'.join(map(str, want)):<24} "
              f"{'/'.join(map(str, got)) if got else 'none':<24} {'yes' if ok else 'NO'}")
    bad = sum(not row[-1] for row in rows)
    print(f"# {len(rows) - bad}/{len(rows)} answers as exported")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
