"""Fuzzing every reader with damaged copies of the repository's real files.

For each input kind (the readers of ``traces``, ``twin.topology``, ``tuner``), hypothesis
mutates a real file from tests/data: truncation, byte flips, wrong types, NaN/inf/huge/negative
numbers, missing and duplicate keys, deep nesting, bad encodings, corrupt gzip. Every case must
end in a sane result or a ``CcltwinError`` naming the file, in bounded time: never another
exception, never a hang. Sane: what was read passes the checks a good file passes (plausible
nccl-tests rows, a trace that validates and holds collectives, a cluster that builds, a store
whose integrity check says ok). ``python -m tests.test_fuzz_inputs`` prints the table of
benchmarks/RESULTS.md (section Hardening).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import random
import signal
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.testdata import DATA
from traces.chakra import read_chakra
from traces.errors import CcltwinError
from traces.flight_recorder import read_flight_recorder
from traces.kineto import read_kineto
from traces.nccl_tests import read_nccl_tests
from traces.plausibility import implausible
from traces.trace_file import load_trace, save_trace
from tuner.measurement import read_nccl_tests_measurements
from tuner.plan import load_plan
from tuner.store import Store
from twin.calibrate.points import read_points
from twin.params import DEFAULT_PARAMS
from twin.profile import ProfileMeta, load_profile, save_profile
from twin.topology.importer import import_spec
from twin.topology.loader import PRESET_DIR, load_cluster

CASE_SECONDS = 30
"""A case running longer than this is a hang."""
FR = DATA / "traces" / "flight-recorder"


class Hang(Exception):
    pass


def _nccl_tests(path: Path) -> None:
    log = read_nccl_tests(path)
    for row in log.rows:
        for time_us, busbw in ((row.oop_time_us, row.oop_busbw), (row.ip_time_us, row.ip_busbw)):
            assert implausible(nbytes=row.nbytes, count=row.count, dtype=row.dtype, time_us=time_us,
                               busbw=busbw) is None, row
    if log.op is not None and log.nranks is not None:
        for m in read_nccl_tests_measurements(path, hardware="fuzz"):
            assert math.isfinite(m.time_us) and m.time_us > 0


def _trace(trace) -> None:
    trace.validate()
    assert any(rank.events for rank in trace.ranks)


def _flight_recorder(path: Path) -> None:
    _trace(read_flight_recorder([path], [0]))


def _kineto(path: Path) -> None:
    _trace(read_kineto([path]))


def _execution_trace(path: Path) -> None:
    _trace(read_chakra([path]))


def _ccltwin_trace(path: Path) -> None:
    _trace(load_trace(path))


def _topology_yaml(path: Path) -> None:
    cluster = load_cluster(path)
    assert 0 < len(cluster.gpus()) <= 131_072


def _machine(path: Path) -> None:
    import_spec(path, gpu_model="h100", nic_gbps=400)


def _plan(path: Path) -> None:
    plan = load_plan(path)
    assert all(math.isfinite(e.best.time_us) and e.best.time_us > 0 for e in plan.entries)


def _records(path: Path) -> None:
    points = read_points([path])
    assert points and all(math.isfinite(p.time_us) and p.time_us > 0 for p in points)


def _profile(path: Path) -> None:
    load_profile(path)


def _store(path: Path) -> None:
    with Store(path, create=False) as store:
        store.history()
        store.bests()
        assert store.integrity_check() == "ok"


def _seeds(tmp: Path) -> dict[str, tuple[bytes, str, object]]:
    """Per input kind: (the real file's bytes, the file name to write mutants under, the reader)."""
    trace = tmp / "job.json"
    save_trace(read_flight_recorder(sorted(FR.glob("*.json"))), trace)
    plan = tmp / "plan.json"
    from twin.rank import rank_trace

    ranking = rank_trace(load_trace(trace), load_cluster("l40s-pcie"))
    from tuner.plan import save_plan

    save_plan(ranking.plan, plan)
    store = tmp / "seed.db"
    with Store(store) as db:
        db.add_unseen(read_nccl_tests_measurements(
            DATA / "nccl-tests" / "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt", hardware="l40s"))
    db_bytes = store.read_bytes()
    with Store(store, create=False) as db:
        records = json.dumps([m.to_dict() for m in db.history()], indent=1).encode()
    profile = tmp / "profile.json"
    save_profile(DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.81}), profile,
                 meta=ProfileMeta(points=25, moved=("link.nvlink.efficiency",)))
    return {
        "nccl-tests text": ((DATA / "nccl-tests" / "abci-intra_anode-8gpu-1node-allreduce.txt").read_bytes(),
                            "log.txt", _nccl_tests),
        "nccl-tests JSON": ((DATA / "traces" / "nccl-tests-all_gather-2x4-synthetic.json").read_bytes(),
                            "log.json", _nccl_tests),
        "flight recorder": ((FR / "nccl_trace_rank_0.json").read_bytes(), "nccl_trace_rank_0.json",
                            _flight_recorder),
        "kineto (gzip)": ((DATA / "traces" / "capture-h200" / "ddp-iteration-rank0.kineto.json.gz").read_bytes(),
                          "rank0.json.gz", _kineto),
        "execution trace (gzip)": ((DATA / "traces" / "param" / "resnet_2gpu_et.json.gz").read_bytes(), "et.json.gz",
                                   _execution_trace),
        "ccltwin trace": (trace.read_bytes(), "job.json", _ccltwin_trace),
        "topology YAML": ((PRESET_DIR / "dgx-h100.yaml").read_bytes(), "c.yaml", _topology_yaml),
        "nvidia-smi topo -m": ((DATA / "topology" / "nvidia-smi" / "sglang-30401-h100.txt").read_bytes(),
                               "smi.txt", _machine),
        "NCCL topology XML": ((DATA / "topology" / "nccl-xml" / "azure-ndv5-topo.xml").read_bytes(), "topo.xml",
                              _machine),
        "warm-start plan": (plan.read_bytes(), "plan.json", _plan),
        "tuning store": (db_bytes, "t.db", _store),
        "measurement records": (records, "records.json", _records),
        "calibration profile": (profile.read_bytes(), "profile.json", _profile),
    }


# ---- mutations ----------------------------------------------------------------------------

_VALUES = [float("nan"), float("inf"), -float("inf"), -1, 0, -1e300, 1e300, 2 ** 63, 2 ** 64, "x", None, True, [], {},
           "\udcff", 10 ** 400]


def _json_edit(data: bytes, rnd: random.Random) -> bytes:
    """Change one value deep in a JSON document: a wrong type, an extreme number, a key removed."""
    opened = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    doc = json.loads(opened)
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            nodes.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            nodes.append(node)
            for value in node:
                walk(value)

    walk(doc)
    target = rnd.choice(nodes)
    if target:
        key = rnd.choice(list(target)) if isinstance(target, dict) else rnd.randrange(len(target))
        if rnd.random() < 0.25:
            del target[key]
        else:
            target[key] = rnd.choice(_VALUES[:-2])
    text = json.dumps(doc, allow_nan=True).encode()
    return gzip.compress(text) if opened is not data else text


def _mutate(data: bytes, how: str, rnd: random.Random) -> bytes:
    if how == "truncate":
        return data[: rnd.randrange(len(data))]
    if how == "byte flips":
        out = bytearray(data)
        for _ in range(rnd.randint(1, 8)):
            out[rnd.randrange(len(out))] = rnd.randrange(256)
        return bytes(out)
    if how == "json edit":
        try:
            return _json_edit(data, rnd)
        except (ValueError, OSError, EOFError):  # not JSON (a table, YAML, SQLite): edit a number instead
            how = "numbers"
    if how == "numbers":
        text = data.decode("latin-1")
        spots = [i for i, c in enumerate(text) if c.isdigit()]
        if not spots:
            return data
        i = rnd.choice(spots)
        return (text[:i] + rnd.choice(["nan", "inf", "-1", "1e999", "-0", "99999999999999999999", "0"])
                + text[i + 1:]).encode("latin-1")
    if how == "duplicate key":
        lines = data.split(b"\n")
        i = rnd.randrange(len(lines))
        return b"\n".join([*lines[: i + 1], lines[i], *lines[i + 1:]])
    if how == "deep nesting":
        depth = rnd.choice([100, 1000, 5000])
        return rnd.choice([b"[" * depth + b"]" * depth, b"{\"a\":" * depth + b"1" + b"}" * depth,
                           b"a:\n" + b"".join(b" " * i + b"- \n" for i in range(1, depth)),
                           b"<system>" + b"<cpu>" * depth + b"</cpu>" * depth + b"</system>"])
    if how == "bad encoding":
        return rnd.choice([data.decode("latin-1").encode("utf-16"), data.replace(b"e", b"\xe9", 3),
                           b"\x00" * 64 + data, data.decode("latin-1").encode("utf-32")])
    if how == "corrupt gzip":
        packed = data if data[:2] == b"\x1f\x8b" else gzip.compress(data)
        cut = bytearray(packed[: max(10, len(packed) - rnd.randrange(1, 64))])
        cut[rnd.randrange(10, len(cut))] ^= 0xFF
        return bytes(cut)
    if how == "empty":
        return b""
    raise AssertionError(how)


MUTATIONS = ["truncate", "byte flips", "json edit", "numbers", "duplicate key", "deep nesting", "bad encoding",
             "corrupt gzip", "empty"]


def _alarm(signum, frame):
    raise Hang


@contextlib.contextmanager
def bounded(seconds: int):
    """Raise ``Hang`` inside the block once it has run ``seconds``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(kind: str, seed: tuple, how: str, rnd: random.Random, folder: Path) -> tuple[str, str]:
    """(outcome, detail): ``ok``, ``clear`` error, ``traceback``, ``hang``, or ``silent`` (accepted
    but not sane)."""
    data, name, reader = seed
    path = folder / (name + ".gz" if how == "corrupt gzip" and not name.endswith(".gz") and kind != "tuning store"
                     else name)
    path.write_bytes(_mutate(data, how, rnd))
    try:
        with bounded(CASE_SECONDS):
            reader(path)
        return "ok", ""
    except CcltwinError as err:
        message = str(err)
        if "\n" in message or not message:
            return "traceback", f"multi-line error: {message!r}"
        return "clear", message
    except AssertionError as err:
        return "silent", f"{how}: {err!r}"[:300]
    except Hang:
        return "hang", how
    except Exception:
        return "traceback", f"{how}: {traceback.format_exc(limit=-3)}"
    finally:
        for leftover in folder.iterdir():
            leftover.unlink()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return _seeds(tmp_path_factory.mktemp("seeds"))


KINDS = ["nccl-tests text", "nccl-tests JSON", "flight recorder", "kineto (gzip)", "execution trace (gzip)",
         "ccltwin trace", "topology YAML",
         "nvidia-smi topo -m", "NCCL topology XML", "warm-start plan", "tuning store", "measurement records",
         "calibration profile"]


def test_every_seed_reads_clean(seeds):
    assert sorted(seeds) == sorted(KINDS)
    with tempfile.TemporaryDirectory() as folder:
        for kind in KINDS:
            data, name, reader = seeds[kind]
            path = Path(folder) / name
            path.write_bytes(data)
            reader(path)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=st.sampled_from(MUTATIONS), seed=st.integers(0, 2 ** 32))
def test_a_damaged_input_is_a_sane_result_or_one_clear_line(seeds, tmp_path, kind, how, seed):
    folder = tmp_path / "case"
    folder.mkdir(exist_ok=True)
    outcome, detail = run_case(kind, seeds[kind], how, random.Random(seed), folder)
    assert outcome in ("ok", "clear"), detail


def outcome_table(labels: list[str], run, columns: list[tuple[str, str]], cases_per_cell: int,
                  seed: int = 0) -> str:
    """A markdown table of ``run(label, how, rnd, folder) -> (outcome, detail)`` over every label and
    mutation (``cases_per_cell`` times each): one row per label, a column per ``(header, outcome)``;
    what is neither ``ok`` nor ``clear`` is listed below it."""
    rnd = random.Random(seed)
    rows, details = [], []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "case"
        folder.mkdir()
        for label in labels:
            counts: Counter[str] = Counter()
            for how in MUTATIONS:
                for _ in range(cases_per_cell):
                    outcome, detail = run(label, how, rnd, folder)
                    counts[outcome] += 1
                    if outcome not in ("ok", "clear"):
                        details.append(f"{label} / {outcome}: {detail}")
            rows.append(f"| {label} | {sum(counts.values())} | " + " | ".join(str(counts[o]) for _, o in columns[1:])
                        + " |")
    head = [f"| {columns[0][0]} | cases | " + " | ".join(h for h, _ in columns[1:]) + " |",
            "|---" * (len(columns) + 1) + "|"]
    return "\n".join([*head, *rows, "", f"({time.monotonic() - began:.0f} s)", *details])


def table(cases_per_cell: int = 6, seed: int = 0) -> str:
    """The markdown table of outcomes per input kind (every mutation ``cases_per_cell`` times)."""
    with tempfile.TemporaryDirectory() as tmp:
        seeds = _seeds(Path(tmp))
        return outcome_table(KINDS, lambda kind, how, rnd, folder: run_case(kind, seeds[kind], how, rnd, folder),
                             [("input kind", ""), *OUTCOMES], cases_per_cell, seed)


OUTCOMES = [("clear errors", "clear"), ("sane results", "ok"), ("tracebacks", "traceback"), ("hangs", "hang"),
            ("silent acceptances", "silent")]


if __name__ == "__main__":
    import sys

    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 6))
