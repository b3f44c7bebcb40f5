"""The SQLite tuning store: WAL, killed writers, concurrent readers, and the exports it feeds."""

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccltwin import app
from tests.example_plugin import plugin_choose, plugin_load
from tests.testdata import DATA as TEST_DATA
from tests.testdata import ROOT
from traces.task import Op, Task
from tuner.config import Algo, Config, Proto, Transport
from tuner.export import MAX_BYTES, TUNER_CSV_HEADER, settings_from_winners, tuner_rules, write_env, write_tuner_csv
from tuner.measurement import Measurement, read_nccl_tests_measurements
from tuner.process_knobs import ProcessSettings
from tuner.store import SCHEMA_VERSION, Store, StoreError

DATA = TEST_DATA / "nccl-tests"
runner = CliRunner()


def live(op=Op.ALLREDUCE, nbytes=1 << 20, time_us=100.0, *, nranks=16, group="8x2", comm="", algo=Algo.RING,
         proto=Proto.SIMPLE, transport=Transport.P2P, nchannels=8, nthreads=256, chunk=131072, source="live",
         hardware="h100-a"):
    return Measurement(task=Task(op, nbytes, nranks, group=group),
                       config=Config(algo, proto, transport, nchannels, nthreads, chunk), time_us=time_us,
                       source=source, hardware=hardware, nccl_version="2.28.9", comm=comm)


# ---- the store -----------------------------------------------------------------------------


def test_a_new_store_is_in_wal_mode_with_full_sync(tmp_path):
    """WAL is a property of the file (another connection sees it); synchronous=FULL on ours."""
    path = tmp_path / "t.db"
    with Store(path) as store:
        assert store.journal_mode == "wal"
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()


def test_best_keeps_the_fastest_measured_config_per_task_and_communicator(tmp_path):
    with Store(tmp_path / "t.db") as store:
        store.add(live(time_us=100.0, nchannels=8))
        store.add(live(time_us=120.0, nchannels=4))           # slower: not a winner
        store.add(live(time_us=90.0, nchannels=16, comm="dp"))  # another communicator
        store.add(live(time_us=10.0, nchannels=2, source="twin"))  # a prediction never wins
        store.add(Measurement(task=Task(Op.ALLREDUCE, 1 << 20, 16, group="8x2"), config=None, time_us=5.0,
                              source="nccl-tests", hardware="h100-a"))  # NCCL's unrecorded choice never wins
        task = Task(Op.ALLREDUCE, 1 << 20, 16, group="8x2")
        assert store.best(task, hardware="h100-a").config.nchannels == 8
        assert store.best(task, hardware="h100-a", comm="dp").config.nchannels == 16
        store.add(live(time_us=80.0, nchannels=12))
        assert store.best(task, hardware="h100-a").config.nchannels == 12
        assert store.best(task, hardware="other") is None
        assert len(store.history(task)) == 6
        assert [m.time_us for m in store.bests()] == [80.0, 90.0]


def test_history_gives_back_every_field(tmp_path):
    m = Measurement(task=Task(Op.ALLGATHER, 3 << 30, 8, dtype="bfloat16", group="8x1"),
                    config=Config(Algo.NVLS, Proto.SIMPLE, Transport.P2P, 16, 640, 131072), time_us=812.5,
                    source="live", hardware="h100-a", nccl_version="2.28.9", interference=0.3,
                    env={"NCCL_NTHREADS": "512"}, comm="tp0", occurrence=7, timestamp=1_700_000_000.25)
    with Store(tmp_path / "t.db") as store:
        store.add(m)
        assert store.history() == [m]
        assert store.history(hardware="nope") == []


def test_add_many_is_all_or_nothing(tmp_path):
    def batch():
        yield live(nbytes=1)
        yield live(nbytes=2)
        raise RuntimeError("the measuring loop failed")

    with Store(tmp_path / "t.db") as store:
        store.add(live())
        with pytest.raises(RuntimeError):
            store.add_many(batch())
        assert store.count() == 1
        assert store.add_many([live(nbytes=1), live(nbytes=2)]) == [2, 3]


def test_a_reader_is_not_blocked_by_an_open_write_transaction(tmp_path):
    path = tmp_path / "t.db"
    with Store(path) as store:
        store.add(live())
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM best")
    started = time.monotonic()
    with Store(path, create=False) as reader:
        assert reader.count() == 1 and len(reader.bests()) == 1  # the committed state
    assert time.monotonic() - started < 1.0
    writer.execute("ROLLBACK")
    writer.close()


WRITER = textwrap.dedent("""
    import sys
    from traces.task import Op, Task
    from tuner.config import Algo, Config, Proto, Transport
    from tuner.measurement import Measurement
    from tuner.store import Store

    store = Store(sys.argv[1])
    batch = int(sys.argv[2])
    n = 0
    while True:
        rows = [Measurement(task=Task(Op.ALLREDUCE, 1 << ((n + i) % 24), 8), time_us=1.0 + (n + i) % 97,
                            config=Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 1 + (n + i) % 32, 256, 65536),
                            source="live", hardware="h", occurrence=n + i) for i in range(batch)]
        ids = store.add_many(rows)
        print(ids[0], ids[-1], n, flush=True)  # acknowledged: committed
        n += batch
""")


@pytest.mark.parametrize("batch", [1, 40])
def test_a_killed_writer_loses_no_acknowledged_row(tmp_path, batch):
    """SIGKILL a writer mid-stream while a reader reads; every acknowledged row survives, no
    transaction is half there, the file passes integrity_check and best matches history."""
    path = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(batch)], stdout=subprocess.PIPE,
                              env=env, text=True)
    acked, reader = [], None
    try:
        while len(acked) < 25:
            line = writer.stdout.readline()
            assert line, "the writer died on its own"
            acked.append(tuple(map(int, line.split())))
            if len(acked) == 5:
                reader = Store(path, create=False)
            if len(acked) > 5:
                assert reader.count() >= acked[-1][1]  # a concurrent reader sees committed rows
        time.sleep(0.01 * (len(acked) % 3))  # land the kill at different points of a transaction
        os.kill(writer.pid, signal.SIGKILL)
        acked += [tuple(map(int, line.split())) for line in writer.stdout.read().splitlines()]
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
        if reader is not None:
            reader.close()
    with Store(path, create=False) as store:
        assert store.integrity_check() == "ok"
        assert store.journal_mode == "wal"
        history = store.history()
        assert len(history) % batch == 0  # whole transactions only
        assert len(history) >= acked[-1][1]
        by_occurrence = {m.occurrence: m for m in history}
        for _, _, first in acked:
            for occurrence in range(first, first + batch):
                m = by_occurrence[occurrence]
                assert m.task.nbytes == 1 << (occurrence % 24) and m.time_us == 1.0 + occurrence % 97
        fastest = {}
        for m in history:
            if m.task not in fastest or m.time_us < fastest[m.task]:
                fastest[m.task] = m.time_us
        assert {m.task: m.time_us for m in store.bests()} == fastest


def run_sql(path, statement: str) -> None:
    """One committed statement on an SQLite file, outside ``Store``."""
    db = sqlite3.connect(path)
    db.execute(statement)
    db.commit()
    db.close()


def test_opening_something_that_is_not_a_store_names_the_file(tmp_path):
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "missing.db", create=False)
    text = tmp_path / "notes.db"
    text.write_text("not sqlite at all, just some text that is long enough to look like a header" * 20)
    with pytest.raises(StoreError, match=f"{text}: not a ccltwin store"):
        Store(text)
    other = tmp_path / "other.db"
    run_sql(other, "CREATE TABLE people (name TEXT)")
    with pytest.raises(StoreError, match="not a ccltwin store"):
        Store(other)
    newer = tmp_path / "newer.db"
    Store(newer).close()
    run_sql(newer, "UPDATE schema_version SET version = 99")
    with pytest.raises(StoreError, match="schema version 99"):
        Store(newer)


def test_nccl_tests_logs_load_as_measurements_of_nccls_default():
    log = DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-ring.txt"
    ms = read_nccl_tests_measurements(log, hardware="farmshare-l40s")
    assert len(ms) == 25
    assert all(m.config is None and m.source == "nccl-tests" and m.env == {"NCCL_ALGO": "ring"} for m in ms)
    assert ms[0].task == Task(Op.ALLREDUCE, 8, 2, dtype="float") and ms[0].nccl_version == "2.29.2"
    # a busbw-only table: the time comes back from busbw = size / time × 2(n-1)/n
    azure = read_nccl_tests_measurements(DATA / "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary.txt")
    assert azure[-1].task.nbytes == 8 << 30
    assert azure[-1].task.busbw_gbps(azure[-1].time_us) == pytest.approx(478.87, rel=1e-6)
    assert azure[-1].hardware.startswith("Azure ND H100 v5")


# ---- tuner plugin CSV: read back the way NCCL's example plugin reads it (tests/example_plugin.py) -----


def test_the_tuner_csv_reads_back_as_the_example_plugin_reads_it(tmp_path):
    winners = [
        live(Op.ALLREDUCE, 1 << 10, 20.0, algo=Algo.TREE, proto=Proto.LL, nchannels=2),
        live(Op.ALLREDUCE, 1 << 20, 40.0, algo=Algo.RING, proto=Proto.LL128, nchannels=8),
        live(Op.ALLREDUCE, 1 << 28, 900.0, algo=Algo.NVLS_TREE, proto=Proto.SIMPLE, nchannels=16),
        live(Op.ALLGATHER, 1 << 24, 300.0, nranks=8, group="8x1", algo=Algo.NVLS, nchannels=16),
        live(Op.ALLGATHER, 1 << 24, 310.0, nranks=8, group="tp", algo=Algo.RING, nchannels=4),
        live(Op.ALLTOALL, 1 << 24, 500.0),
        live(Op.REDUCESCATTER, 1 << 24, 250.0, nranks=8, group="8x1", comm="a", nchannels=6),
        live(Op.REDUCESCATTER, 1 << 24, 260.0, nranks=8, group="8x1", comm="b", nchannels=7),
    ]
    path = tmp_path / "nccl_tuner.conf"
    notes = write_tuner_csv(winners, path)
    text = path.read_text()
    assert f"# {TUNER_CSV_HEADER}\n" in text
    rules = plugin_load(text)
    assert len(rules) == 6
    assert plugin_choose(rules, "allreduce", 1 << 10, 2, 16) == ("tree", "ll", 2)
    assert plugin_choose(rules, "allreduce", 1 << 20, 2, 16) == ("ring", "ll128", 8)
    assert plugin_choose(rules, "allreduce", 1 << 28, 2, 16) == ("nvls_tree", "simple", 16)
    assert plugin_choose(rules, "allreduce", 0, 2, 16) == ("tree", "ll", 2)           # below the smallest
    assert plugin_choose(rules, "allreduce", 1 << 24, 2, 16) == ("ring", "ll128", 8)  # nearer 1 MiB than 256 MiB
    assert plugin_choose(rules, "allreduce", 1 << 25, 2, 16) == ("nvls_tree", "simple", 16)
    assert plugin_choose(rules, "allreduce", MAX_BYTES, 2, 16) == ("nvls_tree", "simple", 16)
    assert plugin_choose(rules, "allreduce", 1 << 20, 1, 16) == (None, None, 1)       # another shape
    assert plugin_choose(rules, "allgather", 1 << 24, 1, 8) == ("nvls", "simple", 16)
    assert plugin_choose(rules, "allgather", 1 << 24, 3, 8) == ("ring", "simple", 4)  # group "tp": any nodes
    assert plugin_choose(rules, "reducescatter", 1 << 24, 1, 8) == ("ring", "simple", 6)  # the faster comm
    assert any("point-to-point" in n for n in notes) and any("cannot tell" in n for n in notes)


@settings(deadline=None)
@given(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=12, unique=True))
def test_covering_rules_tile_every_size_and_keep_each_winner(sizes):
    winners = [live(nbytes=n, nchannels=1 + i) for i, n in enumerate(sizes)]
    rules, _ = tuner_rules(winners)
    assert rules[0].min_bytes == 0 and rules[-1].max_bytes == MAX_BYTES
    for before, after in itertools.pairwise(rules):
        assert after.min_bytes == before.max_bytes + 1
    for i, n in enumerate(sizes):
        (rule,) = [r for r in rules if r.min_bytes <= n <= r.max_bytes]
        assert rule.nchannels == 1 + i
    exact, _ = tuner_rules(winners, cover_all_sizes=False)
    assert sorted((r.min_bytes, r.max_bytes) for r in exact) == sorted((n, n) for n in sizes)


# ---- environment file --------------------------------------------------------------------------


def test_the_env_file_loads_in_bash(tmp_path):
    path = tmp_path / "nccl.env"
    settings = ProcessSettings(transport=Transport.NET, nthreads=256, ll128_buffsize=2457600)
    write_env(settings, path, extra={"NCCL_TUNER_CONFIG_FILE": "/tmp/my tuner.conf"})
    out = subprocess.run(["bash", "-c", f"set -a; . {path}; set +a; env"], capture_output=True, text=True,
                         check=True).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("NCCL_"))
    assert env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NTHREADS": "256",
                   "NCCL_LL128_BUFFSIZE": "2457600", "NCCL_TUNER_CONFIG_FILE": "/tmp/my tuner.conf"}


def test_per_process_settings_follow_the_winners_that_cost_the_most_time():
    winners = [
        live(nbytes=1 << 28, time_us=900.0, transport=Transport.SHM, nthreads=352, chunk=1 << 20),
        live(nbytes=1 << 20, time_us=40.0, transport=Transport.P2P, nthreads=640, proto=Proto.LL128,
             chunk=230400),
        live(nbytes=1 << 10, time_us=20.0, transport=Transport.P2P, nthreads=608, proto=Proto.LL, chunk=4864),
    ]
    settings = settings_from_winners(winners)
    assert settings.transport is Transport.SHM
    assert settings.nthreads == 352  # the 900 µs winner outvotes the 20 µs LL one
    assert settings.ll128_nthreads == 640
    assert settings.buffsize == 2 << 20  # Ring AllReduce Simple: chunk = BUFFSIZE / 8 × 4
    assert settings.ll128_buffsize == 1966080  # chunk = LL128_BUFFSIZE / 8 / 16 × 15
    assert settings.ll_buffsize == 4864 * 16


# ---- CLI -----------------------------------------------------------------------------------------


def test_store_cli_imports_shows_and_exports(tmp_path):
    db = tmp_path / "tuning.db"
    log = DATA / "stanford-farmshare-l40s-pcie-2gpu-allreduce-auto_simple.txt"
    result = runner.invoke(app, ["store", "import", str(db), str(log), "--hardware", "l40s"])
    assert result.exit_code == 0, result.output
    assert "added 25 measurements" in result.output
    with Store(db) as store:
        store.add(live(nbytes=1 << 20, nranks=2, group="2x1", hardware="l40s", time_us=200.0))
    result = runner.invoke(app, ["store", "show", str(db)])
    assert result.exit_code == 0, result.output
    assert "26 measurements in all; 1 winners" in result.output and "ring/simple/p2p nc=8" in result.output
    result = runner.invoke(app, ["store", "show", str(db), "--history", "--json"])
    assert len(json.loads(result.output)) == 26
    again = runner.invoke(app, ["store", "import", str(db), str(log), "--hardware", "l40s"])
    assert "added 0 measurements" in again.output and "skipped 25 already in the store" in again.output
    twice = runner.invoke(app, ["store", "import", str(tmp_path / "twice.db"), str(log), str(log)])
    assert "added 25 measurements from 2 log(s); skipped 25" in twice.output
    result = runner.invoke(app, ["store", "show", str(db), "--history"])
    assert "26 measurements in all; 26 measurements" in result.output
    assert "nccl-tests nccl default (NCCL_PROTO=simple)" in result.output  # the log's forced protocol
    csv, env = tmp_path / "nccl_tuner.conf", tmp_path / "nccl.env"
    result = runner.invoke(app, ["store", "export", str(db), "--csv", str(csv), "--env", str(env)])
    assert result.exit_code == 0, result.output
    assert plugin_choose(plugin_load(csv.read_text()), "allreduce", 1 << 20, 1, 2) == ("ring", "simple", 8)
    assert f"NCCL_TUNER_CONFIG_FILE={csv.resolve()}" in env.read_text()


def test_store_cli_fails_with_one_line_naming_the_file(tmp_path):
    result = runner.invoke(app, ["store", "show", str(tmp_path / "nope.db")])
    assert result.exit_code == 2 and "nope.db: no such store" in result.output
    result = runner.invoke(app, ["store", "show", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory, not a store file" in result.output
    result = runner.invoke(app, ["store", "import", str(tmp_path / "n.db"), str(tmp_path / "missing.log")])
    assert result.exit_code == 2 and "missing.log: cannot read the log (No such file or directory)" in result.output
    nccl_only = tmp_path / "n.db"
    assert runner.invoke(app, ["store", "import", str(nccl_only), str(DATA / "echo-azure-ndA100v4-allreduce-8gpu.txt"),
                               str(DATA / "echo-azure-ndA100v4-allreduce-16gpu.txt")]).exit_code == 0
    with Store(nccl_only) as store:
        assert store.hardware_ids() == ["Azure ND A100 v4 (ND96asr_v4)"]  # one id for the machine's logs
    result = runner.invoke(app, ["store", "export", str(nccl_only), "--csv", str(tmp_path / "n.conf")])
    assert result.exit_code == 2 and "no winners to export" in result.output and "ccltwin rank --csv" in result.output
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.add(live(hardware="a"))
        store.add(live(hardware="b"))
    result = runner.invoke(app, ["store", "export", str(db), "--csv", str(tmp_path / "x.conf")])
    assert result.exit_code == 2 and "give --hardware" in result.output and "'a', 'b'" in result.output
    assert not (tmp_path / "x.conf").exists()
    result = runner.invoke(app, ["store", "export", str(db), "--hardware", "a",
                                 "--csv", str(tmp_path / "no" / "x.conf"), "--env", str(tmp_path / "x.env")])
    assert result.exit_code == 2 and "folder" in result.output and "does not exist" in result.output
    assert not (tmp_path / "x.env").exists()  # nothing half-written
    synthetic = TEST_DATA / "traces" / "nccl-tests-all_gather-2x4-synthetic.json"
    result = runner.invoke(app, ["store", "import", str(db), str(synthetic)])
    assert result.exit_code == 2 and f"{synthetic}: the log has no '# HARDWARE:' line" in result.output
    result = runner.invoke(app, ["store", "import", str(db), str(synthetic), "--hardware", "dgx"])
    assert result.exit_code == 0 and "added" in result.output
