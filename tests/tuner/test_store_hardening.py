"""The store under concurrent importers, damage, old and new schemas, and read-only files."""

import multiprocessing
import shutil
import sqlite3
import subprocess
import time

import pytest
from typer.testing import CliRunner

from ccltwin import app
from tests.mounts import tmpfs
from tests.testdata import DATA
from tuner.config import Algo, Config, Proto, Transport
from tuner.measurement import Measurement, read_nccl_tests_measurements
from tuner.store import SCHEMA_VERSION, Store, StoreError, _import_key

runner = CliRunner()
LOGS = [DATA / "nccl-tests" / f"stanford-farmshare-l40s-pcie-2gpu-allreduce-{name}.txt"
        for name in ("auto_simple", "auto_ll", "ring")]
MEASUREMENTS = [read_nccl_tests_measurements(log, hardware="l40s") for log in LOGS]
IMPORTERS = [[0, 1], [1, 2], [2, 0], [0, 1, 2]]  # overlapping: every log imported by 3 of 4 processes


def _import(path, logs, start):
    start.wait()
    with Store(path) as store:
        store.add_unseen([m for i in logs for m in MEASUREMENTS[i]])


def _read(path, start, stop, verdicts):
    start.wait()
    while not stop.is_set():
        try:
            with Store(path) as store:
                verdicts.put((store.count(), store.integrity_check()))
        except StoreError as err:  # a missing file before the first writer: not a failure of the store
            verdicts.put((0, str(err)))


def test_concurrent_importers_of_overlapping_logs_add_each_row_once(tmp_path):
    """4 processes import overlapping logs into one new store while a 5th reads, 50 rounds: the
    store has exactly the distinct rows, sound, every round; a reader never sees more."""
    context = multiprocessing.get_context("fork")
    expected = len({_import_key(m) for ms in MEASUREMENTS for m in ms})
    assert expected == sum(map(len, MEASUREMENTS)) > 50
    began = time.monotonic()
    for round_ in range(50):
        path = tmp_path / f"r{round_}.db"
        Store(path).close()
        start, stop, verdicts = context.Barrier(len(IMPORTERS) + 1), context.Event(), context.Queue()
        reader = context.Process(target=_read, args=(path, start, stop, verdicts))
        reader.start()
        importers = [context.Process(target=_import, args=(path, logs, start)) for logs in IMPORTERS]
        for p in importers:
            p.start()
        for p in importers:
            p.join(30)
            assert p.exitcode == 0, f"round {round_}: an importer failed"
        stop.set()
        seen = []
        while reader.is_alive() or not verdicts.empty():
            try:
                seen.append(verdicts.get(timeout=0.2))
            except Exception:  # queue.Empty once the reader has gone
                reader.join(0.1)
        assert seen and all(verdict == "ok" and 0 <= count <= expected for count, verdict in seen), round_
        with Store(path) as store:
            assert store.count() == expected, f"round {round_}: {store.count()} rows, expected {expected}"
            assert store.integrity_check() == "ok"
            assert len({_import_key(m) for m in store.history()}) == expected
    assert time.monotonic() - began < 60


def test_the_database_itself_refuses_an_imported_row_twice(tmp_path):
    path = tmp_path / "t.db"
    with Store(path) as store:
        assert len(store.add_unseen(MEASUREMENTS[0])) == 25
    raw = sqlite3.connect(path)
    row = raw.execute("SELECT * FROM history LIMIT 1").fetchone()
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        raw.execute(f"INSERT INTO history VALUES (NULL, {', '.join('?' * (len(row) - 1))})", row[1:])
    raw.close()


def _version_1_store(path, rows):
    """A store as ccltwin's schema 1 wrote it, with ``rows`` (duplicates included)."""
    Store(path).close()
    raw = sqlite3.connect(path)
    raw.execute("DROP INDEX history_import_key")
    raw.execute("ALTER TABLE history DROP COLUMN import_key")
    raw.execute("UPDATE schema_version SET version = 1")
    raw.commit()
    raw.close()
    columns = ("hardware, op, nbytes, nranks, dtype, task_group, comm, algo, proto, transport, nchannels, nthreads, "
               "chunk_bytes, time_us, source, nccl_version, interference, env, occurrence, measured_at, recorded_at")
    raw = sqlite3.connect(path)
    from tuner.store import _row
    for m in rows:
        raw.execute(f"INSERT INTO history ({columns}) VALUES ({', '.join('?' * 21)})", (*_row(m), 1.0))
    raw.commit()
    raw.close()


def test_a_version_1_store_is_migrated_and_a_log_already_there_adds_nothing(tmp_path):
    path = tmp_path / "old.db"
    _version_1_store(path, MEASUREMENTS[0] + MEASUREMENTS[0][:3])  # three rows the old race duplicated
    with Store(path) as store:
        assert store.version == SCHEMA_VERSION and store.count() == 28
        assert store.add_unseen(MEASUREMENTS[0] + MEASUREMENTS[1]) == MEASUREMENTS[1]
        assert store.count() == 53 and store.integrity_check() == "ok"
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)
    assert raw.execute("SELECT count(DISTINCT import_key), count(import_key) FROM history").fetchone() == (50, 50)
    raw.close()


@pytest.fixture
def mount_point(tmp_path):
    """A tiny tmpfs of our own (skipped where mounting is not allowed)."""
    with tmpfs(tmp_path / "mnt", "256k") as point:
        yield point


def test_a_store_on_a_read_only_file_system_reads_and_refuses_writes(tmp_path, mount_point):
    path = mount_point / "t.db"
    old = mount_point / "old.db"
    with Store(path) as store:
        store.add_unseen(MEASUREMENTS[0])
    _version_1_store(old, MEASUREMENTS[1])
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
    result = runner.invoke(app, ["store", "show", str(path), "--history"])
    assert result.exit_code == 0, result.output
    assert "25 measurements in all" in result.output
    result = runner.invoke(app, ["store", "show", str(old), "--history"])  # schema 1, read as it is
    assert result.exit_code == 0 and "25 measurements in all" in result.output, result.output
    result = runner.invoke(app, ["store", "import", str(path), str(LOGS[1])])
    assert result.exit_code == 2 and f"{path}: the store cannot be written" in result.output
    assert "read-only" in result.output and "Traceback" not in result.output


def _damaged(tmp_path, name, damage):
    path = tmp_path / name
    m = MEASUREMENTS[0][0]
    winner = Measurement(task=m.task, config=Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 8, 256, 131072),
                         time_us=m.time_us, source="live", hardware="l40s")
    with Store(path) as store:
        store.add_unseen(MEASUREMENTS[0])
        store.add(winner)  # history row 26, the one winner
    damage(path)
    return path


def _sql(statement):
    def damage(path):
        raw = sqlite3.connect(path)
        raw.execute(statement)
        raw.commit()
        raw.close()
    return damage


def _corrupt_pages(path):
    data = bytearray(path.read_bytes())
    page = 4096
    data[page:len(data)] = bytes(b ^ 0x5A for b in data[page:])  # every page after the header's
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, damage, problem", [
    ("pages.db", _corrupt_pages, "the store is damaged"),
    ("dropped.db", _sql("DROP TABLE best"), "table best is missing"),
    ("op.db", _sql("UPDATE history SET op = 'teleport' WHERE id = 26"), "history row 26 cannot be read"),
    ("newer.db", _sql("UPDATE schema_version SET version = 99"), "written by a newer ccltwin"),
])
def test_a_damaged_store_is_one_line_naming_it_and_how_to_recover(tmp_path, name, damage, problem):
    path = _damaged(tmp_path, name, damage)
    for command in (["store", "show", str(path), "--history"], ["store", "export", str(path), "--csv",
                    str(tmp_path / "x.csv")], ["store", "import", str(path), str(LOGS[1]), "--hardware", "l40s"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and problem in lines[0], lines
        assert "upgrade ccltwin" in lines[0] if name == "newer.db" else "integrity_check" in lines[0]
    assert not (tmp_path / "x.csv").exists()


def test_show_on_an_empty_file_writes_nothing_and_a_failed_import_leaves_no_store(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for command in ("show", "export"):
        result = runner.invoke(app, ["store", command, str(empty), "--csv", str(tmp_path / "x.csv")][:3 if
                                     command == "show" else 5])
        assert result.exit_code == 2 and f"{empty}: an empty (0-byte) file" in result.output, result.output
        assert empty.stat().st_size == 0 and not list(tmp_path.glob("empty.db-*"))
    bad = tmp_path / "bad.log"
    shutil.copy(LOGS[0], bad)
    new = tmp_path / "new.db"
    result = runner.invoke(app, ["store", "import", str(new), str(LOGS[0]), str(tmp_path / "missing.log")])
    assert result.exit_code == 2 and not new.exists()

    class Failing(Exception):
        pass

    with pytest.raises(Failing), Store(new) as store:
        raise Failing
    assert not list(tmp_path.glob("new.db*"))
    with Store(new) as store:  # a store with rows stays
        store.add_unseen(MEASUREMENTS[0])
    with pytest.raises(Failing), Store(new):
        raise Failing
    assert new.exists()


def test_a_size_beyond_64_bits_is_refused_naming_the_store(tmp_path):
    from dataclasses import replace
    m = MEASUREMENTS[0][0]
    huge = replace(m, task=replace(m.task, nbytes=2 ** 63))
    with Store(tmp_path / "t.db") as store:
        with pytest.raises(StoreError, match="does not fit a 64-bit integer"):
            store.add_unseen([huge])
        assert store.count() == 0


def test_large_stores_get_the_quick_check_and_full_check_forces_the_full_one(tmp_path, monkeypatch):
    import tuner.store as store_module

    path = tmp_path / "t.db"
    with Store(path) as store:
        store.add_unseen(MEASUREMENTS[0])
    ran = []
    connect = Store._connect

    def traced(self):
        db = connect(self)
        db.set_trace_callback(lambda sql: ran.append(sql) if sql.startswith("PRAGMA") and "check" in sql else None)
        return db

    monkeypatch.setattr(Store, "_connect", traced)
    Store(path, create=False).close()
    assert ran == ["PRAGMA integrity_check(1)"]  # small: the full check
    monkeypatch.setattr(store_module, "FULL_CHECK_BYTES", path.stat().st_size - 1)
    ran.clear()
    Store(path, create=False).close()
    assert ran == ["PRAGMA quick_check(1)"]
    ran.clear()
    result = runner.invoke(app, ["store", "show", str(path), "--full-check"])
    assert result.exit_code == 0 and ran == ["PRAGMA integrity_check(1)"], result.output
    _corrupt_pages(path)  # the quick check still finds damaged pages
    result = runner.invoke(app, ["store", "show", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and f"{path}: the store is damaged" in lines[0], result.output
